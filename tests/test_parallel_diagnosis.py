"""The recorded multi-group gloo jobs (fixtures/parallel/): groups, layout, p2p and culprits.

Expected values come from each scenario's expected.json (the device mesh the recorder built:
every rank's coordinates and groups, the injected rank) and from the trace JSON itself.
"""

from __future__ import annotations

import functools
import gzip
import json

import pytest

from tests.conftest import ROOT

PARALLEL = ROOT / "fixtures" / "parallel"
SCENARIOS = sorted(p.name for p in PARALLEL.iterdir() if (p / "expected.json").exists())
MESH_NAMES = {"pp": "pipeline", "dp": "data", "tp": "tensor", "ep": "expert", "replicate": "data", "shard": "fsdp"}
ABBREV = {"pipeline": "PP", "data": "DP", "fsdp": "FSDP", "tensor": "TP", "expert": "EP"}
ORDER = ("pipeline", "data", "fsdp", "expert", "tensor")


def _expected(scenario: str) -> dict:
    return json.loads((PARALLEL / scenario / "expected.json").read_text(encoding="utf-8"))


def _events(scenario: str) -> dict[int, list[dict]]:
    out = {}
    for path in sorted((PARALLEL / scenario).glob("*.json.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            data = json.load(f)
        out[data["distributedInfo"]["rank"]] = data["traceEvents"]
    return out


@functools.cache
def _reduce_scatters(scenario: str) -> bool:
    """Some rank of the job reduce-scatters (read once per scenario: every trace is parsed)."""
    return any(e.get("name") == "c10d::_reduce_scatter_base_" for events in _events(scenario).values() for e in events)


def _dimension(scenario: str, mesh_name: str) -> str:
    """The dimension a mesh dim carries: dp reduce-scattering gradients (FSDP2) is fsdp (HSDP
    names its dims: 'replicate' all-reduces, 'shard' reduce-scatters)."""
    name = MESH_NAMES[mesh_name]
    if mesh_name == "dp" and _reduce_scatters(scenario):
        return "fsdp"
    return name


@pytest.fixture(scope="module")
def analysed(fixture_db):
    from traceanalyze import analyze

    cache: dict[str, tuple] = {}

    def get(scenario: str):
        if scenario not in cache:
            with analyze(PARALLEL / scenario, db=fixture_db(PARALLEL / scenario)) as a:
                rows = a.connection().execute("""
                    SELECT rank, kind, op, group_ranks, group_source, peer FROM collectives""").fetchall()
                cache[scenario] = (a.summary_dict, rows)
        return cache[scenario]

    return get


def test_the_recorded_parallel_scenarios_are_there():
    assert {"dp2_tp2_tp_straggler", "dp2_tp2_balanced", "pp2_dp2_unbalanced", "pp2_bubble",
            "fsdp2_annotated_input_straggler", "ep_all_to_all", "pp2_dp2_tp2_3d"} <= set(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_layout_is_the_device_mesh_the_job_built(scenario, analysed):
    expected = _expected(scenario)
    mesh = expected["layout"]["mesh"]
    dims = sorted(((_dimension(scenario, name), size) for name, size in mesh.items()), key=lambda d: ORDER.index(d[0]))
    summary, _ = analysed(scenario)
    layout = summary["layout"]
    world = expected["world_size"]
    assert layout["text"] == f"{world} ranks = " + " x ".join(f"{ABBREV[d]} {n}" for d, n in dims)
    assert layout["complete"]
    assert layout["ranks"] == {
        r: {ABBREV[_dimension(scenario, name)]: index for name, index in info["coords"].items()}
        for r, info in expected["layout"]["ranks"].items()}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_collective_and_transfer_is_in_one_of_its_ranks_groups(scenario, analysed):
    expected = _expected(scenario)["layout"]["ranks"]
    _, rows = analysed(scenario)
    assert rows
    for rank, kind, op, group_ranks, source, peer in rows:
        mine = expected[str(rank)]["groups"]
        assert source != "unknown", (rank, op)
        assert list(group_ranks) in mine.values(), (rank, op, group_ranks)
        if kind == "p2p":   # pipeline stages hand over between the ranks of a pipeline group
            assert list(group_ranks) == mine["pp"] and peer in mine["pp"] and peer != rank, (rank, op, peer)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_send_and_recv_counts_per_peer_match_the_trace(scenario, analysed):
    events = _events(scenario)
    want = {}
    for rank, evs in events.items():
        for e in evs:
            if e.get("name") in ("gloo:send", "gloo:recv") and e.get("ph") == "X":
                want[(rank, e["name"][5:])] = want.get((rank, e["name"][5:]), 0) + 1
    _, rows = analysed(scenario)
    got = {}
    for rank, kind, op, *_ in rows:
        if kind == "p2p":
            got[(rank, op)] = got.get((rank, op), 0) + 1
    assert got == want


@pytest.mark.parametrize("scenario", ["dp2_tp2_tp_straggler", "pp2_dp2_tp2_3d"])
def test_the_tp_straggler_is_named_alone_with_its_tensor_group(scenario, analysed):
    injected = _expected(scenario)["injected"]
    groups = _expected(scenario)["layout"]["ranks"][str(injected["rank"])]["groups"]
    summary, _ = analysed(scenario)
    culprits = [f for f in summary["findings"] if f["rule"] in ("collective-straggler", "intermittent-straggler")]
    assert len(culprits) == 1
    (f,) = culprits
    # the rank that waited for it at a data-parallel all-reduce or a pipeline recv is a victim, not named
    assert f["rule"] == "collective-straggler" and f["ranks"] == [injected["rank"]]
    assert f["evidence"]["cause"] == injected["cause"]
    group = f["evidence"]["group"]
    assert (group["ranks"], group["dimension"]) == (groups["tp"], "tensor")
    partner = [r for r in groups["tp"] if r != injected["rank"]]
    waits = {w["dimension"]: w["waiting_ranks"] for w in f["evidence"]["waiting_by_group"]}
    assert waits["tensor"] == partner


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if "replicate" in _expected(s)["layout"]["mesh"]])
def test_hsdp_all_reduces_are_in_the_replicate_group(scenario, analysed):
    """HSDP all-reduces gradients across the replicas only: each c10d::allreduce_ of a rank is in
    its replicate group, however close in time another group's all_reduce ends (in this
    recording ranks 2 and 3's replicate and shard all_reduces end within 0.4 ms: the counts
    decide), and the input straggler keeps every other rank waiting, not only its shard peer."""
    expected = _expected(scenario)
    events, (summary, rows) = _events(scenario), analysed(scenario)
    steps = set(expected["params"]["profiler"]["recorded_steps"])
    for rank, evs in events.items():
        spans = [(e["ts"], e["ts"] + e["dur"]) for e in evs if e.get("name") in steps and e.get("ph") == "X"]
        want = sum(1 for e in evs if e.get("name") == "c10d::allreduce_" and e.get("ph") == "X"
                   and any(a <= e["ts"] < b for a, b in spans))
        replicate = expected["layout"]["ranks"][str(rank)]["groups"]["replicate"]
        got = {}
        for r, kind, op, group_ranks, *_ in rows:
            if r == rank and op == "all_reduce":
                got[tuple(group_ranks)] = got.get(tuple(group_ranks), 0) + 1
        assert want > 0 and got == {tuple(replicate): want}, (rank, got, want)
    late = expected["injected"]["rank"]
    (f,) = [f for f in summary["findings"] if f["rule"] == "collective-straggler"]
    assert f["ranks"] == [late]
    assert f["evidence"]["waiting_ranks"] == [r for r in sorted(events) if r != late]


def test_pipeline_bubble_shows_as_pipeline_wait(analysed):
    """Each stage's blocking recvs (gloo:recv on the training thread, nothing else runs in them)
    are pipeline_wait; the phase is at least their length and at most that plus the sends and
    the c10d::send / recv_ calls around them (the union is at most the sum)."""
    events = _events("pp2_bubble")
    summary, _ = analysed("pp2_bubble")
    aligned = summary["steps"]["aligned"]
    for rank, evs in events.items():
        steps = {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in evs
                 if e.get("name", "").startswith("ProfilerStep#") and e.get("cat") == "user_annotation"}

        def clipped(name):
            total = 0.0
            for e in evs:
                if e.get("name") == name and e.get("ph") == "X":
                    for s in aligned:
                        lo, hi = steps[s]
                        total += max(0.0, min(hi, e["ts"] + e["dur"]) - max(lo, e["ts"]))
            return total / 1000 / len(aligned)

        recv_ms = clipped("gloo:recv")
        calls_ms = clipped("gloo:send") + clipped("c10d::send") + clipped("c10d::recv_")
        assert recv_ms > 0
        (metrics,) = [r["metrics"] for r in summary["ranks"] if r["rank"] == rank]
        wait = metrics["phases_ms"]["pipeline_wait"]
        rounding = 0.001  # (summary ms have 3 decimals)
        assert recv_ms - rounding <= wait <= recv_ms + calls_ms + rounding, (rank, wait, recv_ms, calls_ms)


def test_pipeline_bubble_with_one_microbatch(analysed):
    expected = _expected("pp2_bubble")
    stages, micro = expected["injected"]["stages"], expected["injected"]["microbatches"]
    summary, _ = analysed("pp2_bubble")
    (f,) = [f for f in summary["findings"] if f["rule"] == "pipeline-bubble"]
    assert f["ranks"] == list(range(expected["world_size"]))   # every stage waits
    assert (f["evidence"]["stages"], f["evidence"]["microbatches"]) == (stages, micro)
    assert f["evidence"]["ideal_bubble_pct"] == pytest.approx(100 * (stages - 1) / (micro + stages - 1))
    # the cost is the median rank's mean pipeline_wait per step, at most the schedule's own share of the step
    waits = sorted(r["metrics"]["phases_ms"]["pipeline_wait"] for r in summary["ranks"])
    schedule_ms = f["evidence"]["ideal_bubble_pct"] / 100 * f["evidence"]["median_step_ms"]
    assert f["cost"]["ms_per_step"] == pytest.approx(min((waits[0] + waits[1]) / 2, schedule_ms), abs=0.01)


def test_slow_pipeline_stage_is_the_root_cause_of_the_bubble(analysed):
    expected = _expected("pp2_dp2_unbalanced")
    slow = expected["injected"]["slow_stage"]
    slow_ranks = sorted(int(r) for r, info in expected["layout"]["ranks"].items() if info["coords"]["pp"] == slow)
    summary, _ = analysed("pp2_dp2_unbalanced")
    (f,) = [f for f in summary["findings"] if f["rule"] == "pipeline-stage-imbalance"]
    assert f["ranks"] == slow_ranks and f["evidence"]["slow_stage"] == slow
    # the waits it causes are no bubble of their own: one finding per root cause (folded into it, or
    # not reported at all where the schedule's own bubble is below pipeline-bubble's threshold)
    assert not [g for g in summary["findings"] if g["rule"] == "pipeline-bubble"]


@pytest.mark.parametrize("scenario", ["dp2_tp2_balanced", "dp2_tp2_tp_straggler", "ep_all_to_all",
                                      "fsdp2_annotated_input_straggler"])
def test_no_pipeline_finding_without_a_pipeline(scenario, analysed):
    summary, _ = analysed(scenario)
    assert not [f for f in summary["findings"] if f["rule"].startswith("pipeline-")]
    assert all(r["metrics"]["phases_ms"]["pipeline_wait"] == 0 for r in summary["ranks"])
