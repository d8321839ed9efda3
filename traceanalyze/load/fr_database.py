"""A trace database from Flight Recorder dumps alone (a hung job's folder without profiler traces).

Every documented table exists, the profiler's empty, the `fr_*` tables filled from the dumps; the
database is written under a private name and moved into place, as the reduce writes its own.
"""

from __future__ import annotations

import os
from pathlib import Path

import traceanalyze.db as tracedb
from traceanalyze.analysis.align import align_ranks
from traceanalyze.errors import TraceanalyzeError
from traceanalyze.lazy_import import duckdb
from traceanalyze.load.flight_recorder import DumpFile, insert_dumps
from traceanalyze.load.groups import infer_groups
from traceanalyze.load.stale import marker
from traceanalyze.version import __version__


def dumps_only_db(dumps: list[DumpFile], db_path: Path, meta: dict[str, str]) -> Path:
    """The dumps -> the database file `db_path` (no rank of profiler events)."""
    db_path = Path(db_path)
    tmp_db = db_path.with_name(f"{db_path.name}.{marker()}.tmp")
    try:
        try:
            db_path.parent.mkdir(parents=True, exist_ok=True)
            tmp_db.unlink(missing_ok=True)
            con = tracedb.open_quiet(tmp_db)
        except (OSError, duckdb.Error) as exc:
            raise TraceanalyzeError(f"cannot write the database here ({exc})", str(db_path)) from None
        try:
            con.execute("BEGIN TRANSACTION")  # (one commit, one sync of the log: as the reduce's)
            tracedb.create_schema(con)
            tracedb.create_macros(con)
            insert_dumps(con, dumps)
            infer_groups(con)
            tracedb.build_tables(con, tracedb.cross_rank_sql_files())
            align_ranks(con)  # (no profiler step: the critical path stays empty)
            rows = {"schema_version": tracedb.SCHEMA_VERSION, "tool_version": __version__,
                    "macros": tracedb.macros_fingerprint(), "storage": "tables", **meta}
            con.executemany("INSERT INTO load_meta VALUES (?, ?)", list(rows.items()))
            con.execute("COMMIT")
            con.execute("CHECKPOINT")
        finally:
            con.close()
        os.replace(tmp_db, db_path)
    finally:
        tmp_db.unlink(missing_ok=True)
        tmp_db.with_name(tmp_db.name + ".wal").unlink(missing_ok=True)
    return db_path
