-- Every member's record of the collective where the group desynchronized.
SELECT e.rank, e.pg_name, e.pg_desc, e.collective_seq_id, e.op, e.input_sizes, e.input_dtypes,
       e.output_sizes, e.frame_file, e.frame_line, e.time_created_ns
FROM fr_entries AS e
WHERE e.pg_name = $pg_name AND e.collective_seq_id = $collective_seq_id AND NOT e.is_p2p
ORDER BY e.rank
LIMIT 50;
