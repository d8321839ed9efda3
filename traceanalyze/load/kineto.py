"""Kineto / Chrome trace events -> the `raw_events` table. The only module that knows event keys.

DuckDB's JSON reader (C++, one thread per part file) decodes the part files written by
`split.py` straight into typed columns: no Python object is built per event. Two readings:

- typed (the fast one, tried first): ts/dur read as DOUBLE, integer args as BIGINT. Any
  value of an unexpected JSON type makes DuckDB refuse the read, and the loader falls back
  to the generic reading. Exact for every time a double holds to the ns (|t| < 2**43 us,
  about 101 days: relative times, and epoch times once split.py has taken their prefix out).
- generic: every value read as text and typed with TRY_CAST, so an odd value becomes NULL
  (and is counted) instead of failing the file; times converted exactly through DECIMAL.

Either way a time too large for a double to hold its ns digits is written as INEXACT_NS,
and its rank is read again exactly (see add_exact_times).
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal
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
    ("bytes", "bytes", "BIGINT"),  # args.bytes (memcpy) and args.Bytes ([memory], see ARG_ALIASES)
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


# Other spellings of args keys, renamed by split.py (KEY_RENAMES) because DuckDB refuses STRUCT
# fields that differ only in case: read as well, the first non-NULL value wins.
ARG_ALIASES = {"External id": ["__ta_external_id"], "bytes": ["__ta_Bytes"]}


def _arg_keys() -> list[tuple[str, str]]:
    """(JSON key, SQL type) of every args key read, aliases included."""
    return [(k, sqltype) for key, _, sqltype in ARG_FIELDS for k in [key, *ARG_ALIASES.get(key, [])]]


def _quote(key: str) -> str:
    return '"' + key.replace('"', '""') + '"'


def read_json_columns() -> dict[str, str]:
    """The `columns` argument of read_json: top-level keys plus a STRUCT of the kept args."""
    struct = ", ".join(f"{_quote(key)} VARCHAR" for key, _ in _arg_keys())
    return {**EVENT_COLUMNS, "args": f"STRUCT({struct})"}


# The fast reading: times as DOUBLE, integer args as BIGINT (a value of another type fails it).
TYPED_EVENT_COLUMNS = {**EVENT_COLUMNS, "ts": "DOUBLE", "dur": "DOUBLE"}


def typed_read_json_columns() -> dict[str, str]:
    struct = ", ".join(f"{_quote(key)} {'BIGINT' if sqltype in ('BIGINT', 'INTEGER') else 'VARCHAR'}"
                       for key, sqltype in _arg_keys())
    return {**TYPED_EVENT_COLUMNS, "args": f"STRUCT({struct})"}


def _time_ns(expr: str) -> str:
    """A JSON number of microseconds -> exact BIGINT ns; strings, NaN, overflow -> NULL; a
    fractional number too large for the double DuckDB parsed it into -> INEXACT_NS."""
    exact = f"TRY_CAST(TRY_CAST(CAST({expr} AS VARCHAR) AS DECIMAL(38, 3)) * 1000 AS BIGINT)"
    return (f"CASE WHEN json_type({expr}) = 'DOUBLE' AND abs({exact}) >= {EXACT_DOUBLE_LIMIT_NS}"
            f" THEN {INEXACT_NS} ELSE {exact} END")


def _typed_time_ns(expr: str) -> str:
    """A DOUBLE of microseconds -> BIGINT ns, else INEXACT_NS.

    Below 2**43 us the double is within half a ulp (<= 0.49 ns) of the 3-decimal value
    written in the file, so the nearest integer ns is that value; it is computed without
    rounding error as whole us x 1000 + round(fraction x 1000) (ts x 1000 as a double
    could round off by 0.25 ns more and land on the next ns).
    """
    return (f"CASE WHEN abs({expr}) < {EXACT_DOUBLE_LIMIT_US} THEN CAST(floor({expr}) AS BIGINT) * 1000"
            f" + CAST(round(({expr} - floor({expr})) * 1000) AS BIGINT)"
            f" WHEN {expr} IS NOT NULL THEN {INEXACT_NS} END")


# split.py writes an epoch-us `"ts": 1712195495519689.047` as `"__ta_tsp": 171219 - d,
# "ts": <d>5495519689.047` (d one digit): the short number survives DuckDB's double exactly,
# and the prefix comes back as tsp x 10^(digits of the short ns - 1).
TS_PREFIX_KEY = "__ta_tsp"


def _with_ts_prefix(short_ns: str, tsp: str) -> str:
    """ns of a (possibly) prefix-stripped ts: `short_ns` (BIGINT) + tsp x 10^(its digits - 1)."""
    power = (f"CASE WHEN {short_ns} >= 10000000000000 AND {short_ns} < 100000000000000 THEN 10000000000000"
             f" WHEN {short_ns} >= 1000 THEN CAST(10 ** (length(CAST({short_ns} AS VARCHAR)) - 1) AS BIGINT) END")
    return f"CASE WHEN {tsp} IS NULL THEN {short_ns} ELSE {short_ns} + TRY_CAST({tsp} AS BIGINT) * ({power}) END"


# Times beyond +-2**62 ns (the year 2116) are malformed: NULL (counted as bad-ts / bad-dur),
# which also keeps every ts + dur sum of the tables within BIGINT.
TIME_LIMIT_NS = 1 << 62


def _in_time_range(expr: str) -> str:
    return (f"(CASE WHEN ({expr}) BETWEEN -{TIME_LIMIT_NS} AND {TIME_LIMIT_NS} THEN ({expr})"
            f" WHEN ({expr}) = {INEXACT_NS} THEN {INEXACT_NS} END)")


# DuckDB's JSON reader turns a fractional number into a DOUBLE. A double keeps every
# 3-decimal microsecond value exact only below 2**43 us (about 101 days): epoch
# timestamps with ns digits (1712195495519689.047) would lose them. Such a time is written
# as INEXACT_NS (outside the valid range, so it cannot be a real time) and its rank is read
# again from parts where each fractional ts/dur also has its exact ns as an integer.
EXACT_DOUBLE_LIMIT_US = 1 << 43
EXACT_DOUBLE_LIMIT_NS = EXACT_DOUBLE_LIMIT_US * 1000
INEXACT_NS = -(1 << 63)
INEXACT_RANKS_SQL = f"SELECT DISTINCT rank FROM raw_events WHERE ts_ns = {INEXACT_NS} OR dur_ns = {INEXACT_NS}"


def _arg_sql(key: str, col: str, sqltype: str, typed: bool) -> str:
    values = [f"args.{_quote(k)}" if typed else f"TRY_CAST(args.{_quote(k)} AS {sqltype})"
              for k in [key, *ARG_ALIASES.get(key, [])]]
    return f"{values[0] if len(values) == 1 else 'coalesce(' + ', '.join(values) + ')'} AS {col}"


def select_events_sql(exact_times: bool = False, lenient: bool = False, typed: bool = False) -> str:
    """SELECT over read_json($parts) producing raw_events rows (rank joined in by file name).

    `typed`: the fast reading (columns from typed_read_json_columns()). With `exact_times`,
    the parts carry the exact ns written by `add_exact_times`. With `lenient`, values of
    unexpected JSON types (args a list, an element not an object) are read as NULL instead
    of failing; syntax errors still fail.
    """
    args = ",\n        ".join(_arg_sql(key, col, sqltype, typed) for key, col, sqltype in ARG_FIELDS)
    if typed:
        ts, dur = _typed_time_ns("ts"), _typed_time_ns("e.dur")
    else:
        ts, dur = _time_ns("ts"), _time_ns("e.dur")
    if exact_times:
        ts = f"coalesce(TRY_CAST({EXACT_KEYS['ts']} AS BIGINT), {ts})"
        dur = f"coalesce(TRY_CAST(e.{EXACT_KEYS['dur']} AS BIGINT), {dur})"
    ts_ns = f"TRY({_with_ts_prefix('e.__short_ts_ns', 'e.' + TS_PREFIX_KEY)} + p.base_ns)"
    return f"""
SELECT * EXCLUDE (__ts_ns, __dur_ns),
    {_in_time_range('__ts_ns')} AS ts_ns,
    {_in_time_range('__dur_ns')} AS dur_ns
FROM (
    SELECT
        p.rank,
        e.ph, e.cat, e.name, e.pid, e.tid,
        CASE WHEN e.__short_ts_ns = {INEXACT_NS} THEN {INEXACT_NS} ELSE {ts_ns} END AS __ts_ns,
        {dur} AS __dur_ns,
        e.id AS flow_id,
        {args}
    FROM (SELECT *, {ts} AS __short_ts_ns
          FROM read_json($files, format = 'array', columns = $columns, filename = true,
                         maximum_object_size = $max_object_bytes{", ignore_errors = true" if lenient else ""})) AS e
    JOIN _load_parts AS p ON p.part_path = e.filename
)
"""


# DuckDB sizes its read buffers from maximum_object_size (2x per thread): a small bound keeps
# memory low; a larger event makes the read fail and the loader retries with the large bound.
MAX_OBJECT_BYTES = 4 << 20
LARGE_MAX_OBJECT_BYTES = 1 << 30


def insert_events(con: duckdb.DuckDBPyConnection, parts: list[tuple[int, str, int]],
                  exact_times: bool = False, lenient: bool = False, typed: bool = False,
                  max_object_bytes: int = MAX_OBJECT_BYTES) -> None:
    """Parse part files (rank, path, base_ns) into raw_events, in parallel across files."""
    con.execute("CREATE OR REPLACE TEMP TABLE _load_parts (rank INTEGER, part_path VARCHAR, base_ns BIGINT)")
    con.executemany("INSERT INTO _load_parts VALUES (?, ?, ?)", parts)
    files = [path for _, path, _ in parts]
    columns = typed_read_json_columns() if typed else read_json_columns()
    columns[TS_PREFIX_KEY] = "BIGINT" if typed else "VARCHAR"
    if exact_times:
        columns.update({key: "VARCHAR" for key in EXACT_KEYS.values()})
    con.execute(
        "INSERT INTO raw_events BY NAME " + select_events_sql(exact_times, lenient, typed),
        {"files": files, "columns": columns, "max_object_bytes": max_object_bytes},
    )


def shift_times(con: duckdb.DuckDBPyConnection, rank: int, shift_ns: int) -> None:
    """Add `shift_ns` to a rank's times (parsed with a provisional time base), keeping the
    range check and the INEXACT_NS marks of the reading."""
    shifted = f"TRY(ts_ns + {int(shift_ns)})"
    con.execute(f"UPDATE raw_events SET ts_ns = CASE WHEN ts_ns = {INEXACT_NS} THEN ts_ns"
                f" ELSE {_in_time_range(shifted)} END WHERE rank = ? AND ts_ns IS NOT NULL", [rank])


EXACT_KEYS = {"ts": "__traceanalyze_ts_ns", "dur": "__traceanalyze_dur_ns"}
_FRACTIONAL_TIME = re.compile(rb'"(ts|dur)"(\s*:\s*)(-?\d+\.\d+)(?=\s*[,}])')


def _exact_ns(match: re.Match) -> bytes:
    key, colon, number = match.group(1), match.group(2), match.group(3)
    ns = (Decimal(number.decode()) * 1000).to_integral_value(ROUND_HALF_UP)
    exact_key = EXACT_KEYS[key.decode()].encode()
    return b'"' + key + b'"' + colon + number + b', "' + exact_key + b'": ' + str(ns).encode()


def add_exact_times(part: Path) -> None:
    """Rewrite a part file so that every fractional ts/dur is followed by its exact ns."""
    part.write_bytes(_FRACTIONAL_TIME.sub(_exact_ns, part.read_bytes()))


def base_time_ns(metadata: dict) -> int:
    """Newer Kineto writes `ts` relative to `baseTimeNanoseconds`; older traces are absolute."""
    base = metadata.get("baseTimeNanoseconds")
    return base if isinstance(base, int) and not isinstance(base, bool) and 0 <= base < 2**62 else 0
