"""SIGTERM and SIGINT at any point of a load leave nothing behind.

The real command runs over four ranks of fixtures/ddp/input_straggler whose events are repeated
(uncompressed, so a rank's work folder goes to /dev/shm when it fits in memory, else to $TMPDIR,
a folder private to the test). The test watches the command's processes (/proc) and files and
signals it at a point of the load: the pool starting (its first child process), the maps
running (a work folder `traceanalyze-<pid>@<host>-*` of one of its processes exists), the
reduce (the database is being written under its private name). To be sure the command is at
that point when the signal arrives, it is stopped (SIGSTOP), the point checked again, then
signalled and continued. Afterwards nothing of the run may remain: no process, no work folder
in /dev/shm or $TMPDIR, no shard or database under the output folder.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import FIXTURES
from processes import alive, descendants, stop_popen

from traceanalyze.load.memory import RAM_STAGING_DIR
from traceanalyze.load.shards import MANIFEST
from traceanalyze.load.stale import STAGING_PREFIX, host_tag

SCENARIO = FIXTURES / "input_straggler"
REPEAT = 4  # each rank's events this many times over (about 10 MB of JSON a rank)
EXIT = {signal.SIGTERM: 143, signal.SIGINT: 130}


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[int, Path]:
    folder = tmp_path_factory.mktemp("world")
    files = {}
    for src in sorted(SCENARIO.glob("rank*.json.gz")):
        trace = json.loads(gzip.decompress(src.read_bytes()))
        trace["traceEvents"] = trace["traceEvents"] * REPEAT
        rank = trace["distributedInfo"]["rank"]
        files[rank] = folder / f"rank{rank}.pt.trace.json"
        files[rank].write_text(json.dumps(trace))
    return files


def _work_folders(pids: set[int], tmp: Path) -> list[str]:
    """Work folders of any of `pids` on this host, in /dev/shm and `tmp`."""
    found = []
    for folder in (RAM_STAGING_DIR, tmp):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        found += [str(folder / n) for n in names for pid in pids
                  if n.startswith(f"{STAGING_PREFIX}{pid}@{host_tag()}-")]
    return found


def _db_tmp(out: Path, pid: int) -> list[Path]:
    return list(out.glob(f"*.duckdb.{pid}@{host_tag()}.tmp"))


class Run:
    """The command in a session of its own, its processes seen so far, its stderr lines."""

    def __init__(self, args: list, env: dict) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "traceanalyze", *map(str, args)], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.pids = {self.proc.pid}
        self.stderr: list[str] = []
        self._reader = threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True)
        self._reader.start()

    def look(self) -> None:
        self.pids |= set(descendants(self.proc.pid))

    def signal_at(self, point, sig: int) -> bool:
        """Signal the command when `point()` holds (checked again while it is stopped); False
        when the command ended before that."""
        while self.proc.poll() is None:
            self.look()
            if point():
                os.kill(self.proc.pid, signal.SIGSTOP)
                try:
                    self.look()
                    if point():
                        os.kill(self.proc.pid, sig)
                        return True
                finally:
                    os.kill(self.proc.pid, signal.SIGCONT)
            time.sleep(0.005)  # (a polling interval, not a timing assumption)
        return False

    def finish(self) -> int:
        rc = self.proc.wait(600)  # (a hang guard far beyond a normal run)
        self._reader.join()
        # the pool's workers are killed by the command before it exits; a moment to be reaped
        deadline = time.monotonic() + 30
        while any(alive(p) for p in self.pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        return rc

    def close(self) -> None:
        stop_popen(self.proc)


@pytest.fixture()
def run_env(tmp_path):
    # a short private $TMPDIR: the pool's forkserver needs a Unix socket path under 108 bytes
    # (under a longer one the pool spawns its workers, which 'pool starting' does not look for)
    tmp = Path(tempfile.mkdtemp(prefix="ta-sig-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if k != "TRACEANALYZE_TMPDIR"}
    env["TMPDIR"] = str(tmp)
    runs: list[Run] = []

    def start(*args) -> Run:
        runs.append(Run(list(args), env))
        return runs[-1]

    try:
        yield start, tmp
    finally:
        for run in runs:
            run.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _assert_clean(run: Run, rc: int, sig: int, tmp: Path) -> None:
    assert rc == EXIT[sig], "".join(run.stderr)
    assert "interrupted" in "".join(run.stderr) and "Traceback" not in "".join(run.stderr)
    assert [p for p in run.pids if alive(p)] == []
    assert _work_folders(run.pids, tmp) == []
    assert list(tmp.iterdir()) == []


POINTS = ["pool starting", "maps running", "reduce"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("point", POINTS)
def test_a_signalled_load_leaves_nothing_behind(world, run_env, tmp_path, point, sig):
    start, tmp = run_env
    out = tmp_path / "out"
    run = start(next(iter(world.values())).parent, "--out", out, "--workers", "2", "--no-html")
    at = {
        "pool starting": lambda: len(run.pids) > 1 and not _work_folders(run.pids, tmp),
        "maps running": lambda: bool(_work_folders(run.pids - {run.proc.pid}, tmp)),
        "reduce": lambda: bool(_db_tmp(out, run.proc.pid)),
    }[point]
    assert run.signal_at(at, sig), f"the command ended before '{point}': {''.join(run.stderr)}"
    rc = run.finish()
    _assert_clean(run, rc, sig, tmp)
    # the output folder: no shard, no database, no half-written file (the shard folder was
    # made by this run, so it goes as a whole)
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*")) if out.exists() else []
    assert left == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signalled_ingest_leaves_nothing_behind(world, run_env, tmp_path, sig):
    start, tmp = run_env
    shards = tmp_path / "shards"
    run = start("ingest", world[2], "--shards", shards)
    assert run.signal_at(lambda: bool(_work_folders({run.proc.pid}, tmp)), sig), "".join(run.stderr)
    rc = run.finish()
    _assert_clean(run, rc, sig, tmp)
    assert not shards.exists()  # made by this ingest, which wrote nothing a later run could use


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signalled_analyze_of_shards_keeps_the_shards_and_leaves_nothing_else(world, run_env, tmp_path, sig):
    start, tmp = run_env
    shards = tmp_path / "shards"
    for rank, path in sorted(world.items()):
        ingest = start("ingest", path, "--shards", shards)
        assert ingest.finish() == 0, "".join(ingest.stderr)
    before = {p: p.stat().st_mtime_ns for p in shards.rglob("*")}
    assert sorted(p.parent.name for p in before if p.name == MANIFEST) == [f"rank={r}" for r in sorted(world)]
    out = tmp_path / "out"
    run = start("analyze", "--shards", shards, "--out", out, "--no-html")
    assert run.signal_at(lambda: bool(_db_tmp(out, run.proc.pid)), sig), "".join(run.stderr)
    rc = run.finish()
    _assert_clean(run, rc, sig, tmp)
    assert {p: p.stat().st_mtime_ns for p in shards.rglob("*")} == before  # the shards are untouched
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*")) if out.exists() else []
    assert left == []


# multiprocessing makes its temp folder, then registers its removal: a signal that lands between
# the two (here: sent by mkdtemp itself, right after making the folder) must not leave it behind
_SIGNAL_INSIDE_MKDTEMP = """
import os, signal, sys, tempfile
from traceanalyze.faults import run
from traceanalyze.load.executors import _pool

made = tempfile.mkdtemp
def mkdtemp(*args, **kwargs):
    folder = made(*args, **kwargs)
    if kwargs.get("prefix") == "pymp-":
        os.kill(os.getpid(), int(sys.argv[1]))
    return folder
tempfile.mkdtemp = mkdtemp
run(lambda: _pool(2).shutdown())
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_the_pool_makes_its_temp_folder_leaves_no_folder(run_env, sig):
    _, tmp = run_env
    env = {k: v for k, v in os.environ.items() if k != "TRACEANALYZE_TMPDIR"}
    env["TMPDIR"] = str(tmp)
    done = subprocess.run([sys.executable, "-c", _SIGNAL_INSIDE_MKDTEMP, str(int(sig))], check=False, env=env,
                          capture_output=True, text=True, timeout=300)  # (a hang guard)
    assert done.returncode == EXIT[sig], done.stderr
    assert "interrupted" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp.iterdir()) == []
