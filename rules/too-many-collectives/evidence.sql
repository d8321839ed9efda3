-- The small collectives of the first flagged rank's steps, with their size (an all-gather's is its output: the shard times the ranks), transfer time and achieved bandwidth.
SELECT rank, step, op, op_index, bytes, size_bytes, round(dur_ns / 1e6, 3) AS dur_ms,
       round(min_dur_ns / 1e6, 3) AS transfer_ms,
       round(1e3 * size_bytes / nullif(min_dur_ns, 0), 1) AS mb_per_s
FROM (SELECT a.*, CASE WHEN a.op = 'all_gather'
                       THEN a.bytes * coalesce(r.world_size, (SELECT count(*) FROM ranks)) ELSE a.bytes END AS size_bytes
      FROM collective_arrivals AS a LEFT JOIN ranks AS r USING (rank))
WHERE rank = $ranks[1] AND list_contains($steps, step) AND size_bytes < $max_collective_bytes
ORDER BY step, ts_ns, op, op_index, bytes
LIMIT 50;
