//! Stage 5 (the map's shard): a rank's events straight into its `raw_events.parquet`, a
//! column `rank` first, then the batches' columns (the table's column order, db/schema.sql).
//! Row groups are written as the blocks are decoded: memory holds one block of text and one
//! row group being encoded, whatever the file size.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{Array, ArrayRef, Int32Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;

use crate::columns::{schema, PH};
use crate::gathered::SPILL_BYTES;
use crate::kernels::KernelClass;
use crate::parquet_props::{properties, Codec};
use crate::rank_tables::{CutShort, EventIssues, RankTables, TABLES};
use crate::reader;
use crate::trace::{EventSource, Limits, Outcome, TraceError, TraceParser};

/// Columns with (nearly) a value per row: a dictionary would only be built to be dropped.
/// Without one the rank's file is 45% smaller and the write 15% cheaper (100 MB of JSON:
/// 0.97 -> 0.85 CPU s with the parse, 5.0 -> 2.8 MB).
pub const NO_DICTIONARY: &[&str] = &[
    "ts_ns",
    "dur_ns",
    "external_id",
    "correlation",
    "flow_id",
    "seq_number",
    "bytes",
    "total_allocated_bytes",
    "total_reserved_bytes",
    "addr",
    "other_args",
    "input_dims",
];

/// What writing the file did, besides the parser's outcome.
#[derive(Debug, Default, Clone)]
pub struct WriteStats {
    pub rows: u64,
    pub row_groups: usize,
    /// rows whose ph is B or E (0: no begin/end pairing is needed)
    pub begin_end_rows: u64,
    pub parquet_bytes: u64,
    /// seconds spent reading and decoding (wall, this thread), and encoding and writing
    pub parse_s: f64,
    pub write_s: f64,
    /// seconds of the gzip pre-pass that finds baseTimeNanoseconds in the trailer
    pub base_scan_s: f64,
    /// rows of each one-pass table written (rank_tables), empty when none were asked for or
    /// the rows need the map's second look (B/E pairs)
    pub tables: Vec<(&'static str, usize)>,
    /// the events' issues the one-pass tables counted (when they were written)
    pub issues: EventIssues,
    /// seconds spent gathering and writing those tables
    pub tables_s: f64,
    /// of which gathering their rows while the events are encoded (the encoder's thread)
    pub gather_s: f64,
    /// and each table's seconds once the events are read (`rank_tables::Finished::seconds`)
    pub table_s: Vec<(&'static str, f64)>,
}

/// Where the one-pass tables go (a folder), where their gathered rows may wait (a private
/// scratch folder, gathered.rs) and the cut-short ratio of their steps.
#[derive(Clone, Copy, Debug)]
pub struct TablesOut<'a> {
    pub dir: &'a Path,
    pub scratch: &'a Path,
    pub cut: CutShort,
    /// db/kernel_classes.csv's rows (the kernels table's kinds)
    pub classes: &'a [KernelClass],
}

/// The file's schema: `rank` INTEGER, then the batches' columns.
pub fn parquet_schema() -> SchemaRef {
    let mut fields = vec![Field::new("rank", DataType::Int32, true)];
    fields.extend(schema().fields().iter().map(|f| f.as_ref().clone()));
    Arc::new(Schema::new(fields))
}

fn io_error(what: &str, out: &Path, e: impl std::fmt::Display) -> TraceError {
    TraceError {
        message: format!("cannot write {what} {} ({e})", out.display()),
        offset: None,
    }
}

/// Read `path` and write its events as Parquet to `out` (replaced). On an error the partial
/// file is removed and the error is the reader's (or the write's) one-line message.
pub fn write_raw_events(
    path: &Path,
    out: &Path,
    rank: i32,
    limits: Limits,
    codec: Codec,
    tables: Option<TablesOut>,
) -> Result<(Outcome, WriteStats), TraceError> {
    let result = write_inner(path, out, rank, limits, codec, tables);
    if result.is_err() {
        let _ = std::fs::remove_file(out);
        if let Some(t) = tables {
            for table in TABLES {
                let _ = std::fs::remove_file(t.dir.join(format!("{table}.parquet")));
            }
        }
    }
    result
}

fn write_inner(
    path: &Path,
    out: &Path,
    rank: i32,
    limits: Limits,
    codec: Codec,
    tables_out: Option<TablesOut>,
) -> Result<(Outcome, WriteStats), TraceError> {
    let mut stats = WriteStats::default();
    let mut tables = tables_out.map(|to| RankTables::new(rank, Some((to.scratch, SPILL_BYTES))));
    let started = Instant::now();
    let limits_threads = limits.threads;
    let mut parser = TraceParser::open(path, limits.clone())?;
    if parser.outcome.gzip {
        // a gzip file's baseTimeNanoseconds (Kineto writes it after the events) cannot be
        // peeked at: decompress once to find it, so the rows need no second pass
        let t = Instant::now();
        if let Some(base) = reader::gzip_tail_base_ns(
            path,
            limits.tail_peek_bytes,
            limits.max_expansion,
            limits.min_allowance_bytes,
        ) {
            if (0..(1i64 << 62)).contains(&base) {
                parser.outcome.base_ns = base;
            }
        }
        stats.base_scan_s = t.elapsed().as_secs_f64();
    }
    let schema = parquet_schema();
    let file = File::create(out).map_err(|e| io_error("the Parquet file", out, e))?;
    let props = properties(codec, NO_DICTIONARY);
    let mut writer = ArrowWriter::try_new(
        BufWriter::with_capacity(1 << 20, file),
        schema.clone(),
        Some(props),
    )
    .map_err(|e| io_error("the Parquet file", out, e))?;
    let mut parse_s = started.elapsed().as_secs_f64() - stats.base_scan_s;
    // Each block's batches are encoded (and their one-pass tables' rows gathered) while the
    // next block is parsed: on their own thread, handed a block at a time as the parser
    // finishes it (a rendezvous: at most one parsed block waits, the memory of the overlap;
    // handed a batch at a time, the parser sat idle while the encoder drained the block's
    // other batches), unless the read has one thread. The rows, their order and the files
    // are the same either way.
    let mut consume = |batch: RecordBatch, stats: &mut WriteStats| -> Result<(), TraceError> {
        let t = Instant::now();
        stats.begin_end_rows += begin_end_rows(&batch);
        stats.rows += batch.num_rows() as u64;
        if let Some(tables) = tables.as_mut() {
            let t = Instant::now();
            tables
                .add(&batch)
                .map_err(|e| io_error("the tables of", out, e))?;
            stats.gather_s += t.elapsed().as_secs_f64();
        }
        let rank_col: ArrayRef = Arc::new(Int32Array::from_value(rank, batch.num_rows()));
        let mut columns = Vec::with_capacity(batch.num_columns() + 1);
        columns.push(rank_col);
        columns.extend(batch.columns().iter().cloned());
        let with_rank = RecordBatch::try_new(schema.clone(), columns)
            .map_err(|e| io_error("the Parquet file", out, e))?;
        writer
            .write(&with_rank)
            .map_err(|e| io_error("the Parquet file", out, e))?;
        stats.write_s += t.elapsed().as_secs_f64();
        Ok(())
    };
    if limits_threads == 1 {
        loop {
            let t = Instant::now();
            let batch = parser.next_batch()?;
            parse_s += t.elapsed().as_secs_f64();
            let Some(batch) = batch else { break };
            consume(batch, &mut stats)?;
        }
    } else {
        let (sender, receiver) = std::sync::mpsc::sync_channel::<Vec<RecordBatch>>(0);
        let mut encoded = WriteStats::default();
        let (parsed, written) = std::thread::scope(|scope| {
            let encoder = scope.spawn(|| -> Result<(), TraceError> {
                for block in receiver {
                    for batch in block {
                        consume(batch, &mut encoded)?;
                    }
                }
                Ok(())
            });
            let parsed = (|| -> Result<(), TraceError> {
                loop {
                    let t = Instant::now();
                    let batch = parser.next_batch()?;
                    parse_s += t.elapsed().as_secs_f64();
                    let Some(batch) = batch else { return Ok(()) };
                    // (the block's other batches, decoded with it)
                    let block: Vec<RecordBatch> = std::iter::once(batch)
                        .chain(parser.ready().drain(..))
                        .collect();
                    if sender.send(block).is_err() {
                        return Ok(()); // (the encoder stopped: its error is the one to report)
                    }
                }
            })();
            drop(sender);
            let written = encoder.join().unwrap_or_else(|p| {
                Err(TraceError {
                    message: format!("the Parquet writer panicked ({})", crate::panic_text(&*p)),
                    offset: None,
                })
            });
            (parsed, written)
        });
        written?;
        parsed?;
        stats.begin_end_rows = encoded.begin_end_rows;
        stats.rows = encoded.rows;
        stats.gather_s = encoded.gather_s;
        stats.write_s = encoded.write_s;
    }
    let t = Instant::now();
    let meta = writer
        .close()
        .map_err(|e| io_error("the Parquet file", out, e))?;
    stats.write_s += t.elapsed().as_secs_f64();
    stats.parse_s = parse_s;
    stats.tables_s = stats.gather_s;
    stats.row_groups = meta.row_groups().len();
    stats.parquet_bytes = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
    // (the parser's blocks and the encoder's buffers are freed before the tables' finish)
    let outcome = std::mem::take(&mut parser.outcome);
    drop(parser);
    crate::release_freed_memory(outcome.events);
    if let (Some(tables), Some(to)) = (tables, tables_out) {
        if stats.begin_end_rows == 0 {
            let t = Instant::now();
            let finished = tables
                .finish(to.cut, to.dir, limits_threads != 1, to.classes)
                .map_err(|message| TraceError {
                    message,
                    offset: None,
                })?;
            stats.tables = finished.rows;
            stats.issues = finished.issues;
            stats.table_s = finished.seconds;
            stats.tables_s += t.elapsed().as_secs_f64();
            crate::release_freed_memory(outcome.events);
        }
    }
    Ok((outcome, stats))
}

fn begin_end_rows(batch: &RecordBatch) -> u64 {
    let Some(ph) = batch.column(PH).as_any().downcast_ref::<StringArray>() else {
        return 0;
    };
    (0..ph.len())
        .filter(|&i| ph.is_valid(i) && matches!(ph.value(i), "B" | "E"))
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parquet_props::ROW_GROUP_ROWS;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    fn temp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("traceanalyze-pq-{}-{name}", std::process::id()))
    }

    fn read_back(out: &Path) -> Vec<RecordBatch> {
        let file = File::open(out).unwrap();
        ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap()
            .map(|b| b.unwrap())
            .collect()
    }

    fn write_trace(name: &str, text: &str) -> std::path::PathBuf {
        let path = temp(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// The file holds exactly the reader's rows, in order, with the rank column first; row
    /// groups split at ROW_GROUP_ROWS and at blocks.
    #[test]
    fn writes_the_readers_rows_in_order() {
        let n = ROW_GROUP_ROWS + 5_000;
        let mut text = String::from("{\"traceEvents\": [");
        for i in 0..n {
            if i > 0 {
                text.push(',');
            }
            let ph = if i == 7 { "B" } else { "X" };
            text.push_str(&format!(
                "{{\"ph\": \"{ph}\", \"name\": \"op{i}\", \"pid\": 1, \"tid\": 2, \"ts\": {i}.5, \"dur\": 1, \"args\": {{\"External id\": {i}}}}}"
            ));
        }
        text.push_str("]}");
        let path = write_trace("rows.json", &text);
        let out = temp("rows.parquet");
        let limits = Limits {
            block_bytes: 1 << 20,
            threads: 2,
            ..Limits::default()
        };
        let (outcome, stats) =
            write_raw_events(&path, &out, 3, limits.clone(), Codec::Zstd, None).unwrap();
        let batches = read_back(&out);
        let (expected, _) = crate::read_all(&path, limits).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::fs::remove_file(&out).unwrap();

        assert_eq!(outcome.events, n as u64);
        assert_eq!(stats.rows, n as u64);
        assert_eq!(stats.begin_end_rows, 1);
        assert!(stats.row_groups >= 2, "{}", stats.row_groups);
        assert_eq!(batches[0].schema(), parquet_schema());
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        assert_eq!(rows, n);
        // every value as the Arrow stream gives it, the rank column aside
        let got = arrow_select_concat(&batches);
        let want = arrow_select_concat(&expected);
        let ranks = got[0].as_any().downcast_ref::<Int32Array>().unwrap();
        assert!(ranks.iter().all(|r| r == Some(3)));
        assert_eq!(&got[1..], &want[..]);
        let ts = got[1 + crate::columns::TS_NS]
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .unwrap();
        assert_eq!(ts.value(0), 500);
        assert_eq!(ts.value(n - 1), (n as i64 - 1) * 1000 + 500);
    }

    /// A gzip file whose baseTimeNanoseconds comes after the events is read with that base.
    #[test]
    fn gzip_trailer_base_applies() {
        use flate2::write::GzEncoder;
        use std::io::Write;
        let text = "{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"a\", \"pid\": 1, \"tid\": 1, \"ts\": 2, \"dur\": 1}], \"baseTimeNanoseconds\": 1000000}";
        let path = temp("base.json.gz");
        let mut gz = GzEncoder::new(File::create(&path).unwrap(), flate2::Compression::fast());
        gz.write_all(text.as_bytes()).unwrap();
        gz.finish().unwrap();
        let out = temp("base.parquet");
        let (outcome, _) =
            write_raw_events(&path, &out, 0, Limits::default(), Codec::Snappy, None).unwrap();
        let batches = read_back(&out);
        std::fs::remove_file(&path).unwrap();
        std::fs::remove_file(&out).unwrap();
        assert_eq!(outcome.base_ns, 1_000_000);
        let ts = batches[0]
            .column(1 + crate::columns::TS_NS)
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .unwrap();
        assert_eq!(ts.value(0), 1_002_000);
    }

    /// A file that is not a trace leaves no Parquet file behind.
    #[test]
    fn bad_input_leaves_no_file() {
        let path = write_trace(
            "bad.json",
            "{\"traceEvents\": [{\"ph\": \"X\"} {\"ph\": \"X\"}]}",
        );
        let out = temp("bad.parquet");
        let err =
            write_raw_events(&path, &out, 0, Limits::default(), Codec::Zstd, None).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert!(err.message.contains("malformed"), "{}", err.message);
        assert!(!out.exists());
    }

    fn arrow_select_concat(batches: &[RecordBatch]) -> Vec<ArrayRef> {
        let n = batches[0].num_columns();
        (0..n)
            .map(|c| {
                let parts: Vec<&dyn Array> = batches.iter().map(|b| b.column(c).as_ref()).collect();
                arrow_select::concat::concat(&parts).unwrap()
            })
            .collect()
    }
}
