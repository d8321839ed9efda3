-- One row per device kind on which allocated memory grows step over step on some ranks.
WITH unseen_frees AS (
    -- Blocks a collective call allocated (gloo's copy of a reduce-scatter input, ...) that the trace
    -- never frees: the communication library drops them on its own thread, where the profiler
    -- records no free, so Total Allocated keeps counting them. Not growth of the program.
    SELECT rank, device_kind, ts_ns, alloc_bytes
    FROM memory
    WHERE in_collective AND alloc_bytes > 0 AND NOT freed_in_trace
),
raw_end_of_step AS (   -- allocated bytes after the last allocator event of each step
    SELECT m.rank, m.step, m.device_kind, first(m.total_allocated_bytes ORDER BY m.ts_ns DESC, m.total_allocated_bytes DESC) AS raw_bytes,
           max(m.ts_ns) AS at_ns
    FROM memory AS m JOIN aligned_steps USING (step)
    WHERE m.total_allocated_bytes IS NOT NULL
    GROUP BY m.rank, m.step, m.device_kind
),
end_of_step AS (   -- ... minus the collectives' blocks allocated so far whose free the trace does not show
    SELECT e.rank, e.step, e.device_kind,
           e.raw_bytes - coalesce(sum(u.alloc_bytes), 0) AS allocated_bytes,
           coalesce(sum(u.alloc_bytes), 0) AS unseen_free_bytes
    FROM raw_end_of_step AS e
    LEFT JOIN unseen_frees AS u ON u.rank = e.rank AND u.device_kind = e.device_kind AND u.ts_ns <= e.at_ns
    GROUP BY e.rank, e.step, e.device_kind, e.raw_bytes
),
deltas AS (
    SELECT *, allocated_bytes - lag(allocated_bytes) OVER (PARTITION BY rank, device_kind ORDER BY step) AS delta_bytes
    FROM end_of_step
),
per_rank AS (
    SELECT rank, device_kind, count(*) AS n_steps, list(step ORDER BY step) AS steps,
           regr_slope(allocated_bytes, step) AS slope_bytes,
           arg_min(allocated_bytes, step) AS first_bytes, arg_max(allocated_bytes, step) AS last_bytes,
           100.0 * count(*) FILTER (WHERE delta_bytes > 0) / nullif(count(delta_bytes), 0) AS increasing_pct,
           max(unseen_free_bytes) AS unseen_free_bytes
    FROM deltas GROUP BY rank, device_kind
),
creeping AS (
    SELECT * FROM per_rank
    WHERE n_steps >= $min_steps_count AND slope_bytes >= $min_growth_per_step_bytes
      AND increasing_pct >= $min_increasing_steps_pct
)
SELECT
    list(rank ORDER BY rank) AS ranks,
    list_sort(list_distinct(flatten(list(steps)))) AS steps,
    NULL::DOUBLE AS ms_per_step,
    NULL::DOUBLE AS pct_of_step,
    device_kind,
    rank_ranges(list(rank)) AS ranks_text,
    rank_phrase(list(rank)) AS ranks_phrase,
    median(slope_bytes)::BIGINT AS growth_per_step_bytes,
    round(median(slope_bytes) / 1048576.0, 1) AS growth_per_step_mib,
    max(last_bytes - first_bytes) AS growth_bytes,
    round(max(last_bytes - first_bytes) / 1048576.0, 1) AS growth_mib,
    max(last_bytes) AS last_allocated_bytes,
    min(increasing_pct) AS increasing_steps_pct,
    max(n_steps) AS steps_count,
    max(unseen_free_bytes) AS collective_buffers_not_counted_bytes
FROM creeping
GROUP BY device_kind
ORDER BY device_kind;
