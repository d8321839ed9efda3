"""Where the maps run: the executor interface, and the local executor (a process pool over all cores).

An executor takes the ranks to map and returns one `MapOutcome` per rank (map_outcome.py): its
manifest, or why it failed. Other executors (ray_executor.py: Ray tasks on a cluster) plug in
by name through executor_registry.py; this module knows none of them.

Small ranks are packed (packing.py): one task maps several ranks in turn. A rank that fails
inside a pack fails alone; the others' shards stand.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.util
import os
import select
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Protocol

from traceanalyze.interrupts import interrupts_held, keep_dropped_interrupts, raise_interrupt
from traceanalyze.load.discover import TraceFile, trace_bytes
from traceanalyze.load.map import worker_threads
from traceanalyze.load.map_outcome import MapOutcome, trace_name
from traceanalyze.load.memory import RAM_STAGING_DIR, staging_dir
from traceanalyze.load.packing import map_pack, packs
from traceanalyze.load.shards import ShardStore
from traceanalyze.load.stale import pid_alive, sweep_staging

Progress = Callable[[str], None]

# Traces this small (JSON bytes, estimated for gzip, all ranks together) are mapped in the
# command's own process unless a worker count is asked for: a pool costs more to start (its
# forkserver imports the loader, about a second of CPU) than the maps it would share out.
IN_PROCESS_BYTES = 16 << 20


class Executor(Protocol):
    """Map every file into the shard folder `shards_root`; one outcome per file, in their order.
    `workers`: maps at once (None: the executor's choice); `address`: the cluster to join (None:
    the executor's default). An executor ignores the settings that mean nothing to it."""

    def __call__(self, files: list[TraceFile], shards_root: str, say: Progress, *,
                 workers: int | None = None, address: str | None = None) -> list[MapOutcome]: ...


def run_local(files: list[TraceFile], shards_root: str, say: Progress, *, workers: int | None = None,
              address: str | None = None) -> list[MapOutcome]:
    """The maps in a local process pool, `workers` at once (default: all cores, or this process
    alone when the traces are small: see IN_PROCESS_BYTES)."""
    if workers is None and sum(trace_bytes(tf) for tf in files) <= IN_PROCESS_BYTES:
        workers = 1
    workers = max(1, min(len(files), workers or os.cpu_count() or 1))
    if workers == 1:  # one rank (or one core): no pool to start; small ranks still share a database
        return [_announce(outcome, say) for pack in packs(files, 1) for outcome in map_pack(pack, shards_root, None)]
    return _pooled(files, shards_root, workers, say)


def _announce(outcome: MapOutcome, say: Progress) -> MapOutcome:
    if outcome.manifest is None:
        say(f"rank {outcome.rank} failed: {outcome.file}: {outcome.error}")
    return outcome


def _worker_start(owner_pid: int, temp_dir: str) -> None:
    """A pool worker's first act: it takes the command's temp folder, and it stops when the
    command that started it is gone.

    tempfile would find the folder itself on first use, by writing a probe file there and
    removing it: a worker killed in between (the command interrupted) left the file behind.

    The worker's parent is multiprocessing's forkserver, which lives as long as any worker
    does (each holds its pipe), so a parent-death signal would never come. Instead a thread
    waits for the command's process to end (a pidfd, else polling once a second) and then
    sends the worker SIGTERM. SIGTERM (and SIGINT) in a worker raise KeyboardInterrupt while
    a map runs, so map_rank's `finally` removes the rank's work folder (as soon as the
    statement in DuckDB or the native reader returns to Python), and end an idle worker at
    once."""
    tempfile.tempdir = temp_dir
    keep_dropped_interrupts()  # (one raised in a callback while mapping: traceanalyze/interrupts.py)
    signal.signal(signal.SIGTERM, _worker_terminated)
    signal.signal(signal.SIGINT, _worker_terminated)
    threading.Thread(target=_watch_owner, args=(owner_pid,), name="traceanalyze-owner", daemon=True).start()


def _watch_owner(owner_pid: int) -> None:
    try:
        fd = os.pidfd_open(owner_pid)
    except (AttributeError, OSError):  # not Linux >= 5.3, or already gone
        fd = None
    if fd is not None:
        select.select([fd], [], [])  # readable once the process has ended
        os.close(fd)
    else:
        while pid_alive(owner_pid):
            time.sleep(1.0)
    global _owner_gone
    _owner_gone = True
    os.kill(os.getpid(), signal.SIGTERM)


_mapping = False  # (in a worker) a map is running
_owner_gone = False  # (in a worker) the command that started it has ended


def _worker_terminated(signum, frame) -> None:
    if _mapping:
        raise_interrupt(signum, frame)
        return
    os._exit(128 + signum)


def _map_in_worker(pack: list[TraceFile], shards_root: str, threads: int | None) -> list[MapOutcome]:
    global _mapping
    _mapping = True
    try:
        return map_pack(pack, shards_root, threads)
    finally:
        _mapping = False
        if _owner_gone:  # nobody waits for the outcome: the work folder is gone, so is the worker
            store = ShardStore(shards_root)
            for tf in pack:
                store.drop_unfinished(tf.rank)
            os._exit(128 + signal.SIGTERM)


def _pool(workers: int) -> ProcessPoolExecutor:
    # forkserver (spawn where it is missing), never fork: a forked DuckDB or thread pool is unsafe
    forkserver = "forkserver" in multiprocessing.get_all_start_methods() and _socket_path_fits()
    context = multiprocessing.get_context("forkserver" if forkserver else "spawn")
    if forkserver:
        context.set_forkserver_preload(["traceanalyze.load.forkserver_init"])
        _reserve_temp_dir()
    return ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_worker_start,
                               initargs=(os.getpid(), tempfile.gettempdir()))


def _reserve_temp_dir() -> None:
    """Create multiprocessing's temp folder (`<tmp>/pymp-*`, where the forkserver's socket goes)
    with SIGINT / SIGTERM held back until it is made and registered for removal at exit
    (multiprocessing makes the folder and only then registers its removal; a signal between the
    two, the command stopped just as the pool starts, left an empty `pymp-*` folder behind)."""
    with interrupts_held():
        multiprocessing.util.get_temp_dir()


def _socket_path_fits() -> bool:
    """The forkserver listens on a Unix socket in the temp folder
    (`<tmp>/pymp-XXXXXXXX/listener-XXXXXXXX`), whose path may not pass 107 bytes: under a long
    $TMPDIR the pool spawns its workers instead (slower to start, same maps)."""
    return len(os.fsencode(tempfile.gettempdir())) + len("/pymp-12345678/listener-12345678") < 100


@contextlib.contextmanager
def _main_not_rerun():
    """A new worker process runs the caller's main module again (so that its functions can be
    found) when `__main__` names a file or a module: a script with no `if __name__ ==
    "__main__":` guard then calls `analyze()` again inside the worker, which dies in
    multiprocessing's bootstrapping phase; a script read from stdin names `<stdin>`, which a
    worker cannot run at all. The maps need nothing from the caller's script (they run
    `_map_in_worker` of this module), so while the pool starts its workers, `__main__` names
    neither."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    hidden = {name: getattr(main, name) for name in ("__file__", "__spec__") if hasattr(main, name)}
    for name in hidden:
        if name == "__spec__":
            main.__spec__ = None
        else:
            delattr(main, name)
    try:
        yield
    finally:
        for name, value in hidden.items():
            setattr(main, name, value)


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
            done[tf.rank] = _announce(MapOutcome(tf.rank, trace_name(tf), None,
                                                 "the map worker died (killed, or out of memory)"), say)
    return [done[tf.rank] for tf in files]


def _pool_round(files: list[TraceFile], shards_root: str, workers: int, done: dict[int, MapOutcome],
                say: Progress) -> bool:
    """Run one pool over `files`, filling `done`; True when the pool broke."""
    workers = max(1, min(workers, len(files)))
    threads = worker_threads(workers)
    with _main_not_rerun(), _pool(workers) as pool:
        try:
            # a submit starts a worker; one a signal caught half-started was never known to the
            # pool, so _abandon could not kill it, and it mapped its pack after the cleanup
            with interrupts_held():
                futures = [pool.submit(_map_in_worker, pack, shards_root, threads)
                           for pack in packs(files, workers)]
            n = 0
            for future in as_completed(futures):
                for outcome in future.result():
                    done[outcome.rank] = _announce(outcome, say)
                    n += 1
                    if n % 64 == 0:
                        say(f"mapped {n} of {len(files)} rank(s)")
        except BrokenProcessPool:
            # A worker that the pool was starting when it broke is never stopped by the pool, and
            # its shutdown then waits for that worker forever (Python 3.11's ProcessPoolExecutor:
            # its manager thread stops the workers it knows of, without the lock that submit()
            # holds while it starts one). Every worker is known here, the submits being done.
            _abandon(pool, files, shards_root, done)
            return True
        except BaseException:  # interrupted (SIGINT, SIGTERM) or a bug: no map outlives the command
            _abandon(pool, files, shards_root, done)
            raise
    return False


def _abandon(pool: ProcessPoolExecutor, files: list[TraceFile], shards_root: str,
             done: dict[int, MapOutcome]) -> None:
    """Stop the pool's workers now (SIGKILL: a map may be deep inside DuckDB or the native
    reader, where no signal handler runs), when the command is interrupted and when the pool
    broke (its unfinished ranks are then mapped again). Then remove what their maps had made:
    their work folders (load/stale.py sweeps those of dead processes) and the tables of a rank
    whose manifest was not written yet (a shard without a manifest is never used; a finished
    rank's shard stays, as does the shard of a rank that had not started)."""
    procs = dict(getattr(pool, "_processes", None) or {})  # pid -> multiprocessing.Process
    for process in procs.values():
        with contextlib.suppress(OSError, ValueError, AttributeError):
            process.kill()
    for process in procs.values():
        with contextlib.suppress(OSError, ValueError, AttributeError, AssertionError):
            process.join(30)  # (a killed process is gone within milliseconds; a bound, not a wait)
    pool.shutdown(wait=False, cancel_futures=True)
    sweep_staging({staging_dir(files), None, str(RAM_STAGING_DIR)})
    store = ShardStore(shards_root)
    for tf in files:
        if tf.rank not in done:
            store.drop_unfinished(tf.rank)

