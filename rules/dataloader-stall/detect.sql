-- One row when the typical rank (the lower median: with two ranks the one that waits less, so one slow rank is a straggler, not a job-wide stall) spends a large share of its steps waiting for the next batch.
WITH per_rank AS (
    SELECT rank, sum(data_wait_ns) AS data_ns, sum(dur_ns) AS dur_ns, count(*) AS n_steps,
           100.0 * sum(data_wait_ns) / sum(dur_ns) AS data_pct, list(step ORDER BY step) AS steps
    FROM step_phases JOIN aligned_steps USING (step)
    GROUP BY rank
),
loader AS (   -- what the trace shows of the DataLoader: worker processes or the training loop itself
    SELECT count(*) FILTER (WHERE name LIKE '%_MultiProcessingDataLoaderIter%') AS multi_n,
           count(*) FILTER (WHERE name LIKE '%_SingleProcessDataLoaderIter%') AS single_n
    FROM (SELECT name FROM cpu_ops WHERE name LIKE 'enumerate(DataLoader)#%'
          UNION ALL
          SELECT name FROM annotations WHERE NOT on_gpu AND name LIKE 'enumerate(DataLoader)#%')
),
job AS (
    SELECT list(rank ORDER BY rank) AS ranks, list_sort(list_distinct(flatten(list(steps)))) AS steps, quantile_disc(data_pct, 0.5) AS median_pct,
           max(data_pct) AS worst_pct, first(rank ORDER BY data_pct DESC, rank) AS worst_rank,
           quantile_disc(data_ns / n_steps, 0.5) AS data_ns_per_step, median(dur_ns / n_steps) AS step_ns
    FROM per_rank
)
SELECT
    ranks,
    steps,
    data_ns_per_step / 1e6 AS ms_per_step,
    median_pct AS pct_of_step,
    CASE WHEN median_pct >= $error_pct THEN 'error' ELSE 'warning' END AS severity,
    data_ns_per_step / 1e6 AS data_wait_ms,
    median_pct AS data_wait_pct,
    worst_rank,
    worst_pct AS worst_rank_data_wait_pct,
    step_ns / 1e6 AS median_step_ms,
    CASE WHEN (SELECT multi_n FROM loader) > 0 THEN 'workers'
         WHEN (SELECT single_n FROM loader) > 0 THEN 'no_workers'
         ELSE 'unknown' END AS cause   -- workers: _MultiProcessingDataLoaderIter (num_workers > 0)
FROM job
WHERE median_pct >= $min_data_wait_pct;
