//! The Parquet encoding of raw_events alone: a file's batches read into memory first, then
//! written as the map writes them (its writer properties, one thread), once per codec.
//! `cargo run --release --no-default-features --example encode -- FILE`.

use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use _native::parquet_out::{parquet_schema, NO_DICTIONARY};
use _native::parquet_props::{properties, Codec};
use _native::trace::{EventSource, Limits, TraceParser};
use arrow_array::{ArrayRef, Int32Array, RecordBatch};
use parquet::arrow::ArrowWriter;

fn main() {
    let path = std::env::args().nth(1).expect("usage: encode FILE");
    let limits = Limits {
        threads: 2,
        ..Limits::default()
    };
    let mut parser = TraceParser::open(Path::new(&path), limits).expect("a trace");
    let schema = parquet_schema();
    let mut batches = Vec::new();
    while let Some(b) = parser.next_batch().expect("a trace") {
        let mut columns: Vec<ArrayRef> = vec![Arc::new(Int32Array::from_value(0, b.num_rows()))];
        columns.extend(b.columns().iter().cloned());
        batches.push(RecordBatch::try_new(schema.clone(), columns).unwrap());
    }
    for codec in [Codec::Zstd, Codec::Snappy, Codec::Uncompressed] {
        let t = Instant::now();
        let mut out = Vec::new();
        let mut w = ArrowWriter::try_new(
            Cursor::new(&mut out),
            schema.clone(),
            Some(properties(codec, NO_DICTIONARY)),
        )
        .unwrap();
        for b in &batches {
            w.write(b).unwrap();
        }
        w.close().unwrap();
        println!(
            "{codec:?}: {:.3} s, {} bytes",
            t.elapsed().as_secs_f64(),
            out.len()
        );
    }
}
