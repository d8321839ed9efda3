//! The readings of names and args the per-rank tables share: the Rust twins of the SQL macros
//! of db/tables/00_macros.sql that rules and users keep using (`collective_op`, `dtype_bytes`,
//! `is_data_range`), checked against them by tests/test_derived_tables.py, and the strict
//! readings of the profiler's JSON args ("Input Dims", "Input type", "Concrete Inputs").
//!
//! JSON args are read strictly: a shape is a JSON array of JSON integers, a count a JSON
//! integer; anything else (a float, a quoted number, `true`) is unknown (NULL), never rounded
//! or guessed. Products that overflow 64 bits are unknown too.

use std::sync::OnceLock;

use regex::Regex;
use serde_json::Value;

/// DuckDB's `lower` (one code point to one code point: 'İ' -> 'i').
pub fn lower(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c == '\u{130}' {
                'i'
            } else {
                c.to_lowercase().next().unwrap_or(c)
            }
        })
        .collect()
}

/// collective_op: a collective's name as c10d, gloo or NCCL spell it -> one name
/// ('AllReduce', 'allreduce_' -> 'all_reduce'); NULL for NULL and for a name without letters
/// or digits.
pub fn collective_op(raw: Option<&str>) -> Option<String> {
    let low = lower(raw.unwrap_or(""));
    let letters: String = low.chars().filter(|c| c.is_ascii_lowercase()).collect();
    let known = match letters.as_str() {
        "allreduce" | "allreducecoalesced" => Some("all_reduce"),
        "allgather" | "allgatherintotensor" | "allgatherbase" | "allgatherintotensorcoalesced" => {
            Some("all_gather")
        }
        "reducescatter"
        | "reducescattertensor"
        | "reducescatterbase"
        | "reducescattertensorcoalesced" => Some("reduce_scatter"),
        "broadcast" => Some("broadcast"),
        "reduce" => Some("reduce"),
        "alltoall" | "alltoallv" | "alltoallbase" => Some("all_to_all"),
        "sendrecv" => Some("send_recv"),
        "send" => Some("send"),
        "recv" => Some("recv"),
        "barrier" => Some("barrier"),
        "gather" => Some("gather"),
        "scatter" => Some("scatter"),
        "" => return None,
        _ => None,
    };
    if let Some(op) = known {
        return Some(op.to_owned());
    }
    raw?;
    // regexp_replace(lower(raw), '[^a-z0-9]+', '_', 'g')
    let mut out = String::with_capacity(low.len());
    let mut in_run = false;
    for c in low.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('_');
            in_run = true;
        }
    }
    (!out.is_empty()).then_some(out)
}

/// dtype_bytes: bytes per element of a torch dtype name as the profiler writes it.
pub fn dtype_bytes(dtype: Option<&str>) -> Option<i64> {
    // (the prefix is stripped as written, then the rest lowered: 'C10::Float' is unknown)
    let d = dtype.unwrap_or("");
    let d = ["c10::", "at::"]
        .iter()
        .find_map(|p| d.strip_prefix(p))
        .unwrap_or(d);
    match lower(d).as_str() {
        "double" | "long int" | "long" | "int64" => Some(8),
        "float" | "int" | "int32" | "float32" => Some(4),
        "half" | "bfloat16" | "short int" | "float16" => Some(2),
        "signed char" | "unsigned char" | "bool" | "float8_e4m3fn" | "float8_e5m2" => Some(1),
        _ => None,
    }
}

fn data_words() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            "(^|[^a-z0-9])(data|dataloader|data_loading|load_data|get_batch|next_batch|load_batch|fetch_batch)([^a-z0-9]|$)",
        )
        .expect("a pattern")
    })
}

/// is_data_range: a range during which the training loop waits for its input.
pub fn is_data_range(name: &str, is_annotation: bool) -> bool {
    name.starts_with("enumerate(DataLoader)#")
        || name.starts_with("enumerate(DataPipe)#")
        || (is_annotation && data_words().is_match(&lower(name)))
}

/// A JSON text parsed, None when it is not JSON.
pub fn json(text: Option<&str>) -> Option<Value> {
    serde_json::from_str(text?).ok()
}

/// A JSON integer that an i64 holds.
pub fn json_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

/// A JSON array of JSON integers (a shape, a list of split sizes).
pub fn int_list(v: &Value) -> Option<Vec<i64>> {
    v.as_array()?.iter().map(json_int).collect()
}

/// The i-th (0-based) element of a JSON array text ("Input Dims", "Input type").
pub fn element(parsed: &Option<Value>, i: usize) -> Option<&Value> {
    parsed.as_ref()?.as_array()?.get(i)
}

/// json_extract_string: a JSON string's value, any other JSON value's text; NULL for null.
pub fn as_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// The product of a shape's dims (None for an empty shape or an overflow).
pub fn product(dims: &[i64]) -> Option<i64> {
    if dims.is_empty() {
        return None;
    }
    dims.iter().try_fold(1i64, |acc, d| acc.checked_mul(*d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collective_names() {
        let op = |s: Option<&str>| collective_op(s);
        assert_eq!(op(Some("AllReduce")).as_deref(), Some("all_reduce"));
        assert_eq!(op(Some("allreduce_")).as_deref(), Some("all_reduce"));
        assert_eq!(
            op(Some("ncclDevKernel_AllGather_RING")).as_deref(),
            Some("nccldevkernel_allgather_ring")
        );
        assert_eq!(op(Some("all-to-all")).as_deref(), Some("all_to_all"));
        assert_eq!(op(Some("Foo Bar9")).as_deref(), Some("foo_bar9"));
        assert_eq!(op(Some("İx")).as_deref(), Some("ix"));
        assert_eq!(op(Some("___")), None);
        assert_eq!(op(Some("")), None);
        assert_eq!(op(None), None);
        assert_eq!(op(Some("9")), None); // (no letters: the name is unknown)
    }

    #[test]
    fn dtypes_and_shapes() {
        assert_eq!(dtype_bytes(Some("c10::BFloat16")), Some(2));
        assert_eq!(dtype_bytes(Some("torch.float")), None);
        let v = json(Some("[[2, 3], [4], [2.5], []]"));
        assert_eq!(element(&v, 0).and_then(int_list), Some(vec![2, 3]));
        assert_eq!(element(&v, 2).and_then(int_list), None);
        assert_eq!(
            element(&v, 3).and_then(int_list).and_then(|d| product(&d)),
            None
        );
        assert_eq!(product(&[i64::MAX, 2]), None);
    }
}
