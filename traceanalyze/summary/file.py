"""A summary.json on disk: tell it from a trace, read it and check what the gate, the diff and
the CI formats rely on (a hand-edited or crafted file fails with a one-line TraceError, exit 2).

`summary_from_source(path, analyze)`: a SOURCE the user names (a summary.json, or traces to
analyze) -> a summary dict; used by the API (`traceanalyze.compare.diff`) and the `check` / `diff` commands.
"""

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


# A summary.json is shallow (about 6 levels); a crafted one may nest without end or hold
# numbers no metric can have. Both are refused with exit code 2 before anything reads them.
MAX_SUMMARY_DEPTH = 64
MAX_SUMMARY_NUMBER = 1e300  # |value| beyond this: not a time, a share or a byte count


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number (the summary contract writes null)")


def read_summary(path: Path) -> dict:
    """Read and check a summary.json (exit code 2 with a one-line message when unusable)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceanalyzeError(f"cannot read the summary: {exc.strerror}", str(path)) from None
    except UnicodeDecodeError as exc:
        raise TraceanalyzeError(f"not a valid summary.json ({exc})", str(path)) from None
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise TraceanalyzeError("not a valid summary.json (nested too deeply)", str(path)) from None
    except ValueError as exc:  # JSONDecodeError, NaN / Infinity, an integer of > 4300 digits
        raise TraceanalyzeError(f"not a valid summary.json ({' '.join(str(exc).split())[:200]})",
                                str(path)) from None
    found = data.get("schema") if isinstance(data, dict) else None
    if found != SUMMARY_SCHEMA:
        raise TraceanalyzeError(f"not a {SUMMARY_SCHEMA} summary (schema: {_short(found)})", str(path))
    problem = value_problem(data) or shape_problem(data)
    if problem:
        raise TraceanalyzeError(f"broken summary: {problem}", str(path))
    return data


def _short(value) -> str:
    text = repr(value) if isinstance(value, (str, int, float, type(None))) else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def value_problem(data) -> str | None:
    """Nesting beyond MAX_SUMMARY_DEPTH or a number out of range, anywhere (no recursion)."""
    stack = [(data, 0, "summary")]
    while stack:
        value, depth, where = stack.pop()
        if depth > MAX_SUMMARY_DEPTH:
            return f"{where} is nested more than {MAX_SUMMARY_DEPTH} levels deep"
        if isinstance(value, dict):
            stack.extend((v, depth + 1, f"{where}.{_short(k)}") for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, depth + 1, f"{where}[{i}]") for i, v in enumerate(value))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            if not abs(value) <= MAX_SUMMARY_NUMBER:
                return f"{where} is out of range ({_short(value) if abs(value) < 1e30 else 'huge'})"
    return None


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _numbers_problem(values: dict, where: str, keys=None) -> str | None:
    """`values[key]` (every key, or `keys`) is a number or null."""
    for key in (values if keys is None else keys):
        value = values.get(key)
        if value is not None and not _is_number(value):
            return f"{where}.{key} must be a number or null, not {_short(value)}"
    return None


RANK_NUMBERS = ("gpu_idle_pct", "gpu_busy_pct", "comm_ms_per_step", "peak_memory_bytes",
                "comm_overlap_pct")
STEP_NUMBERS = ("median_rank_step_ms", "worst_rank_step_ms")
COST_NUMBERS = ("ms_per_step", "pct_of_step")


def _metrics_problem(metrics, where: str) -> str | None:
    if metrics is None:
        return None
    if not isinstance(metrics, dict):
        return f"{where} must be an object or null"
    for key in ("step_time_ms", "phases_ms", "phases_pct"):
        part = metrics.get(key)
        if part is not None and not isinstance(part, dict):
            return f"{where}.{key} must be an object or null"
        problem = _numbers_problem(part or {}, f"{where}.{key}")
        if problem:
            return problem
    return _numbers_problem(metrics, where, RANK_NUMBERS)


def _steps_problem(steps: dict) -> str | None:
    problem = _numbers_problem(steps, "steps", STEP_NUMBERS)
    if problem:
        return problem
    if not isinstance(steps.get("aligned", []), list):
        return "steps.aligned must be a list"
    per_step = steps.get("per_step", [])
    if not isinstance(per_step, list) or not all(isinstance(row, dict) for row in per_step):
        return "steps.per_step must be a list of objects"
    for i, row in enumerate(per_step):
        by_rank = row.get("ms_by_rank", {})
        if not isinstance(by_rank, dict):
            return f"steps.per_step[{i}].ms_by_rank must be an object"
        problem = _numbers_problem(by_rank, f"steps.per_step[{i}].ms_by_rank")
        if problem:
            return problem
    return None


def shape_problem(summary: dict) -> str | None:
    """What the gate, the diff and the CI formats rely on, checked so a hand-edited file
    fails with exit 2 (the types of the fields they read; other keys are not looked at)."""
    lists = {key: summary.get(key, []) for key in ("ranks", "findings", "load_issues")}
    for key, value in lists.items():
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            return f"{key} must be a list of objects"
    if not isinstance(summary.get("steps", {}), dict):
        return "steps must be an object"
    for i, r in enumerate(lists["ranks"]):
        if not isinstance(r.get("rank"), int) or isinstance(r.get("rank"), bool):
            return "every ranks[] entry needs an integer rank"
        problem = (_metrics_problem(r.get("metrics"), f"ranks[{i}].metrics")
                   or _numbers_problem(r, f"ranks[{i}]", ("events", "events_bytes")))
        if problem:
            return problem
    problem = _steps_problem(summary.get("steps", {}))
    if problem:
        return problem
    for i, f in enumerate(lists["findings"]):
        if not isinstance(f.get("rule"), str) or f.get("severity") not in SEVERITIES:
            return f"findings[{i}] needs a rule id and a severity ({', '.join(SEVERITIES)})"
        for key in ("ranks", "steps"):
            items = f.get(key, [])
            if not isinstance(items, list) or not all(isinstance(r, int) and not isinstance(r, bool)
                                                      for r in items):
                return f"findings[{i}].{key} must be a list of integers"
        cost = f.get("cost")
        if cost is not None and not isinstance(cost, dict):
            return f"findings[{i}].cost must be an object or null"
        problem = _numbers_problem(cost or {}, f"findings[{i}].cost", COST_NUMBERS)
        if problem:
            return problem
    for i, issue in enumerate(lists["load_issues"]):
        rank, count = issue.get("rank"), issue.get("count")
        if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool)):
            return f"load_issues[{i}].rank must be an integer or null"
        if count is not None and (not isinstance(count, int) or isinstance(count, bool)):
            return f"load_issues[{i}].count must be an integer or null"
    return None


def summary_from_source(source: Path, analyze) -> dict:
    """`source` is a summary.json (read as it is), an earlier run's output folder (its
    summary.json) or a trace folder/file
    (`analyze(source)`)."""
    if not source.exists():
        raise TraceanalyzeError("no such file or directory", str(source))
    if is_summary_file(source):
        return read_summary(source)
    if source.is_dir() and is_output_folder(source):
        return read_summary(source / "summary.json")
    return analyze(source)


def is_output_folder(folder: Path) -> bool:
    """An earlier run's output folder: its summary.json beside the report or the database."""
    return is_summary_file(folder / "summary.json") and any(
        (folder / name).is_file() for name in ("report.html", "trace.duckdb"))
