"""`traceanalyze diff OLD NEW`: what moved between two runs, per phase and per rank."""

from __future__ import annotations

from pathlib import Path

import click

from traceanalyze.commands._analyze import analyzer
from traceanalyze.commands._emit import emit
from traceanalyze.compare.diff import diff_summaries
import traceanalyze.escape as escape
from traceanalyze.output.diff_report import render_diff_html, render_diff_text
from traceanalyze.summary.file import summary_from_source


@click.command(name="diff")
@click.argument("old", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option("--html", "html_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write a self-contained HTML diff report to this file.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def command(old: Path, new: Path, html_path: Path | None, fmt: str):
    """Compare two runs (trace folders or summary.json files) per phase and rank."""
    # a trace folder is analyzed into the cache folder (its database only; no report is written)
    old_summary = summary_from_source(old, analyzer())
    new_summary = summary_from_source(new, analyzer())
    diff = diff_summaries(old_summary, new_summary)
    # the terminal text shows names and titles from the traces: escaped for the terminal
    shown = diff_summaries(*escape.deep((old_summary, new_summary), escape.terminal))
    emit(diff.to_dict(), lambda: render_diff_text(shown), lambda: render_diff_html(diff), fmt, html_path)
