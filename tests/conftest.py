"""Shared test fixtures: real traces loaded once per session."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import OWNER_TOKEN, OWNER_VARIABLE, carrying_owner_token, children, cmdline, descendants, stop

# Every process the tests start carries this pytest process's own token (an xdist worker sets
# its own): the session's last teardown finds what is still running (no_process_left_behind).
os.environ[OWNER_VARIABLE] = OWNER_TOKEN

# A rule that breaks must fail the tests, not turn into a 'rule-failed' load issue
# (subprocesses of the CLI inherit it). tests/test_rule_isolation.py unsets it.
os.environ["TRACEANALYZE_STRICT_RULES"] = "1"

# Compiled modules are cached (__pycache__, ignored by git) also where the environment sets
# PYTHONDONTWRITEBYTECODE: the tests start some 400 Python processes (the command line, pool
# and Ray workers), each of which would otherwise compile the package's modules again.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

ROOT = Path(__file__).resolve().parent.parent
SETTLE_VARIABLE = "TRACEANALYZE_TEST_SETTLE_S"  # seconds no_process_left_behind waits for a process to exit


# multiprocessing's helpers of an in-process pool (traceanalyze.load in this process): they
# live as long as this process does, by design, and end with it
POOL_MACHINERY = ("from multiprocessing.forkserver import main", "from multiprocessing.resource_tracker import main")


def _left_behind() -> list[int]:
    """Processes with this session's token or under this process, but for the pool machinery
    (its children, pool workers, are counted: a map that outlived its pool)."""
    me = os.getpid()
    found = set(carrying_owner_token()) | set(descendants(me))
    machinery = {pid for pid in children(me) if any(m in " ".join(cmdline(pid)) for m in POOL_MACHINERY)}
    return sorted(found - machinery)


def _checkout_status() -> set[str] | None:
    """`git status` lines of the checkout (untracked files one by one), None outside a git checkout."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=all"],
                             capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return set(out.stdout.splitlines()) if out.returncode == 0 else None


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):  # (the controller, once: xdist's workers share it)
        session.config.stash[CHECKOUT_BEFORE] = _checkout_status()


def pytest_sessionfinish(session, exitstatus):
    """Fails the run when the tests left a file in the checkout or changed one (a test's report
    once went to reports/<name>/ there): tests write under their tmp_path only."""
    if hasattr(session.config, "workerinput"):
        return
    before, after = session.config.stash.get(CHECKOUT_BEFORE, None), _checkout_status()
    if before is None or after is None:
        return
    new = sorted(after - before)
    if new:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = "the tests left these in the checkout (git status): " + ", ".join(new[:20])
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(message, red=True)
        else:
            print(message, file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


CHECKOUT_BEFORE = pytest.StashKey[set | None]()


@pytest.fixture(autouse=True, scope="session")
def no_process_left_behind():
    """Fails the session when a process a test started is still running at its end (a server,
    a cluster, a browser, a kernel, a command): each test must stop what it starts, also when it
    fails. What is found is then stopped, so that the machine is left clean either way."""
    yield
    left = _left_behind()
    # (one that is exiting right now is given a moment: a bound; tests/test_process_check.py,
    # whose planted process never exits, shortens it)
    settle = time.monotonic() + float(os.environ.get(SETTLE_VARIABLE, "5"))
    while left and time.monotonic() < settle:
        time.sleep(0.1)
        left = [pid for pid in _left_behind() if pid in left]
    if left:
        described = [f"{pid}: {' '.join(cmdline(pid))[:200]}" for pid in left]
        stop(left)
        pytest.fail("processes started by the tests were still running at the end of the session:\n  "
                    + "\n  ".join(described), pytrace=False)


@pytest.fixture(autouse=True, scope="session")
def private_cache_folder(tmp_path_factory):
    """Derived databases of `sql DIR`, `diff`, `scaling` go to a cache folder: the tests' own,
    never the user's ~/.cache (subprocesses inherit the variable)."""
    os.environ["TRACEANALYZE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield

FIXTURES = ROOT / "fixtures" / "ddp"
REAL_TRACES = ROOT / "fixtures" / "real"


@pytest.fixture(scope="session")
def fixture_db(loaded_with_cli):
    """`fixture_db(folder)` -> the trace database of a fixture folder (fixtures/ddp/*, parallel/*,
    cuda/*, real/*): the one the real command line builds with its defaults (`traceanalyze load
    FOLDER --db X`, loaded_with_cli: once per test session, by the first xdist worker that asks;
    the others wait for it and share the file), in the session's temporary folder. Every test
    module that only reads an analysis shares it: open it read-only, never load into it
    (`analyze(folder, db=fixture_db(folder))` reuses it as it is). A folder that does not load
    raises the command's one-line error as a TraceanalyzeError on every call."""
    from traceanalyze.errors import TraceanalyzeError

    def get(folder: Path) -> Path:
        db, proc = loaded_with_cli(Path(folder).resolve())
        if proc.returncode != 0:
            errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
            raise TraceanalyzeError(errors[-1].removeprefix("error: ") if errors else proc.stderr.strip())
        return db

    return get


@pytest.fixture(scope="session")
def fixture_summary(fixture_db):
    """`fixture_summary(folder, trace_dir)` -> the summary dict the real pipeline builds for the
    shared database of `folder` (report_helpers.real_summary; `trace_dir` is the folder as the
    summary names it), built once per test process; each call returns a fresh copy to change."""
    import json

    from report_helpers import real_summary

    made: dict[tuple[Path, str], str] = {}

    def get(folder: Path, trace_dir: str) -> dict:
        key = (Path(folder).resolve(), trace_dir)
        if key not in made:
            made[key] = json.dumps(real_summary(fixture_db(folder), trace_dir))
        return json.loads(made[key])

    return get


@pytest.fixture(scope="session")
def balanced_db(fixture_db) -> Path:
    """The recorded balanced 4-rank gloo DDP run, loaded into a DuckDB file (read-only)."""
    return fixture_db(FIXTURES / "balanced")


def run_cli(*args: str | Path, cwd: Path | None = None, timeout: float = 300):
    """Run the real `traceanalyze` command in a subprocess; returns CompletedProcess (text)."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "traceanalyze", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def cli():
    """`cli("load", DIR, "--db", X)` -> CompletedProcess of the real command line."""
    return run_cli


@pytest.fixture(scope="session")
def once_per_session(tmp_path_factory):
    """`once_per_session(key, make)` -> make(folder): run by the first xdist worker that asks
    (under a lock), its picklable result shared with the other workers. `folder` is a private
    directory for files the result points to."""
    import fcntl
    import hashlib
    import pickle

    import os

    # the session's own temp root: xdist workers get subfolders of it (popen-gwN), a run
    # without xdist gets it itself (its parent is shared by every pytest run of the user)
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "once-per-session"
    shared.mkdir(exist_ok=True)
    memo: dict[str, object] = {}

    def once(key: str, make):
        if key not in memo:
            folder = shared / hashlib.sha256(key.encode()).hexdigest()[:16]
            folder.mkdir(exist_ok=True)
            done = folder / "result.pickle"
            with open(folder / "lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not done.exists():
                    done.write_bytes(pickle.dumps(make(folder)))
            memo[key] = pickle.loads(done.read_bytes())
        return memo[key]

    return once


@pytest.fixture(scope="session")
def loaded_with_cli(once_per_session):
    """`loaded_with_cli(DIR, *options)` -> (db path, CompletedProcess of `traceanalyze load`),
    loaded once per test session for all xdist workers. Treat the DB as read-only."""
    import subprocess

    def load(target: Path, *extra: str):
        def make(folder: Path):
            db = folder / "trace.duckdb"
            proc = run_cli("load", target, "--db", db, *extra)
            return db, (proc.args, proc.returncode, proc.stdout, proc.stderr)

        db, (args, rc, out, err) = once_per_session(f"cli-load {target} {extra}", make)
        return db, subprocess.CompletedProcess(args, rc, out, err)

    return load


@pytest.fixture(scope="session")
def recorded_runs(tmp_path_factory) -> list[dict[int, Path]]:
    """Copies of the rank files of two different recorded 4-rank runs under fixtures/ddp
    ({rank: path} each), taken once per session: immune to fixtures being re-recorded."""
    import re
    import shutil

    runs = []
    for folder in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        files = {int(re.match(r"rank(\d+)\.", p.name).group(1)): p for p in folder.glob("rank*.pt.trace.json.gz")}
        if sorted(files) == [0, 1, 2, 3]:
            dst = tmp_path_factory.mktemp(f"run-{folder.name}")
            runs.append({r: Path(shutil.copy2(p, dst / p.name)) for r, p in files.items()})
        if len(runs) == 2:
            return runs
    raise AssertionError("fewer than two recorded 4-rank runs under fixtures/ddp")
