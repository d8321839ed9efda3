//! Stage 3 (the reduce, after the ranks are aligned): the walk of the critical path of every
//! aligned step. traceanalyze/analysis/critical_path.py states the rules and writes what the
//! walk reads into one Parquet file (`src` says what a row is: 0 a rank's step bounds, 1 GPU
//! work, 2 a synchronization call, 3 a host-side collective, 4 a top-level host op, 5 a rank's
//! arrival at a collective); the segments go into another, which the reduce inserts into the
//! `critical_path` table.
//!
//! The rows are put in one order here (step, src, rank, then each list's sort keys, a null
//! after every value, then every other column), so the walk never depends on the order the
//! file was written in.

use std::collections::HashMap;
use std::path::Path;

use crate::derived::input::{at, Kind, Shared, Table};
use crate::derived::out::Columns;

/// A kernel starting this soon after its launch call returns waited for the launch.
pub const LAUNCH_SLACK_NS: i64 = 2_000;
/// A guard: a walk never loops, but a pathological trace cannot run away.
pub const MAX_WALK_STEPS: usize = 5_000;

const NONE: u32 = u32::MAX;

/// A collective instance: (process group, op, op index); texts as ids of their column.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    pg: u32,
    op: u32,
    index: Option<i64>,
}

struct Gpu {
    ts: i64,
    end: i64,
    name: u32,
    kind: u32,
    launch_end: Option<i64>,
    collective: Option<Key>,
}

struct HostColl {
    end: i64,
    ts: i64,
    name: u32,
    key: Key,
}

struct Op {
    ts: i64,
    end: i64,
    name: u32,
}

#[derive(Default)]
struct Rank {
    start: i64,
    end: i64,
    gpu: Vec<Gpu>, // sorted by end
    gpu_ends: Vec<i64>,
    syncs: Vec<(i64, i64)>, // (end, start), sorted
    host_colls: Vec<HostColl>,
    ops: Vec<Op>,          // sorted by ts
    ops_max_end: Vec<i64>, // the latest end of ops[..=i]
}

type Arrivals = HashMap<Key, HashMap<i32, i64>>;

#[derive(Clone, Copy, PartialEq)]
enum SegKind {
    Kernel,
    Collective,
    Host,
    Gpu(u32), // the GPU work's kind (memcpy, memset, ...)
}

#[derive(Clone, Copy)]
enum SegName {
    Of(u32), // a name of the file's name column
    Host,    // "host": no host op covers any of it
}

struct Seg {
    kind: SegKind,
    name: SegName,
    ts: i64,
    end: i64,
    rank: i32,
}

/// One row of the input file.
struct Row {
    step: i64,
    src: i32,
    rank: i32,
    k1: i64,
    k2: i64,
    name: u32,
    kind: u32,
    launch_end: Option<i64>,
    pg: u32,
    op: u32,
    op_index: Option<i64>,
    stream: Option<i64>,
    correlation: Option<i64>,
}

/// Ids of a text column and each id's place in the texts' byte order (a null after all).
struct Texts {
    column: Shared,
    order: Vec<u32>,
}

impl Texts {
    fn new(column: Shared) -> Texts {
        let texts = column.distinct();
        let mut by_text: Vec<u32> = (0..texts.len() as u32).collect();
        by_text.sort_by(|a, b| texts[*a as usize].cmp(&texts[*b as usize]));
        let mut order = vec![0; texts.len()];
        for (place, id) in by_text.into_iter().enumerate() {
            order[id as usize] = place as u32;
        }
        Texts { column, order }
    }

    fn id(&self, i: usize) -> u32 {
        self.column.id(i).unwrap_or(NONE)
    }

    fn rank_of(&self, id: u32) -> u32 {
        if id == NONE {
            u32::MAX
        } else {
            self.order[id as usize]
        }
    }

    fn text(&self, id: u32) -> Option<&str> {
        (id != NONE).then(|| &*self.column.distinct()[id as usize])
    }
}

fn nulls_last(v: Option<i64>) -> (bool, i64) {
    (v.is_none(), v.unwrap_or(0))
}

/// The walk's inputs at `input` -> its segments at `output` (columns rank, step, seq, kind,
/// name, ts_ns, dur_ns, on_rank); returns the segments' count. A row without step, src, rank,
/// k1 or k2 is left out.
pub fn walk_file(input: &Path, output: &Path) -> Result<usize, String> {
    let mut t = Table::read(
        input,
        &[
            ("step", Kind::I64),
            ("src", Kind::I32),
            ("rank", Kind::I32),
            ("k1", Kind::I64),
            ("k2", Kind::I64),
            ("name", Kind::Shared),
            ("kind", Kind::Shared),
            ("launch_end_ns", Kind::I64),
            ("process_group", Kind::Shared),
            ("op", Kind::Shared),
            ("op_index", Kind::I64),
            ("stream", Kind::I64),
            ("correlation", Kind::I64),
        ],
        None,
        None,
    )?;
    let (step, src, rank, k1, k2) = (
        t.i64("step")?,
        t.i32("src")?,
        t.i32("rank")?,
        t.i64("k1")?,
        t.i64("k2")?,
    );
    let (launch_end, op_index, stream, correlation) = (
        t.i64("launch_end_ns")?,
        t.i64("op_index")?,
        t.i64("stream")?,
        t.i64("correlation")?,
    );
    let names = Texts::new(t.shared("name")?);
    let kinds = Texts::new(t.shared("kind")?);
    let pgs = Texts::new(t.shared("process_group")?);
    let ops = Texts::new(t.shared("op")?);
    // (sized at once: collected from a filter, the rows were grown by doubling)
    let mut rows: Vec<Row> = Vec::with_capacity(step.len());
    rows.extend((0..step.len()).filter_map(|i| {
        Some(Row {
            step: at(&step, i)?,
            src: at(&src, i)?,
            rank: at(&rank, i)?,
            k1: at(&k1, i)?,
            k2: at(&k2, i)?,
            name: names.id(i),
            kind: kinds.id(i),
            launch_end: at(&launch_end, i),
            pg: pgs.id(i),
            op: ops.id(i),
            op_index: at(&op_index, i),
            stream: at(&stream, i),
            correlation: at(&correlation, i),
        })
    }));
    // (the columns are in the rows now)
    drop((
        step,
        src,
        rank,
        k1,
        k2,
        launch_end,
        op_index,
        stream,
        correlation,
    ));
    rows.sort_unstable_by(|a, b| {
        (a.step, a.src, a.rank, a.k1, a.k2)
            .cmp(&(b.step, b.src, b.rank, b.k1, b.k2))
            .then_with(|| names.rank_of(a.name).cmp(&names.rank_of(b.name)))
            .then_with(|| nulls_last(a.stream).cmp(&nulls_last(b.stream)))
            .then_with(|| nulls_last(a.correlation).cmp(&nulls_last(b.correlation)))
            .then_with(|| pgs.rank_of(a.pg).cmp(&pgs.rank_of(b.pg)))
            .then_with(|| nulls_last(a.op_index).cmp(&nulls_last(b.op_index)))
            .then_with(|| kinds.rank_of(a.kind).cmp(&kinds.rank_of(b.kind)))
            .then_with(|| nulls_last(a.launch_end).cmp(&nulls_last(b.launch_end)))
            .then_with(|| ops.rank_of(a.op).cmp(&ops.rank_of(b.op)))
    });
    let compute =
        (0..kinds.column.distinct().len() as u32).find(|id| kinds.text(*id) == Some("compute"));

    let mut out: Vec<(i32, i64, usize, Seg)> = Vec::new();
    let mut i = 0;
    while i < rows.len() {
        let step = rows[i].step;
        let j = i + rows[i..].partition_point(|r| r.step == step);
        let (ranks, arrivals) = step_inputs(&rows[i..j]);
        i = j;
        let Some(start) = ranks
            .iter()
            .max_by_key(|(r, x)| (x.end.saturating_sub(x.start), -(**r as i64)))
            .map(|(r, _)| *r)
        else {
            continue;
        };
        let segs = walk(&ranks, start, &arrivals, compute);
        out.extend(
            segs.into_iter()
                .enumerate()
                .map(|(seq, s)| (start, step, seq, s)),
        );
    }

    let kind_text = |k: SegKind| match k {
        SegKind::Kernel => Some("kernel"),
        SegKind::Collective => Some("collective"),
        SegKind::Host => Some("host"),
        SegKind::Gpu(id) => kinds.text(id),
    };
    let name_text = |n: SegName| match n {
        SegName::Of(id) => names.text(id),
        SegName::Host => Some("host"),
    };
    let n = out.len();
    Columns::default()
        .i32("rank", out.iter().map(|o| Some(o.0)))
        .i64("step", out.iter().map(|o| Some(o.1)))
        .i32("seq", out.iter().map(|o| Some(o.2 as i32)))
        .text("kind", out.iter().map(|o| kind_text(o.3.kind)))
        .text("name", out.iter().map(|o| name_text(o.3.name)))
        .i64("ts_ns", out.iter().map(|o| Some(o.3.ts)))
        .i64(
            "dur_ns",
            out.iter().map(|o| Some(o.3.end.saturating_sub(o.3.ts))),
        )
        .i32("on_rank", out.iter().map(|o| Some(o.3.rank)))
        .write_file(output)?;
    Ok(n)
}

/// A step's rows (sorted) -> each rank with step bounds, and the arrivals at its collectives.
fn step_inputs(rows: &[Row]) -> (HashMap<i32, Rank>, Arrivals) {
    let mut ranks: HashMap<i32, Rank> = HashMap::new();
    let mut arrivals: Arrivals = HashMap::new();
    for r in rows {
        let key = Key {
            pg: r.pg,
            op: r.op,
            index: r.op_index,
        };
        if r.src == 0 {
            // (a rank's later bounds replace the earlier ones, and what came before them)
            ranks.insert(
                r.rank,
                Rank {
                    start: r.k1,
                    end: r.k2,
                    ..Rank::default()
                },
            );
            continue;
        }
        if r.src == 5 {
            arrivals.entry(key).or_default().insert(r.rank, r.k1);
            continue;
        }
        let Some(x) = ranks.get_mut(&r.rank) else {
            continue; // (no step bounds on that rank: nothing of it is walked)
        };
        match r.src {
            1 => x.gpu.push(Gpu {
                ts: r.k2,
                end: r.k1,
                name: r.name,
                kind: r.kind,
                launch_end: r.launch_end,
                collective: (r.op != NONE).then_some(key),
            }),
            2 => x.syncs.push((r.k1, r.k2)),
            3 => x.host_colls.push(HostColl {
                end: r.k1,
                ts: r.k2,
                name: r.name,
                key,
            }),
            4 => x.ops.push(Op {
                ts: r.k1,
                end: r.k2,
                name: r.name,
            }),
            _ => {}
        }
    }
    for x in ranks.values_mut() {
        x.gpu_ends = x.gpu.iter().map(|g| g.end).collect();
        let mut latest = i64::MIN;
        x.ops_max_end = x
            .ops
            .iter()
            .map(|o| {
                latest = latest.max(o.end);
                latest
            })
            .collect();
    }
    (ranks, arrivals)
}

/// The host op covering most of [lo, hi] (ties: the earliest), else "host".
fn host_name(r: &Rank, lo: i64, hi: i64) -> SegName {
    let (mut best, mut best_ns) = (SegName::Host, 0i64);
    // (the ops before the first whose latest end passes lo cover none of it)
    let from = r.ops_max_end.partition_point(|&e| e <= lo);
    for o in &r.ops[from..] {
        if o.ts >= hi {
            break;
        }
        let ns = o.end.min(hi).saturating_sub(o.ts.max(lo));
        if ns > best_ns {
            (best, best_ns) = (SegName::Of(o.name), ns);
        }
    }
    best
}

/// The last index of a sorted list whose item is before `t` by `before`.
fn last_before<T>(items: &[T], before: impl Fn(&T) -> bool) -> Option<usize> {
    items.partition_point(before).checked_sub(1)
}

#[derive(PartialEq)]
enum Side {
    Gpu,
    Host,
}

/// The segments of the path from the end of `start`'s step, in time order.
fn walk(
    ranks: &HashMap<i32, Rank>,
    start: i32,
    arrivals: &Arrivals,
    compute: Option<u32>,
) -> Vec<Seg> {
    let mut segs: Vec<Seg> = Vec::new(); // backwards
    let mut rank = start;
    let (mut t, mut side, mut queued) = (ranks[&rank].end, Side::Gpu, false);
    for _ in 0..MAX_WALK_STEPS {
        let r = &ranks[&rank];
        if t <= r.start {
            break;
        }
        if side == Side::Gpu {
            let i = last_before(&r.gpu_ends, |&e| e <= t);
            let Some(k) = i.map(|i| &r.gpu[i]).filter(|k| {
                k.end > r.start && (queued || k.end >= t.saturating_sub(LAUNCH_SLACK_NS))
            }) else {
                side = Side::Host; // the GPU had finished: the host held the step until t
                continue;
            };
            let ts = k.ts.max(r.start);
            if let Some(key) = k.collective {
                if let Some(jump) =
                    collective(&mut segs, ranks, rank, key, k.name, ts, k.end, arrivals)
                {
                    (rank, t) = jump;
                    queued = true;
                    continue;
                }
            } else {
                let kind = if Some(k.kind) == compute {
                    SegKind::Kernel
                } else {
                    SegKind::Gpu(k.kind)
                };
                segs.push(Seg {
                    kind,
                    name: SegName::Of(k.name),
                    ts,
                    end: k.end,
                    rank,
                });
            }
            match k.launch_end {
                Some(launch_end)
                    if k.ts.saturating_sub(launch_end) <= LAUNCH_SLACK_NS
                        && r.start < launch_end =>
                {
                    (t, side) = (launch_end.min(ts), Side::Host); // it waited for its launch
                }
                _ => {
                    // it waited for earlier GPU work
                    t = if ts < t { ts } else { t.saturating_sub(1) };
                    queued = true;
                }
            }
        } else {
            // the host's own work back to where it last waited: a synchronization or a host-side collective
            let sync_end = last_before(&r.syncs, |s| *s < (t, -1))
                .map(|i| r.syncs[i].0)
                .filter(|&e| e > r.start);
            let coll = last_before(&r.host_colls, |c| (c.end, c.ts) < (t, -1))
                .map(|i| &r.host_colls[i])
                .filter(|c| c.end > r.start);
            let lo = r
                .start
                .max(sync_end.unwrap_or(i64::MIN))
                .max(coll.map_or(i64::MIN, |c| c.end));
            segs.push(Seg {
                kind: SegKind::Host,
                name: host_name(r, lo, t),
                ts: lo,
                end: t,
                rank,
            });
            if let Some(c) = coll.filter(|c| c.end == lo) {
                let from = c.ts.max(r.start);
                (rank, t) =
                    collective(&mut segs, ranks, rank, c.key, c.name, from, c.end, arrivals)
                        .unwrap_or((rank, from));
            } else if sync_end == Some(lo) {
                (t, side, queued) = (lo, Side::Gpu, true);
            } else {
                break;
            }
        }
    }
    segs.reverse();
    segs
}

/// Adds the collective's segment; (rank, t) to go on from when the last arrival is another rank.
#[allow(clippy::too_many_arguments)]
fn collective(
    segs: &mut Vec<Seg>,
    ranks: &HashMap<i32, Rank>,
    rank: i32,
    key: Key,
    name: u32,
    ts: i64,
    end: i64,
    arrivals: &Arrivals,
) -> Option<(i32, i64)> {
    let mut seg = Seg {
        kind: SegKind::Collective,
        name: SegName::Of(name),
        ts,
        end,
        rank,
    };
    let last = arrivals
        .get(&key)
        .filter(|seen| seen.len() >= 2 && seen.contains_key(&rank))
        .and_then(|seen| {
            seen.iter()
                .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
                .map(|(q, rel)| (*q, *rel))
        })
        .filter(|(q, _)| *q != rank && ranks.contains_key(q));
    let Some((last, rel)) = last else {
        segs.push(seg);
        return None;
    };
    let r = &ranks[&rank];
    seg.ts = ts.max(r.start.saturating_add(rel)).min(end);
    segs.push(seg);
    Some((last, ranks[&last].start.saturating_add(rel)))
}
