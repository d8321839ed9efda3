"""Map / reduce over per-rank shards: reuse, rebuild, faults, views, batch commands, S3 and Ray.

Ground truth: the injected straggler of fixtures/ddp/input_straggler (its expected.json), and
the one-database analysis of the same traces (the shards must not change a single finding).
Object storage is a real S3-compatible server (moto's server mode) on 127.0.0.1; Ray is a real
local cluster started with `ray start --head`.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pytest
from conftest import FIXTURES, run_cli
from processes import carrying_owner_token, cmdline, descendants, in_session, stop, stop_popen

from traceanalyze.load import load_trace_dir, reduce
from traceanalyze.load.discover import discover
from traceanalyze.load.executor_registry import run_maps
from traceanalyze.load.map import map_rank
from traceanalyze.load.packing import map_pack, packs
from traceanalyze.load.shards import MANIFEST, SHARD_TABLES, ShardStore, is_current

SCENARIO = "input_straggler"
INJECTED = json.loads((FIXTURES / SCENARIO / "expected.json").read_text())["injected"]


def _copy(folder: Path) -> Path:
    shutil.copytree(FIXTURES / SCENARIO, folder, ignore=shutil.ignore_patterns("expected.json"))
    return folder


def _rank_files(folder: Path) -> dict[int, Path]:
    out = {}
    for path in folder.glob("rank*.json.gz"):
        out[json.loads(gzip.decompress(path.read_bytes()))["distributedInfo"]["rank"]] = path
    return out


def _loud(summary: dict) -> list[tuple]:
    return sorted((f["rule"], tuple(f["ranks"]), f["evidence"].get("cause"), f["title"])
                  for f in summary["findings"] if f["severity"] in ("error", "warning"))


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _assert_injected(summary: dict) -> None:
    loud = [(f["rule"], f["ranks"], f["evidence"].get("cause")) for f in summary["findings"]
            if f["severity"] in ("error", "warning")]
    assert loud == [(INJECTED["rule"], [INJECTED["rank"]], INJECTED["cause"])], loud


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """The default analysis of the scenario (local pool, shards copied into the database)."""
    out = tmp_path_factory.mktemp("reference")
    proc = run_cli(FIXTURES / SCENARIO, "--out", out, "-q")
    assert proc.returncode == 0, proc.stderr
    summary = _summary(out)
    _assert_injected(summary)
    return summary


def test_a_shard_per_rank_with_its_manifest_written_last(tmp_path):
    traces = _copy(tmp_path / "t")
    db = tmp_path / "out" / "trace.duckdb"
    result = load_trace_dir(traces, db)
    files = _rank_files(traces)
    assert result.mapped == len(files) == 4 and sorted(result.ranks) == sorted(files)
    shards = tmp_path / "out" / "trace.shards"
    for rank, path in files.items():
        folder = shards / f"rank={rank}"
        manifest = json.loads((folder / MANIFEST).read_text())
        assert manifest["source"]["file"] == str(path.resolve())
        assert manifest["source"]["size_bytes"] == path.stat().st_size
        # written last: no table file is newer than the manifest
        assert max((folder / f"{t}.parquet").stat().st_mtime_ns for t in SHARD_TABLES) \
            <= (folder / MANIFEST).stat().st_mtime_ns
        n_events = len(json.loads(gzip.decompress(path.read_bytes()))["traceEvents"])
        with duckdb.connect() as con:
            (rows,) = con.execute("SELECT count(*) FROM read_parquet(?)",
                                  [str(folder / "raw_events.parquet")]).fetchone()
        assert rows == manifest["rows"]["raw_events"] == n_events


def test_only_changed_stale_or_unfinished_ranks_are_parsed_again(tmp_path):
    traces = _copy(tmp_path / "t")
    db = tmp_path / "out" / "trace.duckdb"
    shards = tmp_path / "out" / "trace.shards"
    load_trace_dir(traces, db)
    files = _rank_files(traces)
    assert load_trace_dir(traces, db).reused  # nothing changed: the database itself is reused
    os.utime(files[1])  # rank 1's trace touched: only rank 1 is mapped
    assert load_trace_dir(traces, db).mapped == 1
    manifest = json.loads((shards / "rank=2" / MANIFEST).read_text())  # an older schema version
    (shards / "rank=2" / MANIFEST).write_text(json.dumps(dict(manifest, schema_version="0")))
    (shards / "rank=3" / MANIFEST).unlink()  # an interrupted map: tables without a manifest
    os.utime(files[0])  # (so the database itself is not reused)
    result = load_trace_dir(traces, db)
    assert result.mapped == 3 and not result.failed
    assert json.loads((shards / "rank=2" / MANIFEST).read_text())["schema_version"] != "0"


def test_views_over_shards_give_the_same_analysis(tmp_path, reference, monkeypatch):
    monkeypatch.setattr(reduce, "MATERIALIZE_MAX_BYTES", 0)  # as a big job: views, not copies
    from traceanalyze.api import analyze

    db = tmp_path / "views.duckdb"
    with analyze(FIXTURES / SCENARIO, db=db, progress=False) as analysis:
        summary = analysis.summary_dict
    with duckdb.connect(str(db), read_only=True) as con:
        kinds = dict(con.execute("SELECT table_name, table_type FROM information_schema.tables").fetchall())
        (storage,) = con.execute("SELECT value FROM load_meta WHERE key = 'storage'").fetchone()
    assert storage == "views" and kinds["raw_events"] == "VIEW" and kinds["ranks"] == "BASE TABLE"
    assert _loud(summary) == _loud(reference)
    assert summary["steps"] == reference["steps"] and summary["timeline"] == reference["timeline"]
    # the read-only `sql` command reads the views, and still nothing else on disk
    proc = run_cli("sql", db, "SELECT count(*) AS n FROM raw_events", "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    total = sum(len(json.loads(gzip.decompress(p.read_bytes()))["traceEvents"])
                for p in _rank_files(FIXTURES / SCENARIO).values())
    assert proc.stdout.split() == ["n", str(total)]
    proc = run_cli("sql", db, "SELECT * FROM read_csv('/etc/passwd')")
    assert proc.returncode == 2 and "disabled" in proc.stderr


def test_a_failed_rank_is_reported_and_the_rest_analyzed_then_retried_alone(tmp_path):
    traces = _copy(tmp_path / "t")
    files = _rank_files(traces)
    good = files[1].read_bytes()
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0x5A  # a corrupt gzip stream
    files[1].write_bytes(bytes(bad))
    out = tmp_path / "out"
    proc = run_cli(traces, "--out", out, "-q")
    assert proc.returncode == 0, proc.stderr
    verdict = " ".join(proc.stdout.split())  # (the verdict says so, wrapped)
    assert "rank 1: this rank could not be read and is left out of the analysis" in verdict
    summary = _summary(out)
    assert [r["rank"] for r in summary["ranks"]] == [0, 2, 3]
    (issue,) = [i for i in summary["load_issues"] if i["kind"] == "rank-failed"]
    assert issue["rank"] == 1 and issue["file"] == str(files[1]) and issue["severity"] == "warning"
    assert "corrupt gzip" in issue["message"]
    files[1].write_bytes(good)  # fixed: a retry maps rank 1 only
    result = load_trace_dir(traces, out / "trace.duckdb")
    assert result.mapped == 1 and sorted(result.ranks) == [0, 1, 2, 3]


def test_small_ranks_are_packed_and_a_failed_rank_in_a_pack_fails_alone(tmp_path):
    """Two workers, four small ranks: two tasks of ranks in rank order; a corrupt rank fails
    alone and the rank that shared its task keeps a current shard."""
    traces = _copy(tmp_path / "t")
    files = _rank_files(traces)
    bad = bytearray(files[1].read_bytes())
    bad[len(bad) // 2] ^= 0x5A  # a corrupt gzip stream
    files[1].write_bytes(bytes(bad))
    tfs = discover(traces).files
    grouped = packs(tfs, workers=2)
    assert [tf.rank for pack in grouped for tf in pack] == [0, 1, 2, 3]  # each once, by rank
    assert len(grouped) == 2  # each pack holds half of the bytes: no third, no single one
    assert [[tf.rank for tf in pack] for pack in packs(tfs, workers=2, pack_bytes=1)] == [[0], [1], [2], [3]]
    (with_bad,) = [pack for pack in grouped if any(tf.rank == 1 for tf in pack)]
    assert len(with_bad) > 1
    shards = tmp_path / "shards"
    outcomes = {o.rank: o for o in run_maps(tfs, str(shards), workers=2)}
    assert outcomes[1].manifest is None and "corrupt gzip" in outcomes[1].error
    store = ShardStore(str(shards))
    for rank in (0, 2, 3):
        assert outcomes[rank].error is None
        assert is_current(store.read_manifest(rank), next(tf for tf in tfs if tf.rank == rank))
        assert all((shards / f"rank={rank}" / f"{t}.parquet").exists() for t in SHARD_TABLES)
    assert store.read_manifest(1) is None


def test_a_pack_of_odd_ranks_protobuf_truncated_and_begin_end_maps_each_as_alone(tmp_path):
    """The reads that fix rows in a private database (a Perfetto protobuf rank, B/E pairs) and
    a truncated rank, packed together with a plain rank: each rank's shard as when it is mapped
    alone (its manifest's row counts those of its files), and the truncated rank's issue kept
    on that rank only."""
    import pftrace_convert

    src = _rank_files(FIXTURES / SCENARIO)
    traces = tmp_path / "t"
    traces.mkdir()
    pftrace_convert.convert_file(src[0], traces / "rank0.pftrace")
    text = gzip.decompress(src[1].read_bytes())
    (traces / "rank1.pt.trace.json").write_bytes(text[: int(len(text) * 0.8)])  # cut in the middle of an event
    doc = json.loads(gzip.decompress(src[2].read_bytes()))
    ops = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"][:50]
    for e in ops:  # 50 ops as B/E pairs
        doc["traceEvents"].remove(e)
        begin = {k: v for k, v in e.items() if k != "dur"}
        doc["traceEvents"] += [{**begin, "ph": "B"}, {"ph": "E", "pid": e["pid"], "tid": e["tid"], "ts": e["ts"] + e["dur"]}]
    (traces / "rank2.pt.trace.json").write_text(json.dumps(doc))
    shutil.copy(src[3], traces / src[3].name)
    tfs = sorted(discover(traces).files, key=lambda tf: tf.rank)
    assert [tf.rank for tf in tfs] == [0, 1, 2, 3]
    _assert_pack_maps_as_alone(tfs, tmp_path)
    with duckdb.connect() as con:
        kinds = {rank: {k for (k,) in con.execute(
            "SELECT kind FROM read_parquet(?)", [str(tmp_path / "together" / f"rank={rank}" / "load_issues.parquet")]
        ).fetchall()} for rank in range(4)}
    assert "truncated" in kinds[1] and not any("truncated" in kinds[r] for r in (0, 2, 3))
    assert "begin-end" in kinds[2] and not any("begin-end" in kinds[r] for r in (0, 1, 3))


def _assert_pack_maps_as_alone(tfs, tmp_path) -> None:
    assert len(tfs) > 1
    (pack,) = packs(tfs, workers=1)  # (the whole folder is far under a pack's bytes)
    together, alone = tmp_path / "together", tmp_path / "alone"
    outcomes = map_pack(pack, str(together), 1)
    assert [o.rank for o in outcomes] == [tf.rank for tf in tfs] and all(o.error is None for o in outcomes)
    for tf in tfs:
        map_rank(tf, str(alone), 1)
    con = duckdb.connect()
    try:
        for tf in tfs:
            mine, own = ShardStore(str(together)).read_manifest(tf.rank), ShardStore(str(alone)).read_manifest(tf.rank)
            assert mine["rows"] == own["rows"] and mine["events"] == own["events"] and mine["notes"] == own["notes"]
            for table in SHARD_TABLES:
                query = "SELECT * FROM read_parquet(?) ORDER BY ALL"
                rows = con.execute(query, [str(together / f"rank={tf.rank}" / f"{table}.parquet")]).fetchall()
                expected = con.execute(query, [str(alone / f"rank={tf.rank}" / f"{table}.parquet")]).fetchall()
                assert len(rows) == own["rows"][table]
                assert rows == expected, (tf.rank, table)
                assert all(row[0] == tf.rank for row in rows) or table == "load_issues", (tf.rank, table)
    finally:
        con.close()


def test_ingest_per_rank_then_analyze_the_shards(tmp_path, reference):
    shards = tmp_path / "shards"
    for rank, path in sorted(_rank_files(FIXTURES / SCENARIO).items()):
        proc = run_cli("ingest", path, "--shards", shards)
        assert proc.returncode == 0, proc.stderr
        assert f"rank {rank}: wrote" in proc.stdout
    proc = run_cli("ingest", path, "--shards", shards)  # unchanged: not parsed again
    assert "up to date" in proc.stdout
    out = tmp_path / "out"
    proc = run_cli("analyze", "--shards", shards, "--out", out, "-q")
    assert proc.returncode == 0, proc.stderr
    assert _loud(_summary(out)) == _loud(reference)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def s3_env(monkeypatch):
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()  # (a thread of this process: it ends with server.stop())
    try:
        env = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        yield env
    finally:
        server.stop()


def test_traces_and_shards_in_s3(tmp_path, reference, s3_env):
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.mkdir("job")
    files = _rank_files(FIXTURES / SCENARIO)
    for path in files.values():
        fs.put_file(str(path), f"job/traces/{path.name}")
    out = tmp_path / "out"
    proc = run_cli("s3://job/traces", "--shards", "s3://job/shards", "--out", out, "-q")
    assert proc.returncode == 0, proc.stderr
    summary = _summary(out)
    assert _loud(summary) == _loud(reference)
    assert sorted(r["file"] for r in summary["ranks"]) == sorted(f"s3://job/traces/{p.name}" for p in files.values())
    fs.invalidate_cache()
    assert sorted(fs.ls("job/shards", detail=False)) == [f"job/shards/rank={r}" for r in sorted(files)]
    manifest = json.loads(fs.cat_file("job/shards/rank=0/manifest.json"))
    assert manifest["source"]["etag"] == fs.info(f"job/traces/{files[0].name}")["ETag"]
    # an object that cannot be read (replaced by garbage): that rank is reported, the rest analyzed
    fs.pipe_file(f"job/traces/{files[3].name}", b"\x1f\x8b not really gzip")
    proc = run_cli("s3://job/traces", "--shards", "s3://job/shards", "--out", out, "-q")
    assert proc.returncode == 0, proc.stderr
    failed = [i for i in _summary(out)["load_issues"] if i["kind"] == "rank-failed"]
    assert [(i["rank"], i["file"]) for i in failed] == [(3, f"s3://job/traces/{files[3].name}")]


def _stop_cluster(start: subprocess.Popen, temp_dir: str, port: int) -> None:
    """Stop the Ray cluster started by `start` (`ray start --head` in a session of its own),
    and only it: `ray stop` stops every Ray process of the machine, a developer's own cluster
    included. Its daemons stay in the session `ray start` opened (or name the folder or the
    head's address on their command line); its workers are their descendants. Only /proc and
    signals: nothing here can fail for a missing module."""
    def ours(args: list[str]) -> bool:
        return any(temp_dir in arg or (arg.startswith("--address=") and arg.endswith(f":{port}"))
                   for arg in args)

    daemons = set(in_session(start.pid))
    daemons |= {pid for pid in carrying_owner_token() if ours(cmdline(pid))}
    # (the cluster is private and thrown away: its gcs_server, raylet and agents took the whole
    # 30 s grace to act on SIGTERM (measured), so they get SIGKILL after a short one)
    stop([*daemons, *(d for pid in daemons for d in descendants(pid))], grace_s=2.0)
    stop_popen(start)


def test_ray_executor_on_a_real_local_cluster(tmp_path, reference):
    port = _free_port()
    home = tmp_path / "home"  # a private ~/.ray (its auth token) for this cluster and its client
    home.mkdir()
    # (a short private folder: Ray's socket paths must fit in 107 bytes)
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", HOME=str(home))
    start = subprocess.Popen(["ray", "start", "--head", f"--port={port}", "--num-cpus=2",
                              "--node-ip-address=127.0.0.1", "--include-dashboard=false",
                              "--disable-usage-stats", f"--temp-dir={temp_dir}"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                             start_new_session=True)
    try:
        _, start_err = start.communicate(timeout=300)
        assert start.returncode == 0, start_err
        out = tmp_path / "out"
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "traceanalyze", str(FIXTURES / SCENARIO), "--out", str(out),
                               "--executor", "ray", "--ray-address", f"127.0.0.1:{port}"],
                              capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr
        assert "Ray task(s)" in proc.stderr, time.perf_counter() - t
        assert _loud(_summary(out)) == _loud(reference)
        assert len(list((out / "trace.shards").glob(f"rank=*/{MANIFEST}"))) == 4
    finally:
        _stop_cluster(start, temp_dir, port)
        shutil.rmtree(temp_dir, ignore_errors=True)
