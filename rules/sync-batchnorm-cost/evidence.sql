-- The collectives of the flagged steps on the first flagged rank, with the host context they were called from.
WITH calls AS (
    SELECT rank, step, tid, ts_ns, collective_op(regexp_replace(name, '^c10d::', '')) AS op,
           row_number() OVER (PARTITION BY rank, step, collective_op(regexp_replace(name, '^c10d::', ''))
                              ORDER BY ts_ns) AS k
    FROM cpu_ops WHERE name LIKE 'c10d::%' AND rank = $ranks[1] AND list_contains($steps, step)
),
context AS (
    SELECT c.*,
           (SELECT max(b.name) FROM cpu_ops AS b
            WHERE b.rank = c.rank AND b.tid = c.tid AND c.ts_ns >= b.ts_ns AND c.ts_ns < b.end_ns
              AND b.name LIKE 'autograd::engine::evaluate_function:%') AS backward_node,
           EXISTS (SELECT 1 FROM annotations AS a
                   WHERE a.rank = c.rank AND a.tid = c.tid AND c.ts_ns >= a.ts_ns AND c.ts_ns < a.end_ns
                     AND a.name IN ('DistributedDataParallel.forward', 'DataParallel.forward')) AS in_forward
    FROM calls AS c
),
colls AS (
    SELECT rank, step, op, bytes, dur_ns, row_number() OVER (PARTITION BY rank, step, op ORDER BY ts_ns) AS k
    FROM collectives WHERE rank = $ranks[1] AND list_contains($steps, step)
)
SELECT x.rank, x.step, x.op, x.in_forward, x.backward_node, c.bytes, round(c.dur_ns / 1e6, 3) AS dur_ms
FROM context AS x JOIN colls AS c USING (rank, step, op, k)
ORDER BY x.step, x.ts_ns, x.tid, x.op, x.k
LIMIT 50;
