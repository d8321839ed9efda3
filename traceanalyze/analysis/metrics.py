"""Stage 5 numbers: per-rank metrics, per-step comparisons, timelines and memory, from the trace database.

Every function takes an open DuckDB connection and returns plain dicts / lists in the
units of the summary.json contract (ms as floats, bytes as ints, None when unknown).
Only aligned steps (present on every rank) are used, so ranks are compared like for like.
"""

from __future__ import annotations

from typing import Any

from traceanalyze.errors import TraceError
from traceanalyze.lazy_import import duckdb

PHASES = ("data_wait", "h2d", "forward", "backward", "optimizer", "comm_exposed", "pipeline_wait", "other")
# the phases as people read them (every view), and spelled out where there is room (diff and gate reasons)
PHASE_LABELS = {
    "data_wait": "data wait",
    "h2d": "H2D copy",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer",
    "comm_exposed": "comm exposed",
    "pipeline_wait": "pipeline wait",
    "other": "other",
}
# the same phases spelled out, where there is room (diff and gate reasons)
PHASE_LONG_LABELS = {**PHASE_LABELS, "comm_exposed": "communication exposed",
                     "pipeline_wait": "pipeline wait (send / recv)", "other": "other host work"}
REQUIRED_TABLES = ("phase_intervals", "step_phases", "step_gpu", "step_lateness", "collective_arrivals",
                   "step_comm", "step_waits", "step_batches", "pipeline_stages", "group_lateness")

_PHASE_SUMS = ", ".join(f"avg({p}_ns) / 1e6 AS {p}" for p in PHASES)

RANK_METRICS_SQL = f"""
WITH memory_peak AS (
    SELECT m.rank, max(m.total_allocated_bytes) FILTER (WHERE m.device_kind = 'cuda') AS cuda_bytes,
           max(m.total_allocated_bytes) AS any_bytes
    FROM memory AS m JOIN aligned_steps USING (step) GROUP BY m.rank
),
runtime_calls AS (
    SELECT rank, count(*) AS calls FROM runtime GROUP BY rank
)
SELECT
    p.rank,
    count(*) AS steps,
    median(p.dur_ns) / 1e6 AS median_ms,
    quantile_cont(p.dur_ns, 0.95) / 1e6 AS p95_ms,
    max(p.dur_ns) / 1e6 AS max_ms,
    {_PHASE_SUMS},
    avg(p.dur_ns) / 1e6 AS mean_ms,
    100.0 * sum(g.busy_ns) / sum(p.dur_ns) FILTER (WHERE g.devices IS NOT NULL) AS gpu_busy_pct,
    100.0 * sum(g.comm_overlapped_ns) / nullif(sum(g.comm_ns), 0) AS comm_overlap_pct,
    coalesce(sum(cu.comm_ns), 0) / count(*) / 1e6 AS comm_ms_per_step,
    any_value(coalesce(mp.cuda_bytes, mp.any_bytes)) AS peak_memory_bytes,
    coalesce(any_value(rc.calls), 0) AS gpu_runtime_calls
FROM step_phases AS p
JOIN aligned_steps USING (step)
LEFT JOIN step_gpu AS g USING (rank, step)
LEFT JOIN step_comm AS cu USING (rank, step)
LEFT JOIN memory_peak AS mp USING (rank)
LEFT JOIN runtime_calls AS rc USING (rank)
GROUP BY p.rank
ORDER BY p.rank
"""

PER_STEP_SQL = """
SELECT w.step, w.rank, w.own_ns, w.wait_ns
FROM step_waits AS w JOIN aligned_steps USING (step)
ORDER BY w.step, w.rank
"""

LATENESS_SQL = """
SELECT l.step, l.rank, greatest(l.late_ns, 0) / 1e6 AS late_ms
FROM step_lateness AS l JOIN aligned_steps USING (step)
ORDER BY l.step, l.rank
"""

TIMELINE_SQL = """
SELECT s.rank, s.step, s.dur_ns / 1e6 AS dur_ms,
       list({'phase': p.phase, 'start_ms': p.start_rel_ns / 1e6, 'dur_ms': p.dur_ns / 1e6} ORDER BY p.ts_ns) AS phases
FROM steps AS s
JOIN aligned_steps USING (step)
JOIN phase_intervals AS p USING (rank, step)
GROUP BY s.rank, s.step, s.dur_ns
ORDER BY s.rank, s.step
"""

MEMORY_SQL = """
WITH per_kind AS (
    SELECT m.rank, m.step, m.device_kind, max(m.total_allocated_bytes) AS peak_bytes
    FROM memory AS m JOIN aligned_steps USING (step)
    WHERE m.total_allocated_bytes IS NOT NULL
    GROUP BY m.rank, m.step, m.device_kind
)
SELECT rank, step, coalesce(max(peak_bytes) FILTER (WHERE device_kind = 'cuda'), max(peak_bytes)) AS peak_bytes
FROM per_kind GROUP BY rank, step ORDER BY rank, step
"""


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict[str, Any]]:
    cur = con.execute(sql)
    columns = [d[0] for d in cur.description]
    return [dict(zip(columns, row)) for row in cur.fetchall()]


def _ms(value) -> float | None:
    return None if value is None else round(float(value), 3)


def missing_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Analysis tables this database lacks (it was built by an older traceanalyze)."""
    present = {t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    return [t for t in REQUIRED_TABLES if t not in present]


def require_analysis_tables(con: duckdb.DuckDBPyConnection) -> None:
    """TraceError when the database was built by an older traceanalyze (the rules and the
    summary read tables it lacks)."""
    missing = missing_tables(con)
    if missing:
        raise TraceError("the trace database was built by an older traceanalyze (no "
                         f"{', '.join(missing)}); load it again with `traceanalyze load --force`")


def rank_metrics(con: duckdb.DuckDBPyConnection) -> dict[int, dict[str, Any]]:
    """{rank: the `metrics` object of ranks[] in summary.json}."""
    out = {}
    for r in _rows(con, RANK_METRICS_SQL):
        mean = r["mean_ms"] or 0.0
        busy = r["gpu_busy_pct"]
        out[r["rank"]] = {
            "steps": r["steps"],
            "step_time_ms": {"median": _ms(r["median_ms"]), "p95": _ms(r["p95_ms"]), "max": _ms(r["max_ms"]),
                             "mean": _ms(r["mean_ms"])},
            "phases_ms": {p: _ms(r[p]) for p in PHASES},
            "phases_pct": {p: _ms(100.0 * r[p] / mean) if mean else None for p in PHASES},
            "gpu_busy_pct": _ms(busy),
            "gpu_idle_pct": None if busy is None else _ms(100.0 - busy),
            "comm_overlap_pct": _ms(r["comm_overlap_pct"]),
            "comm_ms_per_step": _ms(r["comm_ms_per_step"]),
            "peak_memory_bytes": None if r["peak_memory_bytes"] is None else int(r["peak_memory_bytes"]),
            "gpu_runtime_calls": int(r["gpu_runtime_calls"]),
        }
    return out


def median(values: list[float]) -> float:
    """THE median of the summary (steps, ranks, rank_distribution, diff): the middle value, the
    mean of the two middle values for an even count (DuckDB's `median`, Python's statistics.median)."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def own_step_medians(per_step: list[dict[str, Any]]) -> dict[str, float]:
    """{rank (str): its median own step time, ms} over `steps.per_step[].ms_by_rank`: what names
    the worst rank, the median rank and the slowest ranks of a big job."""
    by_rank: dict[str, list[float]] = {}
    for row in per_step:
        for rank, value in (row.get("ms_by_rank") or {}).items():
            if value is not None:
                by_rank.setdefault(rank, []).append(value)
    return {rank: median(values) for rank, values in by_rank.items()}


def skew_pct(median_ms: float | None, worst_ms: float | None) -> float | None:
    """Rank skew: how much longer the worst rank's own step is than the median rank's, % of the median."""
    if median_ms is None or worst_ms is None or median_ms <= 0:
        return None
    return 100.0 * (worst_ms - median_ms) / median_ms

def rank_skew_pct(summary: dict) -> float | None:
    """Worst vs median rank own step time, % of the median (summary.steps.rank_skew_pct; summaries
    written before that key existed get the same definition from skew_pct)."""
    steps = summary.get("steps") or {}
    if "rank_skew_pct" in steps:
        return steps["rank_skew_pct"]
    return skew_pct(steps.get("median_rank_step_ms"), steps.get("worst_rank_step_ms"))


def step_comparison(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """The `steps` object: each rank's own step time (its step minus waiting for later ranks), worst vs median."""
    per_step: dict[int, dict[str, dict[str, float]]] = {}
    for r in _rows(con, PER_STEP_SQL):
        entry = per_step.setdefault(r["step"], {"ms": {}, "wait": {}})
        entry["ms"][str(r["rank"])] = _ms(r["own_ns"] / 1e6)
        entry["wait"][str(r["rank"])] = _ms(r["wait_ns"] / 1e6)
    items = []
    for step, entry in sorted(per_step.items()):
        ms = entry["ms"]
        worst = max(ms, key=lambda k: (ms[k], -int(k)))
        items.append({"step": step, "ms_by_rank": ms, "wait_ms_by_rank": entry["wait"],
                      "median_ms": _ms(median(list(ms.values()))), "worst_ms": ms[worst], "worst_rank": int(worst)})
    rank_medians = own_step_medians(items)
    worst_rank = max(rank_medians, key=lambda k: (rank_medians[k], -int(k))) if rank_medians else None
    return {
        "aligned": [s for (s,) in con.execute("SELECT step FROM aligned_steps ORDER BY step").fetchall()],
        "median_rank_step_ms": _ms(median(list(rank_medians.values()))) if rank_medians else None,
        "worst_rank": None if worst_rank is None else int(worst_rank),
        "worst_rank_step_ms": None if worst_rank is None else _ms(rank_medians[worst_rank]),
        "rank_skew_pct": _ms(skew_pct(median(list(rank_medians.values())), rank_medians[worst_rank]))
        if worst_rank is not None else None,
        "per_step": items,
        "lateness_ms": [{"step": r["step"], "rank": r["rank"], "late_ms": _ms(r["late_ms"])}
                        for r in _rows(con, LATENESS_SQL)],
    }


def timeline(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Per (rank, aligned step): its phase intervals relative to the step start."""
    return [{"rank": r["rank"], "step": r["step"], "dur_ms": _ms(r["dur_ms"]),
             "phases": [{"phase": p["phase"], "start_ms": _ms(p["start_ms"]), "dur_ms": _ms(p["dur_ms"])}
                        for p in r["phases"]]}
            for r in _rows(con, TIMELINE_SQL)]


def memory_by_step(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Peak allocated bytes per (rank, aligned step); the GPU's when the trace has GPU memory events."""
    return [{"rank": r["rank"], "step": r["step"], "peak_allocated_bytes": int(r["peak_bytes"])}
            for r in _rows(con, MEMORY_SQL) if r["peak_bytes"] is not None]
