-- Per (rank, step): time with at least one collective in flight (collectives clipped to the step and merged).
CREATE OR REPLACE TABLE step_comm AS
WITH clipped AS (
    SELECT c.rank, c.step, greatest(c.ts_ns, s.ts_ns) AS ts_ns, least(c.end_ns, s.end_ns) AS end_ns
    FROM collectives AS c JOIN steps AS s USING (rank, step)
    WHERE c.end_ns > s.ts_ns AND c.ts_ns < s.end_ns
),
ordered AS (
    SELECT *, max(end_ns) OVER (PARTITION BY rank, step ORDER BY ts_ns, end_ns
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM clipped
),
runs AS (
    SELECT *, sum(CASE WHEN prev_end_ns IS NULL OR ts_ns > prev_end_ns THEN 1 ELSE 0 END)
                  OVER (PARTITION BY rank, step ORDER BY ts_ns, end_ns) AS run
    FROM ordered
),
merged AS (
    SELECT rank, step, min(ts_ns) AS ts_ns, max(end_ns) AS end_ns FROM runs GROUP BY rank, step, run
)
SELECT
    s.rank,                                 -- global rank
    s.step,                                 -- ProfilerStep N
    coalesce(sum(m.end_ns - m.ts_ns), 0)::BIGINT AS comm_ns  -- time with a collective in flight (union over collectives), ns
FROM steps AS s LEFT JOIN merged AS m USING (rank, step)
GROUP BY s.rank, s.step
ORDER BY s.rank, s.step;
