//! How the reader writes its Parquet files (raw_events.parquet and the one-pass tables alike):
//! the codec and the row-group size (each writer names its columns without a dictionary), and
//! a table's batches written as one file. A leaf: the writers (`parquet_out`, `rank_tables`,
//! `derived`) read it, it reads none of them.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

/// Rows per row group at most (DuckDB's own COPY default): DuckDB reads row groups in parallel.
pub const ROW_GROUP_ROWS: usize = 122_880;

/// How the column chunks are compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    Zstd,
    Snappy,
    Uncompressed,
}

impl Codec {
    pub fn parse(name: &str) -> Option<Codec> {
        match name {
            "zstd" => Some(Codec::Zstd),
            "snappy" => Some(Codec::Snappy),
            "none" | "uncompressed" => Some(Codec::Uncompressed),
            _ => None,
        }
    }

    fn compression(self) -> Compression {
        match self {
            Codec::Zstd => Compression::ZSTD(ZstdLevel::default()),
            Codec::Snappy => Compression::SNAPPY,
            Codec::Uncompressed => Compression::UNCOMPRESSED,
        }
    }
}

/// The columns whose minimum and maximum each row group records: the rank a file holds
/// (load/verify.py reads it from them; a query of one rank skips the other ranks' files) and
/// the step and times queries filter on. No other column keeps statistics: working them out
/// for every column of every row was 6 % of the reader's CPU at 500 MB, and the files are in
/// event order, so a row group's range of names or args prunes nothing.
pub const WITH_STATISTICS: &[&str] = &["rank", "step", "ts_ns", "end_ns"];

/// How the reader writes a Parquet file: `codec`, row groups of ROW_GROUP_ROWS, no dictionary
/// for the columns `no_dictionary` names (those with nearly one value per row), statistics of
/// WITH_STATISTICS alone.
pub fn properties(codec: Codec, no_dictionary: &[&str]) -> WriterProperties {
    let mut builder = WriterProperties::builder()
        .set_compression(codec.compression())
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_created_by("traceanalyze native reader".into())
        .set_statistics_enabled(EnabledStatistics::None);
    for column in WITH_STATISTICS {
        builder = builder
            .set_column_statistics_enabled(ColumnPath::from(*column), EnabledStatistics::Chunk);
    }
    for column in no_dictionary {
        builder = builder.set_column_dictionary_enabled(ColumnPath::from(*column), false);
    }
    builder.build()
}

/// Write `batches` (of `schema`) as the file `path` (zstd; no rows: an empty file with the
/// schema); returns the rows written, or a one-line message naming the file.
pub fn write_batches(
    path: &Path,
    schema: SchemaRef,
    batches: impl Iterator<Item = Result<RecordBatch, ArrowError>>,
    no_dictionary: &[&str],
) -> Result<usize, String> {
    let fail = |e: &dyn std::fmt::Display| format!("cannot write {} ({e})", path.display());
    let file = File::create(path).map_err(|e| fail(&e))?;
    let mut writer = ArrowWriter::try_new(
        BufWriter::with_capacity(1 << 20, file),
        schema,
        Some(properties(Codec::Zstd, no_dictionary)),
    )
    .map_err(|e| fail(&e))?;
    let mut rows = 0;
    for batch in batches {
        let batch = batch.map_err(|e| fail(&e))?;
        rows += batch.num_rows();
        writer.write(&batch).map_err(|e| fail(&e))?;
    }
    writer.close().map_err(|e| fail(&e))?;
    Ok(rows)
}
