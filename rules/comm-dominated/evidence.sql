-- The collectives of the reported steps, largest and longest first: what is being communicated.
SELECT rank, step, op, process_group, bytes, round(dur_ns / 1e6, 3) AS dur_ms, source, name
FROM collectives
WHERE list_contains($ranks, rank) AND list_contains($steps, step)
ORDER BY bytes DESC NULLS LAST, dur_ns DESC, step, rank, ts_ns  -- ties by time: the same rows on every run
LIMIT 20;
