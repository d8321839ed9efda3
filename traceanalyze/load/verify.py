"""Is a shard what its map wrote? Checked before the reduce reads a single row of it.

A shard folder may sit on a shared filesystem for days: a half-copied file, a file of another
rank copied over one of this rank's, a disk error. Each check names the file at fault:

  1. the manifest is this folder's rank's;
  2. every table's Parquet file has the size and the xxh3_128 hash its manifest records
     (a file that fails is never opened as Parquet);
  3. every file's `rank` column holds this rank only (its footer's statistics answer this
     without reading the rows).

A shard that fails is mapped again from its trace when the trace is reachable, else left out
of the analysis with a `shard-corrupt` warning (load/__init__.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from traceanalyze.lazy_import import duckdb
from traceanalyze.load.shards import HASH, MANIFEST, SHARD_TABLES, file_digest


@dataclass(frozen=True)
class ShardProblem:
    """Why a rank's shard is not what its map wrote."""

    rank: int
    file: str  # the file at fault (a Parquet file, or the manifest)
    problem: str

    def message(self) -> str:
        return f"damaged shard file {self.file}: {self.problem}"


def verify_shard(folder: str, manifest: dict, rank: int,
                 con: duckdb.DuckDBPyConnection | None = None) -> ShardProblem | None:
    """The first problem of the shard in the local `folder` (rank `rank`), or None when every
    file is the one its manifest describes. `con`: a DuckDB connection to read the files'
    statistics with (one for many shards saves opening one each time)."""
    problem = _files_problem(folder, manifest, rank)
    if problem is not None:
        return problem
    if con is None:
        with duckdb.connect(config={"threads": 1}) as own:
            return _rank_problem(own, folder, rank)
    return _rank_problem(con, folder, rank)


def verify_shards(shards: list[tuple[str, dict, int]], con: duckdb.DuckDBPyConnection) -> dict[int, ShardProblem | None]:
    """`verify_shard` of many shards ((folder, manifest, rank) each): the same answers, the
    rank columns of all of them read with one query per table (a query per shard costs 10 ms:
    10 s at 1,024 ranks)."""
    out: dict[int, ShardProblem | None] = {}
    whole = []
    sizes: dict[str, int] = {}  # (each file's size, as its manifest records and _files_problem checked)
    for folder, manifest, rank in shards:
        out[rank] = _files_problem(folder, manifest, rank)
        if out[rank] is None:
            whole.append((folder, rank))
            sizes.update((os.path.normpath(os.path.join(folder, name)), entry["size_bytes"])
                         for name, entry in manifest["files"].items())
    if not whole:
        return out
    try:
        strays = _stray_rows(con, whole, sizes)
    except duckdb.Error:  # (the hashes matched, so this is rare: each shard on its own names the file)
        for folder, rank in whole:
            out[rank] = _rank_problem(con, folder, rank)
        return out
    for table in SHARD_TABLES:  # (the first table of a shard with stray rows is the one named, as verify_shard does)
        for folder, rank in whole:
            if out[rank] is None and ((folder, rank), table) in strays:
                n, other = strays[((folder, rank), table)]
                out[rank] = _stray_problem(rank, os.path.join(folder, f"{table}.parquet"), n, other)
    return out


def verify_files(shards: list[tuple[str, dict, int]]) -> dict[int, ShardProblem | None]:
    """Checks 1 and 2 alone (the manifest is the rank's; every file has its recorded size and
    hash) of many shards ((folder, manifest, rank) each). Enough for files whose manifests are
    the ones a check of the rank column passed before (load/trace_dir.py: a re-run)."""
    return {rank: _files_problem(folder, manifest, rank) for folder, manifest, rank in shards}


def _stray_rows(con, shards: list[tuple[str, int]],
                sizes: dict[str, int]) -> dict[tuple[tuple[str, int], str], tuple[int, int]]:
    """((folder, rank), table) -> (rows, the smallest other rank) of the files whose `rank`
    column holds another rank than their folder's. Raises duckdb.Error for a file it cannot
    read, or a row it cannot tell the file of. `sizes`: the files' bytes (normalized paths);
    one of STATISTICS_MIN_BYTES or more is checked from its footer first."""
    strays: dict[tuple[tuple[str, int], str], tuple[int, int]] = {}
    large = {path: rank for folder, rank in shards for table in SHARD_TABLES
             if sizes.get(path := os.path.normpath(os.path.join(folder, f"{table}.parquet")), 0)
             >= STATISTICS_MIN_BYTES}
    proven = _proven_by_statistics(con, large) if large else set()
    for table in SHARD_TABLES:
        owner = {path: (folder, rank) for folder, rank in shards
                 if (path := os.path.normpath(os.path.join(folder, f"{table}.parquet"))) not in proven}
        if not owner:
            continue
        rows = con.execute(
            "SELECT filename, rank, count(*) FROM read_parquet(?, filename = true, hive_partitioning = false)"
            " WHERE rank IS NOT NULL GROUP BY filename, rank", [list(owner)]).fetchall()
        for filename, rank, n in rows:
            key = owner.get(os.path.normpath(filename))
            if key is None:
                raise duckdb.InvalidInputException(f"a row of {filename!r}, which is not one of the files read")
            if rank != key[1]:
                seen, other = strays.get((key, table), (0, rank))
                strays[(key, table)] = (seen + n, min(other, rank))
    return strays


# a shard file from this size up has its rank checked from its footer's statistics; a smaller
# one's rows are counted (reading a footer costs DuckDB ~0.4 ms a file: at 1,024 small ranks,
# 24,576 files, 9 s against 4.7 s counting them; a 200 MB trace's shard 21 ms against 103 ms)
STATISTICS_MIN_BYTES = 1 << 20


def _proven_by_statistics(con, expected: dict[str, int]) -> set[str]:
    """The files of `expected` (path -> rank) whose footers prove it: every row group has
    statistics of its `rank` column, and they hold no value but the file's rank (or only
    nulls). A file they do not prove (no statistics, another rank in a row group) has its rows
    counted."""
    files = list(expected)
    groups = {os.path.normpath(name): n for name, n in con.execute(
        "SELECT file_name, num_row_groups FROM parquet_file_metadata(?)", [files]).fetchall()}
    proven_groups: dict[str, int] = {}  # (row groups whose rank statistics hold the file's rank alone)
    for name, values, low, high, nulls in con.execute(
            "SELECT file_name, num_values, stats_min_value, stats_max_value, stats_null_count"
            " FROM parquet_metadata(?) WHERE path_in_schema = 'rank'", [files]).fetchall():
        path = os.path.normpath(name)
        if nulls is not None and (nulls == values or low == high == str(expected.get(path))):
            proven_groups[path] = proven_groups.get(path, 0) + 1
    return {path for path, n in groups.items() if proven_groups.get(path, 0) == n}


def _files_problem(folder: str, manifest: dict, rank: int) -> ShardProblem | None:
    """Checks 1 and 2: the manifest is this rank's, and every file has its recorded size and hash."""
    if manifest.get("rank") != rank:
        return ShardProblem(rank, os.path.join(folder, MANIFEST),
                            f"the manifest of rank {manifest.get('rank')!r}, in the folder of rank {rank}")
    entries = manifest.get("files")
    if not isinstance(entries, dict):
        return ShardProblem(rank, os.path.join(folder, MANIFEST), "it lists no file sizes or hashes")
    for table in SHARD_TABLES:
        problem = _file_problem(os.path.join(folder, f"{table}.parquet"), entries.get(f"{table}.parquet"))
        if problem:
            return ShardProblem(rank, os.path.join(folder, f"{table}.parquet"), problem)
    return None


def _file_problem(path: str, entry) -> str | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("size_bytes"), int) \
            or not isinstance(entry.get(HASH), str):
        return "no size or hash for it in the manifest"
    try:
        size = os.path.getsize(path)
    except OSError:
        return "missing"
    if size != entry["size_bytes"]:
        return (f"{size:,} bytes, but its manifest says {entry['size_bytes']:,} "
                "(cut short, or written over after the map)")
    try:
        digest = file_digest(path)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    if digest != entry[HASH]:
        return f"its bytes do not match the manifest's {HASH} hash (changed after the map)"
    return None


def _rank_problem(con, folder: str, rank: int) -> ShardProblem | None:
    """A file whose `rank` column holds another rank (read from the files' statistics). The
    folder's name `rank=N` is not read as a column (hive_partitioning = false): it would hide
    the file's own column."""
    paths = [os.path.join(folder, f"{table}.parquet") for table in SHARD_TABLES]
    query = " UNION ALL ".join(
        f"SELECT {i} AS i, count(*) AS n, min(rank) AS other"
        " FROM read_parquet(?, hive_partitioning = false) WHERE rank <> ?"
        for i in range(len(paths)))
    params = [value for path in paths for value in (path, rank)]
    try:
        rows = con.execute(query, params).fetchall()
    except duckdb.Error:  # (the hashes matched, so this is rare: find the file, name it)
        return _unreadable(con, paths, rank)
    for i, n, other in sorted(rows):
        if n:
            return _stray_problem(rank, paths[i], n, other)
    return None


def _stray_problem(rank: int, path: str, rows: int, other: int) -> ShardProblem:
    return ShardProblem(rank, path, f"it holds {rows:,} rows of rank {other}, not of rank {rank} (its folder)")


def _unreadable(con, paths: list[str], rank: int) -> ShardProblem:
    for path in paths:
        try:
            con.execute("SELECT count(*) FROM read_parquet(?, hive_partitioning = false) WHERE rank <> ?",
                        [path, rank]).fetchall()
        except duckdb.Error as exc:
            first = " ".join(str(exc).split())[:200]
            return ShardProblem(rank, path, f"it cannot be read as a shard table ({first})")
    return ShardProblem(rank, os.path.dirname(paths[0]), "it cannot be read as a shard")
