-- Per held step, each rank's hold on it (step_holds): how much it held the step back and its excess in each phase group.
SELECT
    h.step,
    h.rank,
    round(h.held_ns / 1e6, 3) AS held_ms,
    round(h.input_excess_ns / 1e6, 3) AS input_excess_ms,
    round(h.compute_excess_ns / 1e6, 3) AS compute_excess_ms,
    round(h.host_excess_ns / 1e6, 3) AS host_excess_ms,
    round(h.idle_excess_ns / 1e6, 3) AS idle_excess_ms
FROM step_holds AS h
WHERE list_contains($steps, h.step)
ORDER BY h.step, h.place
LIMIT 50;
