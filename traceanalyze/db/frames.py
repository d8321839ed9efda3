"""Query results as polars DataFrames (what the Python API returns)."""

from __future__ import annotations

import importlib.util

import polars as pl

from traceanalyze.lazy_import import duckdb


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
