"""Two trace databases' tables compared as multisets of rows, inside DuckDB.

Both files are attached read-only to one in-memory connection and each table is compared with
`EXCEPT ALL` both ways: equal when every row occurs as often on both sides (row order does not
count; NULLs equal NULLs; every column's value counts). A difference is reported with a few of
the rows that only one side has. Much faster than fetching both tables into Python and sorting.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import duckdb

SHOWN = 5  # differing rows shown per side


def table_difference(con: duckdb.DuckDBPyConnection, table: str, *, json_columns: Iterable[str] = (),
                     exclude: Iterable[str] = ()) -> str | None:
    """None when `a.<table>` and `b.<table>` hold the same rows, else what differs (both sides).
    `json_columns` are compared as the JSON values they hold; `exclude` columns not at all."""
    columns = [c for (c,) in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE database_name = 'a' AND table_name = ? "
        "ORDER BY column_index", [table]).fetchall()]
    if not columns:
        return f"{table}: no such table in the first database"
    skip, as_json = set(exclude), set(json_columns)
    # DuckDB's json() parses and writes the value again: `1.000000` and `1.0` alike (yyjson)
    select = ", ".join(f'json("{c}") AS "{c}"' if c in as_json else f'"{c}"'
                       for c in columns if c not in skip)
    sides = {}
    for first, second in (("a", "b"), ("b", "a")):
        query = (f'SELECT {select} FROM {first}."{table}" EXCEPT ALL SELECT {select} FROM {second}."{table}"')
        (n,) = con.execute(f"SELECT count(*) FROM ({query})").fetchone()
        sides[first] = (n, con.execute(f"{query} LIMIT {SHOWN}").fetchall() if n else [])
    if not sides["a"][0] and not sides["b"][0]:
        return None
    return (f"{table}: {sides['a'][0]} row(s) only in the first database, e.g. {sides['a'][1]}; "
            f"{sides['b'][0]} only in the second, e.g. {sides['b'][1]}")


def attached(first: Path, second: Path) -> duckdb.DuckDBPyConnection:
    """An in-memory connection with `first` as `a` and `second` as `b`, both read-only."""
    con = duckdb.connect()
    con.execute("ATTACH ? AS a (READ_ONLY)", [str(first)])
    con.execute("ATTACH ? AS b (READ_ONLY)", [str(second)])
    return con


def assert_same_tables(first: Path, second: Path, tables: Iterable[str], **options) -> None:
    """Every table of `tables` holds the same rows in both databases (see table_difference)."""
    with attached(first, second) as con:
        problems = [p for t in tables if (p := table_difference(con, t, **options))]
    assert not problems, "\n".join(problems)
