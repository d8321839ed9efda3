"""`traceanalyze DIR` (the default command): analyze, print the verdict, write the report folder."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from traceanalyze.load.discover import parse_rank_selection


def _progress(quiet: bool):
    if quiet:
        return None
    from traceanalyze.output.escape import terminal

    return lambda msg: click.echo(f"traceanalyze: {terminal(msg)}", err=True)


def _color_wanted() -> bool:
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ


@click.command("analyze", short_help="Analyze traces: verdict, report.html, summary.json (the default).")
@click.argument("trace_dir", type=click.Path(path_type=Path))
@click.option("--ranks", default="all", show_default=True,
              help="Ranks to load: all, a list (0,3) or a range (0-7).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output folder [default: reports/<trace dir name>/].")
@click.option("--param", "params", multiple=True, metavar="RULE.NAME=VALUE",
              help="Override a rule threshold, e.g. --param collective-straggler.min_late_ms=20 (repeatable).")
@click.option("--perfetto", is_flag=True, help="Also write trace.perfetto-trace: all ranks merged, aligned, findings marked.")
@click.option("--no-html", is_flag=True, help="Do not write report.html.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="What to print on stdout: the verdict (text) or summary.json (json).")
@click.option("--force", is_flag=True, help="Parse the traces again even if the stored database is up to date.")
@click.option("-q", "--quiet", is_flag=True, help="No progress messages on stderr.")
def command(trace_dir: Path, ranks: str, out_dir: Path | None, params: tuple[str, ...], perfetto: bool,
            no_html: bool, fmt: str, force: bool, quiet: bool) -> None:
    """Analyze per-rank traces: which rank and which phase slows the job, why, what to try.

    Writes report.html, summary.json and trace.duckdb into the output folder.
    Exit code 0 when the analysis completed (whatever it found), 2 on bad input.
    """
    from traceanalyze.output.escape import shell_arg
    from traceanalyze.output.terminal import render_verdict
    from traceanalyze.pipeline import run_analysis

    summary, paths = run_analysis(trace_dir, out_dir, parse_rank_selection(ranks), list(params),
                                  html=not no_html, perfetto=perfetto, reuse=not force,
                                  progress=_progress(quiet))
    if fmt == "json":
        click.echo(paths.summary_json.read_text(encoding="utf-8"), nl=False)
        return
    outputs = [("report", str(paths.report_html))] if paths.report_html else []
    outputs.append(("summary", str(paths.summary_json)))
    if paths.perfetto_trace:
        outputs.append(("perfetto", f"{paths.perfetto_trace}  (open in https://ui.perfetto.dev)"))
    # a command to copy: the database path is shell-quoted (an --out with `$(...)` stays a path)
    outputs.append(("query", f"traceanalyze sql {shell_arg(paths.db)} 'SELECT * FROM steps'"))
    click.echo(render_verdict(summary, outputs, color=_color_wanted()), nl=False)

