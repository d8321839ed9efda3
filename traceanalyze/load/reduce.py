"""The reduce stage: a shard set -> trace.duckdb (per-rank tables + cross-rank tables).

Per-rank tables are views over the exact Parquet files of the selected ranks
(`read_parquet([...])`), or copied into the database when the shard set is small
(MATERIALIZE_MAX_BYTES): a small job's trace.duckdb is then one self-contained file, a large
one's reads the shards in place and never holds every event. `ranks` and `load_issues` are
always tables (align.py updates them). Then the cross-rank tables (db/tables/cross_rank/),
the checks that the ranks belong to one run, and clock alignment.
"""

from __future__ import annotations

import os
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

import traceanalyze.db as tracedb
from traceanalyze.analysis.align import align_ranks
from traceanalyze.errors import TraceFormatError
from traceanalyze.lazy_import import duckdb
from traceanalyze.load.groups import infer_groups
from traceanalyze.load.pipelines import infer_pipelines
from traceanalyze.load.shards import MANIFEST, SHARD_TABLES, ShardStore, is_current
from traceanalyze.load.verify import ShardProblem, verify_shards

# a shard set up to this size (Parquet bytes, all ranks) is copied into trace.duckdb. Copying
# costs DuckDB 0.15-0.3 CPU s per MB of Parquet (it decodes and recompresses every row: a
# 500 MB trace's 29 MB shard took 8 CPU s and 860 MB of RAM, against 0.6 s as views) and buys
# the analysis nothing (the 200 MB CPU trace's 8 MB shard: 1.3 CPU s to copy; analyzed over
# views in 3.0 CPU s instead of 4.0), so only jobs up to about 50 MB of JSON get a
# self-contained file.
MATERIALIZE_MAX_BYTES = 2 << 20
TABLES_ALWAYS_COPIED = ("ranks", "pg_configs", "load_issues")


@dataclass(frozen=True)
class Shard:
    """One rank's shard as local files."""

    rank: int
    folder: str  # local folder holding <table>.parquet
    manifest: dict

    def table(self, name: str) -> str:
        return os.path.join(self.folder, f"{name}.parquet")


def localize(store: ShardStore, ranks: list[int], cache_root: str) -> dict[int, str]:
    """Local folders of the ranks' shards: in place for a local store; a remote one is
    downloaded into `cache_root`, skipping ranks whose cached manifest is unchanged."""
    if not store.remote:
        return {rank: store.rank_dir(rank) for rank in ranks}
    cache = ShardStore(cache_root)
    fs = store.fs()
    out = {}
    for rank in ranks:
        remote_manifest = store.read_manifest(rank)
        folder = cache.rank_dir(rank)
        if remote_manifest is None:  # (no shard there: nothing to fetch)
            cache.forget(rank)
        elif cache.read_manifest(rank) != remote_manifest:
            cache.forget(rank)
            os.makedirs(folder, exist_ok=True)
            for table in SHARD_TABLES:
                fs.get_file(store.table_path(rank, table), os.path.join(folder, f"{table}.parquet"))
            cache.write_manifest(rank, remote_manifest)
        out[rank] = folder
    return out


def shard_bytes(shards: list[Shard]) -> int:
    return sum(os.path.getsize(s.table(t)) for s in shards for t in SHARD_TABLES)


def attach_shards(con: duckdb.DuckDBPyConnection, shards: list[Shard], materialize: bool) -> None:
    """The per-rank tables of every shard: copied, or as views over their Parquet files."""
    tracedb.create_schema(con)
    tracedb.create_macros(con)
    in_schema = {t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'").fetchall()}
    for table in SHARD_TABLES:
        source = f"read_parquet({tracedb.sql_string_list(s.table(table) for s in shards)}, hive_partitioning = false)"
        if table in in_schema and (materialize or table in TABLES_ALWAYS_COPIED):
            con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM {source}")
        elif materialize:
            con.execute(f"CREATE TABLE {table} AS SELECT * FROM {source}")
        else:
            con.execute(f"DROP TABLE IF EXISTS {table}")
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM {source}")


def record_notes(con, rows: list[tuple]) -> None:
    """(rank, file, kind, severity, message, count) rows about the whole load."""
    if rows:
        con.executemany("INSERT INTO load_issues VALUES (?, ?, ?, ?, ?, ?)", rows)


def cross_rank(con: duckdb.DuckDBPyConnection, shards: list[Shard]) -> None:
    """Process groups of gloo collectives, pipelines from the send / recv traffic, cross-rank tables, the one-run check, alignment and clock offsets."""
    # (each part's memory handed back before the next: the peak is the biggest part, not the sum)
    tracedb.release_freed_memory(con)
    infer_groups(con)
    infer_pipelines(con)
    tracedb.release_freed_memory(con)
    for name in tracedb.cross_rank_sql_files():
        tracedb.build_tables(con, [name])
        tracedb.release_freed_memory(con)
    check_one_run(con, {s.rank: s.manifest.get("host_name") for s in shards})
    align_ranks(con)
    tracedb.release_freed_memory(con)


def check_one_run(con, hosts: dict[int, str | None]) -> None:
    """Ranks recorded on one host share its clock, so their profiling windows must overlap in
    time; when they do not, the files come from different runs (or windows) of the job. The
    run is the window that overlaps most of the host's others (ties: the earliest); the error
    names the earliest rank outside it, so one file with a broken clock is the one named,
    whichever side of the others it lies."""
    windows = {rank: (lo, hi) for rank, lo, hi in con.execute(
        "SELECT rank, min(ts_ns), max(end_ns) FROM steps GROUP BY rank").fetchall()}
    files = dict(con.execute("SELECT rank, file FROM ranks").fetchall())
    by_host: dict[str, list[int]] = {}
    for rank, host in hosts.items():
        if isinstance(host, str) and host and rank in windows:
            by_host.setdefault(host, []).append(rank)
    for host, ranks in sorted(by_host.items()):
        ranks.sort(key=lambda r: (windows[r], r))
        starts = [windows[r][0] for r in ranks]
        ends = sorted(windows[r][1] for r in ranks)
        # (the windows overlapping rank r's: those starting by its end, less those ending before its start)
        overlaps = {r: bisect_right(starts, windows[r][1]) - bisect_left(ends, windows[r][0]) for r in ranks}
        run = max(ranks, key=lambda r: overlaps[r])  # (the first of the most: the earliest window)
        lo, hi = windows[run]
        outside = [r for r in ranks if windows[r][0] > hi or windows[r][1] < lo]
        if not outside:
            continue
        rank = outside[0]
        inside = sorted(set(ranks) - set(outside))
        like = f"rank {inside[0]}" if len(inside) == 1 else (
            "ranks " + ", ".join(map(str, inside)) if len(inside) <= 8 else f"ranks {inside[0]}-{inside[-1]} ({len(inside)})")
        after = windows[rank][0] > hi
        gap_s = (windows[rank][0] - hi if after else lo - windows[rank][1]) / 1e9

        def when(theirs: str) -> str:
            return f"{gap_s:,.1f} s {'after' if after else 'before'} {theirs} {'ended' if after else 'began'}"

        if _bad_time_base(con, rank):
            raise TraceFormatError(
                f"rank {rank}'s baseTimeNanoseconds is not a usable time base: its times, read as absolute, put "
                f"its profiled steps {when(f'those of {like} (host {host!r})')}", files.get(rank))
        raise TraceFormatError(
            f"rank {rank} was recorded on host {host!r} like {like}, but its profiled steps ran {when('theirs')}: "
            "the files come from different runs or profiling windows", files.get(rank))


def _bad_time_base(con, rank: int) -> bool:
    """Whether the rank's map noted an unusable time base (bad-time-base)."""
    return con.execute("SELECT 1 FROM load_issues WHERE rank = ? AND kind = 'bad-time-base' LIMIT 1",
                       [rank]).fetchone() is not None


def usable_shards(store: ShardStore, ranks: list[int], cache_root: str,
                  verified: frozenset[int] = frozenset()) -> tuple[list[Shard], list[int], list[ShardProblem]]:
    """(current shards whose files are intact, ranks whose shard is missing, incomplete or of
    another version, the problems of damaged shards). Ranks in `verified` were checked by
    this process already (load/verify.py); a damaged shard is never read as Parquet."""
    folders = localize(store, ranks, cache_root)
    shards, stale, damaged = [], [], []
    current = []
    for rank in ranks:
        folder = folders[rank]
        manifest = ShardStore(folder.rsplit(os.sep, 1)[0]).read_manifest(rank) \
            if os.path.exists(os.path.join(folder, MANIFEST)) else None
        if not is_current(manifest):
            stale.append(rank)
            continue
        current.append((folder, manifest, rank))
    unchecked = [c for c in current if c[2] not in verified]
    problems = {}
    if unchecked:  # (a connection costs a small load 25 ms: only when there is something to check)
        with duckdb.connect(config={"threads": 1}) as con:  # (reads the files' statistics)
            problems = verify_shards(unchecked, con)
    for folder, manifest, rank in current:
        problem = problems.get(rank)
        if problem is None:
            shards.append(Shard(rank, folder, manifest))
        else:
            damaged.append(_in_store(problem, store, cache_root))
    return shards, stale, damaged


def _in_store(problem: ShardProblem, store: ShardStore, cache_root: str) -> ShardProblem:
    """A problem of a downloaded copy names the object in the bucket; the copy is dropped, so
    the next run fetches it again (the download may be what went wrong)."""
    if not store.remote:
        return problem
    ShardStore(cache_root).forget(problem.rank)
    name = os.path.basename(problem.file)
    return ShardProblem(problem.rank, f"{store.rank_dir(problem.rank)}/{name}", problem.problem)
