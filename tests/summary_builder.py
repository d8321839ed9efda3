"""Build summary.json dicts (the contract in ARCHITECTURE.md) from numbers a test controls."""

from __future__ import annotations

import copy
import statistics

PHASES = ["data_wait", "h2d", "forward", "backward", "optimizer", "comm_exposed", "other"]
# how a synthetic step splits into phases (sums to 1)
DEFAULT_SPLIT = {"data_wait": 0.05, "h2d": 0.0, "forward": 0.25, "backward": 0.40,
                 "optimizer": 0.05, "comm_exposed": 0.20, "other": 0.05}
STEPS = [2, 3, 4, 5]
MiB = 1 << 20


def finding(rule: str, severity: str = "error", ranks=(), title: str | None = None,
            ms_per_step: float | None = 10.0) -> dict:
    return {"rule": rule, "severity": severity, "ranks": list(ranks), "steps": list(STEPS),
            "title": title or f"{rule} on ranks {list(ranks)}",
            "cost": {"ms_per_step": ms_per_step, "pct_of_step": None},
            "evidence": {"events": []}, "advice": "do less", "sql": None}


def load_issue(severity: str = "warning", rank: int | None = 0, kind: str = "truncated") -> dict:
    return {"rank": rank, "file": f"rank{rank}.pt.trace.json", "kind": kind, "severity": severity,
            "message": "the file ends inside an event", "count": None}


def _rank(rank: int, step_ms: float, phases_ms: dict, gpu_idle_pct, peak_bytes) -> dict:
    return {"rank": rank, "file": f"traces/rank{rank}.pt.trace.json.gz", "clock_offset_ns": 0,
            "metrics": {
                "steps": len(STEPS),
                "step_time_ms": {"median": step_ms, "p95": step_ms, "max": step_ms, "mean": step_ms},
                "phases_ms": phases_ms,
                "phases_pct": {p: 100.0 * v / step_ms for p, v in phases_ms.items()},
                "gpu_busy_pct": None if gpu_idle_pct is None else 100.0 - gpu_idle_pct,
                "gpu_idle_pct": gpu_idle_pct, "comm_overlap_pct": None,
                "comm_ms_per_step": phases_ms["comm_exposed"], "peak_memory_bytes": peak_bytes,
            }}


def _spread(values: list) -> dict:
    """median / p90 (nearest rank) / max over ranks (nulls left out), as rank_distribution holds them."""
    ordered = sorted(v for v in values if v is not None)
    if not ordered:
        return {"median": None, "p90": None, "max": None}
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return {"median": statistics.median(ordered), "p90": p90, "max": ordered[-1]}


def rank_distribution(summary: dict) -> dict:
    """The summary's rank_distribution, from its ranks and steps."""
    metrics = [r["metrics"] for r in summary["ranks"]]
    own = {}
    for row in summary["steps"]["per_step"]:
        for rank, ms in row["ms_by_rank"].items():
            own.setdefault(rank, []).append(ms)
    out = {"ranks": len(metrics),
           "own_step_ms": _spread([statistics.median(v) for v in own.values()]),
           "step_time_ms": _spread([m["step_time_ms"]["median"] for m in metrics]),
           "mean_step_ms": _spread([m["step_time_ms"]["mean"] for m in metrics]),
           "comm_ms_per_step": _spread([m["comm_ms_per_step"] for m in metrics]),
           "gpu_busy_pct": _spread([m["gpu_busy_pct"] for m in metrics]),
           "phases_ms": {p: _spread([m["phases_ms"][p] for m in metrics]) for p in PHASES}}
    return out


def make_summary(step_ms: dict[int, float], *, phases: dict[int, dict] | None = None,
                 findings=(), load_issues=(), gpu_idle_pct: dict[int, float] | None = None,
                 peak_bytes: dict[int, int] | None = None, trace_dir: str = "synthetic") -> dict:
    """A contract summary: each rank's step takes step_ms[rank] every step."""
    ranks = sorted(step_ms)
    phases = phases or {r: {p: step_ms[r] * f for p, f in DEFAULT_SPLIT.items()} for r in ranks}
    idle = gpu_idle_pct or {}
    peak = peak_bytes or {r: 64 * MiB for r in ranks}
    median = statistics.median(step_ms.values())
    worst = max(ranks, key=lambda r: step_ms[r])
    summary = {
        "schema": "traceanalyze.summary/1", "tool_version": "0.1.0", "trace_dir": trace_dir,
        "world_size": len(ranks),
        "ranks": [_rank(r, step_ms[r], phases[r], idle.get(r), peak.get(r)) for r in ranks],
        "steps": {
            "aligned": list(STEPS), "median_rank_step_ms": median,
            "worst_rank": worst, "worst_rank_step_ms": step_ms[worst],
            "per_step": [{"step": s, "ms_by_rank": {str(r): step_ms[r] for r in ranks},
                          "median_ms": median, "worst_ms": step_ms[worst], "worst_rank": worst}
                         for s in STEPS],
            "lateness_ms": [],
        },
        "timeline": [{"rank": r, "step": s, "dur_ms": step_ms[r], "phases": []}
                     for r in ranks for s in STEPS],
        "memory": [{"rank": r, "step": s, "peak_allocated_bytes": peak.get(r)}
                   for r in ranks for s in STEPS],
        "findings": [copy.deepcopy(f) for f in findings],
        "load_issues": [copy.deepcopy(i) for i in load_issues],
    }
    summary["rank_distribution"] = rank_distribution(summary)
    return summary


def scale_times(summary: dict, factor: float) -> dict:
    """A copy with every time (ms) multiplied by `factor`; percentages and bytes unchanged."""
    out = copy.deepcopy(summary)
    steps = out["steps"]
    for key in ("median_rank_step_ms", "worst_rank_step_ms"):
        steps[key] *= factor
    for row in steps["per_step"]:
        row["ms_by_rank"] = {r: v * factor for r, v in row["ms_by_rank"].items()}
        row["median_ms"] *= factor
        row["worst_ms"] *= factor
    for rank in out["ranks"]:
        m = rank["metrics"]
        m["step_time_ms"] = {k: v * factor for k, v in m["step_time_ms"].items()}
        m["phases_ms"] = {k: v * factor for k, v in m["phases_ms"].items()}
        m["comm_ms_per_step"] *= factor
    for row in out["timeline"]:
        row["dur_ms"] *= factor
    out["rank_distribution"] = rank_distribution(out)
    return out
