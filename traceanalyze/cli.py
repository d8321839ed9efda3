"""Command line: parse options, call one stage function, echo, exit 0 / 1 / 2."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import duckdb

from traceanalyze import __version__
from traceanalyze import db as tracedb
from traceanalyze.errors import TraceanalyzeError
from traceanalyze.load import load_trace_dir
from traceanalyze.load.discover import parse_rank_selection
from traceanalyze.output.escape import terminal
from traceanalyze.pipeline import default_out_dir


class DefaultGroup(click.Group):
    """`traceanalyze DIR ...` runs `analyze DIR ...` (like `datasette file.db`)."""

    default_command = "analyze"

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


def ranks_option(f):
    return click.option("--ranks", default="all", show_default=True,
                        help="Ranks to load: all, a list (0,3) or a range (0-7).")(f)


def _progress(quiet: bool):
    if quiet:
        return None
    from traceanalyze.output.escape import terminal

    return lambda msg: click.echo(f"traceanalyze: {terminal(msg)}", err=True)


@click.group(cls=DefaultGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="traceanalyze")
def cli():
    """Find which rank and which phase slows a distributed PyTorch job.

    \b
    traceanalyze TRACE_DIR [--ranks all] [--out DIR]   analyze and write a report
    traceanalyze load TRACE_DIR --db trace.duckdb      only build the trace database
    traceanalyze sql DB_OR_DIR "SELECT ..."            query the trace database
    """


@cli.command()
@click.argument("trace_dir", type=click.Path(path_type=Path))
@click.option("--db", "db_path", type=click.Path(path_type=Path), default=None,
              help="Database file to write [default: reports/<dir name>/trace.duckdb].")
@ranks_option
@click.option("--force", is_flag=True, help="Parse again even if the stored database is up to date.")
@click.option("-q", "--quiet", is_flag=True, help="No progress messages.")
def load(trace_dir: Path, db_path: Path | None, ranks: str, force: bool, quiet: bool):
    """Load per-rank traces into a DuckDB trace database."""
    db_path = db_path or default_out_dir(trace_dir) / "trace.duckdb"
    result = load_trace_dir(trace_dir, db_path, parse_rank_selection(ranks), reuse=not force,
                            progress=_progress(quiet))
    _echo_load_issues(result.db_path, quiet)
    state = "reused" if result.reused else "wrote"
    click.echo(terminal(f"{state} {result.db_path}: {len(result.ranks)} rank(s), {result.events:,} events"))


def _echo_load_issues(db_path: Path, quiet: bool) -> None:
    """Warnings (data lost or doubtful) always go to stderr; notes only without --quiet."""
    from traceanalyze.load import read_load_issues
    from traceanalyze.output.escape import shell_arg, terminal

    shown = {"warning": 0, "info": 0}
    hidden = 0
    for severity, file, message, count in read_load_issues(db_path):
        if severity == "info" and quiet:
            continue
        if shown.get(severity, 0) >= LOAD_ISSUES_SHOWN:
            hidden += 1
            continue
        shown[severity] = shown.get(severity, 0) + 1
        where = f"{file}: " if file else ""
        counted = f" ({count:,} events)" if count else ""
        click.echo(terminal(f"traceanalyze: {severity}: {where}{message}{counted}"), err=True)
    if hidden:
        click.echo(f"traceanalyze: ... and {hidden} more: traceanalyze sql {shell_arg(db_path)} "
                   "'SELECT * FROM load_issues'", err=True)


LOAD_ISSUES_SHOWN = 20  # per severity, on stderr


TABLE_ROW_LIMIT = 1000  # rows the table format prints unless --limit says otherwise
FETCH_ROWS = 10_000  # rows fetched (and written) at a time


# A query may start with a `--` comment (every rule's SQL does): not an option.
@cli.command(context_settings={"ignore_unknown_options": True})
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
                   " by default it is read-only and the query cannot touch other files.")
@click.option("--schema", "show_schema", is_flag=True, help="Print the documented tables and columns.")
@ranks_option
def sql(source: Path, query: str | None, query_file: Path | None, fmt: str, limit: int | None,
        timeout_s: float | None, write: bool, show_schema: bool, ranks: str):
    """Run SQL on a trace database (a .duckdb file, or a trace folder that is loaded first).

    The result is written as it is fetched (any size, in bounded memory).
    """
    from traceanalyze.db import table_comments
    from traceanalyze.db.docs import schema_markdown

    if show_schema:
        click.echo(schema_markdown(table_comments()))
        return
    if source is None:
        raise TraceanalyzeError("no database or trace folder given")
    if query_file:
        query = query_file.read_text()
    if not query:
        raise TraceanalyzeError("no query given (pass it as an argument or with --file)")
    if limit is None:
        limit = TABLE_ROW_LIMIT if fmt == "table" else 0
    db_path = _resolve_db(source, ranks)
    try:
        # read-only means nothing on disk changes: no writes to the database, no COPY TO / ATTACH,
        # and a locked configuration (CALL enable_logging(storage='file') would abort DuckDB)
        con = tracedb.connect(db_path, read_only=not write,
                              config={} if write else {"enable_external_access": False})
        if not write:
            con.execute("SET lock_configuration = true")
    except duckdb.Error as exc:
        raise TraceanalyzeError(f"cannot open the database: {' '.join(str(exc).split())}", str(db_path)) from None
    try:
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
            raise TraceanalyzeError(f"query stopped after the --timeout of {timeout_s:g} s") from None
        if not isinstance(exc, duckdb.Error) or isinstance(exc, duckdb.InterruptException):
            raise  # Ctrl-C / SIGTERM: faults.py says 'interrupted'
        raise TraceanalyzeError(f"query failed: {' '.join(str(exc).split())}") from None
    finally:
        if timer is not None:
            timer.cancel()
    if was_cut():
        click.echo(f"traceanalyze: only the first {shown:,} rows are shown (--limit {limit}; "
                   "--limit 0 prints all)", err=True)


def _resolve_db(source: Path, ranks: str) -> Path:
    if source.is_file() and source.suffix in (".duckdb", ".db"):
        return source
    if not source.exists():
        raise TraceanalyzeError("no such file or directory", str(source))
    db_path = default_out_dir(source) / "trace.duckdb"
    load_trace_dir(source, db_path, parse_rank_selection(ranks), progress=_progress(True))
    return db_path


def _register_commands() -> None:
    import importlib

    from traceanalyze.commands import COMMAND_MODULES

    for name in COMMAND_MODULES:
        module = importlib.import_module(f"traceanalyze.commands.{name}")
        cli.add_command(module.command)


_register_commands()


def main() -> None:
    """Exit 0 / 1 / 2; 130 (Ctrl-C) or 143 (SIGTERM) when interrupted (see faults.py)."""
    from traceanalyze import faults

    faults.run(lambda: cli.main(standalone_mode=False))


if __name__ == "__main__":  # pragma: no cover
    main()
