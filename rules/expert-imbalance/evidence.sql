-- The all_to_all volume per rank pair and step of the reported group: who sends how much to whom (split sizes where recorded).
WITH pairs AS (
    SELECT v.rank AS src_rank, unnest(v.group_ranks) AS dst_rank, unnest(v.send_split_bytes) AS bytes, v.step
    FROM all_to_all_volumes AS v
    WHERE v.process_group = $process_group AND list_contains($steps, v.step)
      AND v.send_split_bytes IS NOT NULL AND v.group_ranks IS NOT NULL
)
SELECT src_rank, dst_rank, sum(bytes) // count(DISTINCT step) AS bytes_per_step,
       round(100.0 * sum(bytes) / sum(sum(bytes)) OVER (PARTITION BY src_rank), 1) AS pct_of_src_sent
FROM pairs
GROUP BY src_rank, dst_rank
ORDER BY bytes_per_step DESC, src_rank, dst_rank
LIMIT 20;
