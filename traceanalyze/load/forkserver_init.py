"""Imported once into the pool's forkserver (multiprocessing's set_forkserver_preload), never
into the command itself.

When the command is stopped (SIGINT / SIGTERM) while the forkserver is still forking workers,
the command removes the pool's semaphores and exits; a worker forked in that moment then fails
to unpickle its pool state (FileNotFoundError in multiprocessing/synchronize.py), and the
forkserver prints that traceback to the user's terminal after the command's own one-line
"interrupted" message. A worker forked a moment later finds the command's end of its pipe
closed before its pool state arrived (EOFError while multiprocessing/spawn.py reads it). Either
worker has nothing to do and exits anyway: this hook keeps its traceback off the terminal. Any
other error in a forked worker is printed as before.
"""

from __future__ import annotations

import sys
import traceback

import traceanalyze.load.executors  # noqa: F401  (what the workers run, preloaded)

_default_hook = sys.excepthook


def _quiet_when_the_pool_is_gone(exc_type, exc, tb) -> None:
    files = [frame.f_code.co_filename.replace("\\", "/") for frame, _ in traceback.walk_tb(tb)]
    gone = (issubclass(exc_type, FileNotFoundError) and any(f.endswith("/synchronize.py") for f in files)) \
        or (issubclass(exc_type, EOFError) and bool(files) and files[-1].endswith("multiprocessing/spawn.py"))
    if not gone:
        _default_hook(exc_type, exc, tb)


sys.excepthook = _quiet_when_the_pool_is_gone
