"""One finding, one number per quantity, each with its own label: the lateness at the
collective, the cost per step and the excess in a phase cannot be read as the same thing, and
`explain` says how the severity the finding shows was decided."""

from __future__ import annotations

from pathlib import Path

import pytest

from traceanalyze.commands.explain import explain_text
from traceanalyze.diagnosis.ruleset import load_rules

ROOT = Path(__file__).resolve().parent.parent
STRAGGLER = ROOT / "fixtures" / "ddp" / "input_straggler"


@pytest.fixture(scope="module")
def straggler(fixture_db):
    import traceanalyze

    with traceanalyze.analyze(STRAGGLER, db=fixture_db(STRAGGLER)) as a:
        finding = next(f for f in a.findings if f.rule == "collective-straggler")
        lateness = a.sql("SELECT step, late_ns FROM step_lateness WHERE rank = ? ORDER BY step",
                         [finding.ranks[0]]).rows()
        yield a, finding, lateness


def test_late_is_the_mean_over_the_late_steps_and_the_cost_the_same_sum_over_all_steps(straggler):
    a, f, lateness = straggler
    ev = f.evidence
    late = {step: ns for step, ns in lateness if step in f.steps}
    assert len(late) == ev["late_steps_count"] == len(f.steps)
    assert ev["late_ms"] == pytest.approx(sum(late.values()) / len(late) / 1e6, abs=1e-3)  # (evidence: us)
    assert f.cost.ms_per_step == pytest.approx(sum(late.values()) / ev["aligned_steps_count"] / 1e6, abs=0.05)
    if ev["late_steps_count"] == ev["aligned_steps_count"]:   # late on every step: one number
        assert round(ev["late_ms"]) == round(f.cost.ms_per_step)


def test_each_number_is_labelled_with_what_it_measures(straggler):
    a, f, _ = straggler
    ev = f.evidence
    assert (f"is late at the {ev['op']} by {ev['late_ms']:.0f} ms on {ev['late_steps_count']} of "
            f"{ev['aligned_steps_count']} steps") in f.title
    assert "wait for it" in f.title and "ms per step for it" not in f.title
    assert f"{ev['input_excess_ms']:.0f} ms per late step longer" in f.advice
    assert "excess in that phase" in f.advice
    verdict = a.verdict
    assert f"costs {f.cost.ms_per_step:.0f} ms/step ({f.cost.pct_of_step:.0f}% of the step)" in verdict


def test_explain_says_how_the_severity_shown_was_decided(straggler):
    _, f, _ = straggler
    rule = next(r for r in load_rules() if r.id == "collective-straggler")
    text = explain_text(rule)
    assert "error when the cost per step" in " ".join(text.split())
    error_pct = rule.params["error_pct"].default
    expected = "error" if f.cost.pct_of_step >= error_pct else "warning"
    assert f.severity == expected


def test_every_rule_that_sets_severity_in_detect_explains_how():
    for rule in load_rules():
        detect = rule.detect_sql or rule.detect_py.read_text()
        if "severity" in detect.lower():
            assert rule.severity_rule, rule.id
            assert rule.severity_rule.split(";")[0].split()[0] in ("info", "warning", "error"), rule.id
            assert rule.severity_rule in " ".join(explain_text(rule).split())
        else:
            assert f"severity: {rule.severity} (always)" in explain_text(rule)


ALL_FIXTURES = sorted(p for group in ("ddp", "parallel", "cuda") for p in (ROOT / "fixtures" / group).iterdir()
                      if p.is_dir() and any(".json" in f.name and f.name != "expected.json" for f in p.iterdir()))


def _numbers_ms(text: str) -> list[float]:
    import re

    return [float(x) for x in re.findall(r"(\d+(?:\.\d+)?) ms\b", " ".join(text.split()))]


@pytest.mark.parametrize("folder", ALL_FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_stragglers_rendered_text_gives_one_number_per_fact(folder, fixture_summary):
    """On every fixture, in the verdict as printed: a collective-straggler's title gives one
    number in ms, its lateness, which is also its cost when it is late on every step; the
    advice's cause excess less what the rank makes up before the collective is that lateness."""
    from traceanalyze.output.terminal import render_verdict

    summary = fixture_summary(folder, folder.name)
    text = " ".join(render_verdict(summary).split())
    for f in summary["findings"]:
        if f["rule"] != "collective-straggler":
            continue
        ev = f["evidence"]
        assert _numbers_ms(f["title"]) == [round(ev["late_ms"])], f["title"]
        assert " ".join(f["title"].split()) in text
        if ev["late_steps_count"] == ev["aligned_steps_count"]:
            assert round(f["cost"]["ms_per_step"]) == round(ev["late_ms"])
        if ev["catch_up_note"]:   # the cause's excess, what the rank makes up, the lateness: they add up
            made_up, late = _numbers_ms(ev["catch_up_note"])
            assert f"{ev['cause_excess_ms']:.0f} ms per late step" in " ".join(f["advice"].split())
            assert ev["cause_excess_ms"] - made_up == pytest.approx(late, abs=1.0)
            assert late == round(ev["late_ms"])
