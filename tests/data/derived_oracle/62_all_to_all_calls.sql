-- The host calls of all_to_all / all_to_all_single (expert parallelism, MoE token dispatch) with what each rank sends and receives.
--
-- c10d::alltoall_base_ (all_to_all_single) records its tensors as Input Dims [output, input, ...]
-- and, with record_shapes=True on torch >= 2.x, its split sizes as Concrete Inputs
-- [.., .., .., output_split_sizes, input_split_sizes, ..] ("[]" when the split is even).
-- NCCL's record_param_comms carries In / Out msg nelems and "In split size" / "Out split size".
-- Split sizes count rows of dim 0 (tokens), one per rank of the group, in group-rank order.
CREATE OR REPLACE TABLE all_to_all_calls AS
WITH calls AS (
    SELECT e.rank, e.name, e.tid, e.ts_ns, e.ts_ns + e.dur_ns AS end_ns,
           CASE WHEN e.name = 'record_param_comms' THEN e.in_msg_nelems * dtype_bytes(e.dtype)
                ELSE list_product(TRY_CAST(json_extract(TRY_CAST(e.input_dims AS JSON), '$[1]') AS BIGINT[]))::BIGINT
                     * dtype_bytes(json_extract_string(TRY_CAST(e.input_type AS JSON), '$[1]')) END AS send_bytes,
           CASE WHEN e.name = 'record_param_comms' THEN e.out_msg_nelems * dtype_bytes(e.dtype)
                ELSE list_product(TRY_CAST(json_extract(TRY_CAST(e.input_dims AS JSON), '$[0]') AS BIGINT[]))::BIGINT
                     * dtype_bytes(json_extract_string(TRY_CAST(e.input_type AS JSON), '$[0]')) END AS recv_bytes,
           TRY_CAST(CASE WHEN e.name = 'record_param_comms' THEN json_extract_string(TRY_CAST(e.other_args AS JSON), '$."In split size"')
                         ELSE json_extract_string(TRY_CAST(e.other_args AS JSON), '$."Concrete Inputs"[4]') END AS BIGINT[]) AS send_splits,
           TRY_CAST(CASE WHEN e.name = 'record_param_comms' THEN json_extract_string(TRY_CAST(e.other_args AS JSON), '$."Out split size"')
                         ELSE json_extract_string(TRY_CAST(e.other_args AS JSON), '$."Concrete Inputs"[3]') END AS BIGINT[]) AS recv_splits
    FROM raw_events AS e
    WHERE e.ph = 'X' AND e.cat IN ('cpu_op', 'Operator') AND e.ts_ns IS NOT NULL AND e.dur_ns >= 0
      AND (e.name IN ('c10d::alltoall_base_', 'c10d::alltoall_')
           OR (e.name = 'record_param_comms' AND collective_op(e.collective_name) = 'all_to_all'))
)
SELECT
    c.rank,                                 -- global rank
    CASE WHEN c.ts_ns < s.end_ns THEN s.step END AS step,  -- ProfilerStep N holding the call's start, NULL outside steps
    c.name,                                 -- c10d::alltoall_base_ (all_to_all_single), c10d::alltoall_ (list form) or record_param_comms
    c.tid,                                  -- host thread of the call
    c.ts_ns,                                -- call start, ns (rank clock)
    c.end_ns,                               -- call end, ns
    CASE WHEN c.send_bytes >= 0 THEN c.send_bytes END AS send_bytes,  -- bytes this rank sends (its input tensor), NULL when unknown
    CASE WHEN c.recv_bytes >= 0 THEN c.recv_bytes END AS recv_bytes,  -- bytes this rank receives (its output tensor), NULL when unknown
    CASE WHEN len(c.send_splits) > 0 AND list_min(c.send_splits) >= 0 THEN c.send_splits END AS send_splits,  -- input split sizes: rows sent to each rank of the group, in group-rank order; NULL when even or not recorded
    CASE WHEN len(c.recv_splits) > 0 AND list_min(c.recv_splits) >= 0 THEN c.recv_splits END AS recv_splits   -- output split sizes: rows received from each rank of the group; NULL when even or not recorded
FROM calls AS c
ASOF LEFT JOIN steps AS s ON c.rank = s.rank AND c.ts_ns >= s.ts_ns
ORDER BY c.rank, c.ts_ns, c.end_ns, c.name;
