//! Fuzz the whole reader on one file: any bytes (plain or gzip, by their magic bytes) either
//! read into batches or give a one-line error; never a panic, never a hang. Where they read,
//! the counts agree: the batches' rows are the events counted, and no byte count goes past
//! what was read.
//!
//!     cargo +nightly fuzz run parse fuzz/corpus/parse -- -max_total_time=300
//!
//! The seed corpus (fuzz/corpus/parse, built by fuzz/make_seeds.py) holds the heads and
//! whole small files of the real traces in fixtures/real.
#![no_main]

use _native::{read_all, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("traceanalyze-fuzz-{}", std::process::id()));
    std::fs::write(&path, data).expect("write the input file");
    // small limits, so that the limits' own paths are exercised too
    let limits = Limits {
        block_bytes: 4096,
        max_item_bytes: 1 << 20,
        max_metadata_value_bytes: 512,
        min_allowance_bytes: 1 << 20,
        threads: 1,
        ..Limits::default()
    };
    match read_all(&path, limits) {
        Ok((batches, outcome)) => {
            let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
            assert_eq!(rows as u64, outcome.events);
            if !outcome.gzip {
                assert!(outcome.events_bytes <= data.len() as u64);
                assert!(outcome.lost_bytes <= data.len() as u64);
            }
        }
        Err(e) => {
            assert!(
                !e.message.is_empty() && !e.message.contains('\n'),
                "{:?}",
                e.message
            );
        }
    }
});
