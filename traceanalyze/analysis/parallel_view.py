"""The group-aware view of a parallel job (summary.json `groups`), from the trace database.

- `lateness`: per parallelism dimension, process group, rank and aligned step, the time the
  rank kept its group waiting at the group's collectives (the `group_lateness` table, summed
  over the step's collectives of the group). Only for a job of two dimensions or more (the
  report's per-dimension heatmaps): a one-dimension job has `steps.lateness_ms`.
- `pipeline`: one representative step of a pipeline job (the aligned step of median duration,
  the shorter of the two middle ones) and, per rank, its stage with the step's compute and its
  wait in send / recv (`step_phases`, `pipeline_stages`): the report's pipeline timeline.

See docs/parallelism.md.
"""

from __future__ import annotations

from typing import Any

from traceanalyze.lazy_import import duckdb

LATENESS_SQL = """
SELECT g.dimension, g.process_group, g.pg_desc, g.rank, g.step, g.collectives,
       g.late_ns / 1e6 AS late_ms, g.max_late_ns / 1e6 AS max_late_ms, g.wait_ns / 1e6 AS wait_ms
FROM group_lateness AS g JOIN aligned_steps USING (step)
WHERE g.dimension IN (SELECT unnest(?::VARCHAR[]))
ORDER BY g.dimension, g.process_group, g.rank, g.step
"""

# the aligned steps by duration (median over ranks); the median step is picked from them
STEP_ORDER_SQL = "SELECT step, median_dur_ns FROM aligned_steps ORDER BY median_dur_ns, step"

LANES_SQL = """
SELECT p.rank, s.stage, s.stages, p.dur_ns / 1e6 AS dur_ms,
       (p.forward_ns + p.backward_ns + p.optimizer_ns) / 1e6 AS compute_ms,
       p.pipeline_wait_ns / 1e6 AS pipeline_wait_ms,
       p.comm_exposed_ns / 1e6 AS comm_exposed_ms,
       (p.data_wait_ns + p.h2d_ns) / 1e6 AS input_ms,
       p.other_ns / 1e6 AS other_ms
FROM step_phases AS p JOIN pipeline_stages AS s USING (rank)
WHERE p.step = ?
ORDER BY s.stage, p.rank
"""


def _ms(value) -> float | None:
    return None if value is None else round(float(value), 3)


def group_lateness(con: duckdb.DuckDBPyConnection, dimensions: list[str], ranks: set[int]) -> list[dict[str, Any]]:
    """Rows of `group_lateness` on the aligned steps, for `dimensions` and `ranks`, in ms."""
    cur = con.execute(LATENESS_SQL, [dimensions])
    columns = [d[0] for d in cur.description]
    out = []
    for row in cur.fetchall():
        r = dict(zip(columns, row))
        if r["rank"] not in ranks:
            continue
        out.append({"dimension": r["dimension"], "process_group": r["process_group"], "pg_desc": r["pg_desc"],
                    "rank": r["rank"], "step": r["step"], "collectives": r["collectives"],
                    "late_ms": _ms(r["late_ms"]), "max_late_ms": _ms(r["max_late_ms"]), "wait_ms": _ms(r["wait_ms"])})
    return out


def median_step(con: duckdb.DuckDBPyConnection) -> tuple[int, float] | None:
    """(step, its duration in ms): the aligned step of median duration (of two middle ones, the shorter)."""
    rows = con.execute(STEP_ORDER_SQL).fetchall()
    if not rows:
        return None
    step, dur_ns = rows[(len(rows) - 1) // 2]
    return int(step), _ms(dur_ns / 1e6)


def pipeline_step(con: duckdb.DuckDBPyConnection, ranks: set[int]) -> dict[str, Any] | None:
    """The representative step of a pipeline job and each rank's stage, compute and wait in it."""
    picked = median_step(con)
    if picked is None:
        return None
    step, dur_ms = picked
    cur = con.execute(LANES_SQL, [step])
    columns = [d[0] for d in cur.description]
    lanes = [dict(zip(columns, row)) for row in cur.fetchall()]
    lanes = [{k: (_ms(v) if k.endswith("_ms") else v) for k, v in lane.items()} for lane in lanes
             if lane["rank"] in ranks]
    if not lanes:
        return None
    return {"step": step, "step_choice": "median", "dur_ms": dur_ms, "stages": max(la["stages"] for la in lanes),
            "lanes": lanes}


def groups_view(con: duckdb.DuckDBPyConnection, layout: dict | None, ranks: set[int]) -> dict[str, Any] | None:
    """summary.json `groups` (None when the job has neither two dimensions nor a pipeline)."""
    dims = [d["name"] for d in (layout or {}).get("dimensions") or []]
    lateness = group_lateness(con, dims, ranks) if len(dims) >= 2 else []
    pipeline = pipeline_step(con, ranks) if "pipeline" in dims else None
    if not lateness and pipeline is None:
        return None
    return {"dimensions": dims, "lateness": lateness, "pipeline": pipeline}
