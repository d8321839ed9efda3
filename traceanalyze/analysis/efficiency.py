"""How fast, not only how long: the efficiency numbers of the summary and of `Analysis.efficiency()`.

Reads the documented tables step_efficiency, op_flops, collective_bandwidth and critical_path
(docs/efficiency.md explains every number); the queries here are the one home of the
aggregations the report and the API show.
"""

from __future__ import annotations

from typing import Any

from traceanalyze.lazy_import import duckdb

# the ops losing the most GPU time against their roofline (their FLOPs at the device's peak for
# their precision, or $peak_tflops when > 0; their bytes at its memory bandwidth), aligned steps
TOP_OPS_SQL = """
WITH rated AS (
    SELECT o.rank, o.name, o.family, o.dtype, count(*) AS calls, sum(o.flops) AS flops, sum(o.kernel_ns) AS kernel_ns,
           sum(roofline_ns(o.flops, o.bytes,
               CASE WHEN $peak_tflops > 0 THEN $peak_tflops ELSE device_peak_tflops(r.device_name, o.dtype) END,
               device_spec(r.device_name, 'hbm_gb_per_s'))) AS roofline_ns
    FROM op_flops AS o JOIN ranks AS r USING (rank) JOIN aligned_steps USING (step)
    WHERE o.flops > 0 AND o.kernel_ns > 0 AND o.dtype IS NOT NULL
    GROUP BY o.rank, o.name, o.family, o.dtype
)
SELECT rank, name, family, dtype, calls, flops / kernel_ns / 1000 AS tflops, kernel_ns / 1e6 AS kernel_ms,
       roofline_ns / 1e6 AS roofline_ms, (kernel_ns - roofline_ns) / 1e6 AS lost_ms
FROM rated
ORDER BY lost_ms DESC NULLS LAST, rank, name, dtype
LIMIT $limit_count
"""

# step_efficiency with the user's peak ($peak_tflops > 0) in place of the device's: the one
# place the override applies (API, summary)
STEPS_SQL = """
SELECT * REPLACE (
    CASE WHEN $peak_tflops > 0 AND achieved_tflops IS NOT NULL THEN $peak_tflops ELSE peak_tflops END AS peak_tflops,
    CASE WHEN $peak_tflops > 0 AND achieved_tflops IS NOT NULL THEN (flops / ($peak_tflops * 1000))::BIGINT ELSE ideal_ns END AS ideal_ns,
    CASE WHEN $peak_tflops > 0 AND achieved_tflops IS NOT NULL THEN 100.0 * achieved_tflops / $peak_tflops ELSE mfu_pct END AS mfu_pct,
    CASE WHEN $peak_tflops > 0 AND achieved_tflops IS NOT NULL THEN NULL ELSE note END AS note)
FROM step_efficiency
"""

# per rank over the aligned steps: the step-weighted MFU and rate, and why a value is missing
RANKS_SQL = """
SELECT e.rank, min(e.gpu) AS gpu, min(e.device_name) AS device_name, count(*) AS steps,
       100.0 * sum(e.ideal_ns) / sum(e.dur_ns) FILTER (WHERE e.ideal_ns IS NOT NULL) AS mfu_pct,
       sum(e.flops) / sum(e.dur_ns) FILTER (WHERE e.achieved_tflops IS NOT NULL) / 1000 AS achieved_tflops,
       sum(e.flops) FILTER (WHERE e.ideal_ns IS NOT NULL) / sum(e.ideal_ns) / 1000 AS peak_tflops,
       min(e.counted_kernel_pct) AS counted_kernel_pct,
       stable_mode(list(e.dtype_mix)) AS dtype_mix,
       stable_mode(list(e.note)) AS note
FROM (""" + STEPS_SQL + """) AS e JOIN aligned_steps USING (step)
GROUP BY e.rank ORDER BY e.rank
"""

# bus bandwidth per op and size bucket (powers of 2 of the buffer bytes), with the link it is held to
BANDWIDTH_SQL = """
WITH sized AS (
    SELECT b.op, b.bytes, b.busbw_gb_per_s, b.crosses_nodes,
           floor(log2(b.bytes))::INTEGER AS bucket,
           CASE WHEN b.crosses_nodes = false THEN device_spec(r.device_name, 'intra_node_busbw_gb_per_s')
                ELSE device_spec(r.device_name, 'inter_node_busbw_gb_per_s') END AS link_gb_per_s
    FROM collective_bandwidth AS b JOIN ranks AS r USING (rank) JOIN aligned_steps USING (step)
    WHERE b.busbw_gb_per_s IS NOT NULL AND b.bytes > 0
)
SELECT op, bucket, (2::DOUBLE ** bucket)::BIGINT AS bytes_from, (2::DOUBLE ** (bucket + 1))::BIGINT AS bytes_to,
       count(*) AS count, median(busbw_gb_per_s) AS median_busbw_gb_per_s, max(busbw_gb_per_s) AS max_busbw_gb_per_s,
       min(link_gb_per_s) AS link_gb_per_s,
       100.0 * median(busbw_gb_per_s) / min(link_gb_per_s) AS link_pct,
       CASE WHEN bool_and(crosses_nodes = false) THEN 'within one node'
            WHEN bool_or(crosses_nodes) THEN 'across nodes' ELSE 'unknown' END AS layout
FROM sized GROUP BY op, bucket ORDER BY op, bucket
"""

# the largest parts of the aligned steps' critical paths
CRITICAL_PATH_SQL = """
SELECT kind, on_rank, name, count(*) AS segments,
       sum(dur_ns) / 1e6 / (SELECT count(*) FROM aligned_steps) AS ms_per_step,
       100.0 * sum(dur_ns) / (SELECT sum(dur_ns) FROM critical_path) AS pct_of_path
FROM critical_path
GROUP BY kind, on_rank, name
ORDER BY ms_per_step DESC, kind, on_rank, name
LIMIT $limit_count
"""

SUMMARY_TOP = 10


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: dict | None = None) -> list[dict[str, Any]]:
    cur = con.execute(sql, params) if params else con.execute(sql)
    columns = [d[0] for d in cur.description]
    return [{c: (round(v, 3) if isinstance(v, float) else v) for c, v in zip(columns, row)} for row in cur.fetchall()]


def has_efficiency_tables(con: duckdb.DuckDBPyConnection) -> bool:
    names = {t for (t,) in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'").fetchall()}
    return {"step_efficiency", "op_flops", "collective_bandwidth", "critical_path"} <= names


def efficiency_summary(con: duckdb.DuckDBPyConnection, detail: set[int],
                       peak_tflops: float = 0.0) -> dict[str, Any] | None:
    """The summary's `efficiency` object (None for a database built before these tables);
    `peak_tflops` > 0 replaces the device's peak."""
    if not has_efficiency_tables(con):
        return None
    peak = {"peak_tflops": float(peak_tflops or 0.0)}
    steps = _rows(con, "SELECT e.rank, e.step, e.mfu_pct, e.achieved_tflops, e.peak_tflops, e.flops "
                       f"FROM ({STEPS_SQL}) AS e JOIN aligned_steps USING (step) ORDER BY e.rank, e.step", peak)
    return {
        "ranks": _rows(con, RANKS_SQL, peak),
        "steps": [s for s in steps if s["rank"] in detail],
        "top_ops": _rows(con, TOP_OPS_SQL, {**peak, "limit_count": SUMMARY_TOP}),
        "bandwidth": _rows(con, BANDWIDTH_SQL),
        "critical_path": _rows(con, CRITICAL_PATH_SQL, {"limit_count": SUMMARY_TOP}),
    }
