"""Same traces, same verdict: however many map workers, DuckDB threads, whatever the file names
(so the order ranks are found and mapped in), and when a map worker dies once and its ranks are
mapped again.

Each run is the real command on a copy of a recorded 4-rank run; every finding (rule, severity,
ranks, steps, cause, cost, title) and every evidence row must be the same as the first run's, and
the verdict must be the one injected when the run was recorded (its expected.json).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FIXTURES
from processes import alive, children, stop_popen

SCENARIOS = ["input_straggler", "intermittent_input"]
# (workers, DuckDB threads, seed of the file-name shuffle; 0: the recorded names)
SETTINGS = [(1, 1, 0), (2, 4, 1), (4, 2, 2)]


def _copy(scenario: str, folder: Path, seed: int) -> Path:
    """The scenario's rank files; with a seed, under shuffled names (the rank is in the trace)."""
    folder.mkdir()
    files = sorted((FIXTURES / scenario).glob("rank*.json.gz"))
    names = [f"run-{i}.pt.trace.json.gz" for i in range(len(files))]
    if seed:
        random.Random(seed).shuffle(names)
    for src, name in zip(files, names if seed else [f.name for f in files]):
        shutil.copyfile(src, folder / name)
    return folder


def _env(threads: int) -> dict:
    return dict(os.environ, TRACEANALYZE_DUCKDB_THREADS=str(threads))


def _findings(out: Path) -> list[dict]:
    return json.loads((out / "summary.json").read_text())["findings"]


def _analyze(traces: Path, out: Path, workers: int, threads: int) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "traceanalyze", str(traces), "--out", str(out), "--workers",
                           str(workers), "-q", "--no-html"], env=_env(threads), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    return _findings(out)


def _injected(scenario: str, findings: list[dict]) -> None:
    injected = json.loads((FIXTURES / scenario / "expected.json").read_text())["injected"]
    loud = [(f["rule"], f["ranks"], f["evidence"].get("cause")) for f in findings
            if f["severity"] in ("error", "warning")]
    assert loud == [(injected["rule"], [injected["rank"]], injected["cause"])]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_workers_threads_and_file_order_change_nothing(scenario, tmp_path):
    runs = []
    for workers, threads, seed in SETTINGS:
        traces = _copy(scenario, tmp_path / f"t-{workers}-{threads}-{seed}", seed)
        runs.append(_analyze(traces, tmp_path / f"out-{workers}-{threads}-{seed}", workers, threads))
    _injected(scenario, runs[0])
    assert all(f["evidence"].get("events") for f in runs[0])  # evidence rows are compared too
    for other in runs[1:]:
        assert other == runs[0]


def test_a_worker_killed_once_changes_nothing(tmp_path):
    """The first pool worker is killed as soon as it exists (before it can have mapped all its
    ranks): the pool breaks and the unfinished ranks are mapped again in a fresh pool."""
    scenario = SCENARIOS[0]
    reference = _analyze(_copy(scenario, tmp_path / "t0", 0), tmp_path / "out0", 1, 1)
    traces = _copy(scenario, tmp_path / "t", 3)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "traceanalyze", str(traces), "--out", str(out), "--workers", "2",
                             "--no-html"], env=_env(2), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        killed = None
        while killed is None and proc.poll() is None:
            # the pool's workers are the children of its forkserver, the command's child
            workers = [w for server in children(proc.pid) for w in children(server)]
            if workers:
                killed = workers[0]
                os.kill(killed, signal.SIGKILL)
            time.sleep(0.002)  # (a polling interval, not a timing assumption)
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        stop_popen(proc)
    assert killed is not None and not alive(killed)
    assert proc.returncode == 0, stderr
    assert "a map worker died; mapping" in stderr
    assert _findings(out) == reference
    _injected(scenario, reference)
