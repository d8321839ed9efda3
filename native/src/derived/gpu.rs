//! GPU activity inside each step window (empty on CPU-only traces): `gpu_busy_intervals` (GPU
//! work merged into disjoint intervals per device and class, clipped to the steps),
//! `gpu_idle_gaps` (the gaps between them, with their likely cause) and `step_gpu` (busy time
//! and communication / compute overlap per step). Kernels of a CUPTI range profiler (with
//! counters) have no measured times: they are left out.

use std::collections::{BTreeMap, HashMap};

use super::collectives::Collective;
use super::input::{at, flag_at, text_at};
use super::out::Columns;
use super::phases::{merge, Interval};
use super::Inputs;

pub struct Busy {
    pub step: i64,
    pub device: Option<i32>,
    pub class: &'static str,
    pub ts_ns: i64,
    pub end_ns: i64,
}

const CLASSES: &[&str] = &["any", "compute", "communication"];

/// The busy intervals, in (step, device, class, start) order.
pub fn busy_intervals(x: &Inputs) -> Vec<Busy> {
    let (k, steps) = (&x.kernels, &x.steps);
    // (step, device, class) -> clipped spans
    type Lane = (i64, Option<i32>, usize);
    let mut work: BTreeMap<Lane, Vec<(i64, i64)>> = BTreeMap::new();
    for i in 0..k.kind.len() {
        if k.counters.is_valid(i) {
            continue;
        }
        let (Some(ts), Some(end)) = (at(&k.ts_ns, i), at(&k.end_ns, i)) else {
            continue;
        };
        // the last step starting at or before the start, and the last one starting before the end
        let lo = steps.starting_by(ts);
        let hi = steps.ts_ns.partition_point(|&s| s < end).checked_sub(1);
        let held: Vec<usize> = match (lo, hi) {
            (Some(l), Some(h)) if l == h => {
                if ts < steps.end_ns[l] {
                    vec![l]
                } else {
                    vec![]
                }
            }
            (_, Some(_)) => (0..steps.len())
                .filter(|&s| ts < steps.end_ns[s] && end > steps.ts_ns[s])
                .collect(),
            _ => vec![],
        };
        let kind = text_at(&k.kind, i);
        let device = at(&k.device, i);
        for s in held {
            let (a, b) = (ts.max(steps.ts_ns[s]), end.min(steps.end_ns[s]));
            if b <= a {
                continue;
            }
            for (c, class) in CLASSES.iter().enumerate() {
                if c == 0 || kind == Some(class) {
                    work.entry((steps.step[s], device, c))
                        .or_default()
                        .push((a, b));
                }
            }
        }
    }
    let mut out = Vec::new();
    for ((step, device, c), spans) in work {
        for (ts, end) in merge(spans, 0) {
            out.push(Busy {
                step,
                device,
                class: CLASSES[c],
                ts_ns: ts,
                end_ns: end,
            });
        }
    }
    out
}

pub fn busy_table(rank: i32, rows: &[Busy]) -> Columns {
    Columns::default()
        .i32("rank", rows.iter().map(|_| Some(rank)))
        .i64("step", rows.iter().map(|r| Some(r.step)))
        .i32("device", rows.iter().map(|r| r.device))
        .text("class", rows.iter().map(|r| Some(r.class)))
        .i64("ts_ns", rows.iter().map(|r| Some(r.ts_ns)))
        .i64("end_ns", rows.iter().map(|r| Some(r.end_ns)))
        .i64("dur_ns", rows.iter().map(|r| Some(r.end_ns - r.ts_ns)))
}

/// The overlap of [a, b) with the intervals of `phase` in `rows` of the step (sorted by start).
fn overlap_ns(rows: &[&Interval], phases: &[&str], a: i64, b: i64) -> i128 {
    rows.iter()
        .filter(|p| phases.contains(&p.phase) && p.ts_ns < b && p.end_ns > a)
        .map(|p| (p.end_ns.min(b) - p.ts_ns.max(a)) as i128)
        .sum()
}

/// `gpu_idle_gaps`: the idle gaps of each GPU inside a step (between busy intervals, or at the
/// step's ends) with their likely cause: data_wait (the loop waits for its input for most of
/// it), comm_wait (the loop is blocked in a host-run collective or send / recv), sync (a host
/// call waited on the GPU), host_launch (the next work was launched only after the GPU went
/// idle), other.
pub fn idle_gaps(
    x: &Inputs,
    busy: &[Busy],
    phases: &[Interval],
    collectives: &[Collective],
) -> Columns {
    let steps = &x.steps;
    let (k, r) = (&x.kernels, &x.runtime);
    // the earliest launch of the work starting at a time on a device
    let mut launches: HashMap<(i32, i64), Option<i64>> = HashMap::new();
    for i in 0..k.kind.len() {
        if k.counters.is_valid(i) {
            continue;
        }
        let (Some(device), Some(ts)) = (at(&k.device, i), at(&k.ts_ns, i)) else {
            continue;
        };
        let launch = at(&k.launch_ts_ns, i);
        let e = launches.entry((device, ts)).or_insert(launch);
        *e = match (*e, launch) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    // host calls that wait for the GPU, by start, with the latest end so far
    let mut syncs: Vec<(i64, i64)> = (0..r.ts_ns.len())
        .filter(|&i| {
            flag_at(&r.is_sync, i) == Some(true)
                && text_at(&r.name, i).is_some_and(|n| !n.contains("Query"))
        })
        .filter_map(|i| Some((at(&r.ts_ns, i)?, at(&r.end_ns, i)?)))
        .collect();
    syncs.sort_unstable();
    let mut reach = i64::MIN;
    for s in syncs.iter_mut() {
        reach = reach.max(s.1);
        s.1 = reach;
    }
    let mut host_runs: Vec<(i64, i64)> = collectives
        .iter()
        .filter(|c| c.source == "gloo_annotation")
        .map(|c| (c.ts_ns, c.end_ns))
        .collect();
    host_runs.sort_unstable();
    let mut by_step: HashMap<i64, Vec<&Interval>> = HashMap::new();
    for p in phases {
        by_step.entry(p.step).or_default().push(p);
    }
    let step_index: HashMap<i64, usize> = steps
        .step
        .iter()
        .enumerate()
        .map(|(k, &s)| (s, k))
        .collect();
    // gaps: (step, device, ts, end)
    let mut gaps: Vec<(i64, Option<i32>, i64, i64)> = Vec::new();
    let mut groups: BTreeMap<(i64, Option<i32>), Vec<&Busy>> = BTreeMap::new();
    for b in busy.iter().filter(|b| b.class == "any") {
        groups.entry((b.step, b.device)).or_default().push(b);
    }
    for ((step, device), mut list) in groups {
        let Some(&s) = step_index.get(&step) else {
            continue;
        };
        list.sort_by_key(|b| b.ts_ns);
        let mut prev_end = steps.ts_ns[s];
        for b in &list {
            gaps.push((step, device, prev_end, b.ts_ns));
            prev_end = b.end_ns;
        }
        gaps.push((step, device, prev_end, steps.end_ns[s]));
    }
    gaps.retain(|g| g.3 > g.2);
    let (data_pct, comm_pct) = (
        x.params.gap_data_wait_min_share_pct,
        x.params.gap_comm_wait_min_share_pct,
    );
    let empty = Vec::new();
    let rows: Vec<_> = gaps
        .into_iter()
        .map(|(step, device, ts, end)| {
            let phases = by_step.get(&step).unwrap_or(&empty);
            let data = overlap_ns(phases, &["data_wait"], ts, end);
            let host_run = {
                let upto = host_runs.partition_point(|c| c.0 < end);
                host_runs[..upto].iter().any(|c| c.1 > ts)
            };
            let comm = if host_run {
                overlap_ns(phases, &["comm_exposed", "pipeline_wait"], ts, end)
            } else {
                0
            };
            let next_launch = device.and_then(|d| launches.get(&(d, end)).copied().flatten());
            let synced = {
                let k = syncs.partition_point(|s| s.0 < end);
                k > 0 && syncs[k - 1].1 >= ts
            };
            let dur = (end - ts) as f64;
            let cause = if data as f64 * 100.0 >= data_pct * dur {
                "data_wait"
            } else if comm as f64 * 100.0 >= comm_pct * dur {
                "comm_wait"
            } else if synced {
                "sync"
            } else if next_launch.is_some_and(|l| l > ts) {
                "host_launch"
            } else {
                "other"
            };
            (step, device, ts, end, next_launch, data, comm, cause)
        })
        .collect();
    Columns::default()
        .i32("rank", rows.iter().map(|_| Some(x.rank)))
        .i64("step", rows.iter().map(|r| Some(r.0)))
        .i32("device", rows.iter().map(|r| r.1))
        .i64("ts_ns", rows.iter().map(|r| Some(r.2)))
        .i64("end_ns", rows.iter().map(|r| Some(r.3)))
        .i64("dur_ns", rows.iter().map(|r| Some(r.3 - r.2)))
        .i64("next_launch_ts_ns", rows.iter().map(|r| r.4))
        .f64("data_wait_ns", rows.iter().map(|r| Some(r.5 as f64)))
        .f64("comm_wait_ns", rows.iter().map(|r| Some(r.6 as f64)))
        .text("cause", rows.iter().map(|r| Some(r.7)))
}

/// `step_gpu`: per step, GPU busy time (the union over streams, averaged over the devices with
/// work), compute and communication time, and the communication time with a compute kernel
/// running at the same time; NULL columns on steps without GPU work.
pub fn step_gpu(x: &Inputs, busy: &[Busy]) -> Columns {
    let steps = &x.steps;
    #[derive(Default)]
    struct Sums {
        any: Option<i128>,
        compute: Option<i128>,
        comm: Option<i128>,
        devices: std::collections::BTreeSet<i32>,
        overlap: Option<i128>,
    }
    let mut sums: HashMap<i64, Sums> = HashMap::new();
    let mut by: HashMap<(i64, Option<i32>, &str), Vec<&Busy>> = HashMap::new();
    for b in busy {
        let s = sums.entry(b.step).or_default();
        let d = (b.end_ns - b.ts_ns) as i128;
        let slot = match b.class {
            "any" => &mut s.any,
            "compute" => &mut s.compute,
            _ => &mut s.comm,
        };
        *slot = Some(slot.unwrap_or(0) + d);
        if let Some(dev) = b.device {
            s.devices.insert(dev);
        }
        by.entry((b.step, b.device, b.class)).or_default().push(b);
    }
    for ((step, device, class), comm) in &by {
        if *class != "communication" || device.is_none() {
            continue;
        }
        let Some(compute) = by.get(&(*step, *device, "compute")) else {
            continue;
        };
        let mut total = 0i128;
        let mut any = false;
        for m in comm {
            for c in compute
                .iter()
                .filter(|c| c.ts_ns < m.end_ns && c.end_ns > m.ts_ns)
            {
                total += (m.end_ns.min(c.end_ns) - m.ts_ns.max(c.ts_ns)) as i128;
                any = true;
            }
        }
        if any {
            let s = sums.get_mut(step).expect("the step's sums");
            s.overlap = Some(s.overlap.unwrap_or(0) + total);
        }
    }
    let row = |k: usize| sums.get(&steps.step[k]);
    let per_device = |k: usize, v: Option<i128>| {
        let s = row(k)?;
        Some(v? as f64 / s.devices.len() as f64)
    };
    Columns::default()
        .i32("rank", steps.step.iter().map(|_| Some(x.rank)))
        .i64("step", steps.step.iter().map(|&s| Some(s)))
        .i64(
            "dur_ns",
            (0..steps.len()).map(|k| Some(steps.end_ns[k] - steps.ts_ns[k])),
        )
        .i64(
            "devices",
            (0..steps.len()).map(|k| row(k).map(|s| s.devices.len() as i64)),
        )
        .f64(
            "busy_ns",
            (0..steps.len()).map(|k| per_device(k, row(k).and_then(|s| s.any))),
        )
        .f64(
            "compute_ns",
            (0..steps.len()).map(|k| per_device(k, row(k).and_then(|s| s.compute))),
        )
        .f64(
            "comm_ns",
            (0..steps.len()).map(|k| per_device(k, row(k).map(|s| s.comm.unwrap_or(0)))),
        )
        .f64(
            "comm_overlapped_ns",
            (0..steps.len()).map(|k| per_device(k, row(k).map(|s| s.overlap.unwrap_or(0)))),
        )
}
