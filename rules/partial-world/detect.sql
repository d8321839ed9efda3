-- One row when only some ranks of the job are loaded and every loaded rank waits in collectives that move little: the late rank is one not loaded.
WITH world AS (
    SELECT max(world_size) AS world_size, count(*) AS loaded, list(rank ORDER BY rank) AS ranks FROM ranks
),
per_rank AS (
    SELECT rank, sum(comm_exposed_ns) AS comm_ns, sum(dur_ns) AS dur_ns, count(*) AS n_steps,
           100.0 * sum(comm_exposed_ns) / sum(dur_ns) AS comm_pct, list(step ORDER BY step) AS steps
    FROM step_phases JOIN aligned_steps USING (step)
    GROUP BY rank
),
moved AS (        -- bytes the loaded ranks' collectives carry, and the time spent inside them
    SELECT sum(collective_moved_bytes(c.op, c.bytes, w.world_size)) AS bytes,
           sum(c.dur_ns) FILTER (WHERE c.bytes IS NOT NULL) AS sized_ns, count(*) AS n
    FROM collectives AS c CROSS JOIN world AS w
    WHERE c.step IN (SELECT step FROM aligned_steps)
),
job AS (
    SELECT list_sort(list_distinct(flatten(list(steps)))) AS steps, min(comm_pct) AS min_comm_pct, max(comm_pct) AS max_comm_pct,
           median(comm_ns / n_steps) AS comm_ns, median(dur_ns / n_steps) AS step_ns, max(n_steps) AS n_steps
    FROM per_rank
)
SELECT
    w.ranks,
    j.steps,
    j.comm_ns / 1e6 AS ms_per_step,
    100.0 * j.comm_ns / j.step_ns AS pct_of_step,
    CASE WHEN j.n_steps < 2 THEN 'info' ELSE 'warning' END AS severity,
    w.loaded AS loaded_ranks_count,
    CASE WHEN w.loaded = 1 THEN '1 of ' || w.world_size || ' ranks is loaded and it waits'
         ELSE w.loaded || ' of ' || w.world_size || ' ranks are loaded and each waits' END AS loaded_text,
    w.world_size,
    w.world_size - w.loaded AS missing_ranks_count,
    CASE WHEN round(j.min_comm_pct) = round(j.max_comm_pct) THEN round(j.min_comm_pct)::INT || '%'
         ELSE round(j.min_comm_pct)::INT || '-' || round(j.max_comm_pct)::INT || '%' END AS wait_pct_text,
    j.min_comm_pct AS wait_pct_least_rank,
    j.max_comm_pct AS wait_pct_most_rank,
    m.bytes / j.n_steps / w.loaded / 1048576.0 AS mib_per_rank_per_step,
    m.bytes / (m.sized_ns / 1e9) / 1e9 AS achieved_gbps,
    $transport_gb_per_s_ratio AS transport_gbps,
    j.n_steps AS steps_count,
    j.step_ns / 1e6 AS median_step_ms
FROM world AS w CROSS JOIN job AS j CROSS JOIN moved AS m
WHERE w.world_size > w.loaded
  AND j.min_comm_pct >= $min_wait_pct
  AND (m.sized_ns IS NULL OR m.sized_ns = 0 OR m.bytes IS NULL
       OR m.bytes / (m.sized_ns / 1e9) / 1e9 <= $max_bandwidth_share_pct / 100.0 * $transport_gb_per_s_ratio);
