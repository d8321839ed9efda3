-- Per (rank, step): DDP's unused-parameter search, its used-parameter map all-reduce and the parameters that got a gradient.
SELECT
    s.rank,
    s.step,
    round(s.dur_ns / 1e3, 1) AS search_us,
    (SELECT max(first_input_numel(a.input_dims)) FROM annotations AS a
     WHERE a.rank = s.rank AND a.step = s.step AND a.name = 'gloo:all_reduce'
       AND json_extract_string(a.input_type, '$[0]') = 'int') AS used_map_params,
    (SELECT count(*) FROM cpu_ops AS g
     WHERE g.rank = s.rank AND g.step = s.step AND g.name = 'torch::autograd::AccumulateGrad') AS grads
FROM cpu_ops AS s
WHERE s.name = 'torch.distributed.ddp.reducer::search_unused_parameters' AND list_contains($steps, s.step)
ORDER BY s.rank, s.step, s.ts_ns
LIMIT 50;
