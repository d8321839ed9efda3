//! The pipeline for one file: bytes (reader) -> layout (scan) -> rows (events, in parallel
//! over the events of a block) -> Arrow record batches, streamed: memory holds one block of
//! text and the batches not yet taken, whatever the file size.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};
use rayon::prelude::*;

use crate::columns::{schema, Columns};
use crate::events::{self, EventError, Tally};
use crate::reader::{self, Fill, ReadError, Source};
use crate::scan::{Item, ScanError, Scanner};

/// Explicit limits (each a parameter of the Python API, with these defaults).
#[derive(Clone, Debug)]
pub struct Limits {
    /// decompressed bytes read at a time
    pub block_bytes: usize,
    /// gzip: at most this many times the compressed size ...
    pub max_expansion: u64,
    /// ... or this many bytes, whichever is larger
    pub min_allowance_bytes: u64,
    /// a header/trailer value larger than this is skipped (with a note)
    pub max_metadata_value_bytes: usize,
    /// threads decoding the events of a block (0: rayon's default)
    pub threads: usize,
    /// bytes at the end of a plain file searched for baseTimeNanoseconds
    pub tail_peek_bytes: u64,
    /// one event, or the text before the events, larger than this is refused
    pub max_item_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            block_bytes: 8 << 20,
            max_expansion: 400,
            min_allowance_bytes: 512 << 20,
            max_metadata_value_bytes: 64 << 20,
            threads: 0,
            tail_peek_bytes: 1 << 16,
            max_item_bytes: 1 << 30,
        }
    }
}

/// Why a file could not be read (one line for the user, with the byte offset where known).
#[derive(Debug, Clone)]
pub struct TraceError {
    pub message: String,
    pub offset: Option<u64>,
}

/// What the file held besides its events (complete once the batches are exhausted).
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    /// header and trailer keys: (key, raw JSON text)
    pub metadata: Vec<(String, String)>,
    pub events: u64,
    pub events_bytes: u64,
    pub truncated_at_byte: Option<u64>,
    pub lost_bytes: u64,
    pub notes: Vec<(String, String, Option<u64>)>,
    pub tally: Tally,
    /// baseTimeNanoseconds added to every ts (a guess for trailer-only files, see lib.rs)
    pub base_ns: i64,
    pub gzip: bool,
}

/// A file's events as batches of raw_events rows, whatever its format (Kineto JSON here,
/// Perfetto protobuf in pftrace/): what the Parquet writer and the Python boundary stream.
/// `step` reads and decodes one block, queueing its batches in `ready` and setting `finished`
/// at the end of the input; `next_batch` is the same for every format.
pub trait EventSource: Send {
    fn ready(&mut self) -> &mut VecDeque<RecordBatch>;
    fn finished(&self) -> bool;
    fn step(&mut self) -> Result<(), TraceError>;
    fn into_outcome(self: Box<Self>) -> Outcome;

    /// The next batch of rows, None at the end.
    fn next_batch(&mut self) -> Result<Option<RecordBatch>, TraceError> {
        loop {
            if let Some(b) = self.ready().pop_front() {
                return Ok(Some(b));
            }
            if self.finished() {
                return Ok(None);
            }
            self.step()?;
        }
    }
}

/// Every batch of a source and its outcome, or the error (tests, fuzzing).
pub fn read_all_of(
    mut source: Box<dyn EventSource>,
) -> Result<(Vec<RecordBatch>, Outcome), TraceError> {
    let mut batches = Vec::new();
    while let Some(b) = source.next_batch()? {
        batches.push(b);
    }
    Ok((batches, source.into_outcome()))
}

impl EventSource for TraceParser {
    fn ready(&mut self) -> &mut VecDeque<RecordBatch> {
        &mut self.ready
    }
    fn finished(&self) -> bool {
        self.finished
    }
    fn step(&mut self) -> Result<(), TraceError> {
        TraceParser::step(self)
    }
    fn into_outcome(self: Box<Self>) -> Outcome {
        self.outcome
    }
}

pub struct TraceParser {
    path: PathBuf,
    limits: Limits,
    source: Source,
    scanner: Scanner,
    buf: Vec<u8>,
    /// absolute offset of buf[0]
    offset: u64,
    items: Vec<Item>,
    ready: VecDeque<RecordBatch>,
    pool: Option<rayon::ThreadPool>,
    schema: SchemaRef,
    pub outcome: Outcome,
    base_known: bool,
    finished: bool,
    /// absolute offsets: just after the events' `[`, at their `]`, end of the last event
    events_start: Option<u64>,
    events_end: Option<u64>,
    last_event_end: Option<u64>,
}

impl TraceParser {
    pub fn open(path: &Path, limits: Limits) -> Result<TraceParser, TraceError> {
        let source = Source::open(path, limits.max_expansion, limits.min_allowance_bytes).map_err(
            |ReadError::Fatal(m)| TraceError {
                message: m,
                offset: None,
            },
        )?;
        let pool = if limits.threads > 0 {
            rayon::ThreadPoolBuilder::new()
                .num_threads(limits.threads)
                .build()
                .ok()
        } else {
            None
        };
        let mut outcome = Outcome {
            gzip: source.is_gzip(),
            ..Outcome::default()
        };
        if !source.is_gzip() {
            outcome.base_ns = reader::peek_tail_base_ns(path, limits.tail_peek_bytes)
                .filter(|b| valid_base(*b))
                .unwrap_or(0);
        }
        Ok(TraceParser {
            path: path.to_path_buf(),
            limits,
            source,
            scanner: Scanner::new(),
            buf: Vec::new(),
            offset: 0,
            items: Vec::new(),
            ready: VecDeque::new(),
            pool,
            schema: schema(),
            outcome,
            base_known: false,
            finished: false,
            events_start: None,
            events_end: None,
            last_event_end: None,
        })
    }

    fn step(&mut self) -> Result<(), TraceError> {
        let want = self.limits.block_bytes.max(self.buf.len());
        let fill = self
            .source
            .fill(&mut self.buf, want)
            .map_err(|ReadError::Fatal(m)| TraceError {
                message: m,
                offset: None,
            })?;
        if let Err(ScanError::Syntax(at, m)) = self.scanner.scan(&self.buf, &mut self.items) {
            let at = self.offset + at as u64;
            let message = if self.scanner.events_opened {
                format!("malformed trace JSON at byte {at}: {m}")
            } else {
                describe_non_trace(&self.buf)
            };
            return Err(TraceError {
                message,
                offset: Some(at),
            });
        }
        let abs = |o: Option<usize>| o.map(|v| self.offset + v as u64);
        self.events_start = self.events_start.or(abs(self.scanner.events_start));
        self.events_end = self.events_end.or(abs(self.scanner.events_end));
        self.last_event_end = abs(self.scanner.last_event_end).or(self.last_event_end);
        self.take_metadata();
        self.decode_events()?;
        let at_end = fill != Fill::More || self.scanner.done();
        if at_end {
            self.finish(fill == Fill::Cut)?;
            return Ok(());
        }
        // drop what is done with: everything before the scan position
        let keep_from = self.scanner.pos;
        if self.buf.len() - keep_from > self.limits.max_item_bytes {
            let what = if self.scanner.events_opened {
                "one event"
            } else {
                "the text before the traceEvents array"
            };
            return Err(TraceError {
                message: format!(
                    "{what} is larger than {} MiB: not a torch.profiler or Chrome trace",
                    self.limits.max_item_bytes >> 20
                ),
                offset: Some(self.offset + keep_from as u64),
            });
        }
        self.buf.drain(..keep_from);
        self.scanner.drop_front(keep_from);
        self.offset += keep_from as u64;
        Ok(())
    }

    fn take_metadata(&mut self) {
        let buf = &self.buf;
        for item in self.items.iter() {
            if let Item::Meta(key, a, b) = item {
                if b - a > self.limits.max_metadata_value_bytes {
                    self.outcome.notes.push((
                        "metadata-skipped".into(),
                        format!(
                            "the metadata value of {key:?} is larger than {} bytes; it was skipped",
                            self.limits.max_metadata_value_bytes
                        ),
                        None,
                    ));
                    continue;
                }
                let raw = String::from_utf8_lossy(&buf[*a..*b]).into_owned();
                if key == "baseTimeNanoseconds" {
                    if let Ok(v) = raw.parse::<i64>() {
                        if !self.scanner.events_opened || self.outcome.events == 0 {
                            self.outcome.base_ns = if valid_base(v) { v } else { 0 };
                            self.base_known = true;
                        }
                    }
                }
                self.outcome.metadata.push((key.clone(), raw));
            }
        }
        self.items.retain(|it| matches!(it, Item::Event(..)));
        let _ = self.base_known;
    }

    fn decode_events(&mut self) -> Result<(), TraceError> {
        let spans: Vec<(usize, usize)> = self
            .items
            .drain(..)
            .filter_map(|it| match it {
                Item::Event(a, b) => Some((a, b)),
                Item::Meta(..) => None,
            })
            .collect();
        if spans.is_empty() {
            return Ok(());
        }
        let threads = self
            .pool
            .as_ref()
            .map_or_else(rayon::current_num_threads, |p| p.current_num_threads())
            .max(1);
        let per = spans.len().div_ceil(threads * 4).max(1024);
        let buf = &self.buf;
        let base = self.outcome.base_ns;
        let schema = &self.schema;
        let offset = self.offset;
        let work = || -> Vec<Result<(RecordBatch, Tally), TraceError>> {
            spans
                .par_chunks(per)
                .map(|chunk| decode_chunk(buf, chunk, base, schema, offset))
                .collect()
        };
        let results = match &self.pool {
            Some(pool) => pool.install(work),
            None => work(),
        };
        for r in results {
            let (batch, tally) = r?;
            self.outcome.events += batch.num_rows() as u64;
            self.outcome.tally.add(&tally);
            self.ready.push_back(batch);
        }
        Ok(())
    }

    fn finish(&mut self, cut: bool) -> Result<(), TraceError> {
        self.finished = true;
        let total = self.source.total();
        self.outcome
            .notes
            .extend(self.source.notes.drain(..).map(|(k, m)| (k, m, None)));
        if !self.scanner.events_opened {
            let message = if cut {
                format!("the gzip stream is cut short before the traceEvents array ({total} bytes readable): nothing to load")
            } else {
                describe_non_trace(&self.buf)
            };
            return Err(TraceError {
                message,
                offset: None,
            });
        }
        let start = self.events_start.unwrap_or(0);
        let end = self.events_end;
        let last = self.last_event_end.unwrap_or(start);
        if self.scanner.done()
            && self.buf[self.scanner.pos.min(self.buf.len())..]
                .iter()
                .any(|b| !b.is_ascii_whitespace())
        {
            self.outcome.notes.push((
                "trailing-data".into(),
                "bytes after the end of the trace's JSON were ignored".into(),
                None,
            ));
        }
        if self.scanner.done() {
            // (the array closed and so did the object)
            self.outcome.events_bytes = end.unwrap_or(last).saturating_sub(start);
        } else if self.scanner.events_closed && !cut {
            // only the end of the object is missing: the events are whole
            self.outcome.events_bytes = end.unwrap_or(last).saturating_sub(start);
            self.outcome.truncated_at_byte = Some(total);
            self.outcome.lost_bytes = total - end.unwrap_or(total);
        } else {
            self.outcome.events_bytes = last.saturating_sub(start);
            self.outcome.truncated_at_byte = Some(total);
            self.outcome.lost_bytes = total.saturating_sub(last);
        }
        let _ = &self.path;
        Ok(())
    }
}

fn valid_base(v: i64) -> bool {
    (0..(1i64 << 62)).contains(&v)
}

fn decode_chunk(
    buf: &[u8],
    chunk: &[(usize, usize)],
    base: i64,
    schema: &SchemaRef,
    offset: u64,
) -> Result<(RecordBatch, Tally), TraceError> {
    let bytes: usize = chunk.iter().map(|(a, b)| b - a).sum();
    let mut cols = Columns::new(chunk.len(), bytes);
    let mut tally = Tally::default();
    let mut scratch = events::Scratch::new();
    for &(a, b) in chunk {
        let raw = &buf[a..b];
        let decoded = match std::str::from_utf8(raw) {
            Ok(text) => events::decode(text, base, &mut cols, &mut tally, &mut scratch),
            Err(_) => {
                tally.invalid_utf8 += 1;
                let lossy = String::from_utf8_lossy(raw).into_owned();
                events::decode(
                    &lossy,
                    base,
                    &mut cols,
                    &mut tally,
                    &mut events::Scratch::new(),
                )
            }
        };
        decoded.map_err(|EventError::Syntax(e)| {
            let at = offset + a as u64;
            TraceError {
                message: format!("malformed trace JSON in the event at byte {at}: {e}"),
                offset: Some(at),
            }
        })?;
    }
    let batch = cols.finish(schema).map_err(|e| TraceError {
        message: format!("internal error: {e}"),
        offset: None,
    })?;
    Ok((batch, tally))
}

fn describe_non_trace(head: &[u8]) -> String {
    let t = head.trim_ascii();
    if t.is_empty() {
        return "the file is empty".into();
    }
    if head.starts_with(b"\xff\xfe") || head.starts_with(b"\xfe\xff") {
        return "the file is UTF-16 text; torch.profiler traces are UTF-8 JSON".into();
    }
    match serde_json::from_slice::<serde_json::Value>(t) {
        Ok(v) => {
            let kind = match v {
                serde_json::Value::Object(_) => "dict",
                serde_json::Value::Array(_) => "list",
                serde_json::Value::String(_) => "str",
                serde_json::Value::Number(ref n) if n.is_f64() => "float",
                serde_json::Value::Number(_) => "int",
                serde_json::Value::Bool(_) => "bool",
                serde_json::Value::Null => "NoneType",
            };
            format!("valid JSON ({kind}) but no traceEvents array: not a torch.profiler trace")
        }
        Err(_) => {
            "not JSON, or a JSON without a traceEvents array: not a torch.profiler trace".into()
        }
    }
}

/// The parser as an Arrow RecordBatchReader (what crosses into DuckDB as a C stream).
pub struct BatchIter<F: FnMut() -> Result<Option<RecordBatch>, ArrowError>> {
    pub schema: SchemaRef,
    pub next: F,
}

impl<F: FnMut() -> Result<Option<RecordBatch>, ArrowError>> Iterator for BatchIter<F> {
    type Item = Result<RecordBatch, ArrowError>;
    fn next(&mut self) -> Option<Self::Item> {
        (self.next)().transpose()
    }
}

impl<F: FnMut() -> Result<Option<RecordBatch>, ArrowError>> RecordBatchReader for BatchIter<F> {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}
