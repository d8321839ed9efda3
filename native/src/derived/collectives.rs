//! `collectives`: one row per collective and point-to-point transfer of the rank, with its
//! process group; and `step_comm`, the time per step with one in flight.
//!
//! The rules (db/schema.sql states them for the user):
//! - candidates, by source: NCCL / RCCL kernels (kernels.kind 'communication'; the op from
//!   collective_name, else the kernel's name; the launching runtime call by correlation, the
//!   earliest by (start, thread)), gloo:* annotations on the host (the runs of gloo's runloop
//!   threads), record_param_comms ops with a known op;
//! - a rank uses the first source (in that order) it has any candidate of, and its rows with
//!   a known op;
//! - gloo: the i-th run of a group collective is the work of the i-th c10d:: call of one (in
//!   (start, end) order), and the rank's pairs are trusted only when every pair agrees (the
//!   call starts first, same op, or a reduce_scatter run as an all_reduce); a trusted pair
//!   gives the call's thread and end, and the op the program asked for (reduce_scatter);
//!   gloo:send / gloo:recv run on the calling thread itself;
//! - the group: the event's pg_name ('trace'); else the rank's only group of its pg_config
//!   ('pg_config'); several: the largest ('pending': the reduce infers the group); none:
//!   'default' ('unknown'); its description and ranks from the event, else from pg_config;
//! - the peer of a send / recv: the event's, else the c10d::send / recv_ call on the call's
//!   thread around the call's start (the largest when several).

use std::collections::HashMap;

use super::input::{at, text_at, Steps};
use super::out::Columns;
use super::sqlfn::{collective_op, dtype_bytes, element, int_list, json, product};
use super::{Inputs, PgConfig};

const GROUP_OPS: &[&str] = &[
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "all_to_all",
    "barrier",
    "gather",
    "scatter",
];

fn is_p2p(op: Option<&str>) -> bool {
    matches!(op, Some("send" | "recv" | "send_recv"))
}

#[derive(Clone, Debug, Default)]
pub struct Collective {
    pub step: Option<i64>,
    pub op: Option<String>,
    pg_name: Option<String>,
    pg_desc: Option<String>,
    pg_ranks: Option<String>,
    trace_seq: Option<i64>,
    peer_group_rank: Option<i32>,
    pub run_tid: Option<String>,
    pub ts_ns: i64,
    pub end_ns: i64,
    bytes: Option<i64>,
    pub source: &'static str,
    name: Option<String>,
    pub call_tid: Option<String>,
    call_ts_ns: Option<i64>,
    pub call_end_ns: Option<i64>,
    // filled by `grouped`
    pub kind: &'static str,
    pub group: String,
    group_source: &'static str,
    desc: Option<String>,
    members: Option<Vec<i32>>,
    peer_in_group: Option<i32>,
}

impl Collective {
    pub fn is_p2p(&self) -> bool {
        self.kind == "p2p"
    }
}

/// The NCCL / RCCL kernels' rows (priority 1).
fn from_kernels(x: &Inputs) -> Vec<Collective> {
    let (k, r) = (&x.kernels, &x.runtime);
    let comm: std::collections::HashSet<i64> = (0..k.kind.len())
        .filter(|&i| text_at(&k.kind, i) == Some("communication"))
        .filter_map(|i| at(&k.correlation, i))
        .collect();
    // the launching call of each correlation: the earliest by (start, thread; NULL last)
    let mut calls: HashMap<i64, (i64, Option<&str>, Option<i64>)> = HashMap::new();
    for i in 0..r.ts_ns.len() {
        let (Some(c), Some(ts)) = (at(&r.correlation, i), at(&r.ts_ns, i)) else {
            continue;
        };
        if !comm.contains(&c) {
            continue;
        }
        let tid = text_at(&r.tid, i);
        let end = at(&r.end_ns, i);
        let better = |old: &(i64, Option<&str>, Option<i64>)| {
            (ts, tid.is_none(), tid) < (old.0, old.1.is_none(), old.1)
        };
        match calls.get(&c) {
            Some(old) if !better(old) => {}
            _ => {
                calls.insert(c, (ts, tid, end));
            }
        }
    }
    let pattern =
        regex::Regex::new("(?i)(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)").expect("a pattern");
    let mut rows = Vec::new();
    for i in 0..k.kind.len() {
        if text_at(&k.kind, i) != Some("communication") {
            continue;
        }
        let (Some(ts), Some(end)) = (at(&k.ts_ns, i), at(&k.end_ns, i)) else {
            continue;
        };
        let name = text_at(&k.name, i);
        let raw = text_at(&k.collective_name, i)
            .map(str::to_owned)
            .or_else(|| {
                name.map(|n| {
                    pattern
                        .captures(n)
                        .and_then(|c| c.get(1))
                        .map_or(String::new(), |m| m.as_str().to_owned())
                })
            });
        let call = at(&k.correlation, i).and_then(|c| calls.get(&c));
        rows.push(Collective {
            step: at(&k.step, i),
            op: collective_op(raw.as_deref()),
            pg_name: text_at(&k.pg_name, i).map(str::to_owned),
            pg_desc: text_at(&k.pg_desc, i).map(str::to_owned),
            pg_ranks: text_at(&k.pg_ranks, i).map(str::to_owned),
            trace_seq: at(&k.collective_seq, i),
            peer_group_rank: at(&k.peer_group_rank, i),
            run_tid: at(&k.stream, i).map(|s| s.to_string()),
            ts_ns: ts,
            end_ns: end,
            bytes: at(&k.in_msg_nelems, i)
                .zip(dtype_bytes(text_at(&k.dtype, i)))
                .and_then(|(n, b)| n.checked_mul(b)),
            source: "nccl_kernel",
            name: name.map(str::to_owned),
            call_tid: call.and_then(|c| c.1).map(str::to_owned),
            call_ts_ns: call.map(|c| c.0),
            call_end_ns: call.and_then(|c| c.2),
            ..Default::default()
        });
    }
    rows
}

/// Indices of `rows` in (start, end) order (ties in the rows' order).
fn by_time(rows: &[(usize, i64, i64)]) -> Vec<usize> {
    let mut sorted = rows.to_vec();
    sorted.sort_by_key(|&(i, ts, end)| (ts, end, i));
    sorted.into_iter().map(|r| r.0).collect()
}

/// gloo's runs of the host (priority 2).
fn from_gloo(x: &Inputs) -> Vec<Collective> {
    let a = &x.annotations;
    struct Run {
        op: Option<String>,
        row: usize,
    }
    let mut runs = Vec::new();
    for i in 0..a.name.len() {
        let Some(name) = text_at(&a.name, i) else {
            continue;
        };
        if !name.starts_with("gloo:") || at_flag(&a.on_gpu, i) != Some(false) {
            continue;
        }
        runs.push(Run {
            op: collective_op(Some(&name[5..])),
            row: i,
        });
    }
    if runs.is_empty() {
        return Vec::new();
    }
    // the c10d:: calls that queue group collectives, in (start, end) order
    let c = &x.cpu_ops;
    let calls: Vec<(usize, i64, i64)> = (0..c.name.len())
        .filter_map(|i| {
            let name = text_at(&c.name, i)?;
            let op = collective_op(Some(name.strip_prefix("c10d::")?))?;
            GROUP_OPS
                .contains(&op.as_str())
                .then(|| Some((i, at(&c.ts_ns, i)?, at(&c.end_ns, i)?)))
                .flatten()
        })
        .collect();
    let calls = by_time(&calls);
    // the group runs in (start, end) order: the k-th is paired with the k-th call
    let group_runs: Vec<(usize, i64, i64)> = runs
        .iter()
        .enumerate()
        .filter(|(_, r)| r.op.is_some() && !is_p2p(r.op.as_deref()))
        .map(|(k, r)| {
            (
                k,
                at(&a.ts_ns, r.row).unwrap_or(0),
                at(&a.end_ns, r.row).unwrap_or(0),
            )
        })
        .collect();
    let mut paired: Vec<Option<usize>> = vec![None; runs.len()];
    for (nth, run) in by_time(&group_runs).into_iter().enumerate() {
        paired[run] = calls.get(nth).copied();
    }
    let call_op =
        |i: usize| collective_op(text_at(&c.name, i).and_then(|n| n.strip_prefix("c10d::")));
    let trusted = runs.iter().zip(&paired).all(|(run, call)| {
        let Some(ci) = *call else { return true };
        let op = call_op(ci);
        let starts_first = at(&c.ts_ns, ci) <= at(&a.ts_ns, run.row);
        starts_first
            && (op == run.op
                || (op.as_deref() == Some("reduce_scatter")
                    && run.op.as_deref() == Some("all_reduce")))
    });
    runs.iter()
        .zip(&paired)
        .map(|(run, call)| {
            let i = run.row;
            let p2p = is_p2p(run.op.as_deref());
            let call = call.filter(|_| trusted);
            let run_tid = text_at(&a.tid, i).map(str::to_owned);
            let ts = at(&a.ts_ns, i).unwrap_or(0);
            let dims = json(text_at(&a.input_dims, i));
            let types = json(text_at(&a.input_type, i));
            let dtype = element(&types, 0).and_then(super::sqlfn::as_text);
            let op = match call.and_then(call_op) {
                Some(asked) if asked == "reduce_scatter" => Some(asked),
                _ => run.op.clone(),
            };
            Collective {
                step: at(&a.step, i),
                op,
                run_tid: run_tid.clone(),
                ts_ns: ts,
                end_ns: at(&a.end_ns, i).unwrap_or(ts),
                bytes: element(&dims, 0)
                    .and_then(int_list)
                    .and_then(|d| product(&d))
                    .zip(dtype_bytes(dtype.as_deref()))
                    .and_then(|(n, b)| n.checked_mul(b)),
                source: "gloo_annotation",
                name: text_at(&a.name, i).map(str::to_owned),
                call_tid: if p2p {
                    run_tid
                } else {
                    call.and_then(|ci| text_at(&c.tid, ci)).map(str::to_owned)
                },
                call_ts_ns: if p2p {
                    Some(ts)
                } else {
                    call.and_then(|ci| at(&c.ts_ns, ci))
                },
                call_end_ns: if p2p {
                    None
                } else {
                    call.and_then(|ci| at(&c.end_ns, ci))
                },
                ..Default::default()
            }
        })
        .collect()
}

fn at_flag(a: &arrow_array::BooleanArray, i: usize) -> Option<bool> {
    super::input::flag_at(a, i)
}

/// record_param_comms ops with a known op (priority 3).
fn from_param_comms(x: &Inputs) -> Vec<Collective> {
    let c = &x.cpu_ops;
    (0..c.name.len())
        .filter_map(|i| {
            if text_at(&c.name, i) != Some("record_param_comms") {
                return None;
            }
            let op = collective_op(text_at(&c.collective_name, i))?;
            let (ts, end) = (at(&c.ts_ns, i)?, at(&c.end_ns, i)?);
            let tid = text_at(&c.tid, i).map(str::to_owned);
            Some(Collective {
                step: at(&c.step, i),
                op: Some(op),
                pg_name: text_at(&c.pg_name, i).map(str::to_owned),
                pg_desc: text_at(&c.pg_desc, i).map(str::to_owned),
                pg_ranks: text_at(&c.pg_ranks, i).map(str::to_owned),
                trace_seq: at(&c.collective_seq, i),
                peer_group_rank: at(&c.peer_group_rank, i),
                run_tid: tid.clone(),
                ts_ns: ts,
                end_ns: end,
                bytes: at(&c.in_msg_nelems, i)
                    .zip(dtype_bytes(text_at(&c.dtype, i)))
                    .and_then(|(n, b)| n.checked_mul(b)),
                source: "record_param_comms",
                name: Some("record_param_comms".into()),
                call_tid: tid,
                call_ts_ns: Some(ts),
                call_end_ns: Some(end),
                ..Default::default()
            })
        })
        .collect()
}

/// group_ranks_arg: args."Process Group Ranks" as a list of ranks (a JSON array of integers).
fn group_ranks(text: Option<&str>) -> Option<Vec<i32>> {
    json(text)?
        .as_array()?
        .iter()
        .map(|v| super::sqlfn::json_int(v).and_then(|r| i32::try_from(r).ok()))
        .collect()
}

/// The rank's collectives, grouped, in (start, end) order.
pub fn collectives(x: &Inputs) -> Vec<Collective> {
    let mut rows = from_kernels(x);
    if rows.is_empty() {
        rows = from_gloo(x);
    }
    if rows.is_empty() {
        rows = from_param_comms(x);
    }
    rows.retain(|r| r.op.is_some());
    let configs: &[PgConfig] = &x.configs;
    let largest = configs
        .iter()
        .max_by_key(|c| (c.size, -c.index))
        .map(|c| c.name.clone());
    let config_of = |name: &str| {
        configs
            .iter()
            .filter(|c| c.name == name)
            .min_by_key(|c| c.index)
    };
    // the c10d::send / recv_ calls with a peer, for the p2p rows that carry none
    let c = &x.cpu_ops;
    let p2p_calls: Vec<(&str, i64, i64, i32)> = (0..c.name.len())
        .filter_map(|i| {
            matches!(text_at(&c.name, i), Some("c10d::send" | "c10d::recv_")).then_some(())?;
            Some((
                text_at(&c.tid, i)?,
                at(&c.ts_ns, i)?,
                at(&c.end_ns, i)?,
                at(&c.peer_group_rank, i)?,
            ))
        })
        .collect();
    for r in rows.iter_mut() {
        r.kind = if is_p2p(r.op.as_deref()) {
            "p2p"
        } else {
            "collective"
        };
        r.group_source = if r.pg_name.is_some() {
            "trace"
        } else {
            match configs.len() {
                0 => "unknown",
                1 => "pg_config",
                _ => "pending",
            }
        };
        r.group = r
            .pg_name
            .clone()
            .or_else(|| largest.clone())
            .unwrap_or_else(|| "default".into());
        r.peer_in_group = r.peer_group_rank.or_else(|| {
            if r.kind != "p2p" {
                return None;
            }
            let (tid, ts) = (r.call_tid.as_deref()?, r.call_ts_ns?);
            p2p_calls
                .iter()
                .filter(|p| p.0 == tid && p.1 <= ts && ts <= p.2)
                .map(|p| p.3)
                .max()
        });
        let config = config_of(&r.group);
        r.desc = r.pg_desc.clone().or_else(|| {
            configs
                .iter()
                .filter(|c| c.name == r.group)
                .find_map(|c| c.desc.clone())
        });
        r.members = group_ranks(r.pg_ranks.as_deref()).or_else(|| config.map(|c| c.ranks.clone()));
    }
    rows.sort_by_key(|r| (r.ts_ns, r.end_ns));
    rows
}

/// The `collectives` table of `rows` (collectives(): grouped, in order).
pub fn table(rank: i32, rows: &[Collective]) -> Columns {
    let n = rows.len();
    let mut seq = vec![0i64; n];
    let mut index_in_step = vec![0i64; n];
    let mut in_group: HashMap<&str, i64> = HashMap::new();
    let mut in_step: HashMap<Option<i64>, i64> = HashMap::new();
    for (i, r) in rows.iter().enumerate() {
        let s = in_group.entry(r.group.as_str()).or_default();
        seq[i] = *s;
        *s += 1;
        let s = in_step.entry(r.step).or_default();
        index_in_step[i] = *s;
        *s += 1;
    }
    let peer = |r: &Collective| {
        let members = r.members.as_ref()?;
        let p = usize::try_from(r.peer_in_group?).ok()?;
        members.get(p).copied()
    };
    Columns::default()
        .i32("rank", rows.iter().map(|_| Some(rank)))
        .i64("step", rows.iter().map(|r| r.step))
        .text("op", rows.iter().map(|r| r.op.as_deref()))
        .text("kind", rows.iter().map(|r| Some(r.kind)))
        .text("process_group", rows.iter().map(|r| Some(r.group.as_str())))
        .text("pg_desc", rows.iter().map(|r| r.desc.as_deref()))
        .i32_lists("group_ranks", rows.iter().map(|r| r.members.as_deref()))
        .text("group_source", rows.iter().map(|r| Some(r.group_source)))
        .i32("peer", rows.iter().map(peer))
        .i32("peer_group_rank", rows.iter().map(|r| r.peer_in_group))
        .i64("seq", seq.iter().map(|&s| Some(s)))
        .i64("trace_seq", rows.iter().map(|r| r.trace_seq))
        .i64("index_in_step", index_in_step.iter().map(|&s| Some(s)))
        .i64("bytes", rows.iter().map(|r| r.bytes))
        .i64("ts_ns", rows.iter().map(|r| Some(r.ts_ns)))
        .i64("end_ns", rows.iter().map(|r| Some(r.end_ns)))
        .i64("dur_ns", rows.iter().map(|r| Some(r.end_ns - r.ts_ns)))
        .text("source", rows.iter().map(|r| Some(r.source)))
        .text("name", rows.iter().map(|r| r.name.as_deref()))
        .text("run_tid", rows.iter().map(|r| r.run_tid.as_deref()))
        .text("call_tid", rows.iter().map(|r| r.call_tid.as_deref()))
        .i64("call_end_ns", rows.iter().map(|r| r.call_end_ns))
}

/// Union length of intervals (sorted by start): touching ones merge.
pub fn union_ns(mut spans: Vec<(i64, i64)>) -> i64 {
    spans.sort_unstable();
    let mut total = 0i64;
    let mut current: Option<(i64, i64)> = None;
    for (ts, end) in spans {
        match current {
            Some((lo, hi)) if ts <= hi => current = Some((lo, hi.max(end))),
            _ => {
                if let Some((lo, hi)) = current {
                    total += hi - lo;
                }
                current = Some((ts, end));
            }
        }
    }
    if let Some((lo, hi)) = current {
        total += hi - lo;
    }
    total
}

/// `step_comm`: per step, the time with a collective of the step in flight (clipped to it).
pub fn step_comm(rank: i32, steps: &Steps, rows: &[Collective]) -> Columns {
    let mut spans: Vec<Vec<(i64, i64)>> = vec![Vec::new(); steps.len()];
    for r in rows {
        let Some(k) = r.step.and_then(|s| steps.index_of(s)) else {
            continue;
        };
        let (lo, hi) = (steps.ts_ns[k], steps.end_ns[k]);
        if r.end_ns > lo && r.ts_ns < hi {
            spans[k].push((r.ts_ns.max(lo), r.end_ns.min(hi)));
        }
    }
    let comm: Vec<i64> = spans.into_iter().map(union_ns).collect();
    Columns::default()
        .i32("rank", steps.step.iter().map(|_| Some(rank)))
        .i64("step", steps.step.iter().map(|&s| Some(s)))
        .i64("comm_ns", comm.into_iter().map(Some))
}
