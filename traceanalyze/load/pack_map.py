"""Several small ranks mapped in one DuckDB database: the per-rank tables built once per pack.

A small rank's map is mostly DuckDB's fixed cost (a database, the macros, some 40 statements over
few rows). A pack of small ranks (packing.py) therefore reads each rank's trace into its own
raw_events.parquet as map.py does, builds the per-rank tables once over all of them (each is
keyed by rank: no per-rank statement looks across ranks) and writes each rank's shard from its
own rows. Each rank keeps its own lock, shard, manifest and outcome:

- a rank whose trace cannot be read fails alone: the others go on;
- a failure after the reads (a table that cannot be built, a full disk) maps the unfinished
  ranks again one at a time (map.py), so that each fails or succeeds alone.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from pathlib import Path

import duckdb

import traceanalyze.db as tracedb

from traceanalyze.errors import TraceanalyzeError
from traceanalyze.load.discover import TraceFile, trace_bytes
from traceanalyze.load.map import (READER_FILES, derive_rank_tables, fetched, insert_native_tables, insert_rank_rows,
                                   map_rank_locked, open_private_database, rank_manifest, rank_row_counts,
                                   read_rank_events, record_event_issues, shard_files)
from traceanalyze.load.map_outcome import MapOutcome, failed, outcome_of, trace_name
from traceanalyze.load.memory import staging_dir
from traceanalyze.load.rank_read import RankRead
from traceanalyze.load.read import DERIVED_TABLES, view_raw_events
from traceanalyze.load.shards import SHARD_TABLES, ShardStore, rank_lock
from traceanalyze.load.stale import staging_prefix


def map_ranks_together(files: list[TraceFile], shards_root: str, threads: int | None) -> list[MapOutcome]:
    """Map the ranks of `files` (a pack) in one database; one outcome per rank, in rank order."""
    ordered = sorted(files, key=lambda tf: tf.rank)
    store = ShardStore(shards_root)
    with contextlib.ExitStack() as locks:
        for tf in ordered:  # (in rank order: two packs never wait for each other in a circle)
            locks.enter_context(rank_lock(store, tf.rank))
        outcomes: dict[int, MapOutcome] = {}
        try:
            _together(ordered, store, threads, outcomes)
        except (TraceanalyzeError, duckdb.Error, OSError):
            # after the reads: each unfinished rank again on its own (map.py), failing alone
            for tf in ordered:
                if tf.rank not in outcomes:
                    outcomes[tf.rank] = outcome_of(tf, lambda tf=tf: map_rank_locked(tf, store, threads))
        except BaseException:  # interrupted: no tables without a manifest stay behind
            for tf in ordered:
                if tf.rank not in outcomes:
                    store.drop_unfinished(tf.rank)
            raise
        return [outcomes[tf.rank] for tf in ordered]


def _together(files: list[TraceFile], store: ShardStore, threads: int | None,
              outcomes: dict[int, MapOutcome]) -> None:
    """Fill `outcomes` with the ranks that failed to read and, once every table is written,
    with the others (an exception before then leaves them out: the caller maps them again)."""
    for tf in files:
        store.forget(tf.rank)
    work = Path(tempfile.mkdtemp(prefix=staging_prefix(), dir=staging_dir(files)))
    try:
        con = open_private_database(work, sum(trace_bytes(tf) for tf in files), threads)
        try:
            reads: list[tuple[TraceFile, RankRead, Path]] = []
            derived: dict[int, dict[str, int]] = {}  # each rank's derived tables' row counts
            for tf in files:
                target = work / "out" / str(tf.rank) if store.remote else Path(store.rank_dir(tf.rank))
                target.mkdir(parents=True, exist_ok=True)
                try:
                    local = fetched(tf, _folder(work / f"fetch-{tf.rank}"))
                    read = read_rank_events(con, tf, local, target / "raw_events.parquet", threads or 0, work)
                    derived[tf.rank] = derive_rank_tables(tf, read, target)
                except TraceanalyzeError as exc:  # this rank's trace: it fails alone
                    outcomes[tf.rank] = failed(tf, exc)
                    store.drop_unfinished(tf.rank)
                    continue
                reads.append((tf, read, target))
            if not reads:
                return
            insert_rank_rows(con, [(tf, read) for tf, read, _ in reads])
            view_raw_events(con, [target / "raw_events.parquet" for _, _, target in reads])
            insert_native_tables(con, [target for _, _, target in reads])
            record_event_issues(con)
            written = _write_pack_tables(con, store, reads, work / "parts", derived)
            finished = []
            for tf, read, _ in reads:
                rows, table_files, write_cpu = written[tf.rank]
                read.stage_s["write_tables_cpu"] = write_cpu
                finished.append((tf, rank_manifest(tf, read, rows, table_files)))
        finally:
            con.close()
        for tf, manifest in finished:  # manifests last: a shard is trusted once every table is written
            store.write_manifest(tf.rank, manifest)
            outcomes[tf.rank] = MapOutcome(tf.rank, trace_name(tf), manifest)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _write_pack_tables(con, store: ShardStore, reads: list[tuple[TraceFile, RankRead, Path]], parts: Path,
                       derived: dict[int, dict[str, int]]) -> dict[int, tuple[dict[str, int], dict[str, dict], float]]:
    """Each rank's rows of every per-rank table as its shard's Parquet file: one partitioned
    COPY per table for the whole pack (one thread, so each file keeps the table's row order),
    each rank's file then moved into its shard folder. Returns per rank its row counts, its
    files (the manifest's) and the CPU seconds of its share."""
    t0 = time.process_time()
    parts.mkdir()
    ranks = [tf.rank for tf, _, _ in reads]
    rows: dict[int, dict[str, int]] = {rank: {} for rank in ranks}
    (threads,) = con.execute("SELECT current_setting('threads')").fetchone()
    con.execute("SET threads = 1")
    try:
        all_counts = rank_row_counts(con)
        for table in SHARD_TABLES:
            counts = all_counts[table]
            for rank in ranks:
                rows[rank][table] = derived[rank][table] if table in DERIVED_TABLES else counts.get(rank, 0)
            if table in READER_FILES:  # (the reader wrote each rank's file)
                continue
            folder = parts / table
            if any(counts.get(rank) for rank in ranks):
                con.execute(f"COPY (SELECT *, rank AS _pack_rank FROM {table}) TO {tracedb.sql_string(folder)}"
                            " (FORMAT parquet, COMPRESSION zstd, PARTITION_BY (_pack_rank))")
            empty = None
            for tf, _, target in reads:
                found = sorted((folder / f"_pack_rank={tf.rank}").glob("*.parquet"))
                if len(found) == 1:
                    shutil.move(found[0], target / f"{table}.parquet")
                    continue
                if found:  # (DuckDB split a rank's rows over files: that rank's rows written again)
                    con.execute(f"COPY (SELECT * FROM {table} WHERE rank = {int(tf.rank)}) TO "
                                f"{tracedb.sql_string(target / f'{table}.parquet')} (FORMAT parquet, COMPRESSION zstd)")
                    continue
                if empty is None:  # no rows of that rank: the table's empty file
                    empty = parts / f"{table}.empty.parquet"
                    con.execute(f"COPY (SELECT * FROM {table} LIMIT 0) TO {tracedb.sql_string(empty)}"
                                " (FORMAT parquet, COMPRESSION zstd)")
                shutil.copyfile(empty, target / f"{table}.parquet")
    finally:
        con.execute(f"SET threads = {int(threads)}")
    share = (time.process_time() - t0) / len(reads)
    out = {}
    for tf, _, target in reads:
        t1 = time.process_time()
        files = shard_files(store, tf.rank, target)
        out[tf.rank] = (rows[tf.rank], files, share + time.process_time() - t1)
    return out


def _folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


