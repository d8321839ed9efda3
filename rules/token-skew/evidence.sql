-- Tokens per (rank, aligned step) from the embedding ids [batch, seq_len], with the step's compute time and lateness.
WITH passes AS (      -- forward passes (micro-batches) of the DDP model
    SELECT rank, step, ts_ns, end_ns FROM annotations
    WHERE name = 'DistributedDataParallel.forward' AND NOT on_gpu AND step IS NOT NULL
),
lookups AS (          -- embedding lookups with integer ids
    SELECT rank, step, ts_ns, TRY_CAST(json_extract(input_dims, '$[1]') AS BIGINT[]) AS ids
    FROM cpu_ops
    WHERE name = 'aten::embedding' AND step IS NOT NULL
      AND json_extract_string(input_type, '$[1]') IN ('long int', 'long', 'int')
),
per_pass AS (         -- the largest [batch, seq_len] lookup of each pass (other tables read the same ids)
    SELECT l.rank, l.step, p.ts_ns AS pass_ts_ns, arg_max(l.ids, list_product(l.ids)) AS ids
    FROM lookups AS l
    LEFT JOIN passes AS p ON p.rank = l.rank AND p.step = l.step AND l.ts_ns >= p.ts_ns AND l.ts_ns < p.end_ns
    WHERE len(l.ids) = 2
    GROUP BY ALL
),
batches AS (
    SELECT rank, step, sum(ids[1]) AS samples, sum(ids[1] * ids[2]) AS padded_tokens, max(ids[2]) AS max_seq_len
    FROM per_pass GROUP BY rank, step
),
collated AS (         -- padding visible: per-sample int64 id copies into the padded batch inside the DataLoader
    SELECT d.rank, d.step, count(*) AS samples,
           sum(TRY_CAST(json_extract(o.input_dims, '$[0][0]') AS BIGINT)) AS tokens
    FROM annotations AS d
    JOIN cpu_ops AS o ON o.rank = d.rank AND o.tid = d.tid AND o.ts_ns >= d.ts_ns AND o.ts_ns < d.end_ns
    WHERE d.name LIKE 'enumerate(DataLoader)#%' AND NOT d.on_gpu AND o.name = 'aten::copy_'
      AND json_extract_string(o.input_type, '$[0]') = 'long int'
      AND json_array_length(json_extract(o.input_dims, '$[0]')) = 1
    GROUP BY d.rank, d.step
)
SELECT
    b.rank,
    b.step,
    b.samples,
    b.padded_tokens,
    CASE WHEN c.samples = b.samples THEN c.tokens END AS real_tokens,
    b.max_seq_len,
    (p.forward_ns + p.backward_ns + p.optimizer_ns) / 1e6 AS compute_ms,
    p.dur_ns / 1e6 AS step_ms,
    l.late_ns / 1e6 AS late_ms,
    l.op AS late_at_op
FROM batches AS b
JOIN aligned_steps AS a USING (step)
JOIN step_phases AS p USING (rank, step)
LEFT JOIN collated AS c USING (rank, step)
LEFT JOIN step_lateness AS l USING (rank, step)
ORDER BY b.step, b.rank;
