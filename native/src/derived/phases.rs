//! `phase_intervals` and `step_phases`: what the training-loop thread is doing at each moment
//! of each step, by time, whatever range encloses it.
//!
//! A moment of a step gets the first matching label of (db/schema.sql has the long form):
//! waiting (for a host-run collective the loop issued, from the end of its call, less what
//! the loop starts meanwhile, merged with the 1 ms tolerance) -> comm_exposed; comm_call (a
//! host call into a collective) -> comm_exposed; p2p_call (a send / recv call) ->
//! pipeline_wait; data_wait; h2d; optimizer; backward (autograd nodes); forward (a
//! training-loop op before the step's last backward op ends); host_other (an op after it) ->
//! other; inflight (a collective in flight) -> comm_exposed; p2p_inflight -> pipeline_wait;
//! nothing -> other, idle.

use std::collections::HashMap;

use super::collectives::Collective;
use super::input::{at, text_at};
use super::out::Columns;
use super::sqlfn::is_data_range;
use super::{HostEvent, Inputs};
use crate::columns::is_step_mark;

/// SQL's `name LIKE pattern%` for a pattern whose `_` stands for any one character.
pub fn like_prefix(name: &str, pattern: &str) -> bool {
    let mut chars = name.chars();
    pattern.chars().all(|p| match chars.next() {
        Some(c) => p == '_' || p == c,
        None => false,
    })
}

/// The labels, by priority (0 first).
const MARKS: &[&str] = &[
    "waiting",
    "comm_call",
    "p2p_call",
    "data_wait",
    "h2d",
    "optimizer",
    "backward",
    "forward",
    "host_other",
    "inflight",
    "p2p_inflight",
];

fn mark(name: &str) -> u8 {
    MARKS.iter().position(|m| *m == name).expect("a mark") as u8
}

/// The phase a label counts as (None: idle).
fn phase_of(priority: Option<u8>) -> &'static str {
    match priority {
        Some(0 | 1 | 9) => "comm_exposed",
        Some(2 | 10) => "pipeline_wait",
        Some(3) => "data_wait",
        Some(4) => "h2d",
        Some(5) => "optimizer",
        Some(6) => "backward",
        Some(7) => "forward",
        _ => "other",
    }
}

pub const PHASES: &[&str] = &[
    "data_wait",
    "h2d",
    "forward",
    "backward",
    "optimizer",
    "comm_exposed",
    "pipeline_wait",
    "other",
];

/// Intervals sorted by (start, end) merged into runs: a gap above `tol_ns` starts a new run.
pub fn merge(mut spans: Vec<(i64, i64)>, tol_ns: i64) -> Vec<(i64, i64)> {
    spans.sort_unstable();
    let mut runs: Vec<(i64, i64)> = Vec::new();
    for (ts, end) in spans {
        match runs.last_mut() {
            Some(run) if ts <= run.1.saturating_add(tol_ns) => run.1 = run.1.max(end),
            _ => runs.push((ts, end)),
        }
    }
    runs
}

/// One interval of `phase_intervals`.
pub struct Interval {
    pub step: i64,
    pub phase: &'static str,
    pub ts_ns: i64,
    pub end_ns: i64,
    pub idle: bool,
}

/// A host event no label is for (a step mark, a gloo range, a nameless event).
const SKIPPED: u8 = u8::MAX;
/// A host event that none of the name's labels fits (forward or host_other on the loop thread).
const UNLABELLED: u8 = u8::MAX - 1;

/// The label a host event's name (and thread) gives it: a mark, UNLABELLED or SKIPPED.
fn label_of(h: &HostEvent, backward_name: &regex::Regex) -> u8 {
    let Some(name) = h.name else { return SKIPPED };
    if is_step_mark(name) || name.starts_with("gloo:") {
        return SKIPPED;
    }
    let label = if h.on_main
        && h.is_op
        && matches!(
            name,
            "c10d::send" | "c10d::recv_" | "c10d::recv_any_source_" | "nccl:send" | "nccl:recv"
        ) {
        "p2p_call"
    } else if h.on_main
        && h.is_op
        && (name.starts_with("c10d::")
            || name == "record_param_comms"
            || name.starts_with("nccl:")
            || like_prefix(name, "_c10d_functional::")
            || like_prefix(name, "c10d_functional::"))
    {
        "comm_call"
    } else if is_data_range(name, !h.is_op) {
        "data_wait"
    } else if name.starts_with("Optimizer.step#") || like_prefix(name, "Optimizer.zero_grad#") {
        "optimizer"
    } else if h.is_op
        && (like_prefix(name, "autograd::engine::evaluate_function:")
            || backward_name.is_match(name))
    {
        "backward"
    } else {
        return UNLABELLED;
    };
    mark(label)
}

/// The step's phase intervals, in (step, start) order.
pub fn intervals(x: &Inputs, main: Option<&str>, collectives: &[Collective]) -> Vec<Interval> {
    let steps = &x.steps;
    // each step's marks: (priority, ts, end), in the order they are found
    let mut by_step: HashMap<i64, Vec<(u8, i64, i64)>> = HashMap::new();
    let mut push = |step: i64, priority: u8, ts: i64, end: i64| {
        by_step.entry(step).or_default().push((priority, ts, end));
    };
    let backward_name = regex::Regex::new("^[A-Za-z0-9_]+Backward[0-9]*$").expect("a pattern");
    let backward = mark("backward");
    // (a byte an event: its label, found once)
    let mut labels: Vec<u8> = Vec::with_capacity(x.cpu_ops.name.len() + x.annotations.name.len());
    let mut last_backward: HashMap<i64, i64> = HashMap::new();
    for h in x.host_events(main) {
        let label = label_of(&h, &backward_name);
        if label == backward {
            let e = last_backward.entry(h.step).or_insert(h.end);
            *e = (*e).max(h.end);
        }
        labels.push(label);
    }
    let (forward, host_other) = (mark("forward"), mark("host_other"));
    for (h, &label) in x.host_events(main).zip(&labels) {
        if label < UNLABELLED {
            push(h.step, label, h.ts, h.end);
        } else if label == UNLABELLED && h.on_main && h.is_op {
            let before_backward = last_backward.get(&h.step).is_none_or(|&lb| h.ts < lb);
            let label = if before_backward { forward } else { host_other };
            push(h.step, label, h.ts, h.end);
        }
    }
    drop(labels);
    // h2d: the loop's runtime calls that queued a host-to-device copy, and the tensor-copy ops
    // of the loop around them
    let (r, k) = (&x.runtime, &x.kernels);
    let mut copies: HashMap<i64, usize> = HashMap::new();
    for i in 0..k.kind.len() {
        if text_at(&k.kind, i) == Some("memcpy")
            && text_at(&k.name, i).is_some_and(|n| n.contains("HtoD"))
        {
            if let Some(corr) = at(&k.correlation, i) {
                *copies.entry(corr).or_default() += 1;
            }
        }
    }
    let mut h2d_calls: Vec<(i64, i64, i64)> = Vec::new();
    for i in 0..r.ts_ns.len() {
        let tid = text_at(&r.tid, i);
        if tid.is_none() || tid != main {
            continue;
        }
        let (Some(step), Some(ts), Some(end), Some(corr)) = (
            at(&r.step, i),
            at(&r.ts_ns, i),
            at(&r.end_ns, i),
            at(&r.correlation, i),
        ) else {
            continue;
        };
        if copies.contains_key(&corr) {
            h2d_calls.push((step, ts, end));
        }
    }
    let h2d = mark("h2d");
    for &(step, ts, end) in &h2d_calls {
        push(step, h2d, ts, end);
    }
    let mut calls_of_step: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
    for &(step, ts, end) in &h2d_calls {
        calls_of_step.entry(step).or_default().push((ts, end));
    }
    for calls in calls_of_step.values_mut() {
        calls.sort_unstable();
    }
    for h in x.host_events(main) {
        if !h.on_main || !matches!(h.name, Some("aten::to" | "aten::_to_copy" | "aten::copy_")) {
            continue;
        }
        let Some(calls) = calls_of_step.get(&h.step) else {
            continue;
        };
        let from = calls.partition_point(|c| c.0 < h.ts);
        if calls[from..]
            .iter()
            .take_while(|c| c.0 <= h.end)
            .any(|c| c.1 <= h.end)
        {
            push(h.step, h2d, h.ts, h.end);
        }
    }
    // collectives in flight, and the waits for the host-run ones the loop issued
    let mut loop_ops: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
    for h in x.host_events(main) {
        if h.on_main && h.is_op {
            loop_ops.entry(h.step).or_default().push((h.ts, h.end));
        }
    }
    for ops in loop_ops.values_mut() {
        ops.sort_unstable();
    }
    let tol = x.params.phase_merge_tolerance_ns;
    for col in collectives {
        let Some(step) = col.step else { continue };
        push(
            step,
            mark(if col.is_p2p() {
                "p2p_inflight"
            } else {
                "inflight"
            }),
            col.ts_ns,
            col.end_ns,
        );
        let Some(call_end) = col.call_end_ns else {
            continue;
        };
        let on_main = col.call_tid.is_some() && col.call_tid.as_deref() == main;
        if !on_main
            || col.source != "gloo_annotation"
            || col.kind != "collective"
            || col.end_ns <= call_end
        {
            continue;
        }
        // what the loop started during the span (its start counts as busy: the call just ended)
        let (w_ts, w_end) = (call_end, col.end_ns);
        let mut busy = vec![(w_ts, w_ts)];
        if let Some(ops) = loop_ops.get(&step) {
            let from = ops.partition_point(|o| o.0 <= w_ts);
            busy.extend(
                ops[from..]
                    .iter()
                    .take_while(|o| o.0 < w_end)
                    .map(|o| (o.0, o.1.min(w_end))),
            );
        }
        let runs = merge(busy, tol);
        for (j, run) in runs.iter().enumerate() {
            let next = runs.get(j + 1).map_or(w_end, |n| n.0);
            if next > run.1 {
                push(step, mark("waiting"), run.1, next);
            }
        }
    }
    // each label merged into runs within its step (gaps under the tolerance inside forward /
    // backward are Python overhead), then the step cut at every run's ends
    drop(loop_ops);
    let mut out = Vec::new();
    for k in 0..steps.len() {
        let (step, s_ts, s_end) = (steps.step[k], steps.ts_ns[k], steps.end_ns[k]);
        let mut runs: Vec<(i64, i64, u8)> = Vec::new();
        if let Some(list) = by_step.get(&step) {
            let mut per_mark: Vec<Vec<(i64, i64)>> = vec![Vec::new(); MARKS.len()];
            for &(p, ts, end) in list {
                let (ts, end) = (ts.max(s_ts), end.min(s_end));
                if end > ts {
                    per_mark[p as usize].push((ts, end));
                }
            }
            for (p, spans) in per_mark.into_iter().enumerate() {
                let t = if matches!(MARKS[p], "forward" | "backward") {
                    tol
                } else {
                    0
                };
                runs.extend(merge(spans, t).into_iter().map(|(a, b)| (a, b, p as u8)));
            }
        }
        let mut bounds: Vec<i64> = runs
            .iter()
            .flat_map(|r| [r.0, r.1])
            .chain([s_ts, s_end])
            .collect();
        bounds.sort_unstable();
        bounds.dedup();
        // a sweep: runs open at each bound, counted per priority
        let mut starts: HashMap<i64, Vec<u8>> = HashMap::new();
        let mut ends: HashMap<i64, Vec<u8>> = HashMap::new();
        for r in &runs {
            starts.entry(r.0).or_default().push(r.2);
            ends.entry(r.1).or_default().push(r.2);
        }
        let mut open = [0u32; 11];
        let mut current: Option<Interval> = None;
        for w in bounds.windows(2) {
            let (t, next) = (w[0], w[1]);
            for p in ends.get(&t).into_iter().flatten() {
                open[*p as usize] -= 1;
            }
            for p in starts.get(&t).into_iter().flatten() {
                open[*p as usize] += 1;
            }
            let top = open.iter().position(|&n| n > 0).map(|p| p as u8);
            let (phase, idle) = (phase_of(top), top.is_none());
            match current.as_mut() {
                Some(c) if c.phase == phase && c.idle == idle => c.end_ns = next,
                _ => {
                    if let Some(done) = current.take() {
                        out.push(done);
                    }
                    current = Some(Interval {
                        step,
                        phase,
                        ts_ns: t,
                        end_ns: next,
                        idle,
                    });
                }
            }
        }
        if let Some(done) = current {
            out.push(done);
        }
    }
    out
}

pub fn intervals_table(x: &Inputs, rows: &[Interval]) -> Columns {
    let step_ts: HashMap<i64, i64> = x
        .steps
        .step
        .iter()
        .copied()
        .zip(x.steps.ts_ns.iter().copied())
        .collect();
    Columns::default()
        .i32("rank", rows.iter().map(|_| Some(x.rank)))
        .i64("step", rows.iter().map(|r| Some(r.step)))
        .text("phase", rows.iter().map(|r| Some(r.phase)))
        .i64("ts_ns", rows.iter().map(|r| Some(r.ts_ns)))
        .i64("end_ns", rows.iter().map(|r| Some(r.end_ns)))
        .i64("dur_ns", rows.iter().map(|r| Some(r.end_ns - r.ts_ns)))
        .i64(
            "start_rel_ns",
            rows.iter().map(|r| Some(r.ts_ns - step_ts[&r.step])),
        )
        .flag("idle", rows.iter().map(|r| Some(r.idle)))
}

/// `step_phases`: per step, the time of each phase (they add up to the step) and the idle
/// part of `other`.
pub fn step_phases(x: &Inputs, rows: &[Interval]) -> Columns {
    let steps = &x.steps;
    let index: HashMap<i64, usize> = steps
        .step
        .iter()
        .enumerate()
        .map(|(k, &s)| (s, k))
        .collect();
    let mut sums = vec![[0i128; 9]; steps.len()];
    for r in rows {
        let k = index[&r.step];
        let p = PHASES.iter().position(|p| *p == r.phase).expect("a phase");
        let d = (r.end_ns - r.ts_ns) as i128;
        sums[k][p] += d;
        if r.phase == "other" && r.idle {
            sums[k][8] += d;
        }
    }
    let col = |j: usize| {
        sums.iter()
            .map(move |s| Some(s[j] as f64))
            .collect::<Vec<_>>()
    };
    let mut t = Columns::default()
        .i32("rank", steps.step.iter().map(|_| Some(x.rank)))
        .i64("step", steps.step.iter().map(|&s| Some(s)))
        .i64(
            "dur_ns",
            (0..steps.len()).map(|k| Some(steps.end_ns[k] - steps.ts_ns[k])),
        );
    for (j, p) in PHASES.iter().enumerate() {
        t = t.f64(&format!("{p}_ns"), col(j));
    }
    t.f64("idle_ns", col(8))
}
