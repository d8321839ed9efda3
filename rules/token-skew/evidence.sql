-- Tokens per (rank, aligned step) from the embedding ids [batch, seq_len], with the step's compute time and lateness.
SELECT
    b.rank,
    b.step,
    b.samples,
    b.tokens AS padded_tokens,
    b.real_tokens,
    b.max_seq_len,
    (p.forward_ns + p.backward_ns + p.optimizer_ns) / 1e6 AS compute_ms,
    p.dur_ns / 1e6 AS step_ms,
    l.late_ns / 1e6 AS late_ms,
    l.op AS late_at_op
FROM step_batches AS b
JOIN aligned_steps AS a USING (step)
JOIN step_phases AS p USING (rank, step)
LEFT JOIN step_lateness AS l USING (rank, step)
WHERE b.tokens IS NOT NULL
ORDER BY b.step, b.rank;
