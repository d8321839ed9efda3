//! Stage 2: the layout of a trace, found in one linear pass over the bytes.
//!
//! `{ ...header..., "traceEvents": [ {event}, {event}, ... ], ...trailer... }` (any key order)
//! or a bare top-level array of events. The scanner only tracks strings and bracket depth: it
//! hands out the byte span of every event and of every header value, which `events.rs` and
//! `serde_json` then decode (and so check). Every byte is looked at once, whatever the header
//! size; a value cut by the end of the buffer is scanned again from its start once more bytes
//! have arrived (the driver at least doubles what it reads, so this stays linear).

/// A complete top-level item found in the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Item {
    /// An element of the events array: its span.
    Event(usize, usize),
    /// A header/trailer key (unescaped) and its value's span.
    Meta(String, usize, usize),
}

#[derive(Debug, PartialEq, Eq)]
pub enum ScanError {
    /// Malformed syntax at this buffer offset.
    Syntax(usize, String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    /// after `{` or `,` in the top object: a key, or `}` (only right after `{`)
    Key {
        first: bool,
    },
    Colon,
    Value,
    AfterValue,
    /// in the events array: an element or `]` (only right after `[`)
    Element {
        first: bool,
    },
    AfterElement,
    Done,
}

pub struct Scanner {
    state: State,
    key: String,
    bare_array: bool,
    /// where scanning resumes in the buffer
    pub pos: usize,
    /// the events array has been seen (opened)
    pub events_opened: bool,
    /// the events array is closed
    pub events_closed: bool,
    /// end of the last complete event (buffer offset)
    pub last_event_end: Option<usize>,
    /// buffer offset just after the events' `[` and at their `]`
    pub events_start: Option<usize>,
    pub events_end: Option<usize>,
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl Default for Scanner {
    fn default() -> Self {
        Self::new()
    }
}

impl Scanner {
    pub fn new() -> Scanner {
        Scanner {
            state: State::Start,
            key: String::new(),
            bare_array: false,
            pos: 0,
            events_opened: false,
            events_closed: false,
            last_event_end: None,
            events_start: None,
            events_end: None,
        }
    }

    pub fn done(&self) -> bool {
        self.state == State::Done
    }

    pub fn in_events(&self) -> bool {
        matches!(self.state, State::Element { .. } | State::AfterElement)
    }

    /// After the driver dropped `n` bytes from the buffer's front (having taken the
    /// offsets below as absolute ones): they are reset, new ones are set as they are seen.
    pub fn drop_front(&mut self, n: usize) {
        self.pos -= n;
        self.last_event_end = None;
        self.events_start = None;
        self.events_end = None;
    }

    /// Scan `buf` from `self.pos`, appending complete items to `out`; stops at the end of
    /// the buffer (an incomplete token is left for the next call) or when done.
    pub fn scan(&mut self, buf: &[u8], out: &mut Vec<Item>) -> Result<(), ScanError> {
        let n = buf.len();
        let mut i = self.pos;
        loop {
            while i < n && is_ws(buf[i]) {
                i += 1;
            }
            self.pos = i;
            if i >= n || self.state == State::Done {
                return Ok(());
            }
            let b = buf[i];
            match self.state {
                State::Start => {
                    if buf[i..].starts_with(b"\xef\xbb\xbf") {
                        i += 3;
                        continue;
                    }
                    match b {
                        b'{' => self.state = State::Key { first: true },
                        b'[' => {
                            self.bare_array = true;
                            self.open_events(i + 1);
                        }
                        _ => return Err(ScanError::Syntax(i, "not a JSON object or array".into())),
                    }
                    i += 1;
                }
                State::Key { first } => {
                    if b == b'}' && first {
                        self.state = State::Done;
                        self.pos = i + 1;
                        return Ok(());
                    }
                    if b != b'"' {
                        return Err(ScanError::Syntax(i, "expected a key".into()));
                    }
                    let Some(end) = string_end(buf, i) else {
                        return Ok(());
                    };
                    self.key = serde_json::from_slice::<String>(&buf[i..end])
                        .map_err(|e| ScanError::Syntax(i, format!("bad key ({e})")))?;
                    self.state = State::Colon;
                    i = end;
                }
                State::Colon => {
                    if b != b':' {
                        return Err(ScanError::Syntax(i, "expected ':'".into()));
                    }
                    self.state = State::Value;
                    i += 1;
                }
                State::Value => {
                    if self.key == "traceEvents" && b == b'[' && !self.events_opened {
                        self.open_events(i + 1);
                        i += 1;
                        continue;
                    }
                    let Some(end) = value_end(buf, i)? else {
                        return Ok(());
                    };
                    out.push(Item::Meta(std::mem::take(&mut self.key), i, end));
                    self.state = State::AfterValue;
                    i = end;
                }
                State::AfterValue => {
                    match b {
                        b',' => self.state = State::Key { first: false },
                        b'}' => self.state = State::Done,
                        _ => {
                            return Err(ScanError::Syntax(
                                i,
                                "expected ',' or '}' after a value".into(),
                            ))
                        }
                    }
                    i += 1;
                }
                State::Element { first } => {
                    if b == b']' && first {
                        self.close_events(i);
                        i += 1;
                        continue;
                    }
                    let Some(end) = value_end(buf, i)? else {
                        return Ok(());
                    };
                    out.push(Item::Event(i, end));
                    self.last_event_end = Some(end);
                    self.state = State::AfterElement;
                    i = end;
                }
                State::AfterElement => {
                    match b {
                        b',' => self.state = State::Element { first: false },
                        b']' => self.close_events(i),
                        _ => {
                            return Err(ScanError::Syntax(
                                i,
                                "expected ',' or ']' between events".into(),
                            ))
                        }
                    }
                    i += 1;
                }
                State::Done => return Ok(()),
            }
        }
    }

    fn open_events(&mut self, at: usize) {
        self.events_opened = true;
        self.events_start = Some(at);
        self.last_event_end = Some(at);
        self.state = State::Element { first: true };
    }

    fn close_events(&mut self, at: usize) {
        self.events_closed = true;
        self.events_end = Some(at);
        self.state = if self.bare_array {
            State::Done
        } else {
            State::AfterValue
        };
    }
}

/// End (exclusive) of the string starting at `buf[i] == '"'`, or None if not complete.
pub fn string_end(buf: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        let k = memchr::memchr2(b'"', b'\\', &buf[j..])? + j;
        if buf[k] == b'\\' {
            j = k + 2;
            if j > buf.len() {
                return None;
            }
        } else {
            return Some(k + 1);
        }
    }
}

/// The bytes `value_end` stops at inside an object or array.
const STRUCTURAL: [bool; 256] = {
    let mut t = [false; 256];
    t[b'"' as usize] = true;
    t[b'{' as usize] = true;
    t[b'}' as usize] = true;
    t[b'[' as usize] = true;
    t[b']' as usize] = true;
    t
};

/// End (exclusive) of the JSON value starting at `buf[i]`, or None if the buffer ends first.
/// Objects and arrays are matched by depth (string-aware); their inside is checked later by
/// the decoder. A scalar runs to the next delimiter.
pub fn value_end(buf: &[u8], i: usize) -> Result<Option<usize>, ScanError> {
    match buf[i] {
        b'"' => Ok(string_end(buf, i)),
        b'{' | b'[' => Ok(container_end(buf, i)),
        b'}' | b']' | b',' | b':' => Err(ScanError::Syntax(
            i,
            format!("unexpected '{}'", buf[i] as char),
        )),
        _ => {
            let rest = &buf[i..];
            match rest
                .iter()
                .position(|&c| matches!(c, b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r'))
            {
                Some(k) => Ok(Some(i + k)),
                None => Ok(None),
            }
        }
    }
}

/// End (exclusive) of the object or array starting at `buf[i]`, or None if the buffer ends
/// first: brackets outside strings counted by depth, 64 bytes at a time. A 64-byte chunk
/// holding no backslash is read by its masks (the quotes' prefix XOR marks what is inside a
/// string); one with a backslash, and the last bytes, a byte at a time (`walk_bytes`), which
/// is the reference: both give the same end for any bytes, valid JSON or not (tests below).
fn container_end(buf: &[u8], i: usize) -> Option<usize> {
    let n = buf.len();
    let (mut depth, mut in_string, mut j) = (0usize, false, i);
    while j + 64 <= n {
        let chunk: &[u8; 64] = buf[j..j + 64].try_into().expect("64 bytes");
        let m = masks(chunk);
        if m.backslash != 0 {
            match walk_bytes(buf, j, j + 64, &mut depth, &mut in_string) {
                Walk::Found(end) => return Some(end),
                Walk::At(next) => j = next,
            }
            continue;
        }
        let inside = prefix_xor(m.quote) ^ if in_string { !0 } else { 0 };
        let mut brackets = (m.open | m.close) & !inside;
        while brackets != 0 {
            let k = brackets.trailing_zeros();
            if m.open >> k & 1 == 1 {
                depth += 1;
            } else {
                depth -= 1; // (the first byte opened: depth >= 1 here)
                if depth == 0 {
                    return Some(j + k as usize + 1);
                }
            }
            brackets &= brackets - 1;
        }
        in_string = inside >> 63 == 1;
        j += 64;
    }
    match walk_bytes(buf, j, n, &mut depth, &mut in_string) {
        Walk::Found(end) => Some(end),
        Walk::At(_) => None,
    }
}

enum Walk {
    /// the container ends just before this offset
    Found(usize),
    /// not yet: go on from this offset (past `stop` after an escape at its end)
    At(usize),
}

/// `container_end` a byte at a time from `j` to `stop`, from the state `depth`/`in_string`.
fn walk_bytes(
    buf: &[u8],
    mut j: usize,
    stop: usize,
    depth: &mut usize,
    in_string: &mut bool,
) -> Walk {
    while j < stop {
        let c = buf[j];
        if *in_string {
            match c {
                b'"' => *in_string = false,
                b'\\' => {
                    j += 2;
                    continue;
                }
                _ => {}
            }
        } else if STRUCTURAL[c as usize] {
            match c {
                b'"' => *in_string = true,
                b'{' | b'[' => *depth += 1,
                _ => {
                    *depth -= 1;
                    if *depth == 0 {
                        return Walk::Found(j + 1);
                    }
                }
            }
        }
        j += 1;
    }
    Walk::At(j)
}

/// Bit k set where byte k of the chunk is a quote, a backslash, an opening or a closing bracket.
struct Masks {
    quote: u64,
    backslash: u64,
    open: u64,
    close: u64,
}

#[cfg(target_arch = "x86_64")]
fn masks(chunk: &[u8; 64]) -> Masks {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of every x86_64 CPU; the four unaligned 16-byte loads stay inside
    // the 64-byte array.
    unsafe {
        let (quote, backslash) = (_mm_set1_epi8(b'"' as i8), _mm_set1_epi8(b'\\' as i8));
        // '{' | 0x20 == '{' and '[' | 0x20 == '{'; '}' and ']' likewise: no other byte does
        let (lower, open, close) = (
            _mm_set1_epi8(0x20),
            _mm_set1_epi8(b'{' as i8),
            _mm_set1_epi8(b'}' as i8),
        );
        let mut m = Masks {
            quote: 0,
            backslash: 0,
            open: 0,
            close: 0,
        };
        for k in 0..4 {
            let v = _mm_loadu_si128(chunk.as_ptr().add(16 * k) as *const __m128i);
            let folded = _mm_or_si128(v, lower);
            let bits = |x: __m128i| (_mm_movemask_epi8(x) as u32 as u64 & 0xffff) << (16 * k);
            m.quote |= bits(_mm_cmpeq_epi8(v, quote));
            m.backslash |= bits(_mm_cmpeq_epi8(v, backslash));
            m.open |= bits(_mm_cmpeq_epi8(folded, open));
            m.close |= bits(_mm_cmpeq_epi8(folded, close));
        }
        m
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn masks(chunk: &[u8; 64]) -> Masks {
    let mut m = Masks {
        quote: 0,
        backslash: 0,
        open: 0,
        close: 0,
    };
    for (k, &c) in chunk.iter().enumerate() {
        let bit = 1u64 << k;
        match c {
            b'"' => m.quote |= bit,
            b'\\' => m.backslash |= bit,
            b'{' | b'[' => m.open |= bit,
            b'}' | b']' => m.close |= bit,
            _ => {}
        }
    }
    m
}

/// Bit k: the XOR of bits 0..=k (inside a string after an odd number of quotes).
fn prefix_xor(mut x: u64) -> u64 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(text: &str) -> (Vec<Item>, Scanner) {
        let mut s = Scanner::new();
        let mut out = Vec::new();
        s.scan(text.as_bytes(), &mut out).unwrap();
        (out, s)
    }

    #[test]
    fn header_events_trailer() {
        let text = r#"{"a": {"b": "}"}, "traceEvents": [{"x": "]"}, 3], "c": 1}"#;
        let (out, s) = items(text);
        assert!(s.done());
        let spans: Vec<String> = out
            .iter()
            .map(|it| match it {
                Item::Event(a, b) => text[*a..*b].to_string(),
                Item::Meta(k, a, b) => format!("{k}={}", &text[*a..*b]),
            })
            .collect();
        assert_eq!(spans, vec![r#"a={"b": "}"}"#, r#"{"x": "]"}"#, "3", "c=1"]);
    }

    #[test]
    fn bare_array_with_bom() {
        let (out, s) = items("\u{feff} [ {\"ph\":\"X\"} ]");
        assert!(s.done());
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn cut_inside_an_event_keeps_the_complete_ones() {
        let text = r#"{"traceEvents": [{"a": 1}, {"b": "x\""#;
        let (out, s) = items(text);
        assert_eq!(out.len(), 1);
        assert!(!s.done() && s.in_events());
        assert_eq!(s.last_event_end, Some(text.find('}').unwrap() + 1));
    }

    #[test]
    fn garbage_between_events_is_an_error() {
        let mut s = Scanner::new();
        let err = s
            .scan(br#"[{"a":1} {"b":2}]"#, &mut Vec::new())
            .unwrap_err();
        assert_eq!(
            err,
            ScanError::Syntax(9, "expected ',' or ']' between events".into())
        );
    }

    /// value_end's loop for a container before the chunks, verbatim: the reference.
    fn reference_end(buf: &[u8], i: usize) -> Option<usize> {
        let mut depth = 0usize;
        let mut j = i;
        let n = buf.len();
        while j < n {
            let c = buf[j];
            if !STRUCTURAL[c as usize] {
                j += 1;
                continue;
            }
            match c {
                b'"' => {
                    j += 1;
                    loop {
                        match buf.get(j) {
                            None => return None,
                            Some(b'"') => break,
                            Some(b'\\') => j += 2,
                            Some(_) => j += 1,
                        }
                    }
                    j += 1;
                    continue;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(j + 1);
                    }
                }
                _ => {}
            }
            j += 1;
        }
        None
    }

    /// Random bytes mostly of JSON's structure (brackets, quotes, backslashes, letters, other
    /// bytes), every start that opens a container: the chunked end is the byte walk's, for
    /// any text, cut anywhere, valid JSON or not.
    #[test]
    fn chunks_end_where_the_byte_walk_ends() {
        let alphabet = b"{}[]\"\\\"\"{}ab:, \n\xff";
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut checked = 0;
        for _ in 0..4_000 {
            let len = (next() % 400) as usize;
            let weight = next() % 4; // (some texts all letters: long runs of plain chunks)
            let buf: Vec<u8> = (0..len)
                .map(|_| {
                    let r = next();
                    if r % 4 < weight {
                        b'a'
                    } else {
                        alphabet[(r >> 8) as usize % alphabet.len()]
                    }
                })
                .collect();
            for i in 0..len {
                if matches!(buf[i], b'{' | b'[') {
                    assert_eq!(
                        container_end(&buf, i),
                        reference_end(&buf, i),
                        "{:?} from {i}",
                        String::from_utf8_lossy(&buf)
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 50_000, "{checked}");
    }

    /// A string spanning chunks, an escaped quote and an escape at a chunk's last byte.
    #[test]
    fn strings_and_escapes_across_chunks() {
        for pad in 0..70 {
            let text = format!(
                "{{\"k\": \"{}\\\"{{]\", \"v\": [1, {{}}]}} tail",
                "x".repeat(pad)
            );
            let end = text.find(" tail").unwrap();
            assert_eq!(container_end(text.as_bytes(), 0), Some(end), "{text}");
            assert_eq!(container_end(&text.as_bytes()[..end - 1], 0), None);
        }
    }
}
