-- One row for the job when DDP searches for unused parameters every step (find_unused_parameters=True).
WITH searches AS (    -- DDP's extra autograd-graph traversal, once per synchronised forward pass
    SELECT rank, step, count(*) AS searches, sum(dur_ns) AS search_ns
    FROM cpu_ops
    WHERE name = 'torch.distributed.ddp.reducer::search_unused_parameters'
      AND step IN (SELECT step FROM aligned_steps)
    GROUP BY rank, step
),
used_maps AS (        -- the all-reduce of DDP's used-parameter map: one int per parameter
    SELECT rank, step, first_input_numel(input_dims) AS params, dur_ns
    FROM annotations
    WHERE name = 'gloo:all_reduce' AND NOT on_gpu AND json_extract_string(input_type, '$[0]') = 'int'
    UNION ALL
    SELECT rank, step, in_msg_nelems, dur_ns
    FROM cpu_ops
    WHERE name = 'record_param_comms' AND collective_op(collective_name) = 'all_reduce'
      AND lower(dtype) IN ('int', 'int32')
),
grads AS (            -- parameters that received a gradient
    SELECT rank, step, count(*) AS grads FROM cpu_ops
    WHERE name = 'torch::autograd::AccumulateGrad' GROUP BY rank, step
),
passes AS (
    SELECT rank, step, count(*) AS passes FROM annotations
    WHERE name = 'DistributedDataParallel.forward' AND NOT on_gpu GROUP BY rank, step
),
per_step AS (
    SELECT s.rank, s.step, s.searches, s.search_ns,
           (SELECT max(m.params) FROM used_maps AS m WHERE m.rank = s.rank AND m.step = s.step) AS params,
           (SELECT sum(m.dur_ns) FROM used_maps AS m WHERE m.rank = s.rank AND m.step = s.step) AS map_ns,
           coalesce(g.grads, 0) / greatest(coalesce(p.passes, s.searches), 1) AS grads_per_pass
    FROM searches AS s
    LEFT JOIN grads AS g USING (rank, step)
    LEFT JOIN passes AS p USING (rank, step)
)
SELECT
    list(DISTINCT rank ORDER BY rank) AS ranks,
    list(DISTINCT step ORDER BY step) AS steps,
    avg(search_ns + coalesce(map_ns, 0)) / 1e6 AS ms_per_step,
    100.0 * avg(search_ns + coalesce(map_ns, 0)) / (SELECT median(median_dur_ns) FROM aligned_steps) AS pct_of_step,
    CASE
        WHEN bool_and(params IS NOT NULL AND grads_per_pass >= params) THEN 'warning'
        ELSE 'info'
    END AS severity,
    CASE
        WHEN bool_and(params IS NOT NULL AND grads_per_pass >= params) THEN 'all_used'
        WHEN bool_or(params IS NOT NULL AND grads_per_pass < params) THEN 'some_unused'
        ELSE 'unknown'
    END AS cause,
    median(params)::BIGINT AS parameters_count,
    median(grads_per_pass) AS parameters_with_grad_count,
    median(search_ns) / 1e3 AS search_us_per_step,
    median(map_ns) / 1e6 AS used_map_allreduce_ms_per_step,
    (SELECT median(median_dur_ns) FROM aligned_steps) / 1e6 AS median_step_ms
FROM per_step
HAVING count(*) > 0;
