-- One row per rank whose aligned steps reach under max_mfu_pct of the device's peak FLOP rate.
WITH eff AS (
    SELECT e.rank, e.step, e.dur_ns, e.flops, e.counted_kernel_pct, e.dtype_mix, e.gpu,
           CASE WHEN $peak_tflops > 0 THEN e.flops / ($peak_tflops * 1000) ELSE e.ideal_ns END AS ideal_ns
    FROM step_efficiency AS e JOIN aligned_steps USING (step)
    WHERE e.achieved_tflops IS NOT NULL AND e.flops > 0
),
per_rank AS (
    SELECT rank, list(step ORDER BY step) AS steps, count(*) AS n_steps, sum(dur_ns) AS dur_ns,
           100.0 * sum(ideal_ns) / sum(dur_ns) AS mfu_pct,
           sum(flops) / sum(dur_ns) / 1000 AS achieved_tflops,
           sum(flops) / sum(ideal_ns) / 1000 AS peak_tflops,
           min(counted_kernel_pct) AS counted_kernel_pct,
           stable_mode(list(dtype_mix)) AS dtype_mix,
           coalesce(min(gpu), 'the given peak') AS gpu
    FROM eff GROUP BY rank
    HAVING count(ideal_ns) = count(*)
),
lost AS (   -- GPU time the counted ops spend beyond their roofline
    SELECT o.rank,
           sum(greatest(o.kernel_ns - roofline_ns(o.flops, o.bytes,
                   CASE WHEN $peak_tflops > 0 THEN $peak_tflops ELSE device_peak_tflops(r.device_name, o.dtype) END,
                   device_spec(r.device_name, 'hbm_gb_per_s')), 0)) AS lost_ns
    FROM op_flops AS o JOIN ranks AS r USING (rank) JOIN aligned_steps USING (step)
    WHERE o.flops > 0 AND o.kernel_ns > 0 AND o.dtype IS NOT NULL
    GROUP BY o.rank
)
SELECT
    [p.rank] AS ranks,
    p.steps,
    coalesce(l.lost_ns, 0) / p.n_steps / 1e6 AS ms_per_step,
    100.0 * coalesce(l.lost_ns, 0) / p.dur_ns AS pct_of_step,
    p.rank,
    p.mfu_pct,
    p.achieved_tflops,
    p.peak_tflops,
    p.counted_kernel_pct,
    p.dtype_mix,
    p.gpu
FROM per_rank AS p LEFT JOIN lost AS l USING (rank)
WHERE p.mfu_pct < $max_mfu_pct AND p.counted_kernel_pct >= $min_counted_kernel_pct
ORDER BY ms_per_step DESC, p.rank;
