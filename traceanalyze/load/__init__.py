"""Stage 1: a folder of per-rank traces -> a DuckDB trace database (raw tables + derived tables)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb

from traceanalyze import __version__
from traceanalyze import db as tracedb
from traceanalyze.align import align_ranks
from traceanalyze.errors import TraceanalyzeError, TraceFormatError
from traceanalyze.load.discover import Discovery, TraceFile, discover, format_ranks
from traceanalyze.load.kineto import (
    INEXACT_NS,
    INEXACT_RANKS_SQL,
    LARGE_MAX_OBJECT_BYTES,
    add_exact_times,
    base_time_ns,
    insert_events,
    shift_times,
)
from traceanalyze.load.overlap import split_while_parsing
from traceanalyze.load.source import estimated_uncompressed_bytes
from traceanalyze.load.split import SplitTrace
from traceanalyze.load.stale import staging_prefix, sweep_database_tmp, sweep_staging

Progress = Callable[[str], None]
# what DuckDB raises for malformed JSON or values it cannot convert (other errors are bugs)
BAD_JSON_ERRORS = (duckdb.InvalidInputException, duckdb.ConversionException)


@dataclass(frozen=True)
class LoadResult:
    """What `load_trace_dir` produced."""

    db_path: Path
    ranks: list[int]
    reused: bool  # True when an up-to-date database was found and nothing was parsed
    events: int
    input_bytes: int  # uncompressed bytes of the traceEvents arrays parsed (0 when reused)


# Part files live only while DuckDB reads them. A RAM-backed folder writes and reads them
# about 3x faster than a disk; it is used when the events surely fit in a quarter of the
# available memory (gzip counted at 20x its size). TRACEANALYZE_TMPDIR overrides the choice.
RAM_STAGING_DIR = Path("/dev/shm")
GZIP_EXPANSION_ESTIMATE = 20


def _available_memory_bytes() -> int:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def staging_dir(files: list[TraceFile]) -> str | None:
    """Where to write part files: $TRACEANALYZE_TMPDIR, else RAM when they fit, else the temp dir."""
    chosen = os.environ.get("TRACEANALYZE_TMPDIR")
    if chosen:
        return chosen
    estimate = sum(tf.size_bytes * (GZIP_EXPANSION_ESTIMATE if tf.path.name.endswith(".gz") else 1)
                   for tf in files)
    if RAM_STAGING_DIR.is_dir() and os.access(RAM_STAGING_DIR, os.W_OK) \
            and estimate * 4 < _available_memory_bytes():
        return str(RAM_STAGING_DIR)
    return None


def _fingerprint(discovery: Discovery, ranks: set[int] | None) -> str:
    files = [(str(tf.path.resolve()), tf.size_bytes, tf.mtime_ns, tf.rank) for tf in discovery.files]
    payload = json.dumps([tracedb.SCHEMA_VERSION, __version__, sorted(ranks or []), files])
    return hashlib.sha256(payload.encode()).hexdigest()


def _stored_fingerprint(db_path: Path) -> str | None:
    try:
        with duckdb.connect(str(db_path), read_only=True) as con:
            row = con.execute("SELECT value FROM load_meta WHERE key = 'fingerprint'").fetchone()
            return row[0] if row else None
    except duckdb.Error:
        return None


def read_load_issues(db_path: Path) -> list[tuple[str, str | None, str, int | None]]:
    """(severity, file, message, count) of the load_issues of a database, warnings first."""
    with duckdb.connect(str(db_path), read_only=True) as con:
        return con.execute(
            "SELECT severity, file, message, count FROM load_issues"
            " ORDER BY severity = 'info', rank NULLS FIRST, file, kind").fetchall()


def _reused_result(db_path: Path) -> LoadResult:
    with duckdb.connect(str(db_path), read_only=True) as con:
        ranks = [r for (r,) in con.execute("SELECT rank FROM ranks ORDER BY rank").fetchall()]
        (events,) = con.execute("SELECT count(*) FROM raw_events").fetchone()
    return LoadResult(db_path, ranks, True, events, 0)


def load_trace_dir(target: Path, db_path: Path, ranks: set[int] | None = None,
                   reuse: bool = True, progress: Progress | None = None) -> LoadResult:
    """Load the traces under `target` into the database file `db_path`.

    A database built from the same files (same sizes and modification times) and the
    same rank selection is reused as it is.
    """
    say = progress or (lambda _msg: None)
    if db_path.is_dir():
        raise TraceanalyzeError("is a folder; give a database file name such as trace.duckdb", str(db_path))
    _chosen_memory_limit()
    discovery = discover(target, ranks)
    fingerprint = _fingerprint(discovery, ranks)
    if reuse and db_path.exists() and _stored_fingerprint(db_path) == fingerprint:
        try:
            reused = _reused_result(db_path)
        except duckdb.Error:  # damaged since it was written: build it again
            reused = None
        if reused is not None:
            say(f"reusing {db_path} (traces unchanged)")
            return reused
    # written under a private name and moved into place: a concurrent load or reader never
    # sees half a database
    tmp_db = db_path.with_name(f"{db_path.name}.{os.getpid()}.tmp")
    work = None
    staging = staging_dir(discovery.files)
    try:
        db_path.parent.mkdir(parents=True, exist_ok=True)
        sweep_database_tmp(db_path)  # work files of killed runs (load/stale.py)
        sweep_staging({staging, None, str(RAM_STAGING_DIR)})
        tmp_db.unlink(missing_ok=True)
        con = duckdb.connect(str(tmp_db))
    except (OSError, duckdb.Error) as exc:
        raise TraceanalyzeError(f"cannot write the database here ({_short_os_error(exc)})", str(db_path)) from None
    try:
        work = Path(tempfile.mkdtemp(prefix=staging_prefix(), dir=staging))
        try:
            result = _load_into(con, target, discovery, work, say)
            _write_meta(con, target, ranks, fingerprint)
            con.execute("CHECKPOINT")
        finally:
            con.close()
        try:
            os.replace(tmp_db, db_path)
        except OSError as exc:
            raise TraceanalyzeError(f"cannot write the database here ({_short_os_error(exc)})",
                                    str(db_path)) from None
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
        tmp_db.unlink(missing_ok=True)
        tmp_db.with_name(tmp_db.name + ".wal").unlink(missing_ok=True)
        shutil.rmtree(tmp_db.with_name(tmp_db.name + ".tmp"), ignore_errors=True)  # DuckDB's spill folder
    return LoadResult(db_path, result[0], False, result[1], result[2])


def _short_os_error(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return " ".join(str(exc).split())[:200]


def _load_into(con, target: Path, discovery: Discovery, work: Path, say: Progress):
    tracedb.create_schema(con)
    tracedb.create_macros(con)
    files = discovery.files
    total_mb = sum(tf.size_bytes for tf in files) / 1e6
    say(f"reading {len(files)} trace file(s), {total_mb:.1f} MB on disk")
    _limit_memory(con, sum(estimated_uncompressed_bytes(tf.path) for tf in files))
    memory_notes: list[tuple[str, str]] = []
    splits = _split_and_parse(con, files, work, say, memory_notes)
    _insert_ranks(con, files, splits)
    _make_times_exact(con, files, splits)
    _convert_begin_end(con)
    _record_issues(con, discovery, splits)
    say("building tables")
    _relaxing_memory(con, lambda: tracedb.build_tables(con), memory_notes)
    _record_notes(con, memory_notes)
    _record_event_issues(con)
    _check_one_run(con, files, splits)
    align_ranks(con)
    (events,) = con.execute("SELECT count(*) FROM raw_events").fetchone()
    return [tf.rank for tf in files], events, sum(s.events_bytes for s in splits)


# DuckDB may use this much memory per byte of trace events (at least MIN_MEMORY_LIMIT_BYTES):
# beyond it, it writes to the database file or spills to disk, so the whole load stays
# under the size of the JSON. TRACEANALYZE_MEMORY_LIMIT (DuckDB syntax, e.g. '4GB') overrides.
MEMORY_LIMIT_PER_EVENT_BYTE = 0.6
MIN_MEMORY_LIMIT_BYTES = 256 << 20
MEMORY_SIZE = re.compile(r"\d+(\.\d+)?\s*([KMGT]i?B|B)", re.IGNORECASE)


def _chosen_memory_limit() -> str | None:
    """TRACEANALYZE_MEMORY_LIMIT, checked (before anything is read)."""
    chosen = os.environ.get("TRACEANALYZE_MEMORY_LIMIT", "").strip()
    if chosen and not MEMORY_SIZE.fullmatch(chosen):
        raise TraceanalyzeError(f"TRACEANALYZE_MEMORY_LIMIT={chosen!r} is not a memory size such as '4GB'")
    return chosen or None


def _limit_memory(con, events_bytes: int) -> None:
    chosen = _chosen_memory_limit()
    if chosen:
        con.execute(f"SET memory_limit = '{chosen}'")
        return
    limit = max(MIN_MEMORY_LIMIT_BYTES, int(events_bytes * MEMORY_LIMIT_PER_EVENT_BYTE))
    if limit < _available_memory_bytes() * 0.8:  # (else DuckDB's own default, 80 % of RAM, is lower)
        con.execute(f"SET memory_limit = '{limit >> 20}MiB'")


def _relaxing_memory(con, action: Callable[[], None], notes: list[tuple[str, str]]) -> None:
    """Run `action` (idempotent); if DuckDB runs out of memory under the load's limit (an
    operator that cannot spill), lift the limit, say so in `notes`, and run it again."""
    try:
        action()
    except duckdb.OutOfMemoryException:
        (limit,) = con.execute("SELECT current_setting('memory_limit')").fetchone()
        con.execute("RESET memory_limit")
        notes.append(("memory-limit-lifted", (f"DuckDB needed more than its memory limit ({limit}) to load "
                                              "these traces; the limit was lifted (see TRACEANALYZE_MEMORY_LIMIT)")))
        action()


# what makes the early (typed) parse give up, to be redone by the careful path
EARLY_PARSE_ERRORS = (*BAD_JSON_ERRORS, duckdb.OutOfMemoryException)


def _split_and_parse(con, files: list[TraceFile], work: Path, say: Progress,
                     memory_notes: list[tuple[str, str]]) -> list[SplitTrace]:
    """Split the files into parts while DuckDB parses them (typed reading, one transaction);
    if that fails anywhere, undo it and parse everything the careful way (_insert_events)."""
    say("splitting and parsing the trace events")
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
    _relaxing_memory(con, lambda: _insert_events(con, files, over.splits, say, readings), memory_notes)
    return over.splits


def _insert_ranks(con, files: list[TraceFile], splits: list[SplitTrace]) -> None:
    rows = []
    for tf, sp in zip(files, splits):
        devices = sp.metadata.get("deviceProperties")
        device = devices[0].get("name") if isinstance(devices, list) and devices and isinstance(devices[0], dict) else None
        rows.append((tf.rank, tf.rank_source, str(tf.path), tf.size_bytes, tf.mtime_ns, sp.events_bytes,
                     tf.world_size, tf.backend, base_time_ns(sp.metadata), device,
                     sp.truncated_at_byte is not None))
    con.executemany(
        "INSERT INTO ranks (rank, rank_source, file, file_bytes, file_mtime_ns, events_bytes, world_size,"
        " backend, base_ns, device_name, truncated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)


def _part_rows(tf: TraceFile, sp: SplitTrace) -> list[tuple[int, str, int]]:
    base = base_time_ns(sp.metadata)
    return [(tf.rank, str(p), base) for p in sp.parts]


# kineto.py's readings, tried in this order: typed (fast), then generic (any value of an odd type).
READINGS = (True, False)


def _insert_events(con, files: list[TraceFile], splits: list[SplitTrace], say: Progress,
                   readings: tuple[bool, ...] = READINGS) -> None:
    """All ranks' parts in one parallel read: the typed reading first (fast; any value of an
    unexpected type refuses it), else the generic one; on failure, find the bad file and
    retry or explain."""
    mb = sum(s.events_bytes for s in splits) / 1e6
    say(f"parsing {mb:.1f} MB of trace events")
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


def _convert_begin_end(con) -> None:
    """Matched B/E pairs -> X events; the count and any unmatched B or E go to load_issues."""
    (n,) = con.execute("SELECT count(*) FROM raw_events WHERE ph IN ('B', 'E')").fetchone()
    if not n:
        return
    con.execute(BEGIN_END_PAIRS_SQL)
    con.execute("DELETE FROM raw_events WHERE rowid IN (SELECT end_rid FROM _begin_end)")
    con.execute("""
        UPDATE raw_events SET ph = 'X', dur_ns = p.dur_ns, name = coalesce(raw_events.name, p.end_name)
        FROM _begin_end AS p WHERE raw_events.rowid = p.begin_rid
    """)
    con.execute("""
        INSERT INTO load_issues
        SELECT p.rank, r.file, 'begin-end', 'info',
               'B/E (begin/end) event pairs were read as complete events', count(*)
        FROM _begin_end AS p JOIN ranks AS r USING (rank) GROUP BY p.rank, r.file
        UNION ALL
        SELECT e.rank, r.file, 'unmatched-begin-end', 'warning',
               'B (begin) or E (end) events without their other half were skipped', count(*)
        FROM raw_events AS e JOIN ranks AS r USING (rank) WHERE e.ph IN ('B', 'E') GROUP BY e.rank, r.file
    """)
    con.execute("DROP TABLE _begin_end")


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


# discovery notes that mean data may be missing (a rank file that could not be read)
DISCOVERY_WARNINGS = {"not-a-file": "warning"}


def _record_issues(con, discovery: Discovery, splits: list[SplitTrace]) -> None:
    rows = [(None, path, kind, DISCOVERY_WARNINGS.get(kind, "info"), message, None)
            for path, kind, message in discovery.notes]
    for tf, sp in zip(discovery.files, splits):
        if sp.truncated_at_byte is not None:
            rows.append((tf.rank, str(tf.path), "truncated", "warning",
                         f"file ends abruptly at byte {sp.truncated_at_byte:,} (uncompressed): "
                         f"kept every complete event before the cut, lost the last "
                         f"{sp.lost_bytes:,} bytes (an event cut in the middle, or the end of the file)",
                         None))
        rows.extend((tf.rank, str(tf.path), kind, "warning", message, None) for kind, message in sp.notes)
        if tf.rank_source == "file name":
            rows.append((tf.rank, str(tf.path), "rank-from-name", "info",
                         f"no distributedInfo.rank in the trace; rank {tf.rank} taken from the file name", None))
        elif tf.rank_source == "single process":
            rows.append((tf.rank, str(tf.path), "single-process", "info",
                         "no distributedInfo: a single-process run, analyzed as rank 0", None))
    if rows:
        con.executemany("INSERT INTO load_issues VALUES (?, ?, ?, ?, ?, ?)", rows)


def _record_notes(con, notes: list[tuple[str, str]]) -> None:
    """Notes about the whole load (no file of their own) as load_issues."""
    if notes:
        con.executemany("INSERT INTO load_issues VALUES (NULL, NULL, ?, 'info', ?, NULL)", notes)


def _check_one_run(con, files: list[TraceFile], splits: list[SplitTrace]) -> None:
    """Ranks recorded on one host share its clock, so their profiling windows must overlap in
    time; when they do not, the files come from different runs (or windows) of the job."""
    hosts = {tf.rank: sp.metadata.get("host_name") for tf, sp in zip(files, splits)}
    windows = {rank: (lo, hi) for rank, lo, hi in con.execute(
        "SELECT rank, min(ts_ns), max(end_ns) FROM steps GROUP BY rank").fetchall()}
    by_host: dict[str, list[int]] = {}
    for rank, host in hosts.items():
        if isinstance(host, str) and host and rank in windows:
            by_host.setdefault(host, []).append(rank)
    for host, ranks in by_host.items():
        ranks.sort(key=lambda r: windows[r])
        first = ranks[0]
        for rank in ranks[1:]:
            if windows[rank][0] > windows[first][1]:
                gap_s = (windows[rank][0] - windows[first][1]) / 1e9
                path = next(str(tf.path) for tf in files if tf.rank == rank)
                raise TraceFormatError(
                    f"rank {rank} was recorded on host {host!r} like rank {first}, but {gap_s:,.1f} s "
                    f"after rank {first}'s profiled steps ended: the files come from different runs "
                    "or profiling windows", path)


def _record_event_issues(con) -> None:
    """Malformed events, counted per rank: never dropped silently."""
    con.execute("""
        INSERT INTO load_issues
        SELECT e.rank, r.file, kind, 'warning', message, n FROM (
            SELECT rank, 'bad-ts' AS kind,
                   'events whose ts is missing, not a number or out of range were skipped' AS message,
                   count(*) AS n
            FROM raw_events WHERE ts_ns IS NULL AND ph IS NOT NULL AND ph <> 'M' GROUP BY rank
            UNION ALL
            SELECT rank, 'bad-dur', 'complete (X) events with a missing or negative dur were skipped', count(*)
            FROM raw_events WHERE ph = 'X' AND ts_ns IS NOT NULL AND (dur_ns IS NULL OR dur_ns < 0) GROUP BY rank
            UNION ALL
            SELECT rank, 'no-ph', 'events without a ph (phase) field, or not JSON objects, were skipped',
                   count(*)
            FROM raw_events WHERE ph IS NULL GROUP BY rank
            UNION ALL
            SELECT rank, 'duplicate-step',
                   'ProfilerStep#N names that occur more than once (' || string_agg(name, ', ' ORDER BY name)
                   || '): each such step spans all its occurrences', count(*)
            FROM (SELECT rank, name FROM raw_events
                  WHERE ph = 'X' AND name LIKE 'ProfilerStep#%' AND coalesce(cat, '') <> 'gpu_user_annotation'
                    AND ts_ns IS NOT NULL AND dur_ns >= 0
                  GROUP BY rank, name HAVING count(*) > 1)
            GROUP BY rank
        ) AS e JOIN ranks AS r USING (rank)
    """)
    con.execute("""
        INSERT INTO load_issues
        SELECT s.rank, r.file, 'no-steps', 'info',
               'no ProfilerStep#N annotations (profiled without a schedule): the whole trace is analyzed as one window',
               NULL
        FROM steps AS s JOIN ranks AS r USING (rank) WHERE s.synthetic
    """)


def _write_meta(con, target: Path, ranks: set[int] | None, fingerprint: str) -> None:
    con.executemany("INSERT INTO load_meta VALUES (?, ?)", [
        ("schema_version", tracedb.SCHEMA_VERSION),
        ("tool_version", __version__),
        ("target", str(target)),
        ("rank_selection", "all" if ranks is None else format_ranks(ranks)),
        ("fingerprint", fingerprint),
    ])


__all__ = ["LoadResult", "load_trace_dir", "TraceanalyzeError"]
