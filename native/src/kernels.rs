//! The `kernels` table, for `rank_tables`: GPU activity (kernels, memcpy, memset, CUPTI range
//! profiler kernels) classified by db/kernel_classes.csv, with the runtime call that launched
//! each one (correlation id) and the step of that call.
//!
//! The rules, as db/schema.sql states them:
//! - rows: complete events of the categories kernel, Kernel, gpu_memcpy, Memcpy, gpu_memset,
//!   Memset, cuda_profiler_range with a time and a duration >= 0;
//! - `kind`: the first class (by priority) whose two expressions find a match in the row's
//!   category and name (NULL when none does, or the name is NULL);
//! - a CUPTI range profiler kernel (cuda_profiler_range: no correlation) takes the correlation of
//!   the rank's n-th kernel launch (runtime calls named cudaLaunchKernel, cuLaunchKernel,
//!   cudaLaunchCooperativeKernel, hipLaunchKernel, hipModuleLaunchKernel..., with a correlation,
//!   in (start, correlation) order) when it is the n-th range in (start, name) order and the two
//!   counts agree; ranges with the same start and name are each paired with every place they
//!   hold (one row per place);
//! - each runtime call with the row's correlation gives a row (its start as `launch_ts_ns`, its
//!   end, start + duration, as `launch_end_ns`, its step); none: one row without; `step`: the
//!   launching call's step, else the step holding the row's start;
//! - `device` / `stream`: the args' device / stream, else the pid / tid when it is an integer
//!   written in decimal digits (a minus first) that the column holds.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{Int32Builder, Int64Builder, StringBuilder};
use arrow_array::{Array, ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use regex::Regex;

use crate::columns::{by_name, int_at, text_at};
use crate::gathered::Gathered;

/// Columns of the event batches the kernels table copies (gathered in this order).
pub const GATHERED: &[&str] = &[
    "cat",
    "name",
    "pid",
    "tid",
    "ts_ns",
    "dur_ns",
    "device",
    "stream",
    "correlation",
    "external_id",
    "bytes",
    "collective_name",
    "in_msg_nelems",
    "dtype",
    "pg_name",
    "group_size",
    "pg_desc",
    "pg_ranks",
    "collective_seq",
];

pub const CATEGORIES: &[&str] = &[
    "kernel",
    "Kernel",
    "gpu_memcpy",
    "Memcpy",
    "gpu_memset",
    "Memset",
    "cuda_profiler_range",
];

pub const RANGE: &str = "cuda_profiler_range";
const LAUNCHES: &[&str] = &[
    "cudaLaunchKernel",
    "cuLaunchKernel",
    "cudaLaunchCooperativeKernel",
    "hipLaunchKernel",
    "hipModuleLaunchKernel",
];

/// One row of db/kernel_classes.csv.
#[derive(Debug)]
pub struct KernelClass {
    pub priority: i64,
    pub cat: Regex,
    pub name: Regex,
    pub kind: String,
}

/// The classes from (priority, category expression, name expression, kind) rows, by priority.
pub fn classes_of(rows: &[(i64, String, String, String)]) -> Result<Vec<KernelClass>, String> {
    let compile = |e: &str| Regex::new(e).map_err(|err| format!("kernel class {e:?}: {err}"));
    let mut classes = rows
        .iter()
        .map(|(priority, cat, name, kind)| {
            Ok(KernelClass {
                priority: *priority,
                cat: compile(cat)?,
                name: compile(name)?,
                kind: kind.clone(),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    classes.sort_by_key(|c| c.priority);
    Ok(classes)
}

pub fn schema() -> SchemaRef {
    use DataType::{Int32, Int64, Utf8};
    let f = |name: &str, dt: DataType| Field::new(name, dt, true);
    Arc::new(Schema::new(vec![
        f("rank", Int32),
        f("step", Int64),
        f("kind", Utf8),
        f("name", Utf8),
        f("device", Int32),
        f("stream", Int64),
        f("ts_ns", Int64),
        f("dur_ns", Int64),
        f("end_ns", Int64),
        f("correlation", Int64),
        f("external_id", Int64),
        f("launch_ts_ns", Int64),
        f("launch_end_ns", Int64),
        f("copy_bytes", Int64),
        f("collective_name", Utf8),
        f("in_msg_nelems", Int64),
        f("dtype", Utf8),
        f("pg_name", Utf8),
        f("group_size", Int32),
        f("pg_desc", Utf8),
        f("pg_ranks", Utf8),
        f("collective_seq", Int64),
        f("peer_group_rank", Int32),
        f("counters", Utf8),
    ]))
}

/// A runtime call: its start, end (none without a duration) and step.
type Call = (i64, Option<i64>, Option<i64>);
/// Each category's kinds by name (NULL name: `None`), classified once.
pub type Kinds = HashMap<String, (Option<Option<String>>, HashMap<String, Option<String>>)>;

/// The runtime calls of a rank by correlation (start, end, step), and its kernel launches in order.
pub struct Launches {
    /// every runtime call with a correlation: (correlation, call), in correlation order, each
    /// correlation's calls in gathered order (a sorted list: 48 bytes a call, where a map with a
    /// list per correlation took several times that)
    calls: Vec<(i64, Call)>,
    /// correlations of the kernel launches, in (start, correlation) order
    ordered: Vec<i64>,
}

impl Launches {
    /// From the gathered runtime rows (columns name, ts_ns, dur_ns, correlation).
    pub fn of(
        runtime: &mut Gathered,
        step_of: &dyn Fn(Option<i64>) -> Option<i64>,
    ) -> Result<Launches, ArrowError> {
        let mut calls: Vec<(i64, Call)> = Vec::new();
        let mut launches: Vec<(i64, i64)> = Vec::new();
        for part in runtime.parts_of(&["name", "ts_ns", "dur_ns", "correlation"])? {
            let part = part?;
            let (name, ts, dur, correlation) = (
                by_name::<StringArray>(&part, "name")?,
                by_name::<Int64Array>(&part, "ts_ns")?,
                by_name::<Int64Array>(&part, "dur_ns")?,
                by_name::<Int64Array>(&part, "correlation")?,
            );
            for i in 0..part.num_rows() {
                let (Some(c), Some(t)) = (int_at(correlation, i), int_at(ts, i)) else {
                    continue;
                };
                let end = int_at(dur, i).map(|d| t.saturating_add(d));
                calls.push((c, (t, end, step_of(Some(t)))));
                if text_at(name, i).is_some_and(|n| LAUNCHES.iter().any(|l| n.starts_with(l))) {
                    launches.push((t, c));
                }
            }
        }
        calls.sort_by_key(|call| call.0); // (stable: a correlation's calls keep their order)
        launches.sort_unstable();
        Ok(Launches {
            calls,
            ordered: launches.into_iter().map(|(_, c)| c).collect(),
        })
    }

    /// The calls of correlation `c`, in gathered order (empty when none has it).
    fn calls_of(&self, c: i64) -> &[(i64, Call)] {
        let first = self.calls.partition_point(|call| call.0 < c);
        let end = first + self.calls[first..].partition_point(|call| call.0 == c);
        &self.calls[first..end]
    }
}

/// For each gathered kernel row (in gathered order), the correlations it is paired with when it
/// is a range profiler kernel: one entry per place its (start, name) holds in the ranges' order
/// (None: no launch to pair, the counts differ); empty for other rows.
pub fn range_pairs(
    kernels: &mut Gathered,
    launches: &Launches,
) -> Result<Vec<Vec<Option<i64>>>, ArrowError> {
    let mut ranges: Vec<(i64, Option<String>, usize)> = Vec::new();
    let mut rows = 0;
    for part in kernels.parts_of(&["cat", "name", "ts_ns"])? {
        let part = part?;
        let (cat, name, ts) = (
            by_name::<StringArray>(&part, "cat")?,
            by_name::<StringArray>(&part, "name")?,
            by_name::<Int64Array>(&part, "ts_ns")?,
        );
        for i in 0..part.num_rows() {
            if text_at(cat, i) == Some(RANGE) {
                let t = int_at(ts, i).unwrap_or(0);
                ranges.push((t, text_at(name, i).map(str::to_owned), rows + i));
            }
        }
        rows += part.num_rows();
    }
    let mut pairs = vec![Vec::new(); rows];
    if ranges.is_empty() {
        return Ok(pairs);
    }
    // (start, name) order, NULL names last as SQL orders them
    ranges.sort_by(|a, b| (a.0, a.1.is_none(), &a.1).cmp(&(b.0, b.1.is_none(), &b.1)));
    let agree = ranges.len() == launches.ordered.len();
    let mut first = 0;
    while first < ranges.len() {
        let mut end = first + 1;
        while end < ranges.len()
            && ranges[end].0 == ranges[first].0
            && ranges[end].1 == ranges[first].1
        {
            end += 1;
        }
        let places: Vec<Option<i64>> = (first..end)
            .map(|nth| agree.then(|| launches.ordered[nth]))
            .collect();
        for range in &ranges[first..end] {
            pairs[range.2] = places.clone();
        }
        first = end;
    }
    Ok(pairs)
}

/// An integer written in decimal digits (a minus first), when `T` holds it.
fn integer<T: std::str::FromStr>(s: Option<&str>) -> Option<T> {
    let s = s?;
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The kernels rows of one gathered part (`first`: its first row's place among all gathered rows).
#[allow(clippy::too_many_arguments)]
pub fn rows_batch(
    rank: i32,
    part: &RecordBatch,
    first: usize,
    pairs: &[Vec<Option<i64>>],
    launches: &Launches,
    kinds: &mut Kinds,
    classes: &[KernelClass],
    step_of: &dyn Fn(Option<i64>) -> Option<i64>,
    group_desc: &dyn Fn(Option<&str>) -> Option<&str>,
) -> Result<RecordBatch, ArrowError> {
    let s = |n: &str| by_name::<StringArray>(part, n);
    let i64s = |n: &str| by_name::<Int64Array>(part, n);
    let i32s = |n: &str| by_name::<Int32Array>(part, n);
    let (cat, name, pid, tid) = (s("cat")?, s("name")?, s("pid")?, s("tid")?);
    let (ts, dur, stream, correlation) = (
        i64s("ts_ns")?,
        i64s("dur_ns")?,
        i64s("stream")?,
        i64s("correlation")?,
    );
    let (external_id, bytes, in_msg, seq) = (
        i64s("external_id")?,
        i64s("bytes")?,
        i64s("in_msg_nelems")?,
        i64s("collective_seq")?,
    );
    let (device, group_size) = (i32s("device")?, i32s("group_size")?);
    let (collective, dtype, pg_name, pg_desc, pg_ranks, counter) = (
        s("collective_name")?,
        s("dtype")?,
        s("pg_name")?,
        s("pg_desc")?,
        s("pg_ranks")?,
        s("counters")?,
    );
    let peer = i32s("peer_group_rank")?;
    let n = part.num_rows();
    // the output rows: (input row, correlation, launching call)
    let mut out: Vec<(usize, Option<i64>, Option<Call>)> = Vec::with_capacity(n);
    for i in 0..n {
        let own = int_at(correlation, i);
        let places = &pairs[first + i];
        let mut add = |c: Option<i64>| match c.map_or(&[][..], |c| launches.calls_of(c)) {
            [] => out.push((i, c, None)),
            calls => out.extend(calls.iter().map(|(_, call)| (i, c, Some(*call)))),
        };
        if places.is_empty() {
            add(own);
        } else {
            for p in places {
                add(own.or(*p));
            }
        }
    }
    let m = out.len();
    let mut step = Int64Builder::with_capacity(m);
    let mut kind = StringBuilder::new();
    let mut names = StringBuilder::new();
    let (mut dev, mut strm) = (
        Int32Builder::with_capacity(m),
        Int64Builder::with_capacity(m),
    );
    let (mut t0, mut d, mut t1) = (
        Int64Builder::with_capacity(m),
        Int64Builder::with_capacity(m),
        Int64Builder::with_capacity(m),
    );
    let (mut corr, mut ext, mut launch, mut launch_end, mut copy) = (
        Int64Builder::with_capacity(m),
        Int64Builder::with_capacity(m),
        Int64Builder::with_capacity(m),
        Int64Builder::with_capacity(m),
        Int64Builder::with_capacity(m),
    );
    let (mut coll, mut nelems, mut dt, mut pgn) = (
        StringBuilder::new(),
        Int64Builder::with_capacity(m),
        StringBuilder::new(),
        StringBuilder::new(),
    );
    let (mut gsize, mut desc, mut ranks, mut cseq) = (
        Int32Builder::with_capacity(m),
        StringBuilder::new(),
        StringBuilder::new(),
        Int64Builder::with_capacity(m),
    );
    let (mut peers, mut counters) = (Int32Builder::with_capacity(m), StringBuilder::new());
    for (i, c, call) in out {
        let t = int_at(ts, i);
        let category = text_at(cat, i).unwrap_or_default();
        let row_name = text_at(name, i);
        let classify = |nm: &str| {
            classes
                .iter()
                .find(|cl| cl.cat.is_match(category) && cl.name.is_match(nm))
                .map(|cl| cl.kind.clone())
        };
        if !kinds.contains_key(category) {
            kinds.insert(category.to_owned(), (None, HashMap::new()));
        }
        let by_category = kinds.get_mut(category).expect("inserted");
        let k: &Option<String> = match row_name {
            None => by_category.0.get_or_insert(None),
            Some(nm) => {
                if !by_category.1.contains_key(nm) {
                    by_category.1.insert(nm.to_owned(), classify(nm));
                }
                &by_category.1[nm]
            }
        };
        step.append_option(call.and_then(|(_, _, s)| s).or_else(|| step_of(t)));
        kind.append_option(k.as_deref());
        names.append_option(row_name);
        dev.append_option(
            (device.is_valid(i).then(|| device.value(i)))
                .or_else(|| integer::<i32>(text_at(pid, i))),
        );
        strm.append_option(int_at(stream, i).or_else(|| integer::<i64>(text_at(tid, i))));
        t0.append_option(t);
        d.append_option(int_at(dur, i));
        t1.append_option(t.and_then(|t| Some(t.saturating_add(int_at(dur, i)?))));
        corr.append_option(c);
        ext.append_option(int_at(external_id, i));
        launch.append_option(call.map(|(start, _, _)| start));
        launch_end.append_option(call.and_then(|(_, end, _)| end));
        copy.append_option(int_at(bytes, i));
        coll.append_option(text_at(collective, i));
        nelems.append_option(int_at(in_msg, i));
        dt.append_option(text_at(dtype, i));
        pgn.append_option(text_at(pg_name, i));
        gsize.append_option(group_size.is_valid(i).then(|| group_size.value(i)));
        desc.append_option(group_desc(text_at(pg_desc, i)));
        ranks.append_option(text_at(pg_ranks, i));
        cseq.append_option(int_at(seq, i));
        peers.append_option(peer.is_valid(i).then(|| peer.value(i)));
        counters.append_option(text_at(counter, i));
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from_value(rank, m)),
        Arc::new(step.finish()),
        Arc::new(kind.finish()),
        Arc::new(names.finish()),
        Arc::new(dev.finish()),
        Arc::new(strm.finish()),
        Arc::new(t0.finish()),
        Arc::new(d.finish()),
        Arc::new(t1.finish()),
        Arc::new(corr.finish()),
        Arc::new(ext.finish()),
        Arc::new(launch.finish()),
        Arc::new(launch_end.finish()),
        Arc::new(copy.finish()),
        Arc::new(coll.finish()),
        Arc::new(nelems.finish()),
        Arc::new(dt.finish()),
        Arc::new(pgn.finish()),
        Arc::new(gsize.finish()),
        Arc::new(desc.finish()),
        Arc::new(ranks.finish()),
        Arc::new(cseq.finish()),
        Arc::new(peers.finish()),
        Arc::new(counters.finish()),
    ];
    RecordBatch::try_new(schema(), columns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_in_decimal_digits_only() {
        assert_eq!(integer::<i32>(Some("7")), Some(7));
        assert_eq!(integer::<i32>(Some("-1")), Some(-1));
        assert_eq!(integer::<i32>(Some(" 7")), None);
        assert_eq!(integer::<i32>(Some("+7")), None);
        assert_eq!(integer::<i32>(Some("2.0")), None);
        assert_eq!(integer::<i32>(Some("3000000000")), None);
        assert_eq!(integer::<i64>(Some("3000000000")), Some(3_000_000_000));
        assert_eq!(integer::<i32>(Some("-")), None);
        assert_eq!(integer::<i32>(None), None);
    }

    #[test]
    fn the_first_class_by_priority() {
        let classes = classes_of(&[
            (90, "^kernel$".into(), ".*".into(), "compute".into()),
            (
                30,
                "^kernel$".into(),
                "(?i)(^|[^a-z])nccl(dev)?kernel".into(),
                "communication".into(),
            ),
        ])
        .unwrap();
        let kind = |name: &str| {
            classes
                .iter()
                .find(|c| c.cat.is_match("kernel") && c.name.is_match(name))
                .map(|c| c.kind.as_str())
        };
        assert_eq!(kind("ncclDevKernel_AllReduce"), Some("communication"));
        assert_eq!(kind("void at::native::mm"), Some("compute"));
        assert!(classes_of(&[(1, "(".into(), ".*".into(), "x".into())]).is_err());
    }
}
