-- One row per rank that holds the other ranks back on some steps: the steps, the cause of each, the period if it repeats.
--
-- A rank holds the job back on a step when it is the rank that made the step long (step_holds), seen two ways:
-- its step time outside communication (the step minus all its exposed communication, step_waits.non_comm_ns) exceeds the
-- other ranks' median (this catches work at the END of a step, which makes the others wait at
-- the next step's first collective), or it reaches a collective late, step-relative, of its
-- own making (step_lateness.own_late_ns: not because it waited in another group's collective). The cause of each step is the phase group where its extra time outside communication lies.
-- In a pipeline a rank is compared only with the ranks of its own stage (pipeline_stages): the
-- stages run different layers, so a stage that is longer, or varies more, is no straggler
-- (pipeline-stage-imbalance and pipeline-bubble judge the stages against each other).
WITH job AS (
    SELECT count(*) AS n_steps, median(median_dur_ns) AS step_ns FROM aligned_steps
),
flagged AS (  -- the rank that held the step back most (step_holds), when by enough
    SELECT h.*,
           lateness_cause(h.input_excess_ns, h.compute_excess_ns, h.host_excess_ns, h.idle_excess_ns, h.held_ns,
                          $min_cause_share_pct) AS step_cause,
           CASE WHEN h.arrival_late_ns >= h.non_comm_excess_ns THEN 'late at a collective'
                ELSE 'step time outside communication' END AS seen_by
    FROM step_holds AS h CROSS JOIN job AS j
    WHERE h.place = 1 AND h.held_ns >= greatest($min_held_ms * 1e6, $min_held_pct / 100.0 * j.step_ns)
),
dominant AS (  -- each rank's most frequent cause over its flagged steps (a named cause before unknown)
    SELECT rank, first(step_cause ORDER BY n * 2 + (step_cause <> 'unknown')::INT DESC, step_cause) AS cause
    FROM (SELECT rank, step_cause, count(*) AS n FROM flagged GROUP BY rank, step_cause)
    GROUP BY rank
),
spaced AS (   -- the gaps between the steps of the dominant cause: the period when they are equal
    SELECT f.rank, f.step, f.step - lag(f.step) OVER (PARTITION BY f.rank ORDER BY f.step) AS gap_steps
    FROM flagged AS f JOIN dominant AS d ON d.rank = f.rank AND d.cause = f.step_cause
),
period AS (
    SELECT rank, count(*) AS n, min(gap_steps) AS min_gap, max(gap_steps) AS max_gap,
           string_agg(step::VARCHAR, ', ' ORDER BY step) AS cause_steps_text, list(step ORDER BY step) AS cause_steps
    FROM spaced GROUP BY rank
),
per_rank AS (
    SELECT f.rank, count(*) AS held_steps, list(f.step ORDER BY f.step) AS steps,
           string_agg(f.step::VARCHAR, ', ' ORDER BY f.step) AS steps_text,
           sum(f.held_ns) AS held_sum_ns, avg(f.held_ns) AS held_avg_ns, any_value(d.cause) AS cause,
           list({'step': f.step, 'held_ms': round(f.held_ns / 1e6, 3), 'cause': f.step_cause, 'seen_by': f.seen_by}
                ORDER BY f.step) AS per_step,
           any_value(pe.n) AS cause_steps_count, any_value(pe.cause_steps) AS cause_steps,
           any_value(pe.cause_steps_text) AS cause_steps_text,
           any_value(CASE WHEN pe.n >= 3 AND pe.min_gap = pe.max_gap THEN pe.min_gap END) AS period_steps,
           string_agg(CASE WHEN f.step_cause <> d.cause THEN f.step || ' (' || f.step_cause || ')' END, ', '
                      ORDER BY f.step) AS other_steps_text,
           stable_mode(list(f.seen_by)) AS seen_by,
           stable_mode(list(l.process_group) FILTER (WHERE l.late_ns > 0)) AS process_group
    FROM flagged AS f JOIN dominant AS d USING (rank) JOIN period AS pe USING (rank)
    LEFT JOIN step_lateness AS l ON l.rank = f.rank AND l.step = f.step
    GROUP BY f.rank
),
regions AS (   -- the rank's code regions over the steps of its cause (a step without the region counts 0)
    SELECT p.rank, x.kind, x.name,
           sum(x.excess_ns) / p.cause_steps_count AS excess_ns, sum(x.self_excess_ns) / p.cause_steps_count AS self_excess_ns,
           sum(x.idle_ns) AS idle_ns, sum(x.time_ns) AS time_ns
    FROM per_rank AS p JOIN region_excess AS x ON x.rank = p.rank AND list_contains(p.cause_steps, x.step)
    GROUP BY p.rank, x.kind, x.name, p.cause_steps_count
),
held AS (      -- the time held back per step of the rank's cause
    SELECT f.rank, avg(f.held_ns) AS held_ns FROM flagged AS f JOIN dominant AS d ON d.rank = f.rank AND d.cause = f.step_cause
    GROUP BY f.rank
),
region AS (    -- the region holding the extra time: it covers min_cause_share_pct of it; an annotation
               -- before an op, then the largest own excess (the innermost region), then the name
    SELECT x.rank, arg_max({'name': x.name, 'kind': x.kind, 'excess_ms_per_step': round(x.excess_ns / 1e6, 3),
                            'idle_pct': round(100.0 * x.idle_ns / greatest(x.time_ns, 1), 1),
                            'idle': 100.0 * x.idle_ns / greatest(x.time_ns, 1) >= $min_cause_share_pct},
                           ((x.kind = 'annotation')::INT, x.self_excess_ns, x.name)) AS region
    FROM regions AS x JOIN held AS h USING (rank)
    WHERE x.excess_ns >= $min_cause_share_pct / 100.0 * h.held_ns
    GROUP BY x.rank
)
SELECT
    [p.rank] AS ranks,
    p.steps,
    p.held_sum_ns / j.n_steps / 1e6 AS ms_per_step,
    100.0 * p.held_sum_ns / j.n_steps / j.step_ns AS pct_of_step,
    CASE WHEN 100.0 * p.held_sum_ns / j.n_steps / j.step_ns >= $error_pct THEN 'error' ELSE 'warning' END AS severity,
    p.rank,
    p.cause,
    r.region,
    region_note(r.region, 'affected step') AS region_note,
    region_advice(r.region, 'affected step') AS region_advice,
    p.held_steps AS held_steps_count,
    j.n_steps AS aligned_steps_count,
    p.steps_text,
    p.cause_steps,
    p.cause_steps_count,
    p.cause_steps_text,
    p.period_steps,
    CASE WHEN p.period_steps = 1 THEN ', every step'
         WHEN p.period_steps IS NOT NULL THEN ', every ' || p.period_steps || ' steps' ELSE '' END AS period_text,
    CASE WHEN p.other_steps_text IS NOT NULL THEN '; also step ' || p.other_steps_text ELSE '' END AS other_steps_note,
    p.held_avg_ns / 1e6 AS held_ms_per_affected_step,
    p.seen_by,
    p.per_step,
    j.step_ns / 1e6 AS median_step_ms,
    CASE WHEN p.process_group IS NOT NULL THEN {'name': p.process_group, 'ranks': pg.ranks, 'dimension': pg.dimension} END AS "group"  -- where its lateness starts on its held steps (step_lateness), NULL when it reaches no collective late
FROM per_rank AS p CROSS JOIN job AS j LEFT JOIN region AS r USING (rank)
LEFT JOIN arrival_groups AS pg ON pg.process_group = p.process_group
WHERE p.held_steps >= $min_held_steps_count
ORDER BY ms_per_step DESC;
