"""A command-line SOURCE (a summary.json, or traces to analyze) -> a summary dict."""

from __future__ import annotations

import json
from pathlib import Path

from traceanalyze.errors import TraceanalyzeError
from traceanalyze.findings import SEVERITIES

SUMMARY_SCHEMA = "traceanalyze.summary/1"
_SUMMARY_MARK = b'"traceanalyze.summary/'
_PEEK_BYTES = 64 * 1024


def is_summary_file(path: Path) -> bool:
    """A file named summary.json, or a plain .json that declares the summary schema near its start."""
    if not path.is_file() or path.suffix != ".json" or path.name.endswith(".pt.trace.json"):
        return False
    if path.name == "summary.json":
        return True
    with path.open("rb") as fh:
        return _SUMMARY_MARK in fh.read(_PEEK_BYTES)


def read_summary(path: Path) -> dict:
    """Read and check a summary.json (exit code 2 with a one-line message when unusable)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TraceanalyzeError(f"cannot read the summary: {exc.strerror}", str(path)) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceanalyzeError(f"not a valid summary.json ({exc})", str(path)) from None
    found = data.get("schema") if isinstance(data, dict) else None
    if found != SUMMARY_SCHEMA:
        raise TraceanalyzeError(f"not a {SUMMARY_SCHEMA} summary (schema: {found!r})", str(path))
    problem = shape_problem(data)
    if problem:
        raise TraceanalyzeError(f"broken summary: {problem}", str(path))
    return data


def shape_problem(summary: dict) -> str | None:
    """What the gate and the diff rely on, checked so a hand-edited file fails with exit 2."""
    lists = {key: summary.get(key, []) for key in ("ranks", "findings", "load_issues")}
    for key, value in lists.items():
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            return f"{key} must be a list of objects"
    if not isinstance(summary.get("steps", {}), dict):
        return "steps must be an object"
    if any(not isinstance(r.get("rank"), int) for r in lists["ranks"]):
        return "every ranks[] entry needs an integer rank"
    for i, f in enumerate(lists["findings"]):
        if not isinstance(f.get("rule"), str) or f.get("severity") not in SEVERITIES:
            return f"findings[{i}] needs a rule id and a severity ({', '.join(SEVERITIES)})"
        if not isinstance(f.get("ranks", []), list):
            return f"findings[{i}].ranks must be a list"
    return None


def summary_from_source(source: Path, analyze) -> dict:
    """`source` is a summary.json (read as it is) or a trace folder/file (`analyze(source)`)."""
    if not source.exists():
        raise TraceanalyzeError("no such file or directory", str(source))
    if is_summary_file(source):
        return read_summary(source)
    return analyze(source)
