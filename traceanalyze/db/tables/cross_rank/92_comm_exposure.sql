-- Exposed communication per collective (which group, which dimension, which pass), and what
-- each all_to_all sends to and receives from every rank of its group.

-- One row per all_to_all per rank: bytes sent and received, per rank of the group where the split sizes are recorded.
CREATE OR REPLACE TABLE all_to_all_volumes AS
WITH calls AS (
    SELECT *, row_number() OVER (PARTITION BY rank ORDER BY ts_ns, end_ns DESC, name) AS call_id FROM all_to_all_calls
),
inner_of AS (     -- a call inside another all_to_all call of its thread (NCCL's record_param_comms inside c10d::alltoall_base_): the outermost is the call
    SELECT i.rank, i.call_id, min(o.call_id) AS outer_id
    FROM calls AS i JOIN calls AS o
        ON o.rank = i.rank AND o.tid = i.tid AND o.call_id < i.call_id AND i.ts_ns >= o.ts_ns AND i.end_ns <= o.end_ns
    GROUP BY i.rank, i.call_id
),
merged AS (       -- one row per outermost call, with what its inner calls recorded where it did not
    SELECT o.rank, o.call_id, any_value(o.step) AS step, any_value(o.tid) AS tid, any_value(o.ts_ns) AS ts_ns, any_value(o.end_ns) AS end_ns,
           coalesce(any_value(o.send_bytes), max(i.send_bytes)) AS send_bytes,
           coalesce(any_value(o.recv_bytes), max(i.recv_bytes)) AS recv_bytes,
           coalesce(any_value(o.send_splits), first(i.send_splits ORDER BY i.call_id) FILTER (WHERE i.send_splits IS NOT NULL)) AS send_splits,
           coalesce(any_value(o.recv_splits), first(i.recv_splits ORDER BY i.call_id) FILTER (WHERE i.recv_splits IS NOT NULL)) AS recv_splits
    FROM calls AS o
    LEFT JOIN inner_of AS n ON n.rank = o.rank AND n.outer_id = o.call_id
    LEFT JOIN calls AS i ON i.rank = n.rank AND i.call_id = n.call_id
    WHERE NOT EXISTS (SELECT 1 FROM inner_of AS x WHERE x.rank = o.rank AND x.call_id = o.call_id)
    GROUP BY o.rank, o.call_id
),
issued AS (       -- the collective row each call issued (gloo's all_to_all run, NCCL's SendRecv kernel): its group and duration
    SELECT m.rank, m.call_id, m.step, m.ts_ns, m.end_ns, m.send_bytes, m.recv_bytes, m.send_splits, m.recv_splits,
           first(c.process_group ORDER BY c.ts_ns, c.seq) AS process_group,
           first(c.group_ranks ORDER BY c.ts_ns, c.seq) AS group_ranks,
           coalesce(max(c.end_ns), m.end_ns) - m.ts_ns AS dur_ns
    FROM merged AS m
    LEFT JOIN collectives AS c ON c.rank = m.rank AND c.call_tid = m.tid AND c.call_end_ns BETWEEN m.ts_ns AND m.end_ns
    GROUP BY m.rank, m.call_id, m.step, m.ts_ns, m.end_ns, m.send_bytes, m.recv_bytes, m.send_splits, m.recv_splits
),
orphans AS (      -- all_to_all runs no recorded call issued (gloo annotations alone): what the run's input says
    SELECT c.rank, c.step, c.ts_ns, c.bytes AS send_bytes, NULL::BIGINT AS recv_bytes, NULL::BIGINT[] AS send_splits,
           NULL::BIGINT[] AS recv_splits, c.process_group, c.group_ranks, c.dur_ns
    FROM collectives AS c
    WHERE c.op = 'all_to_all'
      AND NOT EXISTS (SELECT 1 FROM merged AS m WHERE m.rank = c.rank AND m.tid = c.call_tid AND c.call_end_ns BETWEEN m.ts_ns AND m.end_ns)
),
unioned AS (
    SELECT rank, step, ts_ns, send_bytes, recv_bytes, send_splits, recv_splits,
           coalesce(process_group, (SELECT arg_max(p.pg_name, [p.pg_size, -p.config_index]) FROM pg_configs AS p WHERE p.rank = issued.rank),
                    'default') AS process_group,
           group_ranks, dur_ns
    FROM issued
    UNION ALL
    SELECT rank, step, ts_ns, send_bytes, recv_bytes, send_splits, recv_splits, process_group, group_ranks, dur_ns FROM orphans
),
world AS (
    SELECT coalesce(max(world_size), count(*))::INTEGER AS n FROM ranks
),
grouped AS (      -- the default group without a rank list (no pg_config) is the world, in rank order
    SELECT u.rank, u.step, u.ts_ns, u.process_group, u.dur_ns, u.send_bytes, u.recv_bytes, u.send_splits, u.recv_splits,
           coalesce(u.group_ranks,
               (SELECT any_value(p.ranks) FROM pg_configs AS p WHERE p.rank = u.rank AND p.pg_name = u.process_group),
               CASE WHEN u.process_group IN ('0', 'default') AND len(coalesce(u.send_splits, u.recv_splits)) = w.n
                    THEN range(w.n)::INTEGER[] END) AS group_ranks
    FROM unioned AS u CROSS JOIN world AS w
),
chosen AS (
    SELECT *,
           row_number() OVER (PARTITION BY rank, process_group, step ORDER BY ts_ns, send_bytes, recv_bytes) - 1 AS call_index,
           CASE WHEN group_ranks IS NULL OR len(group_ranks) = len(send_splits) THEN send_splits END AS s_splits,
           CASE WHEN group_ranks IS NULL OR len(group_ranks) = len(recv_splits) THEN recv_splits END AS r_splits
    FROM grouped
)
SELECT
    rank,                                   -- global rank
    step,                                   -- ProfilerStep N holding the call, NULL outside steps
    process_group,                          -- process group of the collective the call issued (collectives.process_group); the rank's largest group (or 'default') when none was recorded
    call_index,                             -- 0-based order of the rank's all_to_alls in the group within the step: every rank of a group calls them in the same order, so the same (step, call_index) on every rank is the same all_to_all
    group_ranks,                            -- global ranks of the group in group-rank order (the order of the split lists; the world for the default group without a pg_config), NULL when unknown
    send_bytes,                             -- bytes this rank sends (its input tensor), NULL when unknown
    recv_bytes,                             -- bytes this rank receives (its output tensor), NULL when unknown (a gloo annotation without its call records only the input)
    CASE WHEN s_splits IS NOT NULL AND list_sum(s_splits) > 0 AND send_bytes IS NOT NULL
         THEN list_transform(s_splits, lambda x: (x * send_bytes // list_sum(s_splits))::BIGINT) END AS send_split_bytes,  -- bytes sent to each rank of the group (group-rank order; the rank's own slice stays local), NULL without split sizes
    CASE WHEN r_splits IS NOT NULL AND list_sum(r_splits) > 0 AND recv_bytes IS NOT NULL
         THEN list_transform(r_splits, lambda x: (x * recv_bytes // list_sum(r_splits))::BIGINT) END AS recv_split_bytes,  -- bytes received from each rank of the group, NULL without split sizes
    CASE WHEN s_splits IS NOT NULL OR r_splits IS NOT NULL THEN 'split_sizes'
         WHEN send_bytes IS NOT NULL OR recv_bytes IS NOT NULL THEN 'totals'
         ELSE 'unknown' END AS volume_source, -- split_sizes (Concrete Inputs / In-Out split size: per rank of the group) | totals (only what the rank sends and receives: even splits, or split sizes not recorded) | unknown
    dur_ns                                  -- from the call's start to the end of the collective it issued (transfer + waiting), ns; the call itself when no collective row matched
FROM chosen
ORDER BY rank, process_group, step, call_index;

-- One row per collective per rank: the time the rank was held up by it (exposed: not hidden behind compute), split into waiting for the last rank and the communication itself.
CREATE OR REPLACE TABLE collective_exposure AS
WITH coll AS (
    SELECT c.rank, c.step, c.process_group, c.op, c.seq, c.bytes, c.source, c.ts_ns, c.end_ns,
           coalesce(c.trace_seq, row_number() OVER (PARTITION BY c.rank, c.step, c.process_group, c.op
                                                    ORDER BY c.ts_ns, c.end_ns) - 1) AS op_index
    FROM collectives AS c
    WHERE c.kind = 'collective' AND c.step IS NOT NULL
),
exposed AS (      -- the training loop blocked in or waiting for a collective (phase comm_exposed)
    SELECT rank, step, ts_ns, end_ns FROM phase_intervals WHERE phase = 'comm_exposed'
),
cuts AS (         -- the step's timeline cut at every exposed interval's ends and every collective's end (linear: no range join)
    SELECT rank, step, ts_ns AS t FROM exposed
    UNION SELECT rank, step, end_ns FROM exposed
    UNION SELECT rank, step, end_ns FROM coll
),
pieces AS (
    SELECT rank, step, t AS ts_ns, lead(t) OVER (PARTITION BY rank, step ORDER BY t) AS end_ns FROM cuts
),
segments AS (     -- the pieces inside an exposed interval (the interval starting last at or before the piece holds it)
    SELECT p.rank, p.step, p.ts_ns, p.end_ns
    FROM pieces AS p ASOF JOIN exposed AS e ON e.rank = p.rank AND e.step = p.step AND p.ts_ns >= e.ts_ns
    WHERE p.end_ns > p.ts_ns AND p.end_ns <= e.end_ns
),
ends AS (         -- one collective per (rank, step, end): the first issued, on a tie
    SELECT rank, step, end_ns, first(process_group ORDER BY ts_ns, process_group, seq) AS process_group,
           first(seq ORDER BY ts_ns, process_group, seq) AS seq
    FROM coll GROUP BY rank, step, end_ns
),
owned AS (        -- a piece belongs to the first collective of the step to end at or after it: the one in flight, or the one the call the loop is in queues
    SELECT s.rank, s.step, s.end_ns - s.ts_ns AS dur_ns, c.process_group, c.seq
    FROM segments AS s ASOF JOIN ends AS c ON c.rank = s.rank AND c.step = s.step AND c.end_ns >= s.end_ns
),
host AS (
    SELECT rank, process_group, seq, sum(dur_ns) AS host_ns FROM owned GROUP BY rank, process_group, seq
),
gpu AS (          -- an NCCL kernel's time with no compute kernel of the rank running
    SELECT c.rank, c.process_group, c.seq,
           (c.end_ns - c.ts_ns) - coalesce(sum(least(c.end_ns, b.end_ns) - greatest(c.ts_ns, b.ts_ns)), 0) AS gpu_ns
    FROM coll AS c
    LEFT JOIN gpu_busy_intervals AS b
        ON b.rank = c.rank AND b.step = c.step AND b.class = 'compute' AND b.end_ns > c.ts_ns AND b.ts_ns < c.end_ns
    WHERE c.source = 'nccl_kernel'
    GROUP BY c.rank, c.process_group, c.seq, c.ts_ns, c.end_ns
),
backward AS (     -- where backward runs on the training loop: collectives issued before it serve forward
    SELECT rank, step, min(ts_ns) AS first_ns, max(end_ns) AS last_ns FROM phase_intervals WHERE phase = 'backward' GROUP BY rank, step
),
joined AS (
    SELECT c.*, greatest(coalesce(h.host_ns, 0), coalesce(g.gpu_ns, 0)) AS exposed_ns,
           greatest(coalesce(a.wait_for_last_ns, 0), 0) AS wait_ns,
           CASE WHEN bw.first_ns IS NULL OR c.ts_ns < bw.first_ns THEN 'forward'
                WHEN c.ts_ns <= bw.last_ns THEN 'backward' ELSE 'after_backward' END AS pass,
           pg.dimension
    FROM coll AS c
    LEFT JOIN host AS h USING (rank, process_group, seq)
    LEFT JOIN gpu AS g USING (rank, process_group, seq)
    LEFT JOIN collective_arrivals AS a USING (rank, step, process_group, op, op_index)
    LEFT JOIN backward AS bw USING (rank, step)
    LEFT JOIN process_groups AS pg USING (process_group)
)
SELECT
    rank,                                   -- global rank
    step,                                   -- ProfilerStep N
    process_group,                          -- process group name
    coalesce(dimension, 'unknown') AS dimension,  -- the group's parallelism dimension (process_groups.dimension): data | fsdp | tensor | pipeline | expert | context | world | unknown
    op,                                     -- all_reduce, all_gather, reduce_scatter, all_to_all, ...
    seq,                                    -- the collective's order in its group on this rank (collectives.seq)
    pass,                                   -- forward (issued before the step's first backward op on the training loop, or no backward), backward (issued during backward), after_backward (optimizer, metrics)
    bytes,                                  -- payload bytes of the rank's input (collectives.bytes), NULL when unknown
    exposed_ns,                             -- time the rank was held up by it, ns: the training loop's comm_exposed time that ends with it (host), or its NCCL kernel time with no compute kernel running (GPU), whichever is larger
    least(exposed_ns, wait_ns) AS wait_exposed_ns,  -- the part spent waiting for the last rank to arrive (collective_arrivals.wait_for_last_ns), ns: a straggler's cost, not communication
    exposed_ns - least(exposed_ns, wait_ns) AS comm_exposed_ns  -- the communication itself that compute did not hide, ns (exposed minus waiting for the last rank)
FROM joined
ORDER BY rank, step, process_group, seq;
