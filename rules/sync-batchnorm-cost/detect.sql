-- One row for the job when SyncBatchNorm synchronises batch statistics across ranks in every step (info, with its cost).
WITH bn_steps AS (    -- steps that run SyncBatchNorm: its backward node, or its GPU statistics op
    SELECT DISTINCT rank, step FROM cpu_ops
    WHERE step IS NOT NULL AND (name LIKE 'autograd::engine::evaluate_function: SyncBatchNormBackward%'
                                OR name = 'aten::batch_norm_gather_stats_with_counts')
),
calls AS (            -- host-side c10d calls, numbered per (rank, step, op) in the order of the collectives
    SELECT c.rank, c.step, c.tid, c.ts_ns, collective_op(regexp_replace(c.name, '^c10d::', '')) AS op,
           row_number() OVER (PARTITION BY c.rank, c.step, collective_op(regexp_replace(c.name, '^c10d::', ''))
                              ORDER BY c.ts_ns) AS k
    FROM cpu_ops AS c JOIN bn_steps USING (rank, step) WHERE c.name LIKE 'c10d::%'
),
bn_calls AS (         -- statistics all_gather inside a forward pass; gradient-statistics all_reduce in SyncBatchNormBackward
    SELECT c.rank, c.step, c.op, c.k, 'forward' AS pass FROM calls AS c
    JOIN annotations AS a ON a.rank = c.rank AND a.tid = c.tid AND c.ts_ns >= a.ts_ns AND c.ts_ns < a.end_ns
    WHERE c.op = 'all_gather' AND NOT a.on_gpu
      AND a.name IN ('DistributedDataParallel.forward', 'DataParallel.forward')
    UNION
    SELECT c.rank, c.step, c.op, c.k, 'backward' FROM calls AS c
    JOIN cpu_ops AS b ON b.rank = c.rank AND b.tid = c.tid AND c.ts_ns >= b.ts_ns AND c.ts_ns < b.end_ns
    WHERE b.name LIKE 'autograd::engine::evaluate_function: SyncBatchNormBackward%'
),
colls AS (
    SELECT rank, step, op, bytes, dur_ns, row_number() OVER (PARTITION BY rank, step, op ORDER BY ts_ns) AS k
    FROM collectives WHERE step IN (SELECT step FROM aligned_steps)
),
per_step AS (
    SELECT b.rank, b.step,
           count(*) FILTER (WHERE b.pass = 'forward') AS fwd_n, count(*) FILTER (WHERE b.pass = 'backward') AS bwd_n,
           coalesce(sum(c.dur_ns) FILTER (WHERE b.pass = 'forward'), 0) AS fwd_ns,
           coalesce(sum(c.dur_ns) FILTER (WHERE b.pass = 'backward'), 0) AS bwd_ns,
           sum(c.bytes) AS bytes, any_value(s.dur_ns) AS step_ns
    FROM bn_calls AS b
    JOIN colls AS c USING (rank, step, op, k)
    JOIN steps AS s USING (rank, step)
    GROUP BY b.rank, b.step
)
SELECT
    list(DISTINCT rank ORDER BY rank) AS ranks,
    list(DISTINCT step ORDER BY step) AS steps,
    avg(fwd_ns + bwd_ns) / 1e6 AS ms_per_step,
    100.0 * sum(fwd_ns + bwd_ns) / sum(step_ns) AS pct_of_step,
    median(fwd_n)::INTEGER AS forward_collectives_per_step_count,
    median(bwd_n)::INTEGER AS backward_collectives_per_step_count,
    avg(fwd_ns) / 1e6 AS forward_ms_per_step,
    avg(bwd_ns) / 1e6 AS backward_ms_per_step,
    100.0 * sum(fwd_ns) / sum(step_ns) AS forward_pct_of_step,
    median(bytes)::BIGINT AS bytes_per_step,
    median(step_ns) / 1e6 AS median_step_ms
FROM per_step
HAVING count(*) > 0 AND 100.0 * sum(fwd_ns + bwd_ns) / sum(step_ns) >= $min_share_pct;
