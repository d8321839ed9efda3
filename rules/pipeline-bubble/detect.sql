-- One row when the ranks of the pipeline stages spend a large share of their steps blocked in send / recv and the schedule itself leaves that much idle: with p stages and m micro-batches (p-1)/(m+p-1) of the step (the pipeline bubble). The cost is the smaller of the measured wait and the schedule's share.
WITH stages AS (   -- every rank of a pipeline group and its stage: its position in the group
    SELECT rank, stage, stages FROM pipeline_stages
),
per_rank AS (
    SELECT p.rank, any_value(s.stage) AS stage, any_value(s.stages) AS stages,
           avg(p.pipeline_wait_ns) AS wait_ns, avg(p.dur_ns) AS step_ns
    FROM step_phases AS p JOIN aligned_steps USING (step) JOIN stages AS s USING (rank)
    GROUP BY p.rank
),
micro AS (   -- sends per step from the first stage: the micro-batches it hands on
    SELECT median(n) AS m FROM (
        SELECT c.rank, c.step, count(*) AS n
        FROM collectives AS c JOIN stages AS s USING (rank) JOIN aligned_steps USING (step)
        WHERE c.kind = 'p2p' AND c.op = 'send' AND s.stage = 0
        GROUP BY c.rank, c.step)
),
job AS (
    SELECT median(wait_ns) AS wait_ns, median(step_ns) AS step_ns, max(stages) AS stages,
           count(*) AS n_ranks, list(rank ORDER BY rank) AS ranks,
           arg_max(rank, [wait_ns / step_ns, -rank::DOUBLE]) AS worst_rank,
           max(100.0 * wait_ns / step_ns) AS worst_rank_pct
    FROM per_rank WHERE step_ns > 0
)
SELECT
    j.ranks,
    (SELECT list(step ORDER BY step) FROM aligned_steps) AS steps,
    least(j.wait_ns, coalesce(b.ideal_pct / 100.0 * j.step_ns, j.wait_ns)) / 1e6 AS ms_per_step,
    100.0 * least(j.wait_ns, coalesce(b.ideal_pct / 100.0 * j.step_ns, j.wait_ns)) / j.step_ns AS pct_of_step,
    CASE WHEN 100.0 * j.wait_ns / j.step_ns >= $error_pct THEN 'error' ELSE 'warning' END AS severity,
    'schedule' AS cause,                    -- the schedule leaves the stages idle (not one slow stage or rank)
    j.wait_ns / 1e6 AS pipeline_wait_ms,
    100.0 * j.wait_ns / j.step_ns AS pipeline_wait_pct,
    j.stages,
    m.m AS microbatches,
    b.ideal_pct AS ideal_bubble_pct,
    j.worst_rank,
    j.worst_rank_pct,
    j.step_ns / 1e6 AS median_step_ms
FROM job AS j CROSS JOIN micro AS m
CROSS JOIN (SELECT CASE WHEN m.m > 0 THEN 100.0 * (j.stages - 1) / (m.m + j.stages - 1) END AS ideal_pct
            FROM job AS j CROSS JOIN micro AS m) AS b
-- a bubble is what the schedule leaves idle: when (p-1)/(m+p-1) is small, long waits come from a slow stage or rank
WHERE j.n_ranks > 0 AND 100.0 * j.wait_ns / j.step_ns >= $min_bubble_pct
  AND coalesce(b.ideal_pct, 100) >= $min_bubble_pct;
