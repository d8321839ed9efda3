-- The most frequent kernels that run shorter than their launch call on the rank (fusion candidates).
SELECT k.name, count(*) // greatest(1, count(DISTINCT k.step)) AS per_step,
       round(median(k.dur_ns) / 1e3, 2) AS median_kernel_us, round(median(r.dur_ns) / 1e3, 2) AS median_launch_us
FROM kernels AS k JOIN runtime AS r ON r.rank = k.rank AND r.correlation = k.correlation
WHERE k.rank = $rank AND list_contains($steps, k.step) AND k.kind = 'compute' AND k.dur_ns < r.dur_ns
GROUP BY k.name
ORDER BY count(*) DESC, k.name  -- ties by name: the same rows on every run
LIMIT 15;
