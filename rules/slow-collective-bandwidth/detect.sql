-- One row per process group whose large NCCL collectives' median bus bandwidth is under min_link_pct of the link's.
WITH sized AS (
    SELECT b.rank, b.step, b.op, b.process_group, b.bytes, b.wait_free_ns, b.busbw_gb_per_s, b.host_name,
           b.crosses_nodes,
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
step_time AS (
    SELECT avg(s.dur_ns) AS dur_ns FROM steps AS s JOIN aligned_steps USING (step)
)
SELECT
    g.ranks,
    g.steps,
    g.lost_ns / g.n_ranks / g.n_steps / 1e6 AS ms_per_step,
    100.0 * g.lost_ns / g.n_ranks / g.n_steps / t.dur_ns AS pct_of_step,
    g.process_group,
    CASE WHEN g.process_group = 'default' THEN 'the default group''s' ELSE 'process group ' || g.process_group || '''s' END AS process_group_text,
    array_to_string(g.ops, ' / ') AS op_text,
    g.median_bytes / 1048576.0 AS median_mib,
    g.busbw_gb_per_s,
    g.link_gb_per_s,
    100.0 * g.busbw_gb_per_s / g.link_gb_per_s AS link_pct,
    g.link_text,
    array_to_string(g.ranks, ',') AS ranks_text,
    coalesce(nullif(array_to_string(g.hosts, ', '), ''), 'unknown hosts') AS hosts_text
FROM per_group AS g CROSS JOIN step_time AS t
WHERE 100.0 * g.busbw_gb_per_s / g.link_gb_per_s < $min_link_pct
ORDER BY ms_per_step DESC, g.process_group;
