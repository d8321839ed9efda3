"""One finding order everywhere findings are listed: the terminal verdict, report.html, the
notebook cell, the gate and its CI formats, the diff, and summary.json itself.

The order is severity first (error, warning, info), then cost per step (largest first, no cost
last). The findings below are chosen so that ordering by cost alone would give another order:
the info finding costs the most, and an error has no cost.
"""

from __future__ import annotations

from summary_builder import finding, make_summary

from traceanalyze.compare.diff import diff_summaries
from traceanalyze.findings import Cost, Finding, sort_findings
from traceanalyze.compare.gate import GatePolicy, evaluate
from traceanalyze.output.ci import format_github, sarif_log
from traceanalyze.output.diff_report import render_diff_text
from traceanalyze.output.html import build_context
from traceanalyze.output.notebook import render_analysis_html
from traceanalyze.output.terminal import render_verdict

# (rule, severity, ms per step), listed in no particular order
FOUND = [("launch-bound-kernels", "info", 90.0),
         ("dataloader-stall", "warning", 30.0),
         ("host-sync", "error", None),
         ("step-jitter", "warning", None),
         ("collective-straggler", "error", 20.0),
         ("memory-creep", "warning", 45.0)]
# worked out by hand from the rule: errors (20 ms, then no cost), warnings (45, 30, no cost), info
EXPECTED = ["collective-straggler", "host-sync", "memory-creep", "dataloader-stall", "step-jitter",
            "launch-bound-kernels"]


def _summary() -> dict:
    return make_summary({0: 100.0, 1: 100.0}, findings=[
        finding(rule, sev, ranks=[1], title=f"the {rule} finding", ms_per_step=ms) for rule, sev, ms in FOUND])


def _order_in(text: str) -> list[str]:
    """The rules of EXPECTED by where their finding title first appears in `text`."""
    return sorted(EXPECTED, key=lambda rule: text.index(f"the {rule} finding"))


def test_the_rules_stage_orders_findings_so():
    found = [Finding(rule, sev, f"the {rule} finding", ranks=(1,), cost=Cost(ms, None)) for rule, sev, ms in FOUND]
    assert [f.rule for f in sort_findings(found)] == EXPECTED


def test_terminal_notebook_and_html_list_findings_in_the_one_order():
    summary = _summary()
    terminal = render_verdict(summary)
    assert _order_in(terminal[terminal.index("Findings"):]) == EXPECTED
    notebook = render_analysis_html(summary)
    assert _order_in(notebook[notebook.index("ta-findings"):]) == EXPECTED
    context = build_context(summary, "trace.duckdb")
    assert [f.rule for f in context.findings] == EXPECTED
    assert context.verdict == "the collective-straggler finding"  # the first finding: the worst
    # the "Biggest cost" figure is the costliest finding whatever its severity (90 ms, info)
    (biggest,) = [k for k in context.kpis if k.label == "Biggest cost"]
    assert biggest.value == "90.0 ms/step" and "launch-bound-kernels" in biggest.detail


def test_gate_ci_formats_and_diff_list_findings_in_the_one_order():
    summary = _summary()
    result = evaluate(summary, GatePolicy(fail_on="info"))
    assert [f["rule"] for f in result.findings] == EXPECTED
    github = format_github(result)
    assert _order_in(github) == EXPECTED
    sarif = sarif_log(summary, result)
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]][:len(EXPECTED)] == EXPECTED
    empty = make_summary({0: 100.0, 1: 100.0})
    assert [f["rule"] for f in diff_summaries(empty, summary).findings_added] == EXPECTED
    assert [f["rule"] for f in diff_summaries(summary, empty).findings_removed] == EXPECTED
    assert _order_in(render_diff_text(diff_summaries(empty, summary))) == EXPECTED
