"""The whole analysis in one call: load -> summary -> summary.json -> renderers (report.html, Perfetto)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from traceanalyze import db as tracedb
from traceanalyze.errors import TraceanalyzeError
from traceanalyze.load import load_trace_dir

Progress = Callable[[str], None]


@dataclass(frozen=True)
class AnalysisPaths:
    """What `run_analysis` wrote (None for an output that was not asked for)."""

    out_dir: Path
    db: Path
    summary_json: Path
    report_html: Path | None
    perfetto_trace: Path | None


class AnalysisResult(NamedTuple):
    """`summary, paths = run_analysis(...)`, or `run_analysis(...).summary`."""

    summary: dict
    paths: AnalysisPaths


def _json_safe(value):
    """NaN and infinities are not JSON; the contract says null for what cannot be computed."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def write_summary_json(summary: dict, path: Path) -> Path:
    from traceanalyze.output.atomic import write_text_atomic

    write_text_atomic(path, json.dumps(_json_safe(summary), indent=2, default=str) + "\n")
    return path


def build_trace_summary(db_path: Path, trace_dir: str, config) -> dict:
    """Rules + metrics on a loaded database -> the summary dict (stages 4-5)."""
    from traceanalyze.summary import build_summary

    con = tracedb.connect(db_path, read_only=True)
    try:
        return build_summary(con, trace_dir, config)
    finally:
        con.close()


def default_out_dir(trace_dir: Path) -> Path:
    """reports/<name of the trace folder (or file, without extensions)>."""
    name = trace_dir.resolve().name if trace_dir.is_dir() else trace_dir.name.split(".")[0]
    return Path("reports") / (name or "trace")


def _make_out_dir(out_dir: Path) -> None:
    from traceanalyze.load.stale import sweep_outputs

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TraceanalyzeError(f"cannot create the output folder: {exc.strerror}", str(out_dir)) from None
    sweep_outputs(out_dir)  # half-written outputs of killed runs


def _write_outputs(summary: dict, out_dir: Path, db_path: Path, html: bool, perfetto: bool,
                   say: Progress) -> AnalysisPaths:
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
        raise TraceanalyzeError(f"cannot write: {exc.strerror}", exc.filename or str(out_dir)) from None
    return AnalysisPaths(out_dir, db_path, summary_json, report_html, perfetto_trace)


def run_analysis(trace_dir: Path, out_dir: Path | None = None, ranks: set[int] | None = None,
                 params: list[str] | tuple = (), *, html: bool = True, perfetto: bool = False,
                 reuse: bool = True, progress: Progress | None = None,
                 config_dir: Path | None = None) -> AnalysisResult:
    """Analyze the traces under `trace_dir`; write trace.duckdb, summary.json and the reports into `out_dir`.

    `out_dir` defaults to reports/<trace dir name>/, `ranks` None means all ranks, `params` are
    RULE.NAME=VALUE overrides, the configuration file is looked up from `config_dir` (default:
    the working folder). Bad input raises TraceanalyzeError (exit code 2 in the CLI).
    """
    from traceanalyze.config import load_config

    say = progress or (lambda _msg: None)
    trace_dir = Path(trace_dir)
    config = load_config(config_dir or Path.cwd(), list(params))  # a typo fails before the long load
    out_dir = Path(out_dir) if out_dir is not None else default_out_dir(trace_dir)
    _make_out_dir(out_dir)
    db_path = out_dir / "trace.duckdb"
    load_trace_dir(trace_dir, db_path, ranks, reuse=reuse, progress=say)
    say("running rules")
    summary = build_trace_summary(db_path, str(trace_dir), config)
    return AnalysisResult(summary, _write_outputs(summary, out_dir, db_path, html, perfetto, say))
