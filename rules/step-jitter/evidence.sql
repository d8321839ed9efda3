-- Each analysed step's duration on every rank and its phases on the slowest rank, slowest steps first.
SELECT a.step, round(a.max_dur_ns / 1e6, 3) AS job_step_ms, round(a.median_dur_ns / 1e6, 3) AS median_rank_ms,
       p.rank AS slowest_rank, round(p.data_wait_ns / 1e6, 3) AS data_wait_ms, round(p.forward_ns / 1e6, 3) AS forward_ms,
       round(p.backward_ns / 1e6, 3) AS backward_ms, round(p.optimizer_ns / 1e6, 3) AS optimizer_ms,
       round(p.comm_exposed_ns / 1e6, 3) AS comm_exposed_ms, round(p.other_ns / 1e6, 3) AS other_ms
FROM aligned_steps AS a
JOIN step_phases AS p ON p.step = a.step AND p.dur_ns = a.max_dur_ns
WHERE list_contains($steps, a.step) OR a.step = $worst_step
ORDER BY a.max_dur_ns DESC
LIMIT 20;
