//! Stage 5 (the map's shard), beside `parquet_out`: the per-rank tables that are one pass over
//! a rank's events — `threads`, `steps`, `cpu_ops`, `annotations`, `runtime`, `kernels` (its rules:
//! the `kernels` module; db/schema.sql documents every column) — built from the event batches as they are decoded and written as
//! Parquet files next to raw_events.parquet. Only the rows of those tables are held (not the
//! whole trace); the step of each row is known once every ProfilerStep is, at the end.
//!
//! The rules, as the schema states them:
//! - `threads`: metadata (`ph` M) `thread_name` / `process_name` events, one row per (pid, tid),
//!   the smallest name of each kind;
//! - `steps`: one row per ProfilerStep#N number (complete events, not the GPU copy), spanning
//!   all its occurrences; without any, one synthetic step 0 over every complete event but the
//!   `Trace` span; `cut_short`: the last step, under `cut_short_max_ratio` of the shortest other;
//! - `cpu_ops`, `annotations`, `runtime`: complete events of their categories with a time and a
//!   duration >= 0; `step`: the step that starts last at or before the row (NULL when the row
//!   starts after that step's end); `self_ns` of cpu_ops and annotations: the row's duration
//!   less the union of the other rows of its table and thread inside it (`nesting`).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::fs::File;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use arrow_array::{
    Array, ArrayRef, BooleanArray, Int32Array, Int64Array, RecordBatch, StringArray,
};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use arrow_select::filter::filter_record_batch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use regex::Regex;
use serde_json::Value;

use crate::columns::{by_name, int_at, is_step_mark, text_at, COLUMNS, STEP_MARK_PREFIX};
use crate::gathered::{spill_path, Gathered, SPILL_BYTES};
use crate::kernels::{self, range_pairs, KernelClass, Launches};
use crate::nesting::{self_times_in, Interner, Ordered, Span};
use crate::parquet_props::write_batches;

/// The tables this module builds, in the order they are written.
pub const TABLES: &[&str] = &[
    "threads",
    "steps",
    "cpu_ops",
    "annotations",
    "runtime",
    "kernels",
];

/// `cut_short_max_ratio` as a fraction (numerator, denominator): a last step shorter than
/// that share of the shortest other step was cut short by the profiler.
#[derive(Clone, Copy, Debug)]
pub struct CutShort {
    pub numerator: i64,
    pub denominator: i64,
}

fn col(name: &str) -> usize {
    COLUMNS
        .iter()
        .position(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no column {name}"))
}

/// Columns of the event batches (the `columns` schema, no `rank`) each table copies, in the
/// table's order; `None` marks a column computed here.
const CPU_OPS: &[&str] = &[
    "name",
    "pid",
    "tid",
    "ts_ns",
    "dur_ns",
    "external_id",
    "seq_number",
    "input_dims",
    "input_type",
    "collective_name",
    "in_msg_nelems",
    "dtype",
    "pg_name",
    "pg_desc",
    "pg_ranks",
    "collective_seq",
    "group_size",
];
const ANNOTATIONS: &[&str] = &[
    "name",
    "cat",
    "pid",
    "tid",
    "ts_ns",
    "dur_ns",
    "external_id",
    "input_dims",
    "input_type",
];
const RUNTIME: &[&str] = &[
    "name",
    "tid",
    "ts_ns",
    "dur_ns",
    "correlation",
    "external_id",
];
// (cpu_ops also reads other_args, for the peer of a send / recv)

fn field(name: &str, dt: DataType) -> Field {
    Field::new(name, dt, true)
}

fn schema_of(fields: Vec<Field>) -> SchemaRef {
    Arc::new(Schema::new(fields))
}

fn raw_type(name: &str) -> DataType {
    match COLUMNS[col(name)].1 {
        crate::columns::Ty::Str => DataType::Utf8,
        crate::columns::Ty::I64 => DataType::Int64,
        crate::columns::Ty::I32 => DataType::Int32,
    }
}

/// The output schema of `table` (db/schema.sql's column order and types).
pub fn table_schema(table: &str) -> SchemaRef {
    use DataType::{Boolean, Int32, Int64, Utf8};
    let rank_step = || vec![field("rank", Int32), field("step", Int64)];
    match table {
        "threads" => schema_of(vec![
            field("rank", Int32),
            field("pid", Utf8),
            field("tid", Utf8),
            field("thread_name", Utf8),
            field("process_name", Utf8),
        ]),
        "steps" => schema_of(vec![
            field("rank", Int32),
            field("step", Int64),
            field("ts_ns", Int64),
            field("dur_ns", Int64),
            field("end_ns", Int64),
            field("synthetic", Boolean),
            field("step_index", Int64),
            field("cut_short", Boolean),
        ]),
        "cpu_ops" => {
            let mut f = rank_step();
            for name in &CPU_OPS[..5] {
                f.push(field(name, raw_type(name)));
            }
            f.push(field("end_ns", Int64));
            f.push(field("self_ns", Int64));
            for name in &CPU_OPS[5..16] {
                f.push(field(name, raw_type(name)));
            }
            f.push(field("peer_group_rank", Int32));
            f.push(field("group_size", Int32));
            schema_of(f)
        }
        "annotations" => {
            let mut f = rank_step();
            f.push(field("name", Utf8));
            f.push(field("on_gpu", Boolean));
            for name in &ANNOTATIONS[2..6] {
                f.push(field(name, raw_type(name)));
            }
            f.push(field("end_ns", Int64));
            f.push(field("self_ns", Int64));
            for name in &ANNOTATIONS[6..] {
                f.push(field(name, raw_type(name)));
            }
            schema_of(f)
        }
        "runtime" => {
            let mut f = rank_step();
            for name in &RUNTIME[..4] {
                f.push(field(name, raw_type(name)));
            }
            f.push(field("end_ns", Int64));
            for name in &RUNTIME[4..] {
                f.push(field(name, raw_type(name)));
            }
            f.push(field("is_sync", Boolean));
            schema_of(f)
        }
        "kernels" => kernels::schema(),
        other => panic!("no native table {other}"),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Step {
    step: i64,
    ts_ns: i64,
    end_ns: i64,
}

/// (pid, tid) of a thread, and its names
type ThreadKey = (Option<String>, Option<String>);
type ThreadNames = (Option<String>, Option<String>);

/// The rows of one rank's one-pass tables, gathered batch by batch.
/// The events' oddities the map reports as load issues, counted as the rows go by.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventIssues {
    /// events (not metadata, with a ph) whose ts is missing, not a number or out of range
    pub bad_ts: u64,
    /// complete events with a time and a missing or negative dur
    pub bad_dur: u64,
    /// events without a ph
    pub no_ph: u64,
    /// complete ProfilerStep#N events by name (host ranges with a time and a dur >= 0)
    pub step_names: BTreeMap<String, u64>,
    /// the steps are one synthetic window (no ProfilerStep#N)
    pub synthetic_steps: bool,
    /// kernels rows of a CUPTI range profiler (with counters), and those with a correlation
    pub range_kernels: u64,
    pub range_kernels_paired: u64,
}

/// What `finish` wrote: each table's rows, and the events' issues.
pub struct Finished {
    pub rows: Vec<(&'static str, usize)>,
    pub issues: EventIssues,
    /// each table's seconds on the thread that built and wrote it (wall; the kernels' include
    /// matching them to their launching calls)
    pub seconds: Vec<(&'static str, f64)>,
}

pub struct RankTables {
    rank: i32,
    issues: EventIssues,
    /// (pid, tid) -> (smallest thread_name, smallest process_name)
    threads: BTreeMap<ThreadKey, ThreadNames>,
    /// ProfilerStep number -> (first start, last end)
    marks: BTreeMap<i64, (i64, i64)>,
    /// (first start, last end) of the complete events but the Trace span
    window: Option<(i64, i64)>,
    cpu_ops: Gathered,
    annotations: Gathered,
    runtime: Gathered,
    kernels: Gathered,
}

fn strings(batch: &RecordBatch, name: &str) -> StringArray {
    batch
        .column(col(name))
        .as_any()
        .downcast_ref::<StringArray>()
        .expect("a text column")
        .clone()
}

fn ints(batch: &RecordBatch, name: &str) -> Int64Array {
    batch
        .column(col(name))
        .as_any()
        .downcast_ref::<Int64Array>()
        .expect("a BIGINT column")
        .clone()
}

fn step_number(name: &str) -> Option<i64> {
    let digits = name.strip_prefix(STEP_MARK_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A process group description, NULL when none (torch writes 'undefined'); only spaces are
/// trimmed, as SQL's trim does.
fn group_desc(text: Option<&str>) -> Option<&str> {
    text.filter(|t| !matches!(t.trim_matches(' '), "" | "undefined"))
}

fn is_p2p_call(name: Option<&str>) -> bool {
    matches!(name, Some("c10d::send" | "c10d::recv_"))
}

/// A rank named by an argument: a JSON integer, or a string of decimal digits (an optional
/// minus first), that an INTEGER holds; anything else is unknown.
fn rank_value(v: &Value) -> Option<i32> {
    match v {
        Value::Number(n) => n.as_i64().and_then(|i| i32::try_from(i).ok()),
        Value::String(s) => {
            let digits = s.strip_prefix('-').unwrap_or(s);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            s.parse::<i32>().ok()
        }
        _ => None,
    }
}

/// The other end of a send / recv as a rank of its process group, from an event's other args
/// (JSON object text): `Dst Rank`, else `Src Rank`, else (c10d::send / c10d::recv_) the third
/// of the call's `Concrete Inputs`. The SQL macro p2p_peer_arg (kernels) reads them the same way.
pub fn p2p_peer_arg(name: Option<&str>, other_args: Option<&str>) -> Option<i32> {
    let args: serde_json::Map<String, Value> = serde_json::from_str(other_args?).ok()?;
    let key = |k: &str| args.get(k).and_then(rank_value);
    key("Dst Rank").or_else(|| key("Src Rank")).or_else(|| {
        if is_p2p_call(name) {
            args.get("Concrete Inputs")
                .and_then(|c| c.as_array())
                .and_then(|c| c.get(2))
                .and_then(rank_value)
        } else {
            None
        }
    })
}

fn sync_pattern() -> &'static Regex {
    static PATTERN: OnceLock<Regex> = OnceLock::new();
    PATTERN.get_or_init(|| {
        Regex::new("(?i)(Synchronize|StreamWaitEvent|EventQuery|StreamQuery)").expect("a pattern")
    })
}

fn project(batch: &RecordBatch, names: &[&str]) -> Result<RecordBatch, ArrowError> {
    let indices: Vec<usize> = names.iter().map(|n| col(n)).collect();
    batch.project(&indices)
}

impl RankTables {
    /// The tables of rank `rank`; with `spill`, each event table's rows past `spill.1` bytes
    /// wait in a file in the folder `spill.0` (gathered.rs) instead of memory.
    pub fn new(rank: i32, spill: Option<(&Path, usize)>) -> RankTables {
        let gathered =
            |table: &str| Gathered::new(spill.map(|(dir, bound)| (spill_path(dir, table), bound)));
        RankTables {
            rank,
            issues: EventIssues::default(),
            threads: BTreeMap::new(),
            marks: BTreeMap::new(),
            window: None,
            cpu_ops: gathered("cpu_ops"),
            annotations: gathered("annotations"),
            runtime: gathered("runtime"),
            kernels: gathered("kernels"),
        }
    }

    /// The rows of one batch of events (the `columns` schema).
    pub fn add(&mut self, batch: &RecordBatch) -> Result<(), ArrowError> {
        let (ph, cat, name) = (
            strings(batch, "ph"),
            strings(batch, "cat"),
            strings(batch, "name"),
        );
        let (pid, tid, label) = (
            strings(batch, "pid"),
            strings(batch, "tid"),
            strings(batch, "label"),
        );
        let (ts, dur) = (ints(batch, "ts_ns"), ints(batch, "dur_ns"));
        let n = batch.num_rows();
        let (mut cpu, mut ann, mut run) = (vec![false; n], vec![false; n], vec![false; n]);
        let (mut any_cpu, mut any_ann, mut any_run) = (false, false, false);
        let (mut gpu, mut any_gpu) = (vec![false; n], false);
        for i in 0..n {
            let Some(p) = text_at(&ph, i) else {
                self.issues.no_ph += 1;
                continue;
            };
            let name_i = text_at(&name, i);
            if p != "M" && !ts.is_valid(i) {
                self.issues.bad_ts += 1;
            }
            if p == "M" {
                if let Some(kind @ ("thread_name" | "process_name")) = name_i {
                    let key = (
                        text_at(&pid, i).map(str::to_owned),
                        text_at(&tid, i).map(str::to_owned),
                    );
                    let entry = self.threads.entry(key).or_default();
                    let slot = if kind == "thread_name" {
                        &mut entry.0
                    } else {
                        &mut entry.1
                    };
                    if let Some(l) = text_at(&label, i) {
                        if slot.as_deref().is_none_or(|s| l < s) {
                            *slot = Some(l.to_owned());
                        }
                    }
                }
                continue;
            }
            if p != "X" {
                continue;
            }
            let Some(t) = int_at(&ts, i) else { continue };
            let d = int_at(&dur, i);
            let c = text_at(&cat, i);
            if c != Some("Trace") {
                let end = t.saturating_add(d.unwrap_or(0));
                self.window = Some(match self.window {
                    Some((lo, hi)) => (lo.min(t), hi.max(end)),
                    None => (t, end),
                });
            }
            let Some(d) = d.filter(|d| *d >= 0) else {
                self.issues.bad_dur += 1;
                continue;
            };
            let is_step = name_i.is_some_and(is_step_mark);
            if is_step && c != Some("gpu_user_annotation") {
                if let Some(n) = name_i {
                    *self.issues.step_names.entry(n.to_owned()).or_default() += 1;
                }
                if let Some(step) = name_i.and_then(step_number) {
                    let end = t.saturating_add(d);
                    let span = self.marks.entry(step).or_insert((t, end));
                    *span = (span.0.min(t), span.1.max(end));
                }
            }
            match c {
                Some("cpu_op" | "Operator") => {
                    cpu[i] = true;
                    any_cpu = true;
                }
                Some("user_annotation" | "gpu_user_annotation") if name_i.is_some() && !is_step => {
                    ann[i] = true;
                    any_ann = true;
                }
                Some("cuda_runtime" | "Runtime" | "cuda_driver") => {
                    run[i] = true;
                    any_run = true;
                }
                Some(c) if kernels::CATEGORIES.contains(&c) => {
                    gpu[i] = true;
                    any_gpu = true;
                }
                _ => {}
            }
        }
        if any_cpu {
            let mut names: Vec<&str> = CPU_OPS.to_vec();
            names.push("other_args");
            let rows = filter_record_batch(&project(batch, &names)?, &BooleanArray::from(cpu))?;
            self.cpu_ops.push(rows)?;
        }
        if any_ann {
            let rows =
                filter_record_batch(&project(batch, ANNOTATIONS)?, &BooleanArray::from(ann))?;
            self.annotations.push(rows)?;
        }
        if any_run {
            let rows = filter_record_batch(&project(batch, RUNTIME)?, &BooleanArray::from(run))?;
            self.runtime.push(rows)?;
        }
        if any_gpu {
            // (other_args is read here, for the two columns made of it, and not gathered)
            let other = strings(batch, "other_args");
            let collective = strings(batch, "collective_name");
            let peer = Int32Array::from_iter((0..n).map(|i| {
                (gpu[i] && collective.is_valid(i))
                    .then(|| p2p_peer_arg(text_at(&name, i), text_at(&other, i)))
                    .flatten()
            }));
            let counters = StringArray::from_iter((0..n).map(|i| {
                (gpu[i] && text_at(&cat, i) == Some(kernels::RANGE))
                    .then(|| text_at(&other, i))
                    .flatten()
            }));
            let copied = project(batch, kernels::GATHERED)?;
            let mut fields: Vec<Field> = copied
                .schema()
                .fields()
                .iter()
                .map(|f| f.as_ref().clone())
                .collect();
            fields.push(field("peer_group_rank", DataType::Int32));
            fields.push(field("counters", DataType::Utf8));
            let mut columns = copied.columns().to_vec();
            columns.push(Arc::new(peer));
            columns.push(Arc::new(counters));
            let rows = RecordBatch::try_new(schema_of(fields), columns)?;
            self.kernels
                .push(filter_record_batch(&rows, &BooleanArray::from(gpu))?)?;
        }
        Ok(())
    }

    /// The steps, by (start, number): marked ones, else the synthetic whole window.
    fn steps(&self) -> (Vec<Step>, bool) {
        let mut steps: Vec<Step> = self
            .marks
            .iter()
            .map(|(&step, &(ts_ns, end_ns))| Step {
                step,
                ts_ns,
                end_ns,
            })
            .collect();
        let synthetic = steps.is_empty();
        if synthetic {
            if let Some((ts_ns, end_ns)) = self.window {
                steps.push(Step {
                    step: 0,
                    ts_ns,
                    end_ns,
                });
            }
        }
        steps.sort_by_key(|s| (s.ts_ns, s.step));
        (steps, synthetic)
    }

    /// Write every table as `<dir>/<table>.parquet` (rows of cpu_ops, annotations and runtime
    /// in file order, converted one gathered part at a time; with `parallel`, the three event
    /// tables at once); returns each table's row count.
    pub fn finish(
        self,
        cut: CutShort,
        dir: &Path,
        parallel: bool,
        classes: &[KernelClass],
    ) -> Result<Finished, String> {
        let (steps, synthetic) = self.steps();
        let mut issues = self.issues.clone();
        issues.synthetic_steps = synthetic && !steps.is_empty();
        let range_rows = std::sync::atomic::AtomicU64::new(0);
        let range_paired = std::sync::atomic::AtomicU64::new(0);
        let rank = self.rank;
        let step_of = |ts: Option<i64>| -> Option<i64> {
            let ts = ts?;
            let k = steps.partition_point(|s| s.ts_ns <= ts);
            let s = steps.get(k.checked_sub(1)?)?;
            (ts < s.end_ns).then_some(s.step)
        };
        let clock = Instant::now();
        let mut rows = vec![write_table(
            "threads",
            dir,
            std::iter::once(self.threads_batch()),
        )?];
        let mut seconds = vec![("threads", clock.elapsed().as_secs_f64())];
        let clock = Instant::now();
        rows.push(write_table(
            "steps",
            dir,
            std::iter::once(steps_batch(rank, &steps, synthetic, cut)),
        )?);
        seconds.push(("steps", clock.elapsed().as_secs_f64()));
        let RankTables {
            cpu_ops,
            annotations,
            mut runtime,
            mut kernels,
            ..
        } = self;
        // (the kernels' launching calls, read before the runtime rows are written)
        let gathering = |e: ArrowError| format!("cannot gather the rows of kernels ({e})");
        let clock = Instant::now();
        let launches = Launches::of(&mut runtime, &step_of).map_err(gathering)?;
        let pairs = range_pairs(&mut kernels, &launches).map_err(gathering)?;
        let launches_s = clock.elapsed().as_secs_f64();
        let timed = |table: &'static str,
                     clock: Instant,
                     written: Result<(&'static str, usize), String>| {
            written.map(|w| (w, (table, clock.elapsed().as_secs_f64())))
        };
        let write_kernels = |parts: Gathered| {
            let clock = Instant::now();
            let mut kinds = HashMap::new();
            let mut first = 0;
            let batches = parts.into_parts().map_err(gathering)?.map(|part| {
                let part = part?;
                let batch = kernels::rows_batch(
                    rank,
                    &part,
                    first,
                    &pairs,
                    &launches,
                    &mut kinds,
                    classes,
                    &step_of,
                    &group_desc,
                );
                first += part.num_rows();
                if let Ok(b) = &batch {
                    count_range_kernels(b, &range_rows, &range_paired);
                }
                batch
            });
            timed("kernels", clock, write_table("kernels", dir, batches))
        };
        let write = |(table, mut parts): (&'static str, Gathered)| {
            let clock = Instant::now();
            let fail = |e: ArrowError| format!("cannot gather the rows of {table} ({e})");
            let self_ns = match table {
                "cpu_ops" | "annotations" => self_times_of(&mut parts).map_err(fail)?,
                _ => Vec::new(),
            };
            let mut first = 0;
            let batches = parts.into_parts().map_err(fail)?.map(|part| {
                let part = part?;
                let rows = first..first + part.num_rows();
                first = rows.end;
                rows_batch(table, rank, &part, &step_of, self_ns.get(rows))
            });
            timed(table, clock, write_table(table, dir, batches))
        };
        let events = [
            ("cpu_ops", cpu_ops),
            ("annotations", annotations),
            ("runtime", runtime),
        ];
        if parallel {
            // (each table on its own thread: the map's SQL tables used every core too)
            let written: Vec<_> = std::thread::scope(|scope| {
                let mut handles: Vec<_> = events
                    .into_iter()
                    .map(|table| scope.spawn(|| write(table)))
                    .collect();
                handles.push(scope.spawn(|| write_kernels(kernels)));
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|p| {
                            let text = crate::panic_text(&*p);
                            Err(format!("a table writer panicked ({text})"))
                        })
                    })
                    .collect()
            });
            for w in written {
                let (w, s) = w?;
                rows.push(w);
                seconds.push(s);
            }
        } else {
            for table in events {
                let (w, s) = write(table)?;
                rows.push(w);
                seconds.push(s);
            }
            let (w, s) = write_kernels(kernels)?;
            rows.push(w);
            seconds.push(s);
        }
        if let Some(k) = seconds.iter_mut().find(|(t, _)| *t == "kernels") {
            k.1 += launches_s;
        }
        issues.range_kernels = range_rows.into_inner();
        issues.range_kernels_paired = range_paired.into_inner();
        Ok(Finished {
            rows,
            issues,
            seconds,
        })
    }

    fn threads_batch(&self) -> Result<RecordBatch, ArrowError> {
        let n = self.threads.len();
        let (mut pid, mut tid, mut thread, mut process) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for ((p, t), (thread_name, process_name)) in &self.threads {
            pid.push(p.as_deref());
            tid.push(t.as_deref());
            thread.push(thread_name.as_deref());
            process.push(process_name.as_deref());
        }
        RecordBatch::try_new(
            table_schema("threads"),
            vec![
                Arc::new(Int32Array::from_value(self.rank, n)),
                Arc::new(StringArray::from(pid)),
                Arc::new(StringArray::from(tid)),
                Arc::new(StringArray::from(thread)),
                Arc::new(StringArray::from(process)),
            ],
        )
    }
}

/// Count the kernels rows of a CUPTI range profiler (with counters) and those of them with a
/// correlation.
fn count_range_kernels(
    batch: &RecordBatch,
    rows: &std::sync::atomic::AtomicU64,
    paired: &std::sync::atomic::AtomicU64,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let (Ok(counters), Ok(correlation)) = (
        by_name::<StringArray>(batch, "counters"),
        by_name::<Int64Array>(batch, "correlation"),
    ) else {
        return;
    };
    for i in 0..batch.num_rows() {
        if counters.is_valid(i) {
            rows.fetch_add(1, Relaxed);
            if correlation.is_valid(i) {
                paired.fetch_add(1, Relaxed);
            }
        }
    }
}

fn steps_batch(
    rank: i32,
    steps: &[Step],
    synthetic: bool,
    cut: CutShort,
) -> Result<RecordBatch, ArrowError> {
    let n = steps.len();
    let dur = |s: &Step| s.end_ns - s.ts_ns;
    let others_min = steps.iter().take(n.saturating_sub(1)).map(dur).min();
    let cut_short: Vec<bool> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            i + 1 == n
                && !synthetic
                && others_min.is_some_and(|m| {
                    (dur(s) as i128) * (cut.denominator as i128)
                        < (cut.numerator as i128) * (m as i128)
                })
        })
        .collect();
    RecordBatch::try_new(
        table_schema("steps"),
        vec![
            Arc::new(Int32Array::from_value(rank, n)),
            Arc::new(Int64Array::from_iter_values(steps.iter().map(|s| s.step))),
            Arc::new(Int64Array::from_iter_values(steps.iter().map(|s| s.ts_ns))),
            Arc::new(Int64Array::from_iter_values(steps.iter().map(dur))),
            Arc::new(Int64Array::from_iter_values(steps.iter().map(|s| s.end_ns))),
            Arc::new(BooleanArray::from(vec![synthetic; n])),
            Arc::new(Int64Array::from_iter_values(0..n as i64)),
            Arc::new(BooleanArray::from(cut_short)),
        ],
    )
}

/// One part of an event table from a part of its gathered rows: rank, step, the copied columns,
/// end_ns and the computed ones, in the table's column order.
fn rows_batch(
    table: &str,
    rank: i32,
    rows: &RecordBatch,
    step_of: &dyn Fn(Option<i64>) -> Option<i64>,
    self_ns: Option<&[i64]>,
) -> Result<RecordBatch, ArrowError> {
    let schema = table_schema(table);
    let self_ns = || -> ArrayRef {
        let values = self_ns.expect("the exclusive times of the table's rows");
        Arc::new(Int64Array::from_iter_values(values.iter().copied()))
    };
    let n = rows.num_rows();
    let by = |name: &str| -> ArrayRef {
        let i = rows.schema().index_of(name).expect("a gathered column");
        rows.column(i).clone()
    };
    let ts = by("ts_ns");
    let ts = ts.as_any().downcast_ref::<Int64Array>().expect("ts_ns");
    let dur = by("dur_ns");
    let dur = dur.as_any().downcast_ref::<Int64Array>().expect("dur_ns");
    let step: ArrayRef = Arc::new(Int64Array::from_iter(
        (0..n).map(|i| step_of(int_at(ts, i))),
    ));
    let end: ArrayRef = Arc::new(Int64Array::from_iter(
        (0..n).map(|i| Some(int_at(ts, i)?.saturating_add(int_at(dur, i)?))),
    ));
    let name = by("name");
    let names = name.as_any().downcast_ref::<StringArray>().expect("name");
    let mut columns: Vec<ArrayRef> = vec![Arc::new(Int32Array::from_value(rank, n)), step];
    match table {
        "cpu_ops" => {
            for c in &CPU_OPS[..5] {
                columns.push(by(c));
            }
            columns.push(end);
            columns.push(self_ns());
            for c in &CPU_OPS[5..16] {
                let column = by(c);
                if *c == "pg_desc" {
                    let text = column
                        .as_any()
                        .downcast_ref::<StringArray>()
                        .expect("pg_desc");
                    columns.push(Arc::new(StringArray::from_iter(
                        (0..n).map(|i| group_desc(text_at(text, i))),
                    )));
                } else {
                    columns.push(column);
                }
            }
            let collective = by("collective_name");
            let other = by("other_args");
            let (collective, other) = (
                collective
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .expect("collective_name"),
                other
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .expect("other_args"),
            );
            columns.push(Arc::new(Int32Array::from_iter((0..n).map(|i| {
                let name = text_at(names, i);
                (is_p2p_call(name) || collective.is_valid(i))
                    .then(|| p2p_peer_arg(name, text_at(other, i)))
                    .flatten()
            }))));
            columns.push(by("group_size"));
        }
        "annotations" => {
            columns.push(name.clone());
            let cat = by("cat");
            let cat = cat.as_any().downcast_ref::<StringArray>().expect("cat");
            columns.push(Arc::new(BooleanArray::from_iter(
                (0..n).map(|i| text_at(cat, i).map(|c| c == "gpu_user_annotation")),
            )));
            for c in &ANNOTATIONS[2..6] {
                columns.push(by(c));
            }
            columns.push(end);
            columns.push(self_ns());
            for c in &ANNOTATIONS[6..] {
                columns.push(by(c));
            }
        }
        "runtime" => {
            for c in &RUNTIME[..4] {
                columns.push(by(c));
            }
            columns.push(end);
            for c in &RUNTIME[4..] {
                columns.push(by(c));
            }
            let pattern = sync_pattern();
            // (calls come in runs of one name: each run matched once)
            let mut last: Option<(&str, bool)> = None;
            columns.push(Arc::new(BooleanArray::from_iter((0..n).map(|i| {
                let name = text_at(names, i)?;
                Some(match last {
                    Some((seen, sync)) if seen == name => sync,
                    _ => {
                        let sync = pattern.is_match(name);
                        last = Some((name, sync));
                        sync
                    }
                })
            }))));
        }
        other => panic!("no native table {other}"),
    }
    RecordBatch::try_new(schema, columns)
}

/// The exclusive time of every gathered row of cpu_ops or annotations, in gathered order
/// (`nesting`: among the rows of the same table and thread, (pid, tid)).
fn self_times_of(parts: &mut Gathered) -> Result<Vec<i64>, ArrowError> {
    let (mut threads, mut names) = (Interner::default(), Interner::default());
    let mut spans = Vec::new();
    let mut name_ids = Vec::new();
    for part in parts.parts_of(KEYED)? {
        let part = part?;
        let text = |name: &str| by_name::<StringArray>(&part, name);
        let int = |name: &str| by_name::<Int64Array>(&part, name);
        let (pid, tid, name) = (text("pid")?, text("tid")?, text("name")?);
        let (ts, dur, external_id) = (int("ts_ns")?, int("dur_ns")?, int("external_id")?);
        // (annotations have no sequence number)
        let seq = int("seq_number").ok();
        let mut key = String::new();
        // (rows come in runs of one thread and often one name: each looked up once per run)
        let mut last_thread: Option<(Option<&str>, Option<&str>, u32)> = None;
        let mut last_name: Option<(&str, u32)> = None;
        for i in 0..part.num_rows() {
            let (p, t) = (text_at(pid, i), text_at(tid, i));
            let thread = match last_thread {
                Some((lp, lt, id)) if lp == p && lt == t => id,
                _ => {
                    // (pid and tid as one key: their lengths keep "1"+"23" apart from "12"+"3")
                    key.clear();
                    for value in [p, t] {
                        match value {
                            Some(v) => {
                                let _ = write!(key, "{}:{v}", v.len());
                            }
                            None => key.push('-'),
                        }
                    }
                    let id = threads.id(&key);
                    last_thread = Some((p, t, id));
                    id
                }
            };
            let ts_ns = int_at(ts, i).unwrap_or(0);
            spans.push(Span {
                thread,
                ts_ns,
                end_ns: ts_ns.saturating_add(int_at(dur, i).unwrap_or(0)),
                name_order: u32::MAX,
                external_id: int_at(external_id, i),
                seq_number: seq.and_then(|s| int_at(s, i)),
                content: 0,
            });
            name_ids.push(text_at(name, i).map(|n| match last_name {
                Some((last, id)) if last == n => id,
                _ => {
                    let id = names.id(n);
                    last_name = Some((n, id));
                    id
                }
            }));
        }
    }
    let order = names.order();
    for (span, id) in spans.iter_mut().zip(name_ids) {
        if let Some(id) = id {
            span.name_order = order[id as usize];
        }
    }
    let ordered = Ordered::of(&spans);
    let runs: Vec<Vec<u32>> = ordered.tie_runs().map(<[u32]>::to_vec).collect();
    if !runs.is_empty() {
        order_by_content(parts, &runs, &mut spans)?;
    }
    Ok(self_times_in(&spans, ordered))
}

/// Columns already in `nesting::Span`'s key: the rest of a gathered row is its content.
const KEYED: &[&str] = &[
    "pid",
    "tid",
    "ts_ns",
    "dur_ns",
    "name",
    "external_id",
    "seq_number",
];

/// One value of a row's content: NULL last, then integers or text in order.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Content {
    Int(i64),
    Text(String),
    Null,
}

/// Each row of `runs` its place in its run by its content (the gathered columns not in the key,
/// in their order; text in byte order, NULL last): read again from the gathered rows, only for
/// those rows (twins are rare).
fn order_by_content(
    parts: &mut Gathered,
    runs: &[Vec<u32>],
    spans: &mut [Span],
) -> Result<(), ArrowError> {
    let wanted: std::collections::HashSet<u32> = runs.iter().flatten().copied().collect();
    let mut content: HashMap<u32, Vec<Content>> = HashMap::with_capacity(wanted.len());
    let mut first = 0u32;
    for part in parts.parts()? {
        let part = part?;
        let schema = part.schema();
        let columns: Vec<&ArrayRef> = schema
            .fields()
            .iter()
            .zip(part.columns())
            .filter(|(f, _)| !KEYED.contains(&f.name().as_str()))
            .map(|(_, c)| c)
            .collect();
        for i in 0..part.num_rows() {
            let row = first + i as u32;
            if !wanted.contains(&row) {
                continue;
            }
            let values = columns
                .iter()
                .map(|c| {
                    if c.is_null(i) {
                        Content::Null
                    } else if let Some(a) = c.as_any().downcast_ref::<StringArray>() {
                        Content::Text(a.value(i).to_owned())
                    } else if let Some(a) = c.as_any().downcast_ref::<Int64Array>() {
                        Content::Int(a.value(i))
                    } else if let Some(a) = c.as_any().downcast_ref::<Int32Array>() {
                        Content::Int(a.value(i).into())
                    } else {
                        Content::Null
                    }
                })
                .collect();
            content.insert(row, values);
        }
        first += part.num_rows() as u32;
    }
    for run in runs {
        let mut members = run.clone();
        members.sort_by(|a, b| content[a].cmp(&content[b]).then(a.cmp(b)));
        for (place, row) in members.into_iter().enumerate() {
            spans[row as usize].content = place as u32;
        }
    }
    Ok(())
}

/// Columns of the tables with nearly one value per row: a dictionary would only be built to be
/// dropped (it doubled cpu_ops.parquet of a 200 MB CPU trace, 2.6 -> 5.4 MB).
const NO_DICTIONARY: &[&str] = &["ts_ns", "end_ns", "external_id", "correlation"];

/// Write `batches` as `<dir>/<table>.parquet` (zstd, the table's schema; no rows: an empty
/// file); returns the table's row count.
fn write_table(
    table: &'static str,
    dir: &Path,
    batches: impl Iterator<Item = Result<RecordBatch, ArrowError>>,
) -> Result<(&'static str, usize), String> {
    let path = dir.join(format!("{table}.parquet"));
    let rows = write_batches(&path, table_schema(table), batches, NO_DICTIONARY)?;
    Ok((table, rows))
}

/// The tables of a rank's raw_events.parquet (its first column `rank`, then the `columns`
/// schema): for rows the map fixed after the read (B/E pairs, a late time base, a Perfetto
/// trace), which the reader's own pass did not see.
pub fn tables_of_raw_parquet(
    raw: &Path,
    dir: &Path,
    scratch: &Path,
    rank: i32,
    cut: CutShort,
    classes: &[KernelClass],
) -> Result<Finished, String> {
    let fail = |e: &dyn std::fmt::Display| format!("cannot read {} ({e})", raw.display());
    let file = File::open(raw).map_err(|e| fail(&e))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| fail(&e))?
        .build()
        .map_err(|e| fail(&e))?;
    let columns = crate::columns::schema();
    let mut tables = RankTables::new(rank, Some((scratch, SPILL_BYTES)));
    let clock = Instant::now();
    for batch in reader {
        let batch = batch.map_err(|e| fail(&e))?;
        // (drop `rank`; the file's columns are the batches' own, by name)
        let indices: Vec<usize> = columns
            .fields()
            .iter()
            .map(|f| batch.schema().index_of(f.name()))
            .collect::<Result<_, _>>()
            .map_err(|e| fail(&e))?;
        let events = RecordBatch::try_new(
            columns.clone(),
            indices.iter().map(|&i| batch.column(i).clone()).collect(),
        )
        .map_err(|e| fail(&e))?;
        tables.add(&events).map_err(|e| fail(&e))?;
    }
    let gathering = ("gathering", clock.elapsed().as_secs_f64());
    let mut finished = tables.finish(cut, dir, false, classes)?;
    finished.seconds.push(gathering);
    Ok(finished)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_ranks_are_integers_only() {
        let peer = |a: &str| p2p_peer_arg(Some("record_param_comms"), Some(a));
        assert_eq!(peer(r#"{"Dst Rank": 3}"#), Some(3));
        assert_eq!(peer(r#"{"Dst Rank": "3"}"#), Some(3));
        assert_eq!(peer(r#"{"Dst Rank": "-1"}"#), Some(-1));
        assert_eq!(peer(r#"{"Dst Rank": 3.0}"#), None);
        assert_eq!(peer(r#"{"Dst Rank": " 3"}"#), None);
        assert_eq!(peer(r#"{"Dst Rank": 3000000000}"#), None);
        assert_eq!(peer(r#"{"Dst Rank": null, "Src Rank": 2}"#), Some(2));
        assert_eq!(peer(r#"{"Concrete Inputs": ["", "", "5"]}"#), None);
        assert_eq!(
            p2p_peer_arg(
                Some("c10d::send"),
                Some(r#"{"Concrete Inputs": ["", "", "5"]}"#)
            ),
            Some(5)
        );
        assert_eq!(peer("not json"), None);
    }

    /// Rows spilled to a file give the files rows kept in memory give, and no spill file stays.
    #[test]
    fn spilled_rows_give_the_same_tables() {
        use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
        let base = std::env::temp_dir().join(format!("traceanalyze-tables-{}", std::process::id()));
        let trace = base.with_extension("json");
        let mut text = String::from("{\"traceEvents\": [");
        for i in 0..3000 {
            let (cat, name) = match i % 4 {
                0 => ("cpu_op", "aten::mm".to_string()),
                1 => ("user_annotation", format!("ProfilerStep#{}", i / 400)),
                2 => ("cuda_runtime", "cudaStreamSynchronize".to_string()),
                _ => ("user_annotation", "forward".to_string()),
            };
            let sep = if i > 0 { "," } else { "" };
            text.push_str(&format!(
                "{sep}{{\"ph\": \"X\", \"cat\": \"{cat}\", \"name\": \"{name}\", \"pid\": 1, \"tid\": 1, \"ts\": {i}, \"dur\": 3}}"
            ));
        }
        text.push_str("]}");
        std::fs::write(&trace, text).unwrap();
        let limits = crate::Limits {
            block_bytes: 1 << 12,
            ..crate::Limits::default()
        };
        let (batches, _) = crate::read_all(&trace, limits).unwrap();
        assert!(batches.len() > 3);
        let cut = CutShort {
            numerator: 1,
            denominator: 10,
        };
        let mut files = Vec::new();
        for (k, spill) in [(0, false), (1, true)] {
            let dir = base.join(k.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            let mut tables = RankTables::new(0, spill.then_some((dir.as_path(), 1)));
            for b in &batches {
                tables.add(b).unwrap();
            }
            assert_eq!(tables.cpu_ops.spilled(), spill);
            tables.finish(cut, &dir, spill, &[]).unwrap();
            let mut names: Vec<String> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            assert_eq!(names.len(), TABLES.len(), "{names:?}"); // (no spill file left)
            let rows: Vec<Vec<RecordBatch>> = TABLES
                .iter()
                .map(|t| {
                    let f = File::open(dir.join(format!("{t}.parquet"))).unwrap();
                    ParquetRecordBatchReaderBuilder::try_new(f)
                        .unwrap()
                        .build()
                        .unwrap()
                        .map(|b| b.unwrap())
                        .collect()
                })
                .collect();
            files.push(rows);
        }
        std::fs::remove_dir_all(&base).unwrap();
        std::fs::remove_file(&trace).unwrap();
        let concat = |t: &str, parts: &Vec<RecordBatch>| {
            arrow_select::concat::concat_batches(&table_schema(t), parts).unwrap()
        };
        for (t, (a, b)) in TABLES.iter().zip(files[0].iter().zip(&files[1])) {
            assert_eq!(concat(t, a), concat(t, b), "{t}");
        }
        assert_eq!(concat("cpu_ops", &files[0][2]).num_rows(), 750);
        assert_eq!(concat("steps", &files[0][1]).num_rows(), 8); // ProfilerStep#0 to #7
    }

    #[test]
    fn step_numbers_and_group_descriptions() {
        assert_eq!(step_number("ProfilerStep#007"), Some(7));
        assert_eq!(step_number("ProfilerStep#"), None);
        assert_eq!(step_number("ProfilerStep#1 "), None);
        assert_eq!(step_number("ProfilerStep#99999999999999999999"), None);
        assert_eq!(group_desc(Some(" undefined ")), None);
        assert_eq!(group_desc(Some("\tundefined")), Some("\tundefined"));
        assert_eq!(group_desc(Some("mesh_tp")), Some("mesh_tp"));
    }
}
