-- GPU activity: kernels, memcpy and memset, classified by kernel_classes.csv, on the step that launched them.
-- A CUPTI range profiler trace (Kineto's cuda_profiler_range events: one per kernel, its performance
-- counters as args, no correlation) reads as kernels too: the n-th range is the kernel of the rank's
-- n-th kernel launch (the order CUPTI replays them in), when the counts agree.
CREATE OR REPLACE TABLE kernels AS
WITH gpu AS (  -- only the columns used (a join carries every column it is given)
    SELECT e.rank, e.cat, e.name, e.pid, e.tid, e.ts_ns, e.dur_ns, e.device, e.stream, e.correlation,
           e.external_id, e.bytes, e.collective_name, e.in_msg_nelems, e.dtype, e.pg_name, e.group_size,
           e.pg_desc, e.pg_ranks, e.collective_seq,
           CASE WHEN e.collective_name IS NOT NULL THEN p2p_peer_arg(e.name, e.other_args) END AS peer_group_rank,
           CASE WHEN e.cat = 'cuda_profiler_range' THEN e.other_args END AS counters
    FROM raw_events AS e
    WHERE e.ph = 'X' AND e.cat IN ('kernel', 'Kernel', 'gpu_memcpy', 'Memcpy', 'gpu_memset', 'Memset', 'cuda_profiler_range')
      AND e.ts_ns IS NOT NULL AND e.dur_ns >= 0
),
ranges AS (  -- CUPTI range profiler kernels in the order they ran
    SELECT rank, ts_ns, name, row_number() OVER (PARTITION BY rank ORDER BY ts_ns, name) AS nth,
           count(*) OVER (PARTITION BY rank) AS ranges_n
    FROM gpu WHERE cat = 'cuda_profiler_range'
),
launches AS (  -- the kernel launches of the ranks that have such kernels, in order
    SELECT r.rank, r.correlation, row_number() OVER (PARTITION BY r.rank ORDER BY r.ts_ns, r.correlation) AS nth,
           count(*) OVER (PARTITION BY r.rank) AS launches_n
    FROM runtime AS r
    WHERE r.rank IN (SELECT rank FROM ranges) AND r.correlation IS NOT NULL
      AND regexp_matches(r.name, '^(cudaLaunchKernel|cuLaunchKernel|cudaLaunchCooperativeKernel|hipLaunchKernel|hipModuleLaunchKernel)')
),
paired AS (
    SELECT g.* REPLACE (coalesce(g.correlation, l.correlation) AS correlation)
    FROM gpu AS g
    LEFT JOIN ranges AS n ON g.cat = 'cuda_profiler_range' AND n.rank = g.rank AND n.ts_ns = g.ts_ns
        AND n.name IS NOT DISTINCT FROM g.name
    LEFT JOIN launches AS l ON l.rank = n.rank AND l.nth = n.nth AND l.launches_n = n.ranges_n
),
classified AS (  -- each distinct (cat, name) once: a trace has hundreds of kernel names, not millions
    SELECT n.cat, n.name, (SELECT c.kind FROM kernel_classes AS c
                           WHERE regexp_matches(n.cat, c.cat_regex) AND regexp_matches(n.name, c.name_regex)
                           ORDER BY c.priority LIMIT 1) AS kind
    FROM (SELECT DISTINCT cat, name FROM gpu) AS n
),
launched AS (
    SELECT g.*, k.kind, r.step AS launch_step, r.ts_ns AS launch_ts_ns
    FROM paired AS g
    JOIN classified AS k ON k.cat = g.cat AND k.name IS NOT DISTINCT FROM g.name
    LEFT JOIN runtime AS r ON r.rank = g.rank AND r.correlation = g.correlation AND g.correlation IS NOT NULL
)
SELECT
    l.rank,                                 -- global rank
    coalesce(l.launch_step, CASE WHEN l.ts_ns < s.end_ns THEN s.step END) AS step,  -- step whose CPU code launched it (correlation), else the step its time falls in
    l.kind,                                 -- compute | communication | memcpy | memset (kernel_classes.csv)
    l.name,                                 -- kernel name (may contain < > & from C++ templates)
    coalesce(l.device, TRY_CAST(l.pid AS INTEGER)) AS device,  -- GPU index
    coalesce(l.stream, TRY_CAST(l.tid AS BIGINT)) AS stream,   -- GPU stream
    l.ts_ns,                                -- start on the GPU, ns (rank's clock)
    l.dur_ns,                               -- duration, ns
    l.ts_ns + l.dur_ns AS end_ns,           -- end, ns
    l.correlation,                          -- correlation id of the launching runtime call (range profiler kernels: of the launch in the same place in launch order)
    l.external_id,                          -- External id of the launching operator
    l.launch_ts_ns,                         -- when the host launched it, ns (NULL when unknown)
    l.bytes AS copy_bytes,                  -- bytes moved (memcpy / memset)
    l.collective_name,                      -- args."Collective name" on NCCL kernels (newer torch)
    l.in_msg_nelems,                        -- args."In msg nelems"
    l.dtype,                                -- args.dtype
    l.pg_name,                              -- args."Process Group Name"
    l.group_size,                           -- args."Group size"
    group_desc(l.pg_desc) AS pg_desc,       -- args."Process Group Description", NULL when none ('undefined')
    l.pg_ranks,                             -- args."Process Group Ranks" (JSON text)
    l.collective_seq,                       -- args.Seq: the collective's sequence number in its group (newer torch)
    l.peer_group_rank,                      -- send / recv kernels: args."Dst Rank" / "Src Rank" as a rank of the process group, NULL when absent
    l.counters                              -- CUPTI range profiler kernels (cuda_profiler_range): their performance counters, JSON text {"metric": value}; their times are not measured (see docs/loading.md); NULL for other kernels
FROM launched AS l
ASOF LEFT JOIN steps AS s ON l.rank = s.rank AND l.ts_ns >= s.ts_ns;

-- Memory copies with direction and host memory kind, e.g. 'Memcpy HtoD (Pageable -> Device)'.
CREATE OR REPLACE TABLE memcpy AS
SELECT
    rank,                                   -- global rank
    step,                                   -- step that launched the copy
    name,                                   -- copy name as recorded
    nullif(regexp_extract(name, '(HtoD|DtoH|DtoD|HtoH|PtoP|DtoA|AtoD)', 1), '') AS direction,  -- HtoD, DtoH, DtoD, ...
    nullif(regexp_extract(name, '\((\w+) ->', 1), '') AS src_memory,   -- Pageable, Pinned, Device
    nullif(regexp_extract(name, '-> (\w+)\)', 1), '') AS dst_memory,   -- Device, Pageable, Pinned
    device,                                 -- GPU index
    stream,                                 -- GPU stream
    ts_ns,                                  -- start, ns
    dur_ns,                                 -- duration, ns
    end_ns,                                 -- end, ns
    copy_bytes,                             -- bytes copied
    CASE WHEN dur_ns > 0 THEN copy_bytes / dur_ns END AS gb_per_s  -- achieved bandwidth, GB/s (bytes per ns)
FROM kernels
WHERE kind = 'memcpy';
