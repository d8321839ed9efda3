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
        b'{' | b'[' => {
            // (one byte at a time through a class table: most bytes are plain; the short
            // strings of an event are cheaper to walk inline than to hand to memchr)
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
                                None => return Ok(None),
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
                            return Ok(Some(j + 1));
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            Ok(None)
        }
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
}
