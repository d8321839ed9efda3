-- Lookups in the gpu_specs table (db/gpu_specs.csv): used by step_efficiency, rules and the efficiency summary.

-- the gpu_specs model of a device name (deviceProperties[0].name), e.g. 'NVIDIA A100-SXM4-80GB' -> 'A100 SXM'; NULL when no row matches
CREATE OR REPLACE MACRO device_gpu(device_name) AS (
    (SELECT g.gpu FROM gpu_specs AS g WHERE regexp_matches(device_name, g.name_regex) ORDER BY g.priority LIMIT 1)
);

-- the dense peak of a device name for a precision class (fp64, fp32, fp16, bf16, fp8), TFLOP/s; NULL when the device or that precision is not in gpu_specs
CREATE OR REPLACE MACRO device_peak_tflops(device_name, dtype) AS (
    (SELECT CASE dtype WHEN 'fp64' THEN g.fp64_tflops WHEN 'fp32' THEN g.fp32_tflops WHEN 'fp16' THEN g.fp16_tflops
                       WHEN 'bf16' THEN g.bf16_tflops WHEN 'fp8' THEN g.fp8_tflops END
     FROM gpu_specs AS g WHERE regexp_matches(device_name, g.name_regex) ORDER BY g.priority LIMIT 1)
);

-- a gpu_specs column of a device name (e.g. 'hbm_gb_per_s', 'intra_node_busbw_gb_per_s'); NULL when the device is not in gpu_specs
CREATE OR REPLACE MACRO device_spec(device_name, column_name) AS (
    (SELECT CASE column_name WHEN 'hbm_gb_per_s' THEN g.hbm_gb_per_s
                             WHEN 'intra_node_busbw_gb_per_s' THEN g.intra_node_busbw_gb_per_s
                             WHEN 'inter_node_busbw_gb_per_s' THEN g.inter_node_busbw_gb_per_s END
     FROM gpu_specs AS g WHERE regexp_matches(device_name, g.name_regex) ORDER BY g.priority LIMIT 1)
);
