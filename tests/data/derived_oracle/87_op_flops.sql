-- FLOPs and bytes of the operators that run the GPU's compute kernels, with those kernels' time.
--
-- Formulas: tables/00_flops.sql. Ops nest (aten::linear -> aten::addmm, aten::conv2d -> ... ->
-- aten::cudnn_convolution); the outermost op with a formula carries the FLOPs and every compute
-- kernel launched (on its thread) while it ran, so nothing is counted twice. Compute kernels
-- launched outside any op with a formula belong to the op that launched them (External id): a row
-- with flops NULL (an op without a formula: counted as unknown, never guessed).

-- One row per outermost op with a FLOP formula, and per other op that launched compute kernels.
CREATE OR REPLACE TABLE op_flops AS
WITH formula_ops AS (
    SELECT e.rank, e.name, e.pid, e.tid, e.ts_ns, e.dur_ns, e.ts_ns + e.dur_ns AS end_ns, e.external_id,
           e.input_dims, e.input_type, e.other_args, flop_family(e.name) AS family
    FROM raw_events AS e
    WHERE e.ph = 'X' AND e.cat IN ('cpu_op', 'Operator') AND e.ts_ns IS NOT NULL AND e.dur_ns >= 0
      AND flop_family(e.name) IS NOT NULL
),
numbered AS (
    SELECT *, row_number() OVER (ORDER BY rank, ts_ns, end_ns DESC, tid, pid, external_id, name) AS op_id
    FROM formula_ops
),
thread_ordered AS (  -- the latest end among the formula ops of its thread before it in op_id order (those start at or before it)
    SELECT *, max(end_ns) OVER (PARTITION BY rank, pid, tid ORDER BY op_id
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM numbered
),
outer_ops AS (  -- formula ops inside no other formula op of their thread: no op before them ends at or after their end (the outer one counts them)
    SELECT n.*, dims_at(n.input_dims, 0) AS d0, dims_at(n.input_dims, 1) AS d1,
           dims_at(n.input_dims, 2) AS d2, dims_at(n.input_dims, 3) AS d3, op_dtype_class(n.input_type) AS dtype
    FROM thread_ordered AS n WHERE n.prev_end_ns IS NULL OR n.prev_end_ns < n.end_ns
),
launches AS (  -- compute kernels with the host thread and time of the runtime call that launched them
    SELECT k.rank, k.step, k.dur_ns, k.external_id, r.tid, r.ts_ns AS launch_ts_ns,
           row_number() OVER (ORDER BY k.rank, k.ts_ns, k.correlation, k.stream) AS kernel_id
    FROM kernels AS k
    JOIN (SELECT rank, correlation, min(tid) AS tid, min(ts_ns) AS ts_ns FROM runtime
          WHERE correlation IS NOT NULL GROUP BY rank, correlation) AS r
      ON r.rank = k.rank AND r.correlation = k.correlation
    WHERE k.kind = 'compute'
),
outer_ordered AS (
    SELECT op_id, rank, tid, ts_ns, end_ns,
           max(end_ns) OVER (PARTITION BY rank, tid ORDER BY ts_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM outer_ops
),
outer_islands AS (  -- outer ops of a host thread in runs of overlapping (or touching) ones
    SELECT *, sum(CASE WHEN prev_end_ns IS NULL OR ts_ns > prev_end_ns THEN 1 ELSE 0 END)
                  OVER (PARTITION BY rank, tid ORDER BY ts_ns, end_ns) AS island
    FROM outer_ordered
),
island_spans AS (
    SELECT rank, tid, island, min(ts_ns) AS ts_ns, max(end_ns) AS end_ns FROM outer_islands GROUP BY ALL
),
launch_islands AS (  -- the run whose span holds the launch: the only one whose ops can hold it
    SELECT l.*, i.island
    FROM launches AS l ASOF JOIN island_spans AS i ON i.rank = l.rank AND i.tid = l.tid AND l.launch_ts_ns >= i.ts_ns
    WHERE l.launch_ts_ns <= i.end_ns
),
owned AS (
    SELECT o.op_id, l.kernel_id, l.dur_ns
    FROM outer_islands AS o JOIN launch_islands AS l
      ON l.rank = o.rank AND l.tid = o.tid AND l.island = o.island
         AND l.launch_ts_ns >= o.ts_ns AND l.launch_ts_ns <= o.end_ns
),
owned_by_op AS (
    SELECT op_id, sum(dur_ns) AS kernel_ns, count(*) AS kernel_count FROM owned GROUP BY op_id
),
formula_rows AS (
    SELECT o.rank, o.ts_ns, o.dur_ns, o.name, o.tid, o.external_id, o.family, o.dtype,
           op_flops_formula(o.family, o.name, o.d0, o.d1, o.d2, o.d3, o.other_args) AS flops,
           op_bytes_formula(o.family, o.d0, o.d1, o.d2, o.d3, dtype_bytes(type_at(o.input_type,
               CASE WHEN o.family IN ('addmm', 'baddbmm') THEN 1 ELSE 0 END))) AS bytes,
           w.kernel_ns, coalesce(w.kernel_count, 0) AS kernel_count
    FROM outer_ops AS o LEFT JOIN owned_by_op AS w USING (op_id)
),
unowned AS (  -- compute kernels launched outside every op with a formula: by the op that launched them
    SELECT l.rank, l.external_id, min(l.step) AS kernel_step, sum(l.dur_ns) AS kernel_ns, count(*) AS kernel_count
    FROM launches AS l WHERE l.kernel_id NOT IN (SELECT kernel_id FROM owned)
    GROUP BY l.rank, l.external_id
),
launching_op AS (  -- the op of an External id (the earliest, should ids repeat)
    SELECT rank, external_id, arg_min(name, ts_ns) AS name, min(ts_ns) AS ts_ns, arg_min(dur_ns, ts_ns) AS dur_ns,
           arg_min(tid, ts_ns) AS tid
    FROM cpu_ops WHERE external_id IN (SELECT external_id FROM unowned) GROUP BY rank, external_id
),
other_rows AS (
    SELECT u.rank, p.ts_ns, p.dur_ns, p.name, p.tid, u.external_id, NULL::VARCHAR AS family, NULL::VARCHAR AS dtype,
           NULL::DOUBLE AS flops, NULL::DOUBLE AS bytes, u.kernel_ns, u.kernel_count, u.kernel_step
    FROM unowned AS u LEFT JOIN launching_op AS p ON p.rank = u.rank AND p.external_id = u.external_id
),
all_rows AS (
    SELECT *, NULL::BIGINT AS kernel_step FROM formula_rows
    UNION ALL SELECT * FROM other_rows
)
SELECT
    a.rank,                                 -- global rank
    coalesce(CASE WHEN a.ts_ns < s.end_ns THEN s.step END, a.kernel_step) AS step,  -- step holding the op's start (for kernels without a known op: the step that launched them)
    a.ts_ns,                                -- op start on the host, ns (NULL for kernels whose launching op is not in the trace)
    a.dur_ns,                               -- op duration on the host, ns
    a.name,                                 -- operator name, e.g. 'aten::linear' (the outermost op with a formula); NULL when the launching op is not in the trace
    a.tid,                                  -- host thread
    a.external_id,                          -- External id of the op
    a.family,                               -- formula used: mm, addmm, bmm, baddbmm, matmul, linear, conv, conv_backward, sdpa, flash, sdpa_backward, flash_backward, norm, norm_backward, softmax, softmax_backward, embedding, embedding_dense_backward, elementwise, elementwise2; NULL: no formula for this op
    a.dtype,                                -- compute precision class of its inputs: fp64, fp32, fp16, bf16, fp8 (NULL when not recorded)
    TRY_CAST(a.flops AS BIGINT) AS flops,               -- floating-point operations by the formula (a multiply-add is 2); NULL when the op has no formula or its shapes were not recorded (record_shapes=False) or are odd
    TRY_CAST(a.bytes AS BIGINT) AS bytes,               -- least bytes it must read and write (inputs once, output once); NULL when unknown
    a.kernel_ns::BIGINT AS kernel_ns,       -- GPU time of the compute kernels it launched, ns (NULL: none)
    a.kernel_count,                         -- compute kernels it launched
    CASE WHEN a.kernel_ns > 0 THEN TRY_CAST(a.flops AS BIGINT) / a.kernel_ns / 1000 END AS tflops  -- achieved rate on the GPU: flops / kernel_ns, TFLOP/s
FROM all_rows AS a
ASOF LEFT JOIN steps AS s ON a.rank = s.rank AND a.ts_ns >= s.ts_ns
ORDER BY a.rank, a.ts_ns NULLS LAST, a.external_id, a.name;
