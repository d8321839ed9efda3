-- How much each rank held each aligned step back, and in which phases: what intermittent-straggler and rotating-straggler read (their thresholds pick the holding rank of a step).
--
-- A rank holds a step back by its step time outside communication (step_waits.non_comm_ns)
-- above its peers' median (work at the END of a step makes the others wait at the next step's
-- first collective), or by its own lateness at a collective (step_lateness.own_late_ns: not
-- because it waited in another group's collective), whichever is larger. In a pipeline a rank
-- is compared only with the ranks of its own stage (pipeline_stages): the stages run different
-- layers (the last computes the loss). A view: the rules read it, the load builds nothing.

-- Per (rank, aligned step): the time the rank held the step back against its peers' median, and its excess in each phase group.
CREATE OR REPLACE VIEW step_holds AS
WITH non_comm AS (
    SELECT p.rank, p.step, w.non_comm_ns,
           p.data_wait_ns + p.h2d_ns AS input_ns,
           p.forward_ns + p.backward_ns + p.optimizer_ns AS compute_ns,
           p.other_ns AS host_ns
    FROM step_phases AS p JOIN step_waits AS w USING (rank, step) JOIN aligned_steps USING (step)
),
peers AS (    -- the ranks a rank is compared with: those of its pipeline stage (stages do different work:
              -- the last computes the loss), every other rank when the job has no pipeline
    SELECT a.rank, b.rank AS peer
    FROM ranks AS a JOIN ranks AS b ON b.rank <> a.rank
    LEFT JOIN pipeline_stages AS sa ON sa.rank = a.rank
    LEFT JOIN pipeline_stages AS sb ON sb.rank = b.rank
    WHERE sa.stage IS NOT DISTINCT FROM sb.stage
),
others AS (   -- the peers' median, per rank and step (a rank alone in its stage has none: it is not compared)
    SELECT a.rank, a.step, median(b.non_comm_ns) AS non_comm_ns, median(b.input_ns) AS input_ns,
           median(b.compute_ns) AS compute_ns, median(b.host_ns) AS host_ns
    FROM non_comm AS a JOIN peers AS q ON q.rank = a.rank
    JOIN non_comm AS b ON b.step = a.step AND b.rank = q.peer
    GROUP BY a.rank, a.step
),
idle AS (     -- per rank and step: the most extra idle time inside one annotation (region_excess)
    SELECT rank, step, greatest(max(idle_excess_ns), 0) AS idle_excess_ns
    FROM region_excess WHERE kind = 'annotation' GROUP BY rank, step
),
held AS (
    SELECT o.rank, o.step, coalesce(i.idle_excess_ns, 0) AS idle_excess_ns,
           o.non_comm_ns - x.non_comm_ns AS non_comm_excess_ns,
           greatest(coalesce(l.own_late_ns, 0), 0) AS arrival_late_ns,
           greatest(o.non_comm_ns - x.non_comm_ns, coalesce(l.own_late_ns, 0)) AS held_ns,
           o.input_ns - x.input_ns AS input_excess_ns,
           o.compute_ns - x.compute_ns AS compute_excess_ns,
           o.host_ns - x.host_ns AS host_excess_ns
    FROM non_comm AS o JOIN others AS x USING (rank, step)
    LEFT JOIN step_lateness AS l USING (rank, step)
    LEFT JOIN idle AS i USING (rank, step)
)
SELECT
    rank,                                   -- global rank
    step,                                   -- ProfilerStep N (aligned steps only)
    held_ns,                                -- how much the rank held the step back: the larger of non_comm_excess_ns and arrival_late_ns, ns
    non_comm_excess_ns,                     -- its step time outside communication less its peers' median, ns
    arrival_late_ns,                        -- its own lateness at a collective (step_lateness.own_late_ns, at least 0), ns
    input_excess_ns,                        -- data wait + host-to-device copies less its peers' median, ns
    compute_excess_ns,                      -- forward + backward + optimizer less its peers' median, ns
    host_excess_ns,                         -- other host time less its peers' median, ns
    idle_excess_ns,                         -- the most extra idle time inside one record_function range (region_excess), ns
    row_number() OVER (PARTITION BY step ORDER BY held_ns DESC, rank) AS place  -- 1 for the rank that held the step back most (ties: the lower rank)
FROM held;
