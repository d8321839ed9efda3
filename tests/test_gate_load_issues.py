"""The gate and lost data: heavy load warnings fail it, lighter ones are named, never a bare
"passed"; a metric the candidate cannot compute is named, not silently left out."""

from __future__ import annotations

import math

import pytest
from summary_builder import load_issue, make_summary

from traceanalyze.compare.gate import HEAVY_LOSS_PCT, evaluate
from traceanalyze.output import ci


def with_events(summary: dict, events: dict[int, int], events_bytes: dict[int, int]) -> dict:
    for r in summary["ranks"]:
        r["events"], r["events_bytes"] = events[r["rank"]], events_bytes[r["rank"]]
    return summary


def verdict(result) -> str:
    return ci.format_text(result).strip().splitlines()[-1]


@pytest.mark.parametrize("kept_pct, fails", [(56, True), (int(100 - HEAVY_LOSS_PCT), True), (95, False)])
def test_a_truncated_rank_fails_the_gate_when_it_lost_a_heavy_share(kept_pct, fails):
    """Rank 1's file was cut: its event bytes vs the median of the other ranks tell the loss."""
    full = 1_000_000
    summary = with_events(make_summary({0: 100.0, 1: 100.0, 2: 100.0},
                                       load_issues=[load_issue("warning", rank=1, kind="truncated")]),
                          {0: 5000, 1: 5000 * kept_pct // 100, 2: 5000},
                          {0: full, 1: full * kept_pct // 100, 2: full})
    result = evaluate(summary)
    assert result.passed is not fails
    if fails:
        assert result.exit_code == 1
        assert f"about {100 - kept_pct}% of the rank's events are missing" in result.reasons[0]
        assert verdict(result).startswith("traceanalyze check: FAILED (1 reason(s))")
    else:  # not heavy: the verdict still says there was a load warning
        assert verdict(result).startswith("traceanalyze check: passed with 1 load warning(s)")
        assert any("1 load warning(s) (truncated)" in n for n in result.notes)


@pytest.mark.parametrize("skipped, fails", [(200, True), (99, False)])
def test_counted_losses_fail_the_gate_from_the_heavy_share(skipped, fails):
    """bad-ts: `skipped` of rank 0's 1,000 events; heavy from 10 % (100 events)."""
    issue = {**load_issue("warning", rank=0, kind="bad-ts"), "count": skipped}
    summary = with_events(make_summary({0: 100.0, 1: 100.0}, load_issues=[issue]),
                          {0: 1000, 1: 1000}, {0: 10**6, 1: 10**6})
    assert evaluate(summary).passed is not fails


def test_a_rank_file_that_is_not_a_file_fails_the_gate():
    issue = {"rank": None, "file": "t/rank2.pt.trace.json", "kind": "not-a-file", "severity": "warning",
             "message": "named like a trace file but a FIFO (named pipe): skipped (not read)", "count": None}
    result = evaluate(make_summary({0: 100.0, 1: 100.0}, load_issues=[issue]))
    assert result.exit_code == 1 and "could not be read at all" in result.reasons[0]


def test_a_rank_left_out_of_the_analysis_fails_the_gate():
    """A rank whose map failed (its trace could not be read) is missing from every number."""
    issue = {"rank": 2, "file": "t/rank2.pt.trace.json", "kind": "rank-failed", "severity": "warning",
             "message": "this rank could not be read and is left out of the analysis: corrupt gzip stream",
             "count": None}
    result = evaluate(make_summary({0: 100.0, 1: 100.0}, load_issues=[issue]))
    assert result.exit_code == 1 and "could not be read at all" in result.reasons[0]


def test_info_load_issues_leave_a_plain_pass():
    result = evaluate(make_summary({0: 100.0, 1: 100.0}, load_issues=[load_issue("info", kind="rank-from-name")]))
    assert verdict(result).startswith("traceanalyze check: passed [")


def test_a_nan_candidate_metric_is_named_not_dropped():
    """An in-memory summary (check on a trace folder) may hold NaN: it must not compare as 'fine'."""
    old = make_summary({0: 100.0, 1: 100.0})
    new = make_summary({0: 100.0, 1: 100.0})
    new["steps"]["worst_rank_step_ms"] = math.nan
    result = evaluate(new, baseline=old)
    assert any(n.startswith("not compared: own step time, worst rank is 100.0 ms in the baseline")
               for n in result.notes), result.notes
    assert "not compared: own step time, worst rank" in ci.format_text(result)
