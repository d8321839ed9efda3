//! traceanalyze._native: a streaming reader of Kineto / Chrome trace JSON.
//!
//! Stages, one module each: `reader` (bytes, gzip) -> `scan` (layout, event spans) ->
//! `events` + `values` (one event -> typed values) -> `columns` (Arrow batches) -> `parquet_out` (the rank's raw_events.parquet) + `rank_tables` (its one-pass tables); `trace`
//! drives them for one file. `pftrace` reads Perfetto protobuf traces into the same columns.
//! `derived` builds a rank's tables that join the one-pass ones (the map's shard); the reduce's
//! `critical_walk` walks every aligned step's critical path across the ranks.
//! `python` is the PyO3 boundary (no panic crosses it).

pub mod columns;
pub mod critical_walk;
pub mod derived;
pub mod events;
pub mod gathered;
pub mod kernels;
pub mod nesting;
pub mod parquet_out;
pub mod parquet_props;
pub mod pftrace;
pub mod plain_json;
#[cfg(feature = "python")]
mod python;
pub mod rank_tables;
pub mod reader;
pub mod scan;
pub mod trace;
pub mod values;

pub use trace::{Limits, Outcome, TraceError, TraceParser};

/// Hand the memory a stage freed back to the system, after a stage over `rows` events (or
/// their rows). glibc's malloc keeps what the reader's threads free in their arenas: a 200 MB
/// trace's map held 110 MB more after the reader than before it, under the derived tables and
/// then the reduce. Below TRIM_MIN_ROWS nothing is done: a trim costs its walk of the arenas
/// and the faults of the pages given back, a cost for nothing on a small rank (a 1,024-rank
/// map of 2.7 MB traces took 105 s with every stage trimming, 76 without: one run each on a
/// noisy machine). (A no-op where malloc is not glibc's; mimalloc as the allocator
/// kept more still: 400 MB against 286 at 200 MB.)
pub fn release_freed_memory(rows: u64) {
    if rows >= TRIM_MIN_ROWS {
        trim_heap();
    }
}

/// glibc malloc's free pages handed back to the system now (release_freed_memory says when it
/// pays; a stage run once a load, such as the critical path's walk, calls this itself).
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: malloc_trim only returns free pages of the heap to the system.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// glibc's malloc, set once for this process (the loader asks before it reads a big trace):
/// blocks up to MMAP_THRESHOLD_BYTES come from the heaps, bigger ones are mapped; the top of a
/// heap is given back past TRIM_THRESHOLD_BYTES. glibc's own default moves both thresholds up
/// to the size of the biggest block freed so far (up to 32 and 64 MB): after the reader's 8 MB
/// blocks its threads' heaps kept 20-35 MB that no trim returned, under every later stage (200
/// MB trace: 35 MB more after the reader than before it, 10 MB with fixed thresholds; peak
/// 169 -> 153 MiB). Mapped from 1 MB up (the text block, the zstd contexts, the tables' and
/// the derived inputs' columns), a freed block goes back at once instead of leaving a hole in
/// a thread's heap: a 200 MB V100 load's peak 112-119 -> 112-115 MiB (12 alternated runs
/// against 32 MB; 1.02x the wall), 500 MB 220 -> 210 MiB (0.99x the wall); 4 MB kept
/// 112-122, 512 KB was 1.02x too. Not for small traces: a process mapping 1,024 small ranks
/// one after the other gave back and faulted in its heap's top again and again (1.05x the
/// wall). A user's own
/// GLIBC_TUNABLES or MALLOC_*_ settings for malloc win: nothing is set. (A no-op where malloc
/// is not glibc's.)
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(set_thresholds);
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_thresholds() {
    let chosen = std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc."))
        || std::env::vars_os().any(|(k, _)| {
            k.to_str()
                .is_some_and(|k| k.starts_with("MALLOC_") && k.ends_with('_'))
        });
    if chosen {
        return;
    }
    extern "C" {
        fn mallopt(param: i32, value: i32) -> i32;
    }
    const M_TRIM_THRESHOLD: i32 = -1;
    const M_MMAP_THRESHOLD: i32 = -3;
    // SAFETY: mallopt only sets malloc's parameters; any thread may call it.
    unsafe {
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES);
    }
}

/// See `tune_allocator`.
pub const MMAP_THRESHOLD_BYTES: i32 = 1 << 20;
pub const TRIM_THRESHOLD_BYTES: i32 = 128 << 10;

/// The fewest events (or rows) a stage handles for `release_freed_memory` to trim: about
/// 64 MB of Kineto JSON.
pub const TRIM_MIN_ROWS: u64 = 250_000;

/// The message of a caught panic (`catch_unwind`, a thread's `join`), "unknown" when it is none.
pub fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown".into())
}

/// Read a whole file (tests, fuzzing): every batch and the outcome, or the error.
pub fn read_all(
    path: &std::path::Path,
    limits: Limits,
) -> Result<(Vec<arrow_array::RecordBatch>, Outcome), TraceError> {
    trace::read_all_of(Box::new(TraceParser::open(path, limits)?))
}
