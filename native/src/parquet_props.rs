//! How the reader writes its Parquet files (raw_events.parquet and the one-pass tables alike):
//! the codec and the row-group size (each writer names its columns without a dictionary). A leaf: both
//! writers (`parquet_out`, `rank_tables`) read it, it reads neither.

use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
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

/// How the reader writes a Parquet file: `codec`, row groups of ROW_GROUP_ROWS, no dictionary
/// for the columns `no_dictionary` names (those with nearly one value per row).
pub fn properties(codec: Codec, no_dictionary: &[&str]) -> WriterProperties {
    let mut builder = WriterProperties::builder()
        .set_compression(codec.compression())
        .set_max_row_group_size(ROW_GROUP_ROWS)
        .set_created_by("traceanalyze native reader".into());
    for column in no_dictionary {
        builder = builder.set_column_dictionary_enabled(ColumnPath::from(*column), false);
    }
    builder.build()
}
