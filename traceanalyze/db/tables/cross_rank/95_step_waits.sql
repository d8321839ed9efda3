-- Per (rank, step): the rank's wait at collectives for the last rank to arrive, and its own step time (the step minus that wait).
CREATE OR REPLACE TABLE step_waits AS
WITH waits AS (
    SELECT rank, step, max(wait_for_last_ns) AS wait_ns FROM collective_arrivals GROUP BY rank, step
)
SELECT
    p.rank,                                 -- global rank
    p.step,                                 -- ProfilerStep N
    p.dur_ns,                               -- the rank's step (wall clock), ns
    greatest(coalesce(w.wait_ns, 0), 0) AS wait_ns,           -- longest wait at one of the step's collectives for the last rank to arrive, ns
    p.dur_ns - greatest(coalesce(w.wait_ns, 0), 0) AS own_ns,  -- own step time: the step minus that wait, ns (tells the ranks apart when every wall step is equal)
    least(p.comm_exposed_ns, greatest(coalesce(w.wait_ns, 0), 0)) AS exposed_wait_ns,  -- the part of comm_exposed spent waiting for the last rank, ns (the rest is the communication itself)
    p.dur_ns - p.comm_exposed_ns - p.pipeline_wait_ns AS non_comm_ns  -- step time outside communication: the step minus all its exposed communication (the wait and the transfer, collectives and send / recv), ns: what the rank did itself
FROM step_phases AS p LEFT JOIN waits AS w USING (rank, step)
ORDER BY p.rank, p.step;
