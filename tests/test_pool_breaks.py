"""A map worker that dies while the pool is starting another one: the load still finishes.

When a worker dies, the process pool breaks: its manager thread stops the workers it knows of
and waits for them. In Python 3.11 it does so without the lock that `submit()` holds while it
starts a worker, so a worker being started at that moment is never stopped, and the pool's
shutdown waited for it forever (the load hung; CI saw it once in test_same_verdict's killed
worker). The test makes that moment certain: it starts the real pool of the local executor in
this process and, as the pool starts its second worker, kills the first and waits until the
pool has stopped the workers it knew of (its call queue closed) before the second worker is
entered in the pool's table, as a slow start of that worker would.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import _process_worker

from conftest import FIXTURES
from processes import alive

from traceanalyze.load.discover import discover
from traceanalyze.load.executors import _pooled
from traceanalyze.load.map_outcome import map_guarded

SCENARIO = FIXTURES / "input_straggler"
BOUND_S = 600  # (a bound for a hang, not a timing assumption: the load takes seconds)


def test_a_worker_started_while_the_pool_breaks_is_stopped(tmp_path, monkeypatch):
    files = sorted(discover(SCENARIO).files, key=lambda tf: tf.rank)
    assert len(files) == 4  # two packs of two ranks: the pool starts two workers
    original_spawn = ProcessPoolExecutor._spawn_process
    first_pool: list[ProcessPoolExecutor] = []
    started: list = []

    def spawn(pool: ProcessPoolExecutor) -> None:
        first_pool[:] = first_pool or [pool]
        if pool is not first_pool[0] or not pool._processes:
            original_spawn(pool)
            started.extend(pool._processes.values())
            return
        # the first pool's second worker is started (as _spawn_process does) ...
        process = pool._mp_context.Process(target=_process_worker, args=(
            pool._call_queue, pool._result_queue, pool._initializer, pool._initargs, pool._max_tasks_per_child))
        process.start()
        started.append(process)
        (first,) = pool._processes.values()
        first.kill()  # ... the first one dies ...
        deadline = time.monotonic() + BOUND_S
        while not pool._call_queue._closed and time.monotonic() < deadline:
            time.sleep(0.001)
        assert pool._call_queue._closed  # ... the broken pool has stopped the workers it knew of ...
        pool._processes[process.pid] = process  # ... and only now the second one is known to it

    monkeypatch.setattr(ProcessPoolExecutor, "_spawn_process", spawn)
    said: list[str] = []
    result: list = []
    load = threading.Thread(target=lambda: result.append(_pooled(files, str(tmp_path / "shards"), 2, said.append)),
                            daemon=True)
    try:
        load.start()
        load.join(BOUND_S)
        assert not load.is_alive(), "the load hung on the broken pool"
    finally:
        for process in started:
            if alive(process.pid):
                process.kill()
        load.join(BOUND_S)
    (outcomes,) = result
    assert [o.rank for o in outcomes] == [tf.rank for tf in files]
    assert all(o.manifest is not None for o in outcomes), [o.error for o in outcomes]
    for tf, outcome in zip(files, outcomes):  # each rank's shard as a map of that rank alone makes it
        alone = map_guarded(tf, str(tmp_path / "alone"), None).manifest
        manifest = json.loads((tmp_path / "shards" / f"rank={tf.rank}" / "manifest.json").read_text())
        assert manifest == outcome.manifest
        assert (manifest["rank"], manifest["events"], manifest["rows"]) == (tf.rank, alone["events"], alone["rows"])
    assert any(line.startswith("a map worker died; mapping 4 unfinished rank(s) again") for line in said), said
    assert not [p.pid for p in started if alive(p.pid)]  # no worker of either pool outlives the load
