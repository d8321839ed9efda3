-- One row when the step is held back on most steps by a different rank each time: no rank is a straggler by itself.
--
-- The rank that holds a step back is found as intermittent-straggler finds it (step_holds: its step time
-- outside communication against its peers' median, or its own lateness at a collective, by min_held_ms and
-- min_held_pct of the median step; the cause of the step is the phase group of its extra time). When such
-- steps are most steps and several ranks take turns (none holds min_rank_share_pct of them), what holds the
-- job back is shared by every rank and strikes one at a time (a shared store or data service, round-robin
-- shards, GC pauses, host work that moves between ranks).
WITH job AS (
    SELECT count(*) AS n_steps, median(median_dur_ns) AS step_ns FROM aligned_steps
),
flagged AS (  -- the rank that held the step back most (step_holds), when by enough
    SELECT h.*,
           lateness_cause(h.input_excess_ns, h.compute_excess_ns, h.host_excess_ns, h.idle_excess_ns, h.held_ns,
                          $min_cause_share_pct) AS step_cause
    FROM step_holds AS h CROSS JOIN job AS j
    WHERE h.place = 1 AND h.held_ns >= greatest($min_held_ms * 1e6, $min_held_pct / 100.0 * j.step_ns)
),
by_rank AS (    -- each holding rank and its steps
    SELECT rank, count(*) AS n, min(step) AS first_step, string_agg(step::VARCHAR, ', ' ORDER BY step) AS steps_text
    FROM flagged GROUP BY rank
),
top_region AS (  -- per held step: the annotation holding most of the extra time, when it holds min_cause_share_pct of it
    SELECT f.step, arg_max(x.name, (x.excess_ns, x.name)) AS name,
           arg_max(100.0 * x.idle_ns / greatest(x.time_ns, 1), (x.excess_ns, x.name)) AS idle_pct,
           arg_max(x.excess_ns, (x.excess_ns, x.name)) AS excess_ns
    FROM flagged AS f JOIN region_excess AS x ON x.rank = f.rank AND x.step = f.step AND x.kind = 'annotation'
    WHERE x.excess_ns >= $min_cause_share_pct / 100.0 * f.held_ns
    GROUP BY f.step
),
region AS (      -- the region most held steps share, when it is most of them
    SELECT {'name': name, 'kind': 'annotation', 'excess_ms_per_step': round(avg(excess_ns) / 1e6, 3),
            'idle_pct': round(avg(idle_pct), 1), 'idle': avg(idle_pct) >= $min_cause_share_pct} AS region
    FROM top_region GROUP BY name
    HAVING 2 * count(*) > (SELECT count(*) FROM flagged)
),
turns AS (
    SELECT count(*) AS held_steps, count(DISTINCT rank) AS ranks_count, sum(held_ns) AS held_sum_ns,
           avg(held_ns) AS held_avg_ns, stable_mode(list(step_cause ORDER BY step)) AS cause,
           list(step ORDER BY step) AS steps, list(DISTINCT rank ORDER BY rank) AS ranks,
           list({'step': step, 'rank': rank, 'held_ms': round(held_ns / 1e6, 3), 'cause': step_cause} ORDER BY step) AS per_step
    FROM flagged
)
SELECT
    t.ranks,
    t.steps,
    t.held_sum_ns / j.n_steps / 1e6 AS ms_per_step,
    100.0 * t.held_sum_ns / j.n_steps / j.step_ns AS pct_of_step,
    CASE WHEN 100.0 * t.held_sum_ns / j.n_steps / j.step_ns >= $error_pct THEN 'error' ELSE 'warning' END AS severity,
    t.cause,
    r.region,
    region_note(r.region, 'held step') AS region_note,
    t.held_steps AS held_steps_count,
    j.n_steps AS aligned_steps_count,
    t.ranks_count,
    (SELECT max(n) FROM by_rank) AS most_steps_of_one_rank_count,
    (SELECT string_agg('rank ' || rank || ' on ' || CASE WHEN n = 1 THEN 'step ' ELSE 'steps ' END || steps_text, '; '
                       ORDER BY first_step, rank) FROM by_rank) AS turns_text,
    t.held_avg_ns / 1e6 AS held_ms_per_affected_step,
    t.per_step,
    j.step_ns / 1e6 AS median_step_ms
FROM turns AS t CROSS JOIN job AS j LEFT JOIN region AS r ON true
WHERE t.held_steps >= $min_held_steps_pct / 100.0 * j.n_steps
  AND t.ranks_count >= $min_ranks_count
  AND (SELECT max(n) FROM by_rank) < $min_rank_share_pct / 100.0 * t.held_steps;
