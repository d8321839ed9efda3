-- Allocator events from profile_memory=True ('[memory]' instants): one row per allocation or free.
CREATE OR REPLACE TABLE memory AS
SELECT
    e.rank,                                 -- global rank
    CASE WHEN e.ts_ns < s.end_ns THEN s.step END AS step,  -- step holding the event
    e.ts_ns,                                -- time, ns
    CASE e.device_type WHEN 0 THEN 'cpu' WHEN 1 THEN 'cuda' ELSE coalesce(e.device_type::VARCHAR, 'unknown') END AS device_kind,  -- cpu | cuda
    e.device_id,                            -- device index (-1 for CPU)
    e.bytes AS alloc_bytes,                 -- bytes allocated (> 0) or freed (< 0)
    e.total_allocated_bytes,                -- allocator's total allocated after the event
    e.total_reserved_bytes                  -- allocator's total reserved after the event
FROM raw_events AS e
ASOF LEFT JOIN steps AS s ON e.rank = s.rank AND e.ts_ns >= s.ts_ns
WHERE e.name = '[memory]' AND e.ts_ns IS NOT NULL;
