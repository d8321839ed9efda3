//! Perfetto protobuf traces (.pftrace, .perfetto-trace, .pb; plain or gzip) -> the same Arrow
//! rows as the JSON reading gives for the same events (Kineto's PerfettoTraceBuilder and
//! torch's .pftrace export write them; tests/pftrace_convert.py writes them from the JSON).
//!
//! Stages: `reader::Source` (bytes, gzip, bounded) -> the packet stream (`repeated TracePacket
//! packet = 1`, walked here one packet at a time; Perfetto's zlib `compressed_packets` are
//! expanded within a budget) -> `messages` (one packet decoded whole, or skipped whole as a bad
//! packet) -> `events` (packets -> rows: tracks, slices, interned names, args) -> columns.
//!
//! A file cut short keeps its whole packets (truncation recorded); a corrupt packet header
//! stops the walk (a note, or the file's error when no packet came before it).

mod args;
mod events;
mod messages;
mod wire;

use std::collections::VecDeque;
use std::path::Path;

use arrow_array::RecordBatch;
use flate2::{Decompress, FlushDecompress, Status};

use crate::reader::{Fill, ReadError, Source};
use crate::trace::{EventSource, Limits, Outcome, TraceError};

pub use events::Reading;

/// A real packet is at most a few MB; beyond this its length is corrupt.
pub const MAX_PACKET_BYTES: u64 = 64 << 20;
/// One compressed_packets chunk may expand to at most this (Perfetto writes ~1 MB ones).
pub const MAX_INFLATED_BYTES: u64 = 64 << 20;
const PACKET_TAG: u64 = 0x0A; // field 1 (packet), wire type 2 (length-delimited)
/// Packets the head-metadata probe looks at.
const HEAD_PACKETS: usize = 64;

/// Where the packet stream stopped being readable.
struct Damaged {
    offset: u64,
    why: String,
}

/// What the packet header at the start of `buf` says.
enum Header {
    /// (header bytes, packet bytes)
    Packet(usize, usize),
    /// the header or the packet runs past the end of `buf`
    Short,
    Damaged(String),
}

fn varint(buf: &[u8]) -> Result<Option<(u64, usize)>, ()> {
    let mut value: u64 = 0;
    for (i, &b) in buf.iter().enumerate() {
        if i >= 10 {
            return Err(());
        }
        value |= ((b & 0x7F) as u64).checked_shl(7 * i as u32).unwrap_or(0);
        if b < 0x80 {
            return Ok(Some((value, i + 1)));
        }
    }
    if buf.len() >= 10 {
        return Err(());
    }
    Ok(None)
}

fn header(buf: &[u8]) -> Header {
    let (tag, a) = match varint(buf) {
        Ok(Some(t)) => t,
        Ok(None) => return Header::Short,
        Err(()) => return Header::Damaged("a corrupt packet header".into()),
    };
    let (len, b) = match varint(&buf[a..]) {
        Ok(Some(t)) => t,
        Ok(None) => return Header::Short,
        Err(()) => return Header::Damaged("a corrupt packet header".into()),
    };
    if tag != PACKET_TAG {
        return Header::Damaged(format!("field tag {tag} where a packet should start"));
    }
    if len > MAX_PACKET_BYTES {
        return Header::Damaged(format!("a packet length of {} bytes", thousands(len)));
    }
    let len = len as usize;
    if a + b + len > buf.len() {
        return Header::Short;
    }
    Header::Packet(a + b, len)
}

/// `1234567` -> `1,234,567` (as Python's `{:,}`).
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        let left = digits.len() - i;
        if i > 0 && left / 3 * 3 == left {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The packets of a byte run (a compressed chunk, a file's head): each packet's bytes; stops at
/// a corrupt header. Returns the bytes left over (a packet cut short) and whether it stopped.
fn packets_of(mut buf: &[u8], mut each: impl FnMut(&[u8]) -> bool) -> (usize, bool) {
    while !buf.is_empty() {
        match header(buf) {
            Header::Packet(h, len) => {
                if !each(&buf[h..h + len]) {
                    return (0, true);
                }
                buf = &buf[h + len..];
            }
            Header::Short => return (buf.len(), false),
            Header::Damaged(_) => return (buf.len(), true),
        }
    }
    (0, false)
}

/// zlib `data`, inflated to at most `cap` bytes: Ok(None) when it expands beyond; Err when
/// corrupt. A stream cut short gives what it holds (as Python's zlib does).
fn inflate(data: &[u8], cap: u64) -> Result<Option<Vec<u8>>, ()> {
    let mut z = Decompress::new(true);
    let mut out = Vec::with_capacity((data.len() * 4).min(cap as usize + 1));
    loop {
        if out.len() == out.capacity() {
            out.reserve((out.capacity()).max(1 << 16));
        }
        let before = (z.total_in(), z.total_out());
        let at = z.total_in() as usize;
        let status = z
            .decompress_vec(&data[at..], &mut out, FlushDecompress::None)
            .map_err(|_| ())?;
        if out.len() as u64 > cap {
            return Ok(None);
        }
        if status == Status::StreamEnd || (z.total_in(), z.total_out()) == before {
            return Ok(Some(out));
        }
    }
}

/// One Perfetto protobuf file, read as a stream of Arrow batches (the JSON reader's columns).
pub struct PftraceParser {
    source: Source,
    limits: Limits,
    buf: Vec<u8>,
    /// bytes of whole packets walked so far (the offset of buf[0])
    offset: u64,
    /// top-level packets decoded (a corrupt header before any is the file's error)
    packets: u64,
    /// bytes compressed_packets may still expand to
    budget: u64,
    reading: Reading,
    ready: VecDeque<RecordBatch>,
    finished: bool,
    pub outcome: Outcome,
}

impl PftraceParser {
    pub fn open(path: &Path, limits: Limits) -> Result<PftraceParser, TraceError> {
        let fatal = |m: String| TraceError {
            message: m,
            offset: None,
        };
        let source = Source::open(path, limits.max_expansion, limits.min_allowance_bytes)
            .map_err(|ReadError::Fatal(m)| fatal(m))?;
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let budget = limits
            .min_allowance_bytes
            .max(size.saturating_mul(limits.max_expansion));
        let outcome = Outcome {
            gzip: source.is_gzip(),
            ..Outcome::default()
        };
        Ok(PftraceParser {
            source,
            limits,
            buf: Vec::new(),
            offset: 0,
            packets: 0,
            budget,
            reading: Reading::new(),
            ready: VecDeque::new(),
            finished: false,
            outcome,
        })
    }

    fn take_batches(&mut self, all: bool) -> Result<(), TraceError> {
        while let Some(b) = self.reading.take_batch(all).map_err(|e| TraceError {
            message: format!("internal error: {e}"),
            offset: None,
        })? {
            self.ready.push_back(b);
        }
        Ok(())
    }

    fn step(&mut self) -> Result<(), TraceError> {
        let want = self.limits.block_bytes.max(1 << 12);
        let fill = self
            .source
            .fill(&mut self.buf, want)
            .map_err(|ReadError::Fatal(m)| TraceError {
                message: m,
                offset: None,
            })?;
        let mut pos = 0;
        let mut damaged = None;
        while pos < self.buf.len() {
            match header(&self.buf[pos..]) {
                Header::Packet(h, len) => {
                    let (a, b) = (pos + h, pos + h + len);
                    let data = std::mem::take(&mut self.buf);
                    let result = self.packet(&data[a..b]);
                    self.buf = data;
                    result?;
                    self.offset += (b - pos) as u64;
                    pos = b;
                }
                Header::Short => break,
                Header::Damaged(why) => {
                    damaged = Some(Damaged {
                        offset: self.offset,
                        why,
                    });
                    break;
                }
            }
        }
        self.buf.drain(..pos);
        if let Some(d) = damaged {
            let at = format!("{} at byte {}", d.why, thousands(d.offset));
            if self.packets == 0 {
                return Err(TraceError {
                    message: format!("not a Perfetto protobuf trace ({at})"),
                    offset: Some(d.offset),
                });
            }
            self.reading.damaged = Some(at);
            return self.finish(false, false);
        }
        if fill != Fill::More {
            return self.finish(true, fill == Fill::Cut);
        }
        Ok(())
    }

    /// One top-level packet.
    fn packet(&mut self, data: &[u8]) -> Result<(), TraceError> {
        let Ok(p) = messages::packet(data) else {
            self.reading.bad_packets += 1;
            return Ok(());
        };
        self.packets += 1;
        if let messages::Data::Compressed(z) = p.data {
            return self.compressed(z);
        }
        self.reading.packet(p);
        Ok(())
    }

    /// A compressed_packets chunk: its packets (nested compressed ones are ignored); what
    /// cannot be read is a bad packet.
    fn compressed(&mut self, z: &[u8]) -> Result<(), TraceError> {
        let cap = self.budget.min(MAX_INFLATED_BYTES);
        let raw = match inflate(z, cap) {
            Ok(Some(raw)) => raw,
            Ok(None) => {
                return Err(TraceError {
                    message: format!(
                        "compressed packets expand beyond {} MiB (a zip bomb?)",
                        cap >> 20
                    ),
                    offset: Some(self.offset),
                })
            }
            Err(()) => {
                self.reading.bad_packets += 1;
                return Ok(());
            }
        };
        self.budget -= raw.len() as u64;
        let reading = &mut self.reading;
        let (left, damaged) = packets_of(&raw, |data| {
            match messages::packet(data) {
                Ok(p) if matches!(p.data, messages::Data::Compressed(_)) => {}
                Ok(p) => reading.packet(p),
                Err(_) => reading.bad_packets += 1,
            }
            true
        });
        if left > 0 || damaged {
            reading.bad_packets += 1;
        }
        Ok(())
    }

    /// The end: of the stream (`at_end`; `cut` short, for gzip), or at damage.
    fn finish(&mut self, at_end: bool, cut: bool) -> Result<(), TraceError> {
        self.finished = true;
        let left = if at_end { self.buf.len() as u64 } else { 0 };
        self.reading.finish();
        self.take_batches(true)?;
        let o = &mut self.outcome;
        o.events = self.reading.events;
        o.events_bytes = self.offset;
        o.metadata = std::mem::take(&mut self.reading.metadata);
        o.tally = self.reading.tally.clone();
        o.notes = self.reading.notes();
        o.notes
            .extend(self.source.notes.drain(..).map(|(k, m)| (k, m, None)));
        if left > 0 || cut {
            o.truncated_at_byte = Some(self.offset);
            o.lost_bytes = left;
        }
        Ok(())
    }
}

/// Read a whole file (tests, fuzzing): every batch and the outcome, or the error.
pub fn read_all(path: &Path, limits: Limits) -> Result<(Vec<RecordBatch>, Outcome), TraceError> {
    crate::trace::read_all_of(Box::new(PftraceParser::open(path, limits)?))
}

/// The trace metadata (chrome_events.metadata: (key, JSON text)) of the first packets of
/// `head` (a file's first bytes, decompressed), or None if they hold none.
pub fn head_metadata(head: &[u8]) -> Option<Vec<(String, String)>> {
    let mut reading = Reading::new();
    let mut found = false;
    let mut seen = 0;
    let mut one = |p: messages::Packet<'_>, reading: &mut Reading| {
        if matches!(p.data, messages::Data::ChromeEvents(_)) {
            found = true;
            reading.packet(p);
        }
    };
    packets_of(head, |data| {
        seen += 1;
        let Ok(p) = messages::packet(data) else {
            return false;
        };
        if let messages::Data::Compressed(z) = p.data {
            if let Ok(Some(raw)) = inflate(z, MAX_INFLATED_BYTES) {
                packets_of(&raw, |inner| {
                    seen += 1;
                    match messages::packet(inner) {
                        Ok(p) => one(p, &mut reading),
                        Err(_) => return false,
                    }
                    seen <= HEAD_PACKETS
                });
            }
        } else {
            one(p, &mut reading);
        }
        seen <= HEAD_PACKETS
    });
    found.then_some(reading.metadata)
}

#[cfg(test)]
mod tests;

impl EventSource for PftraceParser {
    fn ready(&mut self) -> &mut VecDeque<RecordBatch> {
        &mut self.ready
    }
    fn finished(&self) -> bool {
        self.finished
    }
    /// One block of packets decoded; its complete batches queued.
    fn step(&mut self) -> Result<(), TraceError> {
        PftraceParser::step(self)?;
        self.take_batches(false)
    }
    fn into_outcome(self: Box<Self>) -> Outcome {
        self.outcome
    }
}

/// Open `path` as a Perfetto protobuf trace (`protobuf`) or a JSON one.
pub fn open_events(
    path: &Path,
    limits: Limits,
    protobuf: bool,
) -> Result<Box<dyn EventSource>, TraceError> {
    Ok(if protobuf {
        Box::new(PftraceParser::open(path, limits)?)
    } else {
        Box::new(crate::trace::TraceParser::open(path, limits)?)
    })
}

/// A hasher for the u64 ids of a trace (interned ids, track uuids): one multiply-fold with a
/// per-process random key, much cheaper than SipHash per event, and not predictable by a file.
#[derive(Clone)]
pub struct IdHasher {
    key: u64,
    state: u64,
}

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        let h = (self.state ^ self.key) as u128 * 0x9E37_79B9_7F4A_7C15u128;
        (h as u64) ^ ((h >> 64) as u64)
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.state = self.state.rotate_left(8) ^ *b as u64;
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.state = self.state.rotate_left(29) ^ n;
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64);
    }
    fn write_u8(&mut self, n: u8) {
        self.write_u64(n as u64);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

#[derive(Clone)]
pub struct IdHash(u64);

impl Default for IdHash {
    fn default() -> Self {
        use std::hash::BuildHasher;
        static KEY: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        IdHash(*KEY.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0u64)))
    }
}

impl std::hash::BuildHasher for IdHash {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher {
            key: self.0,
            state: 0,
        }
    }
}

/// A map keyed by ids.
pub type IdMap<K, V> = std::collections::HashMap<K, V, IdHash>;
