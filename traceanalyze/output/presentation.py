"""Facts every renderer shows the same way (terminal, HTML, CI formats, diff): read from the summary, never recomputed."""

from __future__ import annotations

from traceanalyze.findings import sort_finding_dicts
from traceanalyze.analysis.metrics import rank_skew_pct  # noqa: F401  (re-exported: every view shows it alike)


def is_gpu_trace(summary: dict) -> bool:
    """Some rank ran GPU work: its GPU metrics are not null, or it called the CUDA / HIP runtime
    (a trace whose kernels have no measured times, such as a CUPTI range profiler's, is no
    CPU-only trace)."""
    return any((r.get("metrics") or {}).get("gpu_busy_pct") is not None
               or ((r.get("metrics") or {}).get("gpu_runtime_calls") or 0) > 0 for r in summary.get("ranks") or [])


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
