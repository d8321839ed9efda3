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

-- The per-rank tables that are one pass over the events are built by the native reader as it parses
-- (native/src/rank_tables.rs) and written next to raw_events.parquet; their columns are these. A row's
-- step is the step that starts last at or before it, NULL when the row starts after that step's end.

-- Process and thread names from metadata events (ph = 'M').
CREATE TABLE threads (
    rank INTEGER,               -- global rank
    pid VARCHAR,                -- process id (GPU events: device number) as text
    tid VARCHAR,                -- thread id (GPU events: stream) as text
    thread_name VARCHAR,        -- e.g. 'thread 6039 (pt_gloo_runloop)' (the smallest, when named twice)
    process_name VARCHAR        -- e.g. 'python3'
);

-- One row per ProfilerStep#N window per rank (or one synthetic window for traces without steps).
CREATE TABLE steps (
    rank INTEGER,               -- global rank
    step BIGINT,                -- N of ProfilerStep#N (0 for a synthetic whole-trace window); a step named twice spans all its occurrences
    ts_ns BIGINT,               -- step start on the rank's own clock, ns
    dur_ns BIGINT,              -- step duration, ns
    end_ns BIGINT,              -- step end, ns
    synthetic BOOLEAN,          -- true when the trace had no ProfilerStep and the whole trace (every complete event but the 'Trace' span) is one window
    step_index BIGINT,          -- 0-based position within the rank
    cut_short BOOLEAN           -- the rank's last step, under a tenth (cut_short_max_ratio) of its shortest other step: the profiler stopped as it began (left out of aligned_steps)
);

-- Host-side operators (aten ops, autograd nodes, c10d ops) with the step whose time range holds them.
CREATE TABLE cpu_ops (
    rank INTEGER,               -- global rank
    step BIGINT,                -- ProfilerStep N holding the op's start, NULL outside steps
    name VARCHAR,               -- operator name, e.g. 'aten::mm'
    pid VARCHAR,                -- process id
    tid VARCHAR,                -- thread id
    ts_ns BIGINT,               -- start, ns
    dur_ns BIGINT,              -- duration, ns
    end_ns BIGINT,              -- end, ns
    self_ns BIGINT,             -- exclusive time: dur_ns less the time inside other ops of its thread (the union of the ops that start and end within it, at any depth; an op recorded twice with the same span counts once), ns
    external_id BIGINT,         -- links to runtime calls and kernels it launched
    seq_number BIGINT,          -- autograd sequence number (forward op <-> backward node)
    input_dims VARCHAR,         -- input shapes (JSON text), with record_shapes=True
    input_type VARCHAR,         -- input dtypes (JSON text)
    collective_name VARCHAR,    -- record_param_comms: args."Collective name"
    in_msg_nelems BIGINT,       -- record_param_comms: elements sent
    dtype VARCHAR,              -- record_param_comms: element type
    pg_name VARCHAR,            -- record_param_comms: process group name
    pg_desc VARCHAR,            -- record_param_comms: process group description ('default_pg', 'mesh_tp', ...), NULL when none ('undefined')
    pg_ranks VARCHAR,           -- record_param_comms: global ranks of the process group (JSON text)
    collective_seq BIGINT,      -- record_param_comms: args.Seq, the collective's sequence number in its group (newer torch)
    peer_group_rank INTEGER,    -- send / recv (c10d::send, c10d::recv_, record_param_comms): the other end as a rank of the process group (args "Dst Rank", else "Src Rank", else c10d's third Concrete Input; an integer or a string of digits), NULL when unknown
    group_size INTEGER          -- record_param_comms: args."Group size" (ranks in the process group)
);

-- user annotations (record_function ranges, DataLoader, Optimizer.step, gloo:* collectives) on host and GPU.
CREATE TABLE annotations (
    rank INTEGER,               -- global rank
    step BIGINT,                -- step holding the annotation's start
    name VARCHAR,               -- annotation name, e.g. 'enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__'
    on_gpu BOOLEAN,             -- true for the GPU-timeline copy of an annotation
    pid VARCHAR,                -- process id (device for GPU annotations)
    tid VARCHAR,                -- thread id (stream for GPU annotations)
    ts_ns BIGINT,               -- start, ns
    dur_ns BIGINT,              -- duration, ns
    end_ns BIGINT,              -- end, ns
    self_ns BIGINT,             -- exclusive time: dur_ns less the time inside other annotations of its thread (GPU copies: of its stream), as cpu_ops.self_ns, ns
    external_id BIGINT,         -- External id
    input_dims VARCHAR,         -- input shapes (JSON text), e.g. of gloo:all_reduce
    input_type VARCHAR          -- input dtypes (JSON text)
);

-- CUDA / HIP runtime and driver calls on the host (kernel launches, memcpy calls, synchronizations).
CREATE TABLE runtime (
    rank INTEGER,               -- global rank
    step BIGINT,                -- step holding the call
    name VARCHAR,               -- e.g. cudaLaunchKernel, hipMemcpyAsync, cudaDeviceSynchronize
    tid VARCHAR,                -- host thread
    ts_ns BIGINT,               -- start, ns
    dur_ns BIGINT,              -- duration, ns
    end_ns BIGINT,              -- end, ns
    correlation BIGINT,         -- links a launch to the GPU work it queued
    external_id BIGINT,         -- the operator that made the call
    is_sync BOOLEAN             -- the host waits for (or polls) the device: the name contains Synchronize, StreamWaitEvent, EventQuery or StreamQuery (any case)
);

-- GPU activity: kernels, memcpy and memset, classified by kernel_classes.csv, on the step that launched them. A CUPTI range profiler trace (Kineto's cuda_profiler_range events: one per kernel, its performance counters as args, no correlation) reads as kernels too: the n-th range (by start, then name) is the kernel of the rank's n-th kernel launch (the order CUPTI replays them in), when the counts agree.
CREATE TABLE kernels (
    rank INTEGER,               -- global rank
    step BIGINT,                -- step whose CPU code launched it (correlation), else the step its time falls in
    kind VARCHAR,               -- compute | communication | memcpy | memset (kernel_classes.csv: the first class by priority whose expressions find a match in the category and the name; NULL when none does)
    name VARCHAR,               -- kernel name (may contain < > & from C++ templates)
    device INTEGER,             -- GPU index: args.device, else the pid when it is an integer in decimal digits
    stream BIGINT,              -- GPU stream: args.stream, else the tid when it is an integer in decimal digits
    ts_ns BIGINT,               -- start on the GPU, ns (rank's clock)
    dur_ns BIGINT,              -- duration, ns
    end_ns BIGINT,              -- end, ns
    correlation BIGINT,         -- correlation id of the launching runtime call (range profiler kernels: of the launch in the same place in launch order)
    external_id BIGINT,         -- External id of the launching operator
    launch_ts_ns BIGINT,        -- when the host launched it, ns (NULL when unknown; a kernel whose correlation two runtime calls carry has a row for each)
    copy_bytes BIGINT,          -- bytes moved (memcpy / memset)
    collective_name VARCHAR,    -- args."Collective name" on NCCL kernels (newer torch)
    in_msg_nelems BIGINT,       -- args."In msg nelems"
    dtype VARCHAR,              -- args.dtype
    pg_name VARCHAR,            -- args."Process Group Name"
    group_size INTEGER,         -- args."Group size"
    pg_desc VARCHAR,            -- args."Process Group Description", NULL when none ('undefined')
    pg_ranks VARCHAR,           -- args."Process Group Ranks" (JSON text)
    collective_seq BIGINT,      -- args.Seq: the collective's sequence number in its group (newer torch)
    peer_group_rank INTEGER,    -- send / recv kernels: args."Dst Rank" / "Src Rank" as a rank of the process group (as cpu_ops.peer_group_rank), NULL when absent
    counters VARCHAR            -- CUPTI range profiler kernels (cuda_profiler_range): their performance counters, JSON text {"metric": value}; their times are not measured (see docs/loading.md); NULL for other kernels
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
    key VARCHAR,                -- 'schema_version', 'tool_version', 'rank_selection', 'target', 'shards', 'storage' ('tables' or 'views'), 'shard_folders' (views: JSON list of the rank folders they read), 'macros' (a hash of the macros it stores: when it is this version's, a connection uses them as stored)
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

-- One row per Flight Recorder dump read (torch.distributed's record of each rank's last collectives; docs/flight-recorder.md).
CREATE TABLE fr_dumps (
    rank INTEGER,               -- global rank of the dump (the trailing number of its file name)
    file VARCHAR,               -- path of the dump
    file_bytes BIGINT,          -- size of the dump on disk
    version VARCHAR,            -- the dump's format version ('2.10' from torch 2.13), NULL when absent
    entries BIGINT,             -- collectives recorded in it (at most TORCH_FR_BUFFER_SIZE: the oldest are overwritten)
    comm_lib_version VARCHAR    -- the communication library's version (NCCL), '' or NULL on gloo
);

-- One row per collective (or p2p operation) a Flight Recorder dump recorded, oldest first per rank.
CREATE TABLE fr_entries (
    rank INTEGER,               -- global rank whose dump recorded it
    record_id BIGINT,           -- its number in the rank's recorder (increasing; the order the rank issued them)
    pg_id BIGINT,               -- the rank's own number for the group (its groups in creation order; not the same on every rank)
    pg_name VARCHAR,            -- the process group's name ('0' is the default group; torch numbers groups in creation order, the same on every rank)
    pg_desc VARCHAR,            -- the group's description ('default_pg', a new_group's group_desc, 'undefined' when none), NULL when absent
    collective_seq_id BIGINT,   -- the collective's number in its group (1, 2, ...: the same collective has the same number on every member)
    p2p_seq_id BIGINT,          -- the p2p operation's number in its group (NCCL; 0 on gloo, which records no p2p)
    op_id BIGINT,               -- the operation's number in its group, collectives and p2p together
    op VARCHAR,                 -- the operation: profiling_name without the backend and the peers ('all_reduce', 'broadcast', 'barrier', 'send', 'recv')
    profiling_name VARCHAR,     -- the name as recorded ('gloo:all_reduce', 'nccl:all_reduce')
    input_sizes VARCHAR,        -- the input tensors' shapes, JSON text ('[[16,16]]')
    input_dtypes VARCHAR,       -- the input tensors' dtypes, JSON text ('["Float"]')
    output_sizes VARCHAR,       -- the output tensors' shapes, JSON text
    output_dtypes VARCHAR,      -- the output tensors' dtypes, JSON text
    state VARCHAR,              -- 'scheduled', 'started' or 'completed' when dumped (gloo leaves 'scheduled')
    retired BOOLEAN,            -- the recorder no longer tracks it (its work object is done or gone)
    time_created_ns BIGINT,     -- when the rank issued it, ns since the epoch (the host's clock)
    time_started_ns BIGINT,     -- when it was seen started, ns since the epoch (NCCL with timing), else NULL
    time_completed_ns BIGINT,   -- when it was seen completed, ns since the epoch (NCCL with timing), else NULL
    timeout_ms BIGINT,          -- the group's timeout, ms
    is_p2p BOOLEAN,             -- a send / recv (counted by p2p_seq_id) rather than a collective
    p2p_src INTEGER,            -- a send / recv: the sending rank, as a rank of the group (from 'send 0->1' / 'recv 1<-0'), else NULL
    p2p_dst INTEGER,            -- a send / recv: the receiving rank, as a rank of the group, else NULL
    frame_file VARCHAR,         -- the user's frame: the first frame of the Python stack outside torch (a folder named torch): its file
    frame_line BIGINT,          -- its line
    frame_name VARCHAR          -- its function
);

-- One row per rank and process group: how far the rank got in the group's collectives when it dumped (the dump's pg_status).
CREATE TABLE fr_status (
    rank INTEGER,               -- global rank
    pg_id BIGINT,               -- the rank's own number for the group (the key of pg_status)
    pg_name VARCHAR,            -- the group's name (from the rank's entries of that pg_id; NULL when none is left in its buffer)
    last_enqueued_collective BIGINT,   -- collective_seq_id of the last collective the rank issued in the group (counts those the ring buffer no longer holds)
    last_started_collective BIGINT,    -- of the last one seen started (-1: none, or not tracked: gloo)
    last_completed_collective BIGINT   -- of the last one seen completed (-1: none)
);

-- One row per process group named by the Flight Recorder dumps.
CREATE TABLE fr_groups (
    pg_name VARCHAR,            -- the group's name
    pg_desc VARCHAR,            -- its description, NULL when no dump names one
    members INTEGER[],          -- its global ranks (sorted)
    members_source VARCHAR      -- 'pg_config' (a dump lists them: NCCL) or 'inferred' (the ranks whose dumps name the group: gloo leaves pg_config empty)
);
