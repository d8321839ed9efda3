-- The longest GPU idle gaps of the rank (DataLoader and communication waits excluded), with their cause.
SELECT g.step, g.device, g.cause, round((g.ts_ns - s.ts_ns) / 1e6, 3) AS start_in_step_ms, round(g.dur_ns / 1e6, 3) AS dur_ms,
       round((g.next_launch_ts_ns - g.ts_ns) / 1e6, 3) AS next_launch_after_idle_ms
FROM gpu_idle_gaps AS g JOIN steps AS s USING (rank, step)
WHERE g.rank = $rank AND list_contains($steps, g.step) AND g.dur_ns >= $min_gap_us * 1000 AND g.cause NOT IN ('data_wait', 'comm_wait')
ORDER BY g.dur_ns DESC, g.ts_ns, g.device  -- ties by time: the same rows on every run
LIMIT 20;
