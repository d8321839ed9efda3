//! Stage 1: the bytes of a trace file, plain or gzip, streamed in blocks.
//!
//! Gzip is inflated member after member (multi-member files are valid gzip), with a bound on
//! the total output (a decompression bomb is refused before it costs memory: nothing is ever
//! held but the current block). A stream that ends early is reported as a cut (the bytes
//! before it are usable); corrupt data is an error.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use flate2::bufread::GzDecoder;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const READ_BUFFER_BYTES: usize = 1 << 20;

/// Why reading stopped early.
#[derive(Debug)]
pub enum ReadError {
    /// Unreadable file, corrupt gzip, or a bomb: the message says which.
    Fatal(String),
}

/// What one `fill` call saw.
#[derive(Debug, PartialEq, Eq)]
pub enum Fill {
    /// More bytes were appended (maybe zero for an empty gzip member).
    More,
    /// End of the content.
    End,
    /// The gzip stream was cut short: the bytes so far are all there is.
    Cut,
}

enum Inner {
    Plain(File),
    Gzip(Option<Box<GzDecoder<BufReader<File>>>>),
}

/// A trace file's (decompressed) content, read block by block.
pub struct Source {
    inner: Inner,
    budget: u64,
    max_expansion: u64,
    total: u64,
    /// Oddities that lose nothing (kind, message).
    pub notes: Vec<(String, String)>,
}

impl Source {
    /// Open `path`; gzip (by its magic bytes) may expand to `max(min_allowance,
    /// size x max_expansion)` bytes at most.
    pub fn open(path: &Path, max_expansion: u64, min_allowance: u64) -> Result<Source, ReadError> {
        let mut file = File::open(path)
            .map_err(|e| ReadError::Fatal(format!("cannot read the file ({e})")))?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        let mut magic = [0u8; 2];
        let n = read_up_to(&mut file, &mut magic)
            .map_err(|e| ReadError::Fatal(format!("cannot read the file ({e})")))?;
        let file = File::open(path)
            .map_err(|e| ReadError::Fatal(format!("cannot read the file ({e})")))?;
        let inner = if n == 2 && magic == GZIP_MAGIC {
            let decoder = GzDecoder::new(BufReader::with_capacity(READ_BUFFER_BYTES, file));
            Inner::Gzip(Some(Box::new(decoder)))
        } else {
            Inner::Plain(file)
        };
        let budget = min_allowance.max(size.saturating_mul(max_expansion));
        Ok(Source {
            inner,
            budget,
            max_expansion,
            total: 0,
            notes: Vec::new(),
        })
    }

    pub fn is_gzip(&self) -> bool {
        matches!(self.inner, Inner::Gzip(_))
    }

    /// Content bytes read so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Append up to `want` bytes to `buf`.
    pub fn fill(&mut self, buf: &mut Vec<u8>, want: usize) -> Result<Fill, ReadError> {
        let start = buf.len();
        if buf.capacity() < start + want {
            // (room for the block and 1 MiB of the event it cuts, at once: grown by doubling,
            // the buffer was twice the block from the second block on)
            buf.reserve_exact(want + (1 << 20));
        }
        buf.resize(start + want, 0);
        let result = self.fill_into(&mut buf[start..]);
        let got = match &result {
            Ok((n, _)) => *n,
            Err(_) => 0,
        };
        buf.truncate(start + got);
        self.total += got as u64;
        if self.is_gzip() && self.total > self.budget {
            return Err(ReadError::Fatal(format!(
                "gzip expands beyond {} MiB ({}x its size); refusing it as a possible decompression bomb",
                self.budget >> 20,
                self.max_expansion
            )));
        }
        result.map(|(_, fill)| fill)
    }

    fn fill_into(&mut self, out: &mut [u8]) -> Result<(usize, Fill), ReadError> {
        match &mut self.inner {
            Inner::Plain(file) => {
                let n = read_up_to(file, out)
                    .map_err(|e| ReadError::Fatal(format!("cannot read the file ({e})")))?;
                Ok((n, if n == 0 { Fill::End } else { Fill::More }))
            }
            Inner::Gzip(slot) => {
                let mut n = 0;
                while n < out.len() {
                    let Some(decoder) = slot.as_mut() else {
                        return Ok((n, Fill::End));
                    };
                    match decoder.read(&mut out[n..]) {
                        Ok(0) => {
                            let mut rest = slot.take().expect("decoder present").into_inner();
                            match next_member(&mut rest) {
                                Ok(Member::Another) => *slot = Some(Box::new(GzDecoder::new(rest))),
                                Ok(Member::None) => {}
                                Ok(Member::Garbage) => self.notes.push((
                                    "gzip-trailing-data".into(),
                                    "bytes after the end of the gzip stream were ignored".into(),
                                )),
                                Err(e) => {
                                    return Err(ReadError::Fatal(format!(
                                        "cannot read the file ({e})"
                                    )))
                                }
                            }
                        }
                        Ok(k) => n += k,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                            *slot = None;
                            return Ok((n, Fill::Cut));
                        }
                        Err(e) => return Err(ReadError::Fatal(format!("corrupt gzip data ({e})"))),
                    }
                }
                Ok((n, Fill::More))
            }
        }
    }
}

enum Member {
    Another,
    None,
    Garbage,
}

/// After a gzip member: another member, zero padding (fine), or garbage (noted).
fn next_member(rest: &mut BufReader<File>) -> io::Result<Member> {
    let head = rest.fill_buf()?;
    if head.is_empty() {
        return Ok(Member::None);
    }
    if head.len() >= 2 && head[..2] == GZIP_MAGIC {
        return Ok(Member::Another);
    }
    loop {
        let block = rest.fill_buf()?;
        if block.is_empty() {
            return Ok(Member::None);
        }
        if block.iter().any(|&b| b != 0) {
            return Ok(Member::Garbage);
        }
        let n = block.len();
        rest.consume(n);
    }
}

fn read_up_to(reader: &mut impl Read, out: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < out.len() {
        match reader.read(&mut out[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// `baseTimeNanoseconds` as written near the end of a plain file (torch 2.x writes it after
/// the events): a guess the loader checks against the parsed metadata at the end.
pub fn peek_tail_base_ns(path: &Path, tail_bytes: u64) -> Option<i64> {
    use std::io::{Seek, SeekFrom};
    let mut file = File::open(path).ok()?;
    let size = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(size.saturating_sub(tail_bytes)))
        .ok()?;
    let mut tail = Vec::new();
    file.take(tail_bytes).read_to_end(&mut tail).ok()?;
    base_ns_in_tail(&tail)
}

/// The same guess for a gzip file: its content is decompressed once (within the same
/// expansion limits as the read) keeping only the last `tail_bytes`. None when the stream
/// cannot be read to its end.
pub fn gzip_tail_base_ns(
    path: &Path,
    tail_bytes: u64,
    max_expansion: u64,
    min_allowance: u64,
) -> Option<i64> {
    let mut source = Source::open(path, max_expansion, min_allowance).ok()?;
    let keep = tail_bytes as usize;
    let mut buf: Vec<u8> = Vec::with_capacity(keep + (4 << 20));
    loop {
        let fill = source.fill(&mut buf, 4 << 20).ok()?;
        if buf.len() > keep {
            buf.drain(..buf.len() - keep);
        }
        if fill != Fill::More {
            break;
        }
    }
    base_ns_in_tail(&buf)
}

/// The value of the last `"baseTimeNanoseconds": N` in `tail`.
fn base_ns_in_tail(tail: &[u8]) -> Option<i64> {
    let key = b"\"baseTimeNanoseconds\"";
    let at = memchr::memmem::rfind(tail, key)? + key.len();
    let rest = &tail[at..];
    let rest = &rest[rest.iter().position(|b| !b.is_ascii_whitespace())?..];
    let rest = rest.strip_prefix(b":")?;
    let rest = &rest[rest.iter().position(|b| !b.is_ascii_whitespace())?..];
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}
