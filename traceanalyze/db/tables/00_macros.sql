-- Small SQL helpers used by the tables below (and available to users and rules).

-- a collective's name as c10d, gloo or NCCL spell it -> one name: 'AllReduce', 'allreduce_' -> 'all_reduce', 'allgather_into_tensor_coalesced' -> 'all_gather'
CREATE OR REPLACE MACRO collective_op(raw) AS (
    -- (a map: a CASE over the key repeats its expression in every branch, which DuckDB binds
    -- again at each of the macro's uses; letters only, '' for a name without any: NULL)
    nullif(coalesce(MAP {
        'allreduce': 'all_reduce', 'allreducecoalesced': 'all_reduce', 'allgather': 'all_gather',
        'allgatherintotensor': 'all_gather', 'allgatherbase': 'all_gather',
        'allgatherintotensorcoalesced': 'all_gather', 'reducescatter': 'reduce_scatter',
        'reducescattertensor': 'reduce_scatter', 'reducescatterbase': 'reduce_scatter',
        'reducescattertensorcoalesced': 'reduce_scatter', 'broadcast': 'broadcast', 'reduce': 'reduce',
        'alltoall': 'all_to_all', 'alltoallv': 'all_to_all', 'alltoallbase': 'all_to_all',
        'sendrecv': 'send_recv', 'send': 'send', 'recv': 'recv', 'barrier': 'barrier', 'gather': 'gather',
        'scatter': 'scatter', '': ''
    }[regexp_replace(lower(coalesce(raw, '')), '[^a-z]', '', 'g')],
        regexp_replace(lower(raw), '[^a-z0-9]+', '_', 'g')), '')
);

-- a range during which the training loop waits for its input: the DataLoader's / DataPipe's
-- iterator ranges (any category), and the user's own record_function ranges named for data
-- ('## data ##', 'data_loading', 'get_batch', 'load_batch', ...: only annotations, never an op)
CREATE OR REPLACE MACRO is_data_range(name, is_annotation) AS (
    name LIKE 'enumerate(DataLoader)#%' OR name LIKE 'enumerate(DataPipe)#%'
    OR (is_annotation AND regexp_matches(lower(name),
        '(^|[^a-z0-9])(data|dataloader|data_loading|load_data|get_batch|next_batch|load_batch|fetch_batch)([^a-z0-9]|$)'))
);

-- bytes per element of a torch dtype name as the profiler writes it ('float', 'c10::BFloat16', 'Float')
CREATE OR REPLACE MACRO dtype_bytes(dtype) AS (
    -- (a map, as in collective_op: a CASE over the name would repeat its expression in every branch)
    MAP {
        'double': 8, 'long int': 8, 'long': 8, 'int64': 8,
        'float': 4, 'int': 4, 'int32': 4, 'float32': 4,
        'half': 2, 'bfloat16': 2, 'short int': 2, 'float16': 2,
        'signed char': 1, 'unsigned char': 1, 'bool': 1,
        'float8_e4m3fn': 1, 'float8_e5m2': 1
    }[lower(regexp_replace(coalesce(dtype, ''), '^(c10::|at::)', ''))]
);

-- elements of the first tensor in an "Input Dims" JSON list, e.g. '[[8, 512], []]' -> 4096
CREATE OR REPLACE MACRO first_input_numel(input_dims) AS (
    list_product(TRY_CAST(json_extract(TRY_CAST(input_dims AS JSON), '$[0]') AS BIGINT[]))::BIGINT
);

-- what a collective moves, from `collectives.bytes` (the rank's input): an all-gather produces
-- its input (the rank's shard) times the ranks; the others move their input
CREATE OR REPLACE MACRO collective_moved_bytes(op, bytes, ranks) AS (
    CASE WHEN op = 'all_gather' THEN bytes * ranks ELSE bytes END
);

-- global ranks as short text for a message, in order, runs of three or more as ranges: rank_ranges([5, 0, 1, 2, 3, 7, 8]) -> '0-3,5,7,8' (NULL for an empty list); at 1,024 ranks a title says '0-426,428-1023', not every rank
CREATE OR REPLACE MACRO rank_ranges(ranks) AS (
    SELECT string_agg(CASE WHEN hi - lo >= 2 THEN lo::VARCHAR || '-' || hi::VARCHAR
                           WHEN hi > lo THEN lo::VARCHAR || ',' || hi::VARCHAR
                           ELSE lo::VARCHAR END, ',' ORDER BY lo)
    FROM (SELECT min(r) AS lo, max(r) AS hi
          FROM (SELECT r, r - row_number() OVER (ORDER BY r) AS run
                FROM (SELECT DISTINCT unnest(ranks) AS r) WHERE r IS NOT NULL)
          GROUP BY run)
);

-- what a rank's extra time in a step was, from its excess in each phase group against `late` (how late it was, or how
-- much it held the step back), naming a group only when it covers share_pct of it: input, host when the extra time is
-- idle inside a record_function range (no op ran), compute, host, else unknown
CREATE OR REPLACE MACRO lateness_cause(input_excess, compute_excess, host_excess, idle_excess, late, share_pct) AS (
    CASE
        WHEN input_excess >= share_pct / 100.0 * late AND input_excess >= greatest(compute_excess, host_excess) THEN 'input'
        WHEN idle_excess >= share_pct / 100.0 * late THEN 'host'
        WHEN compute_excess >= share_pct / 100.0 * late AND compute_excess >= host_excess THEN 'compute'
        WHEN host_excess >= share_pct / 100.0 * late THEN 'host'
        ELSE 'unknown'
    END
);

-- ranks as a message names them: 'rank 3' for one, 'ranks 0-3,5' for more (rank_ranges' runs)
CREATE OR REPLACE MACRO rank_phrase(ranks) AS (
    CASE WHEN len(list_distinct(ranks)) = 1 THEN 'rank ' ELSE 'ranks ' END
    || rank_ranges(ranks)
);

-- a process group's description as the user should read it: NULL for none, for '' and for 'undefined'
-- (what torch writes for a group created without a description)
CREATE OR REPLACE MACRO group_desc(desc_text) AS (
    CASE WHEN desc_text IS NULL OR trim(desc_text) IN ('', 'undefined') THEN NULL ELSE desc_text END
);

-- what follows a process group's name in a message: ' (mesh_tp)', else its ranks ' (ranks 0-3)', else ''
CREATE OR REPLACE MACRO group_label(desc_text, ranks) AS (
    coalesce(' (' || group_desc(desc_text) || ')', ' (ranks ' || rank_ranges(ranks) || ')', '')
);

-- the most frequent non-NULL value of a list, ties broken by the smallest value: mode() with the same answer on every run (DuckDB's mode() picks any of tied values), e.g. stable_mode(list(cause))
CREATE OR REPLACE MACRO stable_mode(xs) AS (
    SELECT v FROM (SELECT unnest(xs) AS v) WHERE v IS NOT NULL GROUP BY v ORDER BY count(*) DESC, v LIMIT 1
);

-- a rank named by a JSON value: an integer, or a string of decimal digits (a minus first), that an
-- INTEGER holds; NULL for anything else (3.0, ' 3', true, ...)
CREATE OR REPLACE MACRO rank_json(v) AS (
    CASE WHEN json_type(v) IN ('BIGINT', 'UBIGINT')
              OR (json_type(v) = 'VARCHAR' AND regexp_full_match(v ->> '$', '-?[0-9]+'))
         THEN TRY_CAST(v ->> '$' AS INTEGER) END
);

-- the other end of a send / recv as a rank of its process group, from an event's other args (JSON text):
-- 'Dst Rank' / 'Src Rank' (record_param_comms and NCCL kernels of newer torch), else the dstRank /
-- srcRank argument of c10d::send / c10d::recv_ ('Concrete Inputs'[2]); NULL when absent. The native
-- reader reads cpu_ops.peer_group_rank the same way (native/src/rank_tables.rs, p2p_peer_arg).
CREATE OR REPLACE MACRO p2p_peer_arg(name, other_args) AS (
    CASE WHEN other_args IS NOT NULL THEN coalesce(
        rank_json(json_extract(TRY_CAST(other_args AS JSON), '$."Dst Rank"')),
        rank_json(json_extract(TRY_CAST(other_args AS JSON), '$."Src Rank"')),
        CASE WHEN name IN ('c10d::send', 'c10d::recv_')
             THEN rank_json(json_extract(TRY_CAST(other_args AS JSON), '$."Concrete Inputs"[2]')) END)
    END
);

-- the ranks of a process group from args."Process Group Ranks" (JSON text '[0, 1]'), NULL when absent or not a list
CREATE OR REPLACE MACRO group_ranks_arg(pg_ranks) AS (
    TRY_CAST(TRY_CAST(pg_ranks AS JSON) AS INTEGER[])
);

-- the i-th (1-based) value of an ascending list preceded by `zeros` zeros: the sorted values of a group where `zeros` members have none
CREATE OR REPLACE MACRO sorted_with_zeros_at(xs, zeros, i) AS (
    CASE WHEN i <= zeros THEN 0 ELSE xs[i - zeros] END
);

-- the median of an ascending list preceded by `zeros` zeros, leaving out the value at 1-based position p: "the other members' median" without a self-join, e.g. median_without(list(t ORDER BY t), 2, 3); NULL when nothing is left
CREATE OR REPLACE MACRO median_without(xs, zeros, p) AS (
    CASE
        WHEN zeros + len(xs) <= 1 THEN NULL
        WHEN (zeros + len(xs) - 1) % 2 = 1 THEN
            sorted_with_zeros_at(xs, zeros, CASE WHEN (zeros + len(xs)) // 2 < p THEN (zeros + len(xs)) // 2
                                                 ELSE (zeros + len(xs)) // 2 + 1 END)
        ELSE (sorted_with_zeros_at(xs, zeros, CASE WHEN (zeros + len(xs) - 1) // 2 < p THEN (zeros + len(xs) - 1) // 2
                                                   ELSE (zeros + len(xs) - 1) // 2 + 1 END)
              + sorted_with_zeros_at(xs, zeros, CASE WHEN (zeros + len(xs) - 1) // 2 + 1 < p THEN (zeros + len(xs) - 1) // 2 + 1
                                                     ELSE (zeros + len(xs) - 1) // 2 + 2 END)) / 2.0
    END
);

-- the median of n sorted values leaving out the one at 1-based place p, given only the values at the places h, h + 1, h + 2 (h = n // 2) and that the first `zeros` places hold 0: median_without's answer without the whole list (region_excess); NULL when nothing is left
CREATE OR REPLACE MACRO median_of_others(n, zeros, p, v1, v2, v3) AS (
    CASE
        WHEN n <= 1 THEN NULL
        WHEN (n - 1) % 2 = 1 THEN
            CASE WHEN n // 2 < p THEN (CASE WHEN n // 2 <= zeros THEN 0 ELSE v1 END)
                 ELSE (CASE WHEN n // 2 + 1 <= zeros THEN 0 ELSE v2 END) END
        ELSE ((CASE WHEN n // 2 < p THEN (CASE WHEN n // 2 <= zeros THEN 0 ELSE v1 END)
                    ELSE (CASE WHEN n // 2 + 1 <= zeros THEN 0 ELSE v2 END) END)
              + (CASE WHEN n // 2 + 1 < p THEN (CASE WHEN n // 2 + 1 <= zeros THEN 0 ELSE v2 END)
                      ELSE (CASE WHEN n // 2 + 2 <= zeros THEN 0 ELSE v3 END) END)) / 2.0
    END
);

-- a process group for a message, by what it carries and its ranks, never by a name torch made up ('undefined', '0'): group_phrase('tensor', [4, 5]) -> 'tensor group (ranks 4,5)'
CREATE OR REPLACE MACRO group_phrase(dimension, ranks) AS (
    coalesce(CASE WHEN dimension IN ('world') THEN NULL ELSE dimension END || ' ', '') || 'group'
    || coalesce(' (ranks ' || rank_ranges(ranks) || ')', '')
);

-- a finding's code region (a struct {name, kind, excess_ms_per_step, idle_pct, idle}) as a title clause, '' when NULL: " — idle inside record_function 'load_shard' (sleep, I/O or a lock)"; its excess stays in the evidence (the title's number is the lateness: one number per fact)
CREATE OR REPLACE MACRO region_note(region, per) AS (
    CASE WHEN region IS NULL THEN '' ELSE
        ' — ' || CASE WHEN region.idle THEN 'idle' ELSE 'busy' END || ' inside '
        || CASE WHEN region.kind = 'annotation' THEN 'record_function ''' ELSE 'op ''' END || region.name || ''''
        || CASE WHEN region.idle THEN ' (sleep, I/O or a lock)' ELSE '' END
    END
);

-- the same region as the first sentence of a finding's advice, '' when NULL (no number: the advice's number is the cause's excess)
CREATE OR REPLACE MACRO region_advice(region, per) AS (
    CASE WHEN region IS NULL THEN '' ELSE
        'The extra time is inside ' || CASE WHEN region.kind = 'annotation' THEN 'record_function ''' ELSE 'op ''' END
        || region.name || ''''
        || CASE WHEN region.idle
                THEN ', and the host is idle in ' || printf('%.0f', region.idle_pct) || '% of it (no op, runtime call, '
                     || 'collective or kernel runs: a sleep, blocking I/O, a lock, or Python that records nothing). '
                WHEN region.kind = 'op' THEN ': work this rank does that the others do not, or do faster. '
                ELSE ', and it is busy (ops run in ' || printf('%.0f', 100 - region.idle_pct) || '% of it): work this rank '
                     || 'does that the others do not, or do faster. '
           END
    END
);
