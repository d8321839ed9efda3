-- Per rank and collective instance: the bandwidth it reached, as nccl-tests reports it.
--
-- The same (step, process_group, op, op_index) on every rank is one instance (as in
-- collective_arrivals). Its transfer time is the fastest loaded rank's duration (wait_free_ns: the
-- last rank to arrive waits for nobody, TraceLens's method); algbw = buffer bytes / wait_free_ns;
-- busbw = algbw x the nccl-tests factor of the op for n ranks: all_reduce 2(n-1)/n; all_gather,
-- reduce_scatter, all_to_all (n-1)/n (over the full buffer); broadcast, reduce, send, recv 1.

-- One row per rank and collective; bandwidth NULL where the bytes or the group size are unknown.
CREATE OR REPLACE TABLE collective_bandwidth AS
WITH sized AS (
    SELECT c.rank, c.step, c.ts_ns, c.op, c.process_group, c.bytes, c.dur_ns, c.source,
           coalesce(k.group_size, p.group_size) AS group_size,
           row_number() OVER (PARTITION BY c.rank, c.step, c.process_group, c.op ORDER BY c.ts_ns) - 1 AS op_index
    FROM collectives AS c
    LEFT JOIN (SELECT rank, ts_ns, name, max(group_size) AS group_size FROM kernels
               WHERE kind = 'communication' GROUP BY rank, ts_ns, name) AS k
      ON c.source = 'nccl_kernel' AND k.rank = c.rank AND k.ts_ns = c.ts_ns AND k.name = c.name
    LEFT JOIN (SELECT rank, ts_ns, max(group_size) AS group_size FROM cpu_ops
               WHERE name = 'record_param_comms' GROUP BY rank, ts_ns) AS p
      ON c.source = 'record_param_comms' AND p.rank = c.rank AND p.ts_ns = c.ts_ns
    WHERE c.step IS NOT NULL
),
hosted AS (
    SELECT s.*, r.host_name FROM sized AS s JOIN ranks AS r USING (rank)
),
instances AS (
    SELECT step, process_group, op, op_index,
           min(dur_ns) AS wait_free_ns, count(*) AS ranks_seen,
           count(host_name) AS hosts_known, count(DISTINCT host_name) AS hosts_distinct,
           max(group_size) AS group_size
    FROM hosted GROUP BY step, process_group, op, op_index
),
rated AS (
    SELECT h.*, i.wait_free_ns, i.ranks_seen,
           CASE WHEN i.hosts_distinct >= 2 THEN true
                WHEN h.group_size = 1 THEN false
                WHEN h.group_size IS NOT NULL AND i.ranks_seen = h.group_size AND i.hosts_known = i.ranks_seen
                     AND i.hosts_distinct = 1 THEN false
           END AS crosses_nodes,
           collective_moved_bytes(h.op, h.bytes, h.group_size) AS buffer_bytes,
           CASE WHEN h.op = 'all_reduce' THEN 2.0 * (h.group_size - 1) / h.group_size
                WHEN h.op IN ('all_gather', 'reduce_scatter', 'all_to_all') THEN 1.0 * (h.group_size - 1) / h.group_size
                WHEN h.op IN ('broadcast', 'reduce', 'send', 'recv', 'send_recv') THEN 1.0
           END AS bus_factor
    FROM hosted AS h JOIN instances AS i USING (step, process_group, op, op_index)
)
SELECT
    rank,                                   -- global rank
    step,                                   -- ProfilerStep N
    ts_ns,                                  -- start on this rank, ns (rank clock)
    op,                                     -- all_reduce, all_gather, reduce_scatter, broadcast, ... (as in collectives)
    op_index,                               -- 0-based order of this op within the step and process group (the instance key with step, process_group, op)
    process_group,                          -- process group name (args."Process Group Name", 'default' when absent)
    group_size,                             -- ranks in the process group (args."Group size" of the NCCL kernel or record_param_comms); NULL when the trace does not say
    buffer_bytes AS bytes,                  -- the buffer nccl-tests sizes by: the rank's input, times the ranks for all_gather; NULL when unknown
    dur_ns,                                 -- time inside the collective on this rank (transfer plus waiting), ns
    wait_free_ns,                           -- the fastest loaded rank's duration of the same instance: the transfer without waiting, ns
    ranks_seen,                             -- loaded ranks that ran this instance
    CASE WHEN wait_free_ns > 0 THEN buffer_bytes / wait_free_ns END AS algbw_gb_per_s,  -- algorithm bandwidth: bytes / wait_free_ns, GB/s
    CASE WHEN wait_free_ns > 0 THEN buffer_bytes / wait_free_ns * bus_factor END AS busbw_gb_per_s,  -- bus bandwidth: algbw x the op's nccl-tests factor, GB/s (comparable with the link's speed)
    host_name,                              -- this rank's host (ranks.host_name)
    crosses_nodes,                          -- the loaded ranks of this instance sit on two or more hosts (true), the whole group on one (false); NULL when unknown
    source                                  -- nccl_kernel | gloo_annotation | record_param_comms
FROM rated
ORDER BY step, process_group, op, op_index, rank;
