//! The derived tables that are one rank's rows picked and read: `memcpy`, `main_threads`,
//! `memory`, `all_to_all_calls`, `step_batches`. Each function states its table's rules.

use std::collections::HashMap;

use arrow_array::Array;

use super::input::{at, flag_at, text_at};
use super::out::Columns;
use super::sqlfn::{
    as_text, collective_op, dtype_bytes, element, int_list, json, json_int, product,
};
use super::Inputs;
use crate::columns::is_step_mark;

pub use super::flops::flop_family;

/// The host calls of an all-to-all (all_to_all_single, the list form).
pub const ALL_TO_ALL_CALLS: &[&str] = &["c10d::alltoall_base_", "c10d::alltoall_"];

fn memcpy_pattern(p: &str) -> regex::Regex {
    regex::Regex::new(p).expect("a pattern")
}

/// `memcpy`: the kernels rows of kind 'memcpy', with the direction and the memory kinds their
/// name writes ('Memcpy HtoD (Pageable -> Device)'), and the bandwidth.
pub fn memcpy(x: &Inputs) -> Columns {
    let k = &x.kernels;
    let rows: Vec<usize> = (0..k.kind.len())
        .filter(|&i| text_at(&k.kind, i) == Some("memcpy"))
        .collect();
    let (direction, src, dst) = (
        memcpy_pattern("(HtoD|DtoH|DtoD|HtoH|PtoP|DtoA|AtoD)"),
        memcpy_pattern(r"\(([0-9A-Za-z_]+) ->"),
        memcpy_pattern(r"-> ([0-9A-Za-z_]+)\)"),
    );
    let group = |re: &regex::Regex, i: usize| {
        let name = text_at(&k.name, i)?;
        Some(re.captures(name)?.get(1)?.as_str().to_owned())
    };
    Columns::default()
        .i32("rank", rows.iter().map(|_| Some(x.rank)))
        .i64("step", rows.iter().map(|&i| at(&k.step, i)))
        .text("name", rows.iter().map(|&i| text_at(&k.name, i)))
        .text("direction", rows.iter().map(|&i| group(&direction, i)))
        .text("src_memory", rows.iter().map(|&i| group(&src, i)))
        .text("dst_memory", rows.iter().map(|&i| group(&dst, i)))
        .i32("device", rows.iter().map(|&i| at(&k.device, i)))
        .i64("stream", rows.iter().map(|&i| at(&k.stream, i)))
        .i64("ts_ns", rows.iter().map(|&i| at(&k.ts_ns, i)))
        .i64("dur_ns", rows.iter().map(|&i| at(&k.dur_ns, i)))
        .i64("end_ns", rows.iter().map(|&i| at(&k.end_ns, i)))
        .i64("copy_bytes", rows.iter().map(|&i| at(&k.copy_bytes, i)))
        .f64(
            "gb_per_s",
            rows.iter().map(|&i| {
                let dur = at(&k.dur_ns, i).filter(|d| *d > 0)?;
                Some(at(&k.copy_bytes, i)? as f64 / dur as f64)
            }),
        )
}

/// The training-loop thread: the thread that records the most ProfilerStep#N marks (ties:
/// the smallest tid), else the CPU thread with the most op time; None when neither.
pub fn main_thread(x: &Inputs) -> Option<String> {
    let e = &x.raw;
    let mut marks: HashMap<Option<&str>, i64> = HashMap::new();
    for i in 0..e.name.len() {
        let is_mark = text_at(&e.ph, i) == Some("X")
            && text_at(&e.name, i).is_some_and(is_step_mark)
            && text_at(&e.cat, i) != Some("gpu_user_annotation");
        if is_mark {
            *marks.entry(text_at(&e.tid, i)).or_default() += 1;
        }
    }
    // (first(tid ORDER BY n DESC, tid): a NULL tid sorts last, and then gives no thread)
    let first = |counts: Vec<(Option<&str>, i128)>| -> Option<Option<String>> {
        counts
            .into_iter()
            .min_by(|a, b| {
                b.1.cmp(&a.1)
                    .then((a.0.is_none(), a.0).cmp(&(b.0.is_none(), b.0)))
            })
            .map(|(tid, _)| tid.map(str::to_owned))
    };
    let marked = first(marks.into_iter().map(|(t, n)| (t, n as i128)).collect()).flatten();
    if marked.is_some() {
        return marked;
    }
    let c = &x.cpu_ops;
    let mut busy: HashMap<Option<&str>, i128> = HashMap::new();
    for i in 0..c.name.len() {
        *busy.entry(text_at(&c.tid, i)).or_default() += at(&c.dur_ns, i).unwrap_or(0) as i128;
    }
    first(busy.into_iter().collect()).flatten()
}

pub fn main_threads(rank: i32, tid: Option<&str>) -> Columns {
    Columns::default()
        .i32("rank", [Some(rank)])
        .text("tid", [tid])
}

/// `memory`: the allocator's events ('[memory]' instants with a time), each with its bytes
/// (args.Bytes, else the change of Total Allocated since the device's previous event), whether
/// it happened inside a collective call of its thread, and whether an allocation is freed in
/// the trace (a free of its address follows before the address is handed out again).
pub fn memory(x: &Inputs) -> Columns {
    let e = &x.raw;
    let rows: Vec<usize> = (0..e.name.len())
        .filter(|&i| text_at(&e.name, i) == Some("[memory]") && e.ts_ns.is_valid(i))
        .collect();
    let ts = |i: usize| at(&e.ts_ns, i).unwrap_or(0);
    // bytes: args.Bytes, else Total Allocated less the device's previous event's
    let mut by_device: HashMap<(Option<i32>, Option<i32>), Vec<usize>> = HashMap::new();
    for (k, &i) in rows.iter().enumerate() {
        by_device
            .entry((at(&e.device_type, i), at(&e.device_id, i)))
            .or_default()
            .push(k);
    }
    let mut bytes: Vec<Option<i64>> = rows.iter().map(|&i| at(&e.bytes, i)).collect();
    for members in by_device.values_mut() {
        members.sort_by_key(|&k| (ts(rows[k]), k));
        for w in 1..members.len() {
            let (prev, k) = (rows[members[w - 1]], members[w]);
            if bytes[k].is_none() {
                bytes[k] = at(&e.total_allocated_bytes, rows[k])
                    .zip(at(&e.total_allocated_bytes, prev))
                    .and_then(|(now, before)| now.checked_sub(before));
            }
        }
    }
    // the next event's bytes at the same address of the device
    type Address<'a> = (Option<i32>, Option<i32>, Option<&'a str>); // (device type, device, address)
    let mut by_addr: HashMap<Address, Vec<usize>> = HashMap::new();
    for (k, &i) in rows.iter().enumerate() {
        by_addr
            .entry((
                at(&e.device_type, i),
                at(&e.device_id, i),
                text_at(&e.addr, i),
            ))
            .or_default()
            .push(k);
    }
    let mut next_bytes: Vec<Option<i64>> = vec![None; rows.len()];
    for members in by_addr.values_mut() {
        members.sort_by_key(|&k| (ts(rows[k]), k));
        for w in 1..members.len() {
            next_bytes[members[w - 1]] = bytes[members[w]];
        }
    }
    // the collective calls of each thread: start order, the latest end so far
    let mut calls: HashMap<&str, Vec<(i64, i64)>> = HashMap::new();
    let c = &x.cpu_ops;
    for i in 0..c.name.len() {
        let Some(name) = text_at(&c.name, i) else {
            continue;
        };
        if name.starts_with("c10d::") || name == "record_param_comms" {
            if let (Some(tid), Some(t), Some(end)) =
                (text_at(&c.tid, i), at(&c.ts_ns, i), at(&c.end_ns, i))
            {
                calls.entry(tid).or_default().push((t, end));
            }
        }
    }
    let a = &x.annotations;
    for i in 0..a.name.len() {
        let Some(name) = text_at(&a.name, i) else {
            continue;
        };
        if flag_at(&a.on_gpu, i) == Some(false)
            && (name.starts_with("gloo:") || name.starts_with("nccl:"))
        {
            if let (Some(tid), Some(t), Some(end)) =
                (text_at(&a.tid, i), at(&a.ts_ns, i), at(&a.end_ns, i))
            {
                calls.entry(tid).or_default().push((t, end));
            }
        }
    }
    for spans in calls.values_mut() {
        spans.sort_unstable();
        let mut reach = i64::MIN;
        for s in spans.iter_mut() {
            reach = reach.max(s.1);
            s.1 = reach;
        }
    }
    let in_call = |i: usize| {
        let (Some(tid), t) = (text_at(&e.tid, i), ts(i)) else {
            return false;
        };
        let Some(spans) = calls.get(tid) else {
            return false;
        };
        let k = spans.partition_point(|s| s.0 <= t);
        k > 0 && t <= spans[k - 1].1
    };
    Columns::default()
        .i32("rank", rows.iter().map(|_| Some(x.rank)))
        .i64(
            "step",
            rows.iter().map(|&i| x.steps.holding(at(&e.ts_ns, i))),
        )
        .i64("ts_ns", rows.iter().map(|&i| at(&e.ts_ns, i)))
        .text(
            "device_kind",
            rows.iter().map(|&i| {
                Some(match at(&e.device_type, i) {
                    Some(0) => "cpu".to_owned(),
                    Some(1) => "cuda".to_owned(),
                    Some(other) => other.to_string(),
                    None => "unknown".to_owned(),
                })
            }),
        )
        .i32("device_id", rows.iter().map(|&i| at(&e.device_id, i)))
        .text("tid", rows.iter().map(|&i| text_at(&e.tid, i)))
        .text("addr", rows.iter().map(|&i| text_at(&e.addr, i)))
        .i64("alloc_bytes", bytes.iter().copied())
        .i64(
            "total_allocated_bytes",
            rows.iter().map(|&i| at(&e.total_allocated_bytes, i)),
        )
        .i64(
            "total_reserved_bytes",
            rows.iter().map(|&i| at(&e.total_reserved_bytes, i)),
        )
        .flag("in_collective", rows.iter().map(|&i| Some(in_call(i))))
        .flag(
            "freed_in_trace",
            (0..rows.len()).map(|k| {
                bytes[k]
                    .filter(|b| *b > 0)
                    .map(|_| next_bytes[k].is_some_and(|n| n < 0))
            }),
        )
}

/// A host op of the raw events: a complete cpu_op / Operator event with a time and a
/// duration >= 0 (the rows of cpu_ops).
pub fn is_host_op(x: &Inputs, i: usize) -> bool {
    let e = &x.raw;
    text_at(&e.ph, i) == Some("X")
        && matches!(text_at(&e.cat, i), Some("cpu_op" | "Operator"))
        && e.ts_ns.is_valid(i)
        && at(&e.dur_ns, i).is_some_and(|d| d >= 0)
}

/// A list of split sizes: a JSON array of integers, or a text holding one.
fn splits(v: Option<&serde_json::Value>) -> Option<Vec<i64>> {
    let v = v?;
    let list = match v {
        serde_json::Value::String(s) => int_list(&serde_json::from_str(s).ok()?),
        other => int_list(other),
    }?;
    (!list.is_empty() && list.iter().all(|&s| s >= 0)).then_some(list)
}

/// `all_to_all_calls`: the host calls of all_to_all / all_to_all_single with what the rank
/// sends and receives: c10d::alltoall_base_ / alltoall_ (Input Dims [output, input, ...], split
/// sizes in Concrete Inputs [.., .., .., output splits, input splits]) and record_param_comms
/// of an all_to_all (In / Out msg nelems, "In split size" / "Out split size").
pub fn all_to_all_calls(x: &Inputs) -> Columns {
    let e = &x.raw;
    let mut rows: Vec<usize> = (0..e.name.len())
        .filter(|&i| {
            is_host_op(x, i)
                && match text_at(&e.name, i) {
                    Some(n) if ALL_TO_ALL_CALLS.contains(&n) => true,
                    Some("record_param_comms") => {
                        collective_op(text_at(&e.collective_name, i)).as_deref()
                            == Some("all_to_all")
                    }
                    _ => false,
                }
        })
        .collect();
    let end = |i: usize| {
        at(&e.ts_ns, i)
            .zip(at(&e.dur_ns, i))
            .map(|(t, d)| t.saturating_add(d))
    };
    rows.sort_by(|&a, &b| {
        (at(&e.ts_ns, a), end(a), text_at(&e.name, a)).cmp(&(
            at(&e.ts_ns, b),
            end(b),
            text_at(&e.name, b),
        ))
    });
    let param = |i: usize| text_at(&e.name, i) == Some("record_param_comms");
    let tensor_bytes = |i: usize, which: usize| {
        let dims = json(text_at(&e.input_dims, i));
        let types = json(text_at(&e.input_type, i));
        let n = product(&element(&dims, which).and_then(int_list)?)?;
        n.checked_mul(dtype_bytes(
            element(&types, which).and_then(as_text).as_deref(),
        )?)
    };
    let nelems_bytes =
        |n: Option<i64>, i: usize| n?.checked_mul(dtype_bytes(text_at(&e.dtype, i))?);
    let send = |i: usize| {
        if param(i) {
            nelems_bytes(at(&e.in_msg_nelems, i), i)
        } else {
            tensor_bytes(i, 1)
        }
        .filter(|b| *b >= 0)
    };
    let recv = |i: usize| {
        if param(i) {
            nelems_bytes(at(&e.out_msg_nelems, i), i)
        } else {
            tensor_bytes(i, 0)
        }
        .filter(|b| *b >= 0)
    };
    let split = |i: usize, key: &str, index: usize| {
        let args = json(text_at(&e.other_args, i))?;
        if param(i) {
            splits(args.get(key))
        } else {
            splits(args.get("Concrete Inputs")?.as_array()?.get(index))
        }
    };
    let send_splits: Vec<Option<Vec<i64>>> =
        rows.iter().map(|&i| split(i, "In split size", 4)).collect();
    let recv_splits: Vec<Option<Vec<i64>>> = rows
        .iter()
        .map(|&i| split(i, "Out split size", 3))
        .collect();
    Columns::default()
        .i32("rank", rows.iter().map(|_| Some(x.rank)))
        .i64(
            "step",
            rows.iter().map(|&i| x.steps.holding(at(&e.ts_ns, i))),
        )
        .text("name", rows.iter().map(|&i| text_at(&e.name, i)))
        .text("tid", rows.iter().map(|&i| text_at(&e.tid, i)))
        .i64("ts_ns", rows.iter().map(|&i| at(&e.ts_ns, i)))
        .i64("end_ns", rows.iter().map(|&i| end(i)))
        .i64("send_bytes", rows.iter().map(|&i| send(i)))
        .i64("recv_bytes", rows.iter().map(|&i| recv(i)))
        .i64_lists("send_splits", send_splits.iter().map(|s| s.as_deref()))
        .i64_lists("recv_splits", recv_splits.iter().map(|s| s.as_deref()))
}

/// `step_batches`: per step, the batch it trained on from input shapes, summed over its DDP
/// forward passes (DistributedDataParallel.forward ranges, numbered in start order): the
/// largest embedding lookup of integer ids [batch, seq_len] of each pass (samples, padded
/// tokens, the longest sequence), else the leading dim of the first shaped input of an op of
/// the pass's thread inside it (the first op whose first input is a non-empty list; unknown
/// when that list's first entry is not an integer, e.g. a tensor list); the tokens without padding when the DataLoader's per-sample
/// int64 copies (aten::copy_ of a 1-D 'long int' tensor inside enumerate(DataLoader)#...)
/// count as many samples.
pub fn step_batches(x: &Inputs) -> Columns {
    let (a, c, steps) = (&x.annotations, &x.cpu_ops, &x.steps);
    // the forward passes: (step, pass number, tid, ts, end)
    let mut forwards: Vec<(i64, usize, Option<&str>, i64, i64)> = Vec::new();
    {
        let mut rows: Vec<(i64, i64, usize)> = (0..a.name.len())
            .filter(|&i| {
                text_at(&a.name, i) == Some("DistributedDataParallel.forward")
                    && flag_at(&a.on_gpu, i) == Some(false)
            })
            .filter_map(|i| Some((at(&a.step, i)?, at(&a.ts_ns, i)?, i)))
            .collect();
        rows.sort_unstable();
        let mut pass: HashMap<i64, usize> = HashMap::new();
        for (step, ts, i) in rows {
            let p = pass.entry(step).or_default();
            *p += 1;
            forwards.push((
                step,
                *p,
                text_at(&a.tid, i),
                ts,
                at(&a.end_ns, i).unwrap_or(ts),
            ));
        }
    }
    // embedding lookups: the largest ids shape of each (step, pass)
    let mut pass_ids: HashMap<(i64, usize), Vec<i64>> = HashMap::new();
    for i in 0..c.name.len() {
        if text_at(&c.name, i) != Some("aten::embedding") {
            continue;
        }
        let (Some(step), Some(ts)) = (at(&c.step, i), at(&c.ts_ns, i)) else {
            continue;
        };
        let types = json(text_at(&c.input_type, i));
        let ty = element(&types, 1).and_then(as_text);
        if !matches!(ty.as_deref(), Some("long int" | "long" | "int")) {
            continue;
        }
        let Some(ids) = element(&json(text_at(&c.input_dims, i)), 1).and_then(int_list) else {
            continue;
        };
        if ids.len() != 2 {
            continue;
        }
        let mut passes: Vec<usize> = forwards
            .iter()
            .filter(|f| f.0 == step && ts >= f.3 && ts < f.4)
            .map(|f| f.1)
            .collect();
        if passes.is_empty() {
            passes.push(0);
        }
        for p in passes {
            let best = pass_ids.entry((step, p)).or_insert_with(|| ids.clone());
            let size = |d: &[i64]| d[0] as f64 * d[1] as f64;
            if size(&ids) > size(best) || (size(&ids) == size(best) && ids < *best) {
                *best = ids.clone();
            }
        }
    }
    // else: the first shaped input of an op of the pass's thread inside it
    // (the ops of the passes' threads alone, by start; the row breaks ties as file order did)
    let mut by_thread: HashMap<&str, Vec<usize>> = forwards
        .iter()
        .filter_map(|f| Some((f.2?, Vec::new())))
        .collect();
    if !by_thread.is_empty() {
        for i in 0..c.name.len() {
            if let Some(ops) = text_at(&c.tid, i).and_then(|t| by_thread.get_mut(t)) {
                ops.push(i);
            }
        }
    }
    for ops in by_thread.values_mut() {
        ops.sort_unstable_by_key(|&i| (at(&c.ts_ns, i), i));
    }
    let mut pass_samples: HashMap<(i64, usize), Option<i64>> = HashMap::new();
    for f in &forwards {
        let Some(ops) = f.2.and_then(|t| by_thread.get(t)) else {
            continue;
        };
        let from = ops.partition_point(|&i| at(&c.ts_ns, i) < Some(f.3));
        let first = ops[from..]
            .iter()
            .take_while(|&&i| at(&c.ts_ns, i) < Some(f.4))
            .filter_map(|&i| {
                // (the first input a non-empty list: its leading dim, unknown unless an integer)
                let dims = json(text_at(&c.input_dims, i));
                let first = element(&dims, 0)?.as_array().filter(|d| !d.is_empty())?;
                Some((i, json_int(&first[0])))
            })
            .min_by(|&(i, _), &(j, _)| {
                let key = |k: usize| (at(&c.ts_ns, k), std::cmp::Reverse(at(&c.end_ns, k)));
                key(i).cmp(&key(j)).then_with(|| {
                    let (p, q) = (text_at(&c.name, i), text_at(&c.name, j));
                    (p.is_none(), p).cmp(&(q.is_none(), q))
                })
            });
        if let Some((_, samples)) = first {
            pass_samples.insert((f.0, f.1), samples);
        }
    }
    // the DataLoader's per-sample int64 copies: (count, tokens) per step
    let mut collated: HashMap<i64, (i64, Option<i64>)> = HashMap::new();
    for i in 0..a.name.len() {
        let is_loader = text_at(&a.name, i)
            .is_some_and(|n| n.starts_with("enumerate(DataLoader)#"))
            && flag_at(&a.on_gpu, i) == Some(false);
        let (Some(step), Some(tid), Some(ts), Some(end)) = (
            at(&a.step, i),
            text_at(&a.tid, i),
            at(&a.ts_ns, i),
            at(&a.end_ns, i),
        ) else {
            continue;
        };
        if !is_loader {
            continue;
        }
        let Some(ops) = by_thread.get(tid) else {
            continue;
        };
        let from = ops.partition_point(|&o| at(&c.ts_ns, o) < Some(ts));
        for &o in ops[from..]
            .iter()
            .take_while(|&&o| at(&c.ts_ns, o) < Some(end))
        {
            if text_at(&c.name, o) != Some("aten::copy_") {
                continue;
            }
            let types = json(text_at(&c.input_type, o));
            if element(&types, 0).and_then(as_text).as_deref() != Some("long int") {
                continue;
            }
            let dims = json(text_at(&c.input_dims, o));
            let Some(first) = element(&dims, 0).and_then(|v| v.as_array()) else {
                continue;
            };
            if first.len() != 1 {
                continue;
            }
            let entry = collated.entry(step).or_insert((0, None));
            entry.0 += 1;
            if let Some(t) = json_int(&first[0]) {
                entry.1 = Some(entry.1.unwrap_or(0).saturating_add(t));
            }
        }
    }
    let mut by_ids: HashMap<i64, (i64, i64, i64)> = HashMap::new();
    for ((step, _), ids) in &pass_ids {
        let e = by_ids.entry(*step).or_insert((0, 0, i64::MIN));
        e.0 = e.0.saturating_add(ids[0]);
        e.1 = e.1.saturating_add(ids[0].saturating_mul(ids[1]));
        e.2 = e.2.max(ids[1]);
    }
    let mut by_inputs: HashMap<i64, i64> = HashMap::new();
    for ((step, _), samples) in &pass_samples {
        if let Some(s) = samples {
            let total = by_inputs.entry(*step).or_default();
            *total = total.saturating_add(*s);
        }
    }
    let n = steps.len();
    let ids = |k: usize| by_ids.get(&steps.step[k]);
    Columns::default()
        .i32("rank", (0..n).map(|_| Some(x.rank)))
        .i64("step", steps.step.iter().map(|&s| Some(s)))
        .i64(
            "samples",
            (0..n).map(|k| {
                ids(k)
                    .map(|t| t.0)
                    .or_else(|| by_inputs.get(&steps.step[k]).copied())
            }),
        )
        .i64("tokens", (0..n).map(|k| ids(k).map(|t| t.1)))
        .i64(
            "real_tokens",
            (0..n).map(|k| {
                let (count, tokens) = collated.get(&steps.step[k])?;
                (Some(*count) == ids(k).map(|t| t.0))
                    .then_some(*tokens)
                    .flatten()
            }),
        )
        .i64("max_seq_len", (0..n).map(|k| ids(k).map(|t| t.2)))
}

/// `top_host_ops`: the training-loop thread's top-level host work, per step: of its host ops
/// (cpu_ops but the ProfilerStep#N ranges) and host annotations, taken in the order start, the
/// later end first, then name (bytes; a missing name last), those that start at or after the
/// end of every earlier one of their step. What the critical path names its host segments
/// after (analysis/critical_path.py). Rows without a step, start or end are left out: they
/// cover nothing, and the walk reads none.
pub fn top_host_ops(x: &Inputs, main: Option<&str>) -> Columns {
    // (step, ts, end, the row: HostEvent::row): 32 bytes a row, sized at once (with its name,
    // grown by doubling, the list was the derived stage's peak on a CPU trace of many small ops)
    let candidates = || {
        x.host_events(main).filter_map(|h| {
            let step_mark = h.is_op && h.name.is_none_or(is_step_mark);
            (h.on_main && !step_mark).then_some((h.step, h.ts, h.end, h.row))
        })
    };
    let mut rows: Vec<(i64, i64, i64, u32)> = Vec::new();
    if main.is_some() {
        rows.reserve_exact(candidates().count());
        rows.extend(candidates());
    }
    rows.sort_unstable_by(|p, q| {
        (p.0, p.1, std::cmp::Reverse(p.2))
            .cmp(&(q.0, q.1, std::cmp::Reverse(q.2)))
            .then_with(|| {
                let (n, m) = (x.host_name(p.3), x.host_name(q.3));
                (n.is_none(), n).cmp(&(m.is_none(), m))
            })
    });
    let mut top = Vec::new();
    let mut latest: Option<(i64, i64)> = None; // (step, the latest end so far in it)
    for (step, ts, end, row) in rows {
        let row = (step, ts, end, x.host_name(row));
        match latest {
            Some((s, e)) if s == step => {
                if ts >= e {
                    top.push(row);
                }
                latest = Some((step, e.max(end)));
            }
            _ => {
                top.push(row);
                latest = Some((step, end));
            }
        }
    }
    Columns::default()
        .i32("rank", top.iter().map(|_| Some(x.rank)))
        .i64("step", top.iter().map(|r| Some(r.0)))
        .i64("ts_ns", top.iter().map(|r| Some(r.1)))
        .i64("end_ns", top.iter().map(|r| Some(r.2)))
        .text("name", top.iter().map(|r| r.3))
}
