"""Helpers for the output tests: real summaries of recorded fixtures, schema validation, hostile strings."""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

import duckdb
from jsonschema import Draft202012Validator

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "ddp"
SCRIPT = "<script>alert(1)</script>"
IMG = '<img src=x onerror="alert(2)">'


def fixture_scenarios() -> list[str]:
    """Recorded scenarios that have trace files (a folder being re-recorded may briefly have none)."""
    return sorted(p.name for p in FIXTURES.iterdir() if p.is_dir() and any(p.glob("*.pt.trace.json*")))


def injected(scenario: str) -> dict:
    """What the recording script injected (fixtures/ddp/<scenario>/expected.json)."""
    return json.loads((FIXTURES / scenario / "expected.json").read_text())["injected"]


@lru_cache(maxsize=1)
def summary_validator() -> Draft202012Validator:
    schema = json.loads(resources.files("traceanalyze.summary").joinpath("summary.schema.json").read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def schema_errors(summary: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in summary_validator().iter_errors(summary)]


def real_summary(db_path: Path, trace_dir: str) -> dict:
    """The summary the real pipeline builds for a loaded database, as summary.json holds it."""
    from traceanalyze.diagnosis.config import load_config
    from traceanalyze.diagnosis.diagnose import diagnose
    from traceanalyze.summary.build import build_summary

    con = duckdb.connect(str(db_path), read_only=True)
    try:
        summary = build_summary(con, trace_dir, diagnose(con, load_config(ROOT, [])))
    finally:
        con.close()
    return json.loads(json.dumps(summary, default=str))  # exactly what summary.json holds


def hostile_summary(summary: dict) -> dict:
    """A copy whose trace strings try to break out of the HTML: script tags, attributes, quotes."""
    s = copy.deepcopy(summary)
    s["trace_dir"] = f"traces/{IMG}"
    event = {"name": f"void at::native::kernel<float, {SCRIPT}>(float*)", "note": "a & b < c > d \"e\" 'f'",
             "dur_ns": 1234}
    s["findings"].append({
        "rule": "launch-bound-kernels", "severity": "warning", "ranks": [s["ranks"][0]["rank"]],
        "steps": s["steps"]["aligned"][:1], "title": f"kernel {SCRIPT} is tiny",
        "cost": {"ms_per_step": 0.5, "pct_of_step": 0.2},
        "evidence": {"kernel": SCRIPT, "events": [event]},
        "advice": f"- fuse {SCRIPT}\n- {IMG}",
        "sql": f"SELECT name FROM kernels WHERE name = '{SCRIPT}' AND \"name\" <> '$x'",
    })
    s["load_issues"].append({"rank": 0, "file": f"{IMG}.json", "kind": "truncated", "severity": "warning",
                             "message": f"file ends abruptly {SCRIPT}", "count": None})
    return s
