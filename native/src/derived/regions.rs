//! `step_regions`: code regions of every step on the training-loop thread: how long the rank
//! spends in each user annotation (record_function) and each operator, how much of it is its
//! own (not inside a nested region of the same kind), and how much of it is idle.
//!
//! A region is a name: all its instances on the training-loop thread that start in the step.
//! Communication (c10d:: ops, record_param_comms, gloo:* / nccl:* ranges) is not a region, but
//! it counts as work when telling idle from busy time. Idle time inside a region: no operator
//! and no runtime call open on the thread, no collective of the rank in flight and no kernel
//! running on its GPUs.

use std::collections::BTreeMap;

use super::collectives::Collective;
use super::gpu::Busy;
use super::input::{at, flag_at, text_at};
use super::out::Columns;
use super::phases::merge;
use super::Inputs;

/// Busy time up to `t`, from merged intervals with the busy time before each.
fn busy_until(busy: &[(i64, i64, i128)], t: i64) -> i128 {
    let k = busy.partition_point(|b| b.0 <= t);
    match k.checked_sub(1) {
        Some(j) => busy[j].2 + (t.min(busy[j].1) - busy[j].0) as i128,
        None => 0,
    }
}

pub fn step_regions(
    x: &Inputs,
    main: Option<&str>,
    collectives: &[Collective],
    gpu: &[Busy],
) -> Columns {
    let (c, a, r) = (&x.cpu_ops, &x.annotations, &x.runtime);
    let on_main = |tid: Option<&str>| tid.is_some() && tid == main;
    // what keeps the thread (or the rank's devices) busy, merged
    let mut work: Vec<(i64, i64)> = Vec::new();
    for i in 0..c.name.len() {
        if on_main(text_at(&c.tid, i)) {
            work.extend(at(&c.ts_ns, i).zip(at(&c.end_ns, i)));
        }
    }
    for i in 0..r.ts_ns.len() {
        if on_main(text_at(&r.tid, i)) {
            work.extend(at(&r.ts_ns, i).zip(at(&r.end_ns, i)));
        }
    }
    work.extend(collectives.iter().map(|c| (c.ts_ns, c.end_ns)));
    work.extend(
        gpu.iter()
            .filter(|b| b.class == "any")
            .map(|b| (b.ts_ns, b.end_ns)),
    );
    work.retain(|w| w.1 > w.0);
    let mut before = 0i128;
    let busy: Vec<(i64, i64, i128)> = merge(work, 0)
        .into_iter()
        .map(|(ts, end)| {
            let row = (ts, end, before);
            before += (end - ts) as i128;
            row
        })
        .collect();
    let is_comm = |n: &str| n.starts_with("gloo:") || n.starts_with("nccl:");
    // (step, kind, name) -> (calls, time, self, idle)
    type Sums = (i64, i128, i128, i128);
    let mut rows: BTreeMap<(i64, &str, &str), Sums> = BTreeMap::new();
    for i in 0..c.name.len() {
        let (Some(step), Some(name)) = (at(&c.step, i), text_at(&c.name, i)) else {
            continue;
        };
        if !on_main(text_at(&c.tid, i))
            || name.starts_with("c10d::")
            || name == "record_param_comms"
            || is_comm(name)
        {
            continue;
        }
        let e = rows.entry((step, "op", name)).or_default();
        e.0 += 1;
        e.1 += at(&c.dur_ns, i).unwrap_or(0) as i128;
        e.2 += at(&c.self_ns, i).unwrap_or(0) as i128;
    }
    for i in 0..a.name.len() {
        let (Some(step), Some(name)) = (at(&a.step, i), text_at(&a.name, i)) else {
            continue;
        };
        if flag_at(&a.on_gpu, i) != Some(false) || !on_main(text_at(&a.tid, i)) || is_comm(name) {
            continue;
        }
        let (Some(ts), Some(end), Some(dur)) =
            (at(&a.ts_ns, i), at(&a.end_ns, i), at(&a.dur_ns, i))
        else {
            continue;
        };
        let busy_ns = busy_until(&busy, end) - busy_until(&busy, ts);
        let e = rows.entry((step, "annotation", name)).or_default();
        e.0 += 1;
        e.1 += dur as i128;
        e.2 += at(&a.self_ns, i).unwrap_or(0) as i128;
        e.3 += (dur as i128 - busy_ns).max(0);
    }
    let rows: Vec<_> = rows.into_iter().collect();
    Columns::default()
        .i32("rank", rows.iter().map(|_| Some(x.rank)))
        .i64("step", rows.iter().map(|r| Some(r.0 .0)))
        .text("kind", rows.iter().map(|r| Some(r.0 .1)))
        .text("name", rows.iter().map(|r| Some(r.0 .2)))
        .i64("calls_count", rows.iter().map(|r| Some(r.1 .0)))
        .f64("time_ns", rows.iter().map(|r| Some(r.1 .1 as f64)))
        .f64("self_ns", rows.iter().map(|r| Some(r.1 .2 as f64)))
        .f64("idle_ns", rows.iter().map(|r| Some(r.1 .3 as f64)))
}
