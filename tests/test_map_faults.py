"""A map worker killed in the middle of a rank (SIGKILL: what the kernel's OOM killer does).

The run is the real command line over a copy of fixtures/ddp/input_straggler in which one
rank's trace is made large (its events repeated) so that reading it takes a while. The test
watches the command's child processes through /proc and kills every one that has
that rank's file open: the rank kills its worker each time it is mapped, as a trace too big
for the machine would. Nothing here waits for a fixed time.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import FIXTURES
from processes import descendants, open_paths, stop_popen

from traceanalyze.load.shards import MANIFEST, SHARD_TABLES, ShardStore, is_current

SCENARIO = FIXTURES / "input_straggler"
BIG_RANK = 3
REPEAT = 20  # the big rank's events, this many times over (about 55 MB of JSON)


def _big_rank_events() -> int:
    """How many events the big rank's file holds: its recorded events, REPEAT times over."""
    for src in SCENARIO.glob("rank*.json.gz"):
        trace = json.loads(gzip.decompress(src.read_bytes()))
        if trace["distributedInfo"]["rank"] == BIG_RANK:
            return len(trace["traceEvents"]) * REPEAT
    raise AssertionError(f"no rank {BIG_RANK} in {SCENARIO}")


def _world(folder: Path) -> dict[int, Path]:
    """The scenario's four ranks, rank BIG_RANK's events repeated; {rank: file}."""
    folder.mkdir()
    files = {}
    for src in sorted(SCENARIO.glob("rank*.json.gz")):
        trace = json.loads(gzip.decompress(src.read_bytes()))
        rank = trace["distributedInfo"]["rank"]
        if rank == BIG_RANK:
            trace["traceEvents"] = trace["traceEvents"] * REPEAT
            files[rank] = folder / f"rank{rank}.pt.trace.json"
            files[rank].write_text(json.dumps(trace))
        else:
            files[rank] = folder / src.name
            files[rank].write_bytes(src.read_bytes())
    return files


def _holders(root: int, path: Path) -> list[int]:
    """The descendants of `root` (pool workers) that have `path` open."""
    return [pid for pid in descendants(root) if str(path) in open_paths(pid)]


def _run_killing(args: list, victim: Path, env: dict, most: int | None = None
                 ) -> tuple[subprocess.CompletedProcess, list[int]]:
    """Run the command; SIGKILL every child process that opens `victim` (the first `most` of
    them, if given). Returns the finished process and the pids killed."""
    proc = subprocess.Popen([sys.executable, "-m", "traceanalyze", *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    killed: list[int] = []
    try:
        deadline = time.monotonic() + 600  # a hang guard only, far beyond a normal run
        while proc.poll() is None and time.monotonic() < deadline:
            for holder in _holders(proc.pid, victim) if most is None or len(killed) < most else []:
                try:
                    os.kill(holder, signal.SIGKILL)
                    killed.append(holder)
                except ProcessLookupError:  # exited meanwhile
                    pass
            time.sleep(0.01)  # (a polling interval, not a timing assumption)
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        stop_popen(proc)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), killed


def _stamps(shards: Path, rank: int) -> dict[str, int]:
    folder = shards / f"rank={rank}"
    return {name: (folder / name).stat().st_mtime_ns for name in [MANIFEST, *(f"{t}.parquet" for t in SHARD_TABLES)]}


def test_a_killed_worker_loses_its_rank_only_and_a_retry_maps_that_rank_alone(tmp_path):
    files = _world(tmp_path / "traces")
    victim = files[BIG_RANK]
    staging = tmp_path / "staging"
    staging.mkdir()
    env = dict(os.environ, TRACEANALYZE_TMPDIR=str(staging))
    out = tmp_path / "out"
    proc, killed = _run_killing([tmp_path / "traces", "--out", out, "--workers", "2"], victim, env)

    # the run finishes, as documented for a completed analysis with a rank left out: exit 0
    assert killed, "no worker ever had the big rank's file open"
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    verdict = " ".join(proc.stdout.split())
    assert f"rank {BIG_RANK}: this rank could not be read and is left out of the analysis" in verdict
    summary = json.loads((out / "summary.json").read_text())
    assert [r["rank"] for r in summary["ranks"]] == sorted(set(files) - {BIG_RANK})
    (issue,) = [i for i in summary["load_issues"] if i["kind"] == "rank-failed"]
    assert issue["rank"] == BIG_RANK and issue["file"] == str(victim) and issue["severity"] == "warning"
    assert "worker died" in issue["message"]

    # no shard a later run would trust: the killed rank has no manifest; the others are current
    shards = out / "trace.shards"
    store = ShardStore(str(shards))
    assert not (shards / f"rank={BIG_RANK}" / MANIFEST).exists()
    assert store.read_manifest(BIG_RANK) is None
    for rank in set(files) - {BIG_RANK}:
        assert is_current(store.read_manifest(rank))
    # the killed workers' private folders were swept by the run itself
    assert not [p.name for p in staging.iterdir() if any(f"-{pid}" in p.name for pid in killed)]

    # the retry (nobody kills it now) maps the big rank alone; the other shards are untouched
    before = {rank: _stamps(shards, rank) for rank in set(files) - {BIG_RANK}}
    proc = subprocess.run([sys.executable, "-m", "traceanalyze", tmp_path / "traces", "--out", out],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert f"parsing 1 of {len(files)} trace file(s)" in proc.stderr
    assert {rank: _stamps(shards, rank) for rank in before} == before
    manifest = store.read_manifest(BIG_RANK)
    assert is_current(manifest) and manifest["source"]["file"] == str(victim.resolve())
    n_events = _big_rank_events()
    assert manifest["events"] == n_events
    summary = json.loads((out / "summary.json").read_text())
    assert [r["rank"] for r in summary["ranks"]] == sorted(files)
    assert not [i for i in summary["load_issues"] if i["kind"] == "rank-failed"]
    assert list(staging.iterdir()) == []


def test_a_worker_killed_once_costs_nothing_but_time(tmp_path):
    """One kill (the OOM killer picking a worker while memory was short): the ranks in flight
    run again in a fresh pool and every rank is analyzed."""
    files = _world(tmp_path / "traces")
    out = tmp_path / "out"
    proc, killed = _run_killing([tmp_path / "traces", "--out", out, "--workers", "2"], files[BIG_RANK],
                                dict(os.environ), most=1)
    assert len(killed) == 1
    assert proc.returncode == 0, proc.stderr
    assert "a map worker died; mapping" in proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert [r["rank"] for r in summary["ranks"]] == sorted(files)
    assert not [i for i in summary["load_issues"] if i["kind"] == "rank-failed"]
    assert ShardStore(str(out / "trace.shards")).read_manifest(BIG_RANK)["events"] \
        == _big_rank_events()


def test_ingest_into_a_shared_shard_folder_sweeps_only_what_this_host_left(tmp_path):
    """A job array on many hosts writes into one (NFS) shard folder: a half-written manifest of a
    killed map on this host goes; one of another host, where that pid may be running, stays."""
    from traceanalyze.load.stale import host_tag

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    src = sorted(SCENARIO.glob("rank*.json.gz"))[0]
    rank = json.loads(gzip.decompress(src.read_bytes()))["distributedInfo"]["rank"]
    folder = tmp_path / "shards" / f"rank={rank}"
    folder.mkdir(parents=True)
    mine = folder / f"{MANIFEST}.{dead.pid}@{host_tag()}.tmp"
    theirs = folder / f"{MANIFEST}.{dead.pid}@{host_tag()}-node7.tmp"
    for path in (mine, theirs):
        path.write_text("{")
    proc = subprocess.run([sys.executable, "-m", "traceanalyze", "ingest", src, "--shards", tmp_path / "shards"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert not mine.exists() and theirs.exists()
    assert is_current(ShardStore(str(tmp_path / "shards")).read_manifest(rank))
    assert sorted(p.name for p in folder.glob(f"{MANIFEST}*")) == sorted([MANIFEST, theirs.name])
