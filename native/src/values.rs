//! JSON value text -> typed values, exactly: times from the decimal digits (no float),
//! integers with the rules of a SQL cast from text, nested values as compact JSON text.

/// Why a present value became NULL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bad {
    /// a JSON null or an absent key: nothing lost
    Null,
    /// a value of another type, or out of range: counted
    Invalid,
}

/// A decimal number's parts: sign, digits (no leading zeros kept), power of ten.
fn decimal_parts(text: &[u8]) -> Option<(bool, &[u8], &[u8], i64)> {
    let (neg, rest) = match text.first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let int_len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let (int, mut rest) = rest.split_at(int_len);
    let mut frac: &[u8] = &[];
    if let Some(r) = rest.strip_prefix(b".") {
        let k = r.iter().take_while(|b| b.is_ascii_digit()).count();
        frac = &r[..k];
        rest = &r[k..];
    }
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let mut exp: i64 = 0;
    if let Some(r) = rest.strip_prefix(b"e").or_else(|| rest.strip_prefix(b"E")) {
        let (eneg, r) = match r.first() {
            Some(b'-') => (true, &r[1..]),
            Some(b'+') => (false, &r[1..]),
            _ => (false, r),
        };
        if r.is_empty() || r.len() > 6 || !r.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let e: i64 = std::str::from_utf8(r).ok()?.parse().ok()?;
        exp = if eneg { -e } else { e };
        rest = &[];
    }
    if !rest.is_empty() {
        return None;
    }
    Some((neg, int, frac, exp))
}

/// `text` x 10^`scale`, rounded half away from zero, if it fits in i128 comfortably.
pub fn scaled_decimal(text: &[u8], scale: i64) -> Option<i128> {
    let (neg, int, frac, exp) = decimal_parts(text)?;
    let shift = exp + scale - frac.len() as i64; // value = digits x 10^shift
    let digit = |k: usize| {
        if k < int.len() {
            int[k]
        } else {
            frac[k - int.len()]
        }
    };
    let all = int.len() + frac.len();
    let lead = (0..all).take_while(|&k| digit(k) == b'0').count();
    let significant = all - lead;
    let keep = if shift >= 0 {
        significant
    } else {
        significant.saturating_sub((-shift) as usize)
    };
    if keep > 36 {
        return None;
    }
    let mut value: i128 = 0;
    for k in lead..lead + keep {
        value = value * 10 + (digit(k) - b'0') as i128;
    }
    if shift > 0 {
        for _ in 0..shift {
            value = value.checked_mul(10)?;
            if value.unsigned_abs() > (1u128 << 100) {
                return None;
            }
        }
    } else if shift < 0 && (-shift) as usize <= significant && digit(lead + keep) >= b'5' {
        value += 1; // (half away from zero: the first dropped digit decides)
    }
    Some(if neg { -value } else { value })
}

/// Microseconds (a JSON number) -> ns, exact from the digits.
pub fn time_ns(raw: &str) -> Result<i128, Bad> {
    let b = raw.as_bytes();
    if let Some(ns) = plain_time_ns(b) {
        return Ok(ns);
    }
    match b.first() {
        Some(b'-' | b'0'..=b'9') => scaled_decimal(b, 3).ok_or(Bad::Invalid),
        Some(b'n') if raw == "null" => Err(Bad::Null),
        _ => Err(Bad::Invalid),
    }
}

/// The common case of `time_ns`, fast: `[-]digits[.digits]`, at most 16 integer digits.
fn plain_time_ns(b: &[u8]) -> Option<i128> {
    let (neg, b) = match b.first()? {
        b'-' => (true, &b[1..]),
        _ => (false, b),
    };
    let int_len = b.iter().take_while(|c| c.is_ascii_digit()).count();
    if int_len == 0 || int_len > 16 {
        return None;
    }
    let mut us: u64 = 0;
    for &c in &b[..int_len] {
        us = us * 10 + (c - b'0') as u64;
    }
    let mut ns = us * 1000;
    match &b[int_len..] {
        [] => {}
        [b'.', frac @ ..] if !frac.is_empty() && frac.iter().all(u8::is_ascii_digit) => {
            let mut scale = 100;
            for &c in frac.iter().take(3) {
                ns += (c - b'0') as u64 * scale;
                scale /= 10;
            }
            if frac.len() > 3 && frac[3] >= b'5' {
                ns += 1; // (half away from zero: the first dropped digit decides)
            }
        }
        _ => return None,
    }
    let ns = ns as i128;
    Some(if neg { -ns } else { ns })
}

/// An integer from a JSON value, as `TRY_CAST(<its text> AS BIGINT)` reads it: numbers and
/// numeric strings (decimals rounded half away from zero, `0x` hex), within [lo, hi].
pub fn integer(raw: &str, lo: i64, hi: i64) -> Result<i64, Bad> {
    let b = raw.as_bytes();
    let text: std::borrow::Cow<str> = match b.first() {
        Some(b'"') => match unescape(raw) {
            Some(s) => std::borrow::Cow::Owned(s),
            None => return Err(Bad::Invalid),
        },
        Some(b'n') if raw == "null" => return Err(Bad::Null),
        Some(b'-' | b'0'..=b'9') => std::borrow::Cow::Borrowed(raw),
        _ => return Err(Bad::Invalid),
    };
    let t = text.trim();
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        i128::from_str_radix(h, 16).ok()
    } else {
        scaled_decimal(t.as_bytes(), 0)
    };
    match v {
        Some(v) if v >= lo as i128 && v <= hi as i128 => Ok(v as i64),
        _ => Err(Bad::Invalid),
    }
}

/// The text of a JSON string literal (with its quotes), unescaped.
pub fn unescape(raw: &str) -> Option<String> {
    let inner = &raw[1..raw.len() - 1];
    if !inner.contains('\\') {
        return Some(inner.to_string());
    }
    serde_json::from_str::<String>(raw).ok()
}

/// A JSON value as text, the way DuckDB's JSON reader gives it for a VARCHAR column: strings
/// unescaped, numbers and literals as text, objects and arrays as compact JSON; null -> None.
pub fn text(raw: &str, out: &mut String) -> Option<()> {
    match raw.as_bytes().first()? {
        b'"' => {
            let inner = &raw[1..raw.len() - 1];
            if inner.contains('\\') {
                out.push_str(&serde_json::from_str::<String>(raw).ok()?);
            } else {
                out.push_str(inner);
            }
        }
        b'n' if raw == "null" => return None,
        b'{' | b'[' => compact(raw, true, out),
        _ => number_text(raw, out),
    }
    Some(())
}

/// A number as DuckDB prints it: integers as written, other numbers as a double (`1e3` ->
/// `1000.0`); literals (true, false) as written.
fn number_text(raw: &str, out: &mut String) {
    let is_float = raw.bytes().any(|b| matches!(b, b'.' | b'e' | b'E'));
    if !is_float {
        out.push_str(raw);
        return;
    }
    match raw.parse::<f64>() {
        Ok(f) if f.is_finite() => {
            use std::fmt::Write;
            let _ = write!(out, "{f:?}");
        }
        _ => out.push_str(raw),
    }
}

/// Compact JSON text of an object or array: whitespace outside strings removed, strings with
/// escapes written in the canonical form, numbers as `number_text` (`doubles`) or as written.
pub fn compact(raw: &str, doubles: bool, out: &mut String) {
    let b = raw.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'"' => {
                let end = crate::scan::string_end(b, i).unwrap_or(b.len());
                let lit = &raw[i..end];
                if lit[1..].contains('\\') {
                    match serde_json::from_str::<String>(lit) {
                        Ok(s) => out.push_str(&serde_json::to_string(&s).unwrap_or_default()),
                        Err(_) => out.push_str(lit),
                    }
                } else {
                    out.push_str(lit);
                }
                i = end;
            }
            b' ' | b'\t' | b'\n' | b'\r' => i += 1,
            b'-' | b'0'..=b'9' => {
                let k = b[i..]
                    .iter()
                    .position(|&x| !matches!(x, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                    .map_or(b.len(), |k| i + k);
                if doubles {
                    number_text(&raw[i..k], out);
                } else {
                    out.push_str(&raw[i..k]);
                }
                i = k;
            }
            _ => {
                let k = b[i..]
                    .iter()
                    .position(|&x| {
                        matches!(x, b'"' | b' ' | b'\t' | b'\n' | b'\r' | b'-' | b'0'..=b'9')
                    })
                    .map_or(b.len(), |k| i + k)
                    .max(i + 1);
                out.push_str(&raw[i..k]);
                i = k;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_exact() {
        assert_eq!(
            time_ns("1712195495519689.047"),
            Ok(1_712_195_495_519_689_047)
        );
        assert_eq!(time_ns("-1.5"), Ok(-1500));
        assert_eq!(time_ns("0.0005"), Ok(1));
        assert_eq!(time_ns("-0.0005"), Ok(-1));
        assert_eq!(time_ns("0.0004"), Ok(0));
        assert_eq!(time_ns("0.00005"), Ok(0));
        assert_eq!(time_ns("1.5e3"), Ok(1_500_000));
        assert_eq!(time_ns("12"), Ok(12_000));
        assert_eq!(time_ns("-0.0015"), Ok(-2));
        assert_eq!(
            time_ns("9999999999999999.9999"),
            Ok(10_000_000_000_000_000_000)
        );
        assert_eq!(time_ns("12."), Ok(12_000));
        assert_eq!(time_ns("-"), Err(Bad::Invalid));
        assert_eq!(time_ns("\"12\""), Err(Bad::Invalid));
        assert_eq!(time_ns("null"), Err(Bad::Null));
        assert_eq!(time_ns("1e400"), Err(Bad::Invalid));
        assert_eq!(time_ns("NaN"), Err(Bad::Invalid));
    }

    #[test]
    fn the_fast_time_path_agrees_with_the_general_one() {
        let ints = [
            "0",
            "7",
            "12",
            "0012",
            "1712195495519689",
            "9999999999999999",
        ];
        let fracs = [
            "",
            ".",
            ".0",
            ".5",
            ".047",
            ".0004",
            ".0005",
            ".4995",
            ".99951",
            ".123456789",
        ];
        for sign in ["", "-"] {
            for i in ints {
                for f in fracs {
                    let t = format!("{sign}{i}{f}");
                    let general = scaled_decimal(t.as_bytes(), 3);
                    if let Some(fast) = plain_time_ns(t.as_bytes()) {
                        assert_eq!(Some(fast), general, "{t}");
                    }
                    assert_eq!(time_ns(&t).ok(), general, "{t}");
                }
            }
        }
    }

    #[test]
    fn integers_cast_like_sql() {
        assert_eq!(integer("77", i64::MIN, i64::MAX), Ok(77));
        assert_eq!(integer("\" 77 \"", i64::MIN, i64::MAX), Ok(77));
        assert_eq!(integer("1.5", i64::MIN, i64::MAX), Ok(2));
        assert_eq!(integer("\"0x10\"", i64::MIN, i64::MAX), Ok(16));
        assert_eq!(
            integer("9223372036854775808", i64::MIN, i64::MAX),
            Err(Bad::Invalid)
        );
        assert_eq!(
            integer("1180591620717411303424", i64::MIN, i64::MAX),
            Err(Bad::Invalid)
        );
        assert_eq!(integer("1e400", i64::MIN, i64::MAX), Err(Bad::Invalid));
        assert_eq!(
            integer("3000000000", i32::MIN as i64, i32::MAX as i64),
            Err(Bad::Invalid)
        );
        assert_eq!(integer("true", i64::MIN, i64::MAX), Err(Bad::Invalid));
        assert_eq!(integer("null", i64::MIN, i64::MAX), Err(Bad::Null));
    }

    #[test]
    fn nested_values_become_compact_text() {
        let mut s = String::new();
        compact(
            r#"[[2, 3], [], ["a/\u00e9\n"], 1.0e5, {"k" : true}]"#,
            true,
            &mut s,
        );
        assert_eq!(s, r#"[[2,3],[],["a/é\n"],100000.0,{"k":true}]"#);
    }
}
