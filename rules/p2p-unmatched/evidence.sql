-- The sends and receives between the two ranks in the group, as each side recorded them.
SELECT e.rank, e.pg_name, e.p2p_seq_id, e.op, e.p2p_src, e.p2p_dst, e.input_sizes, e.state,
       e.frame_file, e.frame_line, e.time_created_ns
FROM fr_entries AS e
WHERE e.is_p2p AND e.pg_name = $pg_name AND e.rank IN ($src_rank, $dst_rank)
ORDER BY e.rank, e.record_id
LIMIT 50;
