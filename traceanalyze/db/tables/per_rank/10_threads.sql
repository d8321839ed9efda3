-- Process and thread names from metadata events (ph = 'M').
CREATE OR REPLACE TABLE threads AS
SELECT
    rank,                                   -- global rank
    pid,                                    -- process id (GPU events: device number) as text
    tid,                                    -- thread id (GPU events: stream) as text
    min(label) FILTER (WHERE name = 'thread_name') AS thread_name,   -- e.g. 'thread 6039 (pt_gloo_runloop)'
    min(label) FILTER (WHERE name = 'process_name') AS process_name  -- e.g. 'python3'
FROM raw_events
WHERE ph = 'M' AND name IN ('thread_name', 'process_name')
GROUP BY rank, pid, tid;
