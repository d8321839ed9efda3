-- One row per ProfilerStep#N window per rank (or one synthetic window for traces without steps).
CREATE OR REPLACE TABLE steps AS
WITH marked AS (
    SELECT rank,
           TRY_CAST(regexp_extract(name, '^ProfilerStep#(\d+)$', 1) AS BIGINT) AS step,
           ts_ns, ts_ns + dur_ns AS end_ns
    FROM raw_events
    WHERE ph = 'X' AND name LIKE 'ProfilerStep#%' AND coalesce(cat, '') <> 'gpu_user_annotation'
      AND ts_ns IS NOT NULL AND dur_ns >= 0
),
marked_steps AS (
    SELECT rank, step, min(ts_ns) AS ts_ns, max(end_ns) AS end_ns, false AS synthetic
    FROM marked WHERE step IS NOT NULL
    GROUP BY rank, step
),
unmarked_ranks AS (
    SELECT r.rank FROM ranks AS r
    WHERE NOT EXISTS (SELECT 1 FROM marked_steps AS m WHERE m.rank = r.rank)
),
whole_window AS (
    SELECT e.rank, 0::BIGINT AS step, min(e.ts_ns) AS ts_ns, max(e.ts_ns + coalesce(e.dur_ns, 0)) AS end_ns,
           true AS synthetic
    FROM raw_events AS e JOIN unmarked_ranks USING (rank)
    WHERE e.ph = 'X' AND e.ts_ns IS NOT NULL AND coalesce(e.cat, '') NOT IN ('Trace')
    GROUP BY e.rank
),
all_steps AS (
    SELECT *, end_ns - ts_ns AS dur_ns,
           row_number() OVER (PARTITION BY rank ORDER BY ts_ns DESC) = 1 AS is_last
    FROM (SELECT * FROM marked_steps UNION ALL SELECT * FROM whole_window)
),
shortest AS (     -- the shortest of each rank's steps but its last one
    SELECT rank, min(dur_ns) AS others_min_ns FROM all_steps WHERE NOT is_last GROUP BY rank
)
SELECT
    rank,                                   -- global rank
    step,                                   -- N of ProfilerStep#N (0 for a synthetic whole-trace window)
    ts_ns,                                  -- step start on the rank's own clock, ns
    dur_ns,                                 -- step duration, ns
    end_ns,                                 -- step end, ns
    synthetic,                              -- true when the trace had no ProfilerStep and the whole trace is one window
    row_number() OVER (PARTITION BY rank ORDER BY ts_ns) - 1 AS step_index,  -- 0-based position within the rank
    coalesce(is_last AND NOT synthetic AND dur_ns < getvariable('cut_short_max_ratio') * others_min_ns, false)
        AS cut_short                        -- the rank's last step, under a tenth (cut_short_max_ratio) of its shortest other step: the profiler stopped as it began (left out of aligned_steps)
FROM all_steps LEFT JOIN shortest USING (rank)
ORDER BY rank, ts_ns;
