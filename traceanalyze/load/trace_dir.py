"""Stage 1's orchestration: a trace folder (or shard set) -> trace.duckdb.

Discovers the ranks, reuses an unchanged database or shards, runs the maps on an executor,
repairs or reports damaged shards, reduces the shards into the database and writes its meta.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import traceanalyze.db as tracedb
from traceanalyze.analysis import critical_path
from traceanalyze.errors import TraceanalyzeError, TraceFormatError
from traceanalyze.interrupts import interrupts_held
from traceanalyze.lazy_import import duckdb
from traceanalyze.load.discover import Discovery, TraceFile, discover, find_dumps, format_ranks
from traceanalyze.load.flight_recorder import DumpFile, insert_dumps
from traceanalyze.load.memory import (
    RAM_STAGING_DIR,
    chosen_memory_limit,
    staging_dir,
    staging_folder,
)
from traceanalyze.load.shards import ShardStore, is_current, is_remote, local_path
from traceanalyze.load.stale import marker, sweep_database_tmp, sweep_staging
from traceanalyze.version import __version__

if TYPE_CHECKING:
    from traceanalyze.load.map_outcome import MapOutcome
    from traceanalyze.load.verify import ShardProblem

# The maps (executors, the per-rank tables), the reduce and the Flight Recorder's database are
# imported by the functions that run them: a re-run that reuses its database needs none of
# them, and their imports (multiprocessing, concurrent.futures, ...) were a sixth of its time.

Progress = Callable[[str], None]
# (importing the submodule traceanalyze.load.map binds `map` in this namespace: no builtin map() here)


@dataclass(frozen=True)
class LoadResult:
    """What `load_trace_dir` produced."""

    db_path: Path
    ranks: list[int]
    reused: bool  # True when an up-to-date database was found and nothing was parsed
    events: int
    input_bytes: int  # uncompressed bytes of the traceEvents arrays parsed (0 when reused)
    mapped: int = 0  # ranks parsed in this run (the others' shards were reused)
    failed: tuple[int, ...] = ()  # ranks whose map failed (see load_issues)
    # the database's load_issues as read_load_issues gives them, when the load read them anyway
    # (a reuse: opening the database again cost a re-run a tenth of its time); None: not read
    issues: tuple[tuple[str, str | None, str, int | None], ...] | None = None


def default_shards(db_path: Path) -> str:
    """The shard folder of a database: trace.duckdb -> trace.shards/ beside it."""
    return str(db_path.with_suffix(".shards"))


def _fingerprint(discovery: Discovery, ranks: set[int] | None, shards_root: str) -> str:
    files = [(tf.url or str(tf.path.resolve()), tf.size_bytes, tf.mtime_ns, tf.etag, tf.rank)
             for tf in discovery.files]
    files += [(str(d.path.resolve()), d.size_bytes, d.mtime_ns, "flight-recorder", d.rank) for d in discovery.dumps]
    payload = json.dumps([tracedb.SCHEMA_VERSION, __version__, sorted(ranks or []), shards_root, files])
    return hashlib.sha256(payload.encode()).hexdigest()


def _listing(target, ranks: set[int] | None, shards_root: str) -> str | None:
    """A hash of what a local target holds, by names, sizes and modification times alone (no
    file opened: the fingerprint reads each trace's head for its rank, 4 s at 1,024 ranks), the
    rank selection and the shard folder; None for a target in object storage. A database built
    from the same listing is reused without discovery; bad targets raise as discovery does."""
    if is_remote(str(target)):
        return None
    from traceanalyze.load.discover import list_dump_paths, listed

    root = Path(local_path(str(target)))
    paths, skipped = listed(root)
    entries = []
    for path in [*paths, *list_dump_paths(root)]:
        try:
            st = path.stat()
        except OSError:
            return None  # (gone meanwhile: discovery says what)
        entries.append((str(path.resolve()), st.st_size, st.st_mtime_ns))
    payload = json.dumps([tracedb.SCHEMA_VERSION, __version__, "all" if ranks is None else sorted(ranks),
                          shards_root, entries, skipped])
    return hashlib.sha256(payload.encode()).hexdigest()


def _stored(con, key: str) -> str | None:
    row = con.execute("SELECT value FROM load_meta WHERE key = ?", [key]).fetchone()
    return row[0] if row else None


def read_load_issues(db_path: Path) -> list[tuple[str, str | None, str, int | None]]:
    """(severity, file, message, count) of the load_issues of a database, warnings first."""
    with duckdb.connect(str(db_path), read_only=True) as con:
        return _load_issues(con)


def _load_issues(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str | None, str, int | None]]:
    return con.execute("SELECT severity, file, message, count FROM load_issues"
                       " ORDER BY severity = 'info', rank NULLS FIRST, file, kind").fetchall()


def _reused_result(db_path: Path, key: str, value: str) -> LoadResult | None:
    """The database as it is when it was built from the same files (its load_meta `key`, 'listing'
    or 'fingerprint', is `value`), or None when it was not, or is of views over shards that are
    no longer intact, or cannot be read."""
    try:
        # one connection (opening one costs), without the macros (their creation cost a re-run
        # a sixth of its time; these queries use none)
        with tracedb.open_quiet(db_path, read_only=True) as con:
            tracedb.bound_views_memory(con)
            if not value or _stored(con, key) != value:
                return None
            ranks = [r for (r,) in con.execute("SELECT rank FROM ranks ORDER BY rank").fetchall()]
            meta = dict(con.execute("SELECT key, value FROM load_meta "
                                    "WHERE key IN ('storage', 'shards', 'shard_manifests')").fetchall())
            if meta.get("storage") == "views" and not _views_intact(meta.get("shards") or "", ranks,
                                                                    meta.get("shard_manifests")):
                return None
            (events,) = con.execute("SELECT count(*) FROM raw_events").fetchone()
            issues = tuple(_load_issues(con))
    except duckdb.Error:  # damaged, not ours, or its shards are gone: build it again
        return None
    return LoadResult(db_path, ranks, True, events, 0, issues=issues)


def _views_intact(shards_root: str, ranks: list[int], recorded: str | None = None) -> bool:
    """The local shards that a database's views read are still the ones their manifests describe
    (checked as the reduce checks them: verify_shards, one query per table for all ranks). When
    the manifests are the ones the database was built from (`recorded`: manifests_digest), files
    of the sizes and hashes they record are the files checked then: their rank columns are not
    read again (1,024 small ranks: 6 s of a 13 s re-run)."""
    from traceanalyze.load.verify import verify_files, verify_shards

    store = ShardStore(shards_root)
    shards = []
    for rank in ranks:
        manifest = store.read_manifest(rank)
        if not is_current(manifest):
            return False
        shards.append((store.rank_dir(rank), manifest, rank))
    if recorded and manifests_digest({rank: manifest for _, manifest, rank in shards}) == recorded:
        return not any(verify_files(shards).values())
    with duckdb.connect(config={"threads": 1}) as con:
        return not any(verify_shards(shards, con).values())


def manifests_digest(manifests: dict[int, dict]) -> str:
    """One hash of the ranks' shard manifests (each lists its files' sizes and hashes)."""
    import xxhash

    digest = xxhash.xxh3_128()
    for rank in sorted(manifests):
        digest.update(json.dumps([rank, manifests[rank]], sort_keys=True, separators=(",", ":")).encode())
    return digest.hexdigest()


def load_trace_dir(target: Path, db_path: Path, ranks: set[int] | None = None,
                   reuse: bool = True, progress: Progress | None = None, *, executor: str = "local",
                   shards: str | None = None, workers: int | None = None,
                   ray_address: str | None = None) -> LoadResult:
    """Load the traces under `target` into the database file `db_path` (map + reduce).

    A database built from the same files (same sizes and modification times) and the same
    rank selection is reused as it is; otherwise only the ranks whose shard is missing or
    out of date are parsed. `shards` (a folder or fsspec URL) defaults to <db>.shards/.
    A load that fails leaves no folder it made for the database (see _folders_kept_on_success).
    """
    with _folders_kept_on_success(Path(db_path).parent):
        return _load_trace_dir(target, db_path, ranks, reuse, progress, executor=executor, shards=shards,
                               workers=workers, ray_address=ray_address)


@contextlib.contextmanager
def _folders_kept_on_success(folder: Path) -> Iterator[None]:
    """The folders of `folder`'s path that do not exist yet are removed again, those still
    empty, when the block fails: a bad trace under `--out new/dir` or `--db new/x.duckdb` left
    the empty folders behind."""
    folder = Path(os.path.abspath(folder))
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    try:
        yield
    except BaseException:
        for made in missing:  # the deepest first
            try:
                made.rmdir()
            except OSError:  # not empty (or never made): what is above stays too
                break
        raise


def _load_trace_dir(target: Path, db_path: Path, ranks: set[int] | None, reuse: bool,
                    progress: Progress | None, *, executor: str, shards: str | None,
                    workers: int | None, ray_address: str | None) -> LoadResult:
    say = progress or (lambda _msg: None)
    db_path = Path(db_path)
    if db_path.is_dir():
        raise TraceanalyzeError("is a folder; give a database file name such as trace.duckdb", str(db_path))
    chosen_memory_limit()
    shards_root = shards or default_shards(db_path)
    listing = _listing(target, ranks, shards_root)
    if reuse and listing and db_path.exists():
        reused = _reused_result(db_path, "listing", listing)
        if reused is not None:
            say(f"reusing {db_path} (traces unchanged)")
            return reused
    discovery = _discover(target, ranks)
    fingerprint = _fingerprint(discovery, ranks, shards_root)
    if reuse and db_path.exists():
        reused = _reused_result(db_path, "fingerprint", fingerprint)
        if reused is not None:
            say(f"reusing {db_path} (traces unchanged)")
            return reused
    from traceanalyze.load.executor_registry import run_maps
    from traceanalyze.load.fr_database import dumps_only_db
    from traceanalyze.load.reduce import usable_shards

    if not discovery.files:  # Flight Recorder dumps alone (load/flight_recorder.py)
        say(f"reading {len(discovery.dumps)} Flight Recorder dump(s), no profiler trace")
        dumps_only_db(discovery.dumps, db_path, meta={"target": str(target), "fingerprint": fingerprint,
                                                      "listing": listing or "",
                                                      "rank_selection": "all" if ranks is None else format_ranks(ranks)})
        return LoadResult(db_path, [], False, 0, 0)
    store = ShardStore(shards_root)
    created = False
    try:
        with interrupts_held():  # (made and `created` set at once: the except below removes it)
            created = _create_root(store, db_path)
        current = [tf.rank for tf in discovery.files if reuse and is_current(store.read_manifest(tf.rank), tf)]
        intact, _, damaged = usable_shards(store, current, _cache_root(store, db_path))
        verified = frozenset(s.rank for s in intact)
        stale = [tf for tf in discovery.files if tf.rank not in verified]
        total_mb = sum(tf.size_bytes for tf in stale) / 1e6
        if stale:
            say(f"parsing {len(stale)} of {len(discovery.files)} trace file(s), {total_mb:.1f} MB on disk"
                f" ({executor} executor)")
        else:
            say(f"all {len(discovery.files)} rank shard(s) up to date")
        outcomes = run_maps(stale, shards_root, executor, workers, ray_address, say)
        failed = [o for o in outcomes if o.manifest is None]
        if len(failed) == len(discovery.files):
            _raise_failure(failed[0])
        notes = [(None, path, kind, DISCOVERY_WARNINGS.get(kind, "info"), message, None)
                 for path, kind, message in discovery.notes]
        notes += [_failure_issue(o) for o in failed]
        notes += [_repaired_issue(p) for p in damaged if p.rank not in {o.rank for o in failed}]
        good = [tf.rank for tf in discovery.files if tf.rank not in {o.rank for o in failed}]
        if not store.remote:  # shards this load's maps just wrote (their hashes taken as written) need no second check
            verified |= {o.rank for o in outcomes if o.manifest is not None}
        result = reduce_to_db(store, good, db_path, notes, say, meta={
            "target": str(target), "fingerprint": fingerprint, "listing": listing or "",
            "rank_selection": "all" if ranks is None else format_ranks(ranks)}, verified=verified,
            dumps=discovery.dumps)
    except BaseException:
        if created:
            shutil.rmtree(local_path(shards_root), ignore_errors=True)
        raise
    input_bytes = sum(o.manifest["events_bytes"] for o in outcomes if o.manifest)
    return LoadResult(db_path, result.ranks, False, result.events, input_bytes,
                      mapped=len(outcomes) - len(failed), failed=tuple(o.rank for o in failed),
                      issues=result.issues)


# discovery notes that mean data may be missing (a rank file that could not be read)
DISCOVERY_WARNINGS = {"not-a-file": "warning"}


def _discover(target, ranks: set[int] | None) -> Discovery:
    if is_remote(str(target)):
        from traceanalyze.load.remote import discover_remote

        return discover_remote(str(target), ranks)
    return discover(Path(local_path(str(target))), ranks)


def _create_root(store: ShardStore, db_path: Path) -> bool:
    """Make a local shard folder; True when this call created it (removed again on failure)."""
    if store.remote:
        return False
    root = Path(local_path(store.root))
    if root.exists():
        return False
    try:
        root.mkdir(parents=True)
    except OSError as exc:
        raise TraceanalyzeError(f"cannot write the database here ({_short_os_error(exc)})", str(db_path)) from None
    return True


def _raise_failure(outcome: MapOutcome):
    raise TraceFormatError(outcome.error or "could not be read", outcome.file)


def _failure_issue(outcome: MapOutcome) -> tuple:
    return (outcome.rank, outcome.file, "rank-failed", "warning",
            f"this rank could not be read and is left out of the analysis: {outcome.error}", None)


def _repaired_issue(problem: ShardProblem) -> tuple:
    """A damaged shard whose trace was at hand: mapped again (an info note: the files are fine now,
    but the shard folder's storage lost or changed data)."""
    return (problem.rank, problem.file, "shard-repaired", "info",
            f"{problem.message()}; rank {problem.rank} was mapped again from its trace", None)


def _corrupt_issue(problem: ShardProblem) -> tuple:
    return (problem.rank, problem.file, "shard-corrupt", "warning",
            f"{problem.message()}; rank {problem.rank} is left out of the analysis (ingest it again)", None)


def _cache_root(store: ShardStore, db_path: Path) -> str:
    """Where the reduce reads the shards: in place, or (a bucket) downloaded beside the database."""
    return default_shards(db_path) if store.remote else store.root


# load_issues kinds that mean a rank is missing from the analysis (the next load maps it again)
RANK_LEFT_OUT = frozenset({"rank-failed", "shard-corrupt"})


def _timed_shards(shards: list) -> tuple[list, list]:
    """(the shards kept, those left out): a rank without a step (its trace had no event with a
    time: empty, or every event skipped) is left out beside ranks with steps, as a rank that
    cannot be read is; when no rank has a step all stay (the database to query says why)."""
    timed = [s for s in shards if s.manifest["rows"].get("steps", 1) != 0]
    if not timed or len(timed) == len(shards):
        return shards, []
    return timed, [s for s in shards if s.manifest["rows"].get("steps", 1) == 0]


def _untimed_issue(shard) -> tuple:
    return (shard.rank, (shard.manifest.get("source") or {}).get("file"), "rank-untimed", "warning",
            "this rank's trace has no event with a time (an empty trace, or every event skipped): "
            "it is left out of the analysis", None)


def reduce_to_db(store: ShardStore, ranks: list[int], db_path: Path, notes: list[tuple], say: Progress,
                 meta: dict[str, str], verified: frozenset[int] = frozenset(),
                 dumps: list[DumpFile] = ()) -> LoadResult:
    """The shards of `ranks` -> the database file `db_path` (written under a private name and
    moved into place: a concurrent load or reader never sees half a database). Each shard's
    files are checked first (`verified`: ranks this process checked already); a damaged one
    is left out with a `shard-corrupt` warning."""
    import traceanalyze.load.reduce as reduce
    from traceanalyze.load.reduce import (
        attach_shards,
        cross_rank,
        record_notes,
        shard_bytes,
        usable_shards,
    )

    cache = _cache_root(store, db_path)
    shards, stale, damaged = usable_shards(store, ranks, cache, verified)
    notes = notes + [(rank, None, "shard-unusable", "warning",
                      f"the shard of rank {rank} is missing, incomplete or from another traceanalyze version: "
                      "left out (ingest the rank again)", None) for rank in stale]
    notes += [_corrupt_issue(p) for p in damaged]
    shards, untimed = _timed_shards(shards)
    notes += [_untimed_issue(s) for s in untimed]
    if not shards:
        if damaged:
            raise TraceanalyzeError(f"no usable shard ({len(damaged)} damaged, {len(stale)} missing or stale); "
                                    f"this file: {damaged[0].problem}", damaged[0].file)
        raise TraceanalyzeError("no usable shard: nothing to analyze", store.root)
    if stale or any(note[2] in RANK_LEFT_OUT for note in notes):
        meta = {**meta, "fingerprint": "", "listing": ""}  # a rank is missing: the next run maps it again, never reuses this
    materialize = shard_bytes(shards) <= reduce.MATERIALIZE_MAX_BYTES
    say(f"combining {len(shards)} rank shard(s) ({'copied into' if materialize else 'viewed from'} the database)")
    tmp_db = db_path.with_name(f"{db_path.name}.{marker()}.tmp")
    try:  # (the database is opened inside: a signal while it is created removes it too)
        try:
            db_path.parent.mkdir(parents=True, exist_ok=True)
            sweep_database_tmp(db_path)  # work files of killed runs (load/stale.py)
            sweep_staging({staging_dir([]), None, str(RAM_STAGING_DIR)})
            tmp_db.unlink(missing_ok=True)
            con = _open_reduce_db(tmp_db, shards, materialize)
        except (OSError, duckdb.Error) as exc:
            raise TraceanalyzeError(f"cannot write the database here ({_short_os_error(exc)})",
                                    str(db_path)) from None
        try:
            # (one transaction: each statement committed on its own had DuckDB sync its log to
            # disk, 131 times in one rank's reduce, ms each on a network file system; the work
            # file is deleted, never recovered, if the load stops)
            con.execute("BEGIN TRANSACTION")
            attach_shards(con, shards, materialize)
            record_notes(con, notes)
            insert_dumps(con, list(dumps))
            cross_rank(con, shards)
            _write_meta(con, {**meta, "shards": os.path.abspath(local_path(cache)),
                              "storage": "tables" if materialize else "views",
                              **({} if materialize else {
                                  "shard_folders": json.dumps([os.path.abspath(s.folder) for s in shards]),
                                  "shard_manifests": manifests_digest({s.rank: s.manifest for s in shards})})})
            (events,) = con.execute("SELECT count(*) FROM raw_events").fetchone()
            con.execute("COMMIT")
            con.execute("CHECKPOINT")
        finally:
            con.close()
        issues = _critical_path(tmp_db, shards, materialize)
        try:
            os.replace(tmp_db, db_path)
        except OSError as exc:
            raise TraceanalyzeError(f"cannot write the database here ({_short_os_error(exc)})",
                                    str(db_path)) from None
    finally:
        tmp_db.unlink(missing_ok=True)
        tmp_db.with_name(tmp_db.name + ".wal").unlink(missing_ok=True)
        shutil.rmtree(tmp_db.with_name(tmp_db.name + ".tmp"), ignore_errors=True)  # DuckDB's spill folder
    return LoadResult(db_path, [s.rank for s in shards], False, events, 0, issues=issues)


def _open_reduce_db(path: Path, shards: list, materialize: bool) -> duckdb.DuckDBPyConnection:
    """A connection of the reduce to its database file: threads for the trace's size, and a
    database of views bounded like its readers."""
    con = tracedb.open_quiet(path)
    try:
        tracedb.set_stage_threads(con, sum(s.manifest.get("events_bytes") or 0 for s in shards),
                                  one_thread_max_bytes=tracedb.REDUCE_ONE_THREAD_MAX_BYTES)
        if not materialize:  # (the same bound as the readers of this database: db.bound_views_memory)
            con.execute("SET memory_limit = ?", [chosen_memory_limit() or tracedb.VIEWS_MEMORY_LIMIT])
            con.execute("SET enable_external_file_cache = false")
    except BaseException:
        con.close()
        raise
    return con


def _critical_path(tmp_db: Path, shards: list, materialize: bool) -> tuple:
    """The table critical_path of the reduced database `tmp_db` (analysis/critical_path.py),
    each part in its own connection: the walk's inputs gathered, the walk with no connection
    open, its segments inserted. Returns the database's load_issues, complete once the inputs
    are gathered (read there: opening the finished database again to read them cost a 200 MB
    load 0.1 s). A DuckDB connection keeps 50-60 MB of what its queries used
    until it is closed; the walk beside the reduce's connection was the load's peak RSS
    (200 MB trace: 209-237 MB, now 160-180 MB)."""
    with staging_folder() as scratch:
        inputs, segments = scratch / "critical_path_inputs.parquet", scratch / "critical_path.parquet"
        with _open_reduce_db(tmp_db, shards, materialize) as con:  # (closed at the block's end)
            gathered = critical_path.gather_inputs(con, inputs)
            tracedb.release_freed_memory(con)  # (closing the connection alone kept it)
            con.execute("CHECKPOINT")
            issues = tuple(_load_issues(con))
        if gathered and critical_path.walk(inputs, segments):
            with _open_reduce_db(tmp_db, shards, materialize) as con:
                critical_path.insert_segments(con, segments)
                con.execute("CHECKPOINT")
    return issues


def load_shards(shards_root: str, db_path: Path, ranks: set[int] | None = None,
                progress: Progress | None = None) -> LoadResult:
    """The reduce alone, over a shard set written by `traceanalyze ingest` (one map per rank,
    e.g. a batch-scheduler array). A shard of another version, or a damaged one, whose trace
    is still reachable is mapped again here; one whose trace is not is left out and reported."""
    with _folders_kept_on_success(Path(db_path).parent):
        return _load_shards(shards_root, db_path, ranks, progress)


def _load_shards(shards_root: str, db_path: Path, ranks: set[int] | None,
                 progress: Progress | None) -> LoadResult:
    from traceanalyze.load.executor_registry import run_maps
    from traceanalyze.load.fr_database import dumps_only_db
    from traceanalyze.load.reduce import usable_shards

    say = progress or (lambda _msg: None)
    store = ShardStore(shards_root)
    present = [r for r in store.ranks() if ranks is None or r in ranks]
    dumps = ingested_dumps(store, ranks)
    if not present and dumps:  # Flight Recorder dumps alone (ingested one per rank)
        say(f"reading {len(dumps)} Flight Recorder dump(s), no profiler trace")
        dumps_only_db(dumps, db_path, meta={"target": shards_root, "fingerprint": "",
                                            "rank_selection": "all" if ranks is None else format_ranks(ranks)})
        return LoadResult(db_path, [], False, 0, 0)
    if not present:
        raise TraceanalyzeError("no rank shards (rank=N/ folders) here", shards_root)
    manifests = {r: store.read_manifest(r) for r in present}
    intact, _, damaged = usable_shards(store, [r for r, m in manifests.items() if is_current(m)],
                                       _cache_root(store, db_path))
    repairable = {p.rank: (p, tf) for p in damaged if (tf := _source_file(manifests[p.rank])) is not None}
    redo = [tf for tf in (_source_file(m) for r, m in manifests.items() if not is_current(m)) if tf]
    redo += [tf for _, tf in repairable.values()]
    if redo:
        say(f"mapping {len(redo)} rank(s) again (their shards are damaged or from another version)")
    failed = [o for o in run_maps(redo, shards_root, progress=say) if o.manifest is None]
    notes = [_failure_issue(o) for o in failed]
    notes += [_repaired_issue(p) for p, _ in repairable.values() if p.rank not in {o.rank for o in failed}]
    worlds = {m.get("world_size") for m in manifests.values() if m and m.get("world_size")}
    if len(worlds) == 1 and ranks is None:
        world = worlds.pop()
        absent = [r for r in range(world) if r not in manifests]
        if absent:
            notes.append((None, shards_root, "rank-missing", "info",
                          f"world size is {world} but {len(absent)} rank shards are absent "
                          f"({', '.join(str(r) for r in absent[:16])}{' ...' if len(absent) > 16 else ''}); "
                          f"analyzing the {len(present)} ranks present", None))
    good = [r for r in present if r not in {o.rank for o in failed}]
    return reduce_to_db(store, good, db_path, notes, say, meta={
        "target": shards_root, "fingerprint": "",
        "rank_selection": "all" if ranks is None else format_ranks(ranks)},
        verified=frozenset(s.rank for s in intact), dumps=dumps)


# `traceanalyze ingest` keeps a rank's Flight Recorder dump here, inside a local shard folder
DUMPS_FOLDER = "flight_recorder"


def ingested_dumps(store: ShardStore, ranks: set[int] | None = None) -> list[DumpFile]:
    """The Flight Recorder dumps `ingest` put in a local shard folder (<shards>/flight_recorder/)."""
    folder = Path(local_path(store.root)) / DUMPS_FOLDER
    if store.remote or not folder.is_dir():
        return []
    return find_dumps(folder, ranks)


def _source_file(manifest: dict | None) -> TraceFile | None:
    """The trace a manifest was written from, if it is still there unchanged."""
    if not manifest or not isinstance(manifest.get("source"), dict):
        return None
    from traceanalyze.load.discover import identify

    file = manifest["source"].get("file")
    try:
        if is_remote(str(file)):
            from traceanalyze.load.remote import identify_remote

            return identify_remote(str(file), only_file=True)
        return identify(Path(local_path(str(file))), only_file=True)
    except (TraceanalyzeError, OSError):
        return None


def _short_os_error(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return " ".join(str(exc).split())[:200]


def _write_meta(con, meta: dict[str, str]) -> None:
    rows = {"schema_version": tracedb.SCHEMA_VERSION, "tool_version": __version__,
            "macros": tracedb.macros_fingerprint(), **meta}
    con.executemany("INSERT INTO load_meta VALUES (?, ?)", list(rows.items()))


__all__ = ["LoadResult", "load_trace_dir", "load_shards", "reduce_to_db", "TraceanalyzeError", "TraceFile"]
