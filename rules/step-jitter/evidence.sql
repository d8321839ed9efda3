-- Each analysed step's duration and, on the rank that made it long (the longest own time: the step minus its wait in collectives, so never a rank that only waited), its phases; slowest steps first.
SELECT a.step, round(a.max_dur_ns / 1e6, 3) AS job_step_ms, round(a.median_dur_ns / 1e6, 3) AS median_rank_ms,
       p.rank AS slowest_rank, round(p.own_ns / 1e6, 3) AS own_ms,
       round(p.data_wait_ns / 1e6, 3) AS data_wait_ms, round(p.forward_ns / 1e6, 3) AS forward_ms,
       round(p.backward_ns / 1e6, 3) AS backward_ms, round(p.optimizer_ns / 1e6, 3) AS optimizer_ms,
       round(p.comm_exposed_ns / 1e6, 3) AS comm_exposed_ms, round(p.other_ns / 1e6, 3) AS other_ms
FROM aligned_steps AS a
JOIN (SELECT sp.*, w.own_ns, row_number() OVER (PARTITION BY sp.step ORDER BY w.own_ns DESC, sp.rank) AS place
      FROM step_phases AS sp JOIN step_waits AS w USING (rank, step)) AS p ON p.step = a.step AND p.place = 1
WHERE list_contains($steps, a.step) OR a.step = $worst_step
ORDER BY a.max_dur_ns DESC, a.step
LIMIT 20;
