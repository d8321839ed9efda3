//! Stage 3: one event's JSON text -> one row of typed columns.
//!
//! An event in plain tokens is read by hand (plain_json.rs); any other, `serde_json` decodes
//! into borrowed raw values (any key order; of a key
//! given twice, the last value wins, as in Python's json and JavaScript, and it is counted);
//! `values.rs` types them exactly. Odd values become NULL and are counted in `Tally`.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::columns::{
    Columns, DUR_NS, FIRST_ARG, FLOW_ID, OTHER_ARGS, PH, STEP_MARK_PREFIX, TS_NS,
};
use crate::plain_json::Cursor;
use crate::values::{self, Bad};

/// args keys read into typed columns: column FIRST_ARG + i for the i-th key; then the other
/// spellings of two of them (read when the first spelling is absent or NULL).
pub const ARG_KEYS: [&str; 28] = [
    "External id",
    "correlation",
    "device",
    "stream",
    "bytes",
    "Input Dims",
    "Input type",
    "Sequence number",
    "Fwd thread id",
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "dtype",
    "Group size",
    "Process Group Name",
    "Process Group Description",
    "Process Group Ranks",
    "Seq",
    "Total Allocated",
    "Total Reserved",
    "Device Type",
    "Device Id",
    "Addr",
    "name",
    "labels",
    "cuda_sync_kind",
    "external id",
    "Bytes",
];
pub const TYPED_ARGS: usize = 26;
pub const ALIASES: [(usize, usize); 2] = [(26, 0), (27, 4)]; // (alias slot, its column's slot)

/// Times beyond +-2^62 ns (the year 2116) are malformed: NULL, which keeps every ts + dur
/// sum of the tables within BIGINT.
pub const TIME_LIMIT_NS: i128 = 1 << 62;

/// What was odd in a batch of events (added up over the file).
#[derive(Default, Debug, Clone)]
pub struct Tally {
    pub non_objects: u64,
    pub args_not_object: u64,
    pub duplicate_keys: u64,
    pub bad_args: [u64; TYPED_ARGS],
    pub non_finite: u64,
    pub too_deep: u64,
    pub invalid_utf8: u64,
    pub bad_step_numbers: u64,
}

impl Tally {
    pub fn add(&mut self, o: &Tally) {
        self.non_objects += o.non_objects;
        self.args_not_object += o.args_not_object;
        self.duplicate_keys += o.duplicate_keys;
        for (a, b) in self.bad_args.iter_mut().zip(o.bad_args.iter()) {
            *a += b;
        }
        self.non_finite += o.non_finite;
        self.too_deep += o.too_deep;
        self.invalid_utf8 += o.invalid_utf8;
        self.bad_step_numbers += o.bad_step_numbers;
    }
}

struct Key<'de>(Cow<'de, str>);

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(v.to_string())))
    }
}

struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Key<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Key<'de>, D::Error> {
        d.deserialize_str(KeyVisitor)
    }
}

/// How an event failed to decode.
pub enum EventError {
    Syntax(serde_json::Error),
}

/// Top-level keys read: their slot in `Event::top`.
const ARGS: usize = 8;
fn top_slot(key: &str) -> Option<usize> {
    Some(match key {
        "ph" => 0,
        "cat" => 1,
        "name" => 2,
        "pid" => 3,
        "tid" => 4,
        "ts" => 5,
        "dur" => 6,
        "id" => 7,
        "args" => ARGS,
        _ => return None,
    })
}

/// The args keys read into typed columns: their slot (index into ARG_KEYS). A `match` on
/// the key compiles to a switch on its length and a comparison, not a scan of the list.
pub(crate) fn arg_slot(key: &str) -> Option<usize> {
    Some(match key {
        "External id" => 0,
        "correlation" => 1,
        "device" => 2,
        "stream" => 3,
        "bytes" => 4,
        "Input Dims" => 5,
        "Input type" => 6,
        "Sequence number" => 7,
        "Fwd thread id" => 8,
        "Collective name" => 9,
        "In msg nelems" => 10,
        "Out msg nelems" => 11,
        "dtype" => 12,
        "Group size" => 13,
        "Process Group Name" => 14,
        "Process Group Description" => 15,
        "Process Group Ranks" => 16,
        "Seq" => 17,
        "Total Allocated" => 18,
        "Total Reserved" => 19,
        "Device Type" => 20,
        "Device Id" => 21,
        "Addr" => 22,
        "name" => 23,
        "labels" => 24,
        "cuda_sync_kind" => 25,
        "external id" => 26,
        "Bytes" => 27,
        _ => return None,
    })
}

/// What the args value was.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ArgsKind {
    Absent,
    Object,
    Other,
}

/// One event's values, as borrowed JSON text, before typing.
struct Event<'a, 'o> {
    top: [Option<&'a str>; 8],
    args_kind: ArgsKind,
    args_seen: bool,
    slots: [Option<&'a str>; 28],
    others: &'o mut Vec<(Cow<'a, str>, &'a str)>,
    dup: bool,
}

impl<'a, 'o> Event<'a, 'o> {
    fn new(others: &'o mut Vec<(Cow<'a, str>, &'a str)>) -> Self {
        others.clear();
        Event {
            top: [None; 8],
            args_kind: ArgsKind::Absent,
            args_seen: false,
            slots: [None; 28],
            others,
            dup: false,
        }
    }

    /// A second `args` key: the last one wins, whole.
    fn restart_args(&mut self) {
        self.dup |= self.args_seen;
        self.args_seen = true;
        self.args_kind = ArgsKind::Absent;
        self.slots = [None; 28];
        self.others.clear();
    }

    fn set_top(&mut self, slot: usize, value: &'a str) {
        self.dup |= self.top[slot].replace(value).is_some();
    }

    fn set_arg(&mut self, key: Key<'a>, value: &'a str) {
        match arg_slot(&key.0) {
            Some(i) => self.dup |= self.slots[i].replace(value).is_some(),
            None => {
                if let Some(o) = self.others.iter_mut().find(|(k, _)| *k == key.0) {
                    o.1 = value;
                    self.dup = true;
                } else {
                    self.others.push((key.0, value));
                }
            }
        }
    }
}

/// The fast path, one pass: the event object's keys, with `args` decoded in place.
struct EventVisitor<'e, 'a, 'o>(&'e mut Event<'a, 'o>);

impl<'a> Visitor<'a> for EventVisitor<'_, 'a, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an event object")
    }
    fn visit_map<A: MapAccess<'a>>(self, mut map: A) -> Result<(), A::Error> {
        let ev = self.0;
        while let Some(key) = map.next_key_seed(KeySeed)? {
            match top_slot(&key.0) {
                Some(ARGS) => {
                    ev.restart_args();
                    map.next_value_seed(ArgsSeed(&mut *ev))?;
                }
                Some(slot) => ev.set_top(slot, map.next_value::<&'a RawValue>()?.get()),
                None => {
                    let _: &'a RawValue = map.next_value()?;
                }
            }
        }
        Ok(())
    }
}

/// The args value, decoded in the same pass: an object's entries go to their slots; any
/// other value is skipped (and counted). A value serde cannot take this way (a number out of
/// f64's range) is an error that sends the event to the slow path, which decides.
struct ArgsSeed<'e, 'a, 'o>(&'e mut Event<'a, 'o>);

impl<'a> DeserializeSeed<'a> for ArgsSeed<'_, 'a, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'a>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'a> ArgsSeed<'_, 'a, '_> {
    fn other<E>(self) -> Result<(), E> {
        self.0.args_kind = ArgsKind::Other;
        Ok(())
    }
}

impl<'a> Visitor<'a> for ArgsSeed<'_, 'a, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an args value")
    }
    fn visit_map<A: MapAccess<'a>>(self, mut map: A) -> Result<(), A::Error> {
        let ev = self.0;
        ev.args_kind = ArgsKind::Object;
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let value: &'a RawValue = map.next_value()?;
            ev.set_arg(key, value.get());
        }
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.args_kind = ArgsKind::Absent;
        Ok(())
    }
    fn visit_seq<A: serde::de::SeqAccess<'a>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        self.other()
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        self.other()
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        self.other()
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        self.other()
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        self.other()
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        self.other()
    }
}

/// Calls `F` with every (key, raw value) of a JSON object.
struct Entries<F>(F);

impl<'de, F: FnMut(Key<'de>, &'de RawValue)> Visitor<'de> for Entries<F> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let value: &'de RawValue = map.next_value()?;
            (self.0)(key, value);
        }
        Ok(())
    }
}

fn entries<'de>(
    text: &'de str,
    f: impl FnMut(Key<'de>, &'de RawValue),
) -> Result<(), serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    de.deserialize_map(Entries(f))?;
    de.end()
}

/// The slow path, two passes (taken when the fast one fails): the event's keys as raw
/// values, then the args object's. What it cannot decode is the event's error.
fn collect_slow<'a>(text: &'a str, ev: &mut Event<'a, '_>) -> Result<(), serde_json::Error> {
    let mut args: Option<&'a RawValue> = None;
    let mut dup = false;
    let mut top = [None; 8];
    entries(text, |k, v| match top_slot(&k.0) {
        Some(ARGS) => dup |= args.replace(v).is_some(),
        Some(i) => dup |= top[i].replace(v.get()).is_some(),
        None => {}
    })?;
    ev.top = top;
    ev.dup = dup;
    match args.map(|a| a.get()) {
        Some(text) if text.starts_with('{') => {
            ev.args_kind = ArgsKind::Object;
            let _ = entries(text, |k, v| ev.set_arg(k, v.get()));
        }
        Some("null") | None => {}
        Some(_) => ev.args_kind = ArgsKind::Other,
    }
    Ok(())
}

/// Reusable buffers of one thread's decoding (their contents borrow the block's text).
pub struct Scratch<'a> {
    others: Vec<(Cow<'a, str>, &'a str)>,
    text: String,
}

impl Scratch<'_> {
    pub fn new() -> Self {
        Scratch {
            others: Vec::new(),
            text: String::new(),
        }
    }
}

impl Default for Scratch<'_> {
    fn default() -> Self {
        Self::new()
    }
}

/// The quickest path: an event in plain tokens (plain_json.rs), read by hand as the serde
/// path reads it (the same slots, duplicates, args); None: declined, nothing decided (the
/// event is read again from scratch).
fn plain_event<'a>(text: &'a str, ev: &mut Event<'a, '_>) -> Option<()> {
    let mut c = Cursor::new(text);
    c.members(|c, key| {
        match top_slot(key) {
            Some(ARGS) => {
                ev.restart_args();
                match c.peek()? {
                    b'{' => {
                        ev.args_kind = ArgsKind::Object;
                        c.members(|c, k| {
                            let v = c.value(2)?;
                            ev.set_arg(Key(Cow::Borrowed(k)), v);
                            Some(())
                        })?;
                    }
                    b'n' if c.value(1)? == "null" => {} // (no args)
                    _ => return None, // (args of another kind: serde's path counts it)
                }
            }
            Some(slot) => {
                let v = c.value(1)?;
                ev.set_top(slot, v);
            }
            None => {
                c.value(1)?;
            }
        }
        Some(())
    })?;
    c.at_end().then_some(())
}

/// Decode one element of the events array into a row of `cols`.
pub fn decode<'a>(
    text: &'a str,
    base_ns: i64,
    cols: &mut Columns,
    tally: &mut Tally,
    scratch: &mut Scratch<'a>,
) -> Result<(), EventError> {
    if !text.starts_with('{') {
        tally.non_objects += 1;
        cols.end_row();
        return Ok(());
    }
    let mut ev = Event::new(&mut scratch.others);
    if plain_event(text, &mut ev).is_some() {
        emit(&ev, base_ns, cols, tally, &mut scratch.text);
        return Ok(());
    }
    ev = Event::new(ev.others);
    let mut de = serde_json::Deserializer::from_str(text);
    let fast = de
        .deserialize_map(EventVisitor(&mut ev))
        .and_then(|()| de.end());
    if fast.is_err() {
        ev = Event::new(ev.others);
        if let Err(e) = collect_slow(text, &mut ev) {
            if e.to_string().contains("recursion limit") {
                tally.too_deep += 1;
                cols.end_row();
                return Ok(());
            }
            if let Some(fixed) = without_non_finite(text) {
                tally.non_finite += 1;
                return decode(&fixed, base_ns, cols, tally, &mut Scratch::new());
            }
            return Err(EventError::Syntax(e));
        }
    }
    emit(&ev, base_ns, cols, tally, &mut scratch.text);
    Ok(())
}

/// The row of one decoded event.
fn emit(ev: &Event, base_ns: i64, cols: &mut Columns, tally: &mut Tally, scratch: &mut String) {
    for (slot, col) in [(0, PH), (1, 1), (2, 2), (3, 3), (4, 4), (7, FLOW_ID)] {
        put_text(cols, col, ev.top[slot], scratch);
    }
    let ts = ev.top[5]
        .and_then(|v| values::time_ns(v).ok())
        .map(|t| t + base_ns as i128);
    cols.int(
        TS_NS,
        ts.filter(|t| t.abs() <= TIME_LIMIT_NS).map(|t| t as i64),
    );
    let dur = ev.top[6].and_then(|v| values::time_ns(v).ok());
    cols.int(
        DUR_NS,
        dur.filter(|t| t.abs() <= TIME_LIMIT_NS).map(|t| t as i64),
    );
    if let Some(name) = ev.top[2] {
        check_step_name(name, tally);
    }
    if ev.args_kind == ArgsKind::Other {
        tally.args_not_object += 1;
    }
    emit_args(ev, cols, tally, scratch);
    if ev.dup {
        tally.duplicate_keys += 1;
    }
    cols.end_row();
}

fn put_text(cols: &mut Columns, col: usize, raw: Option<&str>, scratch: &mut String) {
    let Some(raw) = raw else {
        return;
    };
    if let Some(inner) = raw
        .strip_prefix('"')
        .and_then(|r| r.strip_suffix('"'))
        .filter(|i| !i.contains('\\'))
    {
        cols.str(col, Some(inner)); // (the common case: no copy through scratch)
        return;
    }
    scratch.clear();
    if values::text(raw, scratch).is_some() {
        cols.str(col, Some(scratch));
    }
}

/// The args columns.
fn emit_args(ev: &Event, cols: &mut Columns, tally: &mut Tally, scratch: &mut String) {
    let slots = &ev.slots;
    for (i, slot) in slots.iter().take(TYPED_ARGS).enumerate() {
        let col = FIRST_ARG + i;
        let alias = ALIASES
            .iter()
            .find(|(_, of)| *of == i)
            .map(|(a, _)| slots[*a]);
        if slot.is_none() && alias.flatten().is_none() {
            continue; // (NULL)
        }
        match crate::columns::COLUMNS[col].1 {
            crate::columns::Ty::Str => put_text(cols, col, *slot, scratch),
            ty => {
                let (lo, hi) = if ty == crate::columns::Ty::I32 {
                    (i32::MIN as i64, i32::MAX as i64)
                } else {
                    (i64::MIN, i64::MAX)
                };
                let read =
                    |v: Option<&str>| v.map_or(Err(Bad::Null), |v| values::integer(v, lo, hi));
                let mut value = read(*slot);
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
    if !ev.others.is_empty() {
        scratch.clear();
        scratch.push('{');
        for (n, (k, v)) in ev.others.iter().enumerate() {
            if n > 0 {
                scratch.push(',');
            }
            scratch.push_str(&serde_json::to_string(k.as_ref()).unwrap_or_default());
            scratch.push(':');
            values::compact(v, false, scratch);
        }
        scratch.push('}');
        cols.str(OTHER_ARGS, Some(scratch));
    }
}

/// `ProfilerStep#N` with an N no BIGINT holds is counted (the step tables cannot use it).
fn check_step_name(raw: &str, tally: &mut Tally) {
    if let Some(rest) = raw
        .strip_prefix('"')
        .and_then(|r| r.strip_prefix(STEP_MARK_PREFIX))
        .and_then(|r| r.strip_suffix('"'))
    {
        if !rest.is_empty()
            && rest.bytes().all(|b| b.is_ascii_digit())
            && rest.parse::<i64>().is_err()
        {
            tally.bad_step_numbers += 1;
        }
    }
}

/// The event with NaN / Infinity / -Infinity (not JSON, but written by Python's json)
/// outside strings replaced by null; None if there are none.
fn without_non_finite(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut i, mut last, mut found) = (0, 0, false);
    while i < b.len() {
        match b[i] {
            b'"' => i = crate::scan::string_end(b, i).unwrap_or(b.len()),
            _ => {
                // (bytes: `i` may be inside a multi-byte character outside any string)
                let rest = &b[i..];
                let token = ["-Infinity", "Infinity", "NaN"]
                    .into_iter()
                    .find(|t| rest.starts_with(t.as_bytes()));
                if let Some(t) = token {
                    out.push_str(&text[last..i]);
                    out.push_str("null");
                    i += t.len();
                    last = i;
                    found = true;
                } else {
                    i += 1;
                }
            }
        }
    }
    if !found {
        return None;
    }
    out.push_str(&text[last..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::columns::schema;
    use arrow_array::{Array, Int64Array, StringArray};

    fn one(text: &str) -> (arrow_array::RecordBatch, Tally) {
        let mut cols = Columns::new(1, 64);
        let mut tally = Tally::default();
        let mut s = Scratch::new();
        decode(text, 0, &mut cols, &mut tally, &mut s).ok().unwrap();
        (cols.finish(&schema()).unwrap(), tally)
    }

    fn int(b: &arrow_array::RecordBatch, name: &str) -> Option<i64> {
        let a = b
            .column_by_name(name)
            .unwrap()
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        (!a.is_null(0)).then(|| a.value(0))
    }

    fn text(b: &arrow_array::RecordBatch, name: &str) -> Option<String> {
        let a = b
            .column_by_name(name)
            .unwrap()
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        (!a.is_null(0)).then(|| a.value(0).to_string())
    }

    #[test]
    fn any_key_order_and_exact_times() {
        let (b, t) = one(
            r#"{"args": {"External id": 7, "x": [1, 2]}, "dur": 2.5, "ts": 1712195495519689.047, "ph": "X", "name": "a"}"#,
        );
        assert_eq!(int(&b, "ts_ns"), Some(1_712_195_495_519_689_047));
        assert_eq!(int(&b, "dur_ns"), Some(2500));
        assert_eq!(int(&b, "external_id"), Some(7));
        assert_eq!(text(&b, "other_args").as_deref(), Some(r#"{"x":[1,2]}"#));
        assert_eq!(t.duplicate_keys, 0);
    }

    #[test]
    fn last_duplicate_wins_and_is_counted() {
        let (b, t) = one(r#"{"ph": "X", "ts": 1, "name": "first", "ts": 2, "name": "second"}"#);
        assert_eq!(int(&b, "ts_ns"), Some(2000));
        assert_eq!(text(&b, "name").as_deref(), Some("second"));
        assert_eq!(t.duplicate_keys, 1);
    }

    #[test]
    fn odd_args_are_null_and_counted() {
        let (b, t) = one(
            r#"{"ph": "X", "ts": 1, "args": {"External id": NaN, "Sequence number": 1e400, "correlation": 1180591620717411303424}}"#,
        );
        assert_eq!(int(&b, "external_id"), None);
        assert_eq!(int(&b, "seq_number"), None);
        assert_eq!(int(&b, "correlation"), None);
        assert_eq!(t.non_finite, 1);
        assert_eq!(t.bad_args.iter().sum::<u64>(), 2);
    }

    #[test]
    fn slot_lookups_follow_the_key_lists() {
        for (i, key) in ARG_KEYS.iter().enumerate() {
            assert_eq!(arg_slot(key), Some(i), "{key}");
        }
        assert_eq!(arg_slot("External Id"), None);
        assert_eq!(top_slot("args"), Some(ARGS));
    }

    #[test]
    fn the_last_args_wins_whole() {
        let (b, t) =
            one(r#"{"ph": "X", "args": {"External id": 1, "k": 2}, "args": {"correlation": 5}}"#);
        assert_eq!(int(&b, "external_id"), None);
        assert_eq!(int(&b, "correlation"), Some(5));
        assert_eq!(text(&b, "other_args"), None);
        assert_eq!(t.duplicate_keys, 1);
        let (_, t) = one(r#"{"ph": "X", "args": null, "args": {"k": 2}}"#);
        assert_eq!(t.duplicate_keys, 1);
        let (_, t) = one(r#"{"ph": "X", "args": 1e400}"#);
        assert_eq!(t.args_not_object, 1);
        let (_, t) = one(r#"{"ph": "X", "args": [1, {"a": 2}]}"#);
        assert_eq!(t.args_not_object, 1);
    }

    #[test]
    fn non_finite_numbers_beside_non_ascii_text() {
        // (found by fuzzing: a character outside a string before a NaN)
        let mut cols = Columns::new(1, 64);
        let mut tally = Tally::default();
        let bad = "{\"ph\": \"X\", \"ts\": 1, \"x\": \u{fffd}, \"dur\": NaN}";
        assert!(decode(bad, 0, &mut cols, &mut tally, &mut Scratch::new()).is_err());
        let mut tally = Tally::default();
        let text = "{\"ph\": \"X\", \"é\": NaN, \"ts\": 1}";
        assert!(decode(text, 0, &mut cols, &mut tally, &mut Scratch::new()).is_ok());
        assert_eq!(tally.non_finite, 1);
    }

    #[test]
    fn alias_spellings() {
        let (b, _) = one(r#"{"ph": "i", "ts": 1, "args": {"Bytes": -64, "external id": 3}}"#);
        assert_eq!(int(&b, "bytes"), Some(-64));
        assert_eq!(int(&b, "external_id"), Some(3));
    }

    /// The serde path alone (EventVisitor), as decode ran it before the plain one.
    fn serde_event<'a>(text: &'a str, ev: &mut Event<'a, '_>) -> bool {
        let mut de = serde_json::Deserializer::from_str(text);
        de.deserialize_map(EventVisitor(ev))
            .and_then(|()| de.end())
            .is_ok()
    }

    type Read<'a> = (
        [Option<&'a str>; 8],
        bool,
        [Option<&'a str>; 28],
        Vec<(String, &'a str)>,
        bool,
    );

    fn read_of<'a>(ev: &Event<'a, '_>) -> Read<'a> {
        let others = ev.others.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        (
            ev.top,
            ev.args_kind == ArgsKind::Object,
            ev.slots,
            others,
            ev.dup,
        )
    }

    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn pick<'s>(&mut self, from: &[&'s str]) -> &'s str {
            from[self.next() as usize % from.len()]
        }
        fn ws(&mut self) -> &'static str {
            self.pick(&["", "", " ", "\n  ", "\t", "\r\n"])
        }
        /// A JSON value, mostly valid, sometimes not (the tokens JSON refuses serde refuses).
        fn value(&mut self, depth: u32) -> String {
            match self.next() % 12 {
                0..=2 => self
                    .pick(&[
                        "0",
                        "-0",
                        "12",
                        "-7",
                        "1.5",
                        "1712199098123456.789",
                        "2e3",
                        "-1.25E+2",
                        "3e-1",
                        "01",
                        "1.",
                        "-",
                        ".5",
                        "+1",
                        "1e",
                        "1e+",
                        "0x1",
                        "00",
                        "1.2.3",
                        "-01.0",
                    ])
                    .to_string(),
                3..=5 => self
                    .pick(&[
                        "\"X\"",
                        "\"aten::mm\"",
                        "\"\"",
                        "\"caf\u{e9} \u{1f600}\"",
                        "\"a\\\"b\"",
                        "\"tab\tin\"",
                        "\"nl\\n\"",
                        "\"\\u00e9\"",
                        "\"bad\\x\"",
                        "\"cut",
                        "\"[1, 2]\"",
                        "\"{\\\"k\\\": 1}\"",
                    ])
                    .to_string(),
                6 => self
                    .pick(&[
                        "true", "false", "null", "tru", "nul", "None", "NaN", "Infinity",
                    ])
                    .to_string(),
                7 | 8 if depth < 40 => {
                    let n = self.next() % 4;
                    let items: Vec<String> = (0..n).map(|_| self.value(depth + 1)).collect();
                    let sep = format!("{},{}", self.ws(), self.ws());
                    let tail = self.pick(&["", "", "", ","]);
                    format!("[{}{}{}{}]", self.ws(), items.join(&sep), tail, self.ws())
                }
                9 | 10 if depth < 40 => self.object(depth + 1, &["a", "b", "name", "ph"]),
                11 => "[".repeat(40) + &"]".repeat(40),
                _ => "1".to_string(),
            }
        }
        fn object(&mut self, depth: u32, keys: &[&str]) -> String {
            let n = self.next() % 5;
            let mut parts = Vec::new();
            for _ in 0..n {
                let key = match self.next() % 10 {
                    0 => "\"we\\u0069rd\"".to_string(),
                    1 => "\"a\tb\"".to_string(),
                    2 => "k".to_string(),
                    _ => format!("\"{}\"", self.pick(keys)),
                };
                let (w1, w2) = (self.ws(), self.ws());
                parts.push(format!("{key}{w1}:{w2}{}", self.value(depth)));
            }
            let sep = format!("{},{}", self.ws(), self.ws());
            let tail = self.pick(&["", "", "", "", ","]);
            format!("{{{}{}{}{}}}", self.ws(), parts.join(&sep), tail, self.ws())
        }
        fn event(&mut self) -> String {
            let mut keys: Vec<&str> = vec![
                "ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args", "other",
            ];
            keys.extend_from_slice(&ARG_KEYS[..]);
            let n = self.next() % 9;
            let mut parts = Vec::new();
            for _ in 0..n {
                let key = self.pick(&[
                    "ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args", "args", "x",
                ]);
                let value = if key == "args" {
                    match self.next() % 6 {
                        0 => self
                            .pick(&["null", "[1]", "3", "\"s\"", "true", "1e999"])
                            .to_string(),
                        _ => self.object(2, &keys),
                    }
                } else {
                    self.value(1)
                };
                parts.push(format!("\"{key}\"{}:{}{value}", self.ws(), self.ws()));
            }
            let sep = format!("{},{}", self.ws(), self.ws());
            let mut text = format!("{{{}{}{}}}", self.ws(), parts.join(&sep), self.ws());
            if self.next().is_multiple_of(5) && !text.is_empty() {
                // one byte changed, inserted or removed (ASCII: the text stays UTF-8)
                let at = self.next() as usize % text.len();
                if text.is_char_boundary(at) && text.is_char_boundary(at + 1) {
                    let c = self.pick(&[
                        "{", "}", "[", "]", "\"", ",", ":", "\\", " ", "0", "e", "-", "\u{1}",
                    ]);
                    match self.next() % 3 {
                        0 => text.replace_range(at..at + 1, c),
                        1 => text.insert_str(at, c),
                        _ => text.replace_range(at..at + 1, ""),
                    }
                }
            }
            text
        }
    }

    /// Generated events, valid and not: whatever the plain path reads, serde's reads too, into
    /// the same slots, args, other args and duplicates; what serde refuses, the plain path
    /// declines. Both kinds are many (the comparison is not empty).
    #[test]
    fn the_plain_path_reads_what_serde_reads() {
        let mut g = Gen(0x2545_f491_4f6c_dd1d);
        let (mut plain_read, mut refused, mut declined) = (0, 0, 0);
        for _ in 0..60_000 {
            let text = g.event();
            if !text.starts_with('{') {
                continue;
            }
            let (mut o1, mut o2) = (Vec::new(), Vec::new());
            let mut a = Event::new(&mut o1);
            let mut b = Event::new(&mut o2);
            let plain = plain_event(&text, &mut a).is_some();
            let serde = serde_event(&text, &mut b);
            if plain {
                assert!(serde, "the plain path read what serde refuses: {text:?}");
                assert!(read_of(&a) == read_of(&b), "read differently: {text:?}");
                plain_read += 1;
            } else if serde {
                declined += 1;
            } else {
                refused += 1;
            }
        }
        assert!(
            plain_read > 6_000 && refused > 6_000 && declined > 2_000,
            "{plain_read} {refused} {declined}"
        );
    }

    /// Whole rows: an event with escapes and one without give the rows serde's path gave.
    #[test]
    fn plain_and_escaped_events_give_the_same_row() {
        let (plain, _) = one(
            r#"{"ph": "X", "name": "aten::mm", "ts": 1.5, "dur": 2, "args": {"External id": 7, "Input Dims": [[2, 3], []], "zz": {"k": [1]}}}"#,
        );
        let (escaped, _) = one(
            r#"{"ph": "X", "name": "aten::\u006dm", "ts": 1.5, "dur": 2, "args": {"External id": 7, "Input Dims": [[2, 3], []], "zz": {"k": [1]}}}"#,
        );
        assert_eq!(plain, escaped);
        assert_eq!(
            text(&plain, "other_args").as_deref(),
            Some(r#"{"zz":{"k":[1]}}"#)
        );
        assert_eq!(int(&plain, "ts_ns"), Some(1500));
    }
}
