-- One row per rank whose GPU sits idle for a large share of its steps (DataLoader and communication waits excluded: see dataloader-stall and the communication rules).
WITH gaps AS (
    SELECT g.* FROM gpu_idle_gaps AS g JOIN aligned_steps USING (step)
    WHERE g.dur_ns >= $min_gap_us * 1000 AND g.cause NOT IN ('data_wait', 'comm_wait')
),
per_cause AS (
    SELECT rank, cause, sum(dur_ns) AS ns, count(*) AS n FROM gaps GROUP BY rank, cause
),
gpu_steps AS (   -- steps of ranks that have GPU work at all
    SELECT s.rank, s.step, s.dur_ns FROM step_gpu AS s JOIN aligned_steps USING (step) WHERE s.devices IS NOT NULL
),
per_rank AS (
    SELECT s.rank, count(*) AS n_steps, sum(s.dur_ns) AS step_sum_ns, list(s.step ORDER BY s.step) AS steps,
           (SELECT sum(ns) FROM per_cause AS c WHERE c.rank = s.rank) AS idle_ns,
           (SELECT first(cause ORDER BY ns DESC, cause) FROM per_cause AS c WHERE c.rank = s.rank) AS cause,
           (SELECT sum(n) FROM per_cause AS c WHERE c.rank = s.rank) AS gaps_count,
           (SELECT max(ns) FROM per_cause AS c WHERE c.rank = s.rank) AS cause_ns
    FROM gpu_steps AS s GROUP BY s.rank
)
SELECT
    [rank] AS ranks,
    steps,
    idle_ns / n_steps / 1e6 AS ms_per_step,
    100.0 * idle_ns / step_sum_ns AS pct_of_step,
    CASE WHEN 100.0 * idle_ns / step_sum_ns >= $error_pct THEN 'error' ELSE 'warning' END AS severity,
    rank,
    cause,
    100.0 * cause_ns / idle_ns AS cause_share_pct,
    idle_ns / n_steps / 1e6 AS idle_ms,
    gaps_count // n_steps AS gaps_per_step_count,
    step_sum_ns / n_steps / 1e6 AS median_step_ms
FROM per_rank
WHERE idle_ns >= $min_idle_pct / 100.0 * step_sum_ns
ORDER BY ms_per_step DESC;
