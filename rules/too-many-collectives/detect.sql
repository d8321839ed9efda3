-- One row for the job when every step runs many small gradient collectives (tiny DDP buckets, per-parameter reductions).
WITH calls AS (       -- host-side c10d calls, numbered per (rank, step, op) in the order of the collectives
    SELECT rank, step, tid, ts_ns, collective_op(regexp_replace(name, '^c10d::', '')) AS op,
           row_number() OVER (PARTITION BY rank, step, collective_op(regexp_replace(name, '^c10d::', ''))
                              ORDER BY ts_ns) - 1 AS op_index
    FROM cpu_ops WHERE name LIKE 'c10d::%' AND step IS NOT NULL
),
not_gradient AS (     -- calls made in a forward pass (SyncBatchNorm, buffer broadcast) or a SyncBatchNorm backward
    SELECT c.rank, c.step, c.op, c.op_index FROM calls AS c
    JOIN annotations AS a ON a.rank = c.rank AND a.tid = c.tid AND c.ts_ns >= a.ts_ns AND c.ts_ns < a.end_ns
    WHERE a.name = 'DistributedDataParallel.forward' AND NOT a.on_gpu
    UNION
    SELECT c.rank, c.step, c.op, c.op_index FROM calls AS c
    JOIN cpu_ops AS b ON b.rank = c.rank AND b.tid = c.tid AND c.ts_ns >= b.ts_ns AND c.ts_ns < b.end_ns
    WHERE b.name LIKE 'autograd::engine::evaluate_function: SyncBatchNorm%'
),
small AS (
    SELECT a.* FROM collective_arrivals AS a
    ANTI JOIN not_gradient AS n
        ON n.rank = a.rank AND n.step = a.step AND n.op = a.op AND n.op_index = a.op_index
    WHERE a.bytes IS NOT NULL AND a.bytes < $max_collective_bytes
      AND a.op IN ('all_reduce', 'reduce_scatter', 'all_gather', 'broadcast')
),
per_step AS (
    SELECT rank, step, count(*) AS n, sum(bytes) AS bytes, sum(min_dur_ns) AS transfer_ns
    FROM small GROUP BY rank, step
),
exposed AS (          -- time the training loop waits on communication, minus waiting for late ranks
    SELECT p.rank, p.step, p.dur_ns,
           greatest(p.comm_exposed_ns - coalesce((SELECT max(w.wait_for_last_ns) FROM collective_arrivals AS w
                                                  WHERE w.rank = p.rank AND w.step = p.step), 0), 0) AS comm_ns
    FROM step_phases AS p JOIN per_step USING (rank, step)
),
job AS (
    SELECT list(DISTINCT s.rank ORDER BY s.rank) AS ranks, list(DISTINCT s.step ORDER BY s.step) AS steps,
           median(s.n) AS n, median(s.bytes) AS bytes, 1e3 * sum(s.bytes) / nullif(sum(s.transfer_ns), 0) AS mb_per_s,
           avg(e.comm_ns) AS comm_ns, median(e.dur_ns) AS step_ns
    FROM per_step AS s JOIN exposed AS e USING (rank, step)
)
SELECT
    j.ranks,
    j.steps,
    j.comm_ns / 1e6 AS ms_per_step,
    100.0 * j.comm_ns / j.step_ns AS pct_of_step,
    j.n::INTEGER AS small_collectives_per_step_count,
    (SELECT median(bytes) FROM small)::BIGINT AS median_collective_bytes,
    round((SELECT median(bytes) FROM small) / 1024.0, 1) AS median_collective_kib,
    j.bytes::BIGINT AS small_bytes_per_step,
    round(j.bytes / 1048576.0, 2) AS small_mib_per_step,
    round(j.mb_per_s, 1) AS achieved_mb_per_s,
    (SELECT median(min_dur_ns) FROM small) / 1e3 AS median_collective_us,
    round((SELECT 1e3 * sum(bytes) / nullif(sum(min_dur_ns), 0) FROM collective_arrivals
           WHERE bytes >= $max_collective_bytes), 1) AS large_collectives_mb_per_s,
    j.step_ns / 1e6 AS median_step_ms
FROM job AS j
WHERE j.n >= $min_small_collectives_count
  AND 100.0 * j.comm_ns / j.step_ns >= $min_comm_pct;
