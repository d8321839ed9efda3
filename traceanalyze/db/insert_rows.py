"""Rows from Python into a DuckDB table in one statement (the critical path's segments)."""

from __future__ import annotations

import duckdb


class _ArrowStream:
    """A polars DataFrame seen by DuckDB only as an Arrow C stream: DuckDB reads it without
    pyarrow (a polars DataFrame itself it converts through pyarrow)."""

    def __init__(self, frame) -> None:  # a polars DataFrame
        self._frame = frame

    def __arrow_c_stream__(self, requested_schema=None):
        return self._frame.__arrow_c_stream__(requested_schema)


# Up to this many rows go in as parameter lists unnested (10,000 rows of five columns: 0.15 s);
# more through polars' Arrow stream, whose import alone costs about what 20,000 rows do unnested.
UNNEST_MAX_ROWS = 20_000


def _insert_unnested(con: duckdb.DuckDBPyConnection, table: str, columns: list[list]) -> None:
    con.execute(f"INSERT INTO {table} SELECT " + ", ".join(f"unnest(${i + 1})" for i in range(len(columns))),
                columns)


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows: list[tuple]) -> None:
    """Append `rows` (tuples in `table`'s column order) to `table` in one statement: many as an
    Arrow stream (about 15x faster than DuckDB's conversion of Python lists), few (or with a
    polars that has no Arrow C stream) as parameter lists unnested. `table` is the caller's own name, never
    a trace's string."""
    if not rows:
        return
    columns = [list(column) for column in zip(*rows)]
    if len(rows) <= UNNEST_MAX_ROWS:
        _insert_unnested(con, table, columns)
        return
    import polars as pl  # (only here: importing polars costs 0.3-0.4 s, a small load's rows less)

    frame = pl.DataFrame({f"c{i}": column for i, column in enumerate(columns)})
    if not hasattr(frame, "__arrow_c_stream__"):
        _insert_unnested(con, table, columns)
        return
    view = f"_insert_rows_{id(frame):x}"
    con.register(view, _ArrowStream(frame))
    try:
        con.execute(f"INSERT INTO {table} SELECT * FROM {view}")
    finally:
        con.unregister(view)
