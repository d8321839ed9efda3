-- One row per process group whose members ran different collectives at the same collective_seq_id (a desync): the first such collective of the group.
WITH names AS (
    SELECT pg_name,
           CASE WHEN pg_desc = 'default_pg' OR (pg_name = '0' AND pg_desc IS NULL) THEN 'the default group'
                WHEN pg_desc IS NULL OR pg_desc IN ('', 'undefined') THEN 'group ' || pg_name
                ELSE 'group ' || pg_name || ' (' || pg_desc || ')' END AS group_text
    FROM fr_groups
),
calls AS (   -- what each rank ran; sizes are compared where every member passes the same shapes
    SELECT e.rank, e.pg_name, e.collective_seq_id AS seq, e.op,
           e.op || ' ' || coalesce(e.input_dtypes, '') || CASE
               WHEN e.op LIKE '%all_to_all%' OR e.op LIKE '%alltoall%' OR e.op LIKE '%scatter%' OR e.op LIKE '%gather%'
                   THEN '' ELSE ' ' || coalesce(e.input_sizes, '') END AS signature,
           e.op || ' ' || coalesce(e.input_sizes, '') || ' ' || coalesce(e.input_dtypes, '') AS shown,
           regexp_extract(e.frame_file, '[^/\\]*$') || ':' || e.frame_line AS code_line
    FROM fr_entries AS e
    WHERE NOT e.is_p2p AND e.collective_seq_id > 0
),
kinds AS (
    SELECT pg_name, seq, signature, list(rank ORDER BY rank) AS ranks, count(*) AS n, min(rank) AS first_rank,
           mode(shown ORDER BY shown) AS shown, mode(code_line ORDER BY code_line) AS code_line
    FROM calls GROUP BY pg_name, seq, signature
),
ranked AS (
    SELECT *, row_number() OVER (PARTITION BY pg_name, seq ORDER BY n DESC, first_rank) AS place,
           count(*) OVER (PARTITION BY pg_name, seq) AS variants
    FROM kinds
),
first_desync AS (
    SELECT pg_name, min(seq) AS seq FROM ranked WHERE variants > 1 GROUP BY pg_name
)
SELECT
    flatten(list(r.ranks ORDER BY r.first_rank) FILTER (WHERE r.place > 1)) AS ranks,
    []::BIGINT[] AS steps,
    NULL::DOUBLE AS ms_per_step,
    NULL::DOUBLE AS pct_of_step,
    r.pg_name,
    coalesce(any_value(n.group_text), 'group ' || r.pg_name) AS group_text,
    r.seq AS collective_seq_id,
    CASE WHEN len(flatten(list(r.ranks) FILTER (WHERE r.place > 1))) = 1 THEN 'rank ' ELSE 'ranks ' END
        || array_to_string(list_sort(flatten(list(r.ranks) FILTER (WHERE r.place > 1))), ', ') AS odd_text,
    string_agg(r.shown || coalesce(' (' || r.code_line || ')', ''), ', ' ORDER BY r.place) FILTER (WHERE r.place > 1) AS odd_calls,
    any_value(r.ranks) FILTER (WHERE r.place = 1) AS majority_ranks,
    CASE WHEN len(any_value(r.ranks) FILTER (WHERE r.place = 1)) = 1 THEN 'rank ' ELSE 'ranks ' END
        || array_to_string(any_value(r.ranks) FILTER (WHERE r.place = 1), ', ') AS majority_text,
    any_value(r.shown || coalesce(' (' || r.code_line || ')', '')) FILTER (WHERE r.place = 1) AS majority_call,
    list({'ranks': r.ranks, 'call': r.shown, 'code_line': r.code_line} ORDER BY r.place) AS variants
FROM ranked AS r
JOIN first_desync AS d USING (pg_name, seq)
LEFT JOIN names AS n USING (pg_name)
GROUP BY r.pg_name, r.seq
ORDER BY r.pg_name, r.seq;
