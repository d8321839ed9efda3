//! Stage 3: one event's JSON text -> one row of typed columns.
//!
//! `serde_json` decodes the event object into borrowed raw values (any key order; of a key
//! given twice, the last value wins, as in Python's json and JavaScript, and it is counted);
//! `values.rs` types them exactly. Odd values become NULL and are counted in `Tally`.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::columns::{Columns, DUR_NS, FIRST_ARG, FLOW_ID, OTHER_ARGS, PH, TS_NS};
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
const TYPED_ARGS: usize = 26;
const ALIASES: [(usize, usize); 2] = [(26, 0), (27, 4)]; // (alias slot, its column's slot)

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

/// How an event failed to decode.
pub enum EventError {
    Syntax(serde_json::Error),
}

const TOP: [&str; 9] = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args"];

/// Decode one element of the events array into a row of `cols`.
pub fn decode(
    text: &str,
    base_ns: i64,
    cols: &mut Columns,
    tally: &mut Tally,
    scratch: &mut String,
) -> Result<(), EventError> {
    if !text.starts_with('{') {
        tally.non_objects += 1;
        cols.null_row();
        return Ok(());
    }
    let mut top: [Option<&RawValue>; 9] = [None; 9];
    let mut dup = false;
    let parsed = entries(text, |k, v| {
        if let Some(i) = TOP.iter().position(|t| *t == k.0) {
            dup |= top[i].replace(v).is_some();
        }
    });
    if let Err(e) = parsed {
        if e.to_string().contains("recursion limit") {
            tally.too_deep += 1;
            cols.null_row();
            return Ok(());
        }
        if let Some(fixed) = without_non_finite(text) {
            tally.non_finite += 1;
            return decode(&fixed, base_ns, cols, tally, scratch);
        }
        return Err(EventError::Syntax(e));
    }
    for (slot, col) in [(0, PH), (1, 1), (2, 2), (3, 3), (4, 4), (7, FLOW_ID)] {
        put_text(cols, col, top[slot], scratch);
    }
    let ts = top[5]
        .and_then(|v| values::time_ns(v.get()).ok())
        .map(|t| t + base_ns as i128);
    cols.int(
        TS_NS,
        ts.filter(|t| t.abs() <= TIME_LIMIT_NS).map(|t| t as i64),
    );
    let dur = top[6].and_then(|v| values::time_ns(v.get()).ok());
    cols.int(
        DUR_NS,
        dur.filter(|t| t.abs() <= TIME_LIMIT_NS).map(|t| t as i64),
    );
    if let Some(name) = top[2] {
        check_step_name(name.get(), tally);
    }
    dup |= decode_args(top[8], cols, tally, scratch);
    if dup {
        tally.duplicate_keys += 1;
    }
    cols.rows += 1;
    Ok(())
}

fn put_text(cols: &mut Columns, col: usize, raw: Option<&RawValue>, scratch: &mut String) {
    scratch.clear();
    match raw.and_then(|v| values::text(v.get(), scratch)) {
        Some(()) => cols.str(col, Some(scratch)),
        None => cols.str(col, None),
    }
}

/// The args columns; returns whether a key was given twice.
fn decode_args(
    args: Option<&RawValue>,
    cols: &mut Columns,
    tally: &mut Tally,
    scratch: &mut String,
) -> bool {
    let mut slots: [Option<&RawValue>; 28] = [None; 28];
    let mut others: Vec<(Key, &RawValue)> = Vec::new();
    let mut dup = false;
    match args.map(|a| a.get()) {
        Some(text) if text.starts_with('{') => {
            let _ = entries(text, |k, v| match ARG_KEYS.iter().position(|a| *a == k.0) {
                Some(i) => dup |= slots[i].replace(v).is_some(),
                None => {
                    if let Some(o) = others.iter_mut().find(|(ok, _)| ok.0 == k.0) {
                        o.1 = v;
                        dup = true;
                    } else {
                        others.push((k, v));
                    }
                }
            });
        }
        Some("null") | None => {}
        Some(_) => tally.args_not_object += 1,
    }
    for (i, slot) in slots.iter().take(TYPED_ARGS).enumerate() {
        let col = FIRST_ARG + i;
        let alias = ALIASES
            .iter()
            .find(|(_, of)| *of == i)
            .map(|(a, _)| slots[*a]);
        match crate::columns::COLUMNS[col].1 {
            crate::columns::Ty::Str => put_text(cols, col, *slot, scratch),
            ty => {
                let (lo, hi) = if ty == crate::columns::Ty::I32 {
                    (i32::MIN as i64, i32::MAX as i64)
                } else {
                    (i64::MIN, i64::MAX)
                };
                let read = |v: Option<&RawValue>| {
                    v.map_or(Err(Bad::Null), |v| values::integer(v.get(), lo, hi))
                };
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
    if others.is_empty() {
        cols.str(OTHER_ARGS, None);
    } else {
        scratch.clear();
        scratch.push('{');
        for (n, (k, v)) in others.iter().enumerate() {
            if n > 0 {
                scratch.push(',');
            }
            scratch.push_str(&serde_json::to_string(k.0.as_ref()).unwrap_or_default());
            scratch.push(':');
            values::compact(v.get(), false, scratch);
        }
        scratch.push('}');
        cols.str(OTHER_ARGS, Some(scratch));
    }
    dup
}

/// `ProfilerStep#N` with an N no BIGINT holds is counted (the step tables cannot use it).
fn check_step_name(raw: &str, tally: &mut Tally) {
    if let Some(rest) = raw
        .strip_prefix("\"ProfilerStep#")
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
                let rest = &text[i..];
                let token = ["-Infinity", "Infinity", "NaN"]
                    .into_iter()
                    .find(|t| rest.starts_with(t));
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
        let mut s = String::new();
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
    fn alias_spellings() {
        let (b, _) = one(r#"{"ph": "i", "ts": 1, "args": {"Bytes": -64, "external id": 3}}"#);
        assert_eq!(int(&b, "bytes"), Some(-64));
        assert_eq!(int(&b, "external_id"), Some(3));
    }
}
