"""A map worker ends when it is told to (SIGTERM), also while idle and holding other threads.

A signal sent to a process lands on any one of its threads that does not block it, and Python
runs the handler only when the main thread runs Python code again. An idle pool worker's main
thread waits in a pipe read for its next task; when the pool broke, the pool sent SIGTERM to the
other worker, the signal landed on one of its other threads (DuckDB's, the native reader's, the
worker's own), and the pool's shutdown waited for that worker forever. Now every thread of a
worker blocks SIGTERM and SIGINT but one, which takes them and stops the main thread.

The test starts the real pool (executors._pool), gives a worker a task that leaves a thread
behind blocked in a read (as a native thread pool would be), and reads each thread's signal
mask from /proc.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from processes import alive

from traceanalyze.load.executors import _pool


def _leave_a_waiting_thread() -> int:
    """(In a worker) start a thread that waits in a read forever; the worker's pid."""
    read_end, _write_end = os.pipe()
    threading.Thread(target=os.read, args=(read_end, 1), daemon=True).start()
    return os.getpid()


def _threads_blocking(pid: int, signum: int) -> dict[int, bool]:
    """Per thread of `pid`: whether it blocks `signum` (SigBlk in /proc/<pid>/task/<tid>/status)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as fh:
            mask = next(int(line.split()[1], 16) for line in fh if line.startswith("SigBlk:"))
        out[int(tid)] = bool(mask >> (signum - 1) & 1)
    return out


def test_an_idle_worker_with_other_threads_ends_on_sigterm():
    pool = _pool(1)
    try:
        pid = pool.submit(_leave_a_waiting_thread).result(timeout=120)
        for signum in (signal.SIGTERM, signal.SIGINT):
            blocking = _threads_blocking(pid, signum)
            # main thread, the waiting thread, the owner watch and the one that takes the signals
            assert len(blocking) >= 4, blocking
            # only the thread in sigwait has the signal open (the kernel unblocks it while it waits)
            assert sorted(blocking.values()) == [False] + [True] * (len(blocking) - 1), blocking
            assert blocking[pid] is True  # the main thread: never the one a stop signal lands on
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 120  # (a bound, not a timing assumption: it ends in milliseconds)
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not alive(pid)
        process = pool._processes[pid]
        process.join(120)
        assert process.exitcode == 128 + signal.SIGTERM  # its own exit, not the default action's -15
    finally:
        for process in list(pool._processes.values()):
            process.kill()
        pool.shutdown(wait=True, cancel_futures=True)
