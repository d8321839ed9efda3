"""`traceanalyze scaling RUN_DIR...`: the same job at several world sizes -> throughput, efficiency, lost time."""

from __future__ import annotations

from pathlib import Path

import click

from traceanalyze.commands._emit import emit
from traceanalyze.commands._options import quiet_option
from traceanalyze.progress import cli_progress


@click.command(name="scaling")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="What to print on stdout: tables and verdict (text) or the scaling report (json).")
@click.option("--html", "html_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write a self-contained HTML page with the charts to this file.")
@click.option("--batch-size", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Samples per rank per step, the same in every run (when the traces have no shapes).")
@click.option("--global-batch-size", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Samples per step over all ranks, the same in every run (strong scaling).")
@quiet_option()
def command(run_dirs: tuple[Path, ...], fmt: str, html_path: Path | None, batch_size: float | None,
            global_batch_size: float | None, quiet: bool) -> None:
    """Compare runs of the same job at different world sizes (one trace folder per run).

    Prints throughput, weak- and strong-scaling efficiency against the smallest world size and,
    phase by phase, where the time lost against ideal scaling went. Exit code 2 on bad input.
    """
    from traceanalyze.api import scaling
    from traceanalyze.output.scaling_report import render_scaling_html, render_scaling_text
    from traceanalyze.pipeline import cache_db_path

    # each run's database goes to the cache folder (reused while its traces are unchanged)
    report = scaling(list(run_dirs), batch_size, global_batch_size, db_for=cache_db_path,
                     progress=cli_progress(quiet))
    emit(report.to_dict(), lambda: render_scaling_text(report), lambda: render_scaling_html(report), fmt, html_path)
