-- The training-loop thread's top-level host work, per step: the host ops and host annotations
-- none of the earlier ones (by start, the later end first, then name) still covers. The walk of
-- the critical path read them by this window (traceanalyze/analysis/critical_path.py, INPUTS_SQL,
-- commit d35912a) over every step, until the reader built them per rank; here over every step
-- with one (the walk reads the aligned ones; the window is per step, so the rows are the same).
CREATE OR REPLACE TABLE top_host_ops AS
WITH host AS (
    SELECT o.step, o.rank, o.ts_ns, o.end_ns, o.name FROM cpu_ops AS o
    JOIN main_threads AS m ON m.rank = o.rank AND m.tid = o.tid
    WHERE o.name NOT LIKE 'ProfilerStep#%'
    UNION ALL
    SELECT a.step, a.rank, a.ts_ns, a.end_ns, a.name FROM annotations AS a
    JOIN main_threads AS m ON m.rank = a.rank AND m.tid = a.tid WHERE NOT a.on_gpu
),
nested AS (
    SELECT *, max(end_ns) OVER (PARTITION BY rank, step ORDER BY ts_ns, end_ns DESC, name
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM host WHERE step IS NOT NULL
)
SELECT rank::INTEGER AS rank, step::BIGINT AS step, ts_ns, end_ns, name FROM nested
WHERE (prev_end_ns IS NULL OR ts_ns >= prev_end_ns) AND ts_ns IS NOT NULL AND end_ns IS NOT NULL;
