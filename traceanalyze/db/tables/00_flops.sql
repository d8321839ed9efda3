-- The roofline of an op, for the rules and the efficiency summary. The FLOP and byte formulas of
-- operators (op_flops) are the native reader's: native/src/derived/flops.rs, explained in
-- docs/efficiency.md.

-- the least time an op can take on a device (roofline): the longer of its FLOPs at the precision's peak and its bytes at the memory bandwidth, ns; NULL when either is unknown
CREATE OR REPLACE MACRO roofline_ns(flops, bytes, peak_tflops, hbm_gb_per_s) AS (
    greatest(flops / (peak_tflops * 1000), coalesce(bytes / hbm_gb_per_s, 0))
);
