-- One row per group and direction (source -> destination) whose sends and receives do not pair up in the Flight Recorder dumps (p2p entries: NCCL records them, gloo does not).
WITH names AS (
    SELECT pg_name, members,
           CASE WHEN pg_desc = 'default_pg' OR (pg_name = '0' AND pg_desc IS NULL) THEN 'the default group'
                WHEN pg_desc IS NULL OR pg_desc IN ('', 'undefined') THEN 'group ' || pg_name
                ELSE 'group ' || pg_name || ' (' || pg_desc || ')' END AS group_text
    FROM fr_groups
),
p2p AS (
    SELECT e.rank, e.pg_name, e.op, e.p2p_src, e.p2p_dst, n.group_text,
           n.members[e.p2p_src + 1] AS src_rank, n.members[e.p2p_dst + 1] AS dst_rank,
           regexp_extract(e.frame_file, '[^/\\]*$') || ':' || e.frame_line AS code_line
    FROM fr_entries AS e JOIN names AS n USING (pg_name)
    WHERE e.is_p2p AND e.p2p_src IS NOT NULL AND e.op IN ('send', 'recv')
),
pairs AS (
    SELECT pg_name, any_value(group_text) AS group_text, src_rank, dst_rank,
           count(*) FILTER (WHERE op = 'send' AND rank = src_rank) AS sends,
           count(*) FILTER (WHERE op = 'recv' AND rank = dst_rank) AS recvs,
           mode(code_line ORDER BY code_line) FILTER (WHERE op = 'send' AND rank = src_rank) AS send_line,
           mode(code_line ORDER BY code_line) FILTER (WHERE op = 'recv' AND rank = dst_rank) AS recv_line
    FROM p2p
    WHERE src_rank IN (SELECT rank FROM fr_dumps) AND dst_rank IN (SELECT rank FROM fr_dumps)
    GROUP BY pg_name, src_rank, dst_rank
)
SELECT
    [CASE WHEN sends > recvs THEN dst_rank ELSE src_rank END] AS ranks,
    []::BIGINT[] AS steps,
    NULL::DOUBLE AS ms_per_step,
    NULL::DOUBLE AS pct_of_step,
    pg_name,
    group_text,
    src_rank,
    dst_rank,
    sends,
    recvs,
    CASE WHEN sends > recvs
         THEN 'rank ' || dst_rank || ' never posted the recv matching rank ' || src_rank || '''s send'
              || coalesce(' (' || send_line || ')', '') || ' in ' || group_text
         ELSE 'rank ' || src_rank || ' never sent what rank ' || dst_rank || ' waits to receive'
              || coalesce(' (' || recv_line || ')', '') || ' in ' || group_text END AS text
FROM pairs
WHERE sends <> recvs
ORDER BY pg_name, src_rank, dst_rank;
