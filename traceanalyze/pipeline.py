"""The whole analysis in one call: load -> summary -> summary.json -> renderers (report.html, Perfetto)."""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from traceanalyze import db as tracedb
from traceanalyze.errors import TraceError

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


def default_out_dir(trace_dir: Path | str) -> Path:
    """reports/<name of the trace folder (or file, without extensions)>: where `traceanalyze DIR` writes."""
    return Path("reports") / run_name(trace_dir)


def run_name(trace_dir: Path) -> str:
    """The name of a run: its folder's name, or the trace file's name without extensions."""
    if "://" in str(trace_dir):  # a URL (s3://bucket/job/traces): its last part
        return str(trace_dir).rstrip("/").rsplit("/", 1)[-1].split(".")[0] or "trace"
    trace_dir = Path(trace_dir)
    name = trace_dir.resolve().name if trace_dir.is_dir() else trace_dir.name.split(".")[0]
    return name or "trace"


CACHE_ENV = "TRACEANALYZE_CACHE_DIR"


def cache_dir() -> Path:
    """$TRACEANALYZE_CACHE_DIR, else $XDG_CACHE_HOME/traceanalyze, else ~/.cache/traceanalyze."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen:
        return Path(chosen)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache") / "traceanalyze"


def cache_db_path(trace_dir: Path) -> Path:
    """The derived database of a trace folder that the user did not ask to keep (`sql DIR`,
    `diff`, `scaling`, `check --baseline DIR`): <cache>/<name>-<hash of the absolute path>/trace.duckdb.
    Reused while the traces are unchanged, like any trace database."""
    absolute = str(Path(trace_dir).resolve())
    digest = hashlib.sha256(absolute.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return cache_dir() / f"{run_name(trace_dir)}-{digest}" / "trace.duckdb"


def _make_out_dir(out_dir: Path) -> None:
    from traceanalyze.load.stale import sweep_outputs

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


def run_analysis(trace_dir: Path, out_dir: Path | None = None, ranks: set[int] | None = None,
                 params: list[str] | tuple = (), *, html: bool = True, perfetto: bool = False,
                 reuse: bool = True, progress: Progress | None = None,
                 config_dir: Path | None = None, load_options: dict | None = None) -> AnalysisResult:
    """`traceanalyze DIR`: analyze, then write trace.duckdb, summary.json and the reports into out_dir.

    `out_dir` defaults to reports/<trace dir name>/, `ranks` None means all ranks, `params` are
    RULE.NAME=VALUE overrides, the configuration file is looked up from `config_dir` (default:
    the working folder). Bad input raises TraceError (exit code 2 in the CLI). The same as
    `traceanalyze.analyze(...)` followed by `.write_report(out_dir)`; `load_options` are its
    executor / shards / workers / ray_address (trace_dir None with shards: the shard set alone).
    """
    from traceanalyze.api import analyze

    load_options = dict(load_options or {})
    source = trace_dir if trace_dir is not None else load_options.get("shards")
    out_dir = Path(out_dir) if out_dir is not None else default_out_dir(source)
    say = progress or (lambda _msg: None)
    with analyze(trace_dir, ranks if ranks is not None else "all", db=out_dir / "trace.duckdb",
                 params=list(params), config=config_dir or Path.cwd(), progress=say,
                 force=not reuse, **load_options) as analysis:
        paths = analysis.write_report(out_dir, html=html, perfetto=perfetto, progress=say)
        return AnalysisResult(analysis.summary_dict, paths)
