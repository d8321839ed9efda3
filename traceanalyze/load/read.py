"""Read one rank's trace file into `raw_events` (split into parts, parsed by DuckDB's JSON reader).

`read_rank(con, tf) -> RankRead` is the interface the map stage calls (see map.py); a native
reader can replace this module as long as it keeps that interface.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from traceanalyze.errors import TraceFormatError
from traceanalyze.load.discover import TraceFile
from traceanalyze.load.kineto import (
    INEXACT_NS,
    INEXACT_RANKS_SQL,
    LARGE_MAX_OBJECT_BYTES,
    add_exact_times,
    base_time_ns,
    insert_events,
    shift_times,
)
from traceanalyze.load.stale import staging_prefix
from traceanalyze.load.memory import relaxing_memory, staging_dir
from traceanalyze.load.overlap import split_while_parsing
from traceanalyze.load.split import SplitTrace

# what DuckDB raises for malformed JSON or values it cannot convert (other errors are bugs)
BAD_JSON_ERRORS = (duckdb.InvalidInputException, duckdb.ConversionException)
Note = tuple[str, str, "int | None"]  # (kind, message, count)


@dataclass
class RankRead:
    """What reading one rank's file found besides its events (which are in raw_events)."""

    metadata: dict  # the trace's top-level keys other than traceEvents
    events: int
    events_bytes: int  # uncompressed bytes of the traceEvents array
    truncated_at_byte: int | None
    lost_bytes: int
    notes: list[Note] = field(default_factory=list)


def read_rank(con: duckdb.DuckDBPyConnection, tf: TraceFile) -> RankRead:
    """Parse `tf` into `raw_events` of `con` (rank = tf.rank); B/E pairs become X events."""
    files = [tf]
    memory_notes: list[tuple[str, str]] = []
    work = Path(tempfile.mkdtemp(prefix=staging_prefix(), dir=staging_dir(files)))
    try:
        (sp,) = _split_and_parse(con, files, work, memory_notes)
        _make_times_exact(con, files, [sp])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    notes: list[Note] = [(kind, message, None) for kind, message in sp.notes]
    notes += [(kind, message, None) for kind, message in memory_notes]
    notes += _convert_begin_end(con)
    (events,) = con.execute("SELECT count(*) FROM raw_events WHERE rank = ?", [tf.rank]).fetchone()
    return RankRead(sp.metadata, events, sp.events_bytes, sp.truncated_at_byte, sp.lost_bytes, notes)


# what makes the early (typed) parse give up, to be redone by the careful path
EARLY_PARSE_ERRORS = (*BAD_JSON_ERRORS, duckdb.OutOfMemoryException)


def _split_and_parse(con, files: list[TraceFile], work: Path,
                     memory_notes: list[tuple[str, str]]) -> list[SplitTrace]:
    """Split the files into parts while DuckDB parses them (typed reading, one transaction);
    if that fails anywhere, undo it and parse everything the careful way (_insert_events)."""
    con.begin()
    try:
        over = split_while_parsing(files, work, lambda rows: insert_events(con, rows, typed=True),
                                   EARLY_PARSE_ERRORS)
        refused = over.failed
        done = refused is None
        if done:
            for rank, shift_ns in over.corrections(files):
                shift_times(con, rank, shift_ns)
    except BaseException:
        con.rollback()
        raise
    if done:
        con.commit()
        return over.splits
    con.rollback()
    # a value the typed reading cannot take refuses it again: go straight to the generic one
    # (an event beyond the small read buffer, or memory, are worth the typed reading's retry)
    type_refusal = isinstance(refused, BAD_JSON_ERRORS) and "maximum_object_size" not in str(refused)
    readings = tuple(r for r in READINGS if not (r and type_refusal))
    relaxing_memory(con, lambda: _insert_events(con, files, over.splits, readings), memory_notes)
    return over.splits


def _part_rows(tf: TraceFile, sp: SplitTrace) -> list[tuple[int, str, int]]:
    base = base_time_ns(sp.metadata)
    return [(tf.rank, str(p), base) for p in sp.parts]


# kineto.py's readings, tried in this order: typed (fast), then generic (any value of an odd type).
READINGS = (True, False)


def _insert_events(con, files: list[TraceFile], splits: list[SplitTrace],
                   readings: tuple[bool, ...] = READINGS) -> None:
    """All ranks' parts in one parallel read: the typed reading first (fast; any value of an
    unexpected type refuses it), else the generic one; on failure, find the bad file and
    retry or explain."""
    rows = [row for tf, sp in zip(files, splits) for row in _part_rows(tf, sp)]
    for typed in readings:
        try:
            _insert_with_object_bound(con, rows, typed=typed)
            return
        except BAD_JSON_ERRORS:
            pass
    for tf, sp in zip(files, splits):
        _insert_one_file(con, tf, sp)


def _insert_with_object_bound(con, rows: list[tuple[int, str, int]], **options) -> None:
    """insert_events with small read buffers; again with large ones if an event is that big."""
    try:
        insert_events(con, rows, **options)
    except BAD_JSON_ERRORS as exc:
        if "maximum_object_size" not in str(exc):
            raise
        insert_events(con, rows, max_object_bytes=LARGE_MAX_OBJECT_BYTES, **options)


def _make_times_exact(con, files: list[TraceFile], splits: list[SplitTrace]) -> None:
    """Re-read the ranks whose times were too large for DuckDB's doubles (see kineto.INEXACT_NS)."""
    inexact = {rank for (rank,) in con.execute(INEXACT_RANKS_SQL).fetchall()}
    for tf, sp in zip(files, splits):
        if tf.rank in inexact:
            for part in sp.parts:
                add_exact_times(part)
            con.execute("DELETE FROM raw_events WHERE rank = ?", [tf.rank])
            _insert_with_object_bound(con, _part_rows(tf, sp), exact_times=True, lenient=_is_lenient(sp))
    if inexact:  # (a time the exact reading could not see either: counted as malformed)
        con.execute(f"UPDATE raw_events SET ts_ns = NULL WHERE ts_ns = {INEXACT_NS}")
        con.execute(f"UPDATE raw_events SET dur_ns = NULL WHERE dur_ns = {INEXACT_NS}")


# Chrome "duration" events: a B (begin) and the next E (end) on the same thread close a range,
# nested like a stack. Matched pairs become one complete (X) event (the B row, with the
# duration), so steps and ops written as B/E work like Kineto's X events. Ties in ts keep
# the file order (rowid).
BEGIN_END_PAIRS_SQL = """
CREATE OR REPLACE TEMP TABLE _begin_end AS
WITH be AS (
    SELECT rowid AS rid, rank, pid, tid, ph, name, ts_ns,
           sum(CASE ph WHEN 'B' THEN 1 ELSE -1 END) OVER (
               PARTITION BY rank, pid, tid ORDER BY ts_ns, rowid ROWS UNBOUNDED PRECEDING) AS depth
    FROM raw_events WHERE ph IN ('B', 'E') AND ts_ns IS NOT NULL
),
leveled AS (SELECT *, CASE ph WHEN 'B' THEN depth ELSE depth + 1 END AS level FROM be),
paired AS (
    SELECT *, lead(ph) OVER w AS next_ph, lead(rid) OVER w AS next_rid,
           lead(ts_ns) OVER w AS next_ts, lead(name) OVER w AS next_name
    FROM leveled
    WINDOW w AS (PARTITION BY rank, pid, tid, level ORDER BY ts_ns, rid)
)
SELECT rank, rid AS begin_rid, next_rid AS end_rid, next_ts - ts_ns AS dur_ns, next_name AS end_name
FROM paired WHERE ph = 'B' AND next_ph = 'E'
"""


def _convert_begin_end(con) -> list[Note]:
    """Matched B/E pairs -> X events; returns the notes: how many, and any unmatched B or E."""
    (n,) = con.execute("SELECT count(*) FROM raw_events WHERE ph IN ('B', 'E')").fetchone()
    if not n:
        return []
    con.execute(BEGIN_END_PAIRS_SQL)
    con.execute("DELETE FROM raw_events WHERE rowid IN (SELECT end_rid FROM _begin_end)")
    con.execute("""
        UPDATE raw_events SET ph = 'X', dur_ns = p.dur_ns, name = coalesce(raw_events.name, p.end_name)
        FROM _begin_end AS p WHERE raw_events.rowid = p.begin_rid
    """)
    (pairs,) = con.execute("SELECT count(*) FROM _begin_end").fetchone()
    (unmatched,) = con.execute("SELECT count(*) FROM raw_events WHERE ph IN ('B', 'E')").fetchone()
    con.execute("DROP TABLE _begin_end")
    notes: list[Note] = []
    if pairs:
        notes.append(("begin-end", "B/E (begin/end) event pairs were read as complete events", pairs))
    if unmatched:
        notes.append(("unmatched-begin-end",
                      "B (begin) or E (end) events without their other half were skipped", unmatched))
    return notes


def _insert_one_file(con, tf: TraceFile, sp: SplitTrace) -> None:
    """Read one file's parts, repairing what can be repaired (and saying so), else explain."""
    fixes = {"utf8", "types", "merge"}
    while True:
        try:
            _insert_with_object_bound(con, _part_rows(tf, sp), lenient=_is_lenient(sp))
            return
        except BAD_JSON_ERRORS as exc:
            message = str(exc)
        lowered = message.lower()
        if "utf8" in fixes and ("utf-8" in lowered or "unicode" in lowered):
            fixes.discard("utf8")
            for part in sp.parts:
                part.write_bytes(part.read_bytes().decode("utf-8", errors="replace").encode("utf-8"))
            sp.notes.append(("invalid-utf8", "invalid UTF-8 in event names or args; replaced with U+FFFD"))
        elif "types" in fixes and "transform error" in lowered:
            # a value of an unexpected JSON type (args a list, an event that is not an object, a
            # duplicate key): read such values as NULL instead of refusing the whole file
            fixes.discard("types")
            sp.notes.append((LENIENT_KIND,
                             "some events have values of unexpected JSON types; those values were read as "
                             f"NULL (first one: {_short_duckdb_error(message)})"))
        elif "merge" in fixes and len(sp.parts) > 1:
            # a part boundary may have fallen inside an event: read as one array
            fixes.discard("merge")
            sp.parts = [_merge_parts(sp.parts)]
        else:
            raise TraceFormatError(f"malformed trace JSON: {_short_duckdb_error(message)}", str(tf.path))


LENIENT_KIND = "unexpected-types"


def _is_lenient(sp: SplitTrace) -> bool:
    return any(kind == LENIENT_KIND for kind, _ in sp.notes)


def _merge_parts(parts: list[Path]) -> Path:
    merged = parts[0].with_name(parts[0].stem + ".merged.json")
    with open(merged, "wb") as out:
        out.write(b"[")
        for i, part in enumerate(parts):
            body = part.read_bytes()[1:-1]
            if i and body.strip():
                out.write(b",")
            out.write(body)
        out.write(b"]")
    return merged


def _short_duckdb_error(message: str) -> str:
    text = " ".join(message.split())
    for prefix in ("Invalid Input Error: ", "Conversion Error: "):
        text = text.replace(prefix, "")
    text = text.split(" in file ")[0] + (" " + text.split('"', 2)[-1] if ' in file "' in text else "")
    text = text.split(" Try setting ")[0].split(" Parse errors cannot be ignored")[0]  # DuckDB's advice
    return text.replace(" , in ", " in ").replace(" , ", " ").strip()[:300]


