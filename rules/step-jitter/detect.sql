-- One row when some steps take much longer than the median step (the job's step = its slowest rank).
WITH job_steps AS (
    SELECT step, max_dur_ns AS dur_ns, row_number() OVER (ORDER BY step) AS n FROM aligned_steps
),
kept AS (SELECT * FROM job_steps WHERE n > $skip_first_steps_count),
stats AS (
    SELECT count(*) AS n_steps, median(dur_ns) AS median_ns, max(dur_ns) AS max_ns, first(step ORDER BY dur_ns DESC, step) AS worst_step,
           stddev_samp(dur_ns) AS std_ns
    FROM kept
),
phases AS (      -- every rank's phases on the kept steps; own = the step minus its wait in collectives
    SELECT rank, step, phase, ns, own_ns
    FROM (UNPIVOT (SELECT p.*, w.own_ns FROM step_phases AS p JOIN kept USING (step) JOIN step_waits AS w USING (rank, step))
          ON data_wait_ns, h2d_ns, forward_ns, backward_ns, optimizer_ns, other_ns
          INTO NAME phase VALUE ns)
),
culprit AS (     -- who made the slowest step slow: the rank with the longest own time (not a rank that waited)
    SELECT first(rank ORDER BY own_ns DESC, rank) AS rank FROM phases WHERE step = (SELECT worst_step FROM stats)
),
grown AS (       -- that rank's phase that grew most on the slowest step against its own median step
    SELECT first(replace(phase, '_ns', '') ORDER BY extra_ns DESC, phase) AS phase, max(extra_ns) AS extra_ns
    FROM (SELECT p.phase, max(p.ns) FILTER (WHERE p.step = (SELECT worst_step FROM stats)) - median(p.ns) AS extra_ns
          FROM phases AS p WHERE p.rank = (SELECT rank FROM culprit) GROUP BY p.phase)
),
slow AS (
    SELECT list(k.step ORDER BY k.step) AS steps, sum(k.dur_ns - s.median_ns) AS extra_ns, count(*) AS n_slow
    FROM kept AS k CROSS JOIN stats AS s
    WHERE k.dur_ns >= $min_slow_ratio * s.median_ns
)
SELECT
    (SELECT list(rank ORDER BY rank) FROM ranks) AS ranks,
    sl.steps,
    sl.extra_ns / st.n_steps / 1e6 AS ms_per_step,
    100.0 * sl.extra_ns / st.n_steps / st.median_ns AS pct_of_step,
    st.median_ns / 1e6 AS median_step_ms,
    st.max_ns / 1e6 AS max_step_ms,
    st.max_ns / st.median_ns AS max_over_median_ratio,
    st.worst_step,
    100.0 * st.std_ns / st.median_ns AS cv_pct,
    sl.n_slow AS slow_steps_count,
    st.n_steps AS steps_count,
    (SELECT rank FROM culprit) AS slowest_rank,
    (SELECT phase FROM grown) AS slowest_phase,
    (SELECT extra_ns FROM grown) / 1e6 AS slowest_phase_extra_ms
FROM stats AS st CROSS JOIN slow AS sl
WHERE st.n_steps >= $min_steps_count AND sl.n_slow > 0;
