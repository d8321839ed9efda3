//! Fuzz the Perfetto protobuf reader on one file: any bytes (plain or gzip, by their magic
//! bytes) either read into batches or give a one-line error; never a panic, never a hang.
//! Where they read, the counts agree: the batches' rows are the events counted, and no byte
//! count goes past what was read. The head-metadata probe takes the same bytes.
//!
//!     cargo +nightly fuzz run pftrace fuzz/corpus/pftrace -- -max_total_time=300
//!
//! Seeds: any .pftrace files (tests/pftrace_convert.py writes them from fixtures/real).
#![no_main]

use _native::pftrace::{head_metadata, read_all};
use _native::Limits;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("traceanalyze-fuzz-pf-{}", std::process::id()));
    std::fs::write(&path, data).expect("write the input file");
    let limits = Limits {
        block_bytes: 4096,
        min_allowance_bytes: 1 << 20,
        threads: 1,
        ..Limits::default()
    };
    match read_all(&path, limits) {
        Ok((batches, outcome)) => {
            let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
            assert_eq!(rows as u64, outcome.events);
            if !outcome.gzip {
                assert!(outcome.events_bytes + outcome.lost_bytes <= data.len() as u64);
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
    let _ = head_metadata(data);
});
