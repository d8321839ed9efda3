-- The pageable copies of the rank in the reported steps, largest first.
SELECT step, name, copy_bytes, round(dur_ns / 1e3, 1) AS dur_us, round(gb_per_s, 2) AS gb_per_s
FROM memcpy
WHERE rank = $rank AND list_contains($steps, step) AND (src_memory = 'Pageable' OR dst_memory = 'Pageable')
ORDER BY copy_bytes DESC NULLS LAST, step, ts_ns, dur_ns, name  -- ties by time: the same order however rows were stored
LIMIT 20;
