-- One row when communication volume (not waiting for a late rank, not many tiny collectives) fills most of the step on every rank.
WITH per_step AS (  -- exposed communication minus the wait for the last rank (step_waits)
    SELECT p.rank, p.step, p.dur_ns,
           greatest(p.comm_exposed_ns - w.exposed_wait_ns,
                    coalesce(g.comm_ns - g.comm_overlapped_ns, 0), 0) AS comm_ns
    FROM step_phases AS p
    JOIN aligned_steps USING (step)
    JOIN step_waits AS w USING (rank, step)
    LEFT JOIN step_gpu AS g USING (rank, step)
),
per_rank AS (
    SELECT rank, avg(comm_ns) AS comm_ns, avg(dur_ns) AS step_ns, 100.0 * sum(comm_ns) / sum(dur_ns) AS comm_pct,
           list(step ORDER BY step) AS steps
    FROM per_step GROUP BY rank
),
sized AS (        -- what a collective moves: an all-gather produces its input (the rank's shard) times the ranks
    SELECT c.op, c.rank, c.step,
           collective_moved_bytes(c.op, c.bytes, coalesce(r.world_size, (SELECT count(*) FROM ranks))) AS bytes
    FROM collectives AS c LEFT JOIN ranks AS r USING (rank)
    WHERE c.step IN (SELECT step FROM aligned_steps)
),
biggest AS (      -- what is being moved: the largest collective, the mean size, collectives per step
    SELECT first(op ORDER BY coalesce(bytes, -1) DESC, op) AS op, max(bytes) AS bytes, avg(bytes) AS mean_bytes,
           count(*) / count(DISTINCT rank || '-' || step) AS per_step
    FROM sized
),
gloo_on_gpu AS (  -- GPU tensors moved by gloo: the ranks run GPU kernels, their collectives run on the host
    SELECT EXISTS (SELECT 1 FROM collectives WHERE source = 'gloo_annotation')
           AND EXISTS (SELECT 1 FROM kernels) AS yes
),
sharded AS (      -- FSDP (or ZeRO): gradients are reduce-scattered, or FSDP marks its work on the host
    SELECT EXISTS (SELECT 1 FROM collectives WHERE op = 'reduce_scatter')
           OR EXISTS (SELECT 1 FROM annotations WHERE NOT on_gpu
                      AND (name LIKE 'FSDP::%' OR name LIKE 'FullyShardedDataParallel%')) AS yes
),
labelled AS (     -- exposed communication without the wait for the last rank, per parallelism dimension and op (collective_exposure)
    SELECT e.rank, e.dimension, e.op, sum(e.comm_exposed_ns) AS ns
    FROM collective_exposure AS e
    WHERE e.step IN (SELECT step FROM aligned_steps)
    GROUP BY e.rank, e.dimension, e.op
),
by_dimension AS (  -- the median rank's share of its step, per dimension and op
    SELECT l.dimension, l.op, median(100.0 * l.ns / p.step_ns / len(p.steps)) AS pct
    FROM labelled AS l JOIN per_rank AS p USING (rank)
    GROUP BY l.dimension, l.op
),
dimension_text AS (
    SELECT string_agg(CASE dimension WHEN 'data' THEN 'DP' WHEN 'fsdp' THEN 'FSDP' WHEN 'tensor' THEN 'TP'
                                     WHEN 'pipeline' THEN 'PP' WHEN 'expert' THEN 'EP' WHEN 'context' THEN 'CP'
                                     WHEN 'world' THEN 'world' ELSE 'ungrouped' END
                      || ' ' || op || ' ' || round(pct)::INTEGER || '%', ', ' ORDER BY pct DESC, dimension, op) AS text,
           first(dimension ORDER BY pct DESC, dimension, op) AS top_dimension,
           first(op ORDER BY pct DESC, dimension, op) AS top_op,
           max(pct) AS top_pct
    FROM by_dimension WHERE pct >= 0.5
),
job AS (
    SELECT list(rank ORDER BY rank) AS ranks, list_sort(list_distinct(flatten(list(steps)))) AS steps, min(comm_pct) AS min_comm_pct,
           max(comm_pct) AS max_comm_pct, first(rank ORDER BY comm_pct, rank) AS least_rank,
           median(comm_ns) AS comm_ns, median(step_ns) AS step_ns, count(*) AS n_ranks
    FROM per_rank
)
SELECT
    j.ranks,
    j.steps,
    j.comm_ns / 1e6 AS ms_per_step,
    100.0 * j.comm_ns / j.step_ns AS pct_of_step,
    CASE WHEN j.min_comm_pct >= $error_pct THEN 'error' ELSE 'warning' END AS severity,
    j.min_comm_pct AS comm_pct_least_rank,
    j.max_comm_pct AS comm_pct_most_rank,
    j.least_rank,
    j.n_ranks AS ranks_count,
    j.step_ns / 1e6 AS median_step_ms,
    b.op AS largest_op,
    b.bytes AS largest_collective_bytes,
    round(b.bytes / 1048576.0, 1) AS largest_collective_mib,
    b.mean_bytes::BIGINT AS mean_collective_bytes,
    b.per_step AS collectives_per_step_count,
    CASE WHEN (SELECT yes FROM gloo_on_gpu) THEN 'gloo_on_gpu'
         WHEN (SELECT yes FROM sharded) THEN 'fsdp' ELSE 'default' END AS cause,
    coalesce(d.text, 'not attributed') AS comm_by_dimension,
    d.top_dimension,
    d.top_op AS top_dimension_op,
    d.top_pct AS top_dimension_pct
FROM job AS j CROSS JOIN biggest AS b CROSS JOIN dimension_text AS d
WHERE j.min_comm_pct >= $min_comm_pct
  AND (b.mean_bytes IS NULL OR b.mean_bytes >= $min_mean_collective_bytes);
