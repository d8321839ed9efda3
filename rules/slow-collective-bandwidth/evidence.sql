-- The group's large NCCL collectives, slowest bus bandwidth first.
SELECT b.step, b.op, b.op_index, b.rank, b.host_name, b.bytes, round(b.wait_free_ns / 1e6, 3) AS wait_free_ms,
       round(b.dur_ns / 1e6, 3) AS dur_ms, round(b.busbw_gb_per_s, 2) AS busbw_gb_per_s, b.crosses_nodes
FROM collective_bandwidth AS b
WHERE b.process_group = $process_group AND list_contains($steps, b.step) AND b.source = 'nccl_kernel'
  AND b.bytes >= $min_bytes AND b.busbw_gb_per_s IS NOT NULL
ORDER BY b.busbw_gb_per_s, b.step, b.op, b.op_index, b.rank
LIMIT 30;
