"""The map stage: one rank's trace -> its shard (every table that needs only that rank, as Parquet).

`map_rank` runs anywhere (this process, a pool worker, a Ray task, a batch job): it reads the
trace into a private, memory-limited DuckDB database, builds the per-rank tables
(db/tables/per_rank/*.sql), writes them under <shards>/rank=N/ and the manifest last.
It holds one rank at a time; nothing in it looks at another rank.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from pathlib import Path

import duckdb

from traceanalyze import db as tracedb
from traceanalyze.errors import TraceanalyzeError
from traceanalyze.load.discover import TraceFile
from traceanalyze.load.stale import staging_prefix
from traceanalyze.load.memory import limit_memory, relaxing_memory, staging_dir
from traceanalyze.load.read import RankRead, base_time_ns, read_rank
from traceanalyze.load.shards import SHARD_TABLES, ShardStore, new_manifest
from traceanalyze.load.source import estimated_uncompressed_bytes

# A rank's private database is in memory when its trace is at most this big (JSON bytes,
# estimated for gzip): a small rank's map is then mostly DuckDB's fixed cost, and a database
# file adds a third to it (its writes and fsyncs). A bigger one is a file (in RAM-backed
# /dev/shm when it surely fits, see memory.py), whose blocks DuckDB can evict under the limit.
IN_MEMORY_MAX_BYTES = 64 << 20

# notes of read_rank that are choices we made, not data lost or doubtful
INFO_KINDS = {"begin-end", "memory-limit-lifted"}


def map_rank(tf: TraceFile, shards_root: str, threads: int | None = None) -> dict:
    """Map one rank into the shard folder `shards_root`; returns its manifest.

    Bad input raises TraceanalyzeError naming the file; the rank's old shard is then gone
    (its manifest is removed before anything is written), so no later run trusts it.
    """
    store = ShardStore(shards_root)
    store.forget(tf.rank)
    work = Path(tempfile.mkdtemp(prefix=staging_prefix(), dir=staging_dir([tf])))
    try:
        local = _fetched(tf, work)
        small = estimated_uncompressed_bytes(local.path) <= IN_MEMORY_MAX_BYTES
        con = tracedb.open_quiet(":memory:" if small else work / "rank.duckdb")
        try:
            if threads:
                con.execute(f"SET threads = {int(threads)}")
            con.execute(f"SET temp_directory = '{work / 'spill'}'")
            read, notes = _build(con, tf, local)
            rows = _write_tables(con, store, tf.rank, work / "out")
        finally:
            con.close()
        manifest = new_manifest(tf, read.metadata.get("host_name"), read.events, read.events_bytes, rows)
        manifest["notes"] = notes
        store.write_manifest(tf.rank, manifest)
        return manifest
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _fetched(tf: TraceFile, work: Path) -> TraceFile:
    """The trace as a local file: an object in a bucket is downloaded into the private folder."""
    if not tf.url:
        return tf
    import fsspec

    fs, path = fsspec.core.url_to_fs(tf.url)
    local = work / Path(path).name
    try:
        fs.get_file(path, str(local))
    except Exception as exc:  # noqa: BLE001 - any client error: the object cannot be read
        raise TraceanalyzeError(f"cannot read the object ({type(exc).__name__}: {exc})", tf.url) from None
    return dataclasses.replace(tf, path=local)


def _build(con, tf: TraceFile, local: TraceFile) -> tuple[RankRead, list[str]]:
    tracedb.create_schema(con)
    tracedb.create_macros(con)
    limit_memory(con, estimated_uncompressed_bytes(local.path))
    try:
        read = read_rank(con, local)
    except TraceanalyzeError as exc:
        if exc.path == str(local.path) and tf.url:  # name the object, not its downloaded copy
            raise TraceanalyzeError(exc.problem, tf.url) from None
        raise
    _insert_rank(con, tf, read)
    _record_issues(con, tf, read)
    memory_notes: list[tuple[str, str]] = []
    relaxing_memory(con, lambda: _in_one_transaction(
        con, lambda: tracedb.build_tables(con, tracedb.per_rank_sql_files())), memory_notes)
    file = tf.url or str(tf.path)
    if memory_notes:
        con.executemany("INSERT INTO load_issues VALUES (?, ?, ?, 'info', ?, NULL)",
                        [(tf.rank, file, kind, message) for kind, message in memory_notes])
    _record_event_issues(con)
    return read, [kind for kind, _, _ in read.notes]


def _insert_rank(con, tf: TraceFile, read: RankRead) -> None:
    devices = read.metadata.get("deviceProperties")
    device = devices[0].get("name") if isinstance(devices, list) and devices and isinstance(devices[0], dict) \
        else None
    con.execute(
        "INSERT INTO ranks (rank, rank_source, file, file_bytes, file_mtime_ns, events_bytes, world_size,"
        " backend, base_ns, device_name, truncated, host_name) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [tf.rank, tf.rank_source, tf.url or str(tf.path), tf.size_bytes, tf.mtime_ns, read.events_bytes,
         tf.world_size, tf.backend, base_time_ns(read.metadata), device, read.truncated_at_byte is not None,
         host_name(read.metadata)])


def host_name(metadata: dict) -> str | None:
    """The recording host: the top-level host_name (or hostname) key, when it is text."""
    for key in ("host_name", "hostname"):
        value = metadata.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _record_issues(con, tf: TraceFile, read: RankRead) -> None:
    file = tf.url or str(tf.path)
    rows = []
    if read.truncated_at_byte is not None:
        rows.append((tf.rank, file, "truncated", "warning",
                     f"file ends abruptly at byte {read.truncated_at_byte:,} (uncompressed): "
                     f"kept every complete event before the cut, lost the last "
                     f"{read.lost_bytes:,} bytes (an event cut in the middle, or the end of the file)", None))
    rows.extend((tf.rank, file, kind, "info" if kind in INFO_KINDS else "warning", message, count)
                for kind, message, count in read.notes)
    if tf.rank_source == "file name":
        rows.append((tf.rank, file, "rank-from-name", "info",
                     f"no distributedInfo.rank in the trace; rank {tf.rank} taken from the file name", None))
    elif tf.rank_source == "single process":
        rows.append((tf.rank, file, "single-process", "info",
                     "no distributedInfo: a single-process run, analyzed as rank 0", None))
    if rows:
        con.executemany("INSERT INTO load_issues VALUES (?, ?, ?, ?, ?, ?)", rows)


def _record_event_issues(con) -> None:
    """Malformed events, counted: never dropped silently."""
    con.execute("""
        INSERT INTO load_issues
        SELECT e.rank, r.file, kind, 'warning', message, n FROM (
            SELECT rank, 'bad-ts' AS kind,
                   'events whose ts is missing, not a number or out of range were skipped' AS message,
                   count(*) AS n
            FROM raw_events WHERE ts_ns IS NULL AND ph IS NOT NULL AND ph <> 'M' GROUP BY rank
            UNION ALL
            SELECT rank, 'bad-dur', 'complete (X) events with a missing or negative dur were skipped', count(*)
            FROM raw_events WHERE ph = 'X' AND ts_ns IS NOT NULL AND (dur_ns IS NULL OR dur_ns < 0) GROUP BY rank
            UNION ALL
            SELECT rank, 'no-ph', 'events without a ph (phase) field, or not JSON objects, were skipped',
                   count(*)
            FROM raw_events WHERE ph IS NULL GROUP BY rank
            UNION ALL
            SELECT rank, 'duplicate-step',
                   'ProfilerStep#N names that occur more than once (' || string_agg(name, ', ' ORDER BY name)
                   || '): each such step spans all its occurrences', count(*)
            FROM (SELECT rank, name FROM raw_events
                  WHERE ph = 'X' AND name LIKE 'ProfilerStep#%' AND coalesce(cat, '') <> 'gpu_user_annotation'
                    AND ts_ns IS NOT NULL AND dur_ns >= 0
                  GROUP BY rank, name HAVING count(*) > 1)
            GROUP BY rank
        ) AS e JOIN ranks AS r USING (rank)
    """)
    con.execute("""
        INSERT INTO load_issues
        SELECT s.rank, r.file, 'no-steps', 'info',
               'no ProfilerStep#N annotations (profiled without a schedule): the whole trace is analyzed as one window',
               NULL
        FROM steps AS s JOIN ranks AS r USING (rank) WHERE s.synthetic
    """)


def _write_tables(con, store: ShardStore, rank: int, out: Path) -> dict[str, int]:
    """Every per-rank table as Parquet: straight into a local shard folder, else uploaded."""
    target = out if store.remote else Path(store.rank_dir(rank))
    target.mkdir(parents=True, exist_ok=True)
    rows = {}
    for table in SHARD_TABLES:
        (rows[table],) = con.execute(f"SELECT count(*) FROM {table}").fetchone()
        path = str(target / f"{table}.parquet").replace("'", "''")
        con.execute(f"COPY {table} TO '{path}' (FORMAT parquet, COMPRESSION zstd)")
    if store.remote:
        fs = store.fs()
        for table in SHARD_TABLES:
            fs.put_file(str(out / f"{table}.parquet"), store.table_path(rank, table))
    return rows


def worker_threads(workers: int) -> int:
    """DuckDB threads per map when `workers` maps run at once on this machine."""
    return max(1, (os.cpu_count() or 1) // max(1, workers))


def _in_one_transaction(con, action) -> None:
    """`action`'s statements committed once (each statement on its own commits and syncs)."""
    con.execute("BEGIN TRANSACTION")
    try:
        action()
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
