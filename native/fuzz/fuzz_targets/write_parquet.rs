//! Fuzz the map's writer on one file: any bytes either become a raw_events.parquet holding
//! exactly the events counted (its row count, read back from the file's footer), or a
//! one-line error with no file left behind; never a panic, never a hang.
//!
//!     cargo +nightly fuzz run write_parquet fuzz/corpus/parse -- -max_total_time=300
#![no_main]

use _native::parquet_out::write_raw_events;
use _native::parquet_props::Codec;
use _native::Limits;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir();
    let path = dir.join(format!("traceanalyze-fuzz-pq-{}", std::process::id()));
    let out = dir.join(format!(
        "traceanalyze-fuzz-pq-{}.parquet",
        std::process::id()
    ));
    std::fs::write(&path, data).expect("write the input file");
    let limits = Limits {
        block_bytes: 4096,
        max_item_bytes: 1 << 20,
        max_metadata_value_bytes: 512,
        min_allowance_bytes: 1 << 20,
        threads: 1,
        ..Limits::default()
    };
    match write_raw_events(&path, &out, 7, limits, Codec::Snappy, None) {
        Ok((outcome, stats)) => {
            assert_eq!(stats.rows, outcome.events);
            let file = std::fs::File::open(&out).expect("the Parquet file is there");
            let reader = parquet::file::reader::SerializedFileReader::new(file)
                .expect("the Parquet file reads back");
            use parquet::file::reader::FileReader;
            assert_eq!(
                reader.metadata().file_metadata().num_rows() as u64,
                outcome.events
            );
        }
        Err(e) => {
            assert!(
                !e.message.is_empty() && !e.message.contains('\n'),
                "{:?}",
                e.message
            );
            assert!(!out.exists(), "a failed write left its file");
        }
    }
    let _ = std::fs::remove_file(&out);
});
