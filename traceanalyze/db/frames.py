"""Query results as polars DataFrames (what the Python API returns)."""

from __future__ import annotations

import importlib.util

import duckdb
import polars as pl


def to_polars(cur: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """The executed query's result. Through Arrow (exact types, fast) when pyarrow is installed
    (the `notebook` extra), else from the rows with the column names and polars' type inference."""
    if not cur.description:
        return pl.DataFrame()
    columns = [d[0] for d in cur.description]
    if importlib.util.find_spec("pyarrow") is not None:
        return pl.from_arrow(cur.to_arrow_table())
    rows = cur.fetchall()
    if not rows:
        return pl.DataFrame({name: [] for name in columns})
    return pl.DataFrame(rows, schema=columns, orient="row", infer_schema_length=None)


class _ArrowStream:
    """A polars DataFrame seen by DuckDB only as an Arrow C stream: DuckDB reads it without
    pyarrow (a polars DataFrame itself it converts through pyarrow)."""

    def __init__(self, frame: pl.DataFrame) -> None:
        self._frame = frame

    def __arrow_c_stream__(self, requested_schema=None):
        return self._frame.__arrow_c_stream__(requested_schema)


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows: list[tuple]) -> None:
    """Append `rows` (tuples in `table`'s column order) to `table` in one statement: as an Arrow
    stream (about 15x faster than DuckDB's conversion of Python lists), or, with a polars that
    has no Arrow C stream, as parameter lists unnested. `table` is the caller's own name, never
    a trace's string."""
    if not rows:
        return
    columns = [list(column) for column in zip(*rows)]
    frame = pl.DataFrame({f"c{i}": column for i, column in enumerate(columns)})
    if not hasattr(frame, "__arrow_c_stream__"):
        con.execute(f"INSERT INTO {table} SELECT " + ", ".join(f"unnest(${i + 1})" for i in range(len(columns))),
                    columns)
        return
    view = f"_insert_rows_{id(frame):x}"
    con.register(view, _ArrowStream(frame))
    try:
        con.execute(f"INSERT INTO {table} SELECT * FROM {view}")
    finally:
        con.unregister(view)
