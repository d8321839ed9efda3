"""The whole analysis in one call (`analyze()` + `write_report()`) and where its outputs go:
reports/<name>/, the cache folder. It composes the API (api.py); nothing below imports it."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from traceanalyze.api import analyze
from traceanalyze.report_folder import AnalysisPaths

Progress = Callable[[str], None]


class AnalysisResult(NamedTuple):
    """`summary, paths = run_analysis(...)`, or `run_analysis(...).summary`."""

    summary: dict
    paths: AnalysisPaths


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
    load_options = dict(load_options or {})
    source = trace_dir if trace_dir is not None else load_options.get("shards")
    out_dir = Path(out_dir) if out_dir is not None else default_out_dir(source)
    say = progress or (lambda _msg: None)
    with analyze(trace_dir, ranks if ranks is not None else "all", db=out_dir / "trace.duckdb",
                 params=list(params), config=config_dir or Path.cwd(), progress=say,
                 force=not reuse, **load_options) as analysis:
        paths = analysis.write_report(out_dir, html=html, perfetto=perfetto, progress=say)
        return AnalysisResult(analysis.summary_dict, paths)
