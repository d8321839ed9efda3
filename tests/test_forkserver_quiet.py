"""A worker the forkserver forks as the command is being stopped fails to start, and exits: its
traceback must not reach the user's terminal after the command's one-line "interrupted"
(load/forkserver_init.py). Here the real multiprocessing start-up code runs in a subprocess
whose pipe from the command is closed before the pool state was sent, as it is then."""

from __future__ import annotations

import subprocess
import sys

WORKER_START = """
import os
{hook}
from multiprocessing import spawn
r, w = os.pipe()
os.close(w)  # the command is gone: nothing will come
spawn._main(r, None)
"""


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_a_worker_whose_command_is_gone_exits_without_a_traceback():
    bare = _run(WORKER_START.format(hook=""))
    assert bare.returncode == 1 and "EOFError" in bare.stderr  # the failure the hook is about
    hooked = _run(WORKER_START.format(hook="import traceanalyze.load.forkserver_init"))
    assert hooked.returncode == 1
    assert hooked.stderr == ""


def test_any_other_error_in_a_worker_is_still_printed():
    code = "import traceanalyze.load.forkserver_init\nraise EOFError('not the start-up')\n"
    proc = _run(code)
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "EOFError: not the start-up" in proc.stderr
