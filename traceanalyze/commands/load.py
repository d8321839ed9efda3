"""`traceanalyze load TRACE_DIR`: only build the trace database."""

from __future__ import annotations

from pathlib import Path

import click

from traceanalyze.commands._options import force_option, quiet_option, ranks_option
from traceanalyze.commands._scale import executor_options, load_options
from traceanalyze.load import load_trace_dir, read_load_issues
from traceanalyze.load.discover import parse_rank_selection
from traceanalyze.escape import shell_arg, terminal
from traceanalyze.progress import cli_progress, progress_reporter

LOAD_ISSUES_SHOWN = 20  # per severity, on stderr


@click.command(name="load")
@click.argument("trace_dir")
@click.option("--db", "db_path", type=click.Path(path_type=Path), default=None,
              help="Database file to write [default: reports/<dir name>/trace.duckdb].")
@ranks_option()
@force_option("Parse again even if the stored database is up to date.")
@quiet_option("No progress messages.")
@executor_options
def command(trace_dir: str, db_path: Path | None, ranks: str, force: bool, quiet: bool, **scale) -> None:
    """Load per-rank traces into a DuckDB trace database."""
    if db_path is None:
        from traceanalyze.pipeline import default_out_dir  # (it imports the analysis: only when needed)

        db_path = default_out_dir(trace_dir) / "trace.duckdb"
    say, done = progress_reporter(cli_progress(quiet))
    try:
        result = load_trace_dir(trace_dir, db_path, parse_rank_selection(ranks), reuse=not force,
                                progress=say, **load_options(trace_dir, scale))
    finally:
        done()
    echo_load_issues(result.db_path, quiet, result.issues)
    state = "reused" if result.reused else "wrote"
    click.echo(terminal(f"{state} {result.db_path}: {len(result.ranks)} rank(s), {result.events:,} events"))


def echo_load_issues(db_path: Path, quiet: bool, issues=None) -> None:
    """Warnings (data lost or doubtful) always go to stderr; notes only without --quiet.
    `issues`: the database's load_issues when the load read them already (LoadResult.issues)."""
    shown = {"warning": 0, "info": 0}
    hidden = 0
    for severity, file, message, count in read_load_issues(db_path) if issues is None else issues:
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
