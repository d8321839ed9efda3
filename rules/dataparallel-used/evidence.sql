-- DataParallel's host work in the flagged rank's steps: its forward annotation and its backward autograd functions.
SELECT rank, step, name, tid, round((ts_ns - (SELECT s.ts_ns FROM steps AS s WHERE s.rank = e.rank AND s.step = e.step)) / 1e6, 3)
           AS start_in_step_ms,
       round(dur_ns / 1e6, 3) AS dur_ms
FROM (
    SELECT rank, step, name, tid, ts_ns, dur_ns FROM annotations
    WHERE name = 'DataParallel.forward' AND NOT on_gpu
    UNION ALL
    SELECT rank, step, name, tid, ts_ns, dur_ns FROM cpu_ops
    WHERE name IN ('autograd::engine::evaluate_function: BroadcastBackward',
                   'autograd::engine::evaluate_function: GatherBackward',
                   'autograd::engine::evaluate_function: ScatterBackward')
) AS e
WHERE rank = $rank AND list_contains($steps, step)
ORDER BY step, ts_ns, tid, name, dur_ns
LIMIT 50;
