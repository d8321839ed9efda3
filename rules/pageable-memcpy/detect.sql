-- One row per rank that copies between the GPU and pageable (unpinned) host memory inside steps.
WITH copies AS (
    SELECT m.rank, m.step, m.direction, m.copy_bytes, m.dur_ns, r.dur_ns AS call_ns
    FROM memcpy AS m JOIN aligned_steps USING (step)
    LEFT JOIN kernels AS k ON k.rank = m.rank AND k.ts_ns = m.ts_ns AND k.kind = 'memcpy' AND k.name = m.name
    LEFT JOIN runtime AS r ON r.rank = k.rank AND r.correlation = k.correlation
    WHERE m.src_memory = 'Pageable' OR m.dst_memory = 'Pageable'
),
steps_sum AS (
    SELECT s.rank, count(*) AS n_steps, sum(s.dur_ns) AS ns, list(s.step ORDER BY s.step) AS steps
    FROM steps AS s JOIN aligned_steps USING (step) GROUP BY s.rank
),
per_rank AS (
    SELECT rank, count(*) AS n, sum(copy_bytes) AS bytes, sum(dur_ns) AS gpu_ns,
           coalesce(sum(call_ns), 0) AS host_ns, stable_mode(list(direction)) AS direction
    FROM copies GROUP BY rank
)
SELECT
    [p.rank] AS ranks,
    t.steps,
    greatest(p.gpu_ns, p.host_ns) / t.n_steps / 1e6 AS ms_per_step,
    100.0 * greatest(p.gpu_ns, p.host_ns) / t.ns AS pct_of_step,
    CASE WHEN 100.0 * greatest(p.gpu_ns, p.host_ns) / t.ns >= $warning_pct THEN 'warning' ELSE 'info' END AS severity,
    p.rank,
    p.direction,
    p.n / t.n_steps AS copies_per_step,
    p.bytes // t.n_steps AS bytes_per_step,
    round(p.bytes / t.n_steps / 1048576.0, 1) AS mib_per_step,
    p.gpu_ns / t.n_steps / 1e6 AS copy_ms,
    p.host_ns / t.n_steps / 1e6 AS host_call_ms
FROM per_rank AS p JOIN steps_sum AS t USING (rank)
WHERE p.bytes / t.n_steps >= $min_copy_per_step_bytes
ORDER BY ms_per_step DESC;
