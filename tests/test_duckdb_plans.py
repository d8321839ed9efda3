"""Every DuckDB connection of traceanalyze runs an ASOF join as an ASOF join.

DuckDB rewrites an ASOF join whose probe side it estimates under 64 rows into a nested loop
join over the whole build side. Tables created inside the map's one transaction can carry no
estimate, and DuckDB 1.5.6 then looped over step_regions' busy intervals: 40 CPU s instead of
0.9 on a 200 MB CPU trace (docs/benchmarks.md). The plans are read here with EXPLAIN on a probe
side of 10 rows, where DuckDB's default is the loop.
"""

from __future__ import annotations

import traceanalyze.db as tracedb

ASOF = "SELECT l.ts, r.v FROM l ASOF LEFT JOIN r ON l.rank = r.rank AND l.ts >= r.ts"


def _plan(con, in_transaction: bool) -> str:
    if in_transaction:
        con.execute("BEGIN TRANSACTION")
    con.execute("CREATE TABLE l AS SELECT 0 AS rank, range * 1000 AS ts FROM range(10)")
    con.execute("CREATE TABLE r AS SELECT 0 AS rank, range AS ts, range AS v FROM range(100000)")
    (_, plan), = con.execute(f"EXPLAIN {ASOF}").fetchall()
    if in_transaction:
        con.execute("ROLLBACK")
    return plan.lower()


def _kept(plan: str) -> bool:
    return "asof join" in plan and "nested loop join" not in plan


def test_the_loader_connections_keep_asof_joins(tmp_path):
    for in_transaction in (False, True):
        for con in (tracedb.open_quiet(":memory:"), tracedb.open_quiet(tmp_path / f"t{in_transaction}.duckdb")):
            with con:
                plan = _plan(con, in_transaction)
            assert _kept(plan), plan


def test_the_analysis_connection_keeps_asof_joins(tmp_path):
    db = tmp_path / "trace.duckdb"
    tracedb.open_quiet(db).close()
    with tracedb.connect(db) as con:
        plan = _plan(con, False)
    assert _kept(plan), plan


def test_the_answer_is_the_same_either_way():
    """(the setting changes the plan, never the rows: the latest r at or before each l)"""
    with tracedb.open_quiet(":memory:") as con:
        _plan(con, False)
        got = con.execute(f"{ASOF} ORDER BY l.ts").fetchall()
    want = [(ts, ts) for ts in range(0, 10_000, 1000)]  # r.ts = r.v = every integer below 100,000
    assert got == want
