"""The report folder of an analysis: summary.json (+ report.html, + the merged Perfetto trace).

`Analysis.write_report(out_dir)` (api.py) writes it; `run_analysis` (pipeline.py) is
`analyze()` followed by that call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import traceanalyze.db as tracedb
from traceanalyze.errors import TraceError
from traceanalyze.load.stale import sweep_outputs
from traceanalyze.summary.model import write_summary_json

Progress = Callable[[str], None]


@dataclass(frozen=True)
class AnalysisPaths:
    """What `run_analysis` wrote (None for an output that was not asked for)."""

    out_dir: Path
    db: Path
    summary_json: Path
    report_html: Path | None
    perfetto_trace: Path | None


def _make_out_dir(out_dir: Path) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TraceError(f"cannot create the output folder: {exc.strerror}", str(out_dir)) from None
    sweep_outputs(out_dir)  # half-written outputs of killed runs


def write_outputs(summary: dict, out_dir: Path, db_path: Path, html: bool, perfetto: bool,
                  say: Progress) -> AnalysisPaths:
    """summary.json (+ report.html, + the merged Perfetto trace) of an analysis into out_dir."""
    _make_out_dir(out_dir)
    report_html = perfetto_trace = None
    try:
        summary_json = write_summary_json(summary, out_dir / "summary.json")
        if html:
            from traceanalyze.output.html import write_html

            say("writing report.html")
            report_html = write_html(summary, out_dir / "report.html", str(db_path))
        if perfetto:
            from traceanalyze.output.perfetto import write_perfetto_trace

            say("writing the merged Perfetto trace")
            con = tracedb.connect(db_path, read_only=True)
            try:
                perfetto_trace = write_perfetto_trace(con, summary, out_dir / "trace.perfetto-trace")
            finally:
                con.close()
    except OSError as exc:
        raise TraceError(f"cannot write: {exc.strerror}", exc.filename or str(out_dir)) from None
    return AnalysisPaths(out_dir, db_path, summary_json, report_html, perfetto_trace)
