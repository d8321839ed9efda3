-- The DataLoader waits of the reported steps, longest first.
SELECT rank, step, name, round((ts_ns - (SELECT s.ts_ns FROM steps AS s WHERE s.rank = e.rank AND s.step = e.step)) / 1e6, 3) AS start_in_step_ms,
       round(dur_ns / 1e6, 3) AS dur_ms
FROM (
    SELECT rank, step, name, ts_ns, dur_ns FROM annotations
    WHERE NOT on_gpu AND (name LIKE 'enumerate(DataLoader)#%' OR name LIKE 'enumerate(DataPipe)#%')
    UNION ALL
    SELECT rank, step, name, ts_ns, dur_ns FROM cpu_ops
    WHERE name LIKE 'enumerate(DataLoader)#%' OR name LIKE 'enumerate(DataPipe)#%'
) AS e
WHERE list_contains($ranks, rank) AND list_contains($steps, step)
ORDER BY dur_ns DESC, rank, ts_ns  -- ties (us-resolution traces) by rank and time: the same rows on every run
LIMIT 20;
