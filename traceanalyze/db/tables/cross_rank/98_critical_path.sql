-- The chain of work that sets each aligned step's length, crossing ranks at collectives (filled by traceanalyze/analysis/critical_path.py after the ranks are aligned).
--
-- Walked backwards from the end of the step on the rank with the longest step: the GPU work
-- ending last, then what it waited for (its launch on the host, or earlier GPU work); the host's
-- work back to where it waited for the GPU (a synchronization); at a collective, the rank that
-- arrived last. Segments are in time order; gaps between them are GPU queueing latency.
CREATE OR REPLACE TABLE critical_path (
    rank INTEGER,               -- the rank whose step end the path starts from (the longest step)
    step BIGINT,                -- ProfilerStep N (aligned steps only)
    seq INTEGER,                -- 0-based position of the segment along the path, in time order
    kind VARCHAR,               -- kernel (compute), memcpy, memset, collective (the part after the last rank arrived), host (host work: the op covering most of it names it)
    name VARCHAR,               -- kernel, collective or host op name
    ts_ns BIGINT,               -- segment start, ns, on on_rank's own clock
    dur_ns BIGINT,              -- segment duration, ns
    on_rank INTEGER             -- the rank the segment runs on
);
