//! FLOP formulas of operators (`op_flops`), from the shapes and dtypes torch.profiler records
//! with record_shapes=True. docs/efficiency.md explains each formula.

/// An operator's formula family (names with or without the 'aten::' prefix); None: no formula.
pub fn flop_family(name: &str) -> Option<&'static str> {
    let bare = name.strip_prefix("aten::").unwrap_or(name);
    Some(match bare {
        "mm" => "mm",
        "addmm" => "addmm",
        "bmm" => "bmm",
        "baddbmm" => "baddbmm",
        "matmul" => "matmul",
        "linear" => "linear",
        "conv1d" | "conv2d" | "conv3d" | "convolution" | "_convolution" => "conv",
        "convolution_backward"
        | "cudnn_convolution_backward"
        | "cudnn_convolution_backward_input"
        | "miopen_convolution_backward" => "conv_backward",
        "scaled_dot_product_attention"
        | "_scaled_dot_product_flash_attention"
        | "_scaled_dot_product_efficient_attention"
        | "_scaled_dot_product_cudnn_attention"
        | "_scaled_dot_product_flash_attention_for_cpu" => "sdpa",
        "_flash_attention_forward" | "_efficient_attention_forward" => "flash",
        "_scaled_dot_product_flash_attention_backward"
        | "_scaled_dot_product_efficient_attention_backward"
        | "_scaled_dot_product_cudnn_attention_backward" => "sdpa_backward",
        "_flash_attention_backward" | "_efficient_attention_backward" => "flash_backward",
        "layer_norm" | "native_layer_norm" | "rms_norm" | "_fused_rms_norm" | "batch_norm"
        | "native_batch_norm" | "cudnn_batch_norm" | "group_norm" | "native_group_norm" => "norm",
        "native_layer_norm_backward"
        | "native_batch_norm_backward"
        | "cudnn_batch_norm_backward"
        | "native_group_norm_backward"
        | "_fused_rms_norm_backward" => "norm_backward",
        "softmax" | "_softmax" | "log_softmax" | "_log_softmax" => "softmax",
        "_softmax_backward_data" | "_log_softmax_backward_data" => "softmax_backward",
        "embedding" => "embedding",
        "embedding_dense_backward" => "embedding_dense_backward",
        "add" | "add_" | "sub" | "sub_" | "mul" | "mul_" | "div" | "div_" | "relu" | "relu_"
        | "gelu" | "gelu_" | "silu" | "silu_" | "sigmoid" | "sigmoid_" | "tanh" | "tanh_"
        | "threshold_backward" | "gelu_backward" | "silu_backward" | "sigmoid_backward"
        | "tanh_backward" | "exp" | "exp_" | "neg" | "rsqrt" | "sqrt" | "pow" | "clamp_min"
        | "clamp_min_" | "where" => "elementwise",
        "addcmul" | "addcmul_" | "addcdiv" | "addcdiv_" => "elementwise2",
        _ => return None,
    })
}

use std::collections::HashMap;

use super::input::{at, text_at};
use super::out::Columns;
use super::sqlfn::{as_text, dtype_bytes, element, json, json_int};
use super::Inputs;

/// A shape as the formulas read it: a list of non-negative integers ([] for a scalar).
type Dims = Option<Vec<f64>>;

/// The i-th input's shape in an "Input Dims" text: a JSON array of non-negative JSON integers
/// (None when absent, not such a list, or a tensor list).
fn dims_at(parsed: &Option<serde_json::Value>, i: usize) -> Dims {
    element(parsed, i)?
        .as_array()?
        .iter()
        .map(|v| json_int(v).filter(|d| *d >= 0).map(|d| d as f64))
        .collect()
}

/// The 1-based i-th entry of a list, negative from the end (DuckDB's list[i]).
fn ix(d: &[f64], i: i64) -> Option<f64> {
    let n = d.len() as i64;
    let k = if i > 0 { i - 1 } else { n + i };
    (0..n).contains(&k).then(|| d[k as usize])
}

fn len(d: &Dims) -> Option<usize> {
    d.as_ref().map(Vec::len)
}

/// elements of a shape (1 for a scalar [])
fn numel(d: &Dims) -> Option<f64> {
    let d = d.as_ref()?;
    Some(if d.is_empty() {
        1.0
    } else {
        d.iter().fold(1.0, |acc, x| acc * x)
    })
}

/// list_product of a non-empty list (None for an empty one)
fn product(d: &[f64]) -> Option<f64> {
    (!d.is_empty()).then(|| d.iter().fold(1.0, |acc, x| acc * x))
}

/// greatest(): the largest of the known values
fn greatest(values: &[Option<f64>]) -> Option<f64> {
    values.iter().flatten().copied().reduce(f64::max)
}

/// "Concrete Inputs"[i] of an op's other args, as text
fn concrete_text(args: &Option<serde_json::Value>, i: usize) -> Option<String> {
    args.as_ref()?
        .get("Concrete Inputs")?
        .as_array()?
        .get(i)
        .and_then(as_text)
}

/// "Concrete Inputs"[i] as a list of integers ('[2, 2]')
fn concrete_ints(args: &Option<serde_json::Value>, i: usize) -> Option<Vec<i64>> {
    let text = concrete_text(args, i)?;
    super::sqlfn::int_list(&serde_json::from_str(&text).ok()?)
}

/// Output elements of a convolution: x [N, C, *spatial], w [Cout, Cin/groups, *kernel],
/// stride s, padding p, dilation dl (one value per spatial dim, or one for all).
fn conv_out_numel(
    x: &Dims,
    w: &Dims,
    s: &Option<Vec<i64>>,
    p: &Option<Vec<i64>>,
    dl: &Option<Vec<i64>>,
) -> Option<f64> {
    let (x, w, s, p, dl) = (
        x.as_ref()?,
        w.as_ref()?,
        s.as_ref()?,
        p.as_ref()?,
        dl.as_ref()?,
    );
    if x.len() < 3 || w.len() != x.len() || s.is_empty() || p.is_empty() || dl.is_empty() {
        return None;
    }
    let pick = |v: &[i64], j: usize| v[j.min(v.len()) - 1];
    let spatial: Vec<f64> = (1..x.len() - 1)
        .map(|j| {
            let inner =
                (x[j + 1] + 2.0 * pick(p, j) as f64 - pick(dl, j) as f64 * (w[j + 1] - 1.0) - 1.0)
                    / (pick(s, j).max(1)) as f64;
            f64::max(0.0, inner.floor() + 1.0)
        })
        .collect();
    Some(x[0] * w[0] * product(&spatial)?)
}

/// multiply-adds per output element of a convolution: prod(w[1:])
fn conv_macs_per_out(w: &Dims) -> Option<f64> {
    let w = w.as_ref()?;
    if w.len() < 3 {
        return None;
    }
    product(&w[1..])
}

/// output elements of matmul(a, b) with broadcasting batch dims
fn matmul_out_numel(a: &Dims, b: &Dims) -> Option<f64> {
    let (a, b) = (a.as_ref()?, b.as_ref()?);
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let inner_b = if b.len() == 1 { ix(b, 1) } else { ix(b, -2) };
    if ix(a, -1)? != inner_b? {
        return None;
    }
    let batch = |d: &[f64]| {
        if d.len() > 2 {
            product(&d[..d.len() - 2])
        } else {
            Some(1.0)
        }
    };
    let rows = if a.len() >= 2 { ix(a, -2)? } else { 1.0 };
    let cols = if b.len() >= 2 { ix(b, -1)? } else { 1.0 };
    Some(greatest(&[batch(a), batch(b)])? * rows * cols)
}

/// attention forward FLOPs from q, k, v: 2 * numel(q) * S * (1 + Ev/E), S at dim -2 (sdpa's
/// [B, H, S, E]) or 2 (flash's [B, S, H, E])
fn attention_flops(q: &Dims, k: &Dims, v: &Dims, seq_dim_from_end: bool) -> Option<f64> {
    let (qd, kd, vd) = (q.as_ref()?, k.as_ref()?, v.as_ref()?);
    if qd.len() < 3 || kd.len() != qd.len() || vd.len() != qd.len() || ix(qd, -1)? == 0.0 {
        return None;
    }
    let s = ix(kd, if seq_dim_from_end { -2 } else { 2 })?;
    Some(2.0 * numel(q)? * s * (1.0 + ix(vd, -1)? / ix(qd, -1)?))
}

fn bare(name: &str) -> &str {
    name.strip_prefix("aten::").unwrap_or(name)
}

/// FLOPs of one op from its family, input shapes and Concrete Inputs. A multiply-add is 2; a
/// backward is 2x its forward (gradients of input and weight) unless its inputs tell; norms and
/// softmax 5 per element; elementwise 1 per output element (addcmul / addcdiv 2); embedding
/// lookups 0.
fn flops_of(
    family: &str,
    name: &str,
    d: &[Dims; 4],
    args: &Option<serde_json::Value>,
) -> Option<f64> {
    let [d0, d1, d2, d3] = d;
    let dd = |x: &Dims, i: i64| x.as_ref().and_then(|v| ix(v, i));
    match family {
        "mm" => (len(d0)? == 2 && len(d1)? == 2 && dd(d0, 2)? == dd(d1, 1)?)
            .then(|| Some(2.0 * dd(d0, 1)? * dd(d0, 2)? * dd(d1, 2)?))?,
        "addmm" => (len(d1)? == 2 && len(d2)? == 2 && dd(d1, 2)? == dd(d2, 1)?)
            .then(|| Some(2.0 * dd(d1, 1)? * dd(d1, 2)? * dd(d2, 2)?))?,
        "bmm" => (len(d0)? == 3 && len(d1)? == 3 && dd(d0, 3)? == dd(d1, 2)?)
            .then(|| Some(2.0 * dd(d0, 1)? * dd(d0, 2)? * dd(d0, 3)? * dd(d1, 3)?))?,
        "baddbmm" => (len(d1)? == 3 && len(d2)? == 3 && dd(d1, 3)? == dd(d2, 2)?)
            .then(|| Some(2.0 * dd(d1, 1)? * dd(d1, 2)? * dd(d1, 3)? * dd(d2, 3)?))?,
        "matmul" => Some(2.0 * matmul_out_numel(d0, d1)? * dd(d0, -1)?),
        "linear" => (len(d0)? >= 1 && len(d1)? == 2 && dd(d0, -1)? == dd(d1, 2)?)
            .then(|| Some(2.0 * numel(d0)? * dd(d1, 1)?))?,
        "conv" => {
            let transposed = !matches!(
                concrete_text(args, 6).as_deref().unwrap_or("False"),
                "False" | ""
            );
            if transposed && matches!(bare(name), "convolution" | "_convolution") {
                return None;
            }
            let out = conv_out_numel(
                d0,
                d1,
                &concrete_ints(args, 3),
                &concrete_ints(args, 4),
                &concrete_ints(args, 5),
            );
            Some(2.0 * out? * conv_macs_per_out(d1)?)
        }
        "conv_backward" => match bare(name) {
            // (grad_output, input, weight, ..., output_mask at 10): one conv per gradient asked for
            "convolution_backward" => {
                let asked = match concrete_text(args, 10) {
                    None => 2.0,
                    Some(mask) => {
                        let words = regex::Regex::new("(True|False)").expect("a pattern");
                        words
                            .find_iter(&mask)
                            .take(2)
                            .filter(|m| m.as_str() == "True")
                            .count() as f64
                    }
                };
                Some(2.0 * numel(d0)? * conv_macs_per_out(d2)? * asked)
            }
            "cudnn_convolution_backward_input" => Some(2.0 * numel(d1)? * conv_macs_per_out(d2)?),
            _ => Some(2.0 * 2.0 * numel(d1)? * conv_macs_per_out(d2)?),
        },
        "sdpa" => attention_flops(d0, d1, d2, true),
        "flash" => attention_flops(d0, d1, d2, false),
        "sdpa_backward" => Some(2.0 * attention_flops(d1, d2, d3, true)?),
        "flash_backward" => Some(2.0 * attention_flops(d1, d2, d3, false)?),
        "norm" | "softmax" => Some(5.0 * numel(d0)?),
        "norm_backward" | "softmax_backward" => Some(10.0 * numel(d0)?),
        "embedding" => (d0.is_some() && d1.is_some()).then_some(0.0),
        "embedding_dense_backward" => numel(d0),
        "elementwise" => {
            d0.as_ref()?;
            greatest(&[numel(d0), Some(numel(d1).unwrap_or(0.0))])
        }
        "elementwise2" => {
            d0.as_ref()?;
            Some(
                2.0 * greatest(&[
                    numel(d0),
                    Some(numel(d1).unwrap_or(0.0)),
                    Some(numel(d2).unwrap_or(0.0)),
                ])?,
            )
        }
        _ => None,
    }
}

/// Bytes an op must move at least (inputs read once, the output written once) at `s` bytes
/// an element.
fn op_bytes(family: &str, d: &[Dims; 4], s: Option<i64>) -> Option<f64> {
    let [d0, d1, d2, d3] = d;
    let dd = |x: &Dims, i: i64| x.as_ref().and_then(|v| ix(v, i));
    let n = numel;
    let or0 = |x: &Dims| numel(x).unwrap_or(0.0);
    let elements = match family {
        "mm" => n(d0)? + n(d1)? + dd(d0, 1)? * dd(d1, 2)?,
        "addmm" => n(d0)? + n(d1)? + n(d2)? + dd(d1, 1)? * dd(d2, 2)?,
        "bmm" => n(d0)? + n(d1)? + dd(d0, 1)? * dd(d0, 2)? * dd(d1, 3)?,
        "baddbmm" => n(d0)? + n(d1)? + n(d2)? + dd(d1, 1)? * dd(d1, 2)? * dd(d2, 3)?,
        "matmul" => n(d0)? + n(d1)? + matmul_out_numel(d0, d1)?,
        "linear" => n(d0)? + n(d1)? + or0(d2) + n(d0)? / dd(d0, -1)? * dd(d1, 1)?,
        "sdpa" | "flash" => 2.0 * n(d0)? + n(d1)? + n(d2)?,
        "sdpa_backward" | "flash_backward" => 2.0 * (n(d0)? + n(d1)? + n(d2)? + n(d3)?),
        "norm" | "softmax" => 2.0 * n(d0)?,
        "norm_backward" | "softmax_backward" => 3.0 * n(d0)?,
        "embedding" => 2.0 * n(d1)? * dd(d0, -1)?,
        "embedding_dense_backward" => 2.0 * n(d0)?,
        "elementwise" => n(d0)? + or0(d1) + greatest(&[n(d0), Some(or0(d1))])?,
        "elementwise2" => {
            n(d0)? + or0(d1) + or0(d2) + greatest(&[n(d0), Some(or0(d1)), Some(or0(d2))])?
        }
        _ => return None,
    };
    Some(s? as f64 * elements)
}

/// TRY_CAST(double AS BIGINT): rounded half to even; None when not finite or out of range.
fn to_i64(v: Option<f64>) -> Option<i64> {
    let r = v?.round_ties_even();
    // (-2^63 and 2^63, both exact as f64)
    (r.is_finite() && (i64::MIN as f64..-(i64::MIN as f64)).contains(&r)).then_some(r as i64)
}

/// The precision class peaks are quoted for: fp64, fp32, fp16, bf16, fp8 (None: integers,
/// bool, unknown).
pub fn dtype_class(dtype: Option<&str>) -> Option<&'static str> {
    let d = dtype.unwrap_or("");
    let d = ["c10::", "at::", "torch."]
        .iter()
        .find_map(|p| d.strip_prefix(p))
        .unwrap_or(d);
    Some(match super::sqlfn::lower(d).as_str() {
        "double" | "float64" => "fp64",
        "float" | "float32" => "fp32",
        "half" | "float16" => "fp16",
        "bfloat16" => "bf16",
        "float8_e4m3fn" | "float8_e5m2" | "float8_e4m3fnuz" | "float8_e5m2fnuz" => "fp8",
        _ => return None,
    })
}

struct OpRow<'a> {
    ts_ns: Option<i64>,
    dur_ns: Option<i64>,
    name: Option<&'a str>,
    tid: Option<&'a str>,
    external_id: Option<i64>,
    family: Option<&'static str>,
    dtype: Option<&'static str>,
    flops: Option<i64>,
    bytes: Option<i64>,
    kernel_ns: Option<i64>,
    kernel_count: i64,
    kernel_step: Option<i64>,
}

/// `op_flops`: one row per outermost op with a FLOP formula (inside no other formula op of
/// its thread: the outer one counts them), with the GPU time of the compute kernels launched
/// on its thread while it ran; and per op that launched compute kernels outside every formula
/// op (by External id; flops unknown).
pub fn op_flops(x: &Inputs) -> Columns {
    // (the host ops are cpu_ops' rows: the raw events' complete cpu_op / Operator events, in the
    // same order; the convolutions' other args come from the raw events, the n-th such op's)
    let (e, c) = (&x.raw, &x.cpu_ops);
    let conv =
        |name: Option<&str>| matches!(name.and_then(flop_family), Some("conv" | "conv_backward"));
    let raw_conv: Vec<usize> = (0..e.name.len())
        .filter(|&i| super::tables::is_host_op(x, i) && conv(text_at(&e.name, i)))
        .collect();
    let mut args_row: HashMap<usize, usize> = HashMap::new();
    let mut next_raw = raw_conv.iter();
    for i in 0..c.name.len() {
        if conv(text_at(&c.name, i)) {
            if let Some(&r) = next_raw.next() {
                args_row.insert(i, r);
            }
        }
    }
    // the formula ops, in (start, end desc, tid, pid, external id, name) order
    struct Op {
        row: usize,
        family: &'static str,
        ts: i64,
        end: i64,
    }
    let mut ops: Vec<Op> = (0..c.name.len())
        .filter_map(|i| {
            let family = flop_family(text_at(&c.name, i)?)?;
            let ts = at(&c.ts_ns, i)?;
            Some(Op {
                row: i,
                family,
                ts,
                end: ts.saturating_add(at(&c.dur_ns, i)?),
            })
        })
        .collect();
    fn last(v: Option<&str>) -> (bool, Option<&str>) {
        (v.is_none(), v)
    }
    // (the key ends with the row: a total order, so the sort needs no stable scratch copy)
    ops.sort_unstable_by(|a, b| {
        let key = |o: &Op| {
            (
                o.ts,
                std::cmp::Reverse(o.end),
                last(text_at(&c.tid, o.row)),
                last(text_at(&c.pid, o.row)),
                (
                    at(&c.external_id, o.row).is_none(),
                    at(&c.external_id, o.row),
                ),
                last(text_at(&c.name, o.row)),
                o.row,
            )
        };
        key(a).cmp(&key(b))
    });
    // outermost: no formula op of its thread before it (in that order) ends at or after its end
    let mut reach: HashMap<(Option<&str>, Option<&str>), i64> = HashMap::new();
    let mut outer: Vec<&Op> = Vec::new();
    for o in &ops {
        let key = (text_at(&c.pid, o.row), text_at(&c.tid, o.row));
        let before = reach.get(&key).copied();
        if before.is_none_or(|b| b < o.end) {
            outer.push(o);
        }
        let r = reach.entry(key).or_insert(i64::MIN);
        *r = (*r).max(o.end);
    }
    // compute kernels with their launching call's thread and start (the min of each by correlation)
    let r = &x.runtime;
    let k = &x.kernels;
    let compute: Vec<usize> = (0..k.kind.len())
        .filter(|&i| text_at(&k.kind, i) == Some("compute"))
        .collect();
    let wanted: std::collections::HashSet<i64> = compute
        .iter()
        .filter_map(|&i| at(&k.correlation, i))
        .collect();
    // the launching calls of those: by correlation, the smallest thread and the earliest start
    let mut calls: HashMap<i64, (Option<&str>, i64)> = HashMap::with_capacity(wanted.len());
    for i in 0..r.ts_ns.len() {
        let (Some(c), Some(ts)) = (at(&r.correlation, i), at(&r.ts_ns, i)) else {
            continue;
        };
        if !wanted.contains(&c) {
            continue;
        }
        let tid = text_at(&r.tid, i);
        let entry = calls.entry(c).or_insert((tid, ts));
        if let Some(t) = tid {
            if entry.0.is_none_or(|old| t < old) {
                entry.0 = Some(t);
            }
        }
        entry.1 = entry.1.min(ts);
    }
    // (kernel row, its launching thread, launch start)
    let launches: Vec<(usize, Option<&str>, i64)> = compute
        .iter()
        .filter_map(|&i| {
            let call = calls.get(&at(&k.correlation, i)?)?;
            Some((i, call.0, call.1))
        })
        .collect();
    // the outer ops of each thread, in runs of overlapping (or touching) ones
    let mut by_thread: HashMap<&str, Vec<usize>> = HashMap::new();
    for (n, o) in outer.iter().enumerate() {
        if let Some(t) = text_at(&c.tid, o.row) {
            by_thread.entry(t).or_default().push(n);
        }
    }
    // (start, end, members) of each thread's runs of overlapping ops
    type Island = (i64, i64, Vec<usize>);
    let mut islands: HashMap<&str, Vec<Island>> = HashMap::new();
    for (tid, members) in by_thread.iter_mut() {
        members.sort_by_key(|&n| (outer[n].ts, outer[n].end, n));
        let mut runs: Vec<Island> = Vec::new();
        for &n in members.iter() {
            let o = outer[n];
            match runs.last_mut() {
                Some(run) if o.ts <= run.1 => {
                    run.1 = run.1.max(o.end);
                    run.2.push(n);
                }
                _ => runs.push((o.ts, o.end, vec![n])),
            }
        }
        islands.insert(tid, runs);
    }
    let mut owned_ns: Vec<i128> = vec![0; outer.len()];
    let mut owned_count: Vec<i64> = vec![0; outer.len()];
    let mut owned = vec![false; launches.len()];
    for (l, (ki, tid, launch)) in launches.iter().enumerate() {
        let Some(runs) = tid.as_deref().and_then(|t| islands.get(t)) else {
            continue;
        };
        let Some(j) = runs.partition_point(|run| run.0 <= *launch).checked_sub(1) else {
            continue;
        };
        let run = &runs[j];
        if *launch > run.1 {
            continue;
        }
        for &n in &run.2 {
            if outer[n].ts <= *launch && *launch <= outer[n].end {
                owned_ns[n] += at(&k.dur_ns, *ki).unwrap_or(0) as i128;
                owned_count[n] += 1;
                owned[l] = true;
            }
        }
    }
    let mut rows: Vec<OpRow> = outer
        .iter()
        .enumerate()
        .map(|(n, o)| {
            let i = o.row;
            let dims = json(text_at(&c.input_dims, i));
            let types = json(text_at(&c.input_type, i));
            // (other args only where a formula reads them: the convolutions' Concrete Inputs)
            let args = args_row
                .get(&i)
                .and_then(|&r| json(text_at(&e.other_args, r)));
            let d = [
                dims_at(&dims, 0),
                dims_at(&dims, 1),
                dims_at(&dims, 2),
                dims_at(&dims, 3),
            ];
            let type_at = |j: usize| element(&types, j).and_then(as_text);
            let name = text_at(&c.name, i).unwrap_or("");
            let size = dtype_bytes(
                type_at(if matches!(o.family, "addmm" | "baddbmm") {
                    1
                } else {
                    0
                })
                .as_deref(),
            );
            OpRow {
                ts_ns: Some(o.ts),
                dur_ns: at(&c.dur_ns, i),
                name: text_at(&c.name, i),
                tid: text_at(&c.tid, i),
                external_id: at(&c.external_id, i),
                family: Some(o.family),
                dtype: (0..3).find_map(|j| dtype_class(type_at(j).as_deref())),
                flops: to_i64(flops_of(o.family, name, &d, &args)),
                bytes: to_i64(op_bytes(o.family, &d, size)),
                kernel_ns: (owned_count[n] > 0).then(|| owned_ns[n] as i64),
                kernel_count: owned_count[n],
                kernel_step: None,
            }
        })
        .collect();
    // compute kernels launched outside every formula op: by the op that launched them
    let mut unowned: Vec<(Option<i64>, Option<i64>, i128, i64)> = Vec::new(); // external id, step, ns, count
    let mut slot: HashMap<Option<i64>, usize> = HashMap::new();
    for (l, (ki, _, _)) in launches.iter().enumerate() {
        if owned[l] {
            continue;
        }
        let id = at(&k.external_id, *ki);
        let s = *slot.entry(id).or_insert_with(|| {
            unowned.push((id, None, 0, 0));
            unowned.len() - 1
        });
        let u = &mut unowned[s];
        u.1 = match (u.1, at(&k.step, *ki)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        u.2 += at(&k.dur_ns, *ki).unwrap_or(0) as i128;
        u.3 += 1;
    }
    let c = &x.cpu_ops;
    let mut launching: HashMap<i64, usize> = HashMap::new(); // the earliest op of each External id
    for i in 0..c.name.len() {
        let (Some(id), Some(ts)) = (at(&c.external_id, i), at(&c.ts_ns, i)) else {
            continue;
        };
        if !slot.contains_key(&Some(id)) {
            continue;
        }
        match launching.get(&id) {
            Some(&j) if at(&c.ts_ns, j) <= Some(ts) => {}
            _ => {
                launching.insert(id, i);
            }
        }
    }
    for (id, step, ns, count) in unowned {
        let op = id.and_then(|id| launching.get(&id)).copied();
        rows.push(OpRow {
            ts_ns: op.and_then(|i| at(&c.ts_ns, i)),
            dur_ns: op.and_then(|i| at(&c.dur_ns, i)),
            name: op.and_then(|i| text_at(&c.name, i)),
            tid: op.and_then(|i| text_at(&c.tid, i)),
            external_id: id,
            family: None,
            dtype: None,
            flops: None,
            bytes: None,
            kernel_ns: i64::try_from(ns).ok(),
            kernel_count: count,
            kernel_step: step,
        });
    }
    fn order<'a>(r: &OpRow<'a>) -> (bool, Option<i64>, bool, Option<i64>, bool, Option<&'a str>) {
        (
            r.ts_ns.is_none(),
            r.ts_ns,
            r.external_id.is_none(),
            r.external_id,
            r.name.is_none(),
            r.name,
        )
    }
    rows.sort_by(|a, b| order(a).cmp(&order(b)));
    let steps = &x.steps;
    Columns::default()
        .i32("rank", rows.iter().map(|_| Some(x.rank)))
        .i64(
            "step",
            rows.iter()
                .map(|r| steps.holding(r.ts_ns).or(r.kernel_step)),
        )
        .i64("ts_ns", rows.iter().map(|r| r.ts_ns))
        .i64("dur_ns", rows.iter().map(|r| r.dur_ns))
        .text("name", rows.iter().map(|r| r.name))
        .text("tid", rows.iter().map(|r| r.tid))
        .i64("external_id", rows.iter().map(|r| r.external_id))
        .text("family", rows.iter().map(|r| r.family))
        .text("dtype", rows.iter().map(|r| r.dtype))
        .i64("flops", rows.iter().map(|r| r.flops))
        .i64("bytes", rows.iter().map(|r| r.bytes))
        .i64("kernel_ns", rows.iter().map(|r| r.kernel_ns))
        .i64("kernel_count", rows.iter().map(|r| Some(r.kernel_count)))
        .f64(
            "tflops",
            rows.iter().map(|r| {
                let ns = r.kernel_ns.filter(|n| *n > 0)?;
                Some(r.flops? as f64 / ns as f64 / 1000.0)
            }),
        )
}
