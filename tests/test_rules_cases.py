"""Every rule's cases.yaml: small inline traces written as real Kineto JSON, loaded with the real
loader, checked against the findings the case expects (sqlfluff-style yaml test cases).

Each `expect` entry is matched against one finding's summary.json dict: every key it names must
match (numbers approximately, lists element by element); the number of findings must equal the
number of entries, so `expect: []` means the rule reports nothing. `abstain: TEXT` expects the
rule to abstain (the window is below its `judge` needs) with a reason containing TEXT.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import duckdb
import pytest
import yaml

from tests.tracegen import write_trace_dir
from traceanalyze.load import load_trace_dir
from traceanalyze.diagnosis.ruleset import builtin_rules_dir, load_rules, run_rule


def _cases():
    for path in sorted(builtin_rules_dir().glob("*/cases.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        for case_id, case in data["cases"].items():
            yield pytest.param(data["rule"], case, id=f"{data['rule']}::{case_id}")


def matches(expected, actual) -> bool:
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and matches(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and len(expected) == len(actual) and all(map(matches, expected, actual))
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        return (isinstance(actual, (int, float)) and not isinstance(actual, bool)
                and math.isclose(actual, expected, rel_tol=0.02, abs_tol=0.2))
    return expected == actual


def _loaded(case: dict, once_per_session) -> Path:
    """The case's trace written as Kineto JSON and loaded: once per session for every case with
    the same trace (cases of one rule often differ in their parameters only; the database is
    only read)."""
    def make(folder: Path) -> Path:
        load_trace_dir(write_trace_dir(case["trace"], folder / "trace"), folder / "trace.duckdb")
        return folder / "trace.duckdb"

    return once_per_session("rule-case " + json.dumps(case["trace"], sort_keys=True), make)


def _run_case(rule_id: str, case: dict, db: Path, abstained: list) -> tuple[list, duckdb.DuckDBPyConnection]:
    rule = {r.id: r for r in load_rules()}[rule_id]
    con = duckdb.connect(str(db), read_only=True)
    return run_rule(con, rule, case.get("params"), abstained=abstained), con


@pytest.mark.parametrize("rule_id, case", list(_cases()))
def test_rule_case(rule_id, case, once_per_session):
    abstained: list[tuple[str, str]] = []
    findings, con = _run_case(rule_id, case, _loaded(case, once_per_session), abstained)
    try:
        if "abstain" in case:
            assert [r for r, _ in abstained] == [rule_id] and case["abstain"] in abstained[0][1], abstained
        else:
            assert not abstained, f"the rule abstained: {abstained}"
        got = [f.to_dict() for f in findings]
        expected = case["expect"]
        assert len(got) == len(expected), f"expected {len(expected)} finding(s), got {got}"
        unmatched = list(got)
        for want in expected:
            hit = next((f for f in unmatched if matches(want, f)), None)
            assert hit is not None, f"no finding matches {want}; findings: {unmatched}"
            unmatched.remove(hit)
        for finding in findings:
            _assert_sql_reproduces_evidence(con, finding)
    finally:
        con.close()


def _assert_sql_reproduces_evidence(con, finding) -> None:
    """The finding's SQL (parameters bound) runs as printed and returns the evidence events."""
    assert finding.sql, f"{finding.rule}: no SQL to reproduce the evidence"
    cur = con.execute(finding.sql)
    columns = [d[0] for d in cur.description]
    rows = [dict(zip(columns, row)) for row in cur.fetchall()]
    if "events" in finding.evidence:
        shown = finding.evidence["events"]
        assert len(rows[:len(shown) + 1]) == len(shown) or len(shown) == 50  # (the evidence keeps 50 rows)
        for row, event in zip(rows, shown):
            assert row.keys() == event.keys()
            for key, value in row.items():
                assert _same_value(value, event[key]), (finding.rule, key, value, event[key])
    else:
        assert rows, f"{finding.rule}: the printed SQL finds nothing"


def _same_value(queried, shown) -> bool:
    """A value the SQL returns vs the one the finding shows (JSON: numbers to 3 decimals, other
    values as text)."""
    if isinstance(queried, (list, tuple)):
        return isinstance(shown, list) and len(queried) == len(shown) and all(
            _same_value(q, s) for q, s in zip(queried, shown))
    if isinstance(queried, dict):
        return isinstance(shown, dict) and {str(k) for k in queried} == set(shown) and all(
            _same_value(v, shown[str(k)]) for k, v in queried.items())
    if isinstance(queried, bool) or queried is None or isinstance(queried, (int, str)):
        return queried == shown
    try:
        return math.isclose(float(queried), float(shown), abs_tol=5e-4)
    except (TypeError, ValueError):
        return str(queried) == shown
