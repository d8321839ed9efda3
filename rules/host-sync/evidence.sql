-- The blocking synchronization calls of the rank in the reported steps, longest first, with the op that made them.
SELECT r.step, r.name, round((r.ts_ns - s.ts_ns) / 1e6, 3) AS start_in_step_ms, round(r.dur_ns / 1e3, 1) AS dur_us,
       (SELECT c.name FROM cpu_ops AS c WHERE c.rank = r.rank AND c.external_id = r.external_id
        ORDER BY abs(c.ts_ns - r.ts_ns), c.name LIMIT 1) AS op  -- (an id can repeat: the op nearest the call, the same on every run)
FROM runtime AS r JOIN steps AS s USING (rank, step)
WHERE r.rank = $rank AND list_contains($steps, r.step)
  AND (regexp_matches(r.name, '(?i)(DeviceSynchronize|StreamSynchronize|EventSynchronize)$')
       OR r.name IN ('cudaMemcpy', 'hipMemcpy', 'cudaMemset', 'hipMemset'))
ORDER BY r.dur_ns DESC, r.ts_ns, r.tid, r.name  -- ties by time, thread, name: the same rows on every run
LIMIT 20;
