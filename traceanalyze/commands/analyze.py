"""`traceanalyze DIR` (the default command): analyze, print the verdict, write the report folder."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from traceanalyze.commands._options import (
    force_option,
    out_option,
    param_option,
    peak_tflops_option,
    quiet_option,
    ranks_option,
    with_peak,
)
from traceanalyze.commands._scale import executor_options, load_options
from traceanalyze.progress import cli_progress


def _color_wanted() -> bool:
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ


@click.command("analyze", short_help="Analyze traces: verdict, report.html, summary.json (the default).")
@click.argument("trace_dir", required=False)
@ranks_option()
@out_option()
@param_option()
@peak_tflops_option()
@click.option("--perfetto", is_flag=True, help="Also write trace.perfetto-trace: all ranks merged, aligned, findings marked.")
@click.option("--no-html", is_flag=True, help="Do not write report.html.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="What to print on stdout: the verdict (text) or summary.json (json).")
@force_option()
@quiet_option()
@executor_options
def command(trace_dir: str | None, ranks: str, out_dir: Path | None, params: tuple[str, ...],
            peak_tflops: float | None, perfetto: bool,
            no_html: bool, fmt: str, force: bool, quiet: bool, **scale) -> None:
    """Analyze per-rank traces: which rank and which phase slows the job, why, what to try.

    Writes report.html, summary.json and trace.duckdb into the output folder.
    TRACE_DIR may be an fsspec URL (s3://bucket/traces); without it, --shards names a shard
    set written by `traceanalyze ingest` and only the cross-rank analysis runs.
    Exit code 0 when the analysis completed (whatever it found), 2 on bad input.
    """
    from traceanalyze.api import analyze
    from traceanalyze.escape import shell_arg
    from traceanalyze.output.terminal import render_verdict
    from traceanalyze.pipeline import default_out_dir

    options = load_options(trace_dir, scale)
    out_dir = out_dir if out_dir is not None else default_out_dir(trace_dir or options["shards"])
    progress = cli_progress(quiet)
    with analyze(trace_dir, ranks, db=out_dir / "trace.duckdb", params=with_peak(params, peak_tflops), config=Path.cwd(),
                 progress=progress, force=force, **options) as analysis:
        paths = analysis.write_report(out_dir, html=not no_html, perfetto=perfetto, progress=progress)
        summary = analysis.summary_dict
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
