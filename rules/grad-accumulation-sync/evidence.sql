-- The gradient all-reduces of the flagged steps, by micro-batch: every round but the last is extra.
WITH passes AS (
    SELECT rank, step, ts_ns, row_number() OVER (PARTITION BY rank, step ORDER BY ts_ns) AS micro_batch
    FROM annotations
    WHERE name = 'DistributedDataParallel.forward' AND NOT on_gpu AND list_contains($steps, step)
),
calls AS (
    SELECT rank, step, tid, ts_ns, row_number() OVER (PARTITION BY rank, step ORDER BY ts_ns) AS k
    FROM cpu_ops WHERE name = 'c10d::allreduce_' AND list_contains($steps, step) AND list_contains($ranks, rank)
),
grad_calls AS (
    SELECT DISTINCT c.rank, c.step, c.ts_ns, c.k
    FROM calls AS c JOIN cpu_ops AS b
        ON b.rank = c.rank AND b.tid = c.tid AND c.ts_ns >= b.ts_ns AND c.ts_ns < b.end_ns
    WHERE b.name LIKE 'autograd::engine::evaluate_function:%'
),
colls AS (
    SELECT rank, step, bytes, dur_ns, row_number() OVER (PARTITION BY rank, step ORDER BY ts_ns) AS k
    FROM collectives WHERE op = 'all_reduce' AND list_contains($steps, step)
)
SELECT g.rank, g.step, p.micro_batch, count(*) AS all_reduces, sum(c.bytes) AS bytes,
       round(sum(c.dur_ns) / 1e6, 3) AS all_reduce_ms,
       p.micro_batch < max(p.micro_batch) OVER (PARTITION BY g.rank, g.step) AS extra
FROM grad_calls AS g
ASOF JOIN passes AS p ON p.rank = g.rank AND p.step = g.step AND g.ts_ns >= p.ts_ns
LEFT JOIN colls AS c ON c.rank = g.rank AND c.step = g.step AND c.k = g.k
GROUP BY g.rank, g.step, p.micro_batch
ORDER BY g.rank, g.step, p.micro_batch
LIMIT 50;
