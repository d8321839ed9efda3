"""Stage 3: align ranks — the steps every rank has, and each rank's clock offset.

Hosts' clocks differ, so nothing compares raw timestamps across ranks. Each rank's
offset against the lowest rank is estimated from collectives, which end together on
every rank; it is stored in `ranks.clock_offset_ns` for display and for the merged
Perfetto trace. Rules compare ranks on step-relative time (`ts_ns - steps.ts_ns`).
"""

from __future__ import annotations

from traceanalyze.errors import TraceanalyzeError
from traceanalyze.lazy_import import duckdb

# offset of rank r = median over matched collectives of (end on r - end on the reference rank)
CLOCK_OFFSETS_SQL = """
WITH ref AS (SELECT min(rank) AS rank FROM ranks),
matched AS (
    SELECT c.rank, c.end_ns - r.end_ns AS delta_ns
    FROM collectives AS c
    JOIN collectives AS r ON r.rank = (SELECT rank FROM ref)
        AND r.process_group = c.process_group AND r.seq = c.seq AND r.op = c.op
)
UPDATE ranks SET clock_offset_ns = o.offset_ns
FROM (SELECT rank, median(delta_ns)::BIGINT AS offset_ns FROM matched GROUP BY rank) AS o
WHERE ranks.rank = o.rank
"""


def _describe_step_sets(con: duckdb.DuckDBPyConnection) -> str:
    rows = con.execute(
        "SELECT rank, min(step), max(step), count(*) FROM steps GROUP BY rank ORDER BY rank LIMIT 6"
    ).fetchall()
    return "; ".join(f"rank {r}: steps {lo}-{hi} ({n})" for r, lo, hi, n in rows)


# the ranks without a step: a trace with no event that has a time (empty, or every event skipped);
# a trace without ProfilerStep annotations has one step, its whole window
EMPTY_RANKS_SQL = """
SELECT r.rank, r.file,
       (SELECT string_agg(i.kind || ' ' || coalesce(i.count::VARCHAR, ''), ', ' ORDER BY i.kind)
        FROM load_issues AS i WHERE i.rank = r.rank AND i.severity = 'warning') AS skipped
FROM ranks AS r
WHERE r.rank NOT IN (SELECT rank FROM steps)
ORDER BY r.rank
"""


def require_a_step(con: duckdb.DuckDBPyConnection) -> None:
    """What the analysis needs of a loaded database: a step (the database of a trace whose events
    all lack a time is still one to query, but nothing in it can be measured)."""
    (n_ranks,) = con.execute("SELECT count(*) FROM ranks").fetchone()
    if n_ranks and con.execute("SELECT count(*) FROM aligned_steps").fetchone()[0] == 0:
        _no_common_step(con, n_ranks)  # (no rank: Flight Recorder dumps alone)


def _no_common_step(con: duckdb.DuckDBPyConnection, n_ranks: int) -> None:
    """No step is on every rank: say why, naming a file (exit 2)."""
    empty = con.execute(EMPTY_RANKS_SQL).fetchall()
    if empty:
        rank, file, skipped = empty[0]
        why = f"every event was skipped: {skipped.strip()}" if skipped else "an empty trace"
        if n_ranks == 1:
            raise TraceanalyzeError(f"the trace has no event with a time to analyze ({why})", file)
        if len(empty) == n_ranks:
            raise TraceanalyzeError(f"no rank has an event with a time to analyze (rank {rank}: {why}; "
                                    f"{n_ranks} ranks)", file)
        raise TraceanalyzeError(f"rank {rank} has no event with a time to analyze ({why})", file)
    (first_file,) = con.execute("SELECT file FROM ranks ORDER BY rank LIMIT 1").fetchone()
    raise TraceanalyzeError(
        "the ranks share no ProfilerStep, so they cannot be compared "
        f"({_describe_step_sets(con)}); are these files from different runs or windows?",
        first_file)


def align_ranks(con: duckdb.DuckDBPyConnection) -> None:
    """Check `aligned_steps`, record dropped steps in load_issues, estimate clock offsets."""
    (n_aligned,) = con.execute("SELECT count(*) FROM aligned_steps").fetchone()
    (n_ranks,) = con.execute("SELECT count(*) FROM ranks").fetchone()
    if n_aligned == 0 and n_ranks > 1:
        _no_common_step(con, n_ranks)
    con.execute("""
        INSERT INTO load_issues
        SELECT s.rank, r.file, 'step-not-on-all-ranks', 'info',
               'steps ' || string_agg(s.step::VARCHAR, ', ' ORDER BY s.step)
               || ' are missing on some ranks and are left out of cross-rank comparisons',
               count(*)
        FROM steps AS s JOIN ranks AS r USING (rank)
        WHERE s.step NOT IN (SELECT step FROM aligned_steps)
          AND s.step NOT IN (SELECT step FROM steps WHERE cut_short)
        GROUP BY s.rank, r.file
    """)
    con.execute("""
        INSERT INTO load_issues
        SELECT s.rank, r.file, 'step-cut-short', 'info',
               'step ' || s.step::VARCHAR || ' lasts ' || printf('%.3f', s.dur_ns / 1e6)
               || ' ms against at least ' || printf('%.3f', min(o.dur_ns) / 1e6)
               || ' ms for each other step: the profiler stopped as it began; it is left out of the per-step analysis',
               NULL
        FROM steps AS s JOIN ranks AS r USING (rank) JOIN steps AS o ON o.rank = s.rank AND o.step <> s.step
        WHERE s.cut_short
        GROUP BY s.rank, r.file, s.step, s.dur_ns
    """)
    con.execute("UPDATE ranks SET clock_offset_ns = 0 WHERE rank = (SELECT min(rank) FROM ranks)")
    con.execute(CLOCK_OFFSETS_SQL)
    con.execute(CLOCK_NOTE_SQL, [CLOCK_NOTE_NS])


# a clock this far off the reference rank is worth a note (hosts without synchronized clocks);
# minutes off is more likely files of different runs: a warning
CLOCK_NOTE_NS = 1_000_000_000
CLOCK_WARNING_NS = 60_000_000_000
CLOCK_NOTE_SQL = f"""
INSERT INTO load_issues
SELECT r.rank, r.file, 'clock-offset',
       CASE WHEN abs(r.clock_offset_ns) >= {CLOCK_WARNING_NS} THEN 'warning' ELSE 'info' END,
       'this rank''s clock is ' || printf('%.3f', abs(r.clock_offset_ns) / 1e9) || ' s '
       || CASE WHEN r.clock_offset_ns > 0 THEN 'ahead of' ELSE 'behind' END
       || ' rank ' || (SELECT min(rank) FROM ranks)::VARCHAR
       || ' (estimated from collectives); ranks are compared on step-relative times'
       || CASE WHEN abs(r.clock_offset_ns) >= {CLOCK_WARNING_NS}
               THEN '. So large an offset may mean files from different runs' ELSE '' END, NULL
FROM ranks AS r WHERE abs(r.clock_offset_ns) >= ?
"""
