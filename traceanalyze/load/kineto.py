"""Kineto / Chrome trace events -> the `raw_events` table. The only module that knows event keys.

DuckDB's JSON reader (C++, one thread per part file) decodes the part files written by
`split.py` straight into typed columns: no Python object is built per event. Times are
read as text and converted exactly (DECIMAL) to BIGINT nanoseconds; microsecond inputs
with fractional (ns) digits survive without float rounding.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

# Top-level event keys. Everything is read as text and typed in SQL, so a value of an
# unexpected JSON type becomes NULL (and is counted) instead of aborting the load.
EVENT_COLUMNS = {
    "ph": "VARCHAR", "cat": "VARCHAR", "name": "VARCHAR", "pid": "VARCHAR", "tid": "VARCHAR",
    "ts": "JSON", "dur": "JSON", "id": "VARCHAR", "s": "VARCHAR",
}
# args keys we keep, as (JSON key, column name, SQL type)
ARG_FIELDS = [
    ("External id", "external_id", "BIGINT"),
    ("correlation", "correlation", "BIGINT"),
    ("device", "device", "INTEGER"),
    ("stream", "stream", "BIGINT"),
    ("bytes", "bytes", "BIGINT"),  # args.bytes (memcpy) and args.Bytes ([memory]): keys match case-insensitively
    ("Input Dims", "input_dims", "VARCHAR"),
    ("Input type", "input_type", "VARCHAR"),
    ("Sequence number", "seq_number", "BIGINT"),
    ("Fwd thread id", "fwd_thread_id", "BIGINT"),
    ("Collective name", "collective_name", "VARCHAR"),
    ("In msg nelems", "in_msg_nelems", "BIGINT"),
    ("Out msg nelems", "out_msg_nelems", "BIGINT"),
    ("dtype", "dtype", "VARCHAR"),
    ("Group size", "group_size", "INTEGER"),
    ("Process Group Name", "pg_name", "VARCHAR"),
    ("Process Group Description", "pg_desc", "VARCHAR"),
    ("Process Group Ranks", "pg_ranks", "VARCHAR"),
    ("Seq", "collective_seq", "BIGINT"),
    ("Total Allocated", "total_allocated_bytes", "BIGINT"),
    ("Total Reserved", "total_reserved_bytes", "BIGINT"),
    ("Device Type", "device_type", "INTEGER"),
    ("Device Id", "device_id", "INTEGER"),
    ("Addr", "addr", "VARCHAR"),
    ("name", "label", "VARCHAR"),
    ("labels", "labels", "VARCHAR"),
    ("cuda_sync_kind", "sync_kind", "VARCHAR"),
]


def _quote(key: str) -> str:
    return '"' + key.replace('"', '""') + '"'


def read_json_columns() -> dict[str, str]:
    """The `columns` argument of read_json: top-level keys plus a STRUCT of the kept args."""
    struct = ", ".join(f"{_quote(key)} VARCHAR" for key, _, _ in ARG_FIELDS)
    return {**EVENT_COLUMNS, "args": f"STRUCT({struct})"}


def _time_ns(expr: str) -> str:
    """A JSON number of microseconds -> exact BIGINT ns; strings, NaN, overflow -> NULL."""
    return f"TRY_CAST(TRY_CAST(CAST({expr} AS VARCHAR) AS DECIMAL(38, 3)) * 1000 AS BIGINT)"


def select_events_sql() -> str:
    """SELECT over read_json($parts) producing raw_events rows (rank joined in by file name)."""
    args = ",\n    ".join(
        f"TRY_CAST(args.{_quote(key)} AS {sqltype}) AS {col}" for key, col, sqltype in ARG_FIELDS
    )
    return f"""
SELECT
    p.rank,
    e.ph, e.cat, e.name, e.pid, e.tid,
    {_time_ns('e.ts')} + p.base_ns AS ts_ns,
    {_time_ns('e.dur')} AS dur_ns,
    json_type(e.ts) AS ts_json_type,
    e.id AS flow_id,
    {args}
FROM read_json($files, format = 'array', columns = $columns, filename = true,
               maximum_object_size = 1073741824) AS e
JOIN _load_parts AS p ON p.part_path = e.filename
"""


def insert_events(con: duckdb.DuckDBPyConnection, parts: list[tuple[int, str, int]]) -> None:
    """Parse part files (rank, path, base_ns) into raw_events, in parallel across files."""
    con.execute("CREATE OR REPLACE TEMP TABLE _load_parts (rank INTEGER, part_path VARCHAR, base_ns BIGINT)")
    con.executemany("INSERT INTO _load_parts VALUES (?, ?, ?)", parts)
    files = [path for _, path, _ in parts]
    con.execute(
        "INSERT INTO raw_events BY NAME " + select_events_sql(),
        {"files": files, "columns": read_json_columns()},
    )


def base_time_ns(metadata: dict) -> int:
    """Newer Kineto writes `ts` relative to `baseTimeNanoseconds`; older traces are absolute."""
    base = metadata.get("baseTimeNanoseconds")
    return base if isinstance(base, int) and not isinstance(base, bool) and 0 <= base < 2**62 else 0


def part_path_text(path: Path) -> str:
    return str(path)
