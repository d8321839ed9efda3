-- One row when the Flight Recorder dumps show a hang: some members of a group reached a collective that others never did (fr_frontiers).
WITH names AS (
    SELECT pg_name,
           CASE WHEN pg_desc = 'default_pg' OR (pg_name = '0' AND pg_desc IS NULL) THEN 'the default group'
                WHEN pg_desc IS NULL OR pg_desc IN ('', 'undefined') THEN 'group ' || pg_name
                ELSE 'group ' || pg_name || ' (' || pg_desc || ')' END AS group_text
    FROM fr_groups
),
f AS (
    SELECT fr.*, coalesce(n.group_text, 'group ' || fr.pg_name) AS group_text
    FROM fr_frontiers AS fr LEFT JOIN names AS n USING (pg_name)
),
first AS (SELECT * FROM f WHERE cause_order = 1),
culprits AS (   -- the ranks that never arrived; a cycle with no such rank names the first frontier's missing members
    SELECT DISTINCT unnest(absent_ranks) AS rank FROM f
    UNION
    SELECT unnest(missing_ranks) FROM first WHERE NOT EXISTS (SELECT 1 FROM f WHERE len(absent_ranks) > 0)
),
last_calls AS (  -- each culprit's last recorded collective and its line of code
    SELECT e.rank, max_by(e.op, e.record_id) AS op, max_by(e.collective_seq_id, e.record_id) AS seq,
           max_by(e.pg_name, e.record_id) AS pg_name,
           max_by(regexp_extract(e.frame_file, '[^/\\]*$') || ':' || e.frame_line, e.record_id) AS code_line,
           max_by(e.frame_file || ':' || e.frame_line, e.record_id) AS code_path
    FROM fr_entries AS e
    WHERE NOT e.is_p2p AND e.rank IN (SELECT rank FROM culprits)
    GROUP BY e.rank
),
last_texts AS (
    SELECT l.*, 'rank ' || l.rank || chr(39) || 's last collective was ' || l.op || ' #' || l.seq
                || CASE WHEN l.pg_name = (SELECT pg_name FROM first) THEN ''
                        ELSE ' of ' || coalesce(n.group_text, 'group ' || l.pg_name) END
                || coalesce(', called from ' || l.code_line, '') AS text
    FROM last_calls AS l LEFT JOIN names AS n USING (pg_name)
),
waiting AS (
    SELECT list(DISTINCT w ORDER BY w) AS ranks
    FROM (SELECT unnest(waiting_ranks) AS w FROM f)
    WHERE w NOT IN (SELECT rank FROM culprits)
),
downstream AS (
    SELECT (SELECT list(op || ' #' || collective_seq_id || ' of ' || group_text ORDER BY cause_order)
            FROM f WHERE cause_order > 1 AND len(waiting_ranks) > 0) AS texts,
           (SELECT list(DISTINCT w ORDER BY w)
            FROM (SELECT unnest(waiting_ranks) AS w FROM f WHERE cause_order > 1)
            WHERE w NOT IN (SELECT rank FROM culprits)) AS ranks
)
SELECT
    (SELECT list(rank ORDER BY rank) FROM culprits) AS ranks,
    []::BIGINT[] AS steps,
    NULL::DOUBLE AS ms_per_step,
    NULL::DOUBLE AS pct_of_step,
    CASE WHEN (SELECT count(*) FROM culprits) = 1 THEN 'rank ' ELSE 'ranks ' END
        || (SELECT string_agg(rank::VARCHAR, ', ' ORDER BY rank) FROM culprits) AS culprits_text,
    coalesce((SELECT ranks FROM waiting), []) AS waiting_ranks,
    first.pg_name,
    first.pg_desc,
    first.group_text,
    first.collective_seq_id,
    first.op,
    first.code_line AS waiting_code_line,
    first.waiting_ranks AS first_waiting_ranks,
    CASE WHEN len(first.waiting_ranks) = 0 THEN 'no member waited in it'
         WHEN len(first.waiting_ranks) = 1 THEN 'rank ' || first.waiting_ranks[1] || ' waited in it'
         ELSE 'ranks ' || array_to_string(first.waiting_ranks, ', ') || ' waited in it' END AS waiting_text,
    (SELECT string_agg(text, '; ' ORDER BY rank) FROM last_texts) AS last_text,
    (SELECT list({'rank': rank, 'pg_name': pg_name, 'collective_seq_id': seq, 'op': op, 'code_line': code_path}
                 ORDER BY rank) FROM last_calls) AS last_collectives,
    coalesce((SELECT '; downstream, ' || CASE WHEN len(ranks) = 1 THEN 'rank ' ELSE 'ranks ' END
                     || array_to_string(ranks, ', ') || ' waited in ' || array_to_string(texts, ', ')
              FROM downstream WHERE len(ranks) > 0), '') AS downstream_text,
    (SELECT list({'pg_name': pg_name, 'pg_desc': pg_desc, 'collective_seq_id': collective_seq_id, 'op': op,
                  'code_line': code_line, 'reached_ranks': reached_ranks, 'waiting_ranks': waiting_ranks,
                  'absent_ranks': absent_ranks, 'blocked_ranks': blocked_ranks, 'downstream': downstream}
                 ORDER BY cause_order) FROM f) AS frontiers
FROM first;
