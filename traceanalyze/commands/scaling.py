"""`traceanalyze scaling RUN_DIR...`: the same job at several world sizes -> throughput, efficiency, lost time."""

from __future__ import annotations

from pathlib import Path

import click

from traceanalyze.commands._emit import emit


def _progress(quiet: bool):
    if quiet:
        return None
    from traceanalyze.output.escape import terminal

    return lambda msg: click.echo(f"traceanalyze: {terminal(msg)}", err=True)


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
@click.option("-q", "--quiet", is_flag=True, help="No progress messages on stderr.")
def command(run_dirs: tuple[Path, ...], fmt: str, html_path: Path | None, batch_size: float | None,
            global_batch_size: float | None, quiet: bool) -> None:
    """Compare runs of the same job at different world sizes (one trace folder per run).

    Prints throughput, weak- and strong-scaling efficiency against the smallest world size and,
    phase by phase, where the time lost against ideal scaling went. Exit code 2 on bad input.
    """
    from traceanalyze.output.scaling_report import render_scaling_html, render_scaling_text
    from traceanalyze.pipeline import default_out_dir
    from traceanalyze.scaling import analyze_runs

    report = analyze_runs(list(run_dirs), lambda d: default_out_dir(d) / "trace.duckdb",
                          batch_size, global_batch_size, progress=_progress(quiet))
    emit(report.to_dict(), lambda: render_scaling_text(report), lambda: render_scaling_html(report), fmt, html_path)
