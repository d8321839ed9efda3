"""Process groups as data, point-to-point as communication, and the parallelism layout.

Expected values come from the traces themselves: pg_config and args read straight from the
JSON, the groups and threads of the synthetic specs below, and their timelines in ms.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import duckdb
import pytest

from tests.conftest import FIXTURES, REAL_TRACES
from tests.tracegen import write_trace_dir
from traceanalyze import analyze
from traceanalyze.load import load_trace_dir
from traceanalyze.load.pipelines import infer_pipelines

GROUPS_DP2_TP2 = [{"name": "0", "desc": "default_pg", "ranks": [0, 1, 2, 3]},
                  {"name": "1", "desc": "mesh_tp", "ranks": [0, 1]}, {"name": "2", "desc": "mesh_tp", "ranks": [2, 3]},
                  {"name": "3", "desc": "mesh_dp", "ranks": [0, 2]}, {"name": "4", "desc": "mesh_dp", "ranks": [1, 3]}]
ROOT_FIXTURES = FIXTURES.parent
TP_TID, DP_TID = 300, 400
TP_BYTES, DP_BYTES = 8192, 4096


def _dp_tp_timeline(tp_late_ms: float, dp_late_ms: float) -> list:
    """Two tensor-parallel all-reduces in forward (runloop thread 300), the data-parallel
    gradient all-reduce after backward (thread 400). Members of a group end a collective
    together: the later TP pair ends `tp_late_ms` later, the later DP pair `dp_late_ms` later."""
    return [["data", 0, 2], ["forward", 2, 17],
            ["all_reduce", 20, 4 + tp_late_ms, {"tid": TP_TID, "bytes": TP_BYTES, "call_ms": 19.9}],
            ["forward", 25, 10],
            ["all_reduce", 36, 3 + tp_late_ms, {"tid": TP_TID, "bytes": TP_BYTES, "call_ms": 35.9}],
            ["backward", 41, 28],
            ["all_reduce", 72, 10 + dp_late_ms, {"tid": DP_TID, "bytes": DP_BYTES, "call_ms": 71.9}],
            ["optimizer", 88, 4]]


DP2_TP2 = {"ranks": 4, "steps": 4, "step_ms": 100, "groups": GROUPS_DP2_TP2,
           "rank_timelines": {0: _dp_tp_timeline(0, 0), 1: _dp_tp_timeline(0, 0.3),
                              2: _dp_tp_timeline(0.4, 0), 3: _dp_tp_timeline(0.4, 0.3)}}


def _query(db: Path, sql: str, *params) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, list(params)).fetchall()
    finally:
        con.close()


def _load(spec: dict, tmp_path: Path) -> Path:
    folder = write_trace_dir(spec, tmp_path / "trace")
    db = tmp_path / "trace.duckdb"
    load_trace_dir(folder, db)
    return db


def _json(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


# --- 1. process groups as data ---------------------------------------------------------

def test_pg_configs_hold_every_ranks_distributed_info_groups():
    folder = FIXTURES / "fsdp_balanced"
    expected = []
    for path in sorted(folder.glob("*.json.gz")):
        info = _json(path)["distributedInfo"]
        for index, g in enumerate(info["pg_config"]):
            expected.append((info["rank"], g["pg_name"], g["pg_desc"], g["ranks"], g["pg_size"], g["backend_config"], index))
    assert expected  # the fixture lists groups
    with analyze(folder) as a:
        rows = a.connection().execute("SELECT * FROM pg_configs ORDER BY rank, config_index").fetchall()
        groups = a.connection().execute("SELECT process_group, pg_desc, ranks, size, dimension FROM process_groups").fetchall()
        sources = a.connection().execute("SELECT DISTINCT group_source FROM collectives").fetchall()
        layout = a.summary_dict["layout"]
    assert [(r, n, d, list(k), s, b, i) for r, n, d, k, s, b, i in rows] == sorted(expected)
    (name, desc, ranks, size) = {(g[1], g[2], tuple(g[3]), g[4]) for g in expected}.pop()
    # FSDP2 all-gathers parameters and reduce-scatters gradients in its one group: the fsdp dimension
    assert [(g[0], g[1], list(g[2]), g[3], g[4]) for g in groups] == [(name, desc, list(ranks), size, "fsdp")]
    assert sources == [("pg_config",)]  # the rank's only group: no inference needed
    assert layout["text"] == f"{size} ranks = FSDP {size}"
    assert layout["ranks"] == {str(r): {"FSDP": i} for i, r in enumerate(ranks)}


def test_nccl_collectives_carry_the_group_their_args_name():
    folder = REAL_TRACES / "hta-nccl-parser-config"
    events = _json(next(folder.glob("*.json.gz")))["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel" and "Process Group Name" in e.get("args", {})]
    assert kernels
    named = {(e["args"]["Process Group Name"], e["args"]["Process Group Description"],
              tuple(json.loads(e["args"]["Process Group Ranks"]))) for e in kernels}
    with analyze(folder) as a:
        rows = a.connection().execute("""
            SELECT DISTINCT process_group, pg_desc, group_ranks, group_source, kind FROM collectives""").fetchall()
        (n,) = a.connection().execute("SELECT count(*) FROM collectives").fetchone()
    assert {(g, d, tuple(r)) for g, d, r, _, _ in rows} == named
    assert {(s, k) for *_, s, k in rows} == {("trace", "collective")}
    assert n == len(kernels)


def test_gloo_groups_of_a_device_mesh_are_inferred_per_runloop_thread(tmp_path):
    db = _load(DP2_TP2, tmp_path)
    rows = _query(db, """SELECT rank, run_tid, process_group, pg_desc, group_ranks, group_source, count(*)
                         FROM collectives GROUP BY ALL ORDER BY rank, run_tid""")
    expected = []
    for rank in range(4):
        for tid, desc in ((TP_TID, "mesh_tp"), (DP_TID, "mesh_dp")):
            (g,) = [g for g in GROUPS_DP2_TP2 if g["desc"] == desc and rank in g["ranks"]]
            per_step = 2 if tid == TP_TID else 1
            expected.append((rank, str(tid), g["name"], desc, g["ranks"], "inferred", per_step * DP2_TP2["steps"]))
    assert rows == expected
    # members agree on the order of every collective of their group
    seqs = _query(db, """SELECT process_group, seq, count(DISTINCT rank), count(DISTINCT bytes) FROM collectives
                         GROUP BY ALL HAVING count(DISTINCT rank) <> 2 OR count(DISTINCT bytes) <> 1""")
    assert seqs == []
    issues = _query(db, "SELECT rank, kind, severity, count FROM load_issues WHERE kind LIKE 'group%' ORDER BY rank")
    assert issues == [(r, "group-inferred", "info", 3 * DP2_TP2["steps"]) for r in range(4)]


def test_a_group_without_a_description_is_told_by_its_ranks(tmp_path, cli):
    """Torch writes pg_desc 'undefined' for a group created without a description: no table
    holds it as a description and no text the user reads shows it; notes name such a group by
    its ranks."""
    spec = dict(DP2_TP2, groups=[{k: v for k, v in g.items() if k != "desc"} for g in GROUPS_DP2_TP2])
    folder = write_trace_dir(spec, tmp_path / "trace")
    descs = {g["pg_desc"] for p in folder.glob("rank*.json")
             for g in json.loads(p.read_text())["distributedInfo"]["pg_config"]}
    assert descs == {"undefined"}  # (as torch writes it)
    result = cli(folder, "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    db = tmp_path / "out" / "trace.duckdb"
    for table in ("pg_configs", "collectives", "process_groups"):
        assert _query(db, f"SELECT count(*) FROM {table} WHERE pg_desc IS NOT NULL") == [(0,)], table
    notes = dict(_query(db, "SELECT rank, message FROM load_issues WHERE kind = 'group-inferred'"))
    for rank in range(4):
        named = ", ".join(f"{g['name']} (ranks {','.join(map(str, g['ranks']))})" for g in GROUPS_DP2_TP2
                          if rank in g["ranks"] and len(g["ranks"]) == 2)
        assert f"assigned to groups {named} told apart" in notes[rank]
    shown = [result.stdout, result.stderr] + [p.read_text() for p in (tmp_path / "out").iterdir()
                                              if p.suffix in (".json", ".html", ".md", ".txt")]
    assert len(shown) >= 4 and not any("undefined" in text for text in shown)


def test_layout_of_a_device_mesh_reads_dp_by_tp(tmp_path):
    folder = write_trace_dir(DP2_TP2, tmp_path / "trace")
    with analyze(folder) as a:
        layout = a.summary_dict["layout"]
        groups = a.connection().execute(
            "SELECT process_group, dimension, dimension_source, in_forward FROM process_groups ORDER BY process_group").fetchall()
        text = a.verdict
    assert layout["text"] == "4 ranks = DP 2 x TP 2" and layout["complete"]
    coords = {str(r): {"DP": [g for g in GROUPS_DP2_TP2 if g["desc"] == "mesh_dp" and r in g["ranks"]][0]["ranks"].index(r),
                       "TP": [g for g in GROUPS_DP2_TP2 if g["desc"] == "mesh_tp" and r in g["ranks"]][0]["ranks"].index(r)}
              for r in range(4)}
    assert layout["ranks"] == coords
    steps = DP2_TP2["steps"]
    # the default group runs nothing; tensor-parallel groups run both all-reduces in forward
    assert groups == [("0", "world", "operations", 0), ("1", "tensor", "description", 2 * 2 * steps),
                      ("2", "tensor", "description", 2 * 2 * steps), ("3", "data", "description", 0),
                      ("4", "data", "description", 0)]
    assert "Parallelism  4 ranks = DP 2 x TP 2" in text


def test_layout_from_operations_when_descriptions_say_nothing(tmp_path):
    groups = [dict(g, desc="undefined") for g in GROUPS_DP2_TP2]
    spec = dict(DP2_TP2, groups=groups, ranks_as_text=True)
    folder = write_trace_dir(spec, tmp_path / "trace")
    assert isinstance(json.loads((folder / "rank0.json").read_text())["distributedInfo"]["pg_config"][0]["ranks"], str)
    with analyze(folder) as a:
        layout = a.summary_dict["layout"]
        dims = a.connection().execute(
            "SELECT process_group, dimension, dimension_source FROM process_groups ORDER BY process_group").fetchall()
    # all-reduces during forward in a 2-rank group: tensor; after backward: data
    assert dims == [("0", "world", "operations"), ("1", "tensor", "operations"), ("2", "tensor", "operations"),
                    ("3", "data", "operations"), ("4", "data", "operations")]
    assert layout["text"] == "4 ranks = DP 2 x TP 2"


def test_a_thread_no_group_partner_matches_stays_unknown_and_says_so(tmp_path):
    timelines = dict(DP2_TP2["rank_timelines"])
    # rank 3's data-parallel all-reduce has a size no rank of its groups runs
    timelines[3] = [item if item[0] != "all_reduce" or item[3]["tid"] != DP_TID
                    else [*item[:3], dict(item[3], bytes=12345 * 4)] for item in timelines[3]]
    timelines[1] = [item if item[0] != "all_reduce" or item[3]["tid"] != DP_TID
                    else [*item[:3], dict(item[3], bytes=23456 * 4)] for item in timelines[1]]
    db = _load(dict(DP2_TP2, rank_timelines=timelines), tmp_path)
    unknown = _query(db, "SELECT rank, process_group, group_source, count(*) FROM collectives "
                         "WHERE group_source <> 'inferred' GROUP BY ALL ORDER BY rank")
    # the fallback is the rank's largest group, the default one
    assert unknown == [(1, "0", "unknown", DP2_TP2["steps"]), (3, "0", "unknown", DP2_TP2["steps"])]
    issues = _query(db, "SELECT rank, severity, count FROM load_issues WHERE kind = 'group-not-inferred' ORDER BY rank")
    assert issues == [(1, "warning", DP2_TP2["steps"]), (3, "warning", DP2_TP2["steps"])]


# --- 2. point-to-point is communication --------------------------------------------------

PP_GROUPS = [{"name": "0", "desc": "default_pg", "ranks": [0, 1]}]
SEND_MS, RECV_MS = 6.0, 9.0


def _pp_spec() -> dict:
    """Stage 0 computes and sends activations to stage 1; stage 1 waits for them (recv), computes."""
    stage0 = [["data", 0, 2], ["forward", 2, 40], ["send", 43, SEND_MS, {"peer": 1, "bytes": 65536}],
              ["backward", 55, 30]]
    stage1 = [["recv", 1, RECV_MS + 40, {"peer": 0, "bytes": 65536}], ["forward", 51, 10], ["backward", 62, 30]]
    return {"ranks": 2, "steps": 3, "step_ms": 100, "groups": PP_GROUPS, "rank_timelines": {0: stage0, 1: stage1}}


def test_send_and_recv_are_p2p_rows_with_their_peer(tmp_path):
    db = _load(_pp_spec(), tmp_path)
    rows = _query(db, "SELECT rank, op, kind, peer, bytes, count(*) FROM collectives GROUP BY ALL ORDER BY rank")
    assert rows == [(0, "send", "p2p", 1, 65536, 3), (1, "recv", "p2p", 0, 65536, 3)]
    assert _query(db, "SELECT count(*) FROM collective_arrivals") == [(0,)]  # not a group collective


def test_time_blocked_in_send_and_recv_is_pipeline_wait(tmp_path):
    spec = _pp_spec()
    db = _load(spec, tmp_path)
    phases = _query(db, "SELECT rank, step, pipeline_wait_ns, comm_exposed_ns FROM step_phases ORDER BY rank, step")
    # the c10d::send / c10d::recv_ op spans the whole call: the send's 6 ms, the recv's 49 ms
    want = {0: SEND_MS, 1: RECV_MS + 40}
    assert [(r, s, p / 1e6, c) for r, s, p, c in phases] == [
        (r, 2 + i, want[r], 0) for r in (0, 1) for i in range(spec["steps"])]
    with analyze(write_trace_dir(spec, tmp_path / "again")) as a:
        summary = a.summary_dict
        text = a.verdict
    assert {r["rank"]: r["metrics"]["phases_ms"]["pipeline_wait"] for r in summary["ranks"]} == pytest.approx(want)
    assert "pipe = blocked on a send / recv" in text


def test_a_job_without_send_recv_shows_no_pipeline_column(tmp_path):
    folder = write_trace_dir(DP2_TP2, tmp_path / "trace")
    with analyze(folder) as a:
        assert all(r["metrics"]["phases_ms"]["pipeline_wait"] == 0 for r in a.summary_dict["ranks"])
        assert "pipe" not in a.verdict.split("Phases (mean ms)")[1].splitlines()[0]


def test_nccl_p2p_args_give_the_peer_through_the_groups_ranks_and_seq(tmp_path):
    """Newer NCCL traces: record_param_comms of a send names the group, its ranks, the
    destination as a rank of the group ('Dst Rank') and the group's sequence number ('Seq')."""
    def comms(name, peer_key, peer, seq):
        return ["event", 10, 2, {"name": "record_param_comms", "args": {
            "Collective name": name, "Process Group Name": "5", "Process Group Description": "mesh_pp",
            "Process Group Ranks": "[0, 2]", "Group size": 2, "In msg nelems": 1024, "Out msg nelems": 1024,
            "dtype": "Float", peer_key: peer, "Seq": seq}}]
    spec = {"ranks": 4, "steps": 2, "step_ms": 50, "loaded_ranks": [0, 2], "world_size": 4,
            "rank_timelines": {0: [["forward", 0, 8], comms("send", "Dst Rank", 1, 7)],
                               2: [comms("recv", "Src Rank", 0, 7), ["forward", 14, 8]]}}
    db = _load(spec, tmp_path)
    rows = _query(db, """SELECT rank, op, kind, process_group, pg_desc, group_ranks, group_source, peer_group_rank,
                                peer, trace_seq, bytes FROM collectives ORDER BY rank, ts_ns""")
    # 'Dst Rank' 1 of group [0, 2] is global rank 2; 'Src Rank' 0 is global rank 0
    assert rows == [(0, "send", "p2p", "5", "mesh_pp", [0, 2], "trace", 1, 2, 7, 4096)] * 2 + \
                   [(2, "recv", "p2p", "5", "mesh_pp", [0, 2], "trace", 0, 0, 7, 4096)] * 2
    groups = _query(db, "SELECT process_group, ranks, dimension, p2p FROM process_groups")
    assert groups == [("5", [0, 2], "pipeline", 4)]


def test_collectives_with_seq_are_matched_by_it_not_by_order(tmp_path):
    """Rank 0's trace lacks the all-reduce with Seq 3 that rank 1 recorded: matched by order,
    rank 0's Seq 4 would meet rank 1's Seq 3; matched by Seq it meets rank 1's Seq 4."""
    def allreduce(start_ms, seq):
        return ["event", start_ms, 2, {"name": "record_param_comms", "args": {
            "Collective name": "allreduce", "Process Group Name": "0", "Process Group Ranks": "[0, 1]",
            "Group size": 2, "In msg nelems": 256, "dtype": "Float", "Seq": seq}}]
    spec = {"ranks": 2, "steps": 2, "step_ms": 50,
            "rank_timelines": {0: [["forward", 0, 20], allreduce(30, 4)],
                               1: [["forward", 0, 5], allreduce(10, 3), allreduce(25, 4)]}}
    db = _load(spec, tmp_path)
    rows = _query(db, """SELECT step, rank, op_index, arrival_rel_ns, late_ns FROM collective_arrivals
                         ORDER BY step, rank""")
    # Seq 4: rank 0 arrives at 30 ms, rank 1 at 25 ms; the lower median is 25 ms
    assert rows == [(s, r, 4, at * 1_000_000, late * 1_000_000) for s in (2, 3) for r, at, late in ((0, 30, 5), (1, 25, 0))]


def _pipeline_recordings() -> list[Path]:
    """Recorded jobs with a pipeline whose sends name their peers (record_shapes on): the matrix
    cells (fixtures/parallel_matrix/expected.json) and the pipeline scenarios of fixtures/parallel."""
    matrix = ROOT_FIXTURES / "parallel_matrix"
    cells = json.loads((matrix / "expected.json").read_text())["cells"]
    out = [matrix / c["dir"] for _, c in sorted(cells.items()) if c["pipelines"] and c["knobs"]["record_shapes"]]
    for folder in sorted((ROOT_FIXTURES / "parallel").iterdir()):
        expected = json.loads((folder / "expected.json").read_text())
        if expected["layout"]["mesh"].get("pp", 1) >= 2:
            out.append(folder)
    return out


def _pipelines_of(con) -> list[tuple[int, ...]]:
    infer_pipelines(con)
    return sorted(tuple(r) for (r,) in con.execute("SELECT DISTINCT pipeline_ranks FROM _pipeline_order").fetchall())


@pytest.mark.parametrize("folder", _pipeline_recordings(), ids=lambda p: p.name)
def test_pipelines_matched_by_time_are_those_the_peers_name(folder, tmp_path):
    """The same recording with its peers hidden (a trace recorded without record_shapes names
    none): the recvs matched to sends by time give the pipelines the named peers give."""
    db = tmp_path / "trace.duckdb"
    load_trace_dir(folder, db)
    con = duckdb.connect()
    try:
        con.execute("ATTACH ? AS recorded (READ_ONLY)", [str(db)])
        con.execute("CREATE TABLE steps AS SELECT * FROM recorded.steps")
        con.execute("CREATE TABLE collectives AS SELECT * FROM recorded.collectives")
        con.execute("DETACH recorded")
        (named,) = con.execute("SELECT count(*) FROM collectives WHERE kind = 'p2p' AND op = 'send' "
                               "AND peer IS NOT NULL").fetchone()
        assert named > 0   # (the recording names them: the truth to compare with)
        by_peers = _pipelines_of(con)
        assert by_peers and all(len(p) >= 2 for p in by_peers)
        con.execute("UPDATE collectives SET peer = NULL, peer_group_rank = NULL")
        assert _pipelines_of(con) == by_peers
    finally:
        con.close()


def test_pipelines_and_rings_do_not_depend_on_row_order():
    """Random send / recv rows (peers and sizes often unknown, times tied, zero-length ranges):
    the same rows in another order give the same pipelines and rings, and never an error."""
    import random

    rng = random.Random(7)
    found = 0
    con = duckdb.connect()
    try:
        con.execute("CREATE TABLE collectives (rank INTEGER, op VARCHAR, peer INTEGER, bytes BIGINT, step BIGINT, "
                    "ts_ns BIGINT, end_ns BIGINT, kind VARCHAR)")
        con.execute("CREATE TABLE steps (rank INTEGER, step BIGINT, ts_ns BIGINT, end_ns BIGINT)")
        for _ in range(60):
            rows = [(rng.randint(0, 5), rng.choice(["send", "recv"]), rng.choice([None, None, rng.randint(-2, 7)]),
                     rng.choice([None, 4, 8]), rng.choice([1, 2, 3]), ts,
                     ts + rng.choice([0, 1, 5_000_000, rng.randint(0, 10**8)]))
                    for ts in (rng.choice([0, 10, 1_000_000, rng.randint(0, 10**9)]) for _ in range(rng.randint(0, 60)))]
            answers = []
            for order in (rows, rng.sample(rows, len(rows))):
                con.execute("DELETE FROM collectives")
                if order:   # (one statement: executemany runs one per row)
                    con.execute("INSERT INTO collectives VALUES "
                                + ", ".join(["(?, ?, ?, ?, ?, ?, ?, 'p2p')"] * len(order)), [v for r in order for v in r])
                infer_pipelines(con)
                answers.append((con.execute("SELECT * FROM _pipeline_order ORDER BY ALL").fetchall(),
                                con.execute("SELECT * FROM _context_rings ORDER BY ALL").fetchall()))
            assert answers[0] == answers[1]
            found += bool(answers[0][0] or answers[0][1])
    finally:
        con.close()
    assert found > 0   # (some of the random rows do form pipelines or rings: the comparison is not of empties)


def test_thread_pools_put_a_larger_groups_collectives_back_in_it():
    """gloo runs each group's collectives on its own two runloop threads, started in the order
    the groups were created. Scores by time (how near the members' ends are) that put the world
    group's two threads in its subgroups (three threads in one group) are redone in thread order;
    decisions that fit the pools, or thread ids that are not numbers, stay as they are."""
    from traceanalyze.load.groups import _fit_thread_pools

    groups = {0: [("0", [0, 1, 2, 3], 0), ("1", [0, 2], 1), ("3", [0, 1], 3)]}
    # (rank 0's threads: the world's two, then the EP group's, then the DP group's)
    scores = {(0, "101"): {"0": 1726.0, "1": 1726.0, "3": 91.0}, (0, "102"): {"0": 115.0, "1": 63.0, "3": 87.0},
              (0, "201"): {"0": 3967.0, "1": 71.0, "3": 3036.0}, (0, "202"): {"0": 2215.0, "1": 86.0, "3": 382.0},
              (0, "301"): {"0": 953.0, "1": 953.0, "3": 131.0}, (0, "302"): {"0": 4392.0, "1": 2994.0, "3": 73.0}}
    by_time = {unit: min(fit, key=fit.get) for unit, fit in scores.items()}
    assert sorted(by_time.values()) == ["1", "1", "1", "3", "3", "3"]  # (the world's threads lost in its subgroups)
    decided = dict(by_time)
    _fit_thread_pools(decided, scores, groups)
    assert decided == {(0, "101"): "0", (0, "102"): "0", (0, "201"): "1", (0, "202"): "1",
                       (0, "301"): "3", (0, "302"): "3"}
    fits = {(0, "101"): "3", (0, "201"): "1", (0, "202"): "1", (0, "301"): "3"}  # (two threads at most per group)
    unchanged = dict(fits)
    _fit_thread_pools(unchanged, scores, groups)
    assert unchanged == fits
    named = {(0, f"t{tid}"): g for (_, tid), g in by_time.items()}
    kept = dict(named)
    _fit_thread_pools(kept, {(0, f"t{tid}"): fit for (_, tid), fit in scores.items()}, groups)
    assert kept == named


def test_send_and_recv_without_a_peer_are_a_note_not_a_warning(tmp_path):
    """A recorded PP x DP job over a device mesh without record_shapes (gloo names no peer): the
    send / recv rows' group is not known. They are never compared as group collectives (the
    pipelines pair them by time), so the load says so in a note, one per rank counting its
    send / recv events, and warns of nothing."""
    folder = ROOT_FIXTURES / "parallel_matrix" / "pp2dp2_mesh_lib_1f1b_ddp_stagework_r1"
    p2p = {}
    for path in folder.glob("*.pt.trace.json.gz"):
        doc = _json(path)
        p2p[doc["distributedInfo"]["rank"]] = sum(e.get("name") in ("gloo:send", "gloo:recv")
                                                  for e in doc["traceEvents"])
    assert sorted(p2p) == [0, 1, 2, 3] and min(p2p.values()) > 0
    db = tmp_path / "t.duckdb"
    load_trace_dir(folder, db)
    assert _query(db, "SELECT count(*) FROM collectives WHERE kind = 'p2p' AND group_source = 'unknown'") == [
        (sum(p2p.values()),)]
    issues = _query(db, "SELECT rank, kind, severity, count FROM load_issues WHERE kind LIKE '%not-inferred' ORDER BY rank")
    assert issues == [(r, "p2p-group-not-inferred", "info", p2p[r]) for r in range(4)]
