-- One row for the job when DDP all-reduces the gradients several times per step (accumulation without no_sync()).
WITH passes AS (      -- forward passes (micro-batches) of the DDP model, host side
    SELECT rank, step, ts_ns, row_number() OVER (PARTITION BY rank, step ORDER BY ts_ns) AS pass,
           count(*) OVER (PARTITION BY rank, step) AS passes_count
    FROM annotations
    WHERE name = 'DistributedDataParallel.forward' AND NOT on_gpu AND step IN (SELECT step FROM aligned_steps)
),
calls AS (            -- host all-reduce calls, numbered in the same order as the step's all_reduce collectives
    SELECT rank, step, tid, ts_ns, row_number() OVER (PARTITION BY rank, step ORDER BY ts_ns) AS k
    FROM cpu_ops WHERE name = 'c10d::allreduce_' AND step IS NOT NULL
),
grad_calls AS (       -- those made from a backward hook: DDP's gradient buckets
    SELECT DISTINCT c.rank, c.step, c.ts_ns, c.k
    FROM calls AS c JOIN cpu_ops AS b
        ON b.rank = c.rank AND b.tid = c.tid AND c.ts_ns >= b.ts_ns AND c.ts_ns < b.end_ns
    WHERE b.name LIKE 'autograd::engine::evaluate_function:%'
),
colls AS (
    SELECT rank, step, bytes, dur_ns, row_number() OVER (PARTITION BY rank, step ORDER BY ts_ns) AS k
    FROM collectives WHERE op = 'all_reduce' AND step IS NOT NULL
),
rounds AS (           -- every gradient all-reduce with the micro-batch whose backward made it
    SELECT g.rank, g.step, p.pass, p.passes_count, c.bytes, c.dur_ns,
           max(p.pass) OVER (PARTITION BY g.rank, g.step) AS last_pass
    FROM grad_calls AS g
    ASOF JOIN passes AS p ON p.rank = g.rank AND p.step = g.step AND g.ts_ns >= p.ts_ns
    LEFT JOIN colls AS c ON c.rank = g.rank AND c.step = g.step AND c.k = g.k
),
per_step AS (
    SELECT rank, step, any_value(passes_count) AS micro_batches, count(DISTINCT pass) AS sync_rounds,
           coalesce(sum(bytes) FILTER (WHERE pass < last_pass), 0) AS extra_bytes,
           coalesce(sum(dur_ns) FILTER (WHERE pass < last_pass), 0) AS extra_ns,
           sum(bytes) FILTER (WHERE pass = last_pass) AS needed_bytes
    FROM rounds GROUP BY rank, step
),
flagged AS (SELECT * FROM per_step WHERE sync_rounds >= $min_sync_rounds_count)
SELECT
    list(DISTINCT f.rank ORDER BY f.rank) AS ranks,
    list(DISTINCT f.step ORDER BY f.step) AS steps,
    avg(f.extra_ns) / 1e6 AS ms_per_step,
    100.0 * avg(f.extra_ns) / (SELECT median(median_dur_ns) FROM aligned_steps) AS pct_of_step,
    median(f.sync_rounds)::INTEGER AS sync_rounds_count,
    median(f.micro_batches)::INTEGER AS micro_batches_count,
    median(f.extra_bytes)::BIGINT AS extra_bytes_per_step,
    round(median(f.extra_bytes) / 1048576.0, 1) AS extra_mib_per_step,
    median(f.needed_bytes)::BIGINT AS needed_bytes_per_step,
    round(median(f.needed_bytes) / 1048576.0, 1) AS needed_mib_per_step,
    (SELECT median(median_dur_ns) FROM aligned_steps) / 1e6 AS median_step_ms,
    count(*) AS flagged_rank_steps_count,
    (SELECT count(*) FROM per_step) AS rank_steps_count
FROM flagged AS f
HAVING count(*) >= $min_steps_pct / 100.0 * (SELECT count(*) FROM per_step) AND count(*) > 0;
