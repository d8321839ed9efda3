-- Each rank's own step time (the step minus its wait in collectives) and phases on the steps where the rank held the others back.
SELECT
    p.step,
    p.rank,
    round(p.dur_ns / 1e6, 3) AS step_ms,
    round((p.dur_ns - p.comm_exposed_ns) / 1e6, 3) AS own_ms,
    round(p.comm_exposed_ns / 1e6, 3) AS waited_ms,
    round((p.data_wait_ns + p.h2d_ns) / 1e6, 3) AS input_ms,
    round((p.forward_ns + p.backward_ns + p.optimizer_ns) / 1e6, 3) AS compute_ms,
    round(p.other_ns / 1e6, 3) AS host_ms
FROM step_phases AS p
WHERE list_contains($steps, p.step)
ORDER BY p.step, p.rank
LIMIT 50;
