-- Phases of every step on every rank, as intervals on the training-loop thread's timeline, by
-- time: what the loop is doing at each moment, whatever range encloses it.
--
-- A moment of a step gets the first matching label of:
--   waiting       the loop waits for a host-run (gloo) collective it issued: from the end of its
--                 c10d:: call to the end of the collective, less what the loop starts meanwhile
--                 (merged with the 1 ms tolerance) -> comm_exposed
--   comm_call     a host call into a collective (c10d::*, record_param_comms, nccl:*, the
--                 functional collectives' ops and their wait_tensor) -> comm_exposed
--   p2p_call      a send / recv call (c10d::send, c10d::recv_) -> pipeline_wait
--   data_wait     a data range (is_data_range: the DataLoader's iterator, a user range named
--                 for data)
--   h2d, optimizer, backward (autograd nodes)
--   forward       an op (never a user range: a record_function range is a container, the time
--                 inside it is what runs inside it) before the step's last backward op ends
--   host_other    an op after it -> other
--   inflight      a collective in flight while the loop runs nothing -> comm_exposed
--   p2p_inflight  a send / recv in flight (gloo's gloo:send / gloo:recv ranges: an isend's range
--                 stays open until the peer receives, so it is blocked time only where the loop
--                 runs nothing) -> pipeline_wait
--   nothing       idle -> other, with phase_intervals.idle set
-- So a recv blocked inside `## forward ##`, `Forward i` or any record_function is pipeline_wait,
-- a sleep inside a user range is idle, and a collective's wait inside FSDP's ranges or an autograd
-- node is comm_exposed. On GPU jobs a kernel does not block the thread that launched it: the host
-- blocks only in a sync call, an op of its own.

-- The training-loop thread of each rank: the thread that records ProfilerStep#N, else the busiest CPU thread.
CREATE OR REPLACE TABLE main_threads AS
WITH marked AS (
    SELECT rank, tid, count(*) AS n
    FROM raw_events
    WHERE ph = 'X' AND name LIKE 'ProfilerStep#%' AND coalesce(cat, '') <> 'gpu_user_annotation'
    GROUP BY rank, tid
),
busiest AS (
    SELECT rank, tid, sum(dur_ns) AS n FROM cpu_ops GROUP BY rank, tid
)
SELECT
    r.rank,                                 -- global rank
    coalesce((SELECT first(m.tid ORDER BY m.n DESC, m.tid) FROM marked AS m WHERE m.rank = r.rank),
             (SELECT first(b.tid ORDER BY b.n DESC, b.tid) FROM busiest AS b WHERE b.rank = r.rank)) AS tid  -- thread id of the training loop
FROM ranks AS r;

CREATE OR REPLACE TEMP TABLE _host_events AS
SELECT c.rank, c.step, c.name, c.tid, c.ts_ns, c.end_ns, c.external_id, c.tid = m.tid AS on_main, true AS is_op
FROM cpu_ops AS c JOIN main_threads AS m USING (rank)
WHERE c.step IS NOT NULL
UNION ALL
SELECT a.rank, a.step, a.name, a.tid, a.ts_ns, a.end_ns, a.external_id, a.tid = m.tid, false
FROM annotations AS a JOIN main_threads AS m USING (rank)
WHERE NOT a.on_gpu AND a.step IS NOT NULL;

CREATE OR REPLACE TEMP TABLE _marks AS
WITH named AS (
    SELECT *,
        CASE
            WHEN on_main AND is_op AND name IN ('c10d::send', 'c10d::recv_', 'c10d::recv_any_source_', 'nccl:send', 'nccl:recv') THEN 'p2p_call'
            WHEN on_main AND is_op AND (name LIKE 'c10d::%' OR name = 'record_param_comms' OR name LIKE 'nccl:%'
                                        OR name LIKE '_c10d_functional::%' OR name LIKE 'c10d_functional::%') THEN 'comm_call'
            WHEN is_data_range(name, NOT is_op) THEN 'data_wait'
            WHEN name LIKE 'Optimizer.step#%' OR name LIKE 'Optimizer.zero_grad#%' THEN 'optimizer'
            WHEN is_op AND (name LIKE 'autograd::engine::evaluate_function:%'
                            OR regexp_matches(name, '^[A-Za-z0-9_]+Backward[0-9]*$')) THEN 'backward'
        END AS mark
    FROM _host_events
    WHERE name NOT LIKE 'ProfilerStep#%' AND name NOT LIKE 'gloo:%'
),
h2d_calls AS (   -- runtime calls on the training-loop thread that queued a host-to-device copy
    SELECT r.rank, r.step, r.ts_ns, r.end_ns, r.external_id
    FROM runtime AS r
    JOIN main_threads AS m ON m.rank = r.rank AND m.tid = r.tid
    JOIN kernels AS k ON k.rank = r.rank AND k.correlation = r.correlation
    WHERE k.kind = 'memcpy' AND k.name LIKE '%HtoD%' AND r.step IS NOT NULL
),
h2d AS (   -- those calls and the tensor-copy ops around them (aten::to / aten::copy_)
    SELECT rank, step, ts_ns, end_ns FROM h2d_calls
    UNION
    SELECT h.rank, h.step, h.ts_ns, h.end_ns
    FROM _host_events AS h JOIN h2d_calls AS c
        ON c.rank = h.rank AND c.step = h.step AND h.ts_ns <= c.ts_ns AND h.end_ns >= c.end_ns
    WHERE h.on_main AND h.name IN ('aten::to', 'aten::_to_copy', 'aten::copy_')
),
last_backward AS (
    SELECT rank, step, max(end_ns) AS end_ns FROM named WHERE mark = 'backward' GROUP BY rank, step
),
host_ops AS (   -- unlabelled training-loop ops: forward before the last backward op ends, else other host work
    SELECT n.rank, n.step, n.ts_ns, n.end_ns,
           CASE WHEN lb.end_ns IS NULL OR n.ts_ns < lb.end_ns THEN 'forward' ELSE 'host_other' END AS mark
    FROM named AS n LEFT JOIN last_backward AS lb USING (rank, step)
    WHERE n.on_main AND n.is_op AND n.mark IS NULL
),
inflight AS (
    SELECT rank, step, ts_ns, end_ns, CASE WHEN kind = 'p2p' THEN 'p2p_inflight' ELSE 'inflight' END AS mark
    FROM collectives WHERE step IS NOT NULL
),
wait_spans AS (   -- host-run (gloo) collectives the training loop issued: from the end of its call to the collective's end
    SELECT row_number() OVER () AS span, c.rank, c.step, c.call_end_ns AS ts_ns, c.end_ns
    FROM collectives AS c JOIN main_threads AS m ON m.rank = c.rank AND m.tid = c.call_tid
    WHERE c.source = 'gloo_annotation' AND c.kind = 'collective' AND c.step IS NOT NULL AND c.end_ns > c.call_end_ns
),
span_busy AS (    -- what the loop started during the span (the span's start counts as busy: the call just ended)
    SELECT span, ts_ns, ts_ns AS end_ns FROM wait_spans
    UNION ALL
    SELECT w.span, h.ts_ns, least(h.end_ns, w.end_ns)
    FROM wait_spans AS w JOIN _host_events AS h
        ON h.rank = w.rank AND h.step = w.step AND h.on_main AND h.is_op AND h.ts_ns > w.ts_ns AND h.ts_ns < w.end_ns
),
busy_ordered AS (
    SELECT *, max(end_ns) OVER (PARTITION BY span ORDER BY ts_ns, end_ns
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM span_busy
),
busy_runs AS (    -- merged with the 1 ms tolerance of forward / backward (gaps below it are Python overhead)
    SELECT span, min(ts_ns) AS ts_ns, max(end_ns) AS end_ns
    FROM (SELECT *, sum(CASE WHEN prev_end_ns IS NULL OR ts_ns > prev_end_ns + getvariable('phase_merge_tolerance_ns') THEN 1 ELSE 0 END)
                        OVER (PARTITION BY span ORDER BY ts_ns, end_ns) AS run
          FROM busy_ordered)
    GROUP BY span, run
),
waiting AS (      -- the rest of the span: the loop waits for the collective, whatever range encloses the wait
    SELECT w.rank, w.step, b.end_ns AS ts_ns,
           coalesce(lead(b.ts_ns) OVER (PARTITION BY b.span ORDER BY b.ts_ns), w.end_ns) AS end_ns,
           'waiting' AS mark
    FROM busy_runs AS b JOIN wait_spans AS w USING (span)
)
SELECT rank, step, mark, ts_ns, end_ns FROM named WHERE mark IS NOT NULL
UNION ALL SELECT rank, step, 'h2d', ts_ns, end_ns FROM h2d
UNION ALL SELECT rank, step, mark, ts_ns, end_ns FROM host_ops
UNION ALL SELECT rank, step, mark, ts_ns, end_ns FROM inflight
UNION ALL SELECT rank, step, mark, ts_ns, end_ns FROM waiting WHERE end_ns > ts_ns;

-- each mark merged into disjoint runs (gaps below 1 ms inside forward / backward are Python overhead)
CREATE OR REPLACE TEMP TABLE _runs AS
WITH clipped AS (
    SELECT m.rank, m.step, m.mark,
           greatest(m.ts_ns, s.ts_ns) AS ts_ns, least(m.end_ns, s.end_ns) AS end_ns,
           CASE WHEN m.mark IN ('forward', 'backward') THEN getvariable('phase_merge_tolerance_ns') ELSE 0 END AS tol_ns
    FROM _marks AS m JOIN steps AS s USING (rank, step)
),
ordered AS (
    SELECT *, max(end_ns) OVER (PARTITION BY rank, step, mark ORDER BY ts_ns, end_ns
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM clipped WHERE end_ns > ts_ns
),
islands AS (
    SELECT *, sum(CASE WHEN prev_end_ns IS NULL OR ts_ns > prev_end_ns + tol_ns THEN 1 ELSE 0 END)
                  OVER (PARTITION BY rank, step, mark ORDER BY ts_ns, end_ns) AS run
    FROM ordered
)
SELECT rank, step, mark, min(ts_ns) AS ts_ns, max(end_ns) AS end_ns,
       CASE mark WHEN 'waiting' THEN 0 WHEN 'comm_call' THEN 1 WHEN 'p2p_call' THEN 2 WHEN 'data_wait' THEN 3
                 WHEN 'h2d' THEN 4 WHEN 'optimizer' THEN 5 WHEN 'backward' THEN 6 WHEN 'forward' THEN 7
                 WHEN 'host_other' THEN 8 WHEN 'inflight' THEN 9 WHEN 'p2p_inflight' THEN 10 END AS priority
FROM islands GROUP BY rank, step, mark, run;

-- One row per contiguous phase interval of a step: the timeline the report draws. Phases of a step tile it exactly.
CREATE OR REPLACE TABLE phase_intervals AS
WITH bounds AS (
    SELECT rank, step, ts_ns AS t FROM _runs
    UNION SELECT rank, step, end_ns FROM _runs
    UNION SELECT rank, step, ts_ns FROM steps
    UNION SELECT rank, step, end_ns FROM steps
),
segments AS (
    SELECT rank, step, t AS ts_ns, lead(t) OVER (PARTITION BY rank, step ORDER BY t) AS end_ns FROM bounds
),
labelled AS (
    SELECT g.rank, g.step, g.ts_ns, g.end_ns,
           CASE min(r.priority)
               WHEN 0 THEN 'comm_exposed' WHEN 1 THEN 'comm_exposed' WHEN 2 THEN 'pipeline_wait' WHEN 3 THEN 'data_wait'
               WHEN 4 THEN 'h2d' WHEN 5 THEN 'optimizer' WHEN 6 THEN 'backward' WHEN 7 THEN 'forward' WHEN 8 THEN 'other'
               WHEN 9 THEN 'comm_exposed' WHEN 10 THEN 'pipeline_wait'
               ELSE 'other' END AS phase,
           min(r.priority) IS NULL AS idle
    FROM segments AS g
    LEFT JOIN _runs AS r ON r.rank = g.rank AND r.step = g.step AND r.ts_ns <= g.ts_ns AND r.end_ns >= g.end_ns
    WHERE g.end_ns > g.ts_ns
    GROUP BY g.rank, g.step, g.ts_ns, g.end_ns
),
changes AS (
    SELECT *, CASE WHEN phase IS DISTINCT FROM lag(phase) OVER w OR idle IS DISTINCT FROM lag(idle) OVER w THEN 1 ELSE 0 END AS new_run
    FROM labelled WINDOW w AS (PARTITION BY rank, step ORDER BY ts_ns)
),
numbered AS (
    SELECT *, sum(new_run) OVER (PARTITION BY rank, step ORDER BY ts_ns) AS run FROM changes
)
SELECT
    n.rank,                                 -- global rank
    n.step,                                 -- ProfilerStep N
    n.phase,                                -- data_wait | h2d | forward | backward | optimizer | comm_exposed | pipeline_wait | other
    min(n.ts_ns) AS ts_ns,                  -- interval start, ns (rank clock)
    max(n.end_ns) AS end_ns,                -- interval end, ns
    max(n.end_ns) - min(n.ts_ns) AS dur_ns, -- interval length, ns
    min(n.ts_ns) - any_value(s.ts_ns) AS start_rel_ns,  -- start relative to the step start, ns (comparable across ranks)
    any_value(n.idle) AS idle               -- phase 'other' with nothing running on the training loop and nothing in flight (a sleep, I/O, a lock, Python that records nothing)
FROM numbered AS n JOIN steps AS s USING (rank, step)
GROUP BY n.rank, n.step, n.phase, n.run
ORDER BY n.rank, n.step, ts_ns;

-- Time per phase for every (rank, step), ns; the eight phase columns add up to dur_ns (idle_ns is a part of other_ns).
CREATE OR REPLACE TABLE step_phases AS
SELECT
    s.rank,                                 -- global rank
    s.step,                                 -- ProfilerStep N
    s.dur_ns,                               -- step duration, ns
    coalesce(sum(p.dur_ns) FILTER (WHERE p.phase = 'data_wait'), 0) AS data_wait_ns,      -- waiting for the next batch (DataLoader __next__)
    coalesce(sum(p.dur_ns) FILTER (WHERE p.phase = 'h2d'), 0) AS h2d_ns,                  -- host ops issuing host-to-device copies
    coalesce(sum(p.dur_ns) FILTER (WHERE p.phase = 'forward'), 0) AS forward_ns,          -- forward pass and loss
    coalesce(sum(p.dur_ns) FILTER (WHERE p.phase = 'backward'), 0) AS backward_ns,        -- autograd backward
    coalesce(sum(p.dur_ns) FILTER (WHERE p.phase = 'optimizer'), 0) AS optimizer_ns,      -- Optimizer.step / zero_grad
    coalesce(sum(p.dur_ns) FILTER (WHERE p.phase = 'comm_exposed'), 0) AS comm_exposed_ns, -- blocked in or waiting for a collective
    coalesce(sum(p.dur_ns) FILTER (WHERE p.phase = 'pipeline_wait'), 0) AS pipeline_wait_ns, -- blocked in a send / recv (pipeline stages handing activations and gradients over), or waiting for one
    coalesce(sum(p.dur_ns) FILTER (WHERE p.phase = 'other'), 0) AS other_ns,              -- host work outside the model, or idle
    coalesce(sum(p.dur_ns) FILTER (WHERE p.phase = 'other' AND p.idle), 0) AS idle_ns      -- the idle part of other_ns: nothing runs on the training loop, nothing in flight
FROM steps AS s LEFT JOIN phase_intervals AS p USING (rank, step)
GROUP BY s.rank, s.step, s.dur_ns
ORDER BY s.rank, s.step;

DROP TABLE _runs;
DROP TABLE _marks;
DROP TABLE _host_events;
