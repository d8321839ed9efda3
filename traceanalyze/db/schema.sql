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
    launch_end_ns BIGINT,       -- when that launching call returned (its start + duration), ns (NULL when unknown)
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

-- The per-rank tables that join the one-pass tables (collectives, phases, GPU activity, code regions,
-- FLOPs, ...) are built by the native reader from the one-pass tables it wrote (native/src/derived/,
-- each module stating its tables' rules) and written beside them; their columns are these. Args read
-- from JSON ("Input Dims", "Input type", "Concrete Inputs", split sizes) count only when they are
-- what the profiler writes: a shape is a list of JSON integers; anything else is unknown (NULL).

-- Memory copies with direction and host memory kind, e.g. 'Memcpy HtoD (Pageable -> Device)'.
CREATE TABLE memcpy (
    rank INTEGER,               -- global rank
    step BIGINT,                -- step that launched the copy
    name VARCHAR,               -- copy name as recorded
    direction VARCHAR,          -- HtoD, DtoH, DtoD, ...
    src_memory VARCHAR,         -- Pageable, Pinned, Device
    dst_memory VARCHAR,         -- Device, Pageable, Pinned
    device INTEGER,             -- GPU index
    stream BIGINT,              -- GPU stream
    ts_ns BIGINT,               -- start, ns
    dur_ns BIGINT,              -- duration, ns
    end_ns BIGINT,              -- end, ns
    copy_bytes BIGINT,          -- bytes copied
    gb_per_s DOUBLE             -- achieved bandwidth, GB/s (bytes per ns)
);

-- One row per collective and point-to-point transfer per rank, with its process group: from NCCL/RCCL kernels (GPU), gloo:* annotations (CPU), or record_param_comms.
CREATE TABLE collectives (
    rank INTEGER,               -- global rank
    step BIGINT,                -- step the collective belongs to (launching step for GPU kernels)
    op VARCHAR,                 -- all_reduce, all_gather, reduce_scatter, broadcast, barrier, all_to_all, ...; send / recv / send_recv for point-to-point
    kind VARCHAR,               -- 'collective' (every rank of the group takes part) or 'p2p' (a send or receive between two ranks)
    process_group VARCHAR,      -- process group name (pg_name: '0' is the default group; 'default' when neither the event nor the rank's pg_config tells)
    pg_desc VARCHAR,            -- the group's description ('default_pg', 'mesh_tp', ...), NULL when unknown
    group_ranks INTEGER[],      -- global ranks of the group, in group-rank order, NULL when unknown
    group_source VARCHAR,       -- where the group came from: 'trace' (the event's args), 'pg_config' (the rank's only group), 'inferred' (gloo: matched across the ranks sharing a group, see docs/parallelism.md), 'pending' (the rank has several groups and inference has not run), 'unknown'
    peer INTEGER,               -- p2p: global rank at the other end (the destination of a send, the source of a recv), NULL when unknown
    peer_group_rank INTEGER,    -- p2p: the other end as a rank of the process group (what the call names), NULL when unknown
    seq BIGINT,                 -- 0-based order of the collective within its process group on this rank; the same seq on every rank is the same collective
    trace_seq BIGINT,           -- args.Seq: the collective's sequence number in its group as torch counts it (newer torch), NULL when absent
    index_in_step BIGINT,       -- 0-based order within the step
    bytes BIGINT,               -- payload bytes (elements x dtype size) of the rank's input: its shard for all_gather, the whole tensor for reduce_scatter; NULL when unknown
    ts_ns BIGINT,               -- start (the rank's arrival at the collective), ns, rank clock
    end_ns BIGINT,              -- end, ns
    dur_ns BIGINT,              -- duration, ns: transfer plus waiting for the other ranks
    source VARCHAR,             -- nccl_kernel | gloo_annotation | record_param_comms
    name VARCHAR,               -- the event it came from (gloo:all_reduce for a reduce_scatter that gloo runs as an all-reduce)
    run_tid VARCHAR,            -- thread (or GPU stream) that ran it: a gloo group's pt_gloo_runloop thread, the NCCL stream, the calling thread
    call_tid VARCHAR,           -- host thread of the call that issued it: the runtime call that launched the NCCL kernel, the c10d:: call that queued the gloo run (paired in order, NULL on a rank where the order does not match), or the record_param_comms op itself
    call_end_ns BIGINT          -- end of that host call, ns (rank clock); NULL when unknown
);

-- Per (rank, step): time with at least one collective in flight (collectives clipped to the step and merged).
CREATE TABLE step_comm (
    rank INTEGER,               -- global rank
    step BIGINT,                -- ProfilerStep N
    comm_ns BIGINT              -- time with a collective in flight (union over collectives), ns
);

-- The training-loop thread of each rank: the thread that records ProfilerStep#N, else the busiest CPU thread.
CREATE TABLE main_threads (
    rank INTEGER,               -- global rank
    tid VARCHAR                 -- thread id of the training loop
);

-- The training-loop thread's top-level host work, per step: of its host ops (cpu_ops but the
-- ProfilerStep#N ranges) and host annotations (on_gpu false) of main_threads' thread, taken in the
-- order start, the later end first, then name, those that start at or after the end of every
-- earlier one of their step (none of them still runs). The critical path names its host segments
-- after them. Rows without a step are left out.
CREATE TABLE top_host_ops (
    rank INTEGER,               -- global rank
    step BIGINT,                -- step holding the start
    ts_ns BIGINT,               -- start, ns
    end_ns BIGINT,              -- end, ns
    name VARCHAR                -- op or annotation name
);

-- Allocator events from profile_memory=True ('[memory]' instants): one row per allocation or free.
CREATE TABLE memory (
    rank INTEGER,                 -- global rank
    step BIGINT,                  -- step holding the event
    ts_ns BIGINT,                 -- time, ns
    device_kind VARCHAR,          -- cpu | cuda
    device_id INTEGER,            -- device index (-1 for CPU)
    tid VARCHAR,                  -- thread that allocated or freed
    addr VARCHAR,                 -- block address as the trace writes it
    alloc_bytes BIGINT,           -- bytes allocated (> 0) or freed (< 0)
    total_allocated_bytes BIGINT, -- allocator's total allocated after the event
    total_reserved_bytes BIGINT,  -- allocator's total reserved after the event
    in_collective BOOLEAN,        -- the event happened inside a collective call on its thread (c10d op, record_param_comms, gloo:* / nccl:* annotation)
    freed_in_trace BOOLEAN        -- allocations: the trace frees the block (a free of its address follows before the address is handed out again); NULL for frees
);

-- The host calls of all_to_all / all_to_all_single (expert parallelism, MoE token dispatch) with what each rank sends and receives.
CREATE TABLE all_to_all_calls (
    rank INTEGER,               -- global rank
    step BIGINT,                -- ProfilerStep N holding the call's start, NULL outside steps
    name VARCHAR,               -- c10d::alltoall_base_ (all_to_all_single), c10d::alltoall_ (list form) or record_param_comms
    tid VARCHAR,                -- host thread of the call
    ts_ns BIGINT,               -- call start, ns (rank clock)
    end_ns BIGINT,              -- call end, ns
    send_bytes BIGINT,          -- bytes this rank sends (its input tensor), NULL when unknown
    recv_bytes BIGINT,          -- bytes this rank receives (its output tensor), NULL when unknown
    send_splits BIGINT[],       -- input split sizes: rows sent to each rank of the group, in group-rank order; NULL when even or not recorded
    recv_splits BIGINT[]        -- output split sizes: rows received from each rank of the group; NULL when even or not recorded
);

-- Per (rank, step): the batch the step trained on, from input shapes (record_shapes=True), summed over its DDP forward passes (micro-batches).
CREATE TABLE step_batches (
    rank INTEGER,               -- global rank
    step BIGINT,                -- ProfilerStep N
    samples BIGINT,             -- samples in the step (embedding ids' batch dim, else the first input's leading dim), NULL when not visible
    tokens BIGINT,              -- token ids in the step including padding (batch x seq_len of the embedding lookups), NULL without embeddings
    real_tokens BIGINT,         -- tokens without padding, when the DataLoader's per-sample copies show them
    max_seq_len BIGINT          -- longest padded sequence length of the step's lookups
);

-- One row per contiguous phase interval of a step: the timeline the report draws. Phases of a step tile it exactly.
CREATE TABLE phase_intervals (
    rank INTEGER,               -- global rank
    step BIGINT,                -- ProfilerStep N
    phase VARCHAR,              -- data_wait | h2d | forward | backward | optimizer | comm_exposed | pipeline_wait | other
    ts_ns BIGINT,               -- interval start, ns (rank clock)
    end_ns BIGINT,              -- interval end, ns
    dur_ns BIGINT,              -- interval length, ns
    start_rel_ns BIGINT,        -- start relative to the step start, ns (comparable across ranks)
    idle BOOLEAN                -- phase 'other' with nothing running on the training loop and nothing in flight (a sleep, I/O, a lock, Python that records nothing)
);

-- Time per phase for every (rank, step), ns; the eight phase columns add up to dur_ns (idle_ns is a part of other_ns).
CREATE TABLE step_phases (
    rank INTEGER,               -- global rank
    step BIGINT,                -- ProfilerStep N
    dur_ns BIGINT,              -- step duration, ns
    data_wait_ns DOUBLE,        -- waiting for the next batch (DataLoader __next__)
    h2d_ns DOUBLE,              -- host ops issuing host-to-device copies
    forward_ns DOUBLE,          -- forward pass and loss
    backward_ns DOUBLE,         -- autograd backward
    optimizer_ns DOUBLE,        -- Optimizer.step / zero_grad
    comm_exposed_ns DOUBLE,     -- blocked in or waiting for a collective
    pipeline_wait_ns DOUBLE,    -- blocked in a send / recv (pipeline stages handing activations and gradients over), or waiting for one
    other_ns DOUBLE,            -- host work outside the model, or idle
    idle_ns DOUBLE              -- the idle part of other_ns: nothing runs on the training loop, nothing in flight
);

-- GPU work merged into disjoint busy intervals per (rank, device, class) and clipped to the step windows (kernels of a CUPTI range profiler, with counters, have no measured times: left out).
CREATE TABLE gpu_busy_intervals (
    rank INTEGER,               -- global rank
    step BIGINT,                -- step whose time window holds the interval
    device INTEGER,             -- GPU index
    class VARCHAR,              -- any (all GPU work) | compute | communication
    ts_ns BIGINT,               -- start of a busy interval, ns
    end_ns BIGINT,              -- end, ns
    dur_ns BIGINT               -- length, ns
);

-- Idle gaps of each GPU inside a step (between busy intervals, or at the step's ends), with their likely cause.
CREATE TABLE gpu_idle_gaps (
    rank INTEGER,               -- global rank
    step BIGINT,                -- step holding the gap
    device INTEGER,             -- GPU index
    ts_ns BIGINT,               -- gap start, ns
    end_ns BIGINT,              -- gap end, ns
    dur_ns BIGINT,              -- gap length, ns
    next_launch_ts_ns BIGINT,   -- when the host launched the work that ends the gap (NULL at the step end)
    data_wait_ns DOUBLE,        -- part of the gap while the training loop waits for the DataLoader, ns
    comm_wait_ns DOUBLE,        -- part of the gap while the training loop is blocked in a host-run (gloo) collective or send / recv in flight (phases comm_exposed, pipeline_wait), ns
    cause VARCHAR               -- data_wait (mostly during the DataLoader wait) | comm_wait (mostly while the loop is blocked in a host-run collective or send / recv, e.g. gloo on CUDA tensors: the communication findings report it) | sync (the host waited on the GPU, e.g. .item()) | host_launch (the next work was launched only after the GPU went idle) | other (e.g. waiting for an event or another stream)
);

-- GPU busy time and communication/compute overlap per (rank, step); NULL columns on ranks without GPU work.
CREATE TABLE step_gpu (
    rank INTEGER,               -- global rank
    step BIGINT,                -- ProfilerStep N
    dur_ns BIGINT,              -- step duration, ns
    devices BIGINT,             -- GPUs with work in the step (NULL: no GPU work)
    busy_ns DOUBLE,             -- time a GPU runs anything (union over streams), ns, averaged over devices
    compute_ns DOUBLE,          -- time a GPU runs compute kernels, ns
    comm_ns DOUBLE,             -- time a GPU runs communication kernels, ns
    comm_overlapped_ns DOUBLE   -- communication time with a compute kernel running at the same time, ns
);

-- Per (rank, step, region): the rank's time inside each record_function range and host op of its training-loop thread, its own part and its idle part.
CREATE TABLE step_regions (
    rank INTEGER,               -- global rank
    step BIGINT,                -- ProfilerStep N holding the instances' starts
    kind VARCHAR,               -- annotation (a record_function / user annotation range) | op (a host operator)
    name VARCHAR,               -- the annotation's or operator's name, e.g. 'data.fetch_batch', 'aten::mm'
    calls_count BIGINT,         -- instances on the training-loop thread in the step
    time_ns DOUBLE,             -- time inside the region: the instances' durations summed, ns
    self_ns DOUBLE,             -- the part not inside a nested region of the same kind (annotation in annotation, op in op: cpu_ops.self_ns, annotations.self_ns), ns
    idle_ns DOUBLE              -- the part where no op, runtime call, collective or kernel of the rank runs (always 0 for an op), ns
);

-- One row per outermost op with a FLOP formula, and per other op that launched compute kernels.
CREATE TABLE op_flops (
    rank INTEGER,               -- global rank
    step BIGINT,                -- step holding the op's start (for kernels without a known op: the step that launched them)
    ts_ns BIGINT,               -- op start on the host, ns (NULL for kernels whose launching op is not in the trace)
    dur_ns BIGINT,              -- op duration on the host, ns
    name VARCHAR,               -- operator name, e.g. 'aten::linear' (the outermost op with a formula); NULL when the launching op is not in the trace
    tid VARCHAR,                -- host thread
    external_id BIGINT,         -- External id of the op
    family VARCHAR,             -- formula used: mm, addmm, bmm, baddbmm, matmul, linear, conv, conv_backward, sdpa, flash, sdpa_backward, flash_backward, norm, norm_backward, softmax, softmax_backward, embedding, embedding_dense_backward, elementwise, elementwise2; NULL: no formula for this op
    dtype VARCHAR,              -- compute precision class of its inputs: fp64, fp32, fp16, bf16, fp8 (NULL when not recorded)
    flops BIGINT,               -- floating-point operations by the formula (a multiply-add is 2); NULL when the op has no formula or its shapes were not recorded (record_shapes=False) or are odd
    bytes BIGINT,               -- least bytes it must read and write (inputs once, output once); NULL when unknown
    kernel_ns BIGINT,           -- GPU time of the compute kernels it launched, ns (NULL: none)
    kernel_count BIGINT,        -- compute kernels it launched
    tflops DOUBLE               -- achieved rate on the GPU: flops / kernel_ns, TFLOP/s
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
    key VARCHAR,                -- 'schema_version', 'tool_version', 'rank_selection', 'target', 'fingerprint' (a hash of the traces' paths, sizes, modification times and ranks, the rank selection, the shard folder and the version; empty when a rank is missing: never reused), 'listing' (the same without the ranks, from the folder's listing alone: a re-run that matches it reads no trace), 'shards', 'storage' ('tables' or 'views'), 'shard_folders' (views: JSON list of the rank folders they read), 'shard_manifests' (views: one xxh3_128 hash of the shards' manifests it was built from: a re-run over the same manifests checks the files' hashes alone), 'macros' (a hash of the macros it stores: when it is this version's, a connection uses them as stored)
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
