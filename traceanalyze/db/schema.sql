-- Raw tables written by the loader (stage 1). Derived tables are built from these by tables/*.sql.

-- One row per loaded trace file (one per rank).
CREATE TABLE ranks (
    rank INTEGER,               -- global rank (distributedInfo.rank, else from the file name)
    rank_source VARCHAR,        -- where the rank came from: 'distributedInfo' or 'file name'
    file VARCHAR,               -- path of the trace file
    file_bytes BIGINT,          -- size of the file on disk
    file_mtime_ns BIGINT,       -- modification time of the file (used to reuse a stored database)
    events_bytes BIGINT,        -- uncompressed bytes of the traceEvents array
    world_size INTEGER,         -- distributedInfo.world_size, NULL when absent
    backend VARCHAR,            -- distributedInfo.backend (nccl, gloo, ...), NULL when absent
    base_ns BIGINT,             -- baseTimeNanoseconds added to every ts (0 when absent)
    device_name VARCHAR,        -- deviceProperties[0].name, NULL for CPU-only traces
    truncated BOOLEAN,          -- the file was cut short; events before the cut were kept
    clock_offset_ns BIGINT,     -- estimated offset of this rank's clock vs. the reference rank (set by align)
    host_name VARCHAR           -- the host that recorded the trace (top-level host_name / hostname), NULL when absent
);

-- One row per process group a rank belongs to, from its trace's distributedInfo.pg_config (empty when the trace has none).
CREATE TABLE pg_configs (
    rank INTEGER,               -- global rank whose trace lists the group
    pg_name VARCHAR,            -- the group's name (pg_config.pg_name; '0' is the default group; torch numbers groups in creation order, the same on every rank)
    pg_desc VARCHAR,            -- its description (pg_config.pg_desc: 'default_pg', 'mesh_tp', 'mesh_dp', ...), NULL when absent or 'undefined'
    ranks INTEGER[],            -- global ranks of the group in group-rank order (pg_config.ranks: a list, or a quoted string in on-demand traces)
    pg_size INTEGER,            -- pg_config.pg_size, else the number of ranks
    backend_config VARCHAR,     -- pg_config.backend_config ('cpu:gloo,cuda:gloo', 'cuda:nccl'), NULL when absent
    config_index INTEGER        -- 0-based position in the rank's pg_config (the order the rank created its groups)
);

-- Every event of every rank, with the args the analysis uses as typed columns.
CREATE TABLE raw_events (
    rank INTEGER,               -- global rank
    ph VARCHAR,                 -- Chrome trace phase: X complete, i instant, M metadata, s/f flow, B/E
    cat VARCHAR,                -- Kineto category: cpu_op, kernel, cuda_runtime, gpu_memcpy, ...
    name VARCHAR,               -- event name
    pid VARCHAR,                -- process id (or a GPU device number for GPU events), as text
    tid VARCHAR,                -- thread id (or stream number for GPU events), as text
    ts_ns BIGINT,               -- start time, ns (rank's own clock; baseTimeNanoseconds applied)
    dur_ns BIGINT,              -- duration, ns (NULL for instants)
    flow_id VARCHAR,            -- id of flow events (s/f), linking CPU launches to GPU work
    external_id BIGINT,         -- args."External id": links ops to runtime calls and kernels
    correlation BIGINT,         -- args.correlation: links a runtime launch to its GPU kernel
    device INTEGER,             -- args.device: GPU index of GPU events
    stream BIGINT,              -- args.stream: GPU stream of GPU events
    bytes BIGINT,               -- args.bytes of a memcpy / memset (bytes moved); args.Bytes of a [memory] event (allocated, negative = freed)
    input_dims VARCHAR,         -- args."Input Dims" (JSON text; record_shapes=True)
    input_type VARCHAR,         -- args."Input type" (JSON text)
    seq_number BIGINT,          -- args."Sequence number": autograd forward/backward link
    fwd_thread_id BIGINT,       -- args."Fwd thread id"
    collective_name VARCHAR,    -- args."Collective name" on record_param_comms / NCCL kernels
    in_msg_nelems BIGINT,       -- args."In msg nelems": elements sent by a collective
    out_msg_nelems BIGINT,      -- args."Out msg nelems": elements received by a collective
    dtype VARCHAR,              -- args.dtype of a collective
    group_size INTEGER,         -- args."Group size" of a collective
    pg_name VARCHAR,            -- args."Process Group Name"
    pg_desc VARCHAR,            -- args."Process Group Description"
    pg_ranks VARCHAR,           -- args."Process Group Ranks" (JSON text)
    collective_seq BIGINT,      -- args.Seq: per-process-group collective sequence number (newer torch)
    total_allocated_bytes BIGINT, -- args."Total Allocated" of [memory] events
    total_reserved_bytes BIGINT,  -- args."Total Reserved" of [memory] events
    device_type INTEGER,        -- args."Device Type" of [memory] events (0 = CPU, 1 = CUDA)
    device_id INTEGER,          -- args."Device Id" of [memory] events
    addr VARCHAR,               -- args.Addr of [memory] events
    label VARCHAR,              -- args.name of metadata events (process / thread names)
    labels VARCHAR,             -- args.labels of metadata events
    sync_kind VARCHAR,          -- args.cuda_sync_kind of cuda_sync events
    other_args VARCHAR          -- every other args key, as a JSON object text (NULL when none): nothing is lost
);

-- Everything odd the loader saw: skipped files, truncations, malformed events, notes.
CREATE TABLE load_issues (
    rank INTEGER,               -- rank concerned, NULL for the whole load
    file VARCHAR,               -- file concerned, NULL when not about one file
    kind VARCHAR,               -- short machine-readable kind, e.g. 'truncated', 'bad-ts', 'no-steps'
    severity VARCHAR,           -- 'info' (a choice we made) or 'warning' (data lost or doubtful)
    message VARCHAR,            -- one line for the user
    count BIGINT                -- how many events it concerns, NULL when not countable
);

-- Facts about the load itself.
CREATE TABLE load_meta (
    key VARCHAR,                -- 'schema_version', 'tool_version', 'rank_selection', 'target', 'shards', 'storage' ('tables' or 'views'), 'shard_folders' (views: JSON list of the rank folders they read)
    value VARCHAR               -- its value
);

-- Peak dense throughput and typical collective bus bandwidth of common accelerators (db/gpu_specs.csv): the first row by priority whose name_regex matches ranks.device_name applies.
CREATE TABLE gpu_specs (
    priority INTEGER,           -- match order (lower first)
    name_regex VARCHAR,         -- regular expression matched against deviceProperties[0].name
    gpu VARCHAR,                -- the model it stands for, e.g. 'A100 SXM'
    fp64_tflops DOUBLE,         -- peak dense FP64 (tensor core where there is one), TFLOP/s; NULL when not quoted
    fp32_tflops DOUBLE,         -- peak dense FP32 (no TF32), TFLOP/s
    tf32_tflops DOUBLE,         -- peak dense TF32 tensor core, TFLOP/s (NULL: none)
    fp16_tflops DOUBLE,         -- peak dense FP16 tensor core, TFLOP/s
    bf16_tflops DOUBLE,         -- peak dense BF16 tensor core, TFLOP/s (NULL: none)
    fp8_tflops DOUBLE,          -- peak dense FP8 tensor core, TFLOP/s (NULL: none)
    intra_node_busbw_gb_per_s DOUBLE,  -- typical nccl-tests bus bandwidth of a large all-reduce within one node (NVLink / xGMI, or PCIe where the model has none), GB/s
    inter_node_busbw_gb_per_s DOUBLE,  -- typical bus bandwidth across nodes (one InfiniBand / RoCE NIC per GPU of the model's generation), GB/s
    hbm_gb_per_s DOUBLE         -- peak device memory bandwidth, GB/s (the roofline's memory bound; A100 40 GB figure for A100)
);
