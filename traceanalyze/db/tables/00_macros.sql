-- Small SQL helpers used by the tables below (and available to users and rules).

-- a collective's name as c10d, gloo or NCCL spell it -> one name: 'AllReduce', 'allreduce_' -> 'all_reduce', 'allgather_into_tensor_coalesced' -> 'all_gather'
CREATE OR REPLACE MACRO collective_op(raw) AS (
    CASE regexp_replace(lower(coalesce(raw, '')), '[^a-z]', '', 'g')
        WHEN 'allreduce' THEN 'all_reduce'
        WHEN 'allreducecoalesced' THEN 'all_reduce'
        WHEN 'allgather' THEN 'all_gather'
        WHEN 'allgatherintotensor' THEN 'all_gather'
        WHEN 'allgatherbase' THEN 'all_gather'
        WHEN 'allgatherintotensorcoalesced' THEN 'all_gather'
        WHEN 'reducescatter' THEN 'reduce_scatter'
        WHEN 'reducescattertensor' THEN 'reduce_scatter'
        WHEN 'reducescatterbase' THEN 'reduce_scatter'
        WHEN 'reducescattertensorcoalesced' THEN 'reduce_scatter'
        WHEN 'broadcast' THEN 'broadcast'
        WHEN 'reduce' THEN 'reduce'
        WHEN 'alltoall' THEN 'all_to_all'
        WHEN 'alltoallv' THEN 'all_to_all'
        WHEN 'alltoallbase' THEN 'all_to_all'
        WHEN 'sendrecv' THEN 'send_recv'
        WHEN 'send' THEN 'send'
        WHEN 'recv' THEN 'recv'
        WHEN 'barrier' THEN 'barrier'
        WHEN 'gather' THEN 'gather'
        WHEN 'scatter' THEN 'scatter'
        WHEN '' THEN NULL
        ELSE regexp_replace(lower(raw), '[^a-z0-9]+', '_', 'g')
    END
);

-- bytes per element of a torch dtype name as the profiler writes it ('float', 'c10::BFloat16', 'Float')
CREATE OR REPLACE MACRO dtype_bytes(dtype) AS (
    CASE lower(regexp_replace(coalesce(dtype, ''), '^(c10::|at::)', ''))
        WHEN 'double' THEN 8 WHEN 'long int' THEN 8 WHEN 'long' THEN 8 WHEN 'int64' THEN 8
        WHEN 'float' THEN 4 WHEN 'int' THEN 4 WHEN 'int32' THEN 4 WHEN 'float32' THEN 4
        WHEN 'half' THEN 2 WHEN 'bfloat16' THEN 2 WHEN 'short int' THEN 2 WHEN 'float16' THEN 2
        WHEN 'signed char' THEN 1 WHEN 'unsigned char' THEN 1 WHEN 'bool' THEN 1
        WHEN 'float8_e4m3fn' THEN 1 WHEN 'float8_e5m2' THEN 1
        ELSE NULL
    END
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

-- the most frequent non-NULL value of a list, ties broken by the smallest value: mode() with the same answer on every run (DuckDB's mode() picks any of tied values), e.g. stable_mode(list(cause))
CREATE OR REPLACE MACRO stable_mode(xs) AS (
    SELECT v FROM (SELECT unnest(xs) AS v) WHERE v IS NOT NULL GROUP BY v ORDER BY count(*) DESC, v LIMIT 1
);

-- the other end of a send / recv as a rank of its process group, from an event's other args (JSON text):
-- 'Dst Rank' / 'Src Rank' (record_param_comms and NCCL kernels of newer torch), else the dstRank /
-- srcRank argument of c10d::send / c10d::recv_ ('Concrete Inputs'[2]); NULL when absent
CREATE OR REPLACE MACRO p2p_peer_arg(name, other_args) AS (
    CASE WHEN other_args IS NOT NULL THEN coalesce(
        TRY_CAST(json_extract_string(TRY_CAST(other_args AS JSON), '$."Dst Rank"') AS INTEGER),
        TRY_CAST(json_extract_string(TRY_CAST(other_args AS JSON), '$."Src Rank"') AS INTEGER),
        CASE WHEN name IN ('c10d::send', 'c10d::recv_')
             THEN TRY_CAST(json_extract_string(TRY_CAST(other_args AS JSON), '$."Concrete Inputs"[2]') AS INTEGER) END)
    END
);

-- the ranks of a process group from args."Process Group Ranks" (JSON text '[0, 1]'), NULL when absent or not a list
CREATE OR REPLACE MACRO group_ranks_arg(pg_ranks) AS (
    TRY_CAST(TRY_CAST(pg_ranks AS JSON) AS INTEGER[])
);
