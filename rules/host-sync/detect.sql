-- One row per rank whose GPU runs dry because the host blocks on it (synchronize calls, .item(), blocking copies).
WITH syncs AS (
    SELECT r.rank, r.step, r.name, r.dur_ns FROM runtime AS r JOIN aligned_steps USING (step)
    WHERE regexp_matches(r.name, '(?i)(DeviceSynchronize|StreamSynchronize|EventSynchronize)$')
       OR r.name IN ('cudaMemcpy', 'hipMemcpy', 'cudaMemset', 'hipMemset')
),
items AS (
    SELECT c.rank, count(*) AS n FROM cpu_ops AS c JOIN aligned_steps USING (step)
    WHERE c.name = 'aten::_local_scalar_dense' GROUP BY c.rank
),
idle AS (
    SELECT g.rank, sum(g.dur_ns) AS ns FROM gpu_idle_gaps AS g JOIN aligned_steps USING (step)
    WHERE g.cause = 'sync' GROUP BY g.rank
),
calls AS (
    SELECT rank, name, count(*) AS n, sum(dur_ns) AS ns FROM syncs GROUP BY rank, name
),
per_rank AS (  -- top_call: the most frequent call; ties by the longest in total, then by name (the same on every run)
    SELECT c.rank, sum(c.n)::BIGINT AS n_syncs, sum(c.ns) AS blocked_ns,
           first(c.name ORDER BY c.n DESC, c.ns DESC, c.name) AS top_call
    FROM calls AS c GROUP BY c.rank
),
steps_sum AS (
    SELECT s.rank, count(*) AS n_steps, sum(s.dur_ns) AS ns, list(s.step ORDER BY s.step) AS steps
    FROM steps AS s JOIN aligned_steps USING (step) GROUP BY s.rank
)
SELECT
    [p.rank] AS ranks,
    t.steps,
    i.ns / t.n_steps / 1e6 AS ms_per_step,
    100.0 * i.ns / t.ns AS pct_of_step,
    CASE WHEN 100.0 * i.ns / t.ns >= $error_pct THEN 'error' ELSE 'warning' END AS severity,
    p.rank,
    p.n_syncs / t.n_steps AS syncs_per_step,
    coalesce(it.n, 0) / t.n_steps AS item_calls_per_step,
    p.top_call,
    p.blocked_ns / t.n_steps / 1e6 AS host_blocked_ms,
    i.ns / t.n_steps / 1e6 AS gpu_idle_after_sync_ms
FROM per_rank AS p
JOIN steps_sum AS t USING (rank)
JOIN idle AS i USING (rank)
LEFT JOIN items AS it USING (rank)
WHERE 100.0 * i.ns / t.ns >= $min_sync_idle_pct
ORDER BY ms_per_step DESC;
