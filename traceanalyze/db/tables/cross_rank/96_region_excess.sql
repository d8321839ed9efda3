-- Where a rank's extra time goes: each code region (step_regions) against the same region on the other ranks of its group.
--
-- A rank is compared with the ranks of its group when that is known: the process group of the
-- collective where it is latest in the step (step_lateness), whose members are the ranks with a
-- collective of that group in the step; else with all other ranks. A rank without the region
-- counts 0. The other ranks' median leaves the rank itself out (median_of_others: from the rank's place
-- and the values at the middle places, so the cost grows as rows, not as ranks x ranks).

-- Per (rank, aligned step, region): the rank's time, own time and idle time inside the region against the other ranks' median (of its group when known).
CREATE OR REPLACE TABLE region_excess AS
WITH keys AS (      -- each aligned (rank, step) and the group it is compared with (NULL: all ranks)
    SELECT r.rank, a.step, l.process_group AS peer_group
    FROM ranks AS r CROSS JOIN aligned_steps AS a
    LEFT JOIN step_lateness AS l ON l.rank = r.rank AND l.step = a.step
),
used AS (SELECT DISTINCT step, peer_group FROM keys),
members AS (
    SELECT u.step, u.peer_group, m.rank
    FROM used AS u JOIN (SELECT DISTINCT step, process_group, rank FROM collective_arrivals) AS m
        ON m.step = u.step AND m.process_group = u.peer_group
    UNION ALL
    SELECT u.step, u.peer_group, r.rank FROM used AS u CROSS JOIN ranks AS r WHERE u.peer_group IS NULL
),
sizes AS (          -- the groups with another member to compare with (alone: no row, so none is placed)
    SELECT step, peer_group, count(*) AS n FROM members GROUP BY step, peer_group HAVING count(*) >= 2
),
positioned AS (     -- per group and region: each member's values and their 1-based places among the members that have it, ascending
    SELECT m.step, m.peer_group, g.kind, g.name, m.rank, g.time_ns, g.self_ns, g.idle_ns,
           count(*) OVER w AS present,
           rank() OVER (w ORDER BY g.time_ns) AS time_place, row_number() OVER (w ORDER BY g.time_ns) AS time_row,
           rank() OVER (w ORDER BY g.self_ns) AS self_place, row_number() OVER (w ORDER BY g.self_ns) AS self_row,
           rank() OVER (w ORDER BY g.idle_ns) AS idle_place, row_number() OVER (w ORDER BY g.idle_ns) AS idle_row
    FROM members AS m
    JOIN sizes AS z ON z.step = m.step AND z.peer_group IS NOT DISTINCT FROM m.peer_group
    JOIN step_regions AS g ON g.rank = m.rank AND g.step = m.step
    WINDOW w AS (PARTITION BY m.step, m.peer_group, g.kind, g.name)
),
middles AS (        -- the values at the places h, h + 1, h + 2 (h = n // 2; members without the region are zeros placed first): all a median without one member needs
    SELECT p.step, p.peer_group, p.kind, p.name, z.n, z.n - p.present AS zeros,
           max(p.time_ns) FILTER (WHERE p.time_row = z.n // 2 - (z.n - p.present)) AS time_1,
           max(p.time_ns) FILTER (WHERE p.time_row = z.n // 2 + 1 - (z.n - p.present)) AS time_2,
           max(p.time_ns) FILTER (WHERE p.time_row = z.n // 2 + 2 - (z.n - p.present)) AS time_3,
           max(p.self_ns) FILTER (WHERE p.self_row = z.n // 2 - (z.n - p.present)) AS self_1,
           max(p.self_ns) FILTER (WHERE p.self_row = z.n // 2 + 1 - (z.n - p.present)) AS self_2,
           max(p.self_ns) FILTER (WHERE p.self_row = z.n // 2 + 2 - (z.n - p.present)) AS self_3,
           max(p.idle_ns) FILTER (WHERE p.idle_row = z.n // 2 - (z.n - p.present)) AS idle_1,
           max(p.idle_ns) FILTER (WHERE p.idle_row = z.n // 2 + 1 - (z.n - p.present)) AS idle_2,
           max(p.idle_ns) FILTER (WHERE p.idle_row = z.n // 2 + 2 - (z.n - p.present)) AS idle_3
    FROM positioned AS p JOIN sizes AS z ON z.step = p.step AND z.peer_group IS NOT DISTINCT FROM p.peer_group
    GROUP BY p.step, p.peer_group, p.kind, p.name, z.n, p.present
),
compared AS (
    SELECT g.rank, g.step, g.kind, g.name, k.peer_group, d.n - 1 AS peers_count,
           g.time_ns, g.self_ns, g.idle_ns,
           median_of_others(d.n, d.zeros, d.zeros + p.time_place, d.time_1, d.time_2, d.time_3) AS others_time_ns,
           median_of_others(d.n, d.zeros, d.zeros + p.self_place, d.self_1, d.self_2, d.self_3) AS others_self_ns,
           median_of_others(d.n, d.zeros, d.zeros + p.idle_place, d.idle_1, d.idle_2, d.idle_3) AS others_idle_ns
    FROM step_regions AS g
    JOIN keys AS k ON k.rank = g.rank AND k.step = g.step
    JOIN positioned AS p ON p.rank = g.rank AND p.step = g.step AND p.peer_group IS NOT DISTINCT FROM k.peer_group
        AND p.kind = g.kind AND p.name = g.name
    JOIN middles AS d ON d.step = k.step AND d.peer_group IS NOT DISTINCT FROM k.peer_group
        AND d.kind = g.kind AND d.name = g.name
)
SELECT
    rank,                                   -- global rank
    step,                                   -- aligned ProfilerStep N
    kind,                                   -- annotation | op (see step_regions)
    name,                                   -- the region's name
    coalesce('group ' || peer_group, 'all ranks') AS compared_with,  -- whom the rank is compared with: 'group <process group>' (of its latest collective in the step) or 'all ranks'
    peers_count,                            -- how many other ranks that is
    time_ns,                                -- the rank's time inside the region, ns
    self_ns,                                -- ...outside nested regions of the same kind, ns
    idle_ns,                                -- ...with nothing running (see step_regions), ns
    others_time_ns::BIGINT AS others_time_ns,  -- the other ranks' median time inside it (0 for a rank without it), ns
    others_self_ns::BIGINT AS others_self_ns,  -- their median self time, ns
    others_idle_ns::BIGINT AS others_idle_ns,  -- their median idle time, ns
    (time_ns - others_time_ns)::BIGINT AS excess_ns,            -- how much longer this rank is inside the region, ns
    (self_ns - others_self_ns)::BIGINT AS self_excess_ns,       -- ...counting its own part only, ns (picks the innermost region holding the excess)
    (idle_ns - others_idle_ns)::BIGINT AS idle_excess_ns        -- how much more idle time it has inside the region, ns
FROM compared
WHERE peers_count >= 1
ORDER BY step, rank, kind, name;
