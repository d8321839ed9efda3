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
