"""Stage 5: the summary.json dict (schema traceanalyze.summary/1, see ARCHITECTURE.md) from a trace database.

Renderers read only this dict. Notes on the numbers:
- all per-rank numbers use the aligned steps (present on every rank); phases_ms are means per step;
- steps.per_step.ms_by_rank is each rank's own step time: its step minus the time it waited
  at collectives for the last rank to arrive (wait_ms_by_rank), so the rank that holds the
  job back is the worst rank even though every rank's ProfilerStep lasts equally long;
- steps.lateness_ms is how late each rank reached its latest collective of the step,
  step-relative, against the median rank (0 when early).
"""

from __future__ import annotations

from typing import Any

import duckdb

from traceanalyze import __version__
from traceanalyze.errors import TraceanalyzeError
from traceanalyze.metrics import (
    memory_by_step,
    missing_tables,
    rank_metrics,
    step_comparison,
    timeline,
)
from traceanalyze.judge import judgement, window_facts
from traceanalyze.ruleset import run_rules

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
    return int(declared or loaded)


def _load_issues(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    cur = con.execute("SELECT rank, file, kind, severity, message, count FROM load_issues "
                      "ORDER BY severity DESC, rank NULLS FIRST, kind")
    columns = [d[0] for d in cur.description]
    return [dict(zip(columns, row)) for row in cur.fetchall()]


def build_summary(con: duckdb.DuckDBPyConnection, trace_dir: str, config) -> dict[str, Any]:
    """Metrics + findings + load issues of an open trace database -> the summary.json dict."""
    missing = missing_tables(con)
    if missing:
        raise TraceanalyzeError("the trace database was built by an older traceanalyze (no "
                                f"{', '.join(missing)}); load it again with `traceanalyze load --force`")
    failures: list[tuple[str, str]] = []
    abstained: list[tuple[str, str]] = []
    findings = run_rules(con, config, failures, abstained)
    rule_issues = [{"rank": None, "file": None, "kind": "rule-failed", "severity": "warning",
                    "message": f"rule {rule_id} could not run on this trace and was skipped ({error})",
                    "count": None} for rule_id, error in failures]
    return {
        "schema": SCHEMA,
        "tool_version": __version__,
        "trace_dir": str(trace_dir),
        "world_size": _world_size(con),
        "ranks": _ranks(con, rank_metrics(con)),
        "steps": step_comparison(con),
        "timeline": timeline(con),
        "memory": memory_by_step(con),
        "findings": [f.to_dict() for f in findings],
        "load_issues": _load_issues(con) + rule_issues,
        "judgement": judgement(window_facts(con), abstained),
    }
