-- GPU activity inside each step window: busy time, idle gaps and communication/compute overlap (empty on CPU-only traces).

-- GPU work merged into disjoint busy intervals per (rank, device, class) and clipped to the step windows.
-- Kernels of a CUPTI range profiler (kernels.counters) have no measured times: they are left out.
CREATE OR REPLACE TABLE gpu_busy_intervals AS
WITH bounded AS (   -- the last step starting at or before a kernel's start, and the last one starting before its end
    SELECT k.rank, k.device, k.kind, k.ts_ns, k.end_ns,
           lo.step AS lo_step, lo.ts_ns AS lo_ts_ns, lo.end_ns AS lo_end_ns, hi.step AS hi_step
    FROM (SELECT * FROM kernels WHERE counters IS NULL) AS k
    ASOF LEFT JOIN steps AS lo ON lo.rank = k.rank AND k.ts_ns >= lo.ts_ns
    ASOF LEFT JOIN steps AS hi ON hi.rank = k.rank AND k.end_ns > hi.ts_ns
),
in_steps AS (   -- (kernel, step) overlaps: one lookup for a kernel inside one step, a range join for the few that cross a step boundary
    SELECT rank, device, kind, ts_ns, end_ns, lo_step AS step, lo_ts_ns AS step_ts_ns, lo_end_ns AS step_end_ns
    FROM bounded WHERE lo_step = hi_step AND ts_ns < lo_end_ns
    UNION ALL
    SELECT b.rank, b.device, b.kind, b.ts_ns, b.end_ns, s.step, s.ts_ns, s.end_ns
    FROM bounded AS b JOIN steps AS s ON s.rank = b.rank AND b.ts_ns < s.end_ns AND b.end_ns > s.ts_ns
    WHERE b.hi_step IS NOT NULL AND b.lo_step IS DISTINCT FROM b.hi_step
),
work AS (
    SELECT k.rank, k.step, k.device, c.class,
           greatest(k.ts_ns, k.step_ts_ns) AS ts_ns, least(k.end_ns, k.step_end_ns) AS end_ns
    FROM in_steps AS k
    CROSS JOIN (VALUES ('any'), ('compute'), ('communication')) AS c(class)
    WHERE c.class = 'any' OR c.class = k.kind
),
ordered AS (
    SELECT *, max(end_ns) OVER (PARTITION BY rank, step, device, class ORDER BY ts_ns, end_ns
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM work WHERE end_ns > ts_ns
),
islands AS (
    SELECT *, sum(CASE WHEN prev_end_ns IS NULL OR ts_ns > prev_end_ns THEN 1 ELSE 0 END)
                  OVER (PARTITION BY rank, step, device, class ORDER BY ts_ns, end_ns) AS run
    FROM ordered
)
SELECT
    rank,                                   -- global rank
    step,                                   -- step whose time window holds the interval
    device,                                 -- GPU index
    class,                                  -- any (all GPU work) | compute | communication
    min(ts_ns) AS ts_ns,                    -- start of a busy interval, ns
    max(end_ns) AS end_ns,                  -- end, ns
    max(end_ns) - min(ts_ns) AS dur_ns      -- length, ns
FROM islands
GROUP BY rank, step, device, class, run
ORDER BY rank, step, device, class, ts_ns;

-- Idle gaps of each GPU inside a step (between busy intervals, or at the step's ends), with their likely cause.
CREATE OR REPLACE TABLE gpu_idle_gaps AS
WITH busy AS (
    SELECT b.*, s.ts_ns AS step_ts_ns, s.end_ns AS step_end_ns,
           lag(b.end_ns) OVER (PARTITION BY b.rank, b.step, b.device ORDER BY b.ts_ns) AS prev_end_ns,
           lead(b.ts_ns) OVER (PARTITION BY b.rank, b.step, b.device ORDER BY b.ts_ns) AS next_ts_ns
    FROM gpu_busy_intervals AS b JOIN steps AS s USING (rank, step)
    WHERE b.class = 'any'
),
gaps AS (
    SELECT rank, step, device, coalesce(prev_end_ns, step_ts_ns) AS ts_ns, ts_ns AS end_ns FROM busy
    UNION ALL
    SELECT rank, step, device, end_ns, step_end_ns FROM busy WHERE next_ts_ns IS NULL
),
launches AS (   -- when the host launched the work that starts at a given time on a device
    SELECT rank, device, ts_ns, min(launch_ts_ns) AS launch_ts_ns FROM kernels WHERE counters IS NULL
    GROUP BY rank, device, ts_ns
),
sync_calls AS (   -- host calls that wait for the GPU, with the latest end among the calls started so far
    SELECT rank, ts_ns, max(end_ns) OVER (PARTITION BY rank ORDER BY ts_ns RANGE UNBOUNDED PRECEDING) AS max_end_ns
    FROM runtime WHERE is_sync AND name NOT LIKE '%Query%'
),
described AS (
    SELECT g.*,
        l.launch_ts_ns AS next_launch_ts_ns,
        coalesce((SELECT sum(least(p.end_ns, g.end_ns) - greatest(p.ts_ns, g.ts_ns)) FROM phase_intervals AS p
                  WHERE p.rank = g.rank AND p.step = g.step AND p.phase = 'data_wait'
                    AND p.ts_ns < g.end_ns AND p.end_ns > g.ts_ns), 0) AS data_wait_ns,
        -- (only while a host-run collective is in flight: an NCCL call on the host only launches a kernel)
        CASE WHEN EXISTS (SELECT 1 FROM collectives AS c
                          WHERE c.rank = g.rank AND c.source = 'gloo_annotation'
                            AND c.ts_ns < g.end_ns AND c.end_ns > g.ts_ns)
        THEN coalesce((SELECT sum(least(p.end_ns, g.end_ns) - greatest(p.ts_ns, g.ts_ns)) FROM phase_intervals AS p
                       WHERE p.rank = g.rank AND p.step = g.step AND p.phase IN ('comm_exposed', 'pipeline_wait')
                         AND p.ts_ns < g.end_ns AND p.end_ns > g.ts_ns), 0)
        ELSE 0 END AS comm_wait_ns,
        -- a sync call overlaps the gap: among the calls started before the gap ends, one ends after it starts
        coalesce(sc.max_end_ns >= g.ts_ns, false) AS host_synced
    FROM gaps AS g
    LEFT JOIN launches AS l ON l.rank = g.rank AND l.device = g.device AND l.ts_ns = g.end_ns
    ASOF LEFT JOIN sync_calls AS sc ON sc.rank = g.rank AND g.end_ns > sc.ts_ns
    WHERE g.end_ns > g.ts_ns
)
SELECT
    rank,                                   -- global rank
    step,                                   -- step holding the gap
    device,                                 -- GPU index
    ts_ns,                                  -- gap start, ns
    end_ns,                                 -- gap end, ns
    end_ns - ts_ns AS dur_ns,               -- gap length, ns
    next_launch_ts_ns,                      -- when the host launched the work that ends the gap (NULL at the step end)
    data_wait_ns,                           -- part of the gap while the training loop waits for the DataLoader, ns
    comm_wait_ns,                           -- part of the gap while the training loop is blocked in a host-run (gloo) collective or send / recv in flight (phases comm_exposed, pipeline_wait), ns
    CASE
        WHEN data_wait_ns * 100 >= getvariable('gap_data_wait_min_share_pct') * (end_ns - ts_ns) THEN 'data_wait'
        WHEN comm_wait_ns * 100 >= getvariable('gap_comm_wait_min_share_pct') * (end_ns - ts_ns) THEN 'comm_wait'
        WHEN host_synced THEN 'sync'
        WHEN next_launch_ts_ns > ts_ns THEN 'host_launch'
        ELSE 'other'
    END AS cause                            -- data_wait (mostly during the DataLoader wait) | comm_wait (mostly while the loop is blocked in a host-run collective or send / recv, e.g. gloo on CUDA tensors: the communication findings report it) | sync (the host waited on the GPU, e.g. .item()) | host_launch (the next work was launched only after the GPU went idle) | other (e.g. waiting for an event or another stream)
FROM described
ORDER BY rank, step, device, ts_ns;

-- GPU busy time and communication/compute overlap per (rank, step); NULL columns on ranks without GPU work.
CREATE OR REPLACE TABLE step_gpu AS
WITH sums AS (
    SELECT rank, step,
           sum(dur_ns) FILTER (WHERE class = 'any') AS busy_ns,
           sum(dur_ns) FILTER (WHERE class = 'compute') AS compute_ns,
           sum(dur_ns) FILTER (WHERE class = 'communication') AS comm_ns,
           count(DISTINCT device) AS devices
    FROM gpu_busy_intervals GROUP BY rank, step
),
overlap AS (
    SELECT m.rank, m.step, sum(least(m.end_ns, c.end_ns) - greatest(m.ts_ns, c.ts_ns)) AS overlap_ns
    FROM gpu_busy_intervals AS m
    JOIN gpu_busy_intervals AS c ON c.rank = m.rank AND c.step = m.step AND c.device = m.device
        AND c.class = 'compute' AND c.ts_ns < m.end_ns AND c.end_ns > m.ts_ns
    WHERE m.class = 'communication'
    GROUP BY m.rank, m.step
)
SELECT
    s.rank,                                 -- global rank
    s.step,                                 -- ProfilerStep N
    s.dur_ns,                               -- step duration, ns
    u.devices,                              -- GPUs with work in the step (NULL: no GPU work)
    u.busy_ns / u.devices AS busy_ns,       -- time a GPU runs anything (union over streams), ns, averaged over devices
    u.compute_ns / u.devices AS compute_ns, -- time a GPU runs compute kernels, ns
    coalesce(u.comm_ns, 0) / u.devices AS comm_ns,                 -- time a GPU runs communication kernels, ns
    coalesce(o.overlap_ns, 0) / u.devices AS comm_overlapped_ns    -- communication time with a compute kernel running at the same time, ns
FROM steps AS s
LEFT JOIN sums AS u USING (rank, step)
LEFT JOIN overlap AS o USING (rank, step)
ORDER BY s.rank, s.step;
