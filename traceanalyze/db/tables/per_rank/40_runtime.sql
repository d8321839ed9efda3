-- CUDA / HIP runtime and driver calls on the host (kernel launches, memcpy calls, synchronizations).
CREATE OR REPLACE TABLE runtime AS
SELECT
    e.rank,                                 -- global rank
    CASE WHEN e.ts_ns < s.end_ns THEN s.step END AS step,  -- step holding the call
    e.name,                                 -- e.g. cudaLaunchKernel, hipMemcpyAsync, cudaDeviceSynchronize
    e.tid,                                  -- host thread
    e.ts_ns,                                -- start, ns
    e.dur_ns,                               -- duration, ns
    e.ts_ns + e.dur_ns AS end_ns,           -- end, ns
    e.correlation,                          -- links a launch to the GPU work it queued
    e.external_id,                          -- the operator that made the call
    regexp_matches(e.name, '(?i)(Synchronize|StreamWaitEvent|EventQuery|StreamQuery)') AS is_sync  -- the host waits for (or polls) the device
FROM raw_events AS e
ASOF LEFT JOIN steps AS s ON e.rank = s.rank AND e.ts_ns >= s.ts_ns
WHERE e.ph = 'X' AND e.cat IN ('cuda_runtime', 'Runtime', 'cuda_driver') AND e.ts_ns IS NOT NULL AND e.dur_ns >= 0;
