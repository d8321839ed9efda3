-- Per (rank, step): FLOPs of the step's ops (op_flops), the rate they were done at and its share of the device's peak (MFU).
--
-- The peak is the device's dense peak for each precision the step computes in (gpu_specs), so a
-- step with bf16 matmuls and fp32 norms is held to the time its FLOPs take at their peaks:
-- ideal_ns = sum over precisions of flops / peak; mfu_pct = ideal_ns / dur_ns; peak_tflops =
-- flops / ideal_ns (the mix's effective peak). Anything unknown leaves a NULL and says why in note.
CREATE OR REPLACE TABLE step_efficiency AS
WITH spec AS (
    SELECT r.rank, r.device_name, device_gpu(r.device_name) AS gpu FROM ranks AS r
),
peaks AS (
    SELECT s.rank, d.dtype, device_peak_tflops(s.device_name, d.dtype) AS peak_tflops
    FROM spec AS s CROSS JOIN (SELECT unnest(['fp64', 'fp32', 'fp16', 'bf16', 'fp8']) AS dtype) AS d
),
by_dtype AS (
    SELECT *, sum(flops) OVER (PARTITION BY rank, step) AS step_flops
    FROM (SELECT o.rank, o.step, o.dtype, sum(o.flops) AS flops
          FROM op_flops AS o WHERE o.flops > 0 AND o.dtype IS NOT NULL AND o.step IS NOT NULL GROUP BY ALL)
),
ideal AS (
    SELECT b.rank, b.step, sum(b.flops) AS flops,
           sum(b.flops / (p.peak_tflops * 1000)) AS ideal_ns,
           bool_or(p.peak_tflops IS NULL) AS some_peak_unknown,
           string_agg(DISTINCT CASE WHEN p.peak_tflops IS NULL THEN b.dtype END, ', ' ORDER BY CASE WHEN p.peak_tflops IS NULL THEN b.dtype END) AS unknown_dtypes,
           string_agg(b.dtype || ' ' || round(100 * b.flops / b.step_flops)::INTEGER || '%', ', '
                      ORDER BY b.flops DESC, b.dtype) AS dtype_mix
    FROM by_dtype AS b LEFT JOIN peaks AS p ON p.rank = b.rank AND p.dtype = b.dtype
    GROUP BY b.rank, b.step
),
ops AS (
    SELECT rank, step,
           count(*) FILTER (WHERE flops IS NOT NULL) AS counted_ops,
           count(*) FILTER (WHERE flops IS NULL) AS unknown_ops,
           coalesce(sum(kernel_ns) FILTER (WHERE flops IS NOT NULL), 0) AS counted_kernel_ns,
           coalesce(sum(kernel_ns) FILTER (WHERE flops IS NULL), 0) AS unknown_kernel_ns,
           count(*) FILTER (WHERE family IS NOT NULL AND flops IS NULL) AS shapeless_ops
    FROM op_flops WHERE step IS NOT NULL GROUP BY rank, step
),
gpu AS (
    SELECT rank, count(*) > 0 AS has_kernels FROM kernels GROUP BY rank
)
SELECT
    s.rank,                                 -- global rank
    s.step,                                 -- ProfilerStep N
    s.dur_ns,                               -- step duration, ns
    TRY_CAST(i.flops AS BIGINT) AS flops,               -- FLOPs of the step's floating-point ops with a formula (op_flops rows with a dtype); NULL when none could be counted
    coalesce(o.counted_ops, 0) AS counted_ops,          -- ops whose FLOPs are known
    coalesce(o.unknown_ops, 0) AS unknown_ops,          -- ops that ran compute kernels but have no formula or no recorded shapes (their FLOPs are left out, not guessed)
    CASE WHEN o.counted_kernel_ns + o.unknown_kernel_ns > 0
         THEN 100.0 * o.counted_kernel_ns / (o.counted_kernel_ns + o.unknown_kernel_ns) END AS counted_kernel_pct,  -- share of the step's compute-kernel time spent in ops whose FLOPs are known, %: how much of the work the FLOPs cover
    i.dtype_mix,                            -- the step's FLOPs by precision, e.g. 'bf16 92%, fp32 8%'
    sp.device_name,                         -- deviceProperties[0].name
    sp.gpu,                                 -- the gpu_specs model it matched, NULL when unknown
    CASE WHEN g.has_kernels THEN i.flops / s.dur_ns / 1000 END AS achieved_tflops,  -- flops / step duration, TFLOP/s (NULL without GPU kernels)
    CASE WHEN g.has_kernels AND NOT i.some_peak_unknown THEN i.flops / i.ideal_ns / 1000 END AS peak_tflops,  -- the device's dense peak for the step's precision mix, TFLOP/s (NULL when the device or a precision is not in gpu_specs)
    CASE WHEN g.has_kernels AND NOT i.some_peak_unknown THEN TRY_CAST(i.ideal_ns AS BIGINT) END AS ideal_ns,  -- time the step's FLOPs would take at peak, ns
    CASE WHEN g.has_kernels AND NOT i.some_peak_unknown THEN 100.0 * i.ideal_ns / s.dur_ns END AS mfu_pct,  -- model FLOPs utilization: ideal_ns / dur_ns, %
    CASE
        WHEN NOT coalesce(g.has_kernels, false) THEN 'no GPU kernels in this trace: no FLOP rate or MFU'
        WHEN i.flops IS NULL AND coalesce(o.shapeless_ops, 0) > 0 THEN 'FLOPs unknown: no input shapes recorded (profile with record_shapes=True), or shapes no formula fits'
        WHEN i.flops IS NULL THEN 'no op with a FLOP formula in this step'
        WHEN sp.gpu IS NULL THEN 'device ' || coalesce('''' || sp.device_name || '''', 'name') || ' not in gpu_specs: no peak, no MFU (give the peak: --param low-mfu.peak_tflops=N)'
        WHEN i.some_peak_unknown THEN 'no ' || i.unknown_dtypes || ' peak for ' || sp.gpu || ': no MFU'
    END AS note                             -- why a value above is NULL (NULL when every value is known)
FROM steps AS s
LEFT JOIN ideal AS i USING (rank, step)
LEFT JOIN ops AS o USING (rank, step)
LEFT JOIN spec AS sp USING (rank)
LEFT JOIN gpu AS g USING (rank)
ORDER BY s.rank, s.step;
