-- One row when FSDP's all-gathers and reduce-scatters, not hidden behind compute, take a large share of the step on every rank.
WITH sharded AS (  -- FSDP (or ZeRO): gradients are reduce-scattered, or FSDP marks its work on the host
                   -- (a tensor group's reduce_scatter is Megatron's sequence parallelism, not FSDP)
    SELECT EXISTS (SELECT 1 FROM collectives AS c LEFT JOIN process_groups AS g USING (process_group)
                   WHERE c.op = 'reduce_scatter' AND g.dimension IS DISTINCT FROM 'tensor')
           OR EXISTS (SELECT 1 FROM annotations WHERE NOT on_gpu
                      AND (name LIKE 'FSDP::%' OR name LIKE 'FullyShardedDataParallel%')) AS yes
),
in_window AS (
    SELECT p.rank, p.step, p.dur_ns FROM step_phases AS p JOIN aligned_steps USING (step)
),
fsdp AS (          -- FSDP's collectives (collective_exposure): parameters all-gathered, gradients reduce-scattered (gloo's all-reduce of a reduce-scatter in an fsdp group included)
    SELECT e.rank, e.step,
           sum(e.comm_exposed_ns) FILTER (WHERE e.op = 'all_gather' AND e.pass = 'forward') AS forward_gather_ns,
           sum(e.comm_exposed_ns) FILTER (WHERE e.op = 'all_gather' AND e.pass <> 'forward') AS backward_gather_ns,
           sum(e.comm_exposed_ns) FILTER (WHERE e.op <> 'all_gather') AS reduce_ns,
           sum(e.comm_exposed_ns) AS comm_ns,
           sum(e.wait_exposed_ns) AS wait_ns,
           count(*) AS collectives_n
    FROM collective_exposure AS e
    WHERE (e.op IN ('all_gather', 'reduce_scatter') AND e.dimension IS DISTINCT FROM 'tensor' OR e.dimension = 'fsdp')
      AND e.step IN (SELECT step FROM aligned_steps)
    GROUP BY e.rank, e.step
),
per_rank AS (
    SELECT w.rank, list(w.step ORDER BY w.step) AS steps, count(*) AS steps_n, sum(w.dur_ns) AS step_ns,
           sum(coalesce(f.comm_ns, 0)) AS comm_ns, sum(coalesce(f.forward_gather_ns, 0)) AS forward_gather_ns,
           sum(coalesce(f.backward_gather_ns, 0)) AS backward_gather_ns, sum(coalesce(f.reduce_ns, 0)) AS reduce_ns,
           sum(coalesce(f.wait_ns, 0)) AS wait_ns, sum(coalesce(f.collectives_n, 0)) AS collectives_n,
           100.0 * sum(coalesce(f.comm_ns, 0)) / sum(w.dur_ns) AS comm_pct
    FROM in_window AS w LEFT JOIN fsdp AS f USING (rank, step)
    GROUP BY w.rank
),
job AS (           -- per step on the median rank
    SELECT list(rank ORDER BY rank) AS ranks, list_sort(list_distinct(flatten(list(steps)))) AS steps,
           min(comm_pct) AS min_pct, max(comm_pct) AS max_pct, first(rank ORDER BY comm_pct, rank) AS least_rank,
           median(comm_ns / steps_n) AS comm_ns, median(step_ns / steps_n) AS step_ns,
           median(forward_gather_ns / steps_n) AS forward_gather_ns, median(backward_gather_ns / steps_n) AS backward_gather_ns,
           median(reduce_ns / steps_n) AS reduce_ns, median(wait_ns / steps_n) AS wait_ns,
           median(collectives_n / steps_n) AS collectives_n, count(*) AS n_ranks
    FROM per_rank
)
SELECT
    ranks,
    steps,
    comm_ns / 1e6 AS ms_per_step,
    100.0 * comm_ns / step_ns AS pct_of_step,
    CASE WHEN min_pct >= $error_pct THEN 'error' ELSE 'warning' END AS severity,
    min_pct AS exposed_pct_least_rank,
    max_pct AS exposed_pct_most_rank,
    least_rank,
    n_ranks AS ranks_count,
    step_ns / 1e6 AS median_step_ms,
    forward_gather_ns / 1e6 AS forward_all_gather_ms,
    backward_gather_ns / 1e6 AS backward_all_gather_ms,
    reduce_ns / 1e6 AS reduce_scatter_ms,
    wait_ns / 1e6 AS waiting_for_last_rank_ms,
    collectives_n AS fsdp_collectives_per_step_count,
    CASE WHEN forward_gather_ns >= greatest(backward_gather_ns, reduce_ns) THEN 'forward all-gather'
         WHEN backward_gather_ns >= reduce_ns THEN 'backward all-gather'
         ELSE 'reduce-scatter' END AS largest_part,
    'fsdp' AS cause
FROM job
WHERE (SELECT yes FROM sharded) AND n_ranks >= 2 AND min_pct >= $min_exposed_pct;
