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
use std::fs::File;
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;

use crate::derived::input::{at, Shared};
use crate::derived::out::Columns;

/// A kernel starting this soon after its launch call returns waited for the launch.
pub const LAUNCH_SLACK_NS: i64 = 2_000;
/// A guard: a walk never loops, but a pathological trace cannot run away.
pub const MAX_WALK_STEPS: usize = 5_000;

const NONE: u32 = u32::MAX;

/// The input file's columns (analysis/critical_path.py writes them), its texts among them.
const INPUT_COLUMNS: [&str; 13] = [
    "step",
    "src",
    "rank",
    "k1",
    "k2",
    "name",
    "kind",
    "launch_end_ns",
    "process_group",
    "op",
    "op_index",
    "stream",
    "correlation",
];
const TEXT_COLUMNS: [&str; 4] = ["name", "kind", "process_group", "op"];
/// Rows of the input read at a time (the gathering's row groups hold as many).
const BATCH_ROWS: usize = 16_384;

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

/// One row of the input file: 88 bytes (its four optional numbers as values and a mask of
/// their nulls, not Options of 16 bytes each: the rows are most of the walk's memory).
struct Row {
    step: i64,
    src: i32,
    rank: i32,
    k1: i64,
    k2: i64,
    name: u32,
    kind: u32,
    pg: u32,
    op: u32,
    /// launch_end_ns, op_index, stream, correlation: OPTIONAL's order
    optional: [i64; 4],
    /// bit i set: optional[i] is null
    nulls: u8,
}

const _: () = assert!(std::mem::size_of::<Row>() == 88);

/// The places of a Row's optional numbers.
const LAUNCH_END: usize = 0;
const OP_INDEX: usize = 1;
const STREAM: usize = 2;
const CORRELATION: usize = 3;

impl Row {
    fn optional(&self, at: usize) -> Option<i64> {
        (self.nulls & (1 << at) == 0).then_some(self.optional[at])
    }

    /// An optional number's sort key: a null after every value.
    fn nulls_last(&self, at: usize) -> (bool, i64) {
        (self.nulls & (1 << at) != 0, self.optional[at])
    }
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

/// The walk's inputs at `input` -> its segments at `output` (columns rank, step, seq, kind,
/// name, ts_ns, dur_ns, on_rank); returns the segments' count. A row without step, src, rank,
/// k1 or k2 is left out.
pub fn walk_file(input: &Path, output: &Path) -> Result<usize, String> {
    let (rows, texts) = read_rows(input)?;
    let [names, kinds, pgs, ops] = texts.map(Texts::new);
    let walked = walk_rows(rows, &names, &kinds, &pgs, &ops, output);
    // (the rows' memory back to the system: under the insert of the segments it was 14 MB at 200 MB)
    crate::trim_heap();
    walked
}

/// The input file's rows, a batch at a time (the file's columns and their rows were held at
/// once: at 200 MB of trace 27 MB over the walk's start, the reduce's peak), and the texts of
/// its columns name, kind, process_group and op, by id.
fn read_rows(input: &Path) -> Result<(Vec<Row>, [Shared; 4]), String> {
    let what = input.display();
    let fail = |e: &dyn std::fmt::Display| format!("cannot read {what} ({e})");
    let file = File::open(input).map_err(|e| fail(&e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| fail(&e))?;
    let descr = builder.metadata().file_metadata().schema_descr_ptr();
    for c in INPUT_COLUMNS {
        if !descr.columns().iter().any(|d| d.name() == c) {
            return Err(fail(&format!("no column {c}")));
        }
    }
    let n = usize::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0);
    let mask = ProjectionMask::columns(&descr, INPUT_COLUMNS);
    let reader = builder
        .with_projection(mask)
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| fail(&e))?;
    let mut texts: [Shared; 4] = Default::default();
    // (sized at once: pushed a row at a time, the rows were grown by doubling)
    let mut rows: Vec<Row> = Vec::with_capacity(n);
    for batch in reader {
        let batch = batch.map_err(|e| fail(&e))?;
        let column = |c: &str| {
            batch
                .column_by_name(c)
                .ok_or_else(|| fail(&format!("no column {c}")))
        };
        let i64s = |c: &str| {
            column(c)?
                .as_primitive_opt::<Int64Type>()
                .ok_or_else(|| fail(&format!("column {c} is not BIGINT")))
        };
        let i32s = |c: &str| {
            column(c)?
                .as_primitive_opt::<Int32Type>()
                .ok_or_else(|| fail(&format!("column {c} is not INTEGER")))
        };
        let (step, src, rank, k1, k2) = (
            i64s("step")?,
            i32s("src")?,
            i32s("rank")?,
            i64s("k1")?,
            i64s("k2")?,
        );
        let (launch_end, op_index, stream, correlation) = (
            i64s("launch_end_ns")?,
            i64s("op_index")?,
            i64s("stream")?,
            i64s("correlation")?,
        );
        for (t, c) in texts.iter_mut().zip(TEXT_COLUMNS) {
            t.forget_rows();
            t.extend(column(c)?)
                .map_err(|e| fail(&format!("column {c} is not {e}")))?;
        }
        let [names, kinds, pgs, ops] = &texts;
        let id = |t: &Shared, i: usize| t.id(i).unwrap_or(NONE);
        rows.extend((0..batch.num_rows()).filter_map(|i| {
            Some(Row {
                step: at(step, i)?,
                src: at(src, i)?,
                rank: at(rank, i)?,
                k1: at(k1, i)?,
                k2: at(k2, i)?,
                name: id(names, i),
                kind: id(kinds, i),
                pg: id(pgs, i),
                op: id(ops, i),
                optional: [
                    at(launch_end, i).unwrap_or(0),
                    at(op_index, i).unwrap_or(0),
                    at(stream, i).unwrap_or(0),
                    at(correlation, i).unwrap_or(0),
                ],
                nulls: [launch_end, op_index, stream, correlation]
                    .iter()
                    .enumerate()
                    .fold(0, |m, (b, c)| m | (u8::from(at(*c, i).is_none()) << b)),
            })
        }));
    }
    for t in &mut texts {
        t.forget_rows();
    }
    Ok((rows, texts))
}

/// The walk of every step of `rows` (the texts by id in `names` .. `ops`) -> the segments at
/// `output`; returns their count.
fn walk_rows(
    mut rows: Vec<Row>,
    names: &Texts,
    kinds: &Texts,
    pgs: &Texts,
    ops: &Texts,
    output: &Path,
) -> Result<usize, String> {
    rows.sort_unstable_by(|a, b| {
        (a.step, a.src, a.rank, a.k1, a.k2)
            .cmp(&(b.step, b.src, b.rank, b.k1, b.k2))
            .then_with(|| names.rank_of(a.name).cmp(&names.rank_of(b.name)))
            .then_with(|| a.nulls_last(STREAM).cmp(&b.nulls_last(STREAM)))
            .then_with(|| a.nulls_last(CORRELATION).cmp(&b.nulls_last(CORRELATION)))
            .then_with(|| pgs.rank_of(a.pg).cmp(&pgs.rank_of(b.pg)))
            .then_with(|| a.nulls_last(OP_INDEX).cmp(&b.nulls_last(OP_INDEX)))
            .then_with(|| kinds.rank_of(a.kind).cmp(&kinds.rank_of(b.kind)))
            .then_with(|| a.nulls_last(LAUNCH_END).cmp(&b.nulls_last(LAUNCH_END)))
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
    drop(rows); // (walked: the segments are written without them)

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
            index: r.optional(OP_INDEX),
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
                launch_end: r.optional(LAUNCH_END),
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
