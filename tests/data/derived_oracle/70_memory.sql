-- Allocator events from profile_memory=True ('[memory]' instants): one row per allocation or free.
CREATE OR REPLACE TABLE memory AS
WITH read AS (
    SELECT e.rank, e.ts_ns, e.tid, e.addr, e.device_type, e.device_id,
           -- args.Bytes; where the loader has none, the change of the allocator's Total Allocated
           -- since the previous event of the rank and device (the same number on every recorded trace)
           coalesce(e.bytes, e.total_allocated_bytes - lag(e.total_allocated_bytes)
                                 OVER (PARTITION BY e.rank, e.device_type, e.device_id ORDER BY e.ts_ns)) AS bytes,
           e.total_allocated_bytes, e.total_reserved_bytes
    FROM raw_events AS e
    WHERE e.name = '[memory]' AND e.ts_ns IS NOT NULL
),
events AS (
    SELECT *, lead(bytes) OVER (PARTITION BY rank, device_type, device_id, addr ORDER BY ts_ns) AS next_bytes_at_addr
    FROM read
),
-- host ranges that run a collective: c10d calls, record_param_comms, gloo/nccl annotations
collective_calls AS (
    SELECT rank, tid, ts_ns, end_ns FROM cpu_ops
    WHERE name LIKE 'c10d::%' OR name = 'record_param_comms'
    UNION ALL
    SELECT rank, tid, ts_ns, end_ns FROM annotations
    WHERE NOT on_gpu AND (name LIKE 'gloo:%' OR name LIKE 'nccl:%')
),
reach AS (   -- per thread, in start order: the latest end among the calls started so far
    SELECT rank, tid, ts_ns,
           max(end_ns) OVER (PARTITION BY rank, tid ORDER BY ts_ns RANGE UNBOUNDED PRECEDING) AS max_end_ns
    FROM collective_calls
),
in_call AS (   -- an event is inside a call when a call started at or before it has not ended yet
    SELECT DISTINCT e.rank, e.tid, e.ts_ns
    FROM events AS e ASOF JOIN reach AS c ON c.rank = e.rank AND c.tid = e.tid AND e.ts_ns >= c.ts_ns
    WHERE e.ts_ns <= c.max_end_ns
)
SELECT
    e.rank,                                 -- global rank
    CASE WHEN e.ts_ns < s.end_ns THEN s.step END AS step,  -- step holding the event
    e.ts_ns,                                -- time, ns
    CASE e.device_type WHEN 0 THEN 'cpu' WHEN 1 THEN 'cuda' ELSE coalesce(e.device_type::VARCHAR, 'unknown') END AS device_kind,  -- cpu | cuda
    e.device_id,                            -- device index (-1 for CPU)
    e.tid,                                  -- thread that allocated or freed
    e.addr,                                 -- block address as the trace writes it
    e.bytes AS alloc_bytes,                 -- bytes allocated (> 0) or freed (< 0)
    e.total_allocated_bytes,                -- allocator's total allocated after the event
    e.total_reserved_bytes,                 -- allocator's total reserved after the event
    i.rank IS NOT NULL AS in_collective,    -- the event happened inside a collective call on its thread (c10d op, record_param_comms, gloo:* / nccl:* annotation)
    CASE WHEN e.bytes > 0 THEN coalesce(e.next_bytes_at_addr < 0, false) END AS freed_in_trace  -- allocations: the trace frees the block (a free of its address follows before the address is handed out again); NULL for frees
FROM events AS e
LEFT JOIN in_call AS i ON i.rank = e.rank AND i.tid IS NOT DISTINCT FROM e.tid AND i.ts_ns = e.ts_ns
ASOF LEFT JOIN steps AS s ON e.rank = s.rank AND e.ts_ns >= s.ts_ns;
