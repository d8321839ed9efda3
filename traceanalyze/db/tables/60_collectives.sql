-- One row per collective per rank: from NCCL/RCCL kernels (GPU), gloo:* annotations (CPU), or record_param_comms.
CREATE OR REPLACE TABLE collectives AS
WITH gpu AS (
    SELECT rank, step, collective_op(coalesce(collective_name,
               regexp_extract(name, '(?i)(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)', 1))) AS op,
           coalesce(pg_name, 'default') AS process_group, ts_ns, end_ns,
           in_msg_nelems * dtype_bytes(dtype) AS bytes, 'nccl_kernel' AS source, name
    FROM kernels WHERE kind = 'communication'
),
gloo AS (
    SELECT a.rank, a.step, collective_op(substr(a.name, 6)) AS op, 'default' AS process_group,
           a.ts_ns, a.end_ns,
           first_input_numel(a.input_dims) * dtype_bytes(json_extract_string(a.input_type, '$[0]')) AS bytes,
           'gloo_annotation' AS source, a.name
    FROM annotations AS a
    WHERE a.name LIKE 'gloo:%' AND NOT a.on_gpu
),
param_comms AS (
    SELECT rank, step, collective_op(collective_name) AS op, coalesce(pg_name, 'default') AS process_group,
           ts_ns, end_ns, in_msg_nelems * dtype_bytes(dtype) AS bytes, 'record_param_comms' AS source, name
    FROM cpu_ops
    WHERE name = 'record_param_comms' AND collective_op(collective_name) IS NOT NULL
),
unioned AS (
    SELECT *, 1 AS priority FROM gpu
    UNION ALL SELECT *, 2 FROM gloo
    UNION ALL SELECT *, 3 FROM param_comms
),
best AS (
    SELECT rank, min(priority) AS priority FROM unioned GROUP BY rank
)
SELECT
    u.rank,                                 -- global rank
    u.step,                                 -- step the collective belongs to (launching step for GPU kernels)
    u.op,                                   -- all_reduce, all_gather, reduce_scatter, broadcast, barrier, ...
    u.process_group,                        -- process group name ('default' when the trace does not say)
    row_number() OVER (PARTITION BY u.rank, u.process_group ORDER BY u.ts_ns) - 1 AS seq,  -- 0-based order of the collective within its process group on this rank; the same seq on every rank is the same collective
    row_number() OVER (PARTITION BY u.rank, u.step ORDER BY u.ts_ns) - 1 AS index_in_step,  -- 0-based order within the step
    u.bytes,                                -- payload bytes (elements x dtype size), NULL when unknown
    u.ts_ns,                                -- start (the rank's arrival at the collective), ns, rank clock
    u.end_ns,                               -- end, ns
    u.end_ns - u.ts_ns AS dur_ns,           -- duration, ns: transfer plus waiting for the other ranks
    u.source,                               -- nccl_kernel | gloo_annotation | record_param_comms
    u.name                                  -- the event it came from
FROM unioned AS u JOIN best AS b ON u.rank = b.rank AND u.priority = b.priority
WHERE u.op IS NOT NULL
ORDER BY u.rank, u.ts_ns;
