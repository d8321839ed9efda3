"""`traceanalyze sql DB_OR_DIR "SELECT ..."`: query a trace database (read-only by default)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

import traceanalyze.db as tracedb
from traceanalyze.commands._options import ranks_option
from traceanalyze.errors import TraceError
from traceanalyze.lazy_import import duckdb
from traceanalyze.load import load_trace_dir
from traceanalyze.load.discover import parse_rank_selection
from traceanalyze.pipeline import cache_db_path

TABLE_ROW_LIMIT = 1000  # rows the table format prints unless --limit says otherwise
FETCH_ROWS = 10_000  # rows fetched (and written) at a time


# A query may start with a `--` comment (every rule's SQL does): not an option.
@click.command(name="sql", context_settings={"ignore_unknown_options": True})
@click.argument("source", type=click.Path(path_type=Path), required=False)
@click.argument("query", required=False)
@click.option("-f", "--file", "query_file", type=click.Path(exists=True, path_type=Path),
              help="Read the query from a file.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
              show_default=True)
@click.option("--limit", type=click.IntRange(min=0), default=None, metavar="ROWS",
              help=f"Print at most ROWS rows (0: all) [default: {TABLE_ROW_LIMIT:,} for the table "
                   "format, all for csv and json].")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=None,
              metavar="SECONDS", help="Stop the query after this many seconds (exit code 2).")
@click.option("--write", is_flag=True,
              help="Open the database read-write and allow file access (COPY TO, ATTACH, read_csv);"
                   " by default it is read-only: only SELECT, EXPLAIN and describing PRAGMAs run, and"
                   " the query reads no file but the shards of the database's views.")
@click.option("--schema", "show_schema", is_flag=True, help="Print the documented tables and columns.")
@ranks_option()
def command(source: Path | None, query: str | None, query_file: Path | None, fmt: str, limit: int | None,
        timeout_s: float | None, write: bool, show_schema: bool, ranks: str):
    """Run SQL on a trace database (a .duckdb file, or a trace folder, loaded first into the cache folder).

    The result is written as it is fetched (any size, in bounded memory).
    """
    from traceanalyze.db import table_comments
    from traceanalyze.db.docs import schema_markdown

    if show_schema:
        click.echo(schema_markdown(table_comments()))
        return
    if source is None:
        raise TraceError("no database or trace folder given")
    if query_file:
        query = query_file.read_text()
    if not query:
        raise TraceError("no query given (pass it as an argument or with --file)")
    if limit is None:
        limit = TABLE_ROW_LIMIT if fmt == "table" else 0
    db_path = resolve_db(source, ranks)
    try:
        # read-only means nothing on disk changes: no writes to the database, no statement but
        # reading ones (db/sandbox.py: no COPY TO / EXPORT / ATTACH, even into the shard folder
        # the views read), and a locked configuration (CALL enable_logging(storage='file') would
        # abort DuckDB)
        con = tracedb.connect(db_path, read_only=not write,
                              config={} if write else {"enable_external_access": False})
        if not write:
            con.execute("SET lock_configuration = true")
    except duckdb.Error as exc:
        raise TraceError(f"cannot open the database: {' '.join(str(exc).split())}", str(db_path)) from None
    try:
        if not write:
            from traceanalyze.db.sandbox import ALLOWED, refusal

            reason = refusal(con, query)
            if reason:
                raise TraceError(f"query refused: {reason}; a read-only query runs {ALLOWED} "
                                 "(--write allows the rest)")
        _run_query(con, query, fmt, limit or None, timeout_s)
    finally:
        con.close()


def _run_query(con, query: str, fmt: str, limit: int | None, timeout_s: float | None) -> None:
    """Execute, then fetch and write chunk by chunk; --timeout interrupts DuckDB from a timer."""
    import threading

    from traceanalyze.faults import interrupting
    from traceanalyze.output.tabular import limited, write_rows

    timer, timed_out = None, threading.Event()
    if timeout_s is not None:
        def stop() -> None:
            timed_out.set()
            con.interrupt()
        timer = threading.Timer(timeout_s, stop)
        timer.daemon = True
        timer.start()
    try:
        with interrupting(con):  # Ctrl-C / SIGTERM stop a long query at once
            cur = con.execute(query)
            columns = [d[0] for d in cur.description] if cur.description else []
            chunks = iter(lambda: cur.fetchmany(FETCH_ROWS), []) if columns else iter(())
            rows, was_cut = limited(chunks, limit)
            out = sys.stdout
            shown = write_rows(columns, rows, fmt, out, tty=out.isatty())
            out.flush()
    except (duckdb.Error, RuntimeError) as exc:
        if timed_out.is_set():
            raise TraceError(f"query stopped after the --timeout of {timeout_s:g} s") from None
        if not isinstance(exc, duckdb.Error) or isinstance(exc, duckdb.InterruptException):
            raise  # Ctrl-C / SIGTERM: faults.py says 'interrupted'
        raise TraceError(f"query failed: {' '.join(str(exc).split())}") from None
    finally:
        if timer is not None:
            timer.cancel()
    if was_cut():
        click.echo(f"traceanalyze: only the first {shown:,} rows are shown (--limit {limit}; "
                   "--limit 0 prints all)", err=True)


def resolve_db(source: Path, ranks: str) -> Path:
    """A .duckdb file as it is; a trace folder is loaded into the cache folder first."""
    if source.is_file() and source.suffix in (".duckdb", ".db"):
        return source
    if not source.exists():
        raise TraceError("no such file or directory", str(source))
    db_path = cache_db_path(source)
    load_trace_dir(source, db_path, parse_rank_selection(ranks))
    return db_path
