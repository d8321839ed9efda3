//! Decoded packets -> rows of the JSON reader's columns (what the JSON reading gives for the
//! same events):
//!
//! - track descriptors give pid / tid: a ThreadDescriptor its (pid, tid); a ProcessDescriptor
//!   its pid; a named child track its parent's pid and its name as tid (e.g. a GPU stream
//!   track); a named top-level track its name as pid; an unnamed child track its parent's;
//! - process_name / process_labels / process_sort_index (tid '0', as Kineto writes them) and
//!   thread_name / thread_sort_index descriptor fields become ph 'M' rows, stamped with the
//!   descriptor packet's timestamp;
//! - TYPE_SLICE_BEGIN / TYPE_SLICE_END pairs (per track, nested) become one X row with its
//!   dur; TYPE_INSTANT an 'i' row, or 's' / 'f' rows when it carries flow_ids /
//!   terminating_flow_ids (flows on a slice: 's' / 'f' rows named 'ac2g' at the slice's
//!   start); TYPE_COUNTER a 'C' row named after its counter track, its value in other_args
//!   under the track's name; a legacy_event's phase is its row's ph;
//! - names, categories and annotation names are resolved through the sequence's interned data
//!   (cleared by SEQ_INCREMENTAL_STATE_CLEARED); debug annotations are the args (args.rs);
//! - chrome_events.metadata entries are the trace metadata; timestamps are absolute ns.
//!
//! A row's pid / tid come from its track as described when the row is written; a row whose
//! track (or an ancestor) is not described yet waits for the end of the file.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};

use super::args::{self, cast_integer, lossy, ArgVal, Args, Strings};
use super::messages::{self as m, Counter, Data, NameField, Packet, TrackEvent};
use super::IdMap as HashMap;
use crate::columns::{
    schema, Columns, Ty, COLUMNS, DUR_NS, FIRST_ARG, FLOW_ID, OTHER_ARGS, PH, TS_NS,
};
use crate::events::{Tally, ALIASES, TIME_LIMIT_NS, TYPED_ARGS};
use crate::values::Bad;

const BATCH_ROWS: usize = 1 << 16;
const MAX_TRACK_DEPTH: usize = 32;
/// Name and category of the rows of flows attached to slices (Kineto's).
const FLOW_NAME: &str = "ac2g";

#[derive(Default)]
struct Sequence {
    names: HashMap<u64, Arc<str>>,
    cats: HashMap<u64, Arc<str>>,
    ann_names: HashMap<u64, Arc<str>>,
    ann_strings: HashMap<u64, Arc<str>>,
    default_track: Option<u64>,
}

#[derive(Default)]
struct Track {
    parent: Option<u64>,
    name: Option<String>,
    counter: bool,
    pid: Option<String>,
    tid: Option<String>,
}

/// A track's (pid, tid, counter name).
#[derive(Clone, Default)]
struct Resolved {
    pid: Option<String>,
    tid: Option<String>,
    counter_name: Option<String>,
}

struct Row {
    ph: u8,
    cat: Option<Arc<str>>,
    name: Option<Arc<str>>,
    pid: Option<String>,
    tid: Option<String>,
    track: Option<u64>,
    ts: Option<i64>,
    dur: Option<i64>,
    flow: Option<u64>,
    args: Args,
}

struct Open {
    cat: Option<Arc<str>>,
    name: Option<Arc<str>>,
    ts: i64,
    args: Args,
}

#[derive(Default)]
struct Counts {
    unmatched_slice_end: u64,
    unknown_interned: u64,
    unknown_event_type: u64,
    unclosed_slices: u64,
}

/// The packets of one file, turned into rows.
pub struct Reading {
    seqs: HashMap<u32, Sequence>,
    tracks: HashMap<u64, Track>,
    resolved: HashMap<u64, Resolved>,
    open: HashMap<Option<u64>, Vec<Open>>,
    pending: Vec<Row>,
    cols: Columns,
    schema: SchemaRef,
    batches: VecDeque<Result<RecordBatch, ArrowError>>,
    counts: Counts,
    pub events: u64,
    pub metadata: Vec<(String, String)>,
    pub tally: Tally,
    pub bad_packets: u64,
    /// where the packet stream turned corrupt (after the packets kept)
    pub damaged: Option<String>,
}

impl Default for Reading {
    fn default() -> Self {
        Self::new()
    }
}

fn ns(v: u64) -> Option<i64> {
    (v as i128 <= TIME_LIMIT_NS).then_some(v as i64)
}

impl Reading {
    pub fn new() -> Reading {
        Reading {
            seqs: HashMap::default(),
            tracks: HashMap::default(),
            resolved: HashMap::default(),
            open: HashMap::default(),
            pending: Vec::new(),
            cols: Columns::new(BATCH_ROWS, BATCH_ROWS * 64),
            schema: schema(),
            batches: VecDeque::new(),
            counts: Counts::default(),
            events: 0,
            metadata: Vec::new(),
            tally: Tally::default(),
            bad_packets: 0,
            damaged: None,
        }
    }

    /// A finished batch (`all`: also the rows of a partial one).
    pub fn take_batch(&mut self, all: bool) -> Result<Option<RecordBatch>, ArrowError> {
        if self.batches.is_empty() && all && self.cols.rows > 0 {
            self.flush();
        }
        self.batches.pop_front().transpose()
    }

    fn flush(&mut self) {
        let cols = std::mem::replace(&mut self.cols, Columns::new(BATCH_ROWS, BATCH_ROWS * 64));
        self.batches.push_back(cols.finish(&self.schema));
    }

    /// One (decoded, not compressed) packet.
    pub fn packet(&mut self, p: Packet<'_>) {
        let seq = self.seqs.entry(p.sequence_id).or_default();
        if p.sequence_flags & m::SEQ_INCREMENTAL_STATE_CLEARED != 0 || p.incremental_state_cleared {
            *seq = Sequence::default();
        }
        let invalid = &mut self.tally.invalid_utf8;
        for (list, map) in [
            (&p.interned.event_names, &mut seq.names),
            (&p.interned.event_categories, &mut seq.cats),
            (&p.interned.annotation_names, &mut seq.ann_names),
            (&p.interned.annotation_strings, &mut seq.ann_strings),
        ] {
            for (iid, text) in list {
                map.insert(*iid, Arc::from(lossy(text, invalid)));
            }
        }
        if let Some(track) = p.defaults {
            seq.default_track = track;
        }
        let ts = p.timestamp.and_then(ns);
        match p.data {
            Data::TrackEvent(te) => self.event(&te, ts, p.sequence_id),
            Data::TrackDescriptor(d) => self.descriptor(&d, ts),
            Data::ChromeEvents(entries) => self.chrome_metadata(&entries),
            Data::Compressed(_) | Data::Other => {}
        }
    }

    fn chrome_metadata(&mut self, entries: &[m::Metadata<'_>]) {
        let invalid = &mut self.tally.invalid_utf8;
        for e in entries {
            let Some(value) = &e.value else { continue };
            let json = match value {
                m::MetaValue::Text(t) => {
                    serde_json::to_string(&lossy(t, invalid)).unwrap_or_default()
                }
                m::MetaValue::Bool(b) => b.to_string(),
                m::MetaValue::Int(i) => i.to_string(),
                m::MetaValue::Json(t) => {
                    let raw = lossy(t, invalid);
                    if serde_json::from_str::<serde::de::IgnoredAny>(&raw).is_ok() {
                        raw.into_owned()
                    } else {
                        "null".into()
                    }
                }
            };
            self.metadata
                .push((lossy(e.name, invalid).into_owned(), json));
        }
    }

    fn descriptor(&mut self, d: &m::TrackDescriptor<'_>, ts: Option<i64>) {
        self.resolved.clear();
        let invalid = &mut self.tally.invalid_utf8;
        let info = self.tracks.entry(d.uuid).or_default();
        if let Some(parent) = d.parent_uuid {
            info.parent = Some(parent);
        }
        if let Some(name) = d.name {
            info.name = Some(lossy(name, invalid).into_owned());
        }
        info.counter |= d.counter;
        if let Some(pid) = d.process.as_ref().and_then(|p| p.pid) {
            info.pid = Some(pid.to_string());
        }
        if let Some(t) = &d.thread {
            if let (Some(pid), Some(tid)) = (t.pid, t.tid) {
                info.pid = Some(pid.to_string());
                info.tid = Some(tid.to_string());
            }
        }
        // (event name, tid, args key, value: text or an integer)
        let mut rows: Vec<(&str, Option<&str>, &str, ArgVal)> = Vec::new();
        if let Some(p) = &d.process {
            if let Some(name) = p.process_name {
                rows.push((
                    "process_name",
                    Some("0"),
                    "name",
                    ArgVal::Text(lossy(name, invalid).into_owned()),
                ));
            }
            if !p.process_labels.is_empty() {
                let labels: Vec<String> = p
                    .process_labels
                    .iter()
                    .map(|l| lossy(l, invalid).into_owned())
                    .collect();
                rows.push((
                    "process_labels",
                    Some("0"),
                    "labels",
                    ArgVal::Text(labels.join(",")),
                ));
            }
            if let Some(i) = p.legacy_sort_index {
                rows.push((
                    "process_sort_index",
                    Some("0"),
                    "sort_index",
                    ArgVal::Int(i as i64),
                ));
            }
        }
        if let Some(t) = &d.thread {
            if let Some(name) = t.thread_name {
                rows.push((
                    "thread_name",
                    None,
                    "name",
                    ArgVal::Text(lossy(name, invalid).into_owned()),
                ));
            }
            if let Some(i) = t.legacy_sort_index {
                rows.push((
                    "thread_sort_index",
                    None,
                    "sort_index",
                    ArgVal::Int(i as i64),
                ));
            }
        }
        for (event, tid, key, value) in rows {
            let mut a = Args::default();
            match crate::events::arg_slot(key) {
                Some(slot) => a.slots.push((slot, Some(value))),
                None => {
                    let text = match value {
                        ArgVal::Int(i) => i.to_string(),
                        ArgVal::Text(t) => serde_json::to_string(&t).unwrap_or_default(),
                    };
                    a.other = Some(format!(
                        "{{{}:{text}}}",
                        serde_json::to_string(key).unwrap_or_default()
                    ));
                }
            }
            self.emit(Row {
                ph: b'M',
                cat: None,
                name: Some(Arc::from(event)),
                pid: None,
                tid: tid.map(str::to_string),
                track: Some(d.uuid),
                ts,
                dur: None,
                flow: None,
                args: a,
            });
        }
    }

    /// (name, categories) of an event.
    fn names(&mut self, te: &TrackEvent<'_>, seq_id: u32) -> (Option<Arc<str>>, Option<Arc<str>>) {
        let seq = self.seqs.get(&seq_id);
        let invalid = &mut self.tally.invalid_utf8;
        let mut unknown = 0;
        let name = match te.name {
            NameField::Text(t) => Some(Arc::from(lossy(t, invalid))),
            NameField::Iid(iid) => {
                let n = seq.and_then(|s| s.names.get(&iid)).cloned();
                unknown += n.is_none() as u64;
                n
            }
            NameField::None => None,
        };
        if te.categories.is_empty() && te.category_iids.len() == 1 {
            // (the common case: one interned category)
            let cat = seq.and_then(|s| s.cats.get(&te.category_iids[0])).cloned();
            self.counts.unknown_interned += unknown + cat.is_none() as u64;
            return (name, cat);
        }
        let mut cats: Vec<std::borrow::Cow<str>> =
            te.categories.iter().map(|c| lossy(c, invalid)).collect();
        for iid in &te.category_iids {
            match seq.and_then(|s| s.cats.get(iid)) {
                Some(c) => cats.push(c.as_ref().into()),
                None => unknown += 1,
            }
        }
        self.counts.unknown_interned += unknown;
        (name, (!cats.is_empty()).then(|| Arc::from(cats.join(","))))
    }

    fn args(&mut self, te: &TrackEvent<'_>, seq_id: u32) -> Args {
        if te.annotations.is_empty() {
            return Args::default();
        }
        let empty = Sequence::default();
        let seq = self.seqs.get(&seq_id).unwrap_or(&empty);
        let s = Strings {
            names: &seq.ann_names,
            values: &seq.ann_strings,
        };
        args::args(&te.annotations, &s, &mut self.tally.invalid_utf8)
    }

    fn event(&mut self, te: &TrackEvent<'_>, ts: Option<i64>, seq_id: u32) {
        let track = te
            .track_uuid
            .or_else(|| self.seqs.get(&seq_id).and_then(|s| s.default_track));
        if te.kind == m::TYPE_SLICE_END {
            let open = self.open.get_mut(&track).and_then(|s| s.pop());
            match (open, ts) {
                (Some(o), Some(ts)) => self.emit(Row {
                    ph: b'X',
                    cat: o.cat,
                    name: o.name,
                    pid: None,
                    tid: None,
                    track,
                    ts: Some(o.ts),
                    dur: Some(ts - o.ts),
                    flow: None,
                    args: o.args,
                }),
                (Some(o), None) => {
                    // (Python's reading checked the stack before the time: the slice stays open)
                    self.open.entry(track).or_default().push(o);
                    self.counts.unmatched_slice_end += 1;
                }
                (None, _) => self.counts.unmatched_slice_end += 1,
            }
            return;
        }
        let (name, cat) = self.names(te, seq_id);
        let row = |ph: u8, cat: Option<Arc<str>>, name: Option<Arc<str>>, ts, flow, args| Row {
            ph,
            cat,
            name,
            pid: None,
            tid: None,
            track,
            ts,
            dur: None,
            flow,
            args,
        };
        if let Some(l) = te.legacy.filter(|l| l.phase != 0) {
            if !(0x21..=0x7E).contains(&l.phase) {
                self.counts.unknown_event_type += 1;
                return;
            }
            let args = self.args(te, seq_id);
            let mut r = row(l.phase as u8, cat, name, ts, None, args);
            r.pid = l.pid_override.map(|p| p.to_string());
            r.tid = l.tid_override.map(|t| t.to_string());
            r.dur = l
                .duration_us
                .and_then(|d| d.checked_mul(1000))
                .filter(|d| (d.unsigned_abs() as i128) <= TIME_LIMIT_NS);
            self.emit(r);
            return;
        }
        let Some(ts) = ts else {
            self.counts.unknown_event_type += 1;
            return;
        };
        let flows: Vec<(u8, u64)> = te
            .flow_ids
            .iter()
            .chain(&te.flow_ids_old)
            .map(|f| (b's', *f))
            .chain(
                te.terminating_flow_ids
                    .iter()
                    .chain(&te.terminating_flow_ids_old)
                    .map(|f| (b'f', *f)),
            )
            .collect();
        match te.kind {
            m::TYPE_SLICE_BEGIN => {
                let args = self.args(te, seq_id);
                self.open.entry(track).or_default().push(Open {
                    cat,
                    name,
                    ts,
                    args,
                });
                for (ph, fid) in flows {
                    let flow = Some(Arc::from(FLOW_NAME));
                    self.emit(row(
                        ph,
                        flow.clone(),
                        flow,
                        Some(ts),
                        Some(fid),
                        Args::default(),
                    ));
                }
            }
            m::TYPE_INSTANT => {
                let args = self.args(te, seq_id);
                if flows.is_empty() {
                    self.emit(row(b'i', cat, name, Some(ts), None, args));
                } else {
                    for (ph, fid) in flows {
                        self.emit(row(
                            ph,
                            cat.clone(),
                            name.clone(),
                            Some(ts),
                            Some(fid),
                            args.clone(),
                        ));
                    }
                }
            }
            m::TYPE_COUNTER => {
                let mut value = String::new();
                match te.counter {
                    Some(Counter::Int(v)) => value = v.to_string(),
                    Some(Counter::Double(f)) if !args::push_double(f, &mut value) => {
                        value.push_str("null")
                    }
                    Some(Counter::Double(_)) | None => {}
                }
                let mut a = Args::default();
                if !value.is_empty() {
                    a.other = Some(value); // (keyed by the counter's name when written)
                }
                self.emit(row(b'C', cat, name, Some(ts), None, a));
            }
            _ => self.counts.unknown_event_type += 1,
        }
    }

    /// A track's (pid, tid) as described so far: None while it, or an ancestor it needs, is
    /// not described (`last`: at the end, an undescribed track has none).
    fn resolve(
        &self,
        uuid: Option<u64>,
        depth: usize,
        last: bool,
    ) -> Option<(Option<String>, Option<String>)> {
        let Some(uuid) = uuid else {
            return Some((None, None));
        };
        let Some(info) = self.tracks.get(&uuid) else {
            return last.then_some((None, None));
        };
        if depth > MAX_TRACK_DEPTH {
            return Some((None, None));
        }
        if info.pid.is_some() {
            return Some((info.pid.clone(), info.tid.clone()));
        }
        if info.counter {
            return self.resolve(info.parent, depth + 1, last);
        }
        if let Some(name) = &info.name {
            return Some(match info.parent {
                Some(_) => (
                    self.resolve(info.parent, depth + 1, last)?.0,
                    Some(name.clone()),
                ),
                None => (Some(name.clone()), None),
            });
        }
        match info.parent {
            Some(_) => self.resolve(info.parent, depth + 1, last),
            None => Some((None, None)),
        }
    }

    fn emit(&mut self, row: Row) {
        if let Some(t) = row.track {
            if !self.resolved.contains_key(&t) {
                match self.resolve(Some(t), 0, false) {
                    Some((pid, tid)) => {
                        let counter_name = self
                            .tracks
                            .get(&t)
                            .filter(|i| i.counter)
                            .and_then(|i| i.name.clone());
                        self.resolved.insert(
                            t,
                            Resolved {
                                pid,
                                tid,
                                counter_name,
                            },
                        );
                    }
                    None => {
                        self.pending.push(row);
                        return;
                    }
                }
            }
        }
        self.write(row);
    }

    fn write(&mut self, row: Row) {
        let none = Resolved::default();
        let r = row
            .track
            .and_then(|t| self.resolved.get(&t))
            .unwrap_or(&none);
        let cols = &mut self.cols;
        cols.str(PH, Some((row.ph as char).encode_utf8(&mut [0; 4])));
        cols.str(1, row.cat.as_deref());
        let name = match row.ph {
            b'C' => row.name.as_deref().or(r.counter_name.as_deref()),
            _ => row.name.as_deref(),
        };
        cols.str(2, name);
        cols.str(3, row.pid.as_deref().or(r.pid.as_deref()));
        cols.str(4, row.tid.as_deref().or(r.tid.as_deref()));
        cols.int(TS_NS, row.ts);
        cols.int(DUR_NS, row.dur);
        if let Some(f) = row.flow {
            cols.str(FLOW_ID, Some(&f.to_string()));
        }
        if row.ph == b'C' {
            // a counter's value, under its track's name (the JSON's args key), else the event's
            let key = r.counter_name.as_deref().or(row.name.as_deref());
            if let (Some(key), Some(v)) = (key, &row.args.other) {
                let text = format!("{{{}:{v}}}", serde_json::to_string(key).unwrap_or_default());
                cols.str(OTHER_ARGS, Some(&text));
            }
        } else {
            write_args(cols, &row.args, &mut self.tally);
            cols.str(OTHER_ARGS, row.args.other.as_deref());
        }
        cols.end_row();
        self.events += 1;
        if self.cols.rows >= BATCH_ROWS {
            self.flush();
        }
    }

    /// The end of the packets: rows that waited for their tracks, and what stayed open.
    pub fn finish(&mut self) {
        for row in std::mem::take(&mut self.pending) {
            if let Some(t) = row.track {
                if !self.resolved.contains_key(&t) {
                    let (pid, tid) = self.resolve(Some(t), 0, true).unwrap_or_default();
                    let counter_name = self
                        .tracks
                        .get(&t)
                        .filter(|i| i.counter)
                        .and_then(|i| i.name.clone());
                    self.resolved.insert(
                        t,
                        Resolved {
                            pid,
                            tid,
                            counter_name,
                        },
                    );
                }
            }
            self.write(row);
        }
        self.counts.unclosed_slices = self.open.values().map(|s| s.len() as u64).sum();
    }

    /// The load notes (kind, message, count), as the Python reading worded them.
    pub fn notes(&self) -> Vec<(String, String, Option<u64>)> {
        let c = &self.counts;
        let mut out: Vec<(String, String, Option<u64>)> = [
            (
                "unmatched-slice-end",
                "slice ends without a begin on their track were skipped",
                c.unmatched_slice_end,
            ),
            (
                "unknown-interned",
                "names or categories referring to interned data never sent were read as NULL",
                c.unknown_interned,
            ),
            (
                "unknown-event-type",
                "track events of an unknown type (or without a timestamp) were skipped",
                c.unknown_event_type,
            ),
            (
                "unclosed-slices",
                "slice begins without an end were skipped",
                c.unclosed_slices,
            ),
            (
                "bad-packets",
                "packets that could not be decoded were skipped",
                self.bad_packets,
            ),
        ]
        .into_iter()
        .filter(|(_, _, n)| *n > 0)
        .map(|(k, m, n)| (k.to_string(), m.to_string(), Some(n)))
        .collect();
        if let Some(at) = &self.damaged {
            out.push((
                "damaged".into(),
                format!("the packet stream is corrupt from {at}: kept the packets before it"),
                None,
            ));
        }
        out
    }
}

/// The typed args columns, cast and counted as the JSON reading does.
fn write_args(cols: &mut Columns, a: &Args, tally: &mut Tally) {
    if a.slots.is_empty() {
        return;
    }
    for i in 0..TYPED_ARGS {
        let col = FIRST_ARG + i;
        let slot = a.slot(i);
        let alias = ALIASES
            .iter()
            .find(|(_, of)| *of == i)
            .map(|(al, _)| a.slot(*al));
        if slot.is_none() && alias.flatten().is_none() {
            continue;
        }
        match COLUMNS[col].1 {
            Ty::Str => {
                let text = |v: Option<&Option<ArgVal>>| match v {
                    Some(Some(ArgVal::Text(t))) => Some(t.clone()),
                    Some(Some(ArgVal::Int(n))) => Some(n.to_string()),
                    _ => None,
                };
                let value = text(slot).or_else(|| alias.and_then(text));
                cols.str(col, value.as_deref());
            }
            ty => {
                let (lo, hi) = if ty == Ty::I32 {
                    (i32::MIN as i64, i32::MAX as i64)
                } else {
                    (i64::MIN, i64::MAX)
                };
                let read = |v: Option<&Option<ArgVal>>| match v {
                    Some(Some(ArgVal::Int(n))) if (lo..=hi).contains(n) => Ok(*n),
                    Some(Some(ArgVal::Text(t))) => cast_integer(t, lo, hi).ok_or(Bad::Invalid),
                    Some(Some(_)) => Err(Bad::Invalid),
                    _ => Err(Bad::Null),
                };
                let mut value = read(slot);
                if value.is_err() {
                    if let Some(Ok(v)) = alias.map(read) {
                        value = Ok(v);
                    }
                }
                if value == Err(Bad::Invalid)
                    || (value.is_err() && alias.map(read) == Some(Err(Bad::Invalid)))
                {
                    tally.bad_args[i] += 1;
                }
                cols.int(col, value.ok());
            }
        }
    }
}
