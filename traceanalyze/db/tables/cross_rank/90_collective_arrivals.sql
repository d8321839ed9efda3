-- When each rank arrives at each collective, on step-relative time, compared with the other ranks.
--
-- Hosts' clocks differ, so arrivals are compared as `ts_ns - step start` of the same
-- ProfilerStep: DDP ranks leave the previous step's last collective together, so their
-- steps start together, and a rank that reaches a collective later than the others is
-- late by exactly that much. Point-to-point send/recv are not group collectives and are
-- left out, except the rounds of a ring exchange (context_rings): every rank of the ring sends
-- once per round, and a rank that sends late keeps the next one waiting.

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
    UNION ALL   -- each round of a ring exchange (context_rings): the rank's k-th send to the next rank in the step
    SELECT c.rank, c.step, r.name AS process_group, 'ring_exchange' AS op, c.bytes, c.ts_ns, c.end_ns, c.dur_ns, c.source,
           row_number() OVER (PARTITION BY c.rank, c.step ORDER BY c.ts_ns, c.end_ns) - 1 AS op_index,
           c.ts_ns - s.ts_ns AS arrival_rel_ns,
           c.end_ns - s.ts_ns AS end_rel_ns
    FROM collectives AS c JOIN steps AS s USING (rank, step) JOIN context_rings AS r USING (rank)
    WHERE c.kind = 'p2p' AND c.op = 'send' AND (c.peer IS NULL OR c.peer = r.next_rank)
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
    k.op,                                   -- all_reduce, barrier, ...; ring_exchange: a round of a ring exchange (process_group is the ring's name, context_rings)
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

-- Per (rank, step): how late the rank is at the step's collectives (the most, at the collective where it is latest, and what it did before arriving there), and where that lateness starts.
--
-- The rank's lateness is the most it is late at any collective of the step; it starts at the
-- first collective (by arrival) where the rank is late by at least lateness_start_share_pct of
-- that. A rank with extra tensor-parallel work is first late at its TP group's collective; the
-- data-parallel all-reduce after it, where everyone then waits, is where the lateness shows
-- most, not where it starts.
CREATE OR REPLACE TABLE step_lateness AS
WITH worst AS (       -- the collective where the rank is latest: its lateness, and what it did before arriving there
    SELECT rank, step,
           -- (one collective, the same on every run: ties go to the first in (group, op, index) order)
           first(op ORDER BY late_ns DESC, process_group, op, op_index) AS op,
           first(op_index ORDER BY late_ns DESC, process_group, op, op_index) AS op_index,
           first(process_group ORDER BY late_ns DESC, process_group, op, op_index) AS process_group,
           max(late_ns) AS late_ns
    FROM collective_arrivals GROUP BY rank, step
),
start AS (            -- where that lateness starts: the first collective (by arrival) it reaches late by the share
    SELECT a.rank, a.step,
           first(a.op ORDER BY a.arrival_rel_ns, a.process_group, a.op, a.op_index) AS op,
           first(a.op_index ORDER BY a.arrival_rel_ns, a.process_group, a.op, a.op_index) AS op_index,
           first(a.process_group ORDER BY a.arrival_rel_ns, a.process_group, a.op, a.op_index) AS process_group,
           first(a.late_ns ORDER BY a.arrival_rel_ns, a.process_group, a.op, a.op_index) AS late_ns
    FROM collective_arrivals AS a JOIN worst AS m USING (rank, step)
    WHERE a.late_ns = m.late_ns
       OR (m.late_ns > 0 AND a.late_ns * 100 >= m.late_ns * getvariable('lateness_start_share_pct'))
    GROUP BY a.rank, a.step
),
instances AS (        -- the collectives some rank is latest at (many ranks share one)
    SELECT DISTINCT step, process_group, op, op_index FROM worst
),
at_collective AS (    -- their members and when each arrived
    SELECT i.step, i.process_group, i.op, i.op_index, a.rank AS peer, a.arrival_rel_ns AS peer_arrival_rel_ns
    FROM instances AS i
    JOIN collective_arrivals AS a ON a.step = i.step AND a.process_group = i.process_group
        AND a.op = i.op AND a.op_index = i.op_index
),
before_arrival AS (   -- each member's phase time from its step start to its arrival at that collective
    SELECT c.step, c.process_group, c.op, c.op_index, c.peer, p.phase,
           sum(greatest(0, least(p.start_rel_ns + p.dur_ns, c.peer_arrival_rel_ns) - p.start_rel_ns)) AS ns
    FROM at_collective AS c
    JOIN phase_intervals AS p ON p.rank = c.peer AND p.step = c.step AND p.start_rel_ns < c.peer_arrival_rel_ns
    GROUP BY c.step, c.process_group, c.op, c.op_index, c.peer, p.phase
),
groups AS (
    SELECT step, process_group, op, op_index, peer,
           coalesce(sum(ns) FILTER (WHERE phase IN ('data_wait', 'h2d')), 0) AS input_ns,
           coalesce(sum(ns) FILTER (WHERE phase IN ('forward', 'backward', 'optimizer')), 0) AS compute_ns,
           coalesce(sum(ns) FILTER (WHERE phase = 'other'), 0) AS host_ns,
           coalesce(sum(ns) FILTER (WHERE phase IN ('comm_exposed', 'pipeline_wait')), 0) AS comm_ns
    FROM before_arrival GROUP BY step, process_group, op, op_index, peer
),
placed AS (           -- each member's place among the members' values (the other members' median is then median_of_others: no rank x rank join)
    SELECT *, count(*) OVER w AS n,
           rank() OVER (w ORDER BY input_ns) AS input_place, row_number() OVER (w ORDER BY input_ns) AS input_row,
           rank() OVER (w ORDER BY compute_ns) AS compute_place, row_number() OVER (w ORDER BY compute_ns) AS compute_row,
           rank() OVER (w ORDER BY host_ns) AS host_place, row_number() OVER (w ORDER BY host_ns) AS host_row,
           rank() OVER (w ORDER BY comm_ns) AS comm_place, row_number() OVER (w ORDER BY comm_ns) AS comm_row
    FROM groups
    WINDOW w AS (PARTITION BY step, process_group, op, op_index)
),
middles AS (
    SELECT step, process_group, op, op_index, n,
           max(input_ns) FILTER (WHERE input_row = n // 2) AS input_1, max(input_ns) FILTER (WHERE input_row = n // 2 + 1) AS input_2,
           max(input_ns) FILTER (WHERE input_row = n // 2 + 2) AS input_3,
           max(compute_ns) FILTER (WHERE compute_row = n // 2) AS compute_1, max(compute_ns) FILTER (WHERE compute_row = n // 2 + 1) AS compute_2,
           max(compute_ns) FILTER (WHERE compute_row = n // 2 + 2) AS compute_3,
           max(host_ns) FILTER (WHERE host_row = n // 2) AS host_1, max(host_ns) FILTER (WHERE host_row = n // 2 + 1) AS host_2,
           max(host_ns) FILTER (WHERE host_row = n // 2 + 2) AS host_3,
           max(comm_ns) FILTER (WHERE comm_row = n // 2) AS comm_1, max(comm_ns) FILTER (WHERE comm_row = n // 2 + 1) AS comm_2,
           max(comm_ns) FILTER (WHERE comm_row = n // 2 + 2) AS comm_3
    FROM placed GROUP BY step, process_group, op, op_index, n
),
excess AS (           -- the rank's phase time before its arrival against the other members' median (NULL when the rank has none)
    SELECT w.rank, w.step,
           p.input_ns - median_of_others(d.n, 0, p.input_place, d.input_1, d.input_2, d.input_3) AS input_excess_ns,
           p.compute_ns - median_of_others(d.n, 0, p.compute_place, d.compute_1, d.compute_2, d.compute_3) AS compute_excess_ns,
           p.host_ns - median_of_others(d.n, 0, p.host_place, d.host_1, d.host_2, d.host_3) AS host_excess_ns,
           p.comm_ns - median_of_others(d.n, 0, p.comm_place, d.comm_1, d.comm_2, d.comm_3) AS comm_excess_ns
    FROM worst AS w
    JOIN placed AS p ON p.step = w.step AND p.process_group = w.process_group AND p.op = w.op
        AND p.op_index = w.op_index AND p.peer = w.rank
    JOIN middles AS d ON d.step = w.step AND d.process_group = w.process_group AND d.op = w.op
        AND d.op_index = w.op_index
)
SELECT
    w.rank,                                 -- global rank
    w.step,                                 -- ProfilerStep N
    st.op,                                  -- the collective where the rank's lateness starts: the first it reaches late by lateness_start_share_pct of late_ns
    st.op_index,                            -- its index among the step's ops of that kind
    st.process_group,                       -- its process group
    w.late_ns,                              -- the most the rank is late at a collective of the step: arrival minus the median rank's arrival there, ns (negative: early)
    st.late_ns AS start_late_ns,            -- how late it is at the collective where its lateness starts, ns
    e.input_excess_ns::BIGINT AS input_excess_ns,      -- extra data_wait + h2d before arriving, vs the other ranks' median, ns
    e.compute_excess_ns::BIGINT AS compute_excess_ns,  -- extra forward + backward + optimizer before arriving, ns
    e.host_excess_ns::BIGINT AS host_excess_ns,        -- extra host work outside the model (phase other), ns
    e.comm_excess_ns::BIGINT AS comm_excess_ns,        -- extra time in earlier collectives and send / recv, ns
    (w.late_ns - greatest(coalesce(e.comm_excess_ns, 0), 0))::BIGINT AS own_late_ns  -- late_ns less that extra communication: the lateness of the rank's own making; a rank late only because it waited for a rank of another group (tensor, pipeline) has little, ns
FROM worst AS w JOIN start AS st USING (rank, step) LEFT JOIN excess AS e USING (rank, step)
ORDER BY w.step, w.rank;

-- What collective_arrivals.process_group names: a process group (process_groups) or a ring exchange (context_rings), with its dimension, ranks and size. A view: the rules read it.
CREATE OR REPLACE VIEW arrival_groups AS
SELECT
    process_group,                          -- collective_arrivals.process_group: a group's name, or a ring's ('ring 0')
    dimension,                              -- process_groups.dimension; 'context' for a ring
    ranks,                                  -- global ranks in group-rank order (a ring's in ring order)
    size                                    -- number of ranks
FROM process_groups
UNION ALL
SELECT name, 'context', any_value(ring_ranks), count(*) FROM context_rings GROUP BY name;
