//! Floors of the parse stage on one file (no Python, no DuckDB), each a single thread:
//! `cargo run --release --no-default-features --example floor -- FILE`.
//!
//! - read: the file into memory;
//! - serde_json skip: `IgnoredAny` over the whole document, the least work serde_json does
//!   to check a JSON text (any reader built on serde_json pays at least this);
//! - scan: the reader's own layout scan (event spans), alone;
//! - parse: the whole reader (scan + decode into Arrow columns).

use std::path::Path;
use std::time::Instant;

use _native::scan::{Item, Scanner};
use _native::trace::{EventSource, Limits, TraceParser};

fn timed<T>(label: &str, bytes: f64, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let out = f();
    let s = t.elapsed().as_secs_f64();
    println!("{label:16} {s:6.2} s  {:6.0} MB/s", bytes / 1e6 / s);
    out
}

fn main() {
    let path = std::env::args().nth(1).expect("usage: floor FILE");
    let data = timed("read", 0.0, || std::fs::read(&path).expect("read the file"));
    let n = data.len() as f64;
    timed("serde_json skip", n, || {
        serde_json::from_slice::<serde::de::IgnoredAny>(&data).expect("a JSON text")
    });
    timed("scan", n, || {
        let mut scanner = Scanner::new();
        let mut items: Vec<Item> = Vec::new();
        scanner.scan(&data, &mut items).expect("a trace");
        items.len()
    });
    timed("parse", n, || {
        let limits = Limits {
            threads: 1,
            ..Limits::default()
        };
        let mut parser = TraceParser::open(Path::new(&path), limits).expect("a trace");
        let mut rows = 0;
        while let Some(b) = parser.next_batch().expect("a trace") {
            rows += b.num_rows();
        }
        rows
    });
}
