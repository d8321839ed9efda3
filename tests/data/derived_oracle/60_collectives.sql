-- One row per collective and point-to-point transfer per rank, with its process group: from NCCL/RCCL kernels (GPU), gloo:* annotations (CPU), or record_param_comms.
CREATE OR REPLACE TABLE collectives AS
WITH gpu AS (
    SELECT k.rank, k.step, collective_op(coalesce(k.collective_name,
               regexp_extract(k.name, '(?i)(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)', 1))) AS op,
           k.pg_name, k.pg_desc, k.pg_ranks, k.collective_seq AS trace_seq, k.peer_group_rank, k.stream::VARCHAR AS run_tid,
           k.ts_ns, k.end_ns,
           k.in_msg_nelems * dtype_bytes(k.dtype) AS bytes, 'nccl_kernel' AS source, k.name,
           l.tid AS call_tid, l.ts_ns AS call_ts_ns, l.end_ns AS call_end_ns
    FROM kernels AS k
    LEFT JOIN (SELECT rank, correlation, first(tid ORDER BY ts_ns, tid) AS tid, first(ts_ns ORDER BY ts_ns, tid) AS ts_ns,
               first(end_ns ORDER BY ts_ns, tid) AS end_ns
               FROM runtime WHERE correlation IS NOT NULL GROUP BY rank, correlation) AS l
        ON l.rank = k.rank AND l.correlation = k.correlation
    WHERE k.kind = 'communication'
),
-- gloo:* annotations: the work as the pt_gloo_runloop threads ran it
gloo_runs AS (
    SELECT a.rank, a.step, collective_op(substr(a.name, 6)) AS gloo_op, a.tid AS run_tid, a.ts_ns, a.end_ns,
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
    -- gloo:send / gloo:recv run on the calling thread itself (from the c10d::send / recv_ call to
    -- the end of the transfer): their call is that thread.
    SELECT p.rank, p.step,
           CASE WHEN t.trusted AND p.call_op = 'reduce_scatter' THEN 'reduce_scatter' ELSE p.gloo_op END AS op,
           NULL::VARCHAR AS pg_name, NULL::VARCHAR AS pg_desc, NULL::VARCHAR AS pg_ranks, NULL::BIGINT AS trace_seq,
           NULL::INTEGER AS peer_group_rank, p.run_tid,
           p.ts_ns, p.end_ns, p.bytes, 'gloo_annotation' AS source, p.name,
           CASE WHEN p.gloo_op IN ('send', 'recv', 'send_recv') THEN p.run_tid WHEN t.trusted THEN p.call_tid END AS call_tid,
           CASE WHEN p.gloo_op IN ('send', 'recv', 'send_recv') THEN p.ts_ns WHEN t.trusted THEN p.call_ts_ns END AS call_ts_ns,
           CASE WHEN p.gloo_op NOT IN ('send', 'recv', 'send_recv') AND t.trusted THEN p.call_end_ns END AS call_end_ns
    FROM gloo_paired AS p JOIN gloo_trusted AS t USING (rank)
),
param_comms AS (
    SELECT rank, step, collective_op(collective_name) AS op, pg_name, pg_desc, pg_ranks, collective_seq AS trace_seq,
           peer_group_rank, tid AS run_tid,
           ts_ns, end_ns, in_msg_nelems * dtype_bytes(dtype) AS bytes, 'record_param_comms' AS source, name,
           tid AS call_tid, ts_ns AS call_ts_ns, end_ns AS call_end_ns
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
),
-- the rank's own groups (distributedInfo.pg_config): the group of events that name none, when the rank has one
own_groups AS (
    SELECT rank, count(*) AS n, arg_max(pg_name, [pg_size, -config_index]) AS largest FROM pg_configs GROUP BY rank
),
-- the c10d::send / recv_ call around a send / recv: its dstRank / srcRank argument
p2p_calls AS (
    SELECT rank, tid, ts_ns, end_ns, peer_group_rank FROM cpu_ops
    WHERE name IN ('c10d::send', 'c10d::recv_') AND peer_group_rank IS NOT NULL
),
grouped AS (
    SELECT u.*,
           CASE WHEN u.op IN ('send', 'recv', 'send_recv') THEN 'p2p' ELSE 'collective' END AS kind,
           CASE WHEN u.pg_name IS NOT NULL THEN 'trace' WHEN g.n = 1 THEN 'pg_config'
                WHEN g.n > 1 THEN 'pending' ELSE 'unknown' END AS group_source,
           coalesce(u.pg_name, g.largest, 'default') AS group_name,
           coalesce(u.peer_group_rank,
                    (SELECT max(p.peer_group_rank) FROM p2p_calls AS p
                     WHERE u.op IN ('send', 'recv', 'send_recv') AND p.rank = u.rank AND p.tid = u.call_tid
                       AND u.call_ts_ns BETWEEN p.ts_ns AND p.end_ns)) AS peer_in_group
    FROM unioned AS u JOIN best AS b ON u.rank = b.rank AND u.priority = b.priority
    LEFT JOIN own_groups AS g ON g.rank = u.rank
    WHERE u.op IS NOT NULL
),
described AS (
    SELECT c.*,
           coalesce(c.pg_desc, (SELECT any_value(p.pg_desc) FROM pg_configs AS p WHERE p.rank = c.rank AND p.pg_name = c.group_name)) AS group_desc,
           coalesce(group_ranks_arg(c.pg_ranks),
                    (SELECT any_value(p.ranks) FROM pg_configs AS p WHERE p.rank = c.rank AND p.pg_name = c.group_name)) AS members
    FROM grouped AS c
)
SELECT
    u.rank,                                 -- global rank
    u.step,                                 -- step the collective belongs to (launching step for GPU kernels)
    u.op,                                   -- all_reduce, all_gather, reduce_scatter, broadcast, barrier, all_to_all, ...; send / recv / send_recv for point-to-point
    u.kind,                                 -- 'collective' (every rank of the group takes part) or 'p2p' (a send or receive between two ranks)
    u.group_name AS process_group,          -- process group name (pg_name: '0' is the default group; 'default' when neither the event nor the rank's pg_config tells)
    u.group_desc AS pg_desc,                -- the group's description ('default_pg', 'mesh_tp', ...), NULL when unknown
    u.members AS group_ranks,               -- global ranks of the group, in group-rank order, NULL when unknown
    u.group_source,                         -- where the group came from: 'trace' (the event's args), 'pg_config' (the rank's only group), 'inferred' (gloo: matched across the ranks sharing a group, see docs/parallelism.md), 'pending' (the rank has several groups and inference has not run), 'unknown'
    CASE WHEN u.members IS NOT NULL AND u.peer_in_group >= 0 AND u.peer_in_group < len(u.members)
         THEN u.members[u.peer_in_group + 1] END AS peer,  -- p2p: global rank at the other end (the destination of a send, the source of a recv), NULL when unknown
    u.peer_in_group AS peer_group_rank,     -- p2p: the other end as a rank of the process group (what the call names), NULL when unknown
    row_number() OVER (PARTITION BY u.rank, u.group_name ORDER BY u.ts_ns, u.end_ns) - 1 AS seq,  -- 0-based order of the collective within its process group on this rank; the same seq on every rank is the same collective
    u.trace_seq,                            -- args.Seq: the collective's sequence number in its group as torch counts it (newer torch), NULL when absent
    row_number() OVER (PARTITION BY u.rank, u.step ORDER BY u.ts_ns, u.end_ns) - 1 AS index_in_step,  -- 0-based order within the step
    u.bytes,                                -- payload bytes (elements x dtype size) of the rank's input: its shard for all_gather, the whole tensor for reduce_scatter; NULL when unknown
    u.ts_ns,                                -- start (the rank's arrival at the collective), ns, rank clock
    u.end_ns,                               -- end, ns
    u.end_ns - u.ts_ns AS dur_ns,           -- duration, ns: transfer plus waiting for the other ranks
    u.source,                               -- nccl_kernel | gloo_annotation | record_param_comms
    u.name,                                 -- the event it came from (gloo:all_reduce for a reduce_scatter that gloo runs as an all-reduce)
    u.run_tid,                              -- thread (or GPU stream) that ran it: a gloo group's pt_gloo_runloop thread, the NCCL stream, the calling thread
    u.call_tid,                             -- host thread of the call that issued it: the runtime call that launched the NCCL kernel, the c10d:: call that queued the gloo run (paired in order, NULL on a rank where the order does not match), or the record_param_comms op itself
    u.call_end_ns                           -- end of that host call, ns (rank clock); NULL when unknown
FROM described AS u
ORDER BY u.rank, u.ts_ns, u.end_ns;
