//! The quickest reading of an event: JSON in plain tokens only, read by hand.
//!
//! Most events of a trace are plain: keys and strings without escapes or control bytes,
//! numbers, `true` / `false` / `null`, arrays and objects a few levels deep. A `Cursor` reads
//! exactly those, as strictly as JSON's grammar (and serde_json) does, and declines anything
//! else (an escape, a control byte in a string, nesting past MAX_DEPTH, a byte out of place)
//! by returning None: the event then goes to serde_json (events.rs), which decides. So what a
//! cursor accepts, serde_json accepts and reads the same way (events.rs's tests compare them).

/// Containers nested deeper than this (the event object is level 1) are declined.
pub const MAX_DEPTH: u32 = 32;

pub struct Cursor<'a> {
    text: &'a str,
    b: &'a [u8],
    pub i: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(text: &'a str) -> Self {
        Cursor {
            text,
            b: text.as_bytes(),
            i: 0,
        }
    }

    /// Past JSON's whitespace (space, tab, newline, carriage return).
    #[inline]
    pub fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    #[inline]
    pub fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// The next byte, taken.
    #[inline]
    pub fn take(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        Some(c)
    }

    /// The byte `c`, taken; None if another comes.
    #[inline]
    pub fn eat(&mut self, c: u8) -> Option<()> {
        (self.take()? == c).then_some(())
    }

    /// Only whitespace is left.
    pub fn at_end(&mut self) -> bool {
        self.ws();
        self.i == self.b.len()
    }

    /// A string without escapes or control bytes here: its text (between the quotes).
    #[inline]
    pub fn string(&mut self) -> Option<&'a str> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.i + 1;
        let rest = &self.b[start..];
        let k = memchr::memchr2(b'"', b'\\', rest)?;
        if rest[k] != b'"' || rest[..k].iter().any(|&c| c < 0x20) {
            return None;
        }
        self.i = start + k + 1;
        Some(&self.text[start..start + k]) // (between two ASCII quotes: char boundaries)
    }

    /// An object here, `{ "key": value, ... }`: `value` reads each member's value (the cursor
    /// on it, past the colon) and is told its key.
    #[inline]
    pub fn members(
        &mut self,
        mut value: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        self.items(b'{', b'}', |c| {
            let key = c.string()?;
            c.ws();
            c.eat(b':')?;
            c.ws();
            value(c, key)
        })
    }

    /// A container here from its `open` byte to its `close` byte: `item` reads each item.
    #[inline]
    fn items(
        &mut self,
        open: u8,
        close: u8,
        mut item: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<()> {
        self.eat(open)?;
        self.ws();
        if self.peek()? == close {
            self.i += 1;
            return Some(());
        }
        loop {
            item(self)?;
            self.ws();
            match self.take()? {
                b',' => self.ws(),
                c if c == close => return Some(()),
                _ => return None,
            }
        }
    }

    /// A whole value here, at nesting level `depth` (of its container): its text.
    pub fn value(&mut self, depth: u32) -> Option<&'a str> {
        let start = self.i;
        match self.peek()? {
            b'"' => {
                self.string()?;
            }
            b'{' => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                self.members(|c, _key| c.value(depth + 1).map(drop))?;
            }
            b'[' => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                self.items(b'[', b']', |c| c.value(depth + 1).map(drop))?;
            }
            b't' => self.word(b"true")?,
            b'f' => self.word(b"false")?,
            b'n' => self.word(b"null")?,
            b'-' | b'0'..=b'9' => self.number()?,
            _ => return None,
        }
        Some(&self.text[start..self.i])
    }

    fn word(&mut self, w: &[u8]) -> Option<()> {
        if !self.b[self.i..].starts_with(w) {
            return None;
        }
        self.i += w.len();
        Some(())
    }

    fn digits(&mut self) -> usize {
        let from = self.i;
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
        self.i - from
    }

    /// JSON's number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
    fn number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.take()? {
            b'0' => {
                if let Some(b'0'..=b'9') = self.peek() {
                    return None; // (one leading zero only)
                }
            }
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            if self.digits() == 0 {
                return None;
            }
        }
        Some(())
    }
}
