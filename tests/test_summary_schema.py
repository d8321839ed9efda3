"""summary.schema.json describes the summary.json contract, and real summaries satisfy it."""

from __future__ import annotations

import copy

import pytest
from report_helpers import FIXTURES, fixture_scenarios, schema_errors

SCENARIOS = fixture_scenarios()


@pytest.fixture
def balanced_summary(fixture_summary) -> dict:
    return fixture_summary(FIXTURES / "balanced", "fixtures/ddp/balanced")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_real_summary_of_every_recorded_scenario_matches_the_schema(scenario, fixture_summary):
    summary = fixture_summary(FIXTURES / scenario, f"fixtures/ddp/{scenario}")
    assert schema_errors(summary) == []


def test_schema_rejects_a_summary_without_findings(balanced_summary):
    broken = copy.deepcopy(balanced_summary)
    del broken["findings"]
    assert any("findings" in e for e in schema_errors(broken))


def test_schema_rejects_an_unknown_phase_name(balanced_summary):
    broken = copy.deepcopy(balanced_summary)
    broken["ranks"][0]["metrics"]["phases_ms"]["dataloader"] = 1.0
    assert schema_errors(broken)


def test_schema_rejects_an_unknown_severity_and_a_string_time(balanced_summary):
    broken = copy.deepcopy(balanced_summary)
    broken["load_issues"].append({"rank": None, "file": None, "kind": "x", "severity": "fatal",
                                  "message": "m", "count": None})
    broken["timeline"][0]["dur_ms"] = "12 ms"
    errors = schema_errors(broken)
    assert any("fatal" in e for e in errors) and any("12 ms" in e for e in errors)


def test_schema_requires_the_contract_version(balanced_summary):
    broken = dict(balanced_summary, schema="traceanalyze.summary/2")
    assert schema_errors(broken)
