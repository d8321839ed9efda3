//! Debug annotations -> the args the JSON reading would give: typed columns (the keys of
//! `events::ARG_KEYS`, cast as `TRY_CAST(text AS type)` casts) and `other_args` (compact
//! JSON of the rest, in annotation order; a key given twice keeps its first place and last
//! value, as the JSON reading does).

use super::IdMap as HashMap;
use std::fmt::Write;
use std::sync::Arc;

use super::messages::{AnnValue, Annotation, NameField};
use crate::values;

/// Nested annotations deeper than this are read as null.
const MAX_NESTING: usize = 32;

/// One typed slot's value before the cast: an integer, or text (NULL: None).
#[derive(Clone, Debug, PartialEq)]
pub enum ArgVal {
    Int(i64),
    Text(String),
}

/// An event's args: typed slots (index into ARG_KEYS, last value wins) and the rest as JSON.
#[derive(Clone, Default, Debug)]
pub struct Args {
    pub slots: Vec<(usize, Option<ArgVal>)>,
    pub other: Option<String>,
}

impl Args {
    pub fn slot(&self, i: usize) -> Option<&Option<ArgVal>> {
        self.slots
            .iter()
            .rev()
            .find(|(k, _)| *k == i)
            .map(|(_, v)| v)
    }
}

/// Protobuf strings are not checked for UTF-8: read lossily (counted by the caller).
pub fn lossy<'a>(b: &'a [u8], invalid: &mut u64) -> std::borrow::Cow<'a, str> {
    let s = String::from_utf8_lossy(b);
    if matches!(s, std::borrow::Cow::Owned(_)) {
        *invalid += 1;
    }
    s
}

/// The interned strings an annotation may refer to.
pub struct Strings<'s> {
    pub names: &'s HashMap<u64, Arc<str>>,
    pub values: &'s HashMap<u64, Arc<str>>,
}

/// The args of an event's annotations.
pub fn args(anns: &[Annotation<'_>], s: &Strings<'_>, invalid: &mut u64) -> Args {
    let mut out = Args::default();
    // other_args written as they come (a key given twice, rare: written again, last value kept)
    let mut keys: Vec<std::borrow::Cow<str>> = Vec::new();
    let mut text = String::new();
    let mut twice = false;
    for a in anns {
        let Some(key) = key_of(a, s, invalid) else {
            continue;
        };
        match crate::events::arg_slot(&key) {
            Some(i) => out.slots.push((i, typed(a, s, invalid))),
            None => {
                twice |= keys.contains(&key);
                text.push(if keys.is_empty() { '{' } else { ',' });
                push_json_string(&key, &mut text);
                text.push(':');
                json(a, s, false, 0, &mut text, invalid);
                keys.push(key);
            }
        }
    }
    if twice {
        let mut others: Vec<(std::borrow::Cow<str>, String)> = Vec::new();
        for a in anns {
            let Some(key) = key_of(a, s, &mut 0) else {
                continue;
            };
            if crate::events::arg_slot(&key).is_some() {
                continue;
            }
            let mut v = String::new();
            json(a, s, false, 0, &mut v, &mut 0);
            match others.iter_mut().find(|(k, _)| *k == key) {
                Some(o) => o.1 = v,
                None => others.push((key, v)),
            }
        }
        text.clear();
        for (n, (k, v)) in others.iter().enumerate() {
            text.push(if n == 0 { '{' } else { ',' });
            push_json_string(k, &mut text);
            text.push(':');
            text.push_str(v);
        }
    }
    if !keys.is_empty() {
        text.push('}');
        out.other = Some(text);
    }
    out
}

/// An annotation's name (None: an interned name never sent; the annotation is skipped).
fn key_of<'a>(
    a: &Annotation<'a>,
    s: &'a Strings<'_>,
    invalid: &mut u64,
) -> Option<std::borrow::Cow<'a, str>> {
    Some(match a.name {
        NameField::Iid(iid) if iid != 0 => s.names.get(&iid)?.as_ref().into(),
        NameField::Text(t) => lossy(t, invalid),
        _ => "".into(),
    })
}

/// `s` as a JSON string literal (serde_json's escaping; the common case, nothing to escape,
/// copied straight).
pub fn push_json_string(s: &str, out: &mut String) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(s).unwrap_or_default());
    }
}

/// A double as the JSON reading prints a number it reads as a double.
pub fn push_double(f: f64, out: &mut String) -> bool {
    if !f.is_finite() {
        return false;
    }
    let _ = write!(out, "{f:?}");
    true
}

/// A legacy JSON value's text if it is JSON.
fn valid_json(raw: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(raw).is_ok()
}

/// An annotation as the text of a typed column (None: NULL), as the JSON reading gives a
/// value to a VARCHAR column: strings as they are, numbers as text, arrays and dicts as
/// compact JSON.
fn typed(a: &Annotation<'_>, s: &Strings<'_>, invalid: &mut u64) -> Option<ArgVal> {
    let mut out = String::new();
    match a.value {
        AnnValue::Int(v) => return Some(ArgVal::Int(v)),
        AnnValue::None if a.dict.is_empty() && a.array.is_empty() => return None,
        AnnValue::None => json(a, s, true, 0, &mut out, invalid),
        AnnValue::Bool(b) => out.push_str(if b { "true" } else { "false" }),
        AnnValue::UInt(v) => {
            let _ = write!(out, "{v}");
        }
        AnnValue::Double(f) => {
            if !push_double(f, &mut out) {
                return None;
            }
        }
        AnnValue::Pointer(p) => {
            let _ = write!(out, "0x{p:x}");
        }
        AnnValue::Nested => return None,
        AnnValue::Text(t) => out.push_str(&lossy(t, invalid)),
        AnnValue::TextIid(iid) => out.push_str(s.values.get(&iid)?),
        AnnValue::LegacyJson(t) => {
            let raw = lossy(t, invalid);
            if !valid_json(&raw) {
                out.push_str(&raw);
            } else {
                values::text(raw.trim(), &mut out)?;
            }
        }
    }
    Some(ArgVal::Text(out))
}

/// An annotation as compact JSON text (`doubles`: numbers of legacy JSON as doubles print).
fn json(
    a: &Annotation<'_>,
    s: &Strings<'_>,
    doubles: bool,
    depth: usize,
    out: &mut String,
    invalid: &mut u64,
) {
    if depth > MAX_NESTING {
        out.push_str("null");
        return;
    }
    match a.value {
        AnnValue::None if !a.dict.is_empty() => {
            out.push('{');
            for (n, e) in a.dict.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                let key: std::borrow::Cow<str> = match e.name {
                    NameField::Text(t) => lossy(t, invalid),
                    NameField::Iid(iid) => {
                        s.names.get(&iid).map_or("".into(), |k| k.as_ref().into())
                    }
                    NameField::None => "".into(),
                };
                push_json_string(&key, out);
                out.push(':');
                json(e, s, doubles, depth + 1, out, invalid);
            }
            out.push('}');
        }
        AnnValue::None if !a.array.is_empty() => {
            out.push('[');
            for (n, e) in a.array.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                json(e, s, doubles, depth + 1, out, invalid);
            }
            out.push(']');
        }
        AnnValue::None | AnnValue::Nested => out.push_str("null"),
        AnnValue::Bool(b) => out.push_str(if b { "true" } else { "false" }),
        AnnValue::UInt(v) => {
            let _ = write!(out, "{v}");
        }
        AnnValue::Int(v) => {
            let _ = write!(out, "{v}");
        }
        AnnValue::Double(f) => {
            if !push_double(f, out) {
                out.push_str("null");
            }
        }
        AnnValue::Pointer(p) => push_json_string(&format!("0x{p:x}"), out),
        AnnValue::Text(t) => push_json_string(&lossy(t, invalid), out),
        AnnValue::TextIid(iid) => match s.values.get(&iid) {
            Some(v) => push_json_string(v, out),
            None => out.push_str("null"),
        },
        AnnValue::LegacyJson(t) => {
            let raw = lossy(t, invalid);
            if valid_json(&raw) {
                values::compact(raw.trim(), doubles, out);
            } else {
                push_json_string(&raw, out);
            }
        }
    }
}

/// `TRY_CAST(text AS <integer type>)`: numeric text (decimals rounded half away from zero,
/// `0x` hex, surrounding spaces), within [lo, hi]; None otherwise.
pub fn cast_integer(text: &str, lo: i64, hi: i64) -> Option<i64> {
    let t = text.trim();
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        i128::from_str_radix(h, 16).ok()
    } else {
        values::scaled_decimal(t.as_bytes(), 0)
    }?;
    (v >= lo as i128 && v <= hi as i128).then_some(v as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann<'a>(name: &'a str, value: AnnValue<'a>) -> Annotation<'a> {
        Annotation {
            name: NameField::Text(name.as_bytes()),
            value,
            ..Annotation::default()
        }
    }

    #[test]
    fn typed_keys_and_the_rest_as_json() {
        let names: HashMap<u64, Arc<str>> = [(1, Arc::from("External id"))].into_iter().collect();
        let values = HashMap::default();
        let s = Strings {
            names: &names,
            values: &values,
        };
        let mut dims = ann("Input Dims", AnnValue::None);
        dims.array = vec![
            Annotation {
                array: vec![ann("", AnnValue::Int(2)), ann("", AnnValue::Int(3))],
                ..Annotation::default()
            },
            ann("", AnnValue::LegacyJson(b"[]")),
        ];
        let anns = vec![
            Annotation {
                name: NameField::Iid(1),
                value: AnnValue::Int(7),
                ..Annotation::default()
            },
            dims,
            ann("flag", AnnValue::Bool(true)),
            ann("ratio", AnnValue::Double(0.5)),
            ann("big", AnnValue::LegacyJson(b"123456789012345678901234567")),
            ann("flag", AnnValue::Text(b"late \"quoted\"")),
            ann("Sequence number", AnnValue::Text(b"12")),
        ];
        let mut invalid = 0;
        let got = args(&anns, &s, &mut invalid);
        assert_eq!(got.slot(0), Some(&Some(ArgVal::Int(7))));
        assert_eq!(got.slot(5), Some(&Some(ArgVal::Text("[[2,3],[]]".into()))));
        assert_eq!(got.slot(7), Some(&Some(ArgVal::Text("12".into()))));
        assert_eq!(
            got.other.as_deref(),
            Some(r#"{"flag":"late \"quoted\"","ratio":0.5,"big":123456789012345678901234567}"#)
        );
        assert_eq!(invalid, 0);
    }

    #[test]
    fn casts_like_sql() {
        assert_eq!(cast_integer(" 12 ", i64::MIN, i64::MAX), Some(12));
        assert_eq!(cast_integer("2.5", i64::MIN, i64::MAX), Some(3));
        assert_eq!(cast_integer("0x10", i64::MIN, i64::MAX), Some(16));
        assert_eq!(cast_integer("true", i64::MIN, i64::MAX), None);
        assert_eq!(cast_integer("3000000000", -(1 << 31), (1 << 31) - 1), None);
        assert_eq!(cast_integer("1e400", i64::MIN, i64::MAX), None);
    }
}
