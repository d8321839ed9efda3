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
WITH ops AS (
    SELECT c.rank, c.step, 'op' AS kind, c.name, count(*) AS calls_count, sum(c.dur_ns) AS time_ns,
           sum(c.self_ns) AS self_ns, 0::HUGEINT AS idle_ns
    FROM cpu_ops AS c JOIN main_threads AS m ON m.rank = c.rank AND m.tid = c.tid
    WHERE c.step IS NOT NULL
      AND NOT (c.name LIKE 'c10d::%' OR c.name = 'record_param_comms' OR c.name LIKE 'gloo:%' OR c.name LIKE 'nccl:%')
    GROUP BY ALL
),
ranges AS (
    SELECT a.rank, a.step, a.name, a.ts_ns, a.end_ns, a.dur_ns, a.self_ns
    FROM annotations AS a JOIN main_threads AS m ON m.rank = a.rank AND m.tid = a.tid
    WHERE NOT a.on_gpu AND a.step IS NOT NULL AND NOT (a.name LIKE 'gloo:%' OR a.name LIKE 'nccl:%')
),
busy AS (           -- busy time inside each range (an op is busy for its whole span): busy time up to its end less up to its start
    SELECT r.*, coalesce(e.before_ns + least(r.end_ns, e.end_ns) - e.ts_ns, 0)
                - coalesce(s.before_ns + least(r.ts_ns, s.end_ns) - s.ts_ns, 0) AS busy_ns
    FROM ranges AS r
    ASOF LEFT JOIN _region_busy AS s ON s.rank = r.rank AND r.ts_ns >= s.ts_ns
    ASOF LEFT JOIN _region_busy AS e ON e.rank = r.rank AND r.end_ns >= e.ts_ns
),
range_rows AS (
    SELECT rank, step, 'annotation' AS kind, name, count(*) AS calls_count, sum(dur_ns) AS time_ns,
           sum(self_ns) AS self_ns, sum(greatest(dur_ns - busy_ns, 0)) AS idle_ns
    FROM busy GROUP BY ALL
)
SELECT
    rank,                                   -- global rank
    step,                                   -- ProfilerStep N holding the instances' starts
    kind,                                   -- annotation (a record_function / user annotation range) | op (a host operator)
    name,                                   -- the annotation's or operator's name, e.g. 'data.fetch_batch', 'aten::mm'
    calls_count,                            -- instances on the training-loop thread in the step
    time_ns,                                -- time inside the region: the instances' durations summed, ns
    self_ns,                                -- the part not inside a nested region of the same kind (annotation in annotation, op in op: cpu_ops.self_ns, annotations.self_ns), ns
    idle_ns                                 -- the part where no op, runtime call, collective or kernel of the rank runs (always 0 for an op), ns
FROM (SELECT * FROM ops UNION ALL SELECT * FROM range_rows)
ORDER BY rank, step, kind, name;

DROP TABLE _region_busy;
