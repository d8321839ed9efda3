-- Every rank's step-relative arrival at the collective where the late rank was latest, in the reported steps.
SELECT
    a.step,
    a.rank,
    a.op,
    a.op_index,
    round(a.arrival_rel_ns / 1e6, 3) AS arrival_ms,
    round(a.late_ns / 1e6, 3) AS late_ms,
    round(a.wait_for_last_ns / 1e6, 3) AS waited_ms,
    round(a.dur_ns / 1e6, 3) AS inside_collective_ms
FROM collective_arrivals AS a
JOIN step_lateness AS l
    ON l.rank = $rank AND l.step = a.step AND l.process_group = a.process_group
    AND l.op = a.op AND l.op_index = a.op_index
WHERE list_contains($steps, a.step)
ORDER BY a.step, a.rank
LIMIT 50;
