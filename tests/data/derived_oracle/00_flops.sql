-- FLOP and byte formulas of operators, from the shapes and dtypes torch.profiler records with
-- record_shapes=True ("Input Dims", "Input type", and "Concrete Inputs" in newer torch).
-- One place for every formula; docs/efficiency.md explains each. An op, a shape or a value the
-- formulas do not know gives NULL: counted as unknown, never guessed.

-- the i-th (0-based) input's shape in an "Input Dims" text, e.g. dims_at('[[8, 512], [512, 64]]', 1) -> [512.0, 64.0]; [] for a scalar; NULL when absent, not JSON, or not a list of non-negative integers (a TensorList); DOUBLE so products never overflow
CREATE OR REPLACE MACRO dims_at(input_dims, i) AS (
    list_filter([TRY_CAST(json_extract(TRY_CAST(input_dims AS JSON), '$[' || i || ']') AS BIGINT[])],
                lambda d: list_count(d) = len(d) AND list_bool_and(list_transform(d, lambda x: x >= 0)) IS NOT false)[1]::DOUBLE[]
);

-- elements of a shape: product of its dims (1 for a scalar []), NULL for a NULL shape; DOUBLE (exact to 2^53)
CREATE OR REPLACE MACRO numel(d) AS (
    CASE WHEN d IS NULL THEN NULL WHEN len(d) = 0 THEN 1.0 ELSE list_product(d) END
);

-- the i-th input's dtype name in an "Input type" text, e.g. type_at('["float", "c10::BFloat16"]', 1) -> 'c10::BFloat16'
CREATE OR REPLACE MACRO type_at(input_type, i) AS (
    json_extract_string(TRY_CAST(input_type AS JSON), '$[' || i || ']')
);

-- the i-th input's value in args."Concrete Inputs" (newer torch; inside other_args), as integers: '[2, 2]' -> [2, 2]; NULL when not recorded
CREATE OR REPLACE MACRO concrete_ints(other_args, i) AS (
    TRY_CAST(json_extract_string(TRY_CAST(other_args AS JSON), '$."Concrete Inputs"[' || i || ']') AS BIGINT[])
);

-- the i-th input's value in args."Concrete Inputs" as text (e.g. 'True', '[True, True, False]'); NULL when not recorded
CREATE OR REPLACE MACRO concrete_text(other_args, i) AS (
    json_extract_string(TRY_CAST(other_args AS JSON), '$."Concrete Inputs"[' || i || ']')
);

-- a torch dtype name -> the precision class peaks are quoted for: fp64, fp32, fp16, bf16, fp8; NULL for integers, bool, unknown
CREATE OR REPLACE MACRO dtype_class(dtype) AS (
    -- (a map: a CASE over the name would repeat its expression in every branch, bound again at each use)
    MAP {
        'double': 'fp64', 'float64': 'fp64',
        'float': 'fp32', 'float32': 'fp32',
        'half': 'fp16', 'float16': 'fp16',
        'bfloat16': 'bf16',
        'float8_e4m3fn': 'fp8', 'float8_e5m2': 'fp8', 'float8_e4m3fnuz': 'fp8', 'float8_e5m2fnuz': 'fp8'
    }[lower(regexp_replace(coalesce(dtype, ''), '^(c10::|at::|torch\.)', ''))]
);

-- an operator name -> the formula family it uses (NULL: no formula). Names without the 'aten::' prefix.
CREATE OR REPLACE MACRO flop_family(name) AS (
    MAP {
        'mm': 'mm', 'addmm': 'addmm', 'bmm': 'bmm', 'baddbmm': 'baddbmm', 'matmul': 'matmul', 'linear': 'linear',
        'conv1d': 'conv', 'conv2d': 'conv', 'conv3d': 'conv', 'convolution': 'conv', '_convolution': 'conv',
        'convolution_backward': 'conv_backward', 'cudnn_convolution_backward': 'conv_backward', 'cudnn_convolution_backward_input': 'conv_backward', 'miopen_convolution_backward': 'conv_backward',
        'scaled_dot_product_attention': 'sdpa', '_scaled_dot_product_flash_attention': 'sdpa', '_scaled_dot_product_efficient_attention': 'sdpa', '_scaled_dot_product_cudnn_attention': 'sdpa', '_scaled_dot_product_flash_attention_for_cpu': 'sdpa',
        '_flash_attention_forward': 'flash', '_efficient_attention_forward': 'flash',
        '_scaled_dot_product_flash_attention_backward': 'sdpa_backward', '_scaled_dot_product_efficient_attention_backward': 'sdpa_backward', '_scaled_dot_product_cudnn_attention_backward': 'sdpa_backward',
        '_flash_attention_backward': 'flash_backward', '_efficient_attention_backward': 'flash_backward',
        'layer_norm': 'norm', 'native_layer_norm': 'norm', 'rms_norm': 'norm', '_fused_rms_norm': 'norm', 'batch_norm': 'norm', 'native_batch_norm': 'norm', 'cudnn_batch_norm': 'norm', 'group_norm': 'norm', 'native_group_norm': 'norm',
        'native_layer_norm_backward': 'norm_backward', 'native_batch_norm_backward': 'norm_backward', 'cudnn_batch_norm_backward': 'norm_backward', 'native_group_norm_backward': 'norm_backward', '_fused_rms_norm_backward': 'norm_backward',
        'softmax': 'softmax', '_softmax': 'softmax', 'log_softmax': 'softmax', '_log_softmax': 'softmax',
        '_softmax_backward_data': 'softmax_backward', '_log_softmax_backward_data': 'softmax_backward',
        'embedding': 'embedding', 'embedding_dense_backward': 'embedding_dense_backward',
        'add': 'elementwise', 'add_': 'elementwise', 'sub': 'elementwise', 'sub_': 'elementwise', 'mul': 'elementwise', 'mul_': 'elementwise', 'div': 'elementwise', 'div_': 'elementwise', 'relu': 'elementwise', 'relu_': 'elementwise', 'gelu': 'elementwise', 'gelu_': 'elementwise', 'silu': 'elementwise', 'silu_': 'elementwise', 'sigmoid': 'elementwise', 'sigmoid_': 'elementwise', 'tanh': 'elementwise', 'tanh_': 'elementwise', 'threshold_backward': 'elementwise', 'gelu_backward': 'elementwise', 'silu_backward': 'elementwise', 'sigmoid_backward': 'elementwise', 'tanh_backward': 'elementwise', 'exp': 'elementwise', 'exp_': 'elementwise', 'neg': 'elementwise', 'rsqrt': 'elementwise', 'sqrt': 'elementwise', 'pow': 'elementwise', 'clamp_min': 'elementwise', 'clamp_min_': 'elementwise', 'where': 'elementwise',
        'addcmul': 'elementwise2', 'addcmul_': 'elementwise2', 'addcdiv': 'elementwise2', 'addcdiv_': 'elementwise2'
    }[CASE WHEN starts_with(name, 'aten::') THEN name[7:] ELSE name END]
);

-- Output elements of a convolution from the input shape x [N, C, *spatial], weight w [Cout, Cin/groups, *kernel]
-- and stride s, padding p, dilation dl (each a list with one value per spatial dim, or one value for all):
-- N * Cout * prod(floor((in + 2p - dl*(k-1) - 1) / s) + 1). NULL when any is unknown.
CREATE OR REPLACE MACRO conv_out_numel(x, w, s, p, dl) AS (
    CASE WHEN x IS NULL OR w IS NULL OR s IS NULL OR p IS NULL OR dl IS NULL OR len(x) < 3 OR len(w) <> len(x)
              OR len(s) = 0 OR len(p) = 0 OR len(dl) = 0 THEN NULL
         ELSE x[1] * w[1] * list_product(list_transform(range(1, len(x) - 1), lambda j:
             greatest(0, floor((x[j + 2] + 2 * p[least(j, len(p))] - dl[least(j, len(dl))] * (w[j + 2] - 1) - 1)
                          / greatest(s[least(j, len(s))], 1)) + 1)))
    END
);

-- multiply-adds per output element of a convolution: Cin/groups * prod(kernel) = prod(w[2:])
CREATE OR REPLACE MACRO conv_macs_per_out(w) AS (
    CASE WHEN w IS NULL OR len(w) < 3 THEN NULL ELSE list_product(w[2:]) END
);

-- output elements of matmul(a, b) with broadcasting batch dims (1-D operands act as a row / column):
-- batch * M * N, batch = the larger of the two batch products (they are equal or one is 1)
CREATE OR REPLACE MACRO matmul_out_numel(a, b) AS (
    CASE WHEN a IS NULL OR b IS NULL OR len(a) = 0 OR len(b) = 0 OR a[-1] <> (CASE WHEN len(b) = 1 THEN b[1] ELSE b[-2] END) THEN NULL
         ELSE greatest(CASE WHEN len(a) > 2 THEN list_product(a[1:-3]) ELSE 1 END,
                       CASE WHEN len(b) > 2 THEN list_product(b[1:-3]) ELSE 1 END)
              * (CASE WHEN len(a) >= 2 THEN a[-2] ELSE 1 END) * (CASE WHEN len(b) >= 2 THEN b[-1] ELSE 1 END)
    END
);

-- attention forward FLOPs from q, k, v shapes: QK^T and PV, 2 * (q elements) * S * (1 + Ev/E);
-- S (keys) is k's dim -2 in the [B, H, S, E] layout of the sdpa ops, dim 1 in the [B, S, H, E] layout of flash/efficient
CREATE OR REPLACE MACRO attention_flops(q, k, v, seq_dim_from_end) AS (
    CASE WHEN q IS NULL OR k IS NULL OR v IS NULL OR len(q) < 3 OR len(k) <> len(q) OR len(v) <> len(q) OR q[-1] = 0 THEN NULL
         ELSE 2 * numel(q) * k[CASE WHEN seq_dim_from_end THEN -2 ELSE 2 END] * (1 + v[-1] / q[-1])
    END
);

-- FLOPs of one op from its family, input shapes d0..d3 and Concrete Inputs (other_args). Conventions:
-- a multiply-add is 2 FLOPs; a backward is 2x its forward (gradients of input and weight), except where
-- the inputs tell; norms 5 per element (mean, variance, normalize, scale, shift); softmax 5 per element;
-- elementwise 1 per output element (addcmul/addcdiv 2); embedding lookups 0 (a gather).
CREATE OR REPLACE MACRO op_flops_formula(family, name, d0, d1, d2, d3, other_args) AS (
    CASE family
        WHEN 'mm' THEN CASE WHEN len(d0) = 2 AND len(d1) = 2 AND d0[2] = d1[1] THEN 2 * d0[1] * d0[2] * d1[2] END
        WHEN 'addmm' THEN CASE WHEN len(d1) = 2 AND len(d2) = 2 AND d1[2] = d2[1] THEN 2 * d1[1] * d1[2] * d2[2] END
        WHEN 'bmm' THEN CASE WHEN len(d0) = 3 AND len(d1) = 3 AND d0[3] = d1[2] THEN 2 * d0[1] * d0[2] * d0[3] * d1[3] END
        WHEN 'baddbmm' THEN CASE WHEN len(d1) = 3 AND len(d2) = 3 AND d1[3] = d2[2] THEN 2 * d1[1] * d1[2] * d1[3] * d2[3] END
        WHEN 'matmul' THEN 2 * matmul_out_numel(d0, d1) * d0[-1]
        WHEN 'linear' THEN CASE WHEN len(d0) >= 1 AND len(d1) = 2 AND d0[-1] = d1[2] THEN 2 * numel(d0) * d1[1] END
        WHEN 'conv' THEN CASE WHEN coalesce(concrete_text(other_args, 6), 'False') NOT IN ('False', '')
                                   AND regexp_replace(name, '^aten::', '') IN ('convolution', '_convolution') THEN NULL  -- transposed
                              ELSE 2 * conv_out_numel(d0, d1, concrete_ints(other_args, 3), concrete_ints(other_args, 4),
                                                      concrete_ints(other_args, 5)) * conv_macs_per_out(d1) END
        WHEN 'conv_backward' THEN
            CASE regexp_replace(name, '^aten::', '')
                -- (grad_output, input, weight, ..., output_mask at 10): one conv per gradient asked for (input, weight)
                WHEN 'convolution_backward' THEN 2 * numel(d0) * conv_macs_per_out(d2)
                    * CASE WHEN concrete_text(other_args, 10) IS NULL THEN 2
                           ELSE len(list_filter(regexp_extract_all(concrete_text(other_args, 10), '(True|False)')[1:2],
                                                lambda m: m = 'True')) END
                WHEN 'cudnn_convolution_backward_input' THEN 2 * numel(d1) * conv_macs_per_out(d2)
                ELSE 2 * 2 * numel(d1) * conv_macs_per_out(d2)  -- (input, grad_output, weight, ...): input and weight gradients
            END
        WHEN 'sdpa' THEN attention_flops(d0, d1, d2, true)
        WHEN 'flash' THEN attention_flops(d0, d1, d2, false)
        WHEN 'sdpa_backward' THEN 2 * attention_flops(d1, d2, d3, true)
        WHEN 'flash_backward' THEN 2 * attention_flops(d1, d2, d3, false)
        WHEN 'norm' THEN 5 * numel(d0)
        WHEN 'norm_backward' THEN 10 * numel(d0)
        WHEN 'softmax' THEN 5 * numel(d0)
        WHEN 'softmax_backward' THEN 10 * numel(d0)
        WHEN 'embedding' THEN CASE WHEN d0 IS NOT NULL AND d1 IS NOT NULL THEN 0 END
        WHEN 'embedding_dense_backward' THEN numel(d0)
        WHEN 'elementwise' THEN CASE WHEN d0 IS NOT NULL THEN greatest(numel(d0), coalesce(numel(d1), 0)) END
        WHEN 'elementwise2' THEN CASE WHEN d0 IS NOT NULL THEN 2 * greatest(numel(d0), coalesce(numel(d1), 0), coalesce(numel(d2), 0)) END
    END
);

-- bytes an op must move at least (each input read once, the output written once), from the shapes and
-- the element size s of its main dtype; NULL when a shape is unknown
CREATE OR REPLACE MACRO op_bytes_formula(family, d0, d1, d2, d3, s) AS (
    s * CASE family
        WHEN 'mm' THEN numel(d0) + numel(d1) + d0[1] * d1[2]
        WHEN 'addmm' THEN numel(d0) + numel(d1) + numel(d2) + d1[1] * d2[2]
        WHEN 'bmm' THEN numel(d0) + numel(d1) + d0[1] * d0[2] * d1[3]
        WHEN 'baddbmm' THEN numel(d0) + numel(d1) + numel(d2) + d1[1] * d1[2] * d2[3]
        WHEN 'matmul' THEN numel(d0) + numel(d1) + matmul_out_numel(d0, d1)
        WHEN 'linear' THEN numel(d0) + numel(d1) + coalesce(numel(d2), 0) + numel(d0) / d0[-1] * d1[1]
        WHEN 'sdpa' THEN 2 * numel(d0) + numel(d1) + numel(d2)
        WHEN 'flash' THEN 2 * numel(d0) + numel(d1) + numel(d2)
        WHEN 'sdpa_backward' THEN 2 * (numel(d0) + numel(d1) + numel(d2) + numel(d3))
        WHEN 'flash_backward' THEN 2 * (numel(d0) + numel(d1) + numel(d2) + numel(d3))
        WHEN 'norm' THEN 2 * numel(d0)
        WHEN 'norm_backward' THEN 3 * numel(d0)
        WHEN 'softmax' THEN 2 * numel(d0)
        WHEN 'softmax_backward' THEN 3 * numel(d0)
        WHEN 'embedding' THEN 2 * numel(d1) * d0[-1]
        WHEN 'embedding_dense_backward' THEN 2 * numel(d0)
        WHEN 'elementwise' THEN numel(d0) + coalesce(numel(d1), 0) + CASE WHEN d0 IS NOT NULL THEN greatest(numel(d0), coalesce(numel(d1), 0)) END
        WHEN 'elementwise2' THEN numel(d0) + coalesce(numel(d1), 0) + coalesce(numel(d2), 0)
                                 + CASE WHEN d0 IS NOT NULL THEN greatest(numel(d0), coalesce(numel(d1), 0), coalesce(numel(d2), 0)) END
    END
);

-- an op's compute dtype class: that of its first floating-point input among the first three (addmm's bias, a backward's grad are the same dtype as its matrices)
CREATE OR REPLACE MACRO op_dtype_class(input_type) AS (
    coalesce(dtype_class(type_at(input_type, 0)), dtype_class(type_at(input_type, 1)), dtype_class(type_at(input_type, 2)))
);

-- the least time an op can take on a device (roofline): the longer of its FLOPs at the precision's peak and its bytes at the memory bandwidth, ns; NULL when either is unknown
CREATE OR REPLACE MACRO roofline_ns(flops, bytes, peak_tflops, hbm_gb_per_s) AS (
    greatest(flops / (peak_tflops * 1000), coalesce(bytes / hbm_gb_per_s, 0))
);
