"""The summary's `flight_recorder`: what the Flight Recorder dumps say (tables fr_dumps, fr_groups, fr_frontiers)."""

from __future__ import annotations

from typing import Any

from traceanalyze.lazy_import import duckdb

MAX_FRONTIERS = 64  # groups that stopped, shown in the summary (the database keeps every one)


def _rows(con, sql: str) -> list[dict[str, Any]]:
    cur = con.execute(sql)
    columns = [d[0] for d in cur.description]
    return [dict(zip(columns, row)) for row in cur.fetchall()]


def dumps_world_size(con: duckdb.DuckDBPyConnection) -> int:
    """The world the Flight Recorder dumps show (the highest rank of a dump or a group, + 1); 0 without dumps."""
    try:
        (world,) = con.execute("""
            SELECT coalesce(max(rank) + 1, 0) FROM (
                SELECT rank FROM fr_dumps UNION ALL SELECT unnest(members) FROM fr_groups)""").fetchone()
    except duckdb.CatalogException:
        return 0
    return int(world)


def flight_recorder_summary(con: duckdb.DuckDBPyConnection) -> dict[str, Any] | None:
    """The dumps read, the number of groups, and every group's frontier (the first cause first);
    None without dumps (or for a database written before the tables existed)."""
    try:
        dumps = _rows(con, "SELECT rank, file, version, entries FROM fr_dumps ORDER BY rank")
    except duckdb.CatalogException:
        return None
    if not dumps:
        return None
    (groups,) = con.execute("SELECT count(*) FROM fr_groups").fetchone()
    (inferred,) = con.execute("SELECT count(*) FROM fr_groups WHERE members_source = 'inferred'").fetchone()
    frontiers = _rows(con, f"""
        SELECT pg_name, pg_desc, collective_seq_id, op, code_line, reached_ranks, waiting_ranks,
               missing_ranks, absent_ranks, blocked_ranks, downstream
        FROM fr_frontiers ORDER BY cause_order LIMIT {MAX_FRONTIERS}""")
    (stopped,) = con.execute("SELECT count(*) FROM fr_frontiers").fetchone()
    return {"dumps": dumps, "groups_count": int(groups), "groups_inferred_count": int(inferred),
            "stopped_groups_count": int(stopped), "frontiers": frontiers}
