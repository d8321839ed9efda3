-- The process groups of the job and the parallelism dimension each carries.
--
-- Groups come from every rank's distributedInfo.pg_config and from the groups that collectives
-- name (NCCL args, or inferred for gloo: load/groups.py). The dimension comes from what the
-- group does: all_to_all -> expert, only send / recv -> pipeline, reduce_scatter -> fsdp
-- (these decide whatever the description says; a group that reduce-scatters inside forward is
-- Megatron's sequence parallelism, tensor, not fsdp); then the group's description (a device mesh
-- names its groups: 'mesh_tp', 'mesh_dp', ...); then all_reduce / all_gather during forward in
-- a group smaller than the job -> tensor, other collectives -> data. See docs/parallelism.md.

-- One row per process group.
CREATE OR REPLACE TABLE process_groups AS
WITH configured AS (
    SELECT pg_name, min(pg_desc) AS pg_desc, arg_min(ranks, rank) AS ranks, max(pg_size) AS size,
           min(backend_config) AS backend
    FROM pg_configs GROUP BY pg_name
),
seen AS (
    SELECT process_group AS pg_name, min(pg_desc) AS pg_desc,
           arg_min(group_ranks, rank) FILTER (WHERE group_ranks IS NOT NULL) AS ranks,
           count(*) FILTER (WHERE kind = 'collective') AS collectives,
           count(*) FILTER (WHERE kind = 'p2p') AS p2p,
           list_sort(list(DISTINCT op)) AS ops,
           bool_or(op = 'all_to_all') AS has_all_to_all,
           bool_or(op = 'reduce_scatter') AS has_reduce_scatter,
           min(group_source) AS group_source
    FROM collectives GROUP BY process_group
),
first_backward AS (   -- each rank's first backward op of each step: collectives before it run during forward
    SELECT rank, step, min(ts_ns) AS ts_ns FROM cpu_ops
    WHERE name LIKE 'autograd::engine::evaluate_function:%' AND step IS NOT NULL GROUP BY rank, step
),
in_forward AS (   -- the collectives tensor parallelism runs inside the forward pass (sequence parallelism's
                  -- reduce_scatter among them: FSDP reduce-scatters gradients in backward only)
    SELECT c.process_group AS pg_name, count(*) AS n, count(*) FILTER (WHERE c.op = 'reduce_scatter') AS reduce_scatters
    FROM collectives AS c JOIN first_backward AS b USING (rank, step)
    WHERE c.kind = 'collective' AND c.ts_ns < b.ts_ns AND c.op IN ('all_reduce', 'all_gather', 'reduce_scatter')
    GROUP BY c.process_group
),
world AS (
    SELECT greatest((SELECT count(*) FROM ranks), coalesce((SELECT max(world_size) FROM ranks), 0)) AS n
),
merged AS (
    SELECT coalesce(c.pg_name, s.pg_name) AS pg_name,
           coalesce(c.pg_desc, s.pg_desc) AS pg_desc,
           coalesce(c.ranks, s.ranks) AS ranks,
           coalesce(c.size, len(s.ranks)) AS size,
           c.backend,
           coalesce(s.collectives, 0) AS collectives,
           coalesce(s.p2p, 0) AS p2p,
           coalesce(s.ops, []) AS ops,
           coalesce(s.has_all_to_all, false) AS has_all_to_all,
           coalesce(s.has_reduce_scatter, false) AS has_reduce_scatter,
           coalesce(f.n, 0) AS in_forward,
           coalesce(f.reduce_scatters, 0) AS reduce_scatters_in_forward,
           s.group_source
    FROM configured AS c
    FULL OUTER JOIN seen AS s ON s.pg_name = c.pg_name
    LEFT JOIN in_forward AS f ON f.pg_name = coalesce(c.pg_name, s.pg_name)
),
described AS (
    SELECT m.*,
           CASE
               WHEN regexp_matches(lower(coalesce(m.pg_desc, '')), '(^|[^a-z])(tp|tensor)([^a-z]|$)') THEN 'tensor'
               WHEN regexp_matches(lower(coalesce(m.pg_desc, '')), '(^|[^a-z])(pp|pipe|pipeline)([^a-z]|$)') THEN 'pipeline'
               WHEN regexp_matches(lower(coalesce(m.pg_desc, '')), '(^|[^a-z])(ep|expert|experts|moe)([^a-z]|$)') THEN 'expert'
               WHEN regexp_matches(lower(coalesce(m.pg_desc, '')), '(^|[^a-z])(cp|context)([^a-z]|$)') THEN 'context'
               WHEN regexp_matches(lower(coalesce(m.pg_desc, '')), '(^|[^a-z])(fsdp|shard|dp_shard)([^a-z]|$)') THEN 'fsdp'
               WHEN regexp_matches(lower(coalesce(m.pg_desc, '')), '(^|[^a-z])(dp|data|ddp|replicate|dp_replicate)([^a-z]|$)')
                    THEN CASE WHEN m.has_reduce_scatter THEN 'fsdp' ELSE 'data' END
           END AS by_desc,
           CASE
               WHEN m.has_all_to_all THEN 'expert'
               WHEN m.collectives = 0 AND m.p2p > 0 THEN 'pipeline'
               WHEN m.has_reduce_scatter AND m.reduce_scatters_in_forward = 0 THEN 'fsdp'
               WHEN m.collectives > 0 AND m.in_forward > 0 AND m.size < (SELECT n FROM world) THEN 'tensor'
               -- a group of every rank is tensor-parallel when it reduces inside forward at least twice per rank and
               -- step (a data-parallel job may all-reduce its loss or a metric once before backward)
               WHEN m.collectives > 0 AND m.in_forward >= 2 * m.size * (SELECT greatest(count(DISTINCT step), 1) FROM collectives WHERE step IS NOT NULL)
                    THEN 'tensor'
               WHEN m.collectives > 0 THEN 'data'
               WHEN m.size >= (SELECT n FROM world) THEN 'world'
           END AS by_ops
    FROM merged AS m
)
SELECT
    pg_name AS process_group,               -- group name (pg_name; what collectives.process_group holds)
    pg_desc,                                -- description ('default_pg', 'mesh_tp', ...), NULL when unknown
    ranks,                                  -- global ranks in group-rank order, NULL when no trace lists them
    size,                                   -- number of ranks
    backend,                                -- backend_config from pg_config ('cpu:gloo,cuda:gloo', 'cuda:nccl'), NULL when unknown
    CASE WHEN by_ops IN ('expert', 'pipeline', 'fsdp') THEN by_ops ELSE coalesce(by_desc, by_ops) END AS dimension,  -- parallelism it carries: data | fsdp | tensor | pipeline | expert | context | world (all ranks, idle); NULL when nothing tells
    CASE WHEN by_ops IN ('expert', 'pipeline', 'fsdp') OR by_desc IS NULL THEN (CASE WHEN by_ops IS NOT NULL THEN 'operations' END)
         ELSE 'description' END AS dimension_source,  -- what told the dimension: its operations (all_to_all, only send / recv, reduce_scatter are decisive), else the group's description, else its other operations
    collectives,                            -- collective rows in the group, all ranks
    p2p,                                    -- send / recv rows in the group, all ranks
    in_forward,                             -- collective rows issued before the rank's first backward op of the step (tensor-parallel groups communicate in forward)
    ops,                                    -- distinct ops run in the group
    group_source                            -- how its collectives got the group: trace | pg_config | inferred | unknown (the alphabetically first when they differ), NULL when it ran none
FROM described
ORDER BY size DESC, process_group;

-- (load/pipelines.py fills _pipeline_order in the reduce; a database built without it, e.g. from Flight Recorder dumps alone, has no pipelines from the traffic)
CREATE TABLE IF NOT EXISTS _pipeline_order (rank INTEGER, pipeline INTEGER, stage INTEGER, stages INTEGER, pipeline_ranks INTEGER[]);
CREATE TABLE IF NOT EXISTS _context_rings (rank INTEGER, ring INTEGER, position INTEGER, ring_ranks INTEGER[]);

-- One row per rank of a pipeline: its stage, from who sends to whom (load/pipelines.py: the first transfer of a step between two linked ranks runs forward), whatever group carried the send / recv; when the traffic tells nothing (no send / recv could be matched), the rank's position in a group whose dimension is pipeline. Empty when the job has no pipeline.
CREATE OR REPLACE TABLE pipeline_stages AS
WITH carried AS (   -- the group that carried most of each rank's send / recv
    SELECT rank, stable_mode(list(process_group)) AS process_group
    FROM collectives WHERE kind = 'p2p' GROUP BY rank
),
by_traffic AS (
    SELECT o.rank, o.stage, o.stages, o.pipeline, o.pipeline_ranks, c.process_group, 'traffic' AS source
    FROM _pipeline_order AS o LEFT JOIN carried AS c USING (rank)
),
members AS (
    SELECT process_group, size, ranks, unnest(ranks) AS rank, unnest(range(len(ranks))) AS stage
    FROM process_groups WHERE dimension = 'pipeline' AND size >= 2 AND ranks IS NOT NULL
),
by_position AS (   -- each rank's smallest pipeline group (a group of every rank that carried the send / recv counts only
                   -- where no smaller pipeline group holds the rank)
    SELECT rank, arg_min(stage, (size, process_group)) AS stage, arg_min(size, (size, process_group)) AS stages,
           arg_min(ranks, (size, process_group)) AS pipeline_ranks,
           arg_min(process_group, (size, process_group)) AS process_group
    FROM members GROUP BY rank
),
by_position_numbered AS (
    SELECT rank, stage, stages, dense_rank() OVER (ORDER BY pipeline_ranks[1], process_group) - 1 AS pipeline,
           pipeline_ranks, process_group, 'group' AS source
    FROM by_position
),
chosen AS (
    SELECT * FROM by_traffic
    UNION ALL
    SELECT * FROM by_position_numbered WHERE NOT EXISTS (SELECT 1 FROM by_traffic)
      AND rank NOT IN (SELECT rank FROM _context_rings)   -- (a group carrying a ring exchange is no pipeline)
)
SELECT
    rank::INTEGER AS rank,                  -- global rank
    stage::INTEGER AS stage,                -- pipeline stage, 0-based (stage 0 takes the input)
    stages::INTEGER AS stages,              -- number of stages of its pipeline
    pipeline::INTEGER AS pipeline,          -- which pipeline (0-based, ordered by their first stage's rank): a PP x DP job has one pipeline per data-parallel replica
    pipeline_ranks::INTEGER[] AS pipeline_ranks,  -- the pipeline's ranks in stage order
    process_group,                          -- the process group that carried its send / recv (the default group '0' when the job sends over it), NULL when none
    source                                  -- how the stage was found: traffic (who sends to whom) | group (the position in a pipeline group)
FROM chosen
ORDER BY rank;

DROP TABLE _pipeline_order;

-- One row per rank of a ring exchange: ranks that each send to the next rank round one ring, nothing coming back (load/pipelines.py), as context parallelism's ring attention passes K / V chunks. Each round of the exchange is an instance `ring_exchange` of the ring in collective_arrivals (the rank's send, in order within the step). Empty when the job has none.
CREATE OR REPLACE TABLE context_rings AS
WITH carried AS (   -- the group that carried most of each rank's send / recv
    SELECT rank, stable_mode(list(process_group)) AS process_group
    FROM collectives WHERE kind = 'p2p' GROUP BY rank
)
SELECT
    r.rank::INTEGER AS rank,                -- global rank
    r.ring::INTEGER AS ring,                -- which ring (0-based, ordered by their ranks)
    r.position::INTEGER AS position,        -- the rank's place round the ring, 0 at the ring's smallest rank
    r.ring_ranks::INTEGER[] AS ring_ranks,  -- the ring's ranks in order: each sends to the next, the last to the first
    r.ring_ranks[(r.position + 1) % len(r.ring_ranks) + 1]::INTEGER AS next_rank,  -- the rank it sends to
    'ring ' || r.ring AS name,              -- the ring's name in collective_arrivals.process_group and in findings
    c.process_group                         -- the process group that carried its send / recv, NULL when none
FROM _context_rings AS r LEFT JOIN carried AS c USING (rank)
ORDER BY rank;

DROP TABLE _context_rings;
