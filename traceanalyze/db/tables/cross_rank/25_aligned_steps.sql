-- Steps present on every loaded rank (and cut short on none): the steps that cross-rank comparisons use.
CREATE OR REPLACE TABLE aligned_steps AS
SELECT
    step,                                   -- ProfilerStep N present on every loaded rank
    min(dur_ns) AS min_dur_ns,              -- shortest duration of this step over ranks, ns
    max(dur_ns) AS max_dur_ns,              -- longest duration of this step over ranks, ns
    median(dur_ns)::BIGINT AS median_dur_ns -- median duration over ranks, ns
FROM steps
GROUP BY step
HAVING count(DISTINCT rank) = (SELECT count(*) FROM ranks) AND NOT bool_or(cut_short)
ORDER BY step;
