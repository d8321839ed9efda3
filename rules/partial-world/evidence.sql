-- The loaded ranks' collectives in the analysed steps: how long each rank sat inside, and what it carried.
SELECT
    c.step,
    c.rank,
    c.op,
    c.bytes,
    round(c.dur_ns / 1e6, 3) AS inside_ms,
    round(c.bytes / nullif(c.dur_ns, 0), 3) AS achieved_bytes_per_ns
FROM collectives AS c
WHERE list_contains($steps, c.step)
ORDER BY c.step, c.ts_ns, c.rank
LIMIT 50;
