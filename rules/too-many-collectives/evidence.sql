-- The small collectives of the first flagged rank's steps, with their transfer time and achieved bandwidth.
SELECT rank, step, op, op_index, bytes, round(dur_ns / 1e6, 3) AS dur_ms,
       round(min_dur_ns / 1e6, 3) AS transfer_ms,
       round(1e3 * bytes / nullif(min_dur_ns, 0), 1) AS mb_per_s
FROM collective_arrivals
WHERE rank = $ranks[1] AND list_contains($steps, step) AND bytes < $max_collective_bytes
ORDER BY step, ts_ns
LIMIT 50;
