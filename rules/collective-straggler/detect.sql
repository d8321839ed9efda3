-- One row per rank that reaches its step's collectives late (step-relative time) on most aligned steps.
WITH RECURSIVE job AS (
    SELECT count(*) AS n_steps, median(median_dur_ns) AS step_ns FROM aligned_steps
),
idle AS (      -- per rank and step: the most extra idle time inside one annotation (region_excess)
    SELECT rank, step, max(idle_excess_ns) AS idle_excess_ns
    FROM region_excess WHERE kind = 'annotation' GROUP BY rank, step
),
ranked AS (    -- by own lateness: a rank late because it waited at another group's collective is a victim
    SELECT l.*, a.median_dur_ns, greatest(coalesce(i.idle_excess_ns, 0), 0) AS idle_excess_ns,
           row_number() OVER (PARTITION BY l.step ORDER BY l.own_late_ns DESC, l.late_ns DESC, l.rank) AS place,
           -- the next latest rank of the step: the latest counts only by a clear margin (two ranks late alike is no straggler)
           lead(l.own_late_ns) OVER (PARTITION BY l.step ORDER BY l.own_late_ns DESC, l.late_ns DESC, l.rank) AS next_own_late_ns
    FROM step_lateness AS l JOIN aligned_steps AS a USING (step)
    LEFT JOIN idle AS i USING (rank, step)
),
caused AS (    -- each rank's cause of its lateness in a step: what it did extra first
    SELECT *, lateness_cause(input_excess_ns, compute_excess_ns, host_excess_ns, idle_excess_ns, late_ns,
                             $min_cause_share_pct) AS step_cause
    FROM ranked
    WHERE place <= 2
),
held_at AS (   -- the collectives a rank arrived last at with the others waiting for it there at least
               -- min_late_ms (their median wait)
    SELECT a.rank, a.step, a.process_group, a.op, a.op_index, o.wait_ns
    FROM collective_arrivals AS a
    JOIN (SELECT step, process_group, op, op_index, median(wait_for_last_ns) AS wait_ns
          FROM collective_arrivals WHERE wait_for_last_ns > 0 GROUP BY step, process_group, op, op_index) AS o
        ON o.step = a.step AND o.process_group = a.process_group AND o.op = a.op AND o.op_index = a.op_index
    WHERE a.wait_for_last_ns = 0 AND a.ranks_seen >= 2 AND o.wait_ns >= $min_late_ms * 1e6
),
held AS (      -- per rank and step: those collectives and the waits summed (late at several collectives of a
               -- step: an all_reduce per micro-batch, its largest lateness is one of them)
    SELECT rank, step, count(*) AS n_held, sum(wait_ns) AS held_ns FROM held_at GROUP BY rank, step
),
flagged AS (   -- the latest rank of a step (of its own making), when it is late enough, or late at several of
               -- the step's collectives that the others wait for it that long in all
    SELECT c.* FROM caused AS c LEFT JOIN held AS h USING (rank, step)
    WHERE c.place = 1 AND c.own_late_ns - coalesce(c.next_own_late_ns, 0) >= $min_late_ms * 1e6
      AND (c.own_late_ns >= greatest($min_late_ms * 1e6, $min_late_pct / 100.0 * c.median_dur_ns)
           OR (h.n_held >= 2 AND h.held_ns >= greatest($min_late_ms * 1e6, $min_late_pct / 100.0 * c.median_dur_ns)))
),
seconds AS (   -- in a late step, the next latest rank when it too is late of its own making, by the same margins
    SELECT f.rank AS culprit, c.rank, c.step, c.own_late_ns, c.step_cause
    FROM flagged AS f JOIN caused AS c ON c.step = f.step AND c.place = 2
    WHERE c.own_late_ns >= greatest($min_late_ms * 1e6, $min_late_pct / 100.0 * c.median_dur_ns)
      AND c.own_late_ns - coalesce(c.next_own_late_ns, 0) >= $min_late_ms * 1e6
),
also_late AS ( -- a second straggler: the same rank late second in min_late_steps_pct of the culprit's late steps
    SELECT culprit, arg_max({'rank': rank, 'late_ns': late_ns, 'cause': cause, 'steps': n}, (n, late_ns, -rank)) AS also
    FROM (SELECT s.culprit, s.rank, count(*) AS n, median(s.own_late_ns) AS late_ns,
                 stable_mode(list(s.step_cause ORDER BY s.step)) AS cause, any_value(c.n_late) AS n_late
          FROM seconds AS s JOIN (SELECT rank, count(*) AS n_late FROM flagged GROUP BY rank) AS c ON c.rank = s.culprit
          GROUP BY s.culprit, s.rank)
    WHERE n >= $min_late_steps_pct / 100.0 * n_late
    GROUP BY culprit
),
waits AS (     -- the other ranks' wait for the late rank, inside the same collective
    SELECT f.rank, f.step, median(a.wait_for_last_ns) AS others_wait_ns,
           rank_ranges(list(a.rank)) AS others
    FROM flagged AS f
    JOIN collective_arrivals AS a ON a.step = f.step AND a.process_group = f.process_group
        AND a.op = f.op AND a.op_index = f.op_index AND a.rank <> f.rank
    GROUP BY f.rank, f.step
),
wait_edges AS (   -- per late step, "rank to_rank waits for rank from_rank": members left waiting at a collective whose
                  -- last arrival is from_rank, and the other stages of from_rank's pipeline blocked in send / recv
    SELECT DISTINCT a1.step, a1.rank AS from_rank, a2.rank AS to_rank
    FROM collective_arrivals AS a1
    JOIN collective_arrivals AS a2 ON a2.step = a1.step AND a2.process_group = a1.process_group AND a2.op = a1.op
        AND a2.op_index = a1.op_index AND a2.rank <> a1.rank AND a2.wait_for_last_ns >= $min_late_ms * 1e6
    WHERE a1.wait_for_last_ns = 0 AND a1.ranks_seen >= 2 AND a1.step IN (SELECT step FROM flagged)
    UNION
    SELECT sp.step, s1.rank, s2.rank
    FROM pipeline_stages AS s1
    JOIN pipeline_stages AS s2 ON s2.pipeline = s1.pipeline AND s2.rank <> s1.rank
    JOIN step_phases AS sp ON sp.rank = s2.rank AND sp.pipeline_wait_ns >= $min_late_ms * 1e6
    WHERE sp.step IN (SELECT step FROM flagged)
),
reach(culprit, step, rank) AS (   -- who waits for the late rank in its late steps, through every group
    SELECT rank, step, rank FROM flagged
    UNION
    SELECT r.culprit, r.step, e.to_rank
    FROM reach AS r JOIN wait_edges AS e ON e.step = r.step AND e.from_rank = r.rank
),
waiting_closure AS (   -- the ranks that wait for it in at least half of its late steps
    SELECT culprit AS rank, list(rank ORDER BY rank) AS waiting_ranks
    FROM (SELECT r.culprit, r.rank, count(*) AS n, any_value(c.n_late) AS n_late
          FROM reach AS r JOIN (SELECT rank, count(*) AS n_late FROM flagged GROUP BY rank) AS c ON c.rank = r.culprit
          WHERE r.rank <> r.culprit GROUP BY r.culprit, r.rank)
    WHERE 2 * n >= n_late
    GROUP BY culprit
),
pipe_first AS (   -- a culprit in a pipeline whose other stages wait for it in send / recv before any collective: they
                  -- wait longer there than the ranks of the same stage in the other pipelines (who do not wait for it)
    SELECT sc.rank, any_value(sc.pipeline) AS pipeline, any_value(sc.pipeline_ranks) AS pipeline_ranks
    FROM (SELECT rank, step FROM flagged) AS f
    JOIN pipeline_stages AS sc ON sc.rank = f.rank
    JOIN pipeline_stages AS sr ON sr.pipeline = sc.pipeline AND sr.rank <> sc.rank
    JOIN step_phases AS pr ON pr.rank = sr.rank AND pr.step = f.step
    JOIN (SELECT so.stage, so.pipeline, po.step, po.pipeline_wait_ns
          FROM step_phases AS po JOIN pipeline_stages AS so USING (rank)) AS o
        ON o.stage = sr.stage AND o.pipeline <> sc.pipeline AND o.step = f.step
    GROUP BY sc.rank, sr.rank
    HAVING avg(pr.pipeline_wait_ns) - median(o.pipeline_wait_ns) >= $min_late_ms * 1e6
),
per_rank AS (
    SELECT f.rank, count(*) AS late_steps, list(f.step ORDER BY f.step) AS steps,
           sum(f.late_ns) AS late_sum_ns, avg(f.late_ns) AS late_mean_ns,
           stable_mode(list(f.step_cause)) AS cause, stable_mode(list(f.op)) AS op,
           median(f.input_excess_ns) AS input_excess_ns, median(f.compute_excess_ns) AS compute_excess_ns,
           median(f.host_excess_ns) AS host_excess_ns, median(f.idle_excess_ns) AS idle_excess_ns,
           list(f.step) AS late_steps_list,
           avg(w.others_wait_ns) AS others_wait_ns, stable_mode(list(w.others)) AS others,
           stable_mode(list(f.process_group)) AS process_group
    FROM flagged AS f LEFT JOIN waits AS w USING (rank, step)
    GROUP BY f.rank
),
last_at AS (   -- collective instances of the late rank's steps where it arrived last (what its groups waited for)
    SELECT a.rank AS culprit, a.step, a.process_group, a.op, a.op_index
    FROM collective_arrivals AS a JOIN flagged AS f ON f.rank = a.rank AND f.step = a.step
    WHERE a.wait_for_last_ns = 0 AND a.ranks_seen >= 2
),
wait_spans AS (   -- the other members' waits for the late rank at those instances, as time spans
    SELECT l.culprit, l.process_group, a.rank, a.step, a.ts_ns, a.ts_ns + a.wait_for_last_ns AS end_ns
    FROM last_at AS l
    JOIN collective_arrivals AS a ON a.step = l.step AND a.process_group = l.process_group AND a.op = l.op
        AND a.op_index = l.op_index AND a.rank <> l.culprit AND a.wait_for_last_ns > 0
),
wait_covered AS (  -- per waiting rank and step: the union of its spans (collectives in flight together wait once)
    SELECT culprit, process_group, rank, step,
           sum(greatest(0, end_ns - greatest(ts_ns, coalesce(prev_end_ns, ts_ns)))) AS wait_ns
    FROM (SELECT *, max(end_ns) OVER (PARTITION BY culprit, process_group, rank, step ORDER BY ts_ns, end_ns
                                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
          FROM wait_spans)
    GROUP BY culprit, process_group, rank, step
),
group_waits AS (  -- per group of the late rank: its other members' mean wait for it there per late step
    SELECT culprit, process_group, list(DISTINCT rank ORDER BY rank) AS waiting, avg(wait_ns) AS wait_ns
    FROM wait_covered
    GROUP BY culprit, process_group
),
recurring AS (    -- a rank late at several collectives of each step (a gradient all_reduce per micro-batch, a
                  -- slow read before each): its largest lateness is one of them, the others wait at each; the
                  -- step's cost is their wait, when it is over twice that lateness
    SELECT h.rank, any_value(w.wait_ns) AS wait_ns, round(count(*) / count(DISTINCT h.step)) AS per_step
    FROM held_at AS h
    JOIN (SELECT DISTINCT rank, step FROM flagged) AS f USING (rank, step)
    JOIN (SELECT culprit AS rank, max(wait_ns) AS wait_ns FROM group_waits GROUP BY culprit) AS w USING (rank)
    JOIN per_rank AS p USING (rank)
    WHERE w.wait_ns >= 2 * p.late_mean_ns
    GROUP BY h.rank
),
by_group AS (
    SELECT g.culprit AS rank,
           list({'group': g.process_group, 'dimension': pg.dimension, 'waiting_ranks': g.waiting,
                 'wait_ms': round(g.wait_ns / 1e6, 3)} ORDER BY g.wait_ns DESC, g.process_group) AS waits
    FROM group_waits AS g LEFT JOIN arrival_groups AS pg ON pg.process_group = g.process_group
    GROUP BY g.culprit
),
regions AS (   -- the late rank's code regions over its late steps (a late step without the region counts 0)
    SELECT p.rank, x.kind, x.name,
           sum(x.excess_ns) / p.late_steps AS excess_ns, sum(x.self_excess_ns) / p.late_steps AS self_excess_ns,
           sum(x.idle_ns) AS idle_ns, sum(x.time_ns) AS time_ns, p.late_mean_ns
    FROM per_rank AS p JOIN region_excess AS x ON x.rank = p.rank AND list_contains(p.late_steps_list, x.step)
    GROUP BY p.rank, x.kind, x.name, p.late_steps, p.late_mean_ns
),
region AS (    -- the region holding the extra time: it covers min_cause_share_pct of the lateness; an
               -- annotation before an op, then the largest own excess (the innermost region), then the name
    SELECT rank, arg_max({'name': name, 'kind': kind, 'excess_ms_per_step': round(excess_ns / 1e6, 3),
                          'idle_pct': round(100.0 * idle_ns / greatest(time_ns, 1), 1),
                          'idle': 100.0 * idle_ns / greatest(time_ns, 1) >= $min_cause_share_pct},
                         ((kind = 'annotation')::INT, self_excess_ns, name)) AS region
    FROM regions WHERE excess_ns >= $min_cause_share_pct / 100.0 * late_mean_ns
    GROUP BY rank
)
SELECT
    [p.rank] AS ranks,
    p.steps,
    coalesce(rc.wait_ns * p.late_steps, p.late_sum_ns) / j.n_steps / 1e6 AS ms_per_step,
    100.0 * coalesce(rc.wait_ns * p.late_steps, p.late_sum_ns) / j.n_steps / j.step_ns AS pct_of_step,
    CASE WHEN 100.0 * coalesce(rc.wait_ns * p.late_steps, p.late_sum_ns) / j.n_steps / j.step_ns >= $error_pct
         THEN 'error' ELSE 'warning' END AS severity,
    p.rank,
    p.cause,
    r.region,
    region_note(r.region, 'late step') AS region_note,
    region_advice(r.region, 'late step') AS region_advice,
    p.op,
    p.late_mean_ns / 1e6 AS late_ms,
    p.others,
    p.others_wait_ns / 1e6 AS others_wait_ms,
    p.input_excess_ns / 1e6 AS input_excess_ms,
    p.compute_excess_ns / 1e6 AS compute_excess_ms,
    p.host_excess_ns / 1e6 AS host_excess_ms,
    CASE p.cause WHEN 'input' THEN p.input_excess_ns WHEN 'compute' THEN p.compute_excess_ns
                 WHEN 'host' THEN greatest(p.host_excess_ns, p.idle_excess_ns) END / 1e6 AS cause_excess_ms,
    CASE WHEN CASE p.cause WHEN 'input' THEN p.input_excess_ns WHEN 'compute' THEN p.compute_excess_ns
                           WHEN 'host' THEN greatest(p.host_excess_ns, p.idle_excess_ns) END - p.late_mean_ns >= 1e6
         THEN '; it makes up ' || printf('%.0f', (CASE p.cause WHEN 'input' THEN p.input_excess_ns WHEN 'compute' THEN p.compute_excess_ns
                           WHEN 'host' THEN greatest(p.host_excess_ns, p.idle_excess_ns) END - p.late_mean_ns) / 1e6)
              || ' ms of it elsewhere before the ' || p.op || ', so it is late by ' || printf('%.0f', p.late_mean_ns / 1e6) || ' ms'
         ELSE '' END AS catch_up_note,
    p.late_steps AS late_steps_count,
    j.n_steps AS aligned_steps_count,
    j.step_ns / 1e6 AS median_step_ms,
    CASE WHEN pf.rank IS NOT NULL THEN {'name': 'pipeline ' || pf.pipeline, 'ranks': pf.pipeline_ranks, 'dimension': 'pipeline'}
         ELSE {'name': p.process_group, 'ranks': pg.ranks, 'dimension': pg.dimension} END AS "group",
    coalesce(b.waits, []) AS waiting_by_group,
    coalesce(wc.waiting_ranks, []) AS waiting_ranks,
    coalesce(rank_ranges(wc.waiting_ranks), p.others) AS waiting_text,
    -- 'ranks 0-3,5 wait' / 'rank 5 waits': the message's subject and verb
    CASE WHEN regexp_matches(coalesce(rank_ranges(wc.waiting_ranks), p.others), '[-,]')
         THEN 'ranks ' || coalesce(rank_ranges(wc.waiting_ranks), p.others) || ' wait'
         ELSE 'rank ' || coalesce(rank_ranges(wc.waiting_ranks), p.others) || ' waits' END AS waiting_clause,
    rc.per_step AS late_collectives_per_step,
    CASE WHEN rc.rank IS NOT NULL
         THEN ' at ' || rc.per_step::BIGINT || ' ' || p.op || 's per step, ' || printf('%.0f', rc.wait_ns / 1e6) || ' ms in all'
         ELSE '' END AS recurring_note,
    CASE WHEN al.culprit IS NOT NULL THEN {'rank': al.also.rank, 'late_ms': round(al.also.late_ns / 1e6, 3),
                                           'cause': al.also.cause, 'late_steps': al.also.steps} END AS also_late,
    CASE WHEN al.culprit IS NOT NULL
         THEN '; rank ' || al.also.rank || ' is late too, by ' || printf('%.0f', al.also.late_ns / 1e6) || ' ms on '
              || al.also.steps || ' of these steps (cause: ' || al.also.cause || '): the next to hold the job back'
         ELSE '' END AS also_late_note,
    st.stage,
    st.stages,
    st.pipeline_ranks,
    coalesce((SELECT count(*) FROM pipeline_stages AS o WHERE o.stage = st.stage AND o.rank <> p.rank), 0) > 0 AS has_stage_peers,
    CASE WHEN pg.size < (SELECT count(*) FROM ranks) THEN ' of the ' || group_phrase(pg.dimension, pg.ranks)
         ELSE '' END
    || CASE WHEN pf.rank IS NOT NULL THEN ' (its pipeline, ranks ' || rank_ranges(pf.pipeline_ranks) || ', waits for it first)'
            ELSE '' END AS group_text
FROM per_rank AS p CROSS JOIN job AS j
LEFT JOIN arrival_groups AS pg ON pg.process_group = p.process_group
LEFT JOIN by_group AS b ON b.rank = p.rank
LEFT JOIN waiting_closure AS wc ON wc.rank = p.rank
LEFT JOIN pipeline_stages AS st ON st.rank = p.rank
LEFT JOIN (SELECT DISTINCT rank, pipeline, pipeline_ranks FROM pipe_first) AS pf ON pf.rank = p.rank
    -- (only where its lateness shows first at a data-parallel collective: the step's end, after the pipeline;
    -- a tensor-parallel collective inside forward comes before any stage waits)
    AND coalesce(pg.dimension, 'data') IN ('data', 'fsdp', 'world')
LEFT JOIN region AS r ON r.rank = p.rank
LEFT JOIN also_late AS al ON al.culprit = p.rank
LEFT JOIN recurring AS rc ON rc.rank = p.rank
WHERE p.late_steps >= $min_late_steps_pct / 100.0 * j.n_steps
ORDER BY ms_per_step DESC;
