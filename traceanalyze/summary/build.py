"""Stage 5: the summary.json dict (schema traceanalyze.summary/1, see ARCHITECTURE.md) from a trace
database and the rules stage's `Diagnosis` (the summary does not run rules: `diagnose.py` does).

Renderers read only this dict. Notes on the numbers:
- all per-rank numbers use the aligned steps (present on every rank); phases_ms are means per step;
- steps.per_step.ms_by_rank is each rank's own step time: its step minus the time it waited
  at collectives for the last rank to arrive (wait_ms_by_rank), so the rank that holds the
  job back is the worst rank even though every rank's ProfilerStep lasts equally long;
- steps.lateness_ms is how late each rank reached its latest collective of the step,
  step-relative, against the median rank (0 when early);
- groups (a job of two dimensions or more, or with a pipeline: parallel_view.py) is the lateness
  per dimension and group, and one representative step of the pipeline per stage.
"""

from __future__ import annotations

from typing import Any

from traceanalyze.analysis.efficiency import efficiency_summary
from traceanalyze.analysis.flight_recorder import dumps_world_size, flight_recorder_summary
from traceanalyze.analysis.layout import parallel_layout
from traceanalyze.analysis.metrics import (
    PHASES,
    median,
    memory_by_step,
    own_step_medians,
    rank_metrics,
    require_analysis_tables,
    step_comparison,
    timeline,
)
from traceanalyze.analysis.parallel_view import groups_view
from traceanalyze.diagnosis.diagnose import Diagnosis
from traceanalyze.diagnosis.judge import judgement
from traceanalyze.lazy_import import duckdb
from traceanalyze.version import __version__

SCHEMA = "traceanalyze.summary/1"


def _ranks(con: duckdb.DuckDBPyConnection, metrics: dict[int, dict]) -> list[dict[str, Any]]:
    rows = con.execute("""
        SELECT r.rank, r.file, r.clock_offset_ns, coalesce(e.n, 0), r.events_bytes
        FROM ranks AS r LEFT JOIN (SELECT rank, count(*) AS n FROM raw_events GROUP BY rank) AS e
        USING (rank) ORDER BY r.rank""").fetchall()
    return [{"rank": rank, "file": file, "clock_offset_ns": offset, "metrics": metrics.get(rank),
             "events": events, "events_bytes": events_bytes}
            for rank, file, offset, events, events_bytes in rows]


def _world_size(con: duckdb.DuckDBPyConnection) -> int:
    (declared, loaded) = con.execute("SELECT max(world_size), count(*) FROM ranks").fetchone()
    return int(declared or loaded or dumps_world_size(con))


def _load_issues(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    cur = con.execute("SELECT rank, file, kind, severity, message, count FROM load_issues "
                      "ORDER BY severity DESC, rank NULLS FIRST, kind")
    columns = [d[0] for d in cur.description]
    return [dict(zip(columns, row)) for row in cur.fetchall()]


# above this many ranks, timeline and memory (rows per rank and step) cover only the
# `detail_ranks`: those named by findings and the slowest (the database keeps every rank)
DETAIL_ALL_RANKS_MAX = 64
DETAIL_SLOWEST = 16


def _distribution(values: list[float]) -> dict[str, float | None]:
    ordered = sorted(v for v in values if v is not None)
    if not ordered:
        return {"median": None, "p90": None, "max": None}
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]  # a rank's own value
    return {"median": round(median(ordered), 3), "p90": round(p90, 3), "max": round(ordered[-1], 3)}


def rank_distribution(ranks: list[dict], steps: dict) -> dict[str, Any]:
    """Median, p90 and max over ranks of the main per-rank numbers (the shape of a big job)."""
    metrics = [r["metrics"] for r in ranks if r.get("metrics")]
    out = {"ranks": len(ranks),
           "own_step_ms": _distribution(list(own_step_medians(steps.get("per_step", [])).values())),
           "step_time_ms": _distribution([m["step_time_ms"]["median"] for m in metrics]),
           "mean_step_ms": _distribution([m["step_time_ms"].get("mean") for m in metrics]),
           "comm_ms_per_step": _distribution([m.get("comm_ms_per_step") for m in metrics]),
           "gpu_busy_pct": _distribution([m.get("gpu_busy_pct") for m in metrics])}
    out["phases_ms"] = {p: _distribution([m["phases_ms"].get(p) for m in metrics]) for p in PHASES}
    return out


def detail_ranks(ranks: list[dict], steps: dict, findings: list[dict]) -> list[int]:
    """Every rank of a small job; of a big one, those named by findings and the slowest."""
    everyone = [r["rank"] for r in ranks]
    if len(everyone) <= DETAIL_ALL_RANKS_MAX:
        return everyone
    own = {int(rank): ms for rank, ms in own_step_medians(steps.get("per_step", [])).items()}
    slowest = sorted(own, key=lambda r: (-own[r], r))[:DETAIL_SLOWEST]
    named = {r for f in findings for r in f.get("ranks") or [] if len(f.get("ranks") or []) < len(everyone)}
    return sorted(set(slowest) | set(list(named)[:DETAIL_SLOWEST]))


def build_summary(con: duckdb.DuckDBPyConnection, trace_dir: str, diagnosis: Diagnosis) -> dict[str, Any]:
    """Metrics of an open trace database + the rules stage's findings + load issues -> the summary.json dict."""
    require_analysis_tables(con)
    rule_issues = [{"rank": None, "file": None, "kind": "rule-failed", "severity": "warning",
                    "message": f"rule {rule_id} could not run on this trace and was skipped ({error})",
                    "count": None} for rule_id, error in diagnosis.failures]
    ranks = _ranks(con, rank_metrics(con))
    steps = step_comparison(con)
    finding_dicts = [f.to_dict() for f in diagnosis.findings]
    detail = set(detail_ranks(ranks, steps, finding_dicts))
    efficiency = efficiency_summary(con, detail, diagnosis.peak_tflops)
    layout = parallel_layout(con, _world_size(con))
    groups = groups_view(con, layout, detail)
    flight_recorder = flight_recorder_summary(con)
    return {
        "schema": SCHEMA,
        "tool_version": __version__,
        "trace_dir": str(trace_dir),
        "world_size": _world_size(con),
        "layout": layout,
        "ranks": ranks,
        "rank_distribution": rank_distribution(ranks, steps),
        "detail_ranks": sorted(detail),
        "steps": steps,
        "timeline": [t for t in timeline(con) if t["rank"] in detail],
        "memory": [m for m in memory_by_step(con) if m["rank"] in detail],
        "findings": finding_dicts,
        "load_issues": _load_issues(con) + rule_issues,
        "judgement": judgement(diagnosis.window, list(diagnosis.abstained)),
        **({"efficiency": efficiency} if efficiency is not None else {}),
        **({"groups": groups} if groups is not None else {}),
        **({"flight_recorder": flight_recorder} if flight_recorder is not None else {}),
    }
