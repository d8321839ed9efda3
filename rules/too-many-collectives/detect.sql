-- One row for the job when every step runs many small collectives: tiny DDP buckets, per-parameter reductions, or many small FSDP units.
WITH calls AS (       -- host-side c10d calls, numbered per (rank, step, op) in the order of the collectives
    SELECT rank, step, tid, ts_ns, collective_op(regexp_replace(name, '^c10d::', '')) AS op,
           row_number() OVER (PARTITION BY rank, step, collective_op(regexp_replace(name, '^c10d::', ''))
                              ORDER BY ts_ns) - 1 AS op_index
    FROM cpu_ops WHERE name LIKE 'c10d::%' AND step IS NOT NULL
),
not_gradient AS (     -- calls made in a DDP forward pass (SyncBatchNorm, buffer broadcast) or a SyncBatchNorm backward
    SELECT c.rank, c.step, c.op, c.op_index FROM calls AS c
    JOIN annotations AS a ON a.rank = c.rank AND a.tid = c.tid AND c.ts_ns >= a.ts_ns AND c.ts_ns < a.end_ns
    WHERE a.name = 'DistributedDataParallel.forward' AND NOT a.on_gpu
    UNION
    SELECT c.rank, c.step, c.op, c.op_index FROM calls AS c
    JOIN cpu_ops AS b ON b.rank = c.rank AND b.tid = c.tid AND c.ts_ns >= b.ts_ns AND c.ts_ns < b.end_ns
    WHERE b.name LIKE 'autograd::engine::evaluate_function: SyncBatchNorm%'
),
sized AS (            -- what a collective moves: an all-gather produces its input (the rank's shard) times the ranks
    SELECT a.*, collective_moved_bytes(a.op, a.bytes, coalesce(r.world_size, (SELECT count(*) FROM ranks))) AS size_bytes
    FROM collective_arrivals AS a LEFT JOIN ranks AS r USING (rank)
),
small AS (
    SELECT s.* FROM sized AS s
    ANTI JOIN not_gradient AS n
        ON n.rank = s.rank AND n.step = s.step AND n.op = s.op AND n.op_index = s.op_index
    WHERE s.size_bytes IS NOT NULL AND s.size_bytes < $max_collective_bytes
      AND s.op IN ('all_reduce', 'reduce_scatter', 'all_gather', 'broadcast')
      AND s.step IN (SELECT step FROM aligned_steps)
),
sharded AS (          -- FSDP (or ZeRO): gradients are reduce-scattered, or FSDP marks its work on the host
    SELECT EXISTS (SELECT 1 FROM collectives WHERE op = 'reduce_scatter')
           OR EXISTS (SELECT 1 FROM annotations WHERE NOT on_gpu
                      AND (name LIKE 'FSDP::%' OR name LIKE 'FullyShardedDataParallel%')) AS yes
),
per_step AS (
    SELECT rank, step, count(*) AS n, sum(size_bytes) AS bytes, sum(min_dur_ns) AS transfer_ns,
           count(*) FILTER (WHERE op IN ('all_reduce', 'broadcast')) AS n_all_reduce,
           count(*) FILTER (WHERE op = 'all_gather') AS n_all_gather,
           count(*) FILTER (WHERE op = 'reduce_scatter') AS n_reduce_scatter
    FROM small GROUP BY rank, step
),
exposed AS (          -- time the training loop waits on communication, minus waiting for late ranks
    SELECT p.rank, p.step, p.dur_ns,
           p.comm_exposed_ns - w.exposed_wait_ns AS comm_ns
    FROM step_phases AS p JOIN per_step USING (rank, step) JOIN step_waits AS w USING (rank, step)
),
job AS (
    SELECT list(DISTINCT s.rank ORDER BY s.rank) AS ranks, list(DISTINCT s.step ORDER BY s.step) AS steps,
           median(s.n) AS n, median(s.bytes) AS bytes, 1e3 * sum(s.bytes) / nullif(sum(s.transfer_ns), 0) AS mb_per_s,
           median(s.n_all_reduce) AS n_all_reduce, median(s.n_all_gather) AS n_all_gather,
           median(s.n_reduce_scatter) AS n_reduce_scatter,
           avg(e.comm_ns) AS comm_ns, median(e.dur_ns) AS step_ns
    FROM per_step AS s JOIN exposed AS e USING (rank, step)
),
kind AS (             -- FSDP when the job shards and its all-gathers / reduce-scatters are the small ones
    SELECT CASE WHEN (SELECT yes FROM sharded) AND j.n_all_gather + j.n_reduce_scatter >= j.n_all_reduce
                THEN 'fsdp' ELSE 'ddp' END AS cause
    FROM job AS j
)
SELECT
    j.ranks,
    j.steps,
    j.comm_ns / 1e6 AS ms_per_step,
    100.0 * j.comm_ns / j.step_ns AS pct_of_step,
    k.cause,
    CASE k.cause WHEN 'fsdp' THEN 'FSDP' ELSE 'gradient' END AS collectives_kind,
    j.n::INTEGER AS small_collectives_per_step_count,
    j.n_all_reduce::INTEGER AS small_all_reduce_per_step_count,
    j.n_all_gather::INTEGER AS small_all_gather_per_step_count,
    j.n_reduce_scatter::INTEGER AS small_reduce_scatter_per_step_count,
    (SELECT median(size_bytes) FROM small)::BIGINT AS median_collective_bytes,
    round((SELECT median(size_bytes) FROM small) / 1024.0, 1) AS median_collective_kib,
    j.bytes::BIGINT AS small_bytes_per_step,
    round(j.bytes / 1048576.0, 2) AS small_mib_per_step,
    round(j.mb_per_s, 1) AS achieved_mb_per_s,
    (SELECT median(min_dur_ns) FROM small) / 1e3 AS median_collective_us,
    round((SELECT 1e3 * sum(size_bytes) / nullif(sum(min_dur_ns), 0) FROM sized
           WHERE size_bytes >= $max_collective_bytes), 1) AS large_collectives_mb_per_s,
    j.step_ns / 1e6 AS median_step_ms
FROM job AS j CROSS JOIN kind AS k
WHERE j.n >= $min_small_collectives_count
  AND 100.0 * j.comm_ns / j.step_ns >= $min_comm_pct;
