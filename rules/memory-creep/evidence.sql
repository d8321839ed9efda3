-- Allocated memory at the end of each step on the reported ranks. collective_unfreed_bytes: blocks that
-- collective calls allocated up to then and the trace never frees (left out of the growth).
WITH end_of_step AS (
    SELECT rank, step, device_kind, first(total_allocated_bytes ORDER BY ts_ns DESC, total_allocated_bytes DESC) AS allocated_bytes,
           max(total_allocated_bytes) AS peak_allocated_bytes, max(ts_ns) AS at_ns
    FROM memory
    WHERE list_contains($ranks, rank) AND list_contains($steps, step) AND device_kind = $device_kind
    GROUP BY rank, step, device_kind
)
SELECT e.rank, e.step, e.device_kind, e.allocated_bytes, e.peak_allocated_bytes,
       (SELECT coalesce(sum(u.alloc_bytes), 0) FROM memory AS u
        WHERE u.rank = e.rank AND u.device_kind = e.device_kind AND u.in_collective AND u.alloc_bytes > 0
          AND NOT u.freed_in_trace AND u.ts_ns <= e.at_ns) AS collective_unfreed_bytes
FROM end_of_step AS e
ORDER BY e.rank, e.step
LIMIT 50;
