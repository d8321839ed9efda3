-- Allocated memory at the end of each step on the reported ranks.
SELECT rank, step, device_kind, arg_max(total_allocated_bytes, ts_ns) AS allocated_bytes,
       max(total_allocated_bytes) AS peak_allocated_bytes
FROM memory
WHERE list_contains($ranks, rank) AND list_contains($steps, step) AND device_kind = $device_kind
GROUP BY rank, step, device_kind
ORDER BY rank, step
LIMIT 50;
