-- One row when one pipeline stage works much longer per step than the fastest stage: its ranks hold the pipeline back.
-- A stage's work is its step less the time blocked on other ranks (pipeline_wait, comm_exposed) and less the
-- idle time outside any range: compute, input, host work and idle time inside a record_function range (a sleep
-- the user's code does); the cause is the part that differs most.
WITH stages AS (   -- every rank of a pipeline and its stage (pipeline_stages: from who sends to whom)
    SELECT rank, stage FROM pipeline_stages
),
idle_in_ranges AS (   -- idle time inside a range of the training loop (the rest of the idle time is no one's work):
                      -- per idle interval its overlap with the range that covers most of it (a sleep's range
                      -- starts a little after the loop went idle and ends a little before it resumes)
    SELECT rank, step, sum(ns) AS ns
    FROM (
        SELECT p.rank, p.step, p.ts_ns, max(least(a.end_ns, p.end_ns) - greatest(a.ts_ns, p.ts_ns)) AS ns
        FROM phase_intervals AS p
        JOIN annotations AS a ON a.rank = p.rank AND a.step = p.step AND a.ts_ns < p.end_ns AND a.end_ns > p.ts_ns
        JOIN main_threads AS m ON m.rank = a.rank AND m.tid = a.tid
        WHERE p.idle AND NOT a.on_gpu
        GROUP BY p.rank, p.step, p.ts_ns
    )
    GROUP BY rank, step
),
per_rank AS (
    SELECT p.rank, any_value(s.stage) AS stage,
           avg(p.dur_ns - p.pipeline_wait_ns - p.comm_exposed_ns - p.idle_ns + coalesce(i.ns, 0)) AS work_ns,
           avg(p.forward_ns + p.backward_ns + p.optimizer_ns) AS compute_ns,
           avg(p.data_wait_ns + p.h2d_ns) AS input_ns,
           avg(p.other_ns - p.idle_ns + coalesce(i.ns, 0)) AS host_ns,
           avg(p.pipeline_wait_ns) AS wait_ns, avg(p.dur_ns) AS step_ns
    FROM step_phases AS p JOIN aligned_steps USING (step) JOIN stages AS s USING (rank)
    LEFT JOIN idle_in_ranges AS i USING (rank, step)
    GROUP BY p.rank
),
per_stage AS (     -- a stage works what its fastest rank works: one slow rank of a stage that several
                   -- pipelines replicate is a straggler (collective-straggler), not a slow stage
    SELECT stage, min(work_ns) AS work_ns, arg_min(compute_ns, [work_ns, rank]) AS compute_ns,
           arg_min(input_ns, [work_ns, rank]) AS input_ns, arg_min(host_ns, [work_ns, rank]) AS host_ns,
           median(wait_ns) AS wait_ns, list(rank ORDER BY rank) AS ranks
    FROM per_rank GROUP BY stage
),
others AS (       -- per stage, the median of each part over the other stages: the cause is the part where the
                  -- stage differs most from the rest (compute on shared cores varies; a sleep or a slow input does not)
    SELECT s.stage, s.compute_ns - median(o.compute_ns) AS compute_excess_ns,
           s.input_ns - median(o.input_ns) AS input_excess_ns, s.host_ns - median(o.host_ns) AS host_excess_ns
    FROM per_stage AS s JOIN per_stage AS o ON o.stage <> s.stage
    GROUP BY s.stage, s.compute_ns, s.input_ns, s.host_ns
),
ends AS (
    SELECT arg_max(stage, [work_ns, -stage::DOUBLE]) AS slow_by_work,
           arg_min(stage, [work_ns, stage::DOUBLE]) AS fast_stage, min(work_ns) AS fast_ns,
           (SELECT median(step_ns) FROM per_rank) AS step_ns,
           list({'stage': stage, 'ranks': ranks, 'work_ms': round(work_ns / 1e6, 3), 'compute_ms': round(compute_ns / 1e6, 3),
                 'pipeline_wait_ms': round(wait_ns / 1e6, 3)} ORDER BY stage) AS per_stage,
           count(*) AS n_stages
    FROM per_stage
),
own_time AS (     -- the stage whose input or host time (exact, not inflated by shared cores) exceeds the other
                  -- stages' most, when that excess is a clear share of the step: that stage holds the others back
    SELECT arg_max(o.stage, [greatest(o.input_excess_ns, o.host_excess_ns), -o.stage::DOUBLE]) AS stage
    FROM others AS o, ends AS e
    WHERE greatest(o.input_excess_ns, o.host_excess_ns) > o.compute_excess_ns
      AND 100.0 * greatest(o.input_excess_ns, o.host_excess_ns) >= $min_imbalance_pct * e.step_ns
),
picked AS (
    SELECT e.*, coalesce(t.stage, e.slow_by_work) AS slow_stage, t.stage IS NOT NULL AS by_own_time
    FROM ends AS e LEFT JOIN own_time AS t ON true
)
SELECT
    s.ranks,
    (SELECT list(step ORDER BY step) FROM aligned_steps) AS steps,
    (s.work_ns - e.fast_ns) / 1e6 AS ms_per_step,
    100.0 * (s.work_ns - e.fast_ns) / e.step_ns AS pct_of_step,
    CASE WHEN 100.0 * (s.work_ns - e.fast_ns) / e.step_ns >= $error_pct THEN 'error' ELSE 'warning' END AS severity,
    CASE WHEN x.compute_excess_ns >= greatest(x.input_excess_ns, x.host_excess_ns) THEN 'compute'
         WHEN x.input_excess_ns >= x.host_excess_ns THEN 'input'
         ELSE 'host' END AS cause,
    e.slow_stage,
    e.fast_stage,
    s.work_ns / 1e6 AS slow_stage_work_ms,
    e.fast_ns / 1e6 AS fast_stage_work_ms,
    s.work_ns / e.fast_ns AS work_ratio,
    s.compute_ns / 1e6 AS slow_stage_compute_ms,
    f.compute_ns / 1e6 AS fast_stage_compute_ms,
    s.compute_ns / nullif(f.compute_ns, 0) AS compute_ratio,
    rank_ranges(s.ranks) AS slow_ranks_text,
    rank_phrase(s.ranks) AS slow_ranks_phrase,
    e.per_stage,
    e.step_ns / 1e6 AS median_step_ms
FROM picked AS e JOIN per_stage AS s ON s.stage = e.slow_stage JOIN per_stage AS f ON f.stage = e.fast_stage
JOIN others AS x ON x.stage = e.slow_stage
WHERE e.n_stages >= 2 AND e.fast_ns > 0 AND e.step_ns > 0 AND e.slow_stage <> e.fast_stage
  AND (e.by_own_time OR (100.0 * (s.work_ns - e.fast_ns) / e.step_ns >= $min_imbalance_pct
                         AND s.work_ns >= $min_compute_ratio * e.fast_ns));
