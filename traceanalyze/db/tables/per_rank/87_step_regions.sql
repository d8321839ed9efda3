-- Code regions of every step on the training-loop thread: how long the rank spends in each
-- user annotation (record_function) and each operator, how much of it is its own (not inside a
-- nested region of the same kind), and how much of it is idle (no op runs).
--
-- A region is a name: all its instances on the training-loop thread that start in the step.
-- Communication (c10d:: ops, record_param_comms, gloo:* / nccl:* ranges) is not a region (its
-- time is the collective's), but it counts as work when telling idle from busy time.
-- Idle time inside a region: no operator and no runtime call (kernel launch, copy, sync) open on
-- the thread, no collective of the rank in flight and no kernel running on its GPUs: a sleep,
-- blocking I/O, a lock, or Python work that records nothing.

CREATE OR REPLACE TEMP TABLE _region_events AS
WITH ev AS (
    SELECT a.rank, a.step, 'annotation' AS kind, a.name, a.ts_ns, a.end_ns, a.dur_ns,
           NOT (a.name LIKE 'gloo:%' OR a.name LIKE 'nccl:%') AS candidate
    FROM annotations AS a JOIN main_threads AS m ON m.rank = a.rank AND m.tid = a.tid
    WHERE NOT a.on_gpu AND a.step IS NOT NULL
    UNION ALL
    SELECT c.rank, c.step, 'op', c.name, c.ts_ns, c.end_ns, c.dur_ns,
           NOT (c.name LIKE 'c10d::%' OR c.name = 'record_param_comms' OR c.name LIKE 'gloo:%' OR c.name LIKE 'nccl:%')
    FROM cpu_ops AS c JOIN main_threads AS m ON m.rank = c.rank AND m.tid = c.tid
    WHERE c.step IS NOT NULL
),
numbered AS (
    SELECT row_number() OVER (ORDER BY rank, kind, ts_ns, end_ns DESC, name) AS eid, * FROM ev
),
ordered AS (
    SELECT *, max(end_ns) OVER (PARTITION BY rank, kind ORDER BY ts_ns, end_ns
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM numbered
)
-- island: the run of overlapping (or touching) regions of one kind it belongs to; a region
-- nested in another is always in its island, so the nesting join below looks only there
SELECT eid, rank, step, kind, name, ts_ns, end_ns, dur_ns, candidate,
       sum(CASE WHEN prev_end_ns IS NULL OR ts_ns > prev_end_ns THEN 1 ELSE 0 END)
           OVER (PARTITION BY rank, kind ORDER BY ts_ns, end_ns) AS island
FROM ordered;

-- what keeps the thread (or the rank's devices) busy, merged into disjoint intervals, each with
-- the busy time before it (before_ns): busy time up to t is then one lookup
CREATE OR REPLACE TEMP TABLE _region_busy AS
WITH work AS (
    SELECT c.rank, c.ts_ns, c.end_ns FROM cpu_ops AS c JOIN main_threads AS m ON m.rank = c.rank AND m.tid = c.tid
    UNION ALL
    SELECT r.rank, r.ts_ns, r.end_ns FROM runtime AS r JOIN main_threads AS m ON m.rank = r.rank AND m.tid = r.tid
    UNION ALL
    SELECT rank, ts_ns, end_ns FROM collectives
    UNION ALL
    SELECT rank, ts_ns, end_ns FROM gpu_busy_intervals WHERE class = 'any'
),
ordered AS (
    SELECT *, max(end_ns) OVER (PARTITION BY rank ORDER BY ts_ns, end_ns
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM work WHERE end_ns > ts_ns
),
islands AS (
    SELECT *, sum(CASE WHEN prev_end_ns IS NULL OR ts_ns > prev_end_ns THEN 1 ELSE 0 END)
                  OVER (PARTITION BY rank ORDER BY ts_ns, end_ns) AS run
    FROM ordered
)
SELECT rank, ts_ns, end_ns,
       coalesce(sum(end_ns - ts_ns) OVER (PARTITION BY rank ORDER BY ts_ns
                                          ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before_ns
FROM (SELECT rank, min(ts_ns) AS ts_ns, max(end_ns) AS end_ns FROM islands GROUP BY rank, run);

-- Per (rank, step, region): the rank's time inside each record_function range and host op of its training-loop thread, its own part and its idle part.
CREATE OR REPLACE TABLE step_regions AS
WITH nested AS (   -- regions of the same kind inside a candidate region (an identical span nests in the earlier row)
    SELECT p.eid, c.ts_ns, c.end_ns
    FROM _region_events AS p JOIN _region_events AS c
        ON c.rank = p.rank AND c.kind = p.kind AND c.island = p.island
           AND c.ts_ns >= p.ts_ns AND c.end_ns <= p.end_ns AND c.eid <> p.eid
    WHERE p.candidate AND (c.ts_ns > p.ts_ns OR c.end_ns < p.end_ns OR c.eid > p.eid)
),
nested_ordered AS (
    SELECT *, max(end_ns) OVER (PARTITION BY eid ORDER BY ts_ns, end_ns
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM nested
),
nested_union AS (  -- the union of the nested regions, per region instance
    SELECT eid, sum(end_ns - ts_ns) AS ns FROM (
        SELECT eid, min(ts_ns) AS ts_ns, max(end_ns) AS end_ns FROM (
            SELECT *, sum(CASE WHEN prev_end_ns IS NULL OR ts_ns > prev_end_ns THEN 1 ELSE 0 END)
                          OVER (PARTITION BY eid ORDER BY ts_ns, end_ns) AS run
            FROM nested_ordered)
        GROUP BY eid, run)
    GROUP BY eid
),
busy_to_start AS (  -- busy time before each annotation instance starts
    SELECT e.eid, e.rank, e.end_ns, coalesce(b.before_ns + least(e.ts_ns, b.end_ns) - b.ts_ns, 0) AS start_ns
    FROM _region_events AS e ASOF LEFT JOIN _region_busy AS b ON b.rank = e.rank AND e.ts_ns >= b.ts_ns
    WHERE e.candidate AND e.kind = 'annotation'
),
busy AS (          -- busy time inside each annotation instance (an op is busy for its whole span)
    SELECT e.eid, coalesce(b.before_ns + least(e.end_ns, b.end_ns) - b.ts_ns, 0) - e.start_ns AS ns
    FROM busy_to_start AS e ASOF LEFT JOIN _region_busy AS b ON b.rank = e.rank AND e.end_ns >= b.ts_ns
)
SELECT
    e.rank,                                 -- global rank
    e.step,                                 -- ProfilerStep N holding the instances' starts
    e.kind,                                 -- annotation (a record_function / user annotation range) | op (a host operator)
    e.name,                                 -- the annotation's or operator's name, e.g. 'data.fetch_batch', 'aten::mm'
    count(*) AS calls_count,                -- instances on the training-loop thread in the step
    sum(e.dur_ns) AS time_ns,               -- time inside the region: the instances' durations summed, ns
    sum(greatest(e.dur_ns - coalesce(n.ns, 0), 0)) AS self_ns,  -- the part not inside a nested region of the same kind (annotation in annotation, op in op), ns
    sum(CASE WHEN e.kind = 'annotation' THEN greatest(e.dur_ns - coalesce(b.ns, 0), 0) ELSE 0 END) AS idle_ns  -- the part where no op, runtime call, collective or kernel of the rank runs (always 0 for an op), ns
FROM _region_events AS e
LEFT JOIN nested_union AS n USING (eid)
LEFT JOIN busy AS b USING (eid)
WHERE e.candidate
GROUP BY e.rank, e.step, e.kind, e.name
ORDER BY e.rank, e.step, e.kind, e.name;

DROP TABLE _region_busy;
DROP TABLE _region_events;
