-- Flight Recorder: where each process group's collectives stopped (docs/flight-recorder.md).
--
-- A member's position in a group is the collective_seq_id of the last collective it issued there
-- (its entries, or pg_status's last enqueued, which counts those its ring buffer dropped). A
-- group whose members stand at different positions has a frontier: the first collective some
-- members reached and others did not. A member missing from it is `absent` when its own last
-- collective is finished (every member of that group reached it: it went elsewhere and never
-- came), `blocked` when it waits in another group's unfinished collective (a victim of a hang
-- there). Empty without dumps.

-- One row per process group of the Flight Recorder dumps whose members did not all reach the same collective, the first cause first.
CREATE OR REPLACE TABLE fr_frontiers AS
WITH members AS (
    SELECT g.pg_name, g.pg_desc, m.rank
    FROM (SELECT pg_name, pg_desc, unnest(members) AS rank FROM fr_groups) AS m
    JOIN fr_groups AS g USING (pg_name)
    WHERE m.rank IN (SELECT rank FROM fr_dumps)
),
seen AS (
    SELECT rank, pg_name, max(collective_seq_id) AS seq FROM fr_entries WHERE NOT is_p2p GROUP BY rank, pg_name
    UNION ALL
    SELECT rank, pg_name, last_enqueued_collective FROM fr_status WHERE pg_name IS NOT NULL
),
positions AS (
    SELECT m.pg_name, m.rank, coalesce(max(s.seq), 0) AS position
    FROM members AS m LEFT JOIN seen AS s ON s.rank = m.rank AND s.pg_name = m.pg_name
    GROUP BY m.pg_name, m.rank
),
open_groups AS (
    SELECT pg_name, min(position) + 1 AS seq FROM positions GROUP BY pg_name HAVING min(position) < max(position)
),
last_call AS (
    SELECT rank, max_by(pg_name, record_id) AS pg_name, max_by(collective_seq_id, record_id) AS seq
    FROM fr_entries WHERE NOT is_p2p GROUP BY rank
),
stuck AS (
    SELECT l.rank, l.pg_name FROM last_call AS l JOIN open_groups AS o ON o.pg_name = l.pg_name AND l.seq >= o.seq
),
at_frontier AS (
    SELECT o.pg_name, mode(e.op ORDER BY e.op) AS op,
           mode(e.frame_file || ':' || e.frame_line ORDER BY e.frame_file || ':' || e.frame_line) AS code_line,
           min(e.time_created_ns) AS first_created_ns
    FROM open_groups AS o
    JOIN fr_entries AS e ON e.pg_name = o.pg_name AND e.collective_seq_id = o.seq AND NOT e.is_p2p
    GROUP BY o.pg_name
),
frontiers AS (
    SELECT
        o.pg_name, any_value(g.pg_desc) AS pg_desc, o.seq, any_value(a.op) AS op, any_value(a.code_line) AS code_line,
        any_value(a.first_created_ns) AS first_created_ns,
        list(p.rank ORDER BY p.rank) FILTER (WHERE p.position >= o.seq) AS reached_ranks,
        list(p.rank ORDER BY p.rank) FILTER (WHERE p.position >= o.seq
                                             AND (p.rank, o.pg_name) IN (SELECT (rank, pg_name) FROM stuck)) AS waiting_ranks,
        list(p.rank ORDER BY p.rank) FILTER (WHERE p.position < o.seq) AS missing_ranks,
        list(p.rank ORDER BY p.rank) FILTER (WHERE p.position < o.seq
                                             AND p.rank NOT IN (SELECT rank FROM stuck)) AS absent_ranks,
        list(p.rank ORDER BY p.rank) FILTER (WHERE p.position < o.seq
                                             AND p.rank IN (SELECT rank FROM stuck)) AS blocked_ranks
    FROM open_groups AS o
    JOIN positions AS p USING (pg_name)
    JOIN fr_groups AS g USING (pg_name)
    LEFT JOIN at_frontier AS a USING (pg_name)
    GROUP BY o.pg_name, o.seq
)
SELECT
    pg_name,                                -- the process group (fr_groups)
    pg_desc,                                -- its description, NULL when none
    seq AS collective_seq_id,               -- the first collective of the group that not every member reached
    op,                                     -- what it is (the op most of the members that reached it recorded)
    code_line,                              -- where they called it: the user's frame, 'file:line'
    first_created_ns,                       -- when the first member issued it, ns since the epoch
    coalesce(reached_ranks, []) AS reached_ranks,   -- members that issued it
    coalesce(waiting_ranks, []) AS waiting_ranks,   -- members that issued it and issued nothing after it: stuck in it
    coalesce(missing_ranks, []) AS missing_ranks,   -- members that never issued it
    coalesce(absent_ranks, []) AS absent_ranks,     -- missing members whose own last collective is finished: they never arrived (the culprits)
    coalesce(blocked_ranks, []) AS blocked_ranks,   -- missing members stuck in another unfinished collective (victims of a hang there)
    len(coalesce(blocked_ranks, [])) = len(coalesce(missing_ranks, [])) AS downstream,  -- every missing member waits elsewhere: this group waits because of a hang in another
    row_number() OVER (ORDER BY len(coalesce(blocked_ranks, [])) = len(coalesce(missing_ranks, [])),
                       len(coalesce(blocked_ranks, [])) > 0, first_created_ns NULLS LAST,
                       length(pg_name), pg_name)::INTEGER AS cause_order  -- 1 = the first cause: a frontier whose missing members are absent, not waiting elsewhere, the earliest issued
FROM frontiers
ORDER BY cause_order;
