-- Lateness per parallelism dimension: how long each rank kept the other ranks of its group waiting at the group's collectives, per step.
--
-- From collective_arrivals (step-relative arrival against the lower median of the group's
-- ranks at the same collective instance) and the dimension each process group carries
-- (process_groups). A rank late only because it waited in another dimension's group (a recv
-- from a slower stage, a tensor all-reduce) is late here too: compare the dimensions
-- (step_lateness.own_late_ns separates that part). The report's per-dimension heatmaps read it.

-- One row per (process group, rank, step) with at least one collective instance of the group that two or more of its ranks reached.
CREATE OR REPLACE TABLE group_lateness AS
SELECT
    g.dimension,                            -- the group's parallelism dimension (process_groups.dimension: data, fsdp, tensor, pipeline, expert, context or world), NULL when unknown
    a.process_group,                        -- process group name
    g.pg_desc,                              -- the group's description from the trace ('mesh_tp', ...), NULL when unknown
    a.rank,                                 -- global rank
    a.step,                                 -- ProfilerStep N
    count(*) AS collectives,                -- the group's collective instances the rank reached in the step
    sum(greatest(a.late_ns, 0))::BIGINT AS late_ns,      -- sum over them of how much later than the group's median rank it arrived (0 when early): the time it kept the others waiting in the step, ns
    max(greatest(a.late_ns, 0)) AS max_late_ns,          -- its largest lateness at one of them, ns
    sum(greatest(a.wait_for_last_ns, 0))::BIGINT AS wait_ns  -- sum of the time it waited at them for the group's last rank, ns
FROM collective_arrivals AS a
LEFT JOIN process_groups AS g USING (process_group)
GROUP BY g.dimension, a.process_group, g.pg_desc, a.rank, a.step
ORDER BY g.dimension NULLS LAST, a.process_group, a.rank, a.step;
