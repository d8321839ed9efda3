-- Per pipeline rank: its stage, its compute (forward + backward + optimizer) and its wait in send / recv, mean per aligned step.
WITH stages AS (
    SELECT unnest(ranks) AS rank, unnest(range(len(ranks))) AS stage
    FROM process_groups WHERE dimension = 'pipeline' AND size >= 2 AND ranks IS NOT NULL
)
SELECT p.rank, any_value(s.stage) AS stage,
       round(avg(p.forward_ns + p.backward_ns + p.optimizer_ns) / 1e6, 3) AS compute_ms,
       round(avg(p.pipeline_wait_ns) / 1e6, 3) AS pipeline_wait_ms,
       round(avg(p.dur_ns) / 1e6, 3) AS step_ms
FROM step_phases AS p JOIN aligned_steps USING (step) JOIN stages AS s USING (rank)
GROUP BY p.rank
ORDER BY any_value(s.stage), p.rank
LIMIT 50;
