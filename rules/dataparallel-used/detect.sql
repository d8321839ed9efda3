-- One row per process that trains with nn.DataParallel (one process scattering work over several devices).
WITH dp_forward AS (  -- DataParallel.forward: scatter inputs, replicate the module, run replicas in threads, gather
    SELECT rank, step, tid, ts_ns, end_ns, dur_ns FROM annotations
    WHERE name = 'DataParallel.forward' AND NOT on_gpu AND step IN (SELECT step FROM aligned_steps)
),
dp_nodes AS (         -- its autograd functions in backward (gradients reduced onto the first device)
    SELECT rank, step, dur_ns FROM cpu_ops
    WHERE step IN (SELECT step FROM aligned_steps) AND name IN (
        'autograd::engine::evaluate_function: BroadcastBackward',
        'autograd::engine::evaluate_function: GatherBackward',
        'autograd::engine::evaluate_function: ScatterBackward')
),
replicas AS (         -- the replicas' forward ops, on the parallel_apply threads
    SELECT f.rank, f.step, count(DISTINCT o.tid) AS threads, max(o.end_ns) - min(o.ts_ns) AS span_ns
    FROM dp_forward AS f
    JOIN cpu_ops AS o ON o.rank = f.rank AND o.tid <> f.tid AND o.ts_ns >= f.ts_ns AND o.ts_ns < f.end_ns
    GROUP BY f.rank, f.step
),
per_step AS (
    SELECT s.rank, s.step, s.dur_ns AS step_ns, f.dur_ns IS NOT NULL AS annotated, r.threads,
           greatest(coalesce(f.dur_ns - coalesce(r.span_ns, 0), 0), 0) AS forward_overhead_ns,
           coalesce((SELECT sum(n.dur_ns) FROM dp_nodes AS n WHERE n.rank = s.rank AND n.step = s.step), 0)
               AS backward_overhead_ns
    FROM steps AS s
    LEFT JOIN dp_forward AS f USING (rank, step)
    LEFT JOIN replicas AS r USING (rank, step)
    WHERE f.dur_ns IS NOT NULL OR EXISTS (SELECT 1 FROM dp_nodes AS n WHERE n.rank = s.rank AND n.step = s.step)
)
SELECT
    [p.rank] AS ranks,
    list(p.step ORDER BY p.step) AS steps,
    avg(p.forward_overhead_ns + p.backward_overhead_ns) / 1e6 AS ms_per_step,
    100.0 * sum(p.forward_overhead_ns + p.backward_overhead_ns) / sum(p.step_ns) AS pct_of_step,
    p.rank,
    (SELECT count(DISTINCT k.device) FROM kernels AS k WHERE k.rank = p.rank) AS devices_count,
    max(p.threads) AS replica_threads_count,
    avg(p.forward_overhead_ns) / 1e6 AS forward_overhead_ms_per_step,
    avg(p.backward_overhead_ns) / 1e6 AS backward_overhead_ms_per_step,
    bool_or(p.annotated) AS has_dataparallel_annotation,
    (SELECT count(*) FROM ranks) AS processes_count,
    median(p.step_ns) / 1e6 AS median_step_ms
FROM per_step AS p
GROUP BY p.rank
ORDER BY p.rank;
