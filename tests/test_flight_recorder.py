"""Issue 32: Flight Recorder dumps (fixtures/flight_recorder/, real gloo recordings of torch 2.13).

Expected values are derived here from the dump pickles themselves (read with the standard
unpickler: these files are ours), the hang's frontier computed by hand, independently of the
SQL; hostile dumps are built here and must run nothing.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import traceanalyze
from traceanalyze.errors import TraceError
from traceanalyze.load import load_trace_dir
from traceanalyze.load import flight_recorder as fr

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "flight_recorder"
SCENARIOS = ("skipped_allreduce", "tp_hang", "desync_op", "healthy", "hang_with_profile")  # recorded on gloo


def dumps_of(scenario: str) -> dict[int, dict]:
    out = {}
    for path in sorted((FIXTURES / scenario).glob("nccl_trace_rank_*")):
        with open(path, "rb") as f:
            out[int(path.name.rsplit("_", 1)[1])] = pickle.load(f)
    return out


def user_line(entry: dict) -> tuple[str, int]:
    frame = next(f for f in entry["frames"] if "/torch/" not in f["filename"])
    return os.path.basename(frame["filename"]), frame["line"]


def frontier_by_hand(dumps: dict[int, dict]) -> dict:
    """Per group: members (ranks naming it), each one's last collective_seq_id; the groups whose
    members differ; a missing member is a culprit when its own last collective was reached by
    every member of that group."""
    members: dict[str, set[int]] = {}
    position: dict[tuple[str, int], int] = {}
    for rank, dump in dumps.items():
        for e in dump["entries"]:
            pg = e["process_group"][0]
            members.setdefault(pg, set()).add(rank)
            position[pg, rank] = max(position.get((pg, rank), 0), e["collective_seq_id"])
    stopped = {}
    for pg, ranks in members.items():
        seqs = {r: position[pg, r] for r in ranks}
        if min(seqs.values()) < max(seqs.values()):
            seq = min(seqs.values()) + 1
            stopped[pg] = {"seq": seq, "reached": sorted(r for r in ranks if seqs[r] >= seq),
                           "missing": sorted(r for r in ranks if seqs[r] < seq)}

    def finished(rank: int) -> bool:
        last = dumps[rank]["entries"][-1]
        pg = last["process_group"][0]
        return pg not in stopped or last["collective_seq_id"] < stopped[pg]["seq"]

    culprits = sorted({r for s in stopped.values() for r in s["missing"] if finished(r)})
    return {"stopped": stopped, "culprits": culprits}


def q(db: Path, sql: str, *params):
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql, list(params)).fetchall()


def cli(*args, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "traceanalyze", *map(str, args)], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=600)


# ---------------------------------------------------------------- the recordings themselves


def test_the_gloo_dumps_look_as_the_issue_says():
    """torch 2.13 on gloo: version 2.10, state 'scheduled', no p2p, pg_config without group names;
    the skipped all_reduce leaves 6 entries on rank 2 and 7 on the others."""
    dumps = dumps_of("skipped_allreduce")
    assert sorted(dumps) == [0, 1, 2, 3]
    assert {d["version"] for d in dumps.values()} == {"2.10"}
    entries = [e for d in dumps.values() for e in d["entries"]]
    assert {e["state"] for e in entries} == {"scheduled"} and not any(e["is_p2p"] for e in entries)
    assert all(set(d["pg_config"]) == {""} for d in dumps.values())
    assert {r: len(d["entries"]) for r, d in dumps.items()} == {0: 7, 1: 7, 2: 6, 3: 7}


# ---------------------------------------------------------------- tables


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_tables_hold_every_entry_of_every_dump(scenario, fixture_db):
    dumps = dumps_of(scenario)
    db = fixture_db(FIXTURES / scenario)
    assert dict(q(db, "SELECT rank, count(*) FROM fr_entries GROUP BY rank")) == \
        {r: len(d["entries"]) for r, d in dumps.items()}
    assert dict(q(db, "SELECT rank, entries FROM fr_dumps")) == {r: len(d["entries"]) for r, d in dumps.items()}
    got = q(db, "SELECT rank, pg_name, collective_seq_id, profiling_name, frame_line FROM fr_entries "
                "ORDER BY rank, record_id")
    want = [(r, e["process_group"][0], e["collective_seq_id"], e["profiling_name"], user_line(e)[1])
            for r, d in sorted(dumps.items()) for e in d["entries"]]
    assert got == want
    # pg_status is keyed by each rank's own group number: named through its entries
    for rank, dump in dumps.items():
        names = {str(e["pg_id"]): e["process_group"][0] for e in dump["entries"]}
        want_status = sorted((names.get(k), s["last_enqueued_collective"]) for k, s in dump["pg_status"].items())
        got_status = sorted(q(db, "SELECT pg_name, last_enqueued_collective FROM fr_status WHERE rank = ?", rank))
        assert got_status == want_status


def test_group_members_are_inferred_from_the_entries(fixture_db):
    db = fixture_db(FIXTURES / "tp_hang")
    groups = {pg: (desc, members, source) for pg, desc, members, source in q(db, "SELECT * FROM fr_groups")}
    members: dict[str, set[int]] = {}
    for rank, dump in dumps_of("tp_hang").items():
        for e in dump["entries"]:
            members.setdefault(e["process_group"][0], set()).add(rank)
    assert {pg: sorted(m) for pg, m in members.items()} == {pg: g[1] for pg, g in groups.items()}
    assert {g[2] for g in groups.values()} == {"inferred"}
    assert groups["0"][0] == "default_pg" and {groups["1"][0], groups["2"][0]} == {"tp"}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_frontiers_match_the_dumps(scenario, fixture_db):
    want = frontier_by_hand(dumps_of(scenario))
    db = fixture_db(FIXTURES / scenario)
    got = {pg: {"seq": seq, "reached": reached, "missing": missing}
           for pg, seq, reached, missing in q(db, "SELECT pg_name, collective_seq_id, reached_ranks, missing_ranks "
                                                  "FROM fr_frontiers")}
    assert got == want["stopped"]
    absent = sorted({r for (ranks,) in q(db, "SELECT absent_ranks FROM fr_frontiers") for r in ranks})
    assert absent == want["culprits"]


# ---------------------------------------------------------------- findings, end to end


def _culprit_line(dumps: dict[int, dict], rank: int) -> str:
    name, line = user_line(dumps[rank]["entries"][-1])
    return f"{name}:{line}"


def test_skipped_all_reduce_names_the_rank_that_never_arrived(tmp_path):
    dumps = dumps_of("skipped_allreduce")
    hand = frontier_by_hand(dumps)
    assert hand["culprits"] == [2] and hand["stopped"]["0"]["seq"] == 7
    last = dumps[2]["entries"][-1]["collective_seq_id"]
    proc = cli(FIXTURES / "skipped_allreduce", "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert (f"rank 2 never joined all_reduce #7 of the default group; ranks 0, 1, 3 waited in it; "
            f"rank 2's last collective was all_reduce #{last}, called from {_culprit_line(dumps, 2)}") in text
    assert "Flight Recorder 4 dumps (ranks 0-3" in text


def test_a_tp_hang_names_the_tp_collective_not_the_world_wait(fixture_db):
    dumps = dumps_of("tp_hang")
    hand = frontier_by_hand(dumps)
    assert hand["culprits"] == [3]
    tp = next(pg for pg, s in hand["stopped"].items() if pg != "0")
    seq = hand["stopped"][tp]["seq"]
    a = traceanalyze.analyze(FIXTURES / "tp_hang", db=fixture_db(FIXTURES / "tp_hang"), progress=False)
    try:
        (finding,) = [f for f in a.findings if f.rule == "collective-hang"]
        assert finding.severity == "error" and list(finding.ranks) == [3]
        assert finding.evidence["pg_name"] == tp and finding.evidence["collective_seq_id"] == seq
        assert finding.evidence["first_waiting_ranks"] == hand["stopped"][tp]["reached"]
        assert finding.evidence["waiting_ranks"] == [0, 1, 2]
        assert finding.title.startswith(f"rank 3 never joined all_reduce #{seq} of group {tp} (tp); rank 2 waited in it")
        assert f"downstream, ranks 0, 1 waited in all_reduce #{hand['stopped']['0']['seq']} of the default group" \
            in finding.title
        assert _culprit_line(dumps, 3) in finding.title
        assert a.summary_dict["flight_recorder"]["frontiers"][0]["pg_name"] == tp
        assert not [f for f in a.findings if f.rule == "collective-mismatch"]
    finally:
        a.close()


def test_a_desync_names_the_odd_rank(tmp_path):
    dumps = dumps_of("desync_op")
    by_seq: dict[int, dict[int, str]] = {}
    for rank, dump in dumps.items():
        for e in dump["entries"]:
            by_seq.setdefault(e["collective_seq_id"], {})[rank] = e["profiling_name"]
    seq = min(s for s, ops in by_seq.items() if len(set(ops.values())) > 1)
    ops = by_seq[seq]
    odd = [r for r, op in ops.items() if list(ops.values()).count(op) == 1]
    proc = cli(FIXTURES / "desync_op", "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "collective-mismatch" in text
    assert f"rank {odd[0]} ran {ops[odd[0]].split(':')[1]}" in text
    assert f"as collective #{seq} of the default group" in text
    assert "collective-hang" not in text  # every rank reached #seq: a desync, not a hang


def test_a_healthy_run_has_no_error_and_passes_the_gate(tmp_path):
    assert frontier_by_hand(dumps_of("healthy"))["stopped"] == {}
    proc = cli("check", FIXTURES / "healthy", "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "collective-hang" not in proc.stdout and "collective-mismatch" not in proc.stdout


def test_a_hang_fails_the_gate(tmp_path):
    proc = cli("check", FIXTURES / "skipped_allreduce", "--out", tmp_path / "out")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "collective-hang" in proc.stdout


def test_dumps_beside_the_same_jobs_profiler_traces(fixture_db):
    """Both read: the profile's ranks and steps, and the hang from the dumps."""
    folder = FIXTURES / "hang_with_profile"
    with traceanalyze.analyze(folder, db=fixture_db(folder), progress=False) as a:
        summary = a.summary_dict
    assert [r["rank"] for r in summary["ranks"]] == [0, 1, 2, 3]
    assert summary["steps"]["aligned"]
    assert [d["rank"] for d in summary["flight_recorder"]["dumps"]] == [0, 1, 2, 3]
    (hang,) = [f for f in summary["findings"] if f["rule"] == "collective-hang"]
    assert hang["ranks"] == frontier_by_hand(dumps_of("hang_with_profile"))["culprits"] == [2]


def test_summary_with_dumps_satisfies_the_schema(fixture_db):
    import json

    import jsonschema

    schema = json.loads((ROOT / "traceanalyze" / "summary" / "summary.schema.json").read_text())
    with traceanalyze.analyze(FIXTURES / "tp_hang", db=fixture_db(FIXTURES / "tp_hang"), progress=False) as a:
        jsonschema.validate(a.summary_dict, schema)


# ---------------------------------------------------------------- hostile dumps


class _Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def one_line_error(proc, path: Path) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith("traceanalyze: ")]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: {path}: "), lines[0]
    return lines[0]


def test_a_crafted_dump_runs_nothing(tmp_path):
    folder = tmp_path / "hung"
    folder.mkdir()
    marker = tmp_path / "ran"
    crafted = folder / "nccl_trace_rank_0"
    crafted.write_bytes(pickle.dumps({"version": "2.10", "entries": [_Payload(marker)]}, protocol=2))
    shutil.copy(FIXTURES / "skipped_allreduce" / "nccl_trace_rank_1", folder / "nccl_trace_rank_1")
    line = one_line_error(cli(folder, "--out", tmp_path / "out"), crafted)
    assert "names a Python object" in line
    assert not marker.exists()
    with pytest.raises(TraceError) as info:
        traceanalyze.analyze(folder, progress=False)
    assert info.value.path == str(crafted)
    assert not marker.exists()
    # the standard unpickler would have run it: the test's payload is real
    pickle.loads(crafted.read_bytes())
    assert marker.exists()


@pytest.mark.parametrize("damage", ["truncated", "not-a-dump"])
def test_a_damaged_dump_is_a_one_line_error(damage, tmp_path):
    folder = tmp_path / "hung"
    shutil.copytree(FIXTURES / "skipped_allreduce", folder)
    bad = folder / "nccl_trace_rank_2"
    data = bad.read_bytes()
    bad.write_bytes(data[:len(data) // 2] if damage == "truncated"
                    else pickle.dumps(["version", "entries"], protocol=2))
    one_line_error(cli(folder, "--out", tmp_path / "out"), bad)


def test_a_dump_over_the_size_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(fr, "MAX_DUMP_BYTES", 100)
    with pytest.raises(TraceError) as info:
        fr.read_dump(FIXTURES / "skipped_allreduce" / "nccl_trace_rank_0")
    assert "limit" in info.value.problem


def test_two_dumps_of_one_rank_are_an_error(tmp_path):
    folder = tmp_path / "hung"
    shutil.copytree(FIXTURES / "skipped_allreduce", folder)
    shutil.copy(folder / "nccl_trace_rank_0", folder / "fr_dump_0.pkl")
    with pytest.raises(TraceError, match="two Flight Recorder dumps claim rank 0"):
        load_trace_dir(folder, tmp_path / "x.duckdb")


# ---------------------------------------------------------------- ingest, one rank at a time


def test_ingest_keeps_each_rank_dump_and_the_shard_set_names_the_culprit(tmp_path):
    shards = tmp_path / "shards"
    for trace in sorted((FIXTURES / "hang_with_profile").glob("rank*.pt.trace.json.gz")):
        assert cli("ingest", trace, "--shards", shards).returncode == 0
    for rank in range(4):
        proc = cli("ingest", FIXTURES / "hang_with_profile" / f"nccl_trace_rank_{rank}", "--shards", shards)
        assert proc.returncode == 0, proc.stderr
        assert f"rank {rank}: kept its Flight Recorder dump" in proc.stdout
    a = traceanalyze.analyze(None, shards=str(shards), progress=False)
    try:
        assert [r["rank"] for r in a.summary_dict["ranks"]] == [0, 1, 2, 3]
        (hang,) = [f for f in a.findings if f.rule == "collective-hang"]
        assert list(hang.ranks) == frontier_by_hand(dumps_of("hang_with_profile"))["culprits"]
    finally:
        a.close()


def test_ingest_of_a_crafted_dump_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    crafted = tmp_path / "nccl_trace_rank_5"
    crafted.write_bytes(pickle.dumps({"version": "2.10", "entries": [_Payload(marker)]}, protocol=2))
    one_line_error(cli("ingest", crafted, "--shards", tmp_path / "shards"), crafted)
    assert not marker.exists()
    assert not (tmp_path / "shards" / "flight_recorder" / crafted.name).exists()


# ---------------------------------------------------------------- other layouts of the format


def _nccl_entry(record_id: int, pg: tuple[str, str], seq: int, op: str, line: int, *, p2p: bool = False,
                state: str = "completed") -> dict:
    """An entry with the keys NCCL's dumps carry (version 2.x): states, times and p2p filled."""
    return {"record_id": record_id, "pg_id": int(pg[0]), "process_group": pg,
            "collective_seq_id": 0 if p2p else seq, "p2p_seq_id": seq if p2p else 0, "op_id": record_id + 1,
            "profiling_name": f"nccl:{op}", "time_created_ns": 1_000 + record_id,
            "time_discovered_started_ns": 2_000 + record_id if state != "scheduled" else None,
            "time_discovered_completed_ns": 3_000 + record_id if state == "completed" else None,
            "duration_ms": 1.5 if state == "completed" else None,
            "input_sizes": [[1024]], "input_dtypes": ["BFloat16"], "output_sizes": [[1024]],
            "output_dtypes": ["BFloat16"], "state": state, "retired": state == "completed",
            "timeout_ms": 600_000, "is_p2p": p2p,
            "frames": [{"name": op, "filename": "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py",
                        "line": 2000}, {"name": "forward", "filename": "/job/model.py", "line": line}]}


def _nccl_dump(entries: list[dict], groups: dict[str, list[int]]) -> bytes:
    return pickle.dumps({
        "version": "2.10", "comm_lib_version": "2.21.5", "entries": entries,
        "pg_config": {name: {"name": name, "desc": "default_pg" if name == "0" else "mesh_tp",
                             "ranks": str(ranks)} for name, ranks in groups.items()},
        "pg_status": {name: {"last_enqueued_collective": max([e["collective_seq_id"] for e in entries
                                                              if e["process_group"][0] == name] or [0]),
                             "last_started_collective": -1, "last_completed_collective": -1}
                      for name in groups}}, protocol=4)


def test_nccl_layout_members_come_from_pg_config(tmp_path):
    """NCCL fills pg_config: the TP group {2, 3}'s rank 3 never issued any of its collectives
    (no entry names the group on rank 3): it is still a member, and the culprit."""
    world, tp = ("0", "default_pg"), ("1", "mesh_tp")
    folder = tmp_path / "nccl"
    folder.mkdir()
    first = [_nccl_entry(0, world, 1, "all_reduce", 10), _nccl_entry(1, world, 2, "_allgather_base", 11),
             _nccl_entry(2, world, 1, "send 0->1", 12, p2p=True)]
    (folder / "nccl_trace_rank_0").write_bytes(_nccl_dump(first, {"0": [0, 1, 2, 3]}))
    received = first[:2] + [_nccl_entry(2, world, 1, "recv 1<-0", 12, p2p=True)]  # rank 0's send, received
    (folder / "nccl_trace_rank_1").write_bytes(_nccl_dump(received, {"0": [0, 1, 2, 3]}))
    stuck = first + [_nccl_entry(3, tp, 1, "all_reduce", 20, state="started")]
    (folder / "nccl_trace_rank_2").write_bytes(_nccl_dump(stuck, {"0": [0, 1, 2, 3], "1": [2, 3]}))
    (folder / "nccl_trace_rank_3").write_bytes(_nccl_dump(first, {"0": [0, 1, 2, 3], "1": [2, 3]}))
    db = tmp_path / "nccl.duckdb"
    load_trace_dir(folder, db)
    assert q(db, "SELECT pg_name, members, members_source FROM fr_groups ORDER BY pg_name") == \
        [("0", [0, 1, 2, 3], "pg_config"), ("1", [2, 3], "pg_config")]
    assert q(db, "SELECT op, p2p_src, p2p_dst, count(*) FROM fr_entries WHERE is_p2p AND p2p_seq_id = 1 "
                 "GROUP BY ALL ORDER BY op") == [("recv", 0, 1, 1), ("send", 0, 1, 3)]
    assert q(db, "SELECT state, time_started_ns FROM fr_entries WHERE rank = 2 AND pg_name = '1'") == [("started", 2_003)]
    assert q(db, "SELECT pg_name, collective_seq_id, reached_ranks, absent_ranks FROM fr_frontiers") == \
        [("1", 1, [2], [3])]
    a = traceanalyze.analyze(folder, progress=False)
    try:
        (hang,) = a.findings
        assert hang.rule == "collective-hang" and list(hang.ranks) == [3]
        assert hang.title.startswith("rank 3 never joined all_reduce #1 of group 1 (mesh_tp); rank 2 waited in it")
        assert "rank 3's last collective was _allgather_base #2 of the default group, called from model.py:11" \
            in hang.title
    finally:
        a.close()


def test_an_older_dump_numbers_one_sequence(tmp_path):
    """Before version 2.2 an entry had `seq_id` and `pg_id` but no collective_seq_id / process_group."""
    folder = tmp_path / "old"
    folder.mkdir()
    for rank, count in ((0, 3), (1, 2)):
        entries = [{"seq_id": seq, "pg_id": 0, "profiling_name": "nccl:all_reduce", "state": "scheduled",
                    "input_sizes": [[8]], "output_sizes": [[8]], "time_created_ns": seq,
                    "frames": [{"name": "step", "filename": "train.py", "line": 7}]}
                   for seq in range(1, count + 1)]
        (folder / f"trace_{rank}.pkl").write_bytes(pickle.dumps({"version": "1.5", "entries": entries,
                                                                 "pg_config": {}}, protocol=2))
    db = tmp_path / "old.duckdb"
    load_trace_dir(folder, db)
    assert q(db, "SELECT rank, pg_name, collective_seq_id FROM fr_entries ORDER BY rank, record_id") == \
        [(0, "0", 1), (0, "0", 2), (0, "0", 3), (1, "0", 1), (1, "0", 2)]
    assert q(db, "SELECT collective_seq_id, reached_ranks, absent_ranks FROM fr_frontiers") == [(3, [0], [1])]


def test_sizes_nested_too_deeply_are_a_one_line_error(tmp_path):
    folder = tmp_path / "deep"
    shutil.copytree(FIXTURES / "skipped_allreduce", folder)
    dump = pickle.loads((folder / "nccl_trace_rank_0").read_bytes())
    dump["entries"][0]["input_sizes"] = "NESTED"
    data = pickle.dumps(dump, protocol=2)
    placeholder = b"X" + len(b"NESTED").to_bytes(4, "little") + b"NESTED"  # BINUNICODE 'NESTED'
    assert data.count(placeholder) == 1
    depth = 100_000  # lists in lists: EMPTY_LIST pushed `depth` times, then APPENDed into each other
    bad = folder / "nccl_trace_rank_0"
    bad.write_bytes(data.replace(placeholder, b"]" * depth + b"a" * (depth - 1)))
    assert "nested too deeply" in one_line_error(cli(folder, "--out", tmp_path / "out"), bad)


def test_strings_from_a_dump_are_escaped_in_the_report_and_the_terminal(tmp_path):
    from tests.tracegen import flight_recorder_dump

    folder = tmp_path / "hung"
    folder.mkdir()
    desc = "<img src=x onerror=alert(1)>\x1b[31m"
    calls = [["1", desc, 1, "all_reduce", [[4]], 5], ["1", desc, 2, "all_reduce", [[4]], 5]]
    (folder / "nccl_trace_rank_0").write_bytes(flight_recorder_dump(calls))
    (folder / "nccl_trace_rank_1").write_bytes(flight_recorder_dump(calls[:1]))
    proc = cli(folder, "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert "rank 1 never joined all_reduce #2 of group 1" in " ".join(proc.stdout.split())
    assert "\x1b[31m" not in proc.stdout
    page = (tmp_path / "out" / "report.html").read_text()
    assert 'id="flight-recorder"' in page
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_recording_gets_the_finding_it_was_built_for(scenario, fixture_db):
    """expected.json `injected` (ground truth by construction in record_flight_recorder.py):
    exactly that Flight Recorder finding, or none."""
    import json

    injected = json.loads((FIXTURES / scenario / "expected.json").read_text())["injected"]
    a = traceanalyze.analyze(FIXTURES / scenario, db=fixture_db(FIXTURES / scenario), progress=False)
    try:
        got = [{"rule": f.rule, "ranks": list(f.ranks), "pg_name": f.evidence["pg_name"],
                "collective_seq_id": f.evidence["collective_seq_id"], "severity": f.severity}
               for f in a.findings if f.rule in ("collective-hang", "collective-mismatch")]
    finally:
        a.close()
    assert got == ([] if injected is None else [{**injected, "severity": "error"}])


def test_torchs_own_analyzer_agrees_on_the_nccl_layout(tmp_path):
    """fixtures/flight_recorder/nccl_layout (NCCL's layout, which torchfrtrace can read): its
    missing ranks and culprits, kept in torchfrtrace.txt, are ours."""
    import re

    folder = FIXTURES / "nccl_layout"
    text = (folder / "torchfrtrace.txt").read_text()
    blocks = re.split(r"\n(?=Collective sequence number|Not all ranks joining)", text.strip())
    theirs_missing, theirs_mismatch = set(), set()
    for block in blocks:
        seq = int(re.search(r"sequence number: (\d+)", block).group(1))
        group = re.search(r"group info: ([^:\n]+):", block).group(1)
        if (m := re.search(r"missing ranks: \{([\d, ]+)\}", block)):
            theirs_missing |= {(group, seq, int(r)) for r in m.group(1).split(",")}
        if (m := re.search(r"Culprit rank (\d+); Error type: COLLECTIVE_TYPE_MISMATCH", block)):
            theirs_mismatch.add((group, seq, int(m.group(1))))
    assert theirs_missing and theirs_mismatch  # the file says something to agree with
    a = traceanalyze.analyze(folder, progress=False)
    try:
        ours_missing = {(row["pg_name"], row["collective_seq_id"], r)
                        for row in a.summary_dict["flight_recorder"]["frontiers"] for r in row["missing_ranks"]}
        ours_mismatch = {(f.evidence["pg_name"], f.evidence["collective_seq_id"], r)
                         for f in a.findings if f.rule == "collective-mismatch" for r in f.ranks}
        (hang,) = [f for f in a.findings if f.rule == "collective-hang"]
    finally:
        a.close()
    assert ours_missing == theirs_missing
    assert ours_mismatch == theirs_mismatch
    assert {(hang.evidence["pg_name"], hang.evidence["collective_seq_id"], r) for r in hang.ranks} == theirs_missing


def test_odd_values_in_a_dump_are_kept_or_refused_in_one_line(tmp_path):
    """A line number beyond any file, a lone surrogate in a description, a pg_status key in other
    digits: loaded (replaced where they cannot be text), never a traceback."""
    folder = tmp_path / "odd"
    shutil.copytree(FIXTURES / "skipped_allreduce", folder)
    dump = pickle.loads((folder / "nccl_trace_rank_0").read_bytes())
    dump["entries"][0]["frames"][2]["line"] = 2 ** 40
    dump["entries"][1]["process_group"] = ("0", "default\udc80pg")
    dump["pg_status"]["\u00b2"] = {"last_enqueued_collective": 1}
    (folder / "nccl_trace_rank_0").write_bytes(pickle.dumps(dump, protocol=2))
    db = tmp_path / "odd.duckdb"
    load_trace_dir(folder, db)
    assert q(db, "SELECT frame_line FROM fr_entries WHERE rank = 0 AND record_id = 0") == [(2 ** 40,)]
    assert q(db, "SELECT pg_desc FROM fr_entries WHERE rank = 0 AND record_id = 1") == [("default?pg",)]
    assert q(db, "SELECT count(*) FROM fr_status WHERE rank = 0 AND pg_id IS NULL") == [(1,)]
