-- Per (rank, step): the batch the step trained on, from input shapes (record_shapes=True), summed over its DDP forward passes (micro-batches).
CREATE OR REPLACE TABLE step_batches AS
WITH forwards AS (   -- one row per DDP forward pass (micro-batch) on the host
    SELECT rank, step, tid, ts_ns, end_ns,
           row_number() OVER (PARTITION BY rank, step ORDER BY ts_ns) AS pass
    FROM annotations
    WHERE name = 'DistributedDataParallel.forward' AND NOT on_gpu AND step IS NOT NULL
),
lookups AS (         -- embedding lookups with integer ids [batch, seq_len]
    SELECT rank, step, ts_ns, TRY_CAST(json_extract(TRY_CAST(input_dims AS JSON), '$[1]') AS BIGINT[]) AS ids
    FROM cpu_ops
    WHERE name = 'aten::embedding' AND step IS NOT NULL
      AND json_extract_string(TRY_CAST(input_type AS JSON), '$[1]') IN ('long int', 'long', 'int')
),
pass_ids AS (        -- the largest lookup of each forward pass (several tables may read the same ids)
    SELECT l.rank, l.step, coalesce(f.pass, 0) AS pass, first(l.ids ORDER BY list_product(l.ids) DESC, l.ids) AS ids
    FROM lookups AS l
    LEFT JOIN forwards AS f
        ON f.rank = l.rank AND f.step = l.step AND l.ts_ns >= f.ts_ns AND l.ts_ns < f.end_ns
    WHERE len(l.ids) = 2
    GROUP BY ALL
),
pass_inputs AS (     -- else: the leading dim of the first shaped input inside each forward pass
    SELECT f.rank, f.step, f.pass,
           first(TRY_CAST(json_extract(TRY_CAST(o.input_dims AS JSON), '$[0]') AS BIGINT[])[1] ORDER BY o.ts_ns, o.end_ns DESC, o.name) AS samples
    FROM forwards AS f
    JOIN cpu_ops AS o ON o.rank = f.rank AND o.tid = f.tid AND o.ts_ns >= f.ts_ns AND o.ts_ns < f.end_ns
    WHERE len(TRY_CAST(json_extract(TRY_CAST(o.input_dims AS JSON), '$[0]') AS BIGINT[])) >= 1
    GROUP BY ALL
),
by_ids AS (
    SELECT rank, step, sum(ids[1]) AS samples, sum(ids[1] * ids[2]) AS tokens, max(ids[2]) AS max_seq_len
    FROM pass_ids GROUP BY ALL
),
by_inputs AS (SELECT rank, step, sum(samples) AS samples FROM pass_inputs GROUP BY ALL),
collated AS (        -- padding visible: per-sample int64 id copies into the padded batch inside the DataLoader
    SELECT d.rank, d.step, count(*) AS samples,
           sum(TRY_CAST(json_extract(TRY_CAST(o.input_dims AS JSON), '$[0][0]') AS BIGINT)) AS tokens
    FROM annotations AS d
    JOIN cpu_ops AS o ON o.rank = d.rank AND o.tid = d.tid AND o.ts_ns >= d.ts_ns AND o.ts_ns < d.end_ns
    WHERE d.name LIKE 'enumerate(DataLoader)#%' AND NOT d.on_gpu AND o.name = 'aten::copy_'
      AND json_extract_string(TRY_CAST(o.input_type AS JSON), '$[0]') = 'long int'
      AND json_array_length(json_extract(TRY_CAST(o.input_dims AS JSON), '$[0]')) = 1
    GROUP BY d.rank, d.step
)
SELECT
    s.rank,                                 -- global rank
    s.step,                                 -- ProfilerStep N
    coalesce(t.samples, i.samples)::BIGINT AS samples,   -- samples in the step (embedding ids' batch dim, else the first input's leading dim), NULL when not visible
    t.tokens::BIGINT AS tokens,             -- token ids in the step including padding (batch x seq_len of the embedding lookups), NULL without embeddings
    CASE WHEN c.samples = t.samples THEN c.tokens END::BIGINT AS real_tokens,  -- tokens without padding, when the DataLoader's per-sample copies show them
    t.max_seq_len::BIGINT AS max_seq_len    -- longest padded sequence length of the step's lookups
FROM steps AS s
LEFT JOIN by_ids AS t USING (rank, step)
LEFT JOIN by_inputs AS i USING (rank, step)
LEFT JOIN collated AS c USING (rank, step)
ORDER BY s.rank, s.step;
