"""Where the maps run: a local process pool over all cores (default) or Ray tasks on a cluster.

Both take the ranks to map and return one `MapOutcome` per rank: its manifest, or why it
failed (bad input, a worker that died, an object that could not be read). A failed rank
never stops the others.

Small ranks are packed: one task maps several ranks in turn (`packs`, by rank, until a pack
holds PACK_BYTES of trace), so a thousand small files cost a hundred tasks, not a thousand
process round trips. A rank that fails inside a pack fails alone; the others' shards stand.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

import duckdb

from traceanalyze.errors import TraceanalyzeError
from traceanalyze.load.discover import TraceFile
from traceanalyze.load.map import map_rank, worker_threads
from traceanalyze.load.source import estimated_uncompressed_bytes

EXECUTORS = ("local", "ray")
# a task maps ranks until it holds this much trace (JSON bytes, estimated for gzip) ...
PACK_BYTES = 64 << 20
Progress = Callable[[str], None]


@dataclass(frozen=True)
class MapOutcome:
    rank: int
    file: str
    manifest: dict | None  # None when the map failed
    error: str | None = None


def _file(tf: TraceFile) -> str:
    return tf.url or str(tf.path)


def map_guarded(tf: TraceFile, shards_root: str, threads: int | None) -> MapOutcome:
    """map_rank, with bad input turned into a failed outcome (other errors are bugs: raised)."""
    try:
        return MapOutcome(tf.rank, _file(tf), map_rank(tf, shards_root, threads))
    except TraceanalyzeError as exc:
        return MapOutcome(tf.rank, exc.path or _file(tf), None, exc.problem)
    except (duckdb.Error, OSError) as exc:
        return MapOutcome(tf.rank, _file(tf), None, f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}")


def trace_bytes(tf: TraceFile) -> int:
    """The JSON bytes of a rank's trace (estimated for gzip; the object size for a URL)."""
    if tf.url:
        return tf.size_bytes
    try:
        return estimated_uncompressed_bytes(tf.path)
    except OSError:
        return tf.size_bytes


def packs(files: list[TraceFile], workers: int, pack_bytes: int = PACK_BYTES) -> list[list[TraceFile]]:
    """The ranks in tasks: in rank order, each pack closed once it holds `pack_bytes` of trace
    (... or its share of the whole, when that is less: every worker gets work)."""
    ordered = sorted(files, key=lambda tf: tf.rank)
    sizes = [trace_bytes(tf) for tf in ordered]
    target = max(1, min(pack_bytes, -(-sum(sizes) // max(1, workers))))
    out: list[list[TraceFile]] = []
    held = 0
    for tf, size in zip(ordered, sizes):
        if not out or held >= target:
            out.append([])
            held = 0
        out[-1].append(tf)
        held += size
    return out


def map_pack(files: list[TraceFile], shards_root: str, threads: int | None) -> list[MapOutcome]:
    """Map the ranks of one pack in turn: each rank's outcome its own."""
    return [map_guarded(tf, shards_root, threads) for tf in files]


def run_maps(files: list[TraceFile], shards_root: str, executor: str = "local", workers: int | None = None,
             ray_address: str | None = None, progress: Progress | None = None) -> list[MapOutcome]:
    say = progress or (lambda _msg: None)
    if not files:
        return []
    if executor == "ray":
        from traceanalyze.load.ray_executor import run_on_ray

        return run_on_ray(files, shards_root, ray_address, say)
    if executor != "local":
        raise TraceanalyzeError(f"unknown executor {executor!r}; use one of {', '.join(EXECUTORS)}")
    workers = max(1, min(len(files), workers or os.cpu_count() or 1))
    if workers == 1:  # one rank (or one core): no pool to start
        return [_announce(map_guarded(tf, shards_root, None), say) for tf in files]
    return _pooled(files, shards_root, workers, say)


def _announce(outcome: MapOutcome, say: Progress) -> MapOutcome:
    if outcome.manifest is None:
        say(f"rank {outcome.rank} failed: {outcome.file}: {outcome.error}")
    return outcome


def _pool(workers: int) -> ProcessPoolExecutor:
    # forkserver (spawn where it is missing), never fork: a forked DuckDB or thread pool is unsafe
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if "forkserver" in methods:
        context.set_forkserver_preload(["traceanalyze.load.map"])
    return ProcessPoolExecutor(max_workers=workers, mp_context=context)


@contextlib.contextmanager
def _main_not_rerun():
    """A new worker process runs the caller's main script again (so that its functions can be
    found) when `__main__.__file__` names one. A script read from stdin (`python3 - <<EOF`)
    names `<stdin>`, which a worker cannot run: it dies at start. The maps need nothing from
    the caller's script, so while the pool runs such a name is hidden."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is None or os.path.exists(path):
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


def _pooled(files: list[TraceFile], shards_root: str, workers: int, say: Progress) -> list[MapOutcome]:
    """Map every file in a process pool. A worker that dies (killed, out of memory) breaks the
    pool: the unfinished ranks run again in a fresh pool, and if that breaks too, each alone,
    so only the rank that kills its worker is lost."""
    done: dict[int, MapOutcome] = {}
    pending = list(files)
    for attempt in range(2):
        broke = _pool_round(pending, shards_root, workers, done, say)
        pending = [tf for tf in pending if tf.rank not in done]
        if not broke:
            return [done[tf.rank] for tf in files]
        say(f"a map worker died; mapping {len(pending)} unfinished rank(s) again")
    for tf in pending:  # alone, so a worker that dies names its rank
        if _pool_round([tf], shards_root, 1, done, say):
            done[tf.rank] = _announce(MapOutcome(tf.rank, _file(tf), None,
                                                 "the map worker died (killed, or out of memory)"), say)
    return [done[tf.rank] for tf in files]


def _pool_round(files: list[TraceFile], shards_root: str, workers: int, done: dict[int, MapOutcome],
                say: Progress) -> bool:
    """Run one pool over `files`, filling `done`; True when the pool broke."""
    workers = max(1, min(workers, len(files)))
    threads = worker_threads(workers)
    with _main_not_rerun(), _pool(workers) as pool:
        futures = [pool.submit(map_pack, pack, shards_root, threads) for pack in packs(files, workers)]
        n = 0
        try:
            for future in as_completed(futures):
                for outcome in future.result():
                    done[outcome.rank] = _announce(outcome, say)
                    n += 1
                    if n % 64 == 0:
                        say(f"mapped {n} of {len(files)} rank(s)")
        except BrokenProcessPool:
            return True
    return False
