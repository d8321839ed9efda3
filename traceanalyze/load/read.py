"""One rank's trace file -> its rows of `raw_events` (through the native reader).

`traceanalyze._native` (Rust, native/) streams the file (plain or gzip) and decodes every event
into typed Arrow columns, times exact from the decimal text. The map writes them straight into
the rank's shard file `raw_events.parquet` (`write_raw_events`: the reader encodes the row
groups itself, no database holds the rows) and the per-rank tables read that file;
`read_rank` instead scans the reader's Arrow C stream into a database's `raw_events` table.
A Perfetto protobuf trace (by its name: discover.is_protobuf) is decoded by the same reader
into the same columns (native/src/pftrace: tracks, slices, interned names, debug annotations
as args).
The reader also builds the rank's one-pass tables in the same pass (threads, steps, cpu_ops,
annotations, runtime, kernels: native/src/rank_tables.rs, NATIVE_TABLES) and writes them next to
raw_events.parquet; rows fixed after the read are given to it again from the fixed file. From
those files it then builds the rank's other tables (collectives, phases, GPU activity, code
regions, FLOPs, ...: native/src/derived/, DERIVED_TABLES, `write_derived_tables`).
This module adds the rank, checks the time base, turns B/E pairs into X events and words the
reader's counts as load issues. It is the only module that knows the native reader.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import traceanalyze.db as tracedb
from traceanalyze.errors import TraceanalyzeError, TraceFormatError
from traceanalyze.extension import native as _native
from traceanalyze.lazy_import import duckdb
from traceanalyze.load.discover import TraceFile, is_protobuf
from traceanalyze.load.rank_read import RankRead
from traceanalyze.load.source import estimated_uncompressed_bytes

# Times beyond +-2**62 ns (the year 2116) are malformed: NULL (counted as bad-ts / bad-dur),
# which also keeps every ts + dur sum of the tables within BIGINT.
TIME_LIMIT_NS = 1 << 62


# decompressed bytes the reader takes at a time (the events of a block are decoded in parallel)
BLOCK_BYTES = 8 << 20
# From this much trace (JSON bytes) on, the process's malloc gives freed memory back to the system
# (native/src/lib.rs tune_allocator: a 200 MB trace's peak 169 -> 153 MiB); a process mapping
# many small ranks keeps glibc's defaults (1.05x the wall at 1,024 ranks with them fixed).
TUNE_ALLOCATOR_MIN_BYTES = 16 << 20
# how the reader compresses raw_events.parquet (see docs/loading.md for the measurements)
RAW_EVENTS_COMPRESSION = "zstd"
# the per-rank tables the reader builds as it parses, as <table>.parquet beside raw_events.parquet
NATIVE_TABLES = ("threads", "steps", "cpu_ops", "annotations", "runtime", "kernels")
# the per-rank tables the reader builds from those files (native/src/derived), written beside them
DERIVED_TABLES = ("memcpy", "collectives", "step_comm", "main_threads", "memory", "all_to_all_calls",
                  "step_batches", "phase_intervals", "step_phases", "gpu_busy_intervals", "gpu_idle_gaps",
                  "step_gpu", "step_regions", "op_flops", "top_host_ops")


def _cut_short() -> tuple[int, int]:
    """The steps' cut_short_max_ratio (tables/00_parameters.sql) as (numerator, denominator)."""
    ratio = Fraction(str(tracedb.parameter("cut_short_max_ratio")))
    return ratio.numerator, ratio.denominator


def base_time_ns(metadata: dict) -> int:
    """Newer Kineto writes `ts` relative to `baseTimeNanoseconds`; older traces are absolute."""
    base = metadata.get("baseTimeNanoseconds")
    return base if isinstance(base, int) and not isinstance(base, bool) and 0 <= base < 2**62 else 0


def time_base_notes(metadata: dict) -> list[tuple[str, str, int | None]]:
    """A bad-time-base note when the trace has a baseTimeNanoseconds that base_time_ns cannot
    use (not a whole number of nanoseconds in range): its times were read as absolute."""
    if "baseTimeNanoseconds" not in metadata or base_time_ns(metadata) or metadata["baseTimeNanoseconds"] == 0:
        return []
    message = ("baseTimeNanoseconds is not a whole number of nanoseconds since the epoch: the times were read "
               "as absolute, and this rank's clock may not match the others'")
    return [("bad-time-base", message, None)]


def read_rank(con: duckdb.DuckDBPyConnection, tf: TraceFile, threads: int = 0) -> RankRead:
    """Parse `tf` into `raw_events` (rank = tf.rank). Raises TraceFormatError (one line, the
    file and the byte offset) for a file that is not a readable trace."""
    protobuf = is_protobuf(tf.path)  # Perfetto protobuf: the same rows, from its own decoder
    try:
        reader = _native.TraceReader(str(tf.path), threads=threads, block_bytes=BLOCK_BYTES, protobuf=protobuf)
    except ValueError as exc:
        raise TraceFormatError(str(exc), str(tf.path)) from None
    native_events = reader  # (found by DuckDB's replacement scan by this name)
    try:
        con.execute("INSERT INTO raw_events BY NAME SELECT CAST(? AS INTEGER) AS rank, * FROM native_events",
                    [tf.rank]).fetchall()
        failure = None
    except duckdb.Error as exc:
        failure = exc
    del native_events
    try:
        out = reader.result()
    except ValueError as exc:
        raise TraceFormatError(str(exc), str(tf.path)) from None
    if failure is not None:
        raise failure
    notes: list[tuple[str, str, int | None]] = list(out["notes"])
    metadata = _metadata(out["metadata"], notes)
    notes += time_base_notes(metadata) if not protobuf else []
    base = base_time_ns(metadata)
    if not protobuf and base != out["base_ns"]:  # (read with a guessed time base: put the right one;
        # Perfetto timestamps are absolute)
        _shift_times(con, tf.rank, base - out["base_ns"])
    notes += _tally_notes(out["tally"])
    pairs, be_notes = _convert_begin_end(con, tf.rank)
    notes += be_notes
    return RankRead(metadata, out["events"] - pairs, out["events_bytes"], out["truncated_at_byte"],
                    out["lost_bytes"], notes)


def write_raw_events(database: Callable[[], duckdb.DuckDBPyConnection], tf: TraceFile, out: Path,
                     threads: int = 0, scratch: Path | None = None) -> RankRead:
    """Parse `tf` into the Parquet file `out` (the shard's raw_events.parquet, rank =
    tf.rank). Raises TraceFormatError (one line, the file and the byte offset) for a file that
    is not a readable trace; `out` is then gone.

    Rows that need a second look (B/E pairs, a time base learned after the events, a Perfetto
    protobuf trace) are fixed in the `raw_events` table (the schema's, emptied first) of the
    connection `database()` opens, and written out by DuckDB instead; a rank that needs none
    opens no database. The one-pass tables (NATIVE_TABLES) go beside `out`; their rows past
    8 MB wait in the private folder `scratch` (default: beside `out`). The read's `table_rows`
    count the files' rows, its `event_issues` the events' oddities."""
    if is_protobuf(tf.path):
        con = database()
        con.execute("DELETE FROM raw_events")
        read = read_rank(con, tf, threads)
        (rows,) = con.execute("SELECT count(*) FROM raw_events").fetchone()
        _copy_out(con, out)
        _tables_of_fixed_rows(out, tf, scratch, read, rows)
        return read
    cpu0 = time.process_time()
    if estimated_uncompressed_bytes(tf.path) >= TUNE_ALLOCATOR_MIN_BYTES:
        _native.tune_allocator()  # (glibc malloc's thresholds fixed for this process: native/src/lib.rs)
    try:
        out_dict = _native.write_raw_events_parquet(str(tf.path), str(out), tf.rank, threads=threads,
                                                    block_bytes=BLOCK_BYTES, compression=RAW_EVENTS_COMPRESSION,
                                                    tables_dir=str(out.parent), cut_short=_cut_short(),
                                                    scratch_dir=str(scratch or out.parent),
                                                    kernel_classes=tracedb.kernel_classes())
    except ValueError as exc:
        raise TraceFormatError(str(exc), str(tf.path)) from None
    notes: list[tuple[str, str, int | None]] = list(out_dict["notes"])
    metadata = _metadata(out_dict["metadata"], notes)
    notes += time_base_notes(metadata)
    notes += _tally_notes(out_dict["tally"])
    shift = base_time_ns(metadata) - out_dict["base_ns"]
    stages = {"read_parse_write_cpu": time.process_time() - cpu0,
              "parse_wall": out_dict["parse_s"] + out_dict["base_scan_s"], "write_wall": out_dict["write_s"],
              "native_tables_wall": out_dict["tables_s"],
              # (each one-pass table's seconds on its thread once the events are read, and
              # gathering their rows beside the encoding: the benchmark lists them by table)
              "table_cpu.gathering": out_dict["gather_s"],
              **{f"table_cpu.{table}": s for table, s in out_dict["table_s"].items()}}
    source = f"read_parquet({tracedb.sql_string(out)})"
    pairs = 0
    read = RankRead(metadata, out_dict["events"], out_dict["events_bytes"], out_dict["truncated_at_byte"],
                    out_dict["lost_bytes"], notes, stages, {"raw_events": out_dict["rows"], **out_dict["tables"]},
                    event_issue_notes(out_dict["issues"]))
    if shift or out_dict["begin_end_rows"]:  # rare: fix the rows in a table, then write them again
        con = database()
        con.execute("DELETE FROM raw_events")
        con.execute(f"INSERT INTO raw_events SELECT * FROM {source}")
        if shift:
            _shift_times(con, tf.rank, shift)
        pairs, be_notes = _convert_begin_end(con, tf.rank)
        notes += be_notes
        read.events -= pairs
        (rows,) = con.execute("SELECT count(*) FROM raw_events").fetchone()
        _copy_out(con, out)
        _tables_of_fixed_rows(out, tf, scratch, read, rows)
    return read


def event_issue_notes(issues: dict) -> list[tuple[str, str, int | None]]:
    """The events' oddities the reader counted, as load_issues notes (kind, message, count):
    malformed events are counted, never dropped silently."""
    notes: list[tuple[str, str, int | None]] = []
    for key, kind, message in (
            ("bad_ts", "bad-ts", "events whose ts is missing, not a number or out of range were skipped"),
            ("bad_dur", "bad-dur", "complete (X) events with a missing or negative dur were skipped"),
            ("no_ph", "no-ph", "events without a ph (phase) field, or not JSON objects, were skipped")):
        if issues[key]:
            notes.append((kind, message, issues[key]))
    if issues["repeated_steps"]:
        notes.append(("duplicate-step", "ProfilerStep#N names that occur more than once ("
                      + ", ".join(issues["repeated_steps"]) + "): each such step spans all its occurrences",
                      len(issues["repeated_steps"])))
    if issues["synthetic_steps"]:
        notes.append(("no-steps", "no ProfilerStep#N annotations (profiled without a schedule): the whole trace "
                      "is analyzed as one window", None))
    if issues["range_kernels"]:
        unmatched = issues["range_kernels_paired"] < issues["range_kernels"]
        notes.append(("range-profiler-kernels",
                      "kernels recorded by the CUPTI range profiler (cuda_profiler_range events) carry performance "
                      "counters (kernels.counters) but no measured times (Kineto spreads them over the profiling "
                      "window): GPU busy and idle time are not reported"
                      + ("; their number differs from the kernel launches: not matched to the launching calls"
                         if unmatched else ""), issues["range_kernels"]))
    return notes


def _tables_of_fixed_rows(out: Path, tf: TraceFile, scratch: Path | None, read: RankRead, rows: int) -> None:
    """The one-pass tables again, from the rows as the map fixed them (the file `out`, of
    `rows` rows): the read's table rows and event issues are theirs."""
    try:
        tables, issues, seconds = _native.rank_tables_of_parquet(str(out), str(out.parent), tf.rank, cut_short=_cut_short(),
                                                        scratch_dir=str(scratch or out.parent),
                                                        kernel_classes=tracedb.kernel_classes())
    except ValueError as exc:
        raise TraceFormatError(str(exc), str(tf.path)) from None
    read.table_rows = {"raw_events": rows, **tables}
    read.event_issues = event_issue_notes(issues)
    read.stage_s.update({f"table_cpu.{table}": s for table, s in seconds.items()})


def write_derived_tables(tf: TraceFile, folder: Path, configs: list[tuple],
                         threads: int = 0) -> tuple[dict[str, int], dict[str, float]]:
    """The rank's DERIVED_TABLES from its one-pass tables and raw_events.parquet in `folder`,
    written there; `configs` are its `pg_configs` rows, `threads` 1 to build them on one thread.
    Returns each table's row count and seconds; a file that cannot be read or written raises
    TraceFormatError naming the trace."""
    groups = [(name, desc, ranks, size, index) for _, name, desc, ranks, size, _, index in configs]
    try:
        return _native.derive_rank_tables(str(folder), str(folder), tf.rank, groups, _derived_params(),
                                          threads=threads)
    except ValueError as exc:
        raise TraceFormatError(str(exc), str(tf.path)) from None


def _derived_params() -> tuple[int, float, float]:
    """The named thresholds the derived tables use (tables/00_parameters.sql)."""
    return (int(tracedb.parameter("phase_merge_tolerance_ns")),
            float(tracedb.parameter("gap_data_wait_min_share_pct")),
            float(tracedb.parameter("gap_comm_wait_min_share_pct")))


def write_table_rows(path: Path, table: str, rows: list[tuple]) -> None:
    """`rows` of the schema's `table` (db/schema.sql's columns, in order) as the Parquet file
    `path`, by the native reader's writer; a file that cannot be written raises
    TraceanalyzeError naming it."""
    try:
        _native.write_rows(str(path), list(tracedb.schema_columns(table)), rows)
    except ValueError as exc:
        raise TraceanalyzeError(str(exc), str(path)) from None


def _copy_out(con, out: Path) -> None:
    """`raw_events` as the Parquet file `out`, in the table's row order."""
    con.execute(f"COPY raw_events TO {tracedb.sql_string(out)} (FORMAT parquet, COMPRESSION zstd)")


def _metadata(items: list[tuple[str, str]], notes: list) -> dict:
    metadata: dict = {}
    for key, raw in items:
        checked = _native.checked_metadata(raw)
        if checked is None:
            notes.append(("metadata-skipped", f"the metadata value of {key!r} is not JSON or nested too "
                          "deep; it was skipped", None))
            continue
        metadata[key] = json.loads(checked)
    return metadata


def _shift_times(con, rank: int, shift_ns: int) -> None:
    shifted = "TRY(ts_ns + CAST(? AS BIGINT))"
    con.execute(f"UPDATE raw_events SET ts_ns = CASE WHEN {shifted} BETWEEN -{TIME_LIMIT_NS} AND {TIME_LIMIT_NS}"
                f" THEN {shifted} END WHERE rank = ? AND ts_ns IS NOT NULL", [shift_ns, shift_ns, rank])


def _tally_notes(t: dict) -> list[tuple[str, str, int | None]]:
    notes = []
    odd = t["non_objects"] + t["args_not_object"]
    if odd:
        notes.append(("unexpected-types", "some events are not JSON objects, or have args that are not an "
                      "object; those values were read as NULL", odd))
    if t["duplicate_keys"]:
        notes.append(("duplicate-keys", "events with a key given twice; the last value was read (as Python's "
                      "json and JavaScript do)", t["duplicate_keys"]))
    if t["bad_args"]:
        which = ", ".join(f"{key}: {n}" for key, n in sorted(t["bad_args"].items()))
        notes.append(("bad-arg", f"args values that are not integers in range were read as NULL ({which})",
                      sum(t["bad_args"].values())))
    if t["non_finite"]:
        notes.append(("non-finite", "events with NaN or Infinity values (not JSON); those values were read "
                      "as NULL", t["non_finite"]))
    if t["too_deep"]:
        notes.append(("too-deep", "events nested more than 128 levels deep were skipped", t["too_deep"]))
    if t["invalid_utf8"]:
        notes.append(("invalid-utf8", "invalid UTF-8 in event names or args; replaced with U+FFFD",
                      t["invalid_utf8"]))
    if t["bad_step_numbers"]:
        notes.append(("bad-step-number", "ProfilerStep#N names whose N is too large for a step number; "
                      "those steps were not used", t["bad_step_numbers"]))
    return notes


# Chrome "duration" events: a B (begin) and the next E (end) on the same thread close a range,
# nested like a stack. Matched pairs become one complete (X) event (the B row, with the
# duration), so steps and ops written as B/E work like Kineto's X events. Ties in ts keep
# the file order (rowid).
BEGIN_END_PAIRS_SQL = """
CREATE OR REPLACE TEMP TABLE _begin_end AS
WITH be AS (
    SELECT rowid AS rid, pid, tid, ph, name, ts_ns,
           sum(CASE ph WHEN 'B' THEN 1 ELSE -1 END) OVER (
               PARTITION BY pid, tid ORDER BY ts_ns, rowid ROWS UNBOUNDED PRECEDING) AS depth
    FROM raw_events WHERE rank = $rank AND ph IN ('B', 'E') AND ts_ns IS NOT NULL
),
leveled AS (SELECT *, CASE ph WHEN 'B' THEN depth ELSE depth + 1 END AS level FROM be),
paired AS (
    SELECT *, lead(ph) OVER w AS next_ph, lead(rid) OVER w AS next_rid,
           lead(ts_ns) OVER w AS next_ts, lead(name) OVER w AS next_name
    FROM leveled
    WINDOW w AS (PARTITION BY pid, tid, level ORDER BY ts_ns, rid)
)
SELECT rid AS begin_rid, next_rid AS end_rid, next_ts - ts_ns AS dur_ns, next_name AS end_name
FROM paired WHERE ph = 'B' AND next_ph = 'E'
"""


def _convert_begin_end(con, rank: int) -> tuple[int, list[tuple[str, str, int | None]]]:
    """Matched B/E pairs -> X events; returns their number, and notes of it and of any
    unmatched B or E."""
    (n,) = con.execute("SELECT count(*) FROM raw_events WHERE rank = ? AND ph IN ('B', 'E')", [rank]).fetchone()
    if not n:
        return 0, []
    con.execute(BEGIN_END_PAIRS_SQL, {"rank": rank})
    con.execute("DELETE FROM raw_events WHERE rowid IN (SELECT end_rid FROM _begin_end)")
    con.execute("""
        UPDATE raw_events SET ph = 'X', dur_ns = p.dur_ns, name = coalesce(raw_events.name, p.end_name)
        FROM _begin_end AS p WHERE raw_events.rowid = p.begin_rid
    """)
    (pairs,) = con.execute("SELECT count(*) FROM _begin_end").fetchone()
    con.execute("DROP TABLE _begin_end")
    (unmatched,) = con.execute("SELECT count(*) FROM raw_events WHERE rank = ? AND ph IN ('B', 'E')",
                               [rank]).fetchone()
    notes: list[tuple[str, str, int | None]] = []
    if pairs:
        notes.append(("begin-end", "B/E (begin/end) event pairs were read as complete events", pairs))
    if unmatched:
        notes.append(("unmatched-begin-end", "B (begin) or E (end) events without their other half were skipped",
                      unmatched))
    return pairs, notes
