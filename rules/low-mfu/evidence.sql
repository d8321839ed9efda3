-- The rank's ops that lose the most GPU time against their roofline (FLOPs at the peak, bytes at the memory bandwidth).
WITH rated AS (
    SELECT o.name, o.family, o.dtype, count(*) AS calls, sum(o.flops) AS flops, sum(o.bytes) AS bytes,
           sum(o.kernel_ns) AS kernel_ns,
           sum(roofline_ns(o.flops, o.bytes,
               CASE WHEN $peak_tflops > 0 THEN $peak_tflops ELSE device_peak_tflops(r.device_name, o.dtype) END,
               device_spec(r.device_name, 'hbm_gb_per_s'))) AS roofline_ns
    FROM op_flops AS o JOIN ranks AS r USING (rank)
    WHERE o.rank = $rank AND list_contains($steps, o.step) AND o.flops > 0 AND o.kernel_ns > 0 AND o.dtype IS NOT NULL
    GROUP BY o.name, o.family, o.dtype
)
SELECT name, family, dtype, calls,
       round(flops / kernel_ns / 1000, 3) AS tflops,
       round(kernel_ns / 1e6, 3) AS kernel_ms,
       round(roofline_ns / 1e6, 3) AS roofline_ms,
       round((kernel_ns - roofline_ns) / 1e6, 3) AS lost_ms
FROM rated
ORDER BY kernel_ns - roofline_ns DESC NULLS LAST, name, dtype
LIMIT 15;
