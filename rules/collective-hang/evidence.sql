-- The collectives where each group stopped (fr_frontiers), with every member that recorded them, and the culprits' last recorded collectives.
SELECT e.rank, e.pg_name, e.pg_desc, e.collective_seq_id, e.op, e.input_sizes, e.input_dtypes,
       e.frame_file, e.frame_line, e.time_created_ns, 'at the frontier' AS why
FROM fr_entries AS e
JOIN fr_frontiers AS f ON f.pg_name = e.pg_name AND f.collective_seq_id = e.collective_seq_id
WHERE NOT e.is_p2p
UNION ALL
SELECT e.rank, e.pg_name, e.pg_desc, e.collective_seq_id, e.op, e.input_sizes, e.input_dtypes,
       e.frame_file, e.frame_line, e.time_created_ns, 'the culprit''s last collective' AS why
FROM fr_entries AS e
WHERE NOT e.is_p2p AND list_contains($ranks, e.rank)
  AND e.record_id = (SELECT max(x.record_id) FROM fr_entries AS x WHERE x.rank = e.rank AND NOT x.is_p2p)
ORDER BY why, pg_name, rank
LIMIT 50;
