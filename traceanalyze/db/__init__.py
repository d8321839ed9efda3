"""The trace database: a DuckDB file with documented tables (schema.sql, tables/*.sql)."""

from __future__ import annotations

import csv
import functools
import os
import re
import time
from decimal import Decimal
from importlib import resources
from pathlib import Path

from traceanalyze.lazy_import import duckdb

SCHEMA_VERSION = "18"  # 18: kernels.launch_end_ns (the critical path joined the runtime table for it); 17: top_host_ops (built by the reader; the critical path read it by a window over every host op); 16: the per-rank tables built by the reader (native/src/derived; rank INTEGER everywhere, JSON args read strictly); 15: cpu_ops.self_ns, annotations.self_ns, kernels built by the reader; 13: house (kernels.counters, group_desc); 14: waits by time, pipelines from traffic, lateness start, the Flight Recorder tables (fr_*)


@functools.lru_cache(maxsize=None)
def _sql_text(name: str) -> str:
    """A file of the package's SQL (read once per process: a load reads some 30 of them)."""
    return resources.files("traceanalyze.db").joinpath(name).read_text(encoding="utf-8")


def _sql_files(folder: str) -> list[str]:
    found = resources.files("traceanalyze.db").joinpath(folder)
    return sorted(f"{folder}/{p.name}" for p in found.iterdir() if p.name.endswith(".sql"))


def shared_sql_files() -> list[str]:
    """Macros and named thresholds (tables/00_*.sql): applied before the tables of either stage."""
    return _sql_files("tables")


def _stage_shared_sql_files() -> list[str]:
    """The shared files a stage applies itself: the named thresholds. The macros are not among
    them: the stage's connection has them already (create_macros), and creating them again
    costs a small load a tenth of its time."""
    return [name for name in shared_sql_files() if name not in (*MACRO_FILES, SPECS_MACROS)]


def cross_rank_sql_files() -> list[str]:
    """Tables that compare ranks (the reduce stage, over every rank's tables), in order, for a
    connection with the macros (create_macros)."""
    return _stage_shared_sql_files() + _sql_files("tables/cross_rank")


def table_sql_files() -> list[str]:
    """Every derived-table SQL file in the order a one-database build applies them (the
    per-rank tables are the native reader's: native/src/derived)."""
    return shared_sql_files() + _sql_files("tables/cross_rank")


@functools.lru_cache(maxsize=None)
def schema_columns(table: str) -> tuple[tuple[str, str], ...]:
    """(column, type) of a table of schema.sql, in order: the files the map writes itself
    (ranks, pg_configs, load_issues) get the schema's columns from here."""
    found = re.search(rf"^CREATE TABLE {re.escape(table)} \((.*?)^\);", _sql_text("schema.sql"), re.MULTILINE | re.DOTALL)
    if found is None:
        raise KeyError(table)
    columns = []
    for line in found.group(1).splitlines():
        code = line.split("--", 1)[0].strip().rstrip(",").strip()
        if code:
            name, kind = code.split(None, 1)
            columns.append((name, kind))
    return tuple(columns)


def create_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create the raw tables (empty) and the kernel classification seed table."""
    con.execute(_sql_text("schema.sql"))
    con.execute("CREATE TABLE kernel_classes (priority INTEGER, cat_regex VARCHAR, name_regex VARCHAR, kind VARCHAR)")
    _insert_all(con, "kernel_classes", ["priority", "cat_regex", "name_regex", "kind"], kernel_classes())
    specs = list(csv.DictReader(_sql_text("gpu_specs.csv").splitlines()))
    columns = list(specs[0])
    _insert_all(con, "gpu_specs", columns,
                [[int(r["priority"]), r["name_regex"], r["gpu"], *(float(r[c]) if r[c] else None for c in columns[3:])]
                 for r in specs])


def _insert_all(con: duckdb.DuckDBPyConnection, table: str, columns: list[str], rows: list) -> None:
    """`rows` into `table` in one parameterized statement (executemany runs one per row: a
    small load's schema took 20 ms more). `table` and `columns` are ours, not a trace's."""
    values = ", ".join("(" + ", ".join("?" for _ in columns) + ")" for _ in rows)
    con.execute(f"INSERT INTO {table} ({', '.join(columns)}) VALUES {values}",
                [value for row in rows for value in row])


def build_tables(con: duckdb.DuckDBPyConnection, files: list[str] | None = None,
                 cpu_s: dict[str, float] | None = None) -> None:
    """Build the derived tables of `files` (default: every one) from raw_events (idempotent).
    `cpu_s`, when given, receives each file's CPU seconds (this process's, DuckDB's threads
    included) under the file's name without folder and suffix ('87_op_flops')."""
    for name in table_sql_files() if files is None else files:
        t0 = time.process_time()
        con.execute(_sql_text(name))
        if cpu_s is not None:
            stem = name.rsplit("/", 1)[-1].removesuffix(".sql")
            cpu_s[stem] = cpu_s.get(stem, 0.0) + time.process_time() - t0


def sql_string(value: Path | str) -> str:
    """`value` (the path of one of our own files) as an SQL string literal, for the statements
    DuckDB takes no parameter in (COPY ... TO, SET, a read_parquet list in a view)."""
    return "'" + str(value).replace("'", "''") + "'"


def sql_string_list(values) -> str:
    """`values` as an SQL list of string literals: ['a', 'b']."""
    return "[" + ", ".join(sql_string(v) for v in values) + "]"


@functools.lru_cache(maxsize=None)
def kernel_classes() -> list[tuple[int, str, str, str]]:
    """db/kernel_classes.csv's rows (priority, category expression, name expression, kind): the
    native reader classifies the kernels table's rows by them; the database keeps them too."""
    rows = csv.DictReader(_sql_text("kernel_classes.csv").splitlines())
    return [(int(r["priority"]), r["cat_regex"], r["name_regex"], r["kind"]) for r in rows]


@functools.lru_cache(maxsize=None)
def parameter(name: str) -> Decimal:
    """A named threshold of tables/00_parameters.sql (`SET VARIABLE name = number;`), for the
    tables the native reader builds (read once per process, not once per rank)."""
    found = re.search(rf"^SET VARIABLE {re.escape(name)} = ([0-9.]+);", _sql_text(PARAMETERS_FILE), re.MULTILINE)
    if found is None:
        raise KeyError(name)
    return Decimal(found.group(1))


PARAMETERS_FILE = "tables/00_parameters.sql"
# the files of macros (the rest of tables/00_*.sql sets variables); SPECS_MACROS read the gpu_specs table
MACRO_FILES = ("tables/00_macros.sql", "tables/00_flops.sql")
SPECS_MACROS = "tables/00_specs.sql"


def create_macros(con: duckdb.DuckDBPyConnection, temporary: bool = False) -> None:
    """This version's macros (tables/00_macros.sql): stored in the database when it is built,
    or `temporary` to a connection (read-only ones too), where they shadow those stored by
    another version, so rules and queries see the helpers they were written against."""
    def run(sql: str) -> None:
        con.execute(sql.replace("CREATE OR REPLACE MACRO", "CREATE OR REPLACE TEMP MACRO") if temporary else sql)

    run("\n".join(_sql_text(name) for name in MACRO_FILES))
    try:
        run(_sql_text(SPECS_MACROS))
    except duckdb.CatalogException:  # a database without gpu_specs (another version, or not ours)
        pass


@functools.lru_cache(maxsize=None)
def macros_fingerprint() -> str:
    """A hash of this version's macro text (load_meta 'macros' of a database built with it)."""
    import hashlib

    return hashlib.sha256("\0".join(_sql_text(name) for name in (*MACRO_FILES, SPECS_MACROS)).encode()).hexdigest()


def has_these_macros(con: duckdb.DuckDBPyConnection) -> bool:
    """The database stores this version's very macros (built by this version: load_meta says
    so), so a connection needs no temporary copy of them (creating it costs a re-run a tenth of
    its time). A database of another version, or not ours, gets the copy (connect)."""
    try:
        row = con.execute("SELECT value FROM load_meta WHERE key = 'macros'").fetchone()
    except duckdb.Error:
        return False
    return row is not None and row[0] == macros_fingerprint()


THREADS_ENV = "TRACEANALYZE_DUCKDB_THREADS"

# A stage's connection over this little trace (JSON bytes) runs one DuckDB thread: on a few MB,
# starting and joining threads costs more than they share out (a 2-rank load of 50 KB: 0.94 s
# against 1.10 s, 0.92 against 1.15 CPU s; at 10-15 MB the two are level). Results never depend
# on the thread count.
ONE_THREAD_MAX_BYTES = 4 << 20
# The reduce's connections (the cross-rank tables, the critical path's inputs) over this much
# trace run one thread too: their queries are short and each thread keeps its own buffers. At
# 200 MB (one rank) one thread left the wall time as it was (1.00x, 10 alternated runs) and the
# load's peak 7 MiB lower (128 against 135 MiB); at 500 MB it was 1.07x slower.
REDUCE_ONE_THREAD_MAX_BYTES = 256 << 20


def stage_threads(trace_bytes: int, threads: int | None = None,
                  one_thread_max_bytes: int = ONE_THREAD_MAX_BYTES) -> int | None:
    """DuckDB threads of a stage's connection over `trace_bytes` of trace: the chosen count
    ($TRACEANALYZE_DUCKDB_THREADS), else `threads` (the caller's share of the cores), else one
    for a trace of `one_thread_max_bytes` or less, else None (DuckDB's default)."""
    if chosen_threads():
        return None  # (open_quiet applies it)
    if threads:
        return int(threads)
    return 1 if trace_bytes <= one_thread_max_bytes else None


def set_stage_threads(con: duckdb.DuckDBPyConnection, trace_bytes: int, threads: int | None = None,
                      one_thread_max_bytes: int = ONE_THREAD_MAX_BYTES) -> None:
    """`con`'s DuckDB threads as stage_threads decides for `trace_bytes` (unchanged when it
    leaves them to DuckDB or to $TRACEANALYZE_DUCKDB_THREADS)."""
    count = stage_threads(trace_bytes, threads, one_thread_max_bytes)
    if count:
        con.execute(f"SET threads = {int(count)}")


def release_freed_memory(con: duckdb.DuckDBPyConnection) -> None:
    """What `con`'s statements freed handed back to the system. DuckDB's allocator keeps it for
    the next statement: the reduce's cross-rank SQL of a 200 MB trace grew its process from 92
    to 130 MiB over its files, though each needs a part of that. DuckDB hands it back whenever
    its thread count changes (its task scheduler then flushes the allocator: every arena purged,
    then malloc_trim), so the count is changed and set back; a statement's memory is then the
    most it holds, not the sum. (DuckDB's own setting for that purge, the allocator's decay time,
    is an environment variable read when its library loads: a process-wide setting a library
    should not make.)"""
    (threads,) = con.execute("SELECT current_setting('threads')").fetchone()
    con.execute(f"SET threads = {int(threads) + 1}")
    con.execute(f"SET threads = {int(threads)}")


def fit_threads(con: duckdb.DuckDBPyConnection) -> None:
    """set_stage_threads for the trace `con`'s database holds (ranks.events_bytes): one thread
    on a small one, whose rules' queries are mostly planning."""
    try:
        (trace_bytes,) = con.execute("SELECT coalesce(sum(events_bytes), 0) FROM ranks").fetchone()
    except duckdb.Error:  # (not a trace database: left as it is)
        return
    set_stage_threads(con, int(trace_bytes))


def chosen_threads() -> int | None:
    """$TRACEANALYZE_DUCKDB_THREADS: DuckDB threads of every connection (maps included); None:
    DuckDB's default (all cores; a map gets its share). Results never depend on it."""
    raw = os.environ.get(THREADS_ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        from traceanalyze.errors import TraceConfigError

        raise TraceConfigError(f"{THREADS_ENV}={raw!r} is not a positive whole number")
    return int(raw)


def open_quiet(path: Path | str, read_only: bool = False, config: dict | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection that draws no progress bar (DuckDB draws one on a terminal for a
    query over 2 s, between our own progress lines), with $TRACEANALYZE_DUCKDB_THREADS threads
    and ASOF joins always run as ASOF joins (ASOF_AS_ASOF)."""
    config = dict(config or {})
    threads = chosen_threads()
    if threads:
        config.setdefault("threads", threads)
    con = duckdb.connect(str(path), read_only=read_only, config=config)
    try:
        con.execute("SET enable_progress_bar = false")
    except duckdb.Error:  # (in Jupyter without ipywidgets DuckDB refuses to touch the setting: none is drawn)
        pass
    con.execute(ASOF_AS_ASOF)
    return con


# DuckDB runs an ASOF join as a nested loop join when it estimates its probe side
# under asof_loop_join_threshold rows (64). Tables created in the open transaction (the map builds
# the per-rank tables in one) can have no estimate: DuckDB 1.5.6 then looped over step_regions'
# busy intervals, 40 CPU s instead of 0.9 on a 200 MB CPU trace (docs/benchmarks.md). 0 keeps the
# ASOF operator, whose cost is the sort, whatever the estimate.
ASOF_AS_ASOF = "SET asof_loop_join_threshold = 0"


def connect(path: Path | str, read_only: bool = False, config: dict | None = None) -> duckdb.DuckDBPyConnection:
    """Open a trace database file, with this version's macros (and no DuckDB progress bar on stdout)."""
    config = dict(config or {})
    locked = config.get("enable_external_access") is False
    if locked:  # (set after the views' shard folder is allowed: see _lock)
        del config["enable_external_access"]
    con = open_quiet(path, read_only=read_only, config=config)
    if not has_these_macros(con):
        create_macros(con, temporary=True)
    bound_views_memory(con)
    if locked:
        _lock(con)
    return con


# A database of views over a big shard set (load/reduce.py) is read under this memory limit
# (TRACEANALYZE_MEMORY_LIMIT overrides): DuckDB would otherwise keep the Parquet it has read
# cached in up to 80 % of RAM. Queries spill beyond it.
VIEWS_MEMORY_LIMIT = "1600MB"


def bound_views_memory(con: duckdb.DuckDBPyConnection) -> None:
    """Bound the memory of a connection to a database whose per-rank tables are views."""
    try:
        row = con.execute("SELECT value FROM load_meta WHERE key = 'storage'").fetchone()
    except duckdb.Error:
        return
    if not row or row[0] != "views":
        return
    import os

    con.execute("SET memory_limit = ?", [os.environ.get("TRACEANALYZE_MEMORY_LIMIT", "").strip() or VIEWS_MEMORY_LIMIT])
    try:
        con.execute("SET enable_external_file_cache = false")
    except duckdb.Error:  # (older DuckDB: no such cache)
        pass


def _lock(con: duckdb.DuckDBPyConnection) -> None:
    """No file access but to the rank folders of the shards that the database's views read (a
    database of tables reads no file), no extension installed or loaded. File access is read
    and write alike in DuckDB: the statements that write are refused by db/sandbox.py."""
    folders = view_folders(con)
    if folders:
        con.execute("SET allowed_directories = ?", [[f.rstrip("/") + "/" for f in folders]])
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET enable_external_access = false")


def view_folders(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The folders whose Parquet files the database's per-rank views read (none when its
    tables are copies): load_meta's 'shard_folders', else (a database written before it was
    recorded) its whole 'shards' folder."""
    import json

    try:
        meta = dict(con.execute("SELECT key, value FROM load_meta WHERE key IN ('storage', 'shards', 'shard_folders')")
                    .fetchall())
    except duckdb.Error:
        return []
    if meta.get("storage") == "tables":
        return []
    if meta.get("shard_folders"):
        return [str(f) for f in json.loads(meta["shard_folders"])]
    return [meta["shards"]] if meta.get("shards") else []


def table_comments() -> dict[str, dict[str, str]]:
    """{table: {'': table comment, column: column comment}} parsed from the SQL files' `--` comments."""
    from traceanalyze.db.docs import parse_comments

    out: dict[str, dict[str, str]] = {}
    for name in ["schema.sql", *table_sql_files()]:
        out.update(parse_comments(_sql_text(name)))
    return out
