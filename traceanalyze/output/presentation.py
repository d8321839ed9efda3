"""Facts every renderer shows the same way (terminal, HTML, CI formats, diff): read from the summary, never recomputed."""

from __future__ import annotations

from traceanalyze.findings import sort_finding_dicts
from traceanalyze.metrics import skew_pct


def rank_skew_pct(summary: dict) -> float | None:
    """Worst vs median rank own step time, % of the median (summary.steps.rank_skew_pct; summaries
    written before that key existed get the same definition from metrics.skew_pct)."""
    steps = summary.get("steps") or {}
    if "rank_skew_pct" in steps:
        return steps["rank_skew_pct"]
    return skew_pct(steps.get("median_rank_step_ms"), steps.get("worst_rank_step_ms"))


def is_gpu_trace(summary: dict) -> bool:
    """Some rank ran GPU work (its GPU metrics are not null)."""
    return any((r.get("metrics") or {}).get("gpu_busy_pct") is not None for r in summary.get("ranks") or [])


def ordered_findings(summary: dict) -> list[dict]:
    """The summary's findings in the one finding order (findings.finding_order: severity, then
    cost per step), the order every renderer lists them in."""
    return sort_finding_dicts(summary.get("findings"))


def mean_step_ms(metrics: dict) -> float | None:
    """A rank's mean step, wall clock: `metrics.step_time_ms.mean` (a summary written before that
    key: the sum of its mean phases, which split the step)."""
    step = metrics.get("step_time_ms") or {}
    if "mean" in step:
        return step["mean"]
    phases = [v for v in (metrics.get("phases_ms") or {}).values() if v is not None]
    return sum(phases) if phases else None
