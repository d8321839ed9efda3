-- One row per collective per rank: from NCCL/RCCL kernels (GPU), gloo:* annotations (CPU), or record_param_comms.
CREATE OR REPLACE TABLE collectives AS
WITH gpu AS (
    SELECT k.rank, k.step, collective_op(coalesce(k.collective_name,
               regexp_extract(k.name, '(?i)(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)', 1))) AS op,
           coalesce(k.pg_name, 'default') AS process_group, k.ts_ns, k.end_ns,
           k.in_msg_nelems * dtype_bytes(k.dtype) AS bytes, 'nccl_kernel' AS source, k.name,
           l.tid AS call_tid, l.end_ns AS call_end_ns
    FROM kernels AS k
    LEFT JOIN (SELECT rank, correlation, first(tid ORDER BY ts_ns, tid) AS tid, first(end_ns ORDER BY ts_ns, tid) AS end_ns
               FROM runtime WHERE correlation IS NOT NULL GROUP BY rank, correlation) AS l
        ON l.rank = k.rank AND l.correlation = k.correlation
    WHERE k.kind = 'communication'
),
-- gloo:* annotations: the work as the pt_gloo_runloop threads ran it
gloo_runs AS (
    SELECT a.rank, a.step, collective_op(substr(a.name, 6)) AS gloo_op, a.ts_ns, a.end_ns,
           first_input_numel(a.input_dims) * dtype_bytes(json_extract_string(a.input_type, '$[0]')) AS bytes,
           a.name,
           CASE WHEN collective_op(substr(a.name, 6)) NOT IN ('send', 'recv', 'send_recv') THEN
               row_number() OVER (PARTITION BY a.rank, collective_op(substr(a.name, 6)) IN ('send', 'recv', 'send_recv')
                                  ORDER BY a.ts_ns, a.end_ns) END AS k
    FROM annotations AS a
    WHERE a.name LIKE 'gloo:%' AND NOT a.on_gpu
),
-- the c10d:: calls that queue group collectives on gloo's runloop, in issue order
gloo_calls AS (
    SELECT rank, collective_op(substr(name, 7)) AS call_op, ts_ns AS call_ts_ns, end_ns AS call_end_ns,
           tid AS call_tid, row_number() OVER (PARTITION BY rank ORDER BY ts_ns, end_ns) AS k
    FROM cpu_ops
    WHERE name LIKE 'c10d::%'
      AND collective_op(substr(name, 7)) IN ('all_reduce', 'all_gather', 'reduce_scatter', 'broadcast', 'reduce',
                                             'all_to_all', 'barrier', 'gather', 'scatter')
),
gloo_paired AS (
    SELECT r.*, c.call_op, c.call_ts_ns, c.call_end_ns, c.call_tid,
           c.call_op IS NULL OR (c.call_ts_ns <= r.ts_ns
               AND (c.call_op = r.gloo_op OR (c.call_op = 'reduce_scatter' AND r.gloo_op = 'all_reduce'))) AS consistent
    FROM gloo_runs AS r LEFT JOIN gloo_calls AS c ON c.rank = r.rank AND c.k = r.k
),
-- ranks whose i-th gloo run matches the i-th c10d call all along
gloo_trusted AS (
    SELECT rank, bool_and(consistent) AS trusted FROM gloo_paired GROUP BY rank
),
-- gloo runs reduce_scatter_tensor (FSDP's gradient reduce-scatter) as an all-reduce of the
gloo AS (
    -- whole tensor (a 'gloo:all_reduce' annotation); the c10d::_reduce_scatter_base_ call that
    -- queued it tells what the program asked for. Gloo runs its queue in order, so the i-th
    -- annotation belongs to the i-th call; the pairing is used only where every pair agrees.
    SELECT p.rank, p.step,
           CASE WHEN t.trusted AND p.call_op = 'reduce_scatter' THEN 'reduce_scatter' ELSE p.gloo_op END AS op,
           'default' AS process_group, p.ts_ns, p.end_ns, p.bytes, 'gloo_annotation' AS source, p.name,
           CASE WHEN t.trusted THEN p.call_tid END AS call_tid, CASE WHEN t.trusted THEN p.call_end_ns END AS call_end_ns
    FROM gloo_paired AS p JOIN gloo_trusted AS t USING (rank)
),
param_comms AS (
    SELECT rank, step, collective_op(collective_name) AS op, coalesce(pg_name, 'default') AS process_group,
           ts_ns, end_ns, in_msg_nelems * dtype_bytes(dtype) AS bytes, 'record_param_comms' AS source, name,
           tid AS call_tid, end_ns AS call_end_ns
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
    u.bytes,                                -- payload bytes (elements x dtype size) of the rank's input: its shard for all_gather, the whole tensor for reduce_scatter; NULL when unknown
    u.ts_ns,                                -- start (the rank's arrival at the collective), ns, rank clock
    u.end_ns,                               -- end, ns
    u.end_ns - u.ts_ns AS dur_ns,           -- duration, ns: transfer plus waiting for the other ranks
    u.source,                               -- nccl_kernel | gloo_annotation | record_param_comms
    u.name,                                 -- the event it came from (gloo:all_reduce for a reduce_scatter that gloo runs as an all-reduce)
    u.call_tid,                             -- host thread of the call that issued it: the runtime call that launched the NCCL kernel, the c10d:: call that queued the gloo run (paired in order, NULL on a rank where the order does not match), or the record_param_comms op itself
    u.call_end_ns                           -- end of that host call, ns (rank clock); NULL when unknown
FROM unioned AS u JOIN best AS b ON u.rank = b.rank AND u.priority = b.priority
WHERE u.op IS NOT NULL
ORDER BY u.rank, u.ts_ns;
