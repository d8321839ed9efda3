-- When each rank arrives at each collective, on step-relative time, compared with the other ranks.
--
-- Hosts' clocks differ, so arrivals are compared as `ts_ns - step start` of the same
-- ProfilerStep: DDP ranks leave the previous step's last collective together, so their
-- steps start together, and a rank that reaches a collective later than the others is
-- late by exactly that much. Point-to-point send/recv are not group collectives and are
-- left out.

-- One row per rank and group collective instance; the same (step, process_group, op, op_index) on every rank of the group is the same collective.
CREATE OR REPLACE TABLE collective_arrivals AS
WITH keyed AS (
    SELECT c.rank, c.step, c.process_group, c.op, c.bytes, c.ts_ns, c.end_ns, c.dur_ns, c.source,
           coalesce(c.trace_seq,   -- the group's own sequence number where the trace has it (newer NCCL), else the order
                    row_number() OVER (PARTITION BY c.rank, c.step, c.process_group, c.op ORDER BY c.ts_ns, c.end_ns) - 1) AS op_index,
           c.ts_ns - s.ts_ns AS arrival_rel_ns,
           c.end_ns - s.ts_ns AS end_rel_ns
    FROM collectives AS c JOIN steps AS s USING (rank, step)
    WHERE c.op NOT IN ('send', 'recv', 'send_recv')
),
instances AS (
    SELECT step, process_group, op, op_index,
           count(*) AS ranks_seen,
           quantile_disc(arrival_rel_ns, 0.5) AS median_arrival_rel_ns,
           max(arrival_rel_ns) AS last_arrival_rel_ns,
           min(dur_ns) AS min_dur_ns
    FROM keyed GROUP BY step, process_group, op, op_index
)
SELECT
    k.rank,                                 -- global rank
    k.step,                                 -- ProfilerStep N
    k.process_group,                        -- process group name
    k.op,                                   -- all_reduce, barrier, ...
    k.op_index,                             -- 0-based order of this op within the step and process group; args.Seq (the group's sequence number) where the trace has it, so a collective one rank did not record shifts nothing
    k.bytes,                                -- payload bytes, NULL when unknown
    k.source,                               -- nccl_kernel | gloo_annotation | record_param_comms
    k.ts_ns,                                -- arrival on the rank's own clock, ns
    k.dur_ns,                               -- time inside the collective on this rank (transfer + waiting), ns
    k.arrival_rel_ns,                       -- arrival relative to the rank's step start, ns
    i.median_arrival_rel_ns,                -- lower median of the ranks' step-relative arrivals, ns
    k.arrival_rel_ns - i.median_arrival_rel_ns AS late_ns,   -- how much later than the median rank this rank arrived, ns
    i.last_arrival_rel_ns - k.arrival_rel_ns AS wait_for_last_ns,  -- how long this rank waited for the last rank to arrive, ns
    i.min_dur_ns,                           -- shortest time any rank spent inside it (≈ the transfer itself), ns
    i.ranks_seen                            -- ranks that have this collective in the step
FROM keyed AS k
JOIN instances AS i USING (step, process_group, op, op_index)
WHERE i.ranks_seen >= 2
ORDER BY k.step, k.process_group, k.op, k.op_index, k.rank;

-- Per (rank, step): the collective at which the rank is latest relative to the median rank, and what the rank did before arriving there.
CREATE OR REPLACE TABLE step_lateness AS
WITH worst AS (
    SELECT rank, step,
           -- (one collective, the same on every run: ties go to the first in (group, op, index) order)
           first(op ORDER BY late_ns DESC, process_group, op, op_index) AS op,
           first(op_index ORDER BY late_ns DESC, process_group, op, op_index) AS op_index,
           first(process_group ORDER BY late_ns DESC, process_group, op, op_index) AS process_group,
           max(late_ns) AS late_ns
    FROM collective_arrivals GROUP BY rank, step
),
at_collective AS (
    SELECT w.*, a.rank AS peer, a.arrival_rel_ns AS peer_arrival_rel_ns
    FROM worst AS w
    JOIN collective_arrivals AS a ON a.step = w.step AND a.process_group = w.process_group
        AND a.op = w.op AND a.op_index = w.op_index
),
before_arrival AS (   -- each rank's phase time from its step start to its arrival at that collective
    SELECT c.rank, c.step, c.peer, p.phase,
           sum(greatest(0, least(p.start_rel_ns + p.dur_ns, c.peer_arrival_rel_ns) - p.start_rel_ns)) AS ns
    FROM at_collective AS c
    JOIN phase_intervals AS p ON p.rank = c.peer AND p.step = c.step AND p.start_rel_ns < c.peer_arrival_rel_ns
    GROUP BY c.rank, c.step, c.peer, p.phase
),
groups AS (
    SELECT rank, step, peer,
           sum(ns) FILTER (WHERE phase IN ('data_wait', 'h2d')) AS input_ns,
           sum(ns) FILTER (WHERE phase IN ('forward', 'backward', 'optimizer')) AS compute_ns,
           sum(ns) FILTER (WHERE phase = 'other') AS host_ns,
           sum(ns) FILTER (WHERE phase IN ('comm_exposed', 'pipeline_wait')) AS comm_ns
    FROM before_arrival GROUP BY rank, step, peer
),
excess AS (
    SELECT g.rank, g.step,
           any_value(coalesce(g.input_ns, 0)) FILTER (WHERE g.peer = g.rank)
               - median(coalesce(g.input_ns, 0)) FILTER (WHERE g.peer <> g.rank) AS input_excess_ns,
           any_value(coalesce(g.compute_ns, 0)) FILTER (WHERE g.peer = g.rank)
               - median(coalesce(g.compute_ns, 0)) FILTER (WHERE g.peer <> g.rank) AS compute_excess_ns,
           any_value(coalesce(g.host_ns, 0)) FILTER (WHERE g.peer = g.rank)
               - median(coalesce(g.host_ns, 0)) FILTER (WHERE g.peer <> g.rank) AS host_excess_ns,
           any_value(coalesce(g.comm_ns, 0)) FILTER (WHERE g.peer = g.rank)
               - median(coalesce(g.comm_ns, 0)) FILTER (WHERE g.peer <> g.rank) AS comm_excess_ns
    FROM groups AS g GROUP BY g.rank, g.step
)
SELECT
    w.rank,                                 -- global rank
    w.step,                                 -- ProfilerStep N
    w.op,                                   -- the collective where this rank is latest
    w.op_index,                             -- its index among the step's ops of that kind
    w.process_group,                        -- its process group
    w.late_ns,                              -- arrival minus the median rank's arrival there, ns (negative: early)
    e.input_excess_ns::BIGINT AS input_excess_ns,      -- extra data_wait + h2d before arriving, vs the other ranks' median, ns
    e.compute_excess_ns::BIGINT AS compute_excess_ns,  -- extra forward + backward + optimizer before arriving, ns
    e.host_excess_ns::BIGINT AS host_excess_ns,        -- extra host work outside the model (phase other), ns
    e.comm_excess_ns::BIGINT AS comm_excess_ns,        -- extra time in earlier collectives and send / recv, ns
    (w.late_ns - greatest(coalesce(e.comm_excess_ns, 0), 0))::BIGINT AS own_late_ns  -- late_ns less that extra communication: the lateness of the rank's own making; a rank late only because it waited for a rank of another group (tensor, pipeline) has little, ns
FROM worst AS w LEFT JOIN excess AS e USING (rank, step)
ORDER BY w.step, w.rank;
