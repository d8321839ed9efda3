-- One row per process group where one rank's all_to_all volume is far above the group's mean on most steps: uneven expert routing (MoE).
WITH loads AS (    -- what each rank receives and sends in each all_to_all
    SELECT v.rank, v.step, v.process_group, v.call_index AS seq, v.group_ranks, v.send_split_bytes, v.recv_bytes, v.send_bytes,
           greatest(coalesce(v.recv_bytes, 0), coalesce(v.send_bytes, 0)) AS load_bytes
    FROM all_to_all_volumes AS v
    WHERE v.step IN (SELECT step FROM aligned_steps) AND (v.recv_bytes IS NOT NULL OR v.send_bytes IS NOT NULL)
),
sides AS (         -- each all_to_all (the same seq on every rank of its group), on the side it is uneven: a hot expert receives in the dispatch, sends back in the combine
    SELECT step, process_group, seq, count(*) AS ranks_n, true AS receives,
           avg(recv_bytes) AS mean_bytes, max(recv_bytes) AS max_bytes, first(rank ORDER BY recv_bytes DESC, rank) AS hot_rank
    FROM loads WHERE recv_bytes IS NOT NULL GROUP BY step, process_group, seq
    HAVING count(*) = count(send_bytes) AND sum(recv_bytes) = sum(send_bytes)
    UNION ALL
    SELECT step, process_group, seq, count(*), false,
           avg(send_bytes), max(send_bytes), first(rank ORDER BY send_bytes DESC, rank)
    FROM loads WHERE send_bytes IS NOT NULL GROUP BY step, process_group, seq
    HAVING count(recv_bytes) = 0 OR (count(*) = count(recv_bytes) AND sum(recv_bytes) = sum(send_bytes))
),
instances AS (     -- the more uneven side of each all_to_all (receiving first on a tie)
    SELECT step, process_group, seq, ranks_n, mean_bytes, max_bytes, hot_rank, receives AS hot_receives,
           row_number() OVER (PARTITION BY step, process_group, seq ORDER BY max_bytes / mean_bytes DESC, receives DESC) AS pick
    FROM sides WHERE ranks_n >= 2 AND mean_bytes > 0
),
uneven AS (
    SELECT *, max_bytes / mean_bytes AS ratio FROM instances WHERE pick = 1 AND max_bytes >= $min_imbalance_ratio * mean_bytes
),
per_hot AS (       -- per group and hot rank: on how many steps it is the hot one
    SELECT process_group, hot_rank, list(DISTINCT step ORDER BY step) AS steps, count(DISTINCT step) AS steps_n,
           median(ratio) AS ratio, max(ratio) AS max_ratio, count(*) AS uneven_n
    FROM uneven GROUP BY process_group, hot_rank
),
sent_to_hot AS (   -- in the all_to_alls where the hot rank receives the most (the dispatch), the share of what the other ranks send (split sizes) that goes to it
    SELECT u.process_group, u.hot_rank,
           100.0 * sum(l.send_split_bytes[list_position(l.group_ranks, u.hot_rank)])
                 / nullif(sum(list_sum(l.send_split_bytes)), 0) AS hot_share_pct
    FROM uneven AS u JOIN loads AS l USING (step, process_group, seq)
    WHERE u.hot_receives AND l.rank <> u.hot_rank AND l.send_split_bytes IS NOT NULL AND l.group_ranks IS NOT NULL
    GROUP BY u.process_group, u.hot_rank
),
per_rank AS (      -- bytes each rank of the group moves per step in all_to_alls (the most uneven group)
    SELECT process_group, rank, sum(load_bytes) / count(DISTINCT step) AS bytes_per_step FROM loads GROUP BY process_group, rank
),
aligned AS (SELECT count(*) AS n FROM aligned_steps)
SELECT
    [h.hot_rank] AS ranks,
    h.steps,
    NULL::DOUBLE AS ms_per_step,
    NULL::DOUBLE AS pct_of_step,
    h.hot_rank AS rank,
    h.process_group,
    coalesce(pg.dimension, 'unknown') AS dimension,
    rank_ranges((SELECT list(r.rank) FROM per_rank AS r WHERE r.process_group = h.process_group AND r.rank <> h.hot_rank)) AS others,
    rank_phrase((SELECT list(r.rank) FROM per_rank AS r WHERE r.process_group = h.process_group AND r.rank <> h.hot_rank)) AS others_phrase,
    h.ratio AS imbalance_ratio,
    h.max_ratio AS max_imbalance_ratio,
    h.uneven_n AS uneven_all_to_alls_count,
    h.steps_n AS uneven_steps_count,
    a.n AS aligned_steps_count,
    s.hot_share_pct,
    100.0 / (SELECT count(*) FROM per_rank AS r WHERE r.process_group = h.process_group) AS even_share_pct,
    (SELECT r.bytes_per_step FROM per_rank AS r WHERE r.process_group = h.process_group AND r.rank = h.hot_rank)::BIGINT AS hot_bytes_per_step,
    (SELECT median(r.bytes_per_step) FROM per_rank AS r WHERE r.process_group = h.process_group AND r.rank <> h.hot_rank)::BIGINT AS others_bytes_per_step,
    round((SELECT r.bytes_per_step FROM per_rank AS r WHERE r.process_group = h.process_group AND r.rank = h.hot_rank) / 1048576.0, 2) AS hot_mib_per_step,
    round((SELECT median(r.bytes_per_step) FROM per_rank AS r WHERE r.process_group = h.process_group AND r.rank <> h.hot_rank) / 1048576.0, 2) AS others_mib_per_step,
    CASE WHEN s.hot_share_pct IS NOT NULL THEN 'split_sizes' ELSE 'totals' END AS volume_source,
    CASE WHEN s.hot_share_pct IS NOT NULL
         THEN '; the other ranks send it ' || round(s.hot_share_pct)::INTEGER || '% of their tokens (even: '
              || round(100.0 / (SELECT count(*) FROM per_rank AS r WHERE r.process_group = h.process_group))::INTEGER || '%)'
         ELSE '' END AS share_text,
    'routing' AS cause
FROM per_hot AS h
CROSS JOIN aligned AS a
LEFT JOIN sent_to_hot AS s USING (process_group, hot_rank)
LEFT JOIN process_groups AS pg USING (process_group)
WHERE h.steps_n >= $min_steps_pct / 100.0 * a.n
ORDER BY h.process_group, h.hot_rank;
