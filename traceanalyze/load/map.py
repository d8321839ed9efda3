"""The map stage: one rank's trace -> its shard (every table that needs only that rank, as Parquet).

`map_rank` runs anywhere (this process, a pool worker, a Ray task, a batch job): the native
reader writes the rank's events straight into its shard file raw_events.parquet, the
one-pass tables (read.NATIVE_TABLES) beside it, and from those the other per-rank tables
(read.DERIVED_TABLES); the rank's own rows of `ranks`, `pg_configs` and `load_issues` (with
the events' issues the reader counted) are written beside them, and the manifest last. A
private, memory-limited DuckDB database is opened only for a trace whose rows need fixing (B/E
pairs, a time base written after the events, Perfetto protobuf).
It holds one rank at a time; nothing in it looks at another rank.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from pathlib import Path

import traceanalyze.db as tracedb
from traceanalyze.errors import TraceanalyzeError
from traceanalyze.lazy_import import duckdb
from traceanalyze.load.discover import TraceFile
from traceanalyze.load.memory import limit_memory, spill_folder, staging_folder
from traceanalyze.load.rank_read import RankRead
from traceanalyze.load.read import (
    DERIVED_TABLES,
    NATIVE_TABLES,
    base_time_ns,
    write_derived_tables,
    write_raw_events,
    write_table_rows,
)
from traceanalyze.load.shards import SHARD_TABLES, ShardStore, file_entry, new_manifest, rank_lock
from traceanalyze.load.source import estimated_uncompressed_bytes

# A map's private database (one rank's, or a pack's) is in memory when its trace is at most
# this big (JSON bytes, estimated for gzip): a small rank's map is then mostly DuckDB's fixed
# cost, and a database file adds a third to it (its writes and fsyncs). A bigger one is a file
# (in RAM-backed /dev/shm when it surely fits, see memory.py), whose blocks DuckDB can evict
# under the limit.
IN_MEMORY_MAX_BYTES = 64 << 20

# the shard's files the native reader writes itself
READER_FILES = ("raw_events", *NATIVE_TABLES, *DERIVED_TABLES)

# notes of the read that are choices we made, not data lost or doubtful
INFO_KINDS = {"begin-end", "no-steps", "range-profiler-kernels"}


def map_rank(tf: TraceFile, shards_root: str, threads: int | None = None) -> dict:
    """Map one rank into the shard folder `shards_root`; returns its manifest.

    Bad input raises TraceanalyzeError naming the file; the rank's old shard is then gone
    (its manifest is removed before anything is written), so no later run trusts it.
    A second map of the same rank into the same folder waits for the first (shards.rank_lock).
    """
    store = ShardStore(shards_root)
    with rank_lock(store, tf.rank):
        return map_rank_locked(tf, store, threads)


def map_rank_locked(tf: TraceFile, store: ShardStore, threads: int | None = None) -> dict:
    """`map_rank` for a caller that holds the rank's lock (shards.rank_lock)."""
    store.forget(tf.rank)
    with staging_folder([tf]) as work, spill_folder() as spill:
        try:
            local = fetched(tf, work)
            target = work / "out" if store.remote else Path(store.rank_dir(tf.rank))
            target.mkdir(parents=True, exist_ok=True)
            with PrivateDatabase(work, estimated_uncompressed_bytes(local.path), threads) as database:
                read = read_rank_events(database, tf, local, target / "raw_events.parquet", threads or 0, spill)
            derived = derive_rank_tables(tf, read, target, threads or 0)
            t0 = time.process_time()
            rows = {**read.table_rows, **derived, **write_rank_rows(tf, read, target)}
            files = shard_files(store, tf.rank, target)
            read.stage_s["write_tables_cpu"] = time.process_time() - t0
            manifest = rank_manifest(tf, read, {table: rows[table] for table in SHARD_TABLES}, files)
            store.write_manifest(tf.rank, manifest)
            return manifest
        except BaseException:  # bad input, interrupted: no tables without a manifest stay behind
            store.drop_unfinished(tf.rank)
            raise


def fetched(tf: TraceFile, work: Path) -> TraceFile:
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


class PrivateDatabase:
    """A map's private database for `events_bytes` of trace (in memory when small, else a file in
    `work`, spilling there too: the raw tables and the memory limit), opened by the first call,
    for the rows of a trace that need fixing; most ranks never open it."""

    def __init__(self, work: Path, events_bytes: int, threads: int | None) -> None:
        self.work, self.events_bytes, self.threads = work, events_bytes, threads
        self.con: duckdb.DuckDBPyConnection | None = None

    def __call__(self) -> duckdb.DuckDBPyConnection:
        if self.con is None:
            path = ":memory:" if self.events_bytes <= IN_MEMORY_MAX_BYTES else self.work / "rank.duckdb"
            con = tracedb.open_quiet(path)
            try:
                tracedb.set_stage_threads(con, self.events_bytes, self.threads)
                con.execute(f"SET temp_directory = {tracedb.sql_string(self.work / 'spill')}")
                tracedb.create_schema(con)
                limit_memory(con, self.events_bytes)
            except BaseException:
                con.close()
                raise
            self.con = con
        return self.con

    def __enter__(self) -> PrivateDatabase:
        return self

    def __exit__(self, *exc) -> None:
        if self.con is not None:
            self.con.close()
            self.con = None


def rank_manifest(tf: TraceFile, read: RankRead, rows: dict[str, int], files: dict[str, dict]) -> dict:
    """The manifest of a rank's shard, with the read's notes and stage times."""
    manifest = new_manifest(tf, read.metadata.get("host_name"), read.events, read.events_bytes, rows, files)
    manifest["notes"] = [kind for kind, _, _ in read.notes]
    manifest["stage_s"] = {k: round(v, 4) for k, v in read.stage_s.items()}
    return manifest


def read_rank_events(database: PrivateDatabase, tf: TraceFile, local: TraceFile, raw_path: Path, threads: int,
                     scratch: Path | None = None) -> RankRead:
    """The rank's events into `raw_path` and its one-pass tables beside it (`database`: for rows
    that need fixing). `scratch`: the private folder of the reader's spilled rows. Bad input
    raises TraceanalyzeError naming the file."""
    try:
        read = write_raw_events(database, local, raw_path, threads, scratch)
    except TraceanalyzeError as exc:
        if exc.path == str(local.path) and tf.url:  # name the object, not its downloaded copy
            raise TraceanalyzeError(exc.problem, tf.url) from None
        raise
    return read


def derive_rank_tables(tf: TraceFile, read: RankRead, folder: Path, threads: int = 0) -> dict[str, int]:
    """The rank's derived tables (read.DERIVED_TABLES) built by the reader from its files in
    `folder`; returns their row counts, the CPU seconds in the read's stages (`tables_cpu`, and
    `table_cpu.<table>` for each, `table_cpu.inputs` reading the files back)."""
    configs, _ = _pg_config_rows_of(tf, read)
    t0 = time.process_time()
    rows, seconds = write_derived_tables(tf, folder, configs, threads)
    read.stage_s["tables_cpu"] = time.process_time() - t0
    read.stage_s.update({f"table_cpu.{table}": s for table, s in seconds.items()})
    return rows


# the shard tables the map writes itself: the rank's own rows
RANK_ROW_TABLES = ("ranks", "pg_configs", "load_issues")


def write_rank_rows(tf: TraceFile, read: RankRead, folder: Path) -> dict[str, int]:
    """The rank's rows of `ranks`, `pg_configs` and `load_issues` (its read's notes and the
    events' issues) as their Parquet files in `folder`, with db/schema.sql's columns; returns
    each table's rows."""
    configs, bad = _pg_config_rows_of(tf, read)
    issues = _issue_rows(tf, read)
    if bad:
        issues.append((tf.rank, tf.url or str(tf.path), "bad-pg-config", "warning",
                       "distributedInfo.pg_config entries without a group name or a list of ranks were skipped",
                       bad))
    rows = {"ranks": [_rank_row(tf, read)], "pg_configs": configs, "load_issues": issues}
    for table in RANK_ROW_TABLES:
        write_table_rows(folder / f"{table}.parquet", table, rows[table])
    return {table: len(rows[table]) for table in RANK_ROW_TABLES}


def _rank_row(tf: TraceFile, read: RankRead) -> tuple:
    """The rank's row of `ranks` (its clock offset is the reduce's, NULL here)."""
    devices = read.metadata.get("deviceProperties")
    device = devices[0].get("name") if isinstance(devices, list) and devices and isinstance(devices[0], dict) \
        else None
    device = device if isinstance(device, str) else None  # (a name that is not text is none)
    return (tf.rank, tf.rank_source, tf.url or str(tf.path), tf.size_bytes, tf.mtime_ns, read.events_bytes,
            tf.world_size, tf.backend, base_time_ns(read.metadata), device, read.truncated_at_byte is not None,
            None, host_name(read.metadata))


def host_name(metadata: dict) -> str | None:
    """The recording host: the top-level host_name (or hostname) key, when it is text."""
    for key in ("host_name", "hostname"):
        value = metadata.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _pg_config_rows_of(tf: TraceFile, read: RankRead) -> tuple[list[tuple], int]:
    """The rank's process groups (distributedInfo.pg_config) as `pg_configs` rows, and the
    entries that are not readable groups (counted as a load issue, never guessed)."""
    info = read.metadata.get("distributedInfo")
    configs = info.get("pg_config") if isinstance(info, dict) else None
    return pg_config_rows(tf.rank, configs) if isinstance(configs, list) else ([], 0)


def pg_config_rows(rank: int, configs: list) -> tuple[list[tuple], int]:
    """(pg_configs rows, entries skipped) of one rank's distributedInfo.pg_config. `ranks` is a
    list of ints, or the same list as a string ('[0, 1]', on-demand traces)."""
    rows, bad = [], 0
    for index, config in enumerate(configs):
        ranks = _group_ranks(config.get("ranks")) if isinstance(config, dict) else None
        name = config.get("pg_name") if isinstance(config, dict) else None
        if ranks is None or not isinstance(name, (str, int)) or isinstance(name, bool):
            bad += 1
            continue
        desc, backend, size = config.get("pg_desc"), config.get("backend_config"), config.get("pg_size")
        rows.append((rank, str(name), group_desc(desc), ranks,
                     size if isinstance(size, int) and not isinstance(size, bool) and 0 < size < 2**31 else len(ranks),
                     backend if isinstance(backend, str) else None, index))
    return rows, bad


def group_desc(text) -> str | None:
    """A group's description as the user should read it: None for none, '' and torch's
    'undefined' (a group created without one); only spaces are trimmed, as SQL's trim does (the
    SQL macro group_desc and the reader's kernels and cpu_ops read the events' alike)."""
    return text if isinstance(text, str) and text.strip(" ") not in ("", "undefined") else None


def _group_ranks(value) -> list[int] | None:
    if isinstance(value, str):
        text = value.strip()
        if not re.fullmatch(r"\[?\s*(\d+\s*(,\s*\d+\s*)*)?\]?", text):
            return None
        value = [int(v) for v in re.findall(r"\d+", text)]
    if not isinstance(value, list) or not value:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**31 for v in value):
        return None
    return value


def _issue_rows(tf: TraceFile, read: RankRead) -> list[tuple]:
    """The read's notes as `load_issues` rows (the file's truncation, the reader's counts, where the rank came from)."""
    file = tf.url or str(tf.path)
    rows = []
    if read.truncated_at_byte is not None:
        rows.append((tf.rank, file, "truncated", "warning",
                     f"file ends abruptly at byte {read.truncated_at_byte:,} (uncompressed): "
                     f"kept every complete event before the cut, lost the last "
                     f"{read.lost_bytes:,} bytes (an event cut in the middle, or the end of the file)", None))
    rows.extend((tf.rank, file, kind, "info" if kind in INFO_KINDS else "warning", message, count)
                for kind, message, count in [*read.notes, *read.event_issues])
    if tf.rank_source == "file name":
        said = (f"distributedInfo.rank {tf.unusable_rank} is not a rank number" if tf.unusable_rank
                else "no distributedInfo.rank in the trace")
        rows.append((tf.rank, file, "rank-from-name", "info", f"{said}; rank {tf.rank} taken from the file name", None))
    elif tf.rank_source == "single process":
        rows.append((tf.rank, file, "single-process", "info",
                     "no distributedInfo: a single-process run, analyzed as rank 0", None))
    return rows


def shard_files(store: ShardStore, rank: int, target: Path) -> dict[str, dict]:
    """The size and hash of each of the rank's table files in `target` (the manifest's), uploaded
    to the store when it is remote."""
    files = {f"{table}.parquet": file_entry(target / f"{table}.parquet") for table in SHARD_TABLES}
    if store.remote:
        fs = store.fs()
        for table in SHARD_TABLES:
            fs.put_file(str(target / f"{table}.parquet"), store.table_path(rank, table))
    return files


def worker_threads(workers: int) -> int:
    """DuckDB threads per map when `workers` maps run at once on this machine."""
    return max(1, (os.cpu_count() or 1) // max(1, workers))
