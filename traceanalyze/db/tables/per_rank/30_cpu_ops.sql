-- Host-side operators (aten ops, autograd nodes, c10d ops) with the step whose time range holds them.
CREATE OR REPLACE TABLE cpu_ops AS
SELECT
    e.rank,                                 -- global rank
    CASE WHEN e.ts_ns < s.end_ns THEN s.step END AS step,  -- ProfilerStep N holding the op's start, NULL outside steps
    e.name,                                 -- operator name, e.g. 'aten::mm'
    e.pid,                                  -- process id
    e.tid,                                  -- thread id
    e.ts_ns,                                -- start, ns
    e.dur_ns,                               -- duration, ns
    e.ts_ns + e.dur_ns AS end_ns,           -- end, ns
    e.external_id,                          -- links to runtime calls and kernels it launched
    e.seq_number,                           -- autograd sequence number (forward op <-> backward node)
    e.input_dims,                           -- input shapes (JSON text), with record_shapes=True
    e.input_type,                           -- input dtypes (JSON text)
    e.collective_name,                      -- record_param_comms: args."Collective name"
    e.in_msg_nelems,                        -- record_param_comms: elements sent
    e.dtype,                                -- record_param_comms: element type
    e.pg_name,                              -- record_param_comms: process group name
    group_desc(e.pg_desc) AS pg_desc,       -- record_param_comms: process group description ('default_pg', 'mesh_tp', ...), NULL when none ('undefined')
    e.pg_ranks,                             -- record_param_comms: global ranks of the process group (JSON text)
    e.collective_seq,                       -- record_param_comms: args.Seq, the collective's sequence number in its group (newer torch)
    CASE WHEN e.name IN ('c10d::send', 'c10d::recv_') OR e.collective_name IS NOT NULL
         THEN p2p_peer_arg(e.name, e.other_args) END AS peer_group_rank,  -- send / recv (c10d::send, c10d::recv_, record_param_comms): the other end as a rank of the process group, NULL when unknown
    e.group_size                            -- record_param_comms: args."Group size" (ranks in the process group)
FROM raw_events AS e
ASOF LEFT JOIN steps AS s ON e.rank = s.rank AND e.ts_ns >= s.ts_ns
WHERE e.ph = 'X' AND e.cat IN ('cpu_op', 'Operator') AND e.ts_ns IS NOT NULL AND e.dur_ns >= 0;

-- user annotations (record_function ranges, DataLoader, Optimizer.step, gloo:* collectives) on host and GPU.
CREATE OR REPLACE TABLE annotations AS
SELECT
    e.rank,                                 -- global rank
    CASE WHEN e.ts_ns < s.end_ns THEN s.step END AS step,  -- step holding the annotation's start
    e.name,                                 -- annotation name, e.g. 'enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__'
    e.cat = 'gpu_user_annotation' AS on_gpu,  -- true for the GPU-timeline copy of an annotation
    e.pid,                                  -- process id (device for GPU annotations)
    e.tid,                                  -- thread id (stream for GPU annotations)
    e.ts_ns,                                -- start, ns
    e.dur_ns,                               -- duration, ns
    e.ts_ns + e.dur_ns AS end_ns,           -- end, ns
    e.external_id,                          -- External id
    e.input_dims,                           -- input shapes (JSON text), e.g. of gloo:all_reduce
    e.input_type                            -- input dtypes (JSON text)
FROM raw_events AS e
ASOF LEFT JOIN steps AS s ON e.rank = s.rank AND e.ts_ns >= s.ts_ns
WHERE e.ph = 'X' AND e.cat IN ('user_annotation', 'gpu_user_annotation')
  AND e.name NOT LIKE 'ProfilerStep#%' AND e.ts_ns IS NOT NULL AND e.dur_ns >= 0;
