-- One row when the gradient all-reduce runs after backward instead of under it, on every rank.
WITH backward AS (
    SELECT rank, step, min(ts_ns) AS bwd_start_ns, max(end_ns) AS bwd_end_ns FROM phase_intervals WHERE phase = 'backward' GROUP BY rank, step
),
host_calls AS (   -- all-reduce calls on the training-loop thread (gloo collectives run on another thread)
    SELECT c.rank, c.ts_ns FROM cpu_ops AS c JOIN main_threads AS m ON m.rank = c.rank AND m.tid = c.tid
    WHERE c.name LIKE 'c10d::allreduce%'
),
called AS (       -- when each all-reduce was issued: kernel launch, record_param_comms, or the last c10d call before it
    SELECT a.*, coalesce(k.launch_ts_ns, CASE WHEN a.source = 'record_param_comms' THEN a.ts_ns END, h.ts_ns) AS call_ts_ns
    FROM collectives AS a
    ASOF LEFT JOIN host_calls AS h ON h.rank = a.rank AND a.ts_ns >= h.ts_ns
    LEFT JOIN kernels AS k ON a.source = 'nccl_kernel' AND k.rank = a.rank AND k.ts_ns = a.ts_ns AND k.kind = 'communication'
    WHERE a.op = 'all_reduce' AND a.step IN (SELECT step FROM aligned_steps)
),
gradient AS (     -- issued during backward: DDP's gradient buckets (an explicit all_reduce after backward is not)
    SELECT c.*, b.bwd_end_ns, coalesce(a.min_dur_ns, c.dur_ns) AS transfer_ns  -- transfer: the time of the rank that did not wait
    FROM called AS c
    JOIN backward AS b USING (rank, step)
    LEFT JOIN collective_arrivals AS a ON a.rank = c.rank AND a.ts_ns = c.ts_ns AND a.op = c.op
    WHERE c.call_ts_ns >= b.bwd_start_ns AND c.call_ts_ns <= b.bwd_end_ns   -- between backward's first and last op (a call is a phase of its own)
),
gpu_exposed AS (  -- GPU: communication-kernel time with no compute kernel running
    SELECT g.rank, g.step, sum(g.dur_ns - coalesce((
               SELECT sum(least(g.end_ns, i.end_ns) - greatest(g.ts_ns, i.ts_ns)) FROM gpu_busy_intervals AS i
               WHERE i.rank = g.rank AND i.class = 'compute' AND i.ts_ns < g.end_ns AND i.end_ns > g.ts_ns), 0)) AS ns
    FROM gradient AS g WHERE g.source = 'nccl_kernel' GROUP BY g.rank, g.step
),
host_exposed AS ( -- CPU: the training loop blocked after backward until the last gradient bucket is reduced
    SELECT g.rank, g.step, sum(greatest(0, least(p.end_ns, g.ar_end_ns) - greatest(p.ts_ns, g.bwd_end_ns))) AS ns
    FROM (SELECT rank, step, any_value(bwd_end_ns) AS bwd_end_ns, max(end_ns) AS ar_end_ns
          FROM gradient WHERE source <> 'nccl_kernel' GROUP BY rank, step) AS g
    JOIN phase_intervals AS p ON p.rank = g.rank AND p.step = g.step AND p.phase = 'comm_exposed'
        AND p.end_ns > g.bwd_end_ns AND p.ts_ns < g.ar_end_ns
    GROUP BY g.rank, g.step
),
per_rank_step AS ( -- exposure beyond what cannot be hidden (all-reduce longer than backward)
    SELECT g.rank, g.step, any_value(p.dur_ns) AS dur_ns, any_value(p.backward_ns) AS backward_ns,
           sum(g.transfer_ns) AS allreduce_ns,
           coalesce(any_value(ge.ns), any_value(he.ns), 0) AS exposed_ns
    FROM gradient AS g JOIN step_phases AS p USING (rank, step)
    LEFT JOIN gpu_exposed AS ge USING (rank, step) LEFT JOIN host_exposed AS he USING (rank, step)
    GROUP BY g.rank, g.step
),
hideable AS (
    SELECT *, greatest(0, exposed_ns - greatest(0, allreduce_ns - backward_ns)) AS avoidable_ns
    FROM per_rank_step
),
per_step AS (     -- the least exposed rank: its exposure is not waiting for anyone
    SELECT step, min(avoidable_ns) AS avoidable_ns,
           arg_min(exposed_ns, [avoidable_ns, exposed_ns, allreduce_ns, backward_ns]) AS exposed_ns,
           arg_min(allreduce_ns, [avoidable_ns, exposed_ns, allreduce_ns, backward_ns]) AS allreduce_ns,
           arg_min(backward_ns, [avoidable_ns, exposed_ns, allreduce_ns, backward_ns]) AS backward_ns,
           median(dur_ns) AS dur_ns
    FROM hideable GROUP BY step
    HAVING count(*) = (SELECT count(*) FROM ranks)
),
job AS (
    SELECT list(step ORDER BY step) AS steps, median(avoidable_ns) AS avoidable_ns, median(exposed_ns) AS exposed_ns,
           median(allreduce_ns) AS allreduce_ns, median(backward_ns) AS backward_ns, median(dur_ns) AS step_ns,
           100.0 * median(avoidable_ns / dur_ns) AS avoidable_pct,
           100.0 * median(exposed_ns / nullif(allreduce_ns, 0)) AS exposed_share_pct
    FROM per_step
)
SELECT
    (SELECT list(rank ORDER BY rank) FROM ranks) AS ranks,
    steps,
    avoidable_ns / 1e6 AS ms_per_step,
    avoidable_pct AS pct_of_step,
    exposed_ns / 1e6 AS exposed_ms,
    allreduce_ns / 1e6 AS allreduce_ms,
    backward_ns / 1e6 AS backward_ms,
    avoidable_ns / 1e6 AS avoidable_ms,
    exposed_share_pct,
    step_ns / 1e6 AS median_step_ms
FROM job
WHERE avoidable_pct >= $min_exposed_pct AND exposed_share_pct >= $min_exposed_share_pct;
