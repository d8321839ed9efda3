"""Shards are checked before they are trusted, and a rank is written by one map at a time.

Real shard folders written by the map stage (fixtures/ddp/input_straggler, whose injected
straggler is in its expected.json), damaged the way a shared filesystem damages them: a file
cut short by a half-finished copy, another rank's file copied over one of this rank's. The
expected sizes and hashes are computed here from the files' bytes with xxhash directly.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
import xxhash
from conftest import FIXTURES, run_cli

from traceanalyze.load import load_trace_dir, reduce
from traceanalyze.extension import native as _native
from traceanalyze.load.map import map_rank
from traceanalyze.load.read import DERIVED_TABLES, NATIVE_TABLES
from traceanalyze.load.discover import identify
from traceanalyze.load.shards import LOCK, MANIFEST, SHARD_TABLES
from traceanalyze.load.verify import verify_shard, verify_shards

SCENARIO = "input_straggler"
INJECTED = json.loads((FIXTURES / SCENARIO / "expected.json").read_text())["injected"]


def _rank_files(folder: Path) -> dict[int, Path]:
    return {json.loads(gzip.decompress(p.read_bytes()))["distributedInfo"]["rank"]: p
            for p in folder.glob("rank*.json.gz")}


def _xxh3(path: Path) -> str:
    return xxhash.xxh3_128(path.read_bytes()).hexdigest()


def _tree(folder: Path) -> dict[str, str]:
    """Every file under `folder` (relative name -> hash of its bytes)."""
    return {str(p.relative_to(folder)): _xxh3(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def _ingest_all(traces: Path, shards: Path) -> None:
    for path in _rank_files(traces).values():
        map_rank(identify(path, only_file=True), str(shards))


@pytest.fixture(scope="module")
def shard_sets(tmp_path_factory) -> dict[str, Path]:
    """Two shard sets of the scenario: one whose traces are still there ('kept'), one whose
    traces were deleted after the maps ('orphaned': only the shards are left)."""
    base = tmp_path_factory.mktemp("shard_sets")
    out = {}
    for name in ("kept", "orphaned"):
        traces = base / f"{name}_traces"
        shutil.copytree(FIXTURES / SCENARIO, traces, ignore=shutil.ignore_patterns("expected.json"))
        _ingest_all(traces, base / name)
        out[name] = base / name
        out[f"{name}_traces"] = traces
    shutil.rmtree(out["orphaned_traces"])
    return out


def _copy_shards(shard_sets, name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(shard_sets[name], tmp_path / "shards"))


def _analyze_shards(shards: Path, out: Path):
    proc = run_cli("analyze", "--shards", shards, "--out", out, "-q")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return proc, json.loads((out / "summary.json").read_text())


def _issues(summary: dict, kind: str) -> list[dict]:
    return [i for i in summary["load_issues"] if i["kind"] == kind]


def _loud(summary: dict) -> list[tuple]:
    return [(f["rule"], f["ranks"], f["evidence"].get("cause")) for f in summary["findings"]
            if f["severity"] in ("error", "warning")]


def test_the_manifest_records_every_file_size_and_hash(shard_sets):
    for rank in range(4):
        folder = shard_sets["kept"] / f"rank={rank}"
        manifest = json.loads((folder / MANIFEST).read_text())
        assert manifest["format"] == "traceanalyze.shard/2"
        assert sorted(manifest["files"]) == sorted(f"{t}.parquet" for t in SHARD_TABLES)
        for table in SHARD_TABLES:
            path = folder / f"{table}.parquet"
            assert manifest["files"][path.name] == {"size_bytes": path.stat().st_size, "xxh3_128": _xxh3(path)}


def test_a_file_cut_short_with_its_trace_gone_leaves_the_rank_out(shard_sets, tmp_path):
    shards = _copy_shards(shard_sets, "orphaned", tmp_path)
    victim = shards / "rank=1" / "cpu_ops.parquet"
    whole = victim.stat().st_size
    victim.write_bytes(victim.read_bytes()[: whole // 2])  # a half-finished copy; manifest intact
    proc, summary = _analyze_shards(shards, tmp_path / "out")
    assert [r["rank"] for r in summary["ranks"]] == [0, 2, 3]
    (issue,) = _issues(summary, "shard-corrupt")
    assert (issue["rank"], issue["file"], issue["severity"]) == (1, str(victim), "warning")
    assert f"{whole // 2:,} bytes, but its manifest says {whole:,}" in issue["message"]
    verdict = " ".join(proc.stdout.split())  # (the verdict names the file, wrapped)
    assert "cpu_ops.parquet" in verdict and "rank 1 is left out of the analysis" in verdict
    # the remaining ranks still get their verdict: the injected straggler is found
    assert _loud(summary) == [(INJECTED["rule"], [INJECTED["rank"]], INJECTED["cause"])]
    assert victim.stat().st_size == whole // 2  # the damaged file is reported, not touched


def test_no_intact_shard_left_is_a_one_line_error(shard_sets, tmp_path):
    shards = _copy_shards(shard_sets, "orphaned", tmp_path)
    for rank in range(4):
        victim = shards / f"rank={rank}" / "steps.parquet"
        victim.write_bytes(victim.read_bytes()[:100])
    proc = run_cli("analyze", "--shards", shards, "--out", tmp_path / "out", "-q")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    first = shards / "rank=0" / "steps.parquet"
    assert line.startswith(f"error: {first}: no usable shard (4 damaged, 0 missing or stale)"), line


def test_another_ranks_file_is_detected_by_hash_and_by_its_rank_column(shard_sets, tmp_path):
    shards = _copy_shards(shard_sets, "orphaned", tmp_path)
    foreign = shards / "rank=0" / "steps.parquet"
    victim = shards / "rank=3" / "steps.parquet"
    recorded = json.loads((shards / "rank=3" / MANIFEST).read_text())["files"]["steps.parquet"]["size_bytes"]
    shutil.copyfile(foreign, victim)
    _, summary = _analyze_shards(shards, tmp_path / "out")
    (issue,) = _issues(summary, "shard-corrupt")
    assert (issue["rank"], issue["file"]) == (3, str(victim))
    size = victim.stat().st_size  # (rank 0's file: of another size, or of the same size, other bytes)
    assert (f"{size:,} bytes, but its manifest says {recorded:,}" if size != recorded
            else "do not match the manifest's xxh3_128 hash") in issue["message"]
    assert [r["rank"] for r in summary["ranks"]] == [0, 1, 2]
    assert _loud(summary) == [(INJECTED["rule"], [INJECTED["rank"]], INJECTED["cause"])]
    # a manifest re-hashed to the foreign file (as a copy tool that re-hashes would): its rows still tell
    manifest_path = shards / "rank=3" / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["files"]["steps.parquet"] = {"size_bytes": victim.stat().st_size, "xxh3_128": _xxh3(victim)}
    manifest_path.write_text(json.dumps(manifest))
    with duckdb.connect() as con:
        (n_rows,) = con.execute("SELECT count(*) FROM read_parquet(?)", [str(foreign)]).fetchone()
    _, summary = _analyze_shards(shards, tmp_path / "out2")
    (issue,) = _issues(summary, "shard-corrupt")
    assert (issue["rank"], issue["file"]) == (3, str(victim))
    assert f"holds {n_rows:,} rows of rank 0, not of rank 3" in issue["message"]


def test_a_file_whose_statistics_do_not_prove_its_rank_has_its_rows_counted(shard_sets, tmp_path):
    """The rank check reads the files' footers; a row group whose `rank` statistics span more
    than the folder's rank (one row of rank 0 among rank 3's, in a file re-hashed into the
    manifest) has its rows counted, and the one stray row is named."""
    shards = _copy_shards(shard_sets, "orphaned", tmp_path)
    victim = shards / "rank=3" / "steps.parquet"
    original = tmp_path / "steps.parquet"
    shutil.copyfile(victim, original)
    with duckdb.connect() as con:
        (n_rows,) = con.execute("SELECT count(*) FROM read_parquet(?)", [str(original)]).fetchone()
        assert n_rows > 1
        src = str(original).replace("'", "''")
        con.execute(f"COPY (SELECT * REPLACE (CASE WHEN step = (SELECT min(step) FROM read_parquet('{src}')) "
                    f"THEN 0 ELSE rank END AS rank) FROM read_parquet('{src}')) "
                    f"TO '{str(victim).replace(chr(39), chr(39) * 2)}' (FORMAT parquet)")
        assert con.execute("SELECT rank, count(*) FROM read_parquet(?, hive_partitioning = false) GROUP BY rank "
                           "ORDER BY rank", [str(victim)]).fetchall() == [(0, 1), (3, n_rows - 1)]
    manifest_path = shards / "rank=3" / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["files"]["steps.parquet"] = {"size_bytes": victim.stat().st_size, "xxh3_128": _xxh3(victim)}
    manifest_path.write_text(json.dumps(manifest))
    _, summary = _analyze_shards(shards, tmp_path / "out")
    (issue,) = _issues(summary, "shard-corrupt")
    assert (issue["rank"], issue["file"]) == (3, str(victim))
    assert "holds 1 rows of rank 0, not of rank 3" in issue["message"]


def test_many_shards_checked_at_once_give_each_shard_its_own_answer(shard_sets, tmp_path):
    """verify_shards (the reduce's check, one query per table for all shards) against
    verify_shard of each shard alone: files of other ranks with re-hashed manifests (so only
    their rank column tells), one shard with two such files (the first table in shard order is
    named), and intact shards."""
    shards = _copy_shards(shard_sets, "orphaned", tmp_path)
    for victim_rank, donor_rank, tables in [(3, 0, ["cpu_ops", "steps"]), (1, 2, ["cpu_ops"])]:
        manifest_path = shards / f"rank={victim_rank}" / MANIFEST
        manifest = json.loads(manifest_path.read_text())
        for table in tables:
            victim = shards / f"rank={victim_rank}" / f"{table}.parquet"
            shutil.copyfile(shards / f"rank={donor_rank}" / f"{table}.parquet", victim)
            manifest["files"][f"{table}.parquet"] = {"size_bytes": victim.stat().st_size, "xxh3_128": _xxh3(victim)}
        manifest_path.write_text(json.dumps(manifest))
    items = [(str(shards / f"rank={r}"), json.loads((shards / f"rank={r}" / MANIFEST).read_text()), r) for r in range(4)]
    with duckdb.connect() as con:
        together = verify_shards(items, con)
    alone = {rank: verify_shard(folder, manifest, rank) for folder, manifest, rank in items}
    assert together == alone
    assert together[0] is None and together[2] is None
    first = SHARD_TABLES.index("steps") < SHARD_TABLES.index("cpu_ops")
    assert together[3].file == str(shards / "rank=3" / f"{'steps' if first else 'cpu_ops'}.parquet")
    assert together[1].file == str(shards / "rank=1" / "cpu_ops.parquet")
    with duckdb.connect() as con:
        (n_rows,) = con.execute("SELECT count(*) FROM read_parquet(?)", [str(shards / "rank=2" / "cpu_ops.parquet")]).fetchone()
    assert together[1].problem == f"it holds {n_rows:,} rows of rank 2, not of rank 1 (its folder)"


def test_damaged_or_old_shards_are_mapped_again_when_their_traces_are_there(shard_sets, tmp_path):
    shards = _copy_shards(shard_sets, "kept", tmp_path)
    victim = shards / "rank=1" / "cpu_ops.parquet"
    victim.write_bytes(victim.read_bytes()[:1000])
    old = shards / "rank=3" / MANIFEST  # a manifest of the previous format: no sizes or hashes
    manifest = json.loads(old.read_text())
    del manifest["files"]
    old.write_text(json.dumps(dict(manifest, format="traceanalyze.shard/1")))
    _, summary = _analyze_shards(shards, tmp_path / "out")
    assert [r["rank"] for r in summary["ranks"]] == [0, 1, 2, 3]
    assert not _issues(summary, "shard-corrupt") and not _issues(summary, "shard-unusable")
    (issue,) = _issues(summary, "shard-repaired")
    assert (issue["rank"], issue["file"], issue["severity"]) == (1, str(victim), "info")
    assert _loud(summary) == [(INJECTED["rule"], [INJECTED["rank"]], INJECTED["cause"])]
    for rank in (1, 3):  # written again, and intact
        folder = shards / f"rank={rank}"
        manifest = json.loads((folder / MANIFEST).read_text())
        assert manifest["format"] == "traceanalyze.shard/2"
        assert manifest["files"]["cpu_ops.parquet"]["xxh3_128"] == _xxh3(folder / "cpu_ops.parquet")


def test_the_load_from_traces_maps_a_damaged_shard_again(tmp_path):
    traces = Path(shutil.copytree(FIXTURES / SCENARIO, tmp_path / "t", ignore=shutil.ignore_patterns("expected.json")))
    out = tmp_path / "out"
    assert run_cli(traces, "--out", out, "-q").returncode == 0
    victim = out / "trace.shards" / "rank=2" / "steps.parquet"
    shutil.copyfile(out / "trace.shards" / "rank=1" / "steps.parquet", victim)
    os.utime(_rank_files(traces)[0])  # (so the database is built again, not reused)
    proc = run_cli(traces, "--out", out, "-q")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    (issue,) = _issues(summary, "shard-repaired")
    assert (issue["rank"], issue["file"]) == (2, str(victim))
    assert [r["rank"] for r in summary["ranks"]] == [0, 1, 2, 3]
    assert _loud(summary) == [(INJECTED["rule"], [INJECTED["rank"]], INJECTED["cause"])]
    with duckdb.connect() as con:
        # (hive_partitioning off: the folder name rank=2 would stand in for the file's own column)
        assert con.execute("SELECT DISTINCT rank FROM read_parquet(?, hive_partitioning = false)",
                           [str(victim)]).fetchall() == [(2,)]


def test_a_database_of_views_is_not_reused_over_a_damaged_shard(tmp_path, monkeypatch):
    monkeypatch.setattr(reduce, "MATERIALIZE_MAX_BYTES", 0)  # as a big job: views over the shards
    db = tmp_path / "trace.duckdb"
    load_trace_dir(FIXTURES / SCENARIO, db)
    assert load_trace_dir(FIXTURES / SCENARIO, db).reused
    victim = tmp_path / "trace.shards" / "rank=0" / "raw_events.parquet"
    victim.write_bytes(victim.read_bytes()[:-100])
    result = load_trace_dir(FIXTURES / SCENARIO, db)
    assert not result.reused and result.mapped == 1 and result.ranks == [0, 1, 2, 3]
    manifest = json.loads((victim.parent / MANIFEST).read_text())
    assert verify_shard(str(victim.parent), manifest, 0) is None


def test_a_database_of_views_is_not_reused_over_another_ranks_file_with_a_rehashed_manifest(tmp_path, monkeypatch):
    """A re-run over unchanged manifests checks the files' hashes alone (the rank columns were
    checked when the database was built); a manifest that changed since (here re-hashed to
    another rank's file copied over one of rank 1's) has the rank columns read again: the rank
    is mapped again, and its table holds its own rows."""
    monkeypatch.setattr(reduce, "MATERIALIZE_MAX_BYTES", 0)  # as a big job: views over the shards
    db = tmp_path / "trace.duckdb"
    load_trace_dir(FIXTURES / SCENARIO, db)
    from traceanalyze.load import verify

    def no_rank_columns(*_args):
        raise AssertionError("the rank columns were read again over unchanged manifests")

    with monkeypatch.context() as patched:
        patched.setattr(verify, "_stray_rows", no_rank_columns)
        assert load_trace_dir(FIXTURES / SCENARIO, db).reused
    shards = tmp_path / "trace.shards"
    victim = shards / "rank=1" / "steps.parquet"
    shutil.copyfile(shards / "rank=0" / "steps.parquet", victim)
    manifest_path = shards / "rank=1" / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["files"]["steps.parquet"] = {"size_bytes": victim.stat().st_size, "xxh3_128": _xxh3(victim)}
    manifest_path.write_text(json.dumps(manifest))
    result = load_trace_dir(FIXTURES / SCENARIO, db)
    assert not result.reused and result.mapped == 1 and result.ranks == [0, 1, 2, 3]
    with duckdb.connect(str(db), read_only=True) as con:
        ranks = con.execute("SELECT DISTINCT rank FROM read_parquet(?, hive_partitioning = false)",
                            [str(victim)]).fetchall()
    assert ranks == [(1,)]


def _lock_holder(folder: Path) -> subprocess.Popen:
    """A process holding the rank folder's lock until it is killed."""
    code = ("import fcntl, os, sys\n"
            f"fd = os.open({str(folder / LOCK)!r}, os.O_RDWR | os.O_CREAT)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "os.pwrite(fd, b'holder', 0)\n"
            "print('held', flush=True)\n"
            "sys.stdin.read()\n")
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def test_two_ingests_of_one_rank_at_once_write_one_valid_shard(tmp_path):
    rank, trace = sorted(_rank_files(FIXTURES / SCENARIO).items())[0]
    shards = tmp_path / "shards"
    folder = shards / f"rank={rank}"
    folder.mkdir(parents=True)
    procs = []
    holder = _lock_holder(folder)
    try:
        assert holder.stdout.readline() == "held\n"
        for _ in range(2):  # both start while the rank is being written (by the holder)
            procs.append(subprocess.Popen([sys.executable, "-m", "traceanalyze", "ingest", str(trace),
                                           "--shards", str(shards)], stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        for proc in procs:  # each says, in one line, that it waits
            assert proc.stderr.readline() == \
                f"rank {rank}: waiting for another ingest of this rank to finish (holder)\n"
        holder.send_signal(signal.SIGKILL)  # the writer dies: the kernel releases its lock
        results = [(proc.wait(timeout=300), proc.stdout.read(), proc.stderr.read()) for proc in procs]
    finally:
        for proc in [holder, *procs]:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream:
                    stream.close()
    assert [rc for rc, _, _ in results] == [0, 0], results
    n_events = len(json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"])
    # one maps the rank, the other waits for it and finds it up to date
    assert sorted(out.strip() for _, out, _ in results) == [
        f"rank {rank}: shard up to date in {folder}", f"rank {rank}: wrote {folder} ({n_events:,} events)"]
    manifest = json.loads((folder / MANIFEST).read_text())
    assert verify_shard(str(folder), manifest, rank) is None
    assert manifest["rows"]["raw_events"] == n_events
    assert sorted(p.name for p in folder.iterdir()) == sorted([LOCK, MANIFEST, *(f"{t}.parquet" for t in SHARD_TABLES)])


def test_the_manifest_times_each_per_rank_table(shard_sets):
    """The map's stage times name every table the reader derives from its one-pass tables (the
    schema's tables that are neither raw, one-pass nor the map's own rows, listed here from
    schema.sql) and reading those back ("inputs"), with their seconds, and the whole stage's CPU
    seconds (`tables_cpu`), and each one-pass table the reader finishes once the events are
    read (the schema's tables from `threads` to `kernels`) and gathering their rows
    ("gathering"): what bench/bench_load.py prints per table. No SQL file builds a per-rank
    table."""
    root = Path(__file__).resolve().parent.parent / "traceanalyze" / "db"
    assert not (root / "tables" / "per_rank").exists() or not list((root / "tables" / "per_rank").glob("*.sql"))
    schema = (root / "schema.sql").read_text()
    in_schema = re.findall(r"^CREATE TABLE (\w+)", schema, re.MULTILINE)
    first_derived, after = in_schema.index("memcpy"), in_schema.index("load_issues")
    derived = set(in_schema[first_derived:after])
    assert {"collectives", "phase_intervals", "op_flops", "step_regions"} <= derived and "cpu_ops" not in derived
    assert derived == set(DERIVED_TABLES) == set(_native.derived_tables())
    one_pass = set(in_schema[in_schema.index("threads"):in_schema.index("kernels") + 1])
    assert one_pass == set(NATIVE_TABLES), one_pass
    for rank in range(4):
        stages = json.loads((shard_sets["kept"] / f"rank={rank}" / MANIFEST).read_text())["stage_s"]
        timed = {k.removeprefix("table_cpu."): v for k, v in stages.items() if k.startswith("table_cpu.")}
        assert set(timed) == derived | one_pass | {"inputs", "gathering"}, rank
        assert all(v >= 0 for v in timed.values())
        assert stages["native_tables_wall"] >= 0 and stages["tables_cpu"] >= 0


def test_each_shard_file_records_its_rank_in_its_statistics(shard_sets):
    """Every row group of every shard file records the minimum and maximum of its `rank` (the
    check above reads them; a query of one rank over the views skips the other ranks' files),
    and of the step and times where the table has them; no other column pays for statistics
    (the files are in event order: a row group's range of names prunes nothing)."""
    keyed = {"rank", "step", "ts_ns", "end_ns"}
    with duckdb.connect() as con:
        for rank in range(4):
            for table in SHARD_TABLES:
                path = shard_sets["kept"] / f"rank={rank}" / f"{table}.parquet"
                rows = con.execute("SELECT path_in_schema, stats_min_value, stats_max_value, num_values "
                                   "FROM parquet_metadata(?)", [str(path)]).fetchall()
                if not rows:  # (a table without rows: a file of no row group)
                    assert con.execute("SELECT count(*) FROM read_parquet(?)", [str(path)]).fetchone() == (0,)
                    continue
                ranks = [(lo, hi) for column, lo, hi, n in rows if column == "rank" and n]
                assert ranks and all(lo == hi == str(rank) for lo, hi in ranks), (path, ranks)
                for column, lo, hi, n in rows:
                    if column in keyed:
                        assert not n or (lo is not None and hi is not None), (path, column)
                    else:
                        assert lo is None and hi is None, (path, column)
