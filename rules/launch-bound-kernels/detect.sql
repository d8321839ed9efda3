-- One row per rank whose GPU runs many kernels shorter than their own launch call and waits for the host between them.
WITH launched AS (
    SELECT k.rank, k.step, k.dur_ns, r.dur_ns AS launch_dur_ns
    FROM kernels AS k
    JOIN runtime AS r ON r.rank = k.rank AND r.correlation = k.correlation
    JOIN aligned_steps AS a ON a.step = k.step
    WHERE k.kind = 'compute'
),
kernel_stats AS (
    SELECT rank, count(*) AS n, count(DISTINCT step) AS n_steps,
           count(*) FILTER (WHERE dur_ns < launch_dur_ns) AS n_short,
           median(dur_ns) AS median_kernel_ns, median(launch_dur_ns) AS median_launch_ns
    FROM launched GROUP BY rank
),
host_wait AS (   -- GPU idle because the next kernel was launched only after the GPU ran dry
    SELECT g.rank, sum(g.dur_ns) AS ns FROM gpu_idle_gaps AS g JOIN aligned_steps USING (step)
    WHERE g.cause = 'host_launch' GROUP BY g.rank
),
steps_sum AS (
    SELECT s.rank, sum(s.dur_ns) AS ns, list(s.step ORDER BY s.step) AS steps
    FROM steps AS s JOIN aligned_steps USING (step) GROUP BY s.rank
)
SELECT
    [k.rank] AS ranks,
    t.steps,
    h.ns / k.n_steps / 1e6 AS ms_per_step,
    100.0 * h.ns / t.ns AS pct_of_step,
    k.rank,
    k.n // k.n_steps AS kernels_per_step_count,
    100.0 * k.n_short / k.n AS short_kernel_pct,
    k.median_kernel_ns / 1e3 AS median_kernel_us,
    k.median_launch_ns / 1e3 AS median_launch_us,
    h.ns / k.n_steps / 1e6 AS launch_wait_ms
FROM kernel_stats AS k
JOIN host_wait AS h USING (rank)
JOIN steps_sum AS t USING (rank)
WHERE k.n / k.n_steps >= $min_kernels_per_step_count
  AND 100.0 * k.n_short / k.n >= $min_short_kernel_pct
  AND 100.0 * h.ns / t.ns >= $min_launch_wait_pct
ORDER BY ms_per_step DESC;
