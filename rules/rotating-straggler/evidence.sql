-- Each rank's step time outside communication (the step minus all its exposed communication, step_waits.non_comm_ns) and phases on the held steps.
SELECT
    p.step,
    p.rank,
    round(p.dur_ns / 1e6, 3) AS step_ms,
    round(w.non_comm_ns / 1e6, 3) AS non_comm_ms,
    round(p.comm_exposed_ns / 1e6, 3) AS waited_ms,
    round((p.data_wait_ns + p.h2d_ns) / 1e6, 3) AS input_ms,
    round((p.forward_ns + p.backward_ns + p.optimizer_ns) / 1e6, 3) AS compute_ms,
    round(p.other_ns / 1e6, 3) AS host_ms
FROM step_phases AS p JOIN step_waits AS w USING (rank, step)
WHERE list_contains($steps, p.step)
ORDER BY p.step, p.rank
LIMIT 50;
