"""The reduce writes its database in one transaction: DuckDB syncs its log to disk once per
commit, and a statement committed on its own each time (131 of them for one rank) cost a
load a sync each, milliseconds apiece on a network file system.

Counted for real: a small C shim (bench/sync_shim.c), loaded into the load's process with
LD_PRELOAD, appends the file behind every fsync / fdatasync to a log (the C compiler is the
one the native crate builds with)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

FIXTURES = Path(__file__).parent.parent / "fixtures"
FIXTURE = FIXTURES / "ddp" / "balanced"

SHIM = Path(__file__).parent.parent / "bench" / "sync_shim.c"  # (bench/bench_sync.py uses it too)


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler (the native crate's linker) is needed to count the syncs"
    folder = tmp_path_factory.mktemp("shim")
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(folder / "shim.so"), str(SHIM), "-ldl"],
                   check=True, capture_output=True)
    return folder / "shim.so"


def log_syncs(shim: Path, tmp_path: Path, folder: Path) -> tuple[Path, list[str]]:
    """`traceanalyze load folder` into tmp_path/trace.duckdb: the database and the syncs of its
    log (the work file is renamed into place at the end: its name is the database's and a
    suffix)."""
    db, log = tmp_path / "trace.duckdb", tmp_path / "syncs.log"
    env = {**os.environ, "LD_PRELOAD": str(shim), "SYNC_LOG": str(log)}
    proc = subprocess.run([sys.executable, "-m", "traceanalyze", "load", str(folder), "--db", str(db)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    synced = log.read_text().splitlines() if log.exists() else []
    return db, [p for p in synced if p.startswith(str(db)) and p.endswith(".wal")]


def test_a_load_syncs_its_database_log_twice_per_connection_that_writes(shim, tmp_path):
    """4 ranks (copied into the database: every table is a statement). Two connections write
    (the reduce's, and the one inserting the critical path's segments), each in one
    transaction, and DuckDB syncs a connection's log at its commit and at its checkpoint: at
    most 4 syncs of the log, where a commit per statement made 102."""
    db, synced = log_syncs(shim, tmp_path, FIXTURE)
    assert 1 <= len(synced) <= 4, synced
    with duckdb.connect(str(db), read_only=True) as con:  # (and what it committed is all there)
        (ranks,) = con.execute("SELECT count(*) FROM ranks").fetchone()
        (steps,) = con.execute("SELECT count(DISTINCT rank) FROM steps").fetchone()
    assert ranks == steps == len(list(FIXTURE.glob("rank*.pt.trace.json*")))


def test_a_folder_of_flight_recorder_dumps_alone_syncs_its_log_twice(shim, tmp_path):
    """Dumps alone: one connection writes the database (its commit and its checkpoint: 2
    syncs of the log, where a commit per statement made 93)."""
    folder = FIXTURES / "flight_recorder" / "desync_op"
    db, synced = log_syncs(shim, tmp_path, folder)
    assert 1 <= len(synced) <= 2, synced
    with duckdb.connect(str(db), read_only=True) as con:
        (dumps,) = con.execute("SELECT count(*) FROM fr_dumps").fetchone()
    assert dumps == len(list(folder.glob("nccl_trace_rank_*")))
