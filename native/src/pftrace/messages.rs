//! The subset of Perfetto's TracePacket read, decoded from the wire into borrowed structs
//! (field numbers from perfetto/protos/perfetto/trace/perfetto_trace.proto). A packet is
//! decoded whole before any of it is used, so a malformed one is skipped whole. Repeated
//! occurrences of a message field merge and the last member of a oneof wins, as in protobuf.

use super::wire::{fields, fixed64s, varints, Malformed, Value};

/// Nested debug annotations deeper than this make the packet malformed (upb's limit).
const MAX_DEPTH: usize = 100;

pub const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
pub const TYPE_SLICE_BEGIN: i32 = 1;
pub const TYPE_SLICE_END: i32 = 2;
pub const TYPE_INSTANT: i32 = 3;
pub const TYPE_COUNTER: i32 = 4;

/// The TracePacket `data` oneof members read.
#[derive(Default)]
pub enum Data<'a> {
    #[default]
    Other,
    TrackEvent(TrackEvent<'a>),
    TrackDescriptor(TrackDescriptor<'a>),
    ChromeEvents(Vec<Metadata<'a>>),
    Compressed(&'a [u8]),
}

#[derive(Default)]
pub struct Packet<'a> {
    pub timestamp: Option<u64>,
    pub sequence_id: u32,
    pub sequence_flags: u32,
    pub incremental_state_cleared: bool,
    pub interned: Interned<'a>,
    /// trace_packet_defaults given, and its track_event_defaults.track_uuid
    pub defaults: Option<Option<u64>>,
    pub data: Data<'a>,
}

#[derive(Default)]
pub struct Interned<'a> {
    pub event_names: Vec<(u64, &'a [u8])>,
    pub event_categories: Vec<(u64, &'a [u8])>,
    pub annotation_names: Vec<(u64, &'a [u8])>,
    pub annotation_strings: Vec<(u64, &'a [u8])>,
}

#[derive(Default, Clone, Copy)]
pub enum NameField<'a> {
    #[default]
    None,
    Iid(u64),
    Text(&'a [u8]),
}

#[derive(Default)]
pub struct TrackEvent<'a> {
    pub category_iids: Vec<u64>,
    pub categories: Vec<&'a [u8]>,
    pub name: NameField<'a>,
    pub kind: i32,
    pub track_uuid: Option<u64>,
    pub annotations: Vec<Annotation<'a>>,
    pub legacy: Option<Legacy>,
    pub flow_ids: Vec<u64>,
    pub flow_ids_old: Vec<u64>,
    pub terminating_flow_ids: Vec<u64>,
    pub terminating_flow_ids_old: Vec<u64>,
    pub counter: Option<Counter>,
}

#[derive(Clone, Copy)]
pub enum Counter {
    Int(i64),
    Double(f64),
}

#[derive(Default, Clone, Copy)]
pub struct Legacy {
    pub phase: i32,
    pub duration_us: Option<i64>,
    pub pid_override: Option<i32>,
    pub tid_override: Option<i32>,
}

#[derive(Default, Clone, Copy, Debug)]
pub enum AnnValue<'a> {
    #[default]
    None,
    Bool(bool),
    UInt(u64),
    Int(i64),
    Double(f64),
    Pointer(u64),
    Nested,
    LegacyJson(&'a [u8]),
    Text(&'a [u8]),
    TextIid(u64),
}

#[derive(Default, Debug)]
pub struct Annotation<'a> {
    pub name: NameField<'a>,
    pub value: AnnValue<'a>,
    pub dict: Vec<Annotation<'a>>,
    pub array: Vec<Annotation<'a>>,
}

impl std::fmt::Debug for NameField<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NameField::None => write!(f, "None"),
            NameField::Iid(i) => write!(f, "Iid({i})"),
            NameField::Text(t) => write!(f, "Text({:?})", String::from_utf8_lossy(t)),
        }
    }
}

#[derive(Default)]
pub struct TrackDescriptor<'a> {
    pub uuid: u64,
    pub parent_uuid: Option<u64>,
    pub name: Option<&'a [u8]>,
    pub process: Option<Process<'a>>,
    pub thread: Option<Thread<'a>>,
    pub counter: bool,
}

#[derive(Default)]
pub struct Process<'a> {
    pub pid: Option<i32>,
    pub process_name: Option<&'a [u8]>,
    pub process_labels: Vec<&'a [u8]>,
    pub legacy_sort_index: Option<i32>,
}

#[derive(Default)]
pub struct Thread<'a> {
    pub pid: Option<i32>,
    pub tid: Option<i32>,
    pub thread_name: Option<&'a [u8]>,
    pub legacy_sort_index: Option<i32>,
}

pub enum MetaValue<'a> {
    Text(&'a [u8]),
    Bool(bool),
    Int(i64),
    Json(&'a [u8]),
}

pub struct Metadata<'a> {
    pub name: &'a [u8],
    pub value: Option<MetaValue<'a>>,
}

fn bytes(v: Value<'_>) -> Option<&[u8]> {
    match v {
        Value::Bytes(b) => Some(b),
        _ => None,
    }
}

fn varint(v: Value<'_>) -> Option<u64> {
    match v {
        Value::Varint(n) => Some(n),
        _ => None,
    }
}

pub fn packet(buf: &[u8]) -> Result<Packet<'_>, Malformed> {
    let mut p = Packet::default();
    for f in fields(buf) {
        match f? {
            (8, Value::Varint(v)) => p.timestamp = Some(v),
            (10, Value::Varint(v)) => p.sequence_id = v as u32,
            (13, Value::Varint(v)) => p.sequence_flags = v as u32,
            (41, Value::Varint(v)) => p.incremental_state_cleared = v != 0,
            (12, Value::Bytes(b)) => interned(b, &mut p.interned)?,
            (59, Value::Bytes(b)) => {
                let mut track = p.defaults.flatten();
                for f in fields(b) {
                    if let (11, Value::Bytes(d)) = f? {
                        for f in fields(d) {
                            if let (11, Value::Varint(v)) = f? {
                                track = Some(v);
                            }
                        }
                    }
                }
                p.defaults = Some(track);
            }
            (11, Value::Bytes(b)) => {
                if !matches!(p.data, Data::TrackEvent(_)) {
                    p.data = Data::TrackEvent(TrackEvent::default());
                }
                if let Data::TrackEvent(te) = &mut p.data {
                    track_event(b, te)?;
                }
            }
            (60, Value::Bytes(b)) => {
                if !matches!(p.data, Data::TrackDescriptor(_)) {
                    p.data = Data::TrackDescriptor(TrackDescriptor::default());
                }
                if let Data::TrackDescriptor(d) = &mut p.data {
                    track_descriptor(b, d)?;
                }
            }
            (5, Value::Bytes(b)) => {
                if !matches!(p.data, Data::ChromeEvents(_)) {
                    p.data = Data::ChromeEvents(Vec::new());
                }
                if let Data::ChromeEvents(m) = &mut p.data {
                    chrome_events(b, m)?;
                }
            }
            (50, Value::Bytes(b)) => p.data = Data::Compressed(b),
            _ => {}
        }
    }
    Ok(p)
}

fn interned<'a>(buf: &'a [u8], out: &mut Interned<'a>) -> Result<(), Malformed> {
    for f in fields(buf) {
        let (n, v) = f?;
        let list = match n {
            1 => &mut out.event_categories,
            2 => &mut out.event_names,
            3 => &mut out.annotation_names,
            29 => &mut out.annotation_strings,
            _ => continue,
        };
        let Some(b) = bytes(v) else { continue };
        let (mut iid, mut name) = (0, &b""[..]);
        for f in fields(b) {
            match f? {
                (1, Value::Varint(v)) => iid = v,
                (2, Value::Bytes(t)) => name = t,
                _ => {}
            }
        }
        list.push((iid, name));
    }
    Ok(())
}

fn track_event<'a>(buf: &'a [u8], te: &mut TrackEvent<'a>) -> Result<(), Malformed> {
    for f in fields(buf) {
        let (n, v) = f?;
        match n {
            3 => varints(v, &mut te.category_iids)?,
            22 => te.categories.extend(bytes(v)),
            10 => {
                if let Some(i) = varint(v) {
                    te.name = NameField::Iid(i);
                }
            }
            23 => {
                if let Some(t) = bytes(v) {
                    te.name = NameField::Text(t);
                }
            }
            9 => {
                if let Some(k) = varint(v) {
                    te.kind = k as i32;
                }
            }
            11 => te.track_uuid = varint(v).or(te.track_uuid),
            4 => {
                if let Some(b) = bytes(v) {
                    let mut a = Annotation::default();
                    annotation(b, &mut a, 0)?;
                    te.annotations.push(a);
                }
            }
            6 => {
                if let Some(b) = bytes(v) {
                    let l = te.legacy.get_or_insert_with(Legacy::default);
                    for f in fields(b) {
                        match f? {
                            (2, Value::Varint(x)) => l.phase = x as i32,
                            (3, Value::Varint(x)) => l.duration_us = Some(x as i64),
                            (18, Value::Varint(x)) => l.pid_override = Some(x as i32),
                            (19, Value::Varint(x)) => l.tid_override = Some(x as i32),
                            _ => {}
                        }
                    }
                }
            }
            36 => varints(v, &mut te.flow_ids_old)?,
            47 => fixed64s(v, &mut te.flow_ids)?,
            42 => varints(v, &mut te.terminating_flow_ids_old)?,
            48 => fixed64s(v, &mut te.terminating_flow_ids)?,
            30 => {
                if let Some(x) = varint(v) {
                    te.counter = Some(Counter::Int(x as i64));
                }
            }
            44 => {
                if let Value::Fixed64(x) = v {
                    te.counter = Some(Counter::Double(f64::from_bits(x)));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn annotation<'a>(buf: &'a [u8], a: &mut Annotation<'a>, depth: usize) -> Result<(), Malformed> {
    if depth > MAX_DEPTH {
        return Err(Malformed);
    }
    for f in fields(buf) {
        let (n, v) = f?;
        match (n, v) {
            (1, Value::Varint(x)) => a.name = NameField::Iid(x),
            (10, Value::Bytes(t)) => a.name = NameField::Text(t),
            (2, Value::Varint(x)) => a.value = AnnValue::Bool(x != 0),
            (3, Value::Varint(x)) => a.value = AnnValue::UInt(x),
            (4, Value::Varint(x)) => a.value = AnnValue::Int(x as i64),
            (5, Value::Fixed64(x)) => a.value = AnnValue::Double(f64::from_bits(x)),
            (7, Value::Varint(x)) => a.value = AnnValue::Pointer(x),
            (8, Value::Bytes(_)) => a.value = AnnValue::Nested,
            (9, Value::Bytes(t)) => a.value = AnnValue::LegacyJson(t),
            (6, Value::Bytes(t)) => a.value = AnnValue::Text(t),
            (17, Value::Varint(x)) => a.value = AnnValue::TextIid(x),
            (11, Value::Bytes(b)) => {
                let mut e = Annotation::default();
                annotation(b, &mut e, depth + 1)?;
                a.dict.push(e);
            }
            (12, Value::Bytes(b)) => {
                let mut e = Annotation::default();
                annotation(b, &mut e, depth + 1)?;
                a.array.push(e);
            }
            _ => {}
        }
    }
    Ok(())
}

fn track_descriptor<'a>(buf: &'a [u8], d: &mut TrackDescriptor<'a>) -> Result<(), Malformed> {
    for f in fields(buf) {
        match f? {
            (1, Value::Varint(x)) => d.uuid = x,
            (5, Value::Varint(x)) => d.parent_uuid = Some(x),
            (2, Value::Bytes(t)) => d.name = Some(t),
            (8, Value::Bytes(b)) => {
                for f in fields(b) {
                    f?;
                }
                d.counter = true;
            }
            (3, Value::Bytes(b)) => {
                let p = d.process.get_or_insert_with(Process::default);
                for f in fields(b) {
                    match f? {
                        (1, Value::Varint(x)) => p.pid = Some(x as i32),
                        (6, Value::Bytes(t)) => p.process_name = Some(t),
                        (8, Value::Bytes(t)) => p.process_labels.push(t),
                        (3, Value::Varint(x)) => p.legacy_sort_index = Some(x as i32),
                        _ => {}
                    }
                }
            }
            (4, Value::Bytes(b)) => {
                let t = d.thread.get_or_insert_with(Thread::default);
                for f in fields(b) {
                    match f? {
                        (1, Value::Varint(x)) => t.pid = Some(x as i32),
                        (2, Value::Varint(x)) => t.tid = Some(x as i32),
                        (5, Value::Bytes(s)) => t.thread_name = Some(s),
                        (3, Value::Varint(x)) => t.legacy_sort_index = Some(x as i32),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn chrome_events<'a>(buf: &'a [u8], out: &mut Vec<Metadata<'a>>) -> Result<(), Malformed> {
    for f in fields(buf) {
        if let (2, Value::Bytes(b)) = f? {
            let mut m = Metadata {
                name: b"",
                value: None,
            };
            for f in fields(b) {
                match f? {
                    (1, Value::Bytes(t)) => m.name = t,
                    (2, Value::Bytes(t)) => m.value = Some(MetaValue::Text(t)),
                    (3, Value::Varint(x)) => m.value = Some(MetaValue::Bool(x != 0)),
                    (4, Value::Varint(x)) => m.value = Some(MetaValue::Int(x as i64)),
                    (5, Value::Bytes(t)) => m.value = Some(MetaValue::Json(t)),
                    _ => {}
                }
            }
            out.push(m);
        }
    }
    Ok(())
}
