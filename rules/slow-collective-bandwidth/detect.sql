-- One row per process group whose large NCCL collectives are slow: a median bus bandwidth under min_link_pct of the link's (cause below_link), or under min_peer_pct of what other groups reach with the same op and size (cause slower_than_peers).
WITH sized AS (
    SELECT b.rank, b.step, b.op, b.process_group, b.bytes, b.wait_free_ns, b.busbw_gb_per_s, b.host_name,
           b.crosses_nodes, floor(log2(b.bytes))::INTEGER AS bucket,
           CASE WHEN b.crosses_nodes = false
                THEN CASE WHEN $intra_node_busbw_gb_per_s > 0 THEN $intra_node_busbw_gb_per_s
                          ELSE device_spec(r.device_name, 'intra_node_busbw_gb_per_s') END
                ELSE CASE WHEN $inter_node_busbw_gb_per_s > 0 THEN $inter_node_busbw_gb_per_s
                          ELSE device_spec(r.device_name, 'inter_node_busbw_gb_per_s') END
           END AS link_gb_per_s
    FROM collective_bandwidth AS b JOIN ranks AS r USING (rank) JOIN aligned_steps USING (step)
    WHERE b.source = 'nccl_kernel' AND b.bytes >= $min_bytes AND b.busbw_gb_per_s IS NOT NULL AND b.group_size >= 2
),
per_group AS (
    SELECT process_group,
           list(DISTINCT rank ORDER BY rank) AS ranks,
           list(DISTINCT step ORDER BY step) AS steps,
           count(DISTINCT rank) AS n_ranks, count(DISTINCT step) AS n_steps,
           list(DISTINCT op ORDER BY op) AS ops,
           list(DISTINCT host_name ORDER BY host_name) FILTER (WHERE host_name IS NOT NULL) AS hosts,
           median(busbw_gb_per_s) AS busbw_gb_per_s,
           median(bytes) AS median_bytes,
           min(link_gb_per_s) AS link_gb_per_s,
           CASE WHEN bool_and(crosses_nodes = false) THEN 'within one node'
                WHEN bool_or(crosses_nodes) THEN 'across nodes' ELSE 'across nodes (layout unknown)' END AS link_text,
           sum(greatest(wait_free_ns * (1 - busbw_gb_per_s / link_gb_per_s), 0)) AS lost_ns
    FROM sized WHERE link_gb_per_s > 0
    GROUP BY process_group
),
group_op AS (   -- each group's median per op and size bucket: groups are compared like for like
    SELECT process_group, op, bucket, median(busbw_gb_per_s) AS busbw_gb_per_s, sum(wait_free_ns) AS wait_free_ns
    FROM sized GROUP BY process_group, op, bucket
),
peers AS (      -- per group: its bandwidth against the median of the other groups on the same op and size
    SELECT g.process_group,
           sum(g.wait_free_ns * (1 - g.busbw_gb_per_s / p.peer_gb_per_s)) FILTER (WHERE g.busbw_gb_per_s < p.peer_gb_per_s) AS lost_ns,
           median(100.0 * g.busbw_gb_per_s / p.peer_gb_per_s) AS peer_pct,
           median(p.peer_gb_per_s) AS peer_gb_per_s,
           min(p.n_peers) AS n_peers
    FROM group_op AS g
    JOIN LATERAL (SELECT median(o.busbw_gb_per_s) AS peer_gb_per_s, count(*) AS n_peers FROM group_op AS o
                  WHERE o.op = g.op AND o.bucket = g.bucket AND o.process_group <> g.process_group) AS p ON true
    WHERE p.n_peers >= 2
    GROUP BY g.process_group
),
findings AS (
    SELECT g.*, 'below_link' AS cause, g.link_gb_per_s AS reference_gb_per_s,
           100.0 * g.busbw_gb_per_s / g.link_gb_per_s AS reference_pct,
           'the ' || round(g.link_gb_per_s)::BIGINT || ' GB/s expected ' || g.link_text AS reference_text
    FROM per_group AS g
    WHERE 100.0 * g.busbw_gb_per_s / g.link_gb_per_s < $min_link_pct
    UNION ALL
    SELECT g.* REPLACE (p.lost_ns AS lost_ns), 'slower_than_peers', p.peer_gb_per_s, p.peer_pct,
           'the ' || round(p.peer_gb_per_s, 1) || ' GB/s the other ' || p.n_peers || ' groups reach with the same op and size'
    FROM per_group AS g JOIN peers AS p USING (process_group)
    WHERE p.peer_pct < $min_peer_pct AND 100.0 * g.busbw_gb_per_s / g.link_gb_per_s >= $min_link_pct
),
step_time AS (
    SELECT avg(s.dur_ns) AS dur_ns FROM steps AS s JOIN aligned_steps USING (step)
)
SELECT
    f.ranks,
    f.steps,
    f.lost_ns / f.n_ranks / f.n_steps / 1e6 AS ms_per_step,
    100.0 * f.lost_ns / f.n_ranks / f.n_steps / t.dur_ns AS pct_of_step,
    f.cause,
    f.process_group,
    CASE WHEN f.process_group = 'default' THEN 'the default group''s' ELSE 'process group ' || f.process_group || '''s' END AS process_group_text,
    array_to_string(f.ops, ' / ') AS op_text,
    f.median_bytes / 1048576.0 AS median_mib,
    f.busbw_gb_per_s,
    f.link_gb_per_s,
    100.0 * f.busbw_gb_per_s / f.link_gb_per_s AS link_pct,
    f.link_text,
    f.reference_gb_per_s,
    f.reference_pct,
    f.reference_text,
    rank_ranges(f.ranks) AS ranks_text,
    rank_phrase(f.ranks) AS ranks_phrase,
    coalesce(nullif(array_to_string(f.hosts, ', '), ''), 'unknown hosts') AS hosts_text
FROM findings AS f CROSS JOIN step_time AS t
ORDER BY ms_per_step DESC, f.process_group, f.cause;
