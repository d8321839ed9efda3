-- The process groups of the job and the parallelism dimension each carries.
--
-- Groups come from every rank's distributedInfo.pg_config and from the groups that collectives
-- name (NCCL args, or inferred for gloo: load/groups.py). The dimension is read from the
-- group's description first (a device mesh names its groups: 'mesh_tp', 'mesh_dp', ...), then
-- from what the group does: all_to_all -> expert, only send / recv -> pipeline,
-- reduce_scatter -> fsdp, collectives during forward in a group smaller than the job ->
-- tensor, other collectives -> data. See docs/parallelism.md.

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
in_forward AS (
    SELECT c.process_group AS pg_name, count(*) AS n
    FROM collectives AS c JOIN first_backward AS b USING (rank, step)
    WHERE c.kind = 'collective' AND c.ts_ns < b.ts_ns
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
               WHEN m.has_reduce_scatter THEN 'fsdp'
               WHEN m.collectives > 0 AND m.in_forward > 0 AND m.size < (SELECT n FROM world) THEN 'tensor'
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
    coalesce(by_desc, by_ops) AS dimension, -- parallelism it carries: data | fsdp | tensor | pipeline | expert | context | world (all ranks, idle); NULL when nothing tells
    CASE WHEN by_desc IS NOT NULL THEN 'description' WHEN by_ops IS NOT NULL THEN 'operations' END AS dimension_source,  -- what told the dimension: the group's description or its operations
    collectives,                            -- collective rows in the group, all ranks
    p2p,                                    -- send / recv rows in the group, all ranks
    in_forward,                             -- collective rows issued before the rank's first backward op of the step (tensor-parallel groups communicate in forward)
    ops,                                    -- distinct ops run in the group
    group_source                            -- how its collectives got the group: trace | pg_config | inferred | unknown (the alphabetically first when they differ), NULL when it ran none
FROM described
ORDER BY size DESC, process_group;

-- One row per rank of a pipeline group: the pipeline stage it runs (its position in the group). Empty when the job has no pipeline dimension.
CREATE OR REPLACE TABLE pipeline_stages AS
WITH members AS (
    SELECT process_group, size, unnest(ranks) AS rank, unnest(range(len(ranks))) AS stage
    FROM process_groups WHERE dimension = 'pipeline' AND size >= 2 AND ranks IS NOT NULL
)
SELECT
    rank,                                   -- global rank
    min(stage) AS stage,                    -- pipeline stage: the rank's 0-based position in its pipeline group (stage 0 takes the input; the lowest when a rank is in several pipeline groups)
    max(size) AS stages,                    -- number of stages (the pipeline group's size)
    arg_min(process_group, stage) AS process_group  -- the pipeline group it is a stage of
FROM members
GROUP BY rank
ORDER BY rank;
