-- FSDP's collectives of the reported steps with the time each held the rank up, most exposed first.
SELECT rank, step, pass, op, process_group, dimension, bytes,
       round(exposed_ns / 1e6, 3) AS exposed_ms, round(wait_exposed_ns / 1e6, 3) AS waiting_for_last_rank_ms,
       round(comm_exposed_ns / 1e6, 3) AS comm_exposed_ms
FROM collective_exposure
WHERE list_contains($ranks, rank) AND list_contains($steps, step)
  AND (op IN ('all_gather', 'reduce_scatter') OR dimension = 'fsdp')
ORDER BY comm_exposed_ns DESC, step, rank, process_group, seq  -- ties by the collective: the same rows on every run
LIMIT 20;
