//! Parse one trace file with the native reader and print what it cost (no Python, no DuckDB):
//! `cargo run --release --example parse -- FILE [THREADS]`. For profiling the parse stage.

use std::path::Path;
use std::time::Instant;

use _native::trace::{EventSource, Limits, TraceParser};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).expect("usage: parse FILE [THREADS]");
    let threads = args.get(2).and_then(|t| t.parse().ok()).unwrap_or(1);
    let limits = Limits {
        threads,
        ..Limits::default()
    };
    let started = Instant::now();
    let mut parser = TraceParser::open(Path::new(path), limits).unwrap_or_else(|e| {
        eprintln!("{path}: {}", e.message);
        std::process::exit(2)
    });
    let mut rows = 0usize;
    while let Some(batch) = parser.next_batch().unwrap_or_else(|e| {
        eprintln!("{path}: {}", e.message);
        std::process::exit(2)
    }) {
        rows += batch.num_rows();
    }
    let seconds = started.elapsed().as_secs_f64();
    let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) as f64;
    println!(
        "{rows} events, {:.2} s, {:.0} MB/s (file bytes)",
        seconds,
        bytes / 1e6 / seconds
    );
}
