"""What the real multi-group fixtures (fixtures/parallel/, recorded by fixtures/record_parallel.py
with torch 2.13 on gloo) hold, read with the stdlib only: the facts the process-group analysis
relies on, each derived from the trace JSON and compared with what the recording ran
(expected.json's layout and params), never with numbers from traceanalyze.

- every rank's `distributedInfo.pg_config` lists the groups of its layout (ranks, size, the
  mesh dimension's `pg_desc`), and a group has the same `pg_name` on all its members;
- each process group owns its own gloo runloop threads (a thread never carries two groups'
  collectives), so runloop threads can be assigned to groups;
- point-to-point transfers are `gloo:send` / `gloo:recv` on the calling thread, micro-batches x
  steps of them, the peer's rank *in the group* in the preceding `c10d::send` / `c10d::recv_`, and
  the k-th send of one rank to a peer matches the peer's k-th recv from it in shape;
- all_to_all_single's split sizes are in `c10d::alltoall_base_`'s `Concrete Inputs` and agree
  across ranks;
- the injected region exists on the culprit rank only, once per step, and lasts the delay.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

import pytest

from tests.tracejson import args, complete, read_trace

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "parallel"
SCENARIOS = sorted(p.name for p in FIXTURES.iterdir() if (p / "expected.json").exists())
PP_SCENARIOS = [s for s in SCENARIOS if "pp" in json.loads(
    (FIXTURES / s / "expected.json").read_text())["layout"]["mesh"]]


def expected_of(scenario: str) -> dict:
    return json.loads((FIXTURES / scenario / "expected.json").read_text())


_CACHE: dict[str, dict[int, tuple[dict, list[dict]]]] = {}


def traces(scenario: str) -> dict[int, tuple[dict, list[dict]]]:
    """{rank: (top-level object, events)} of a scenario, the rank read from distributedInfo."""
    if scenario not in _CACHE:
        out = {}
        for f in sorted((FIXTURES / scenario).glob("rank*.pt.trace.json.gz")):
            top, events = read_trace(f)
            out[top["distributedInfo"]["rank"]] = (top, events)
        _CACHE[scenario] = out
    return _CACHE[scenario]


def main_tid(events: list[dict]):
    tids = {e["tid"] for e in events if complete(e) and str(e["name"]).startswith("ProfilerStep#")}
    assert len(tids) == 1
    return tids.pop()


def profiler_steps(events: list[dict]) -> list[dict]:
    return sorted((e for e in events if complete(e) and str(e["name"]).startswith("ProfilerStep#")),
                  key=lambda e: e["ts"])


def on_main(events: list[dict]) -> list[dict]:
    tid = main_tid(events)
    return sorted((e for e in events if complete(e) and e["tid"] == tid), key=lambda e: e["ts"])


def runloop_collectives(events: list[dict]) -> list[dict]:
    tid = main_tid(events)
    return [e for e in events if complete(e) and str(e["name"]).startswith("gloo:")
            and e["tid"] != tid]


def expected_pg_desc(exp: dict, rank: int, dim: str) -> str:
    """The pg_desc the recording gave the group of `dim` (record_parallel.py's conventions)."""
    lay = exp["layout"]
    how = lay["groups_from"]
    if how.startswith("init_device_mesh"):
        return f"mesh_{dim}"
    if how.startswith("dist.new_group"):
        coords = lay["ranks"][str(rank)]["coords"]
        return f"pp_stage_pair_{coords['dp']}" if dim == "pp" else f"dp_stage_{coords['pp']}"
    return "default_pg"


# ----------------------------------------------------------------------------------------------
# Layout: distributedInfo


def test_every_scenario_is_recorded():
    assert set(SCENARIOS) == {"dp2_tp2_tp_straggler", "dp2_tp2_balanced", "pp2_dp2_unbalanced",
                              "pp2_bubble", "fsdp2_annotated_input_straggler", "ep_all_to_all",
                              "pp2_dp2_tp2_3d", "hsdp3x2_input_straggler"}
    for s in SCENARIOS:
        exp = expected_of(s)
        assert sorted(traces(s)) == list(range(exp["world_size"])), s


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_pg_config_lists_the_layout_groups(scenario):
    exp = expected_of(scenario)
    ws = exp["world_size"]
    for rank, (top, _) in traces(scenario).items():
        info = top["distributedInfo"]
        assert (info["backend"], info["rank"], info["world_size"]) == ("gloo", rank, ws)
        by_ranks = {tuple(g["ranks"]): g for g in info["pg_config"]}
        # the default group is always there, with every rank
        assert [g["pg_desc"] for g in info["pg_config"]].count("default_pg") == 1
        assert by_ranks[tuple(range(ws))]["pg_size"] == ws
        for dim, members in exp["layout"]["ranks"][str(rank)]["groups"].items():
            assert rank in members
            g = by_ranks[tuple(members)]
            assert g["pg_size"] == len(members)
            if len(members) < ws:
                assert g["pg_desc"] == expected_pg_desc(exp, rank, dim), (rank, dim)
        # only the groups this rank belongs to are listed
        assert all(rank in g["ranks"] for g in info["pg_config"])
        assert len(info["pg_config"]) <= info["pg_count"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_group_has_one_pg_name_on_all_its_members(scenario):
    """pg_name is a global id (creation order), the same on every member rank: the key that
    joins one group's collectives across the ranks' traces."""
    names: dict[tuple, set] = defaultdict(set)
    seen_by: dict[tuple, set] = defaultdict(set)
    for rank, (top, _) in traces(scenario).items():
        for g in top["distributedInfo"]["pg_config"]:
            names[tuple(g["ranks"])].add(g["pg_name"])
            seen_by[tuple(g["ranks"])].add(rank)
    assert names
    for ranks, pg_names in names.items():
        assert len(pg_names) == 1, (ranks, pg_names)
        assert seen_by[ranks] == set(ranks)  # every member lists it
    # and different groups have different names
    flat = [n for pg_names in names.values() for n in pg_names]
    assert len(flat) == len(set(flat))


# ----------------------------------------------------------------------------------------------
# Collectives: one pair of runloop threads per group


@pytest.mark.parametrize("scenario", ["dp2_tp2_tp_straggler", "dp2_tp2_balanced"])
def test_tp_and_dp_collectives_run_on_separate_runloop_threads(scenario):
    """TP all_reduces carry activations ([batch, hidden]), the DP all_reduce one flat gradient
    buffer (1-D): every runloop thread carries one kind only, at most 2 threads per group, and the
    counts per step follow from the model (2 TP all_reduces per block, 1 DP)."""
    exp = expected_of(scenario)
    p = exp["params"]
    for rank, (_, events) in traces(scenario).items():
        n_steps = len(profiler_steps(events))
        assert n_steps == p["profiler"]["active"]
        kinds_of_tid: dict[int, set] = defaultdict(set)
        per_kind = Counter()
        for e in runloop_collectives(events):
            assert e["name"] == "gloo:all_reduce"
            dims = args(e)["Input Dims"][0]
            kind = "tp" if dims == [p["batch"], p["hidden"]] else "dp"
            kinds_of_tid[e["tid"]].add(kind)
            per_kind[kind] += 1
        assert all(len(k) == 1 for k in kinds_of_tid.values())
        tids_per_kind = Counter(next(iter(k)) for k in kinds_of_tid.values())
        assert set(tids_per_kind) == {"tp", "dp"} and max(tids_per_kind.values()) <= 2
        assert per_kind["tp"] == 2 * p["tp_blocks"] * n_steps
        assert per_kind["dp"] == n_steps
        # the DP message is the whole flattened gradient of this rank's parameters
        h, f, tp = p["hidden"], p["ffn"], len(exp["layout"]["ranks"]["0"]["groups"]["tp"])
        numel = (h * h + h) + p["tp_blocks"] * (2 * h * f // tp + f // tp + h) + (10 * h + 10)
        dp_dims = {tuple(args(e)["Input Dims"][0]) for e in runloop_collectives(events)
                   if len(args(e)["Input Dims"][0]) == 1}
        assert dp_dims == {(numel,)}
        # every collective is issued by a c10d::allreduce_ on the main thread
        calls = [e for e in on_main(events) if e["name"] == "c10d::allreduce_"]
        assert len(calls) == per_kind["tp"] + per_kind["dp"]


def test_3d_each_runloop_thread_carries_one_group():
    """In the 3-D job the TP all_reduces ([mb_size, hidden]) and the DP gradient all_reduce (1-D)
    of a rank never share a runloop thread, and each group uses at most 2 threads."""
    exp = expected_of("pp2_dp2_tp2_3d")
    p = exp["params"]
    for rank, (_, events) in traces("pp2_dp2_tp2_3d").items():
        kinds_of_tid: dict[int, set] = defaultdict(set)
        for e in runloop_collectives(events):
            dims = args(e)["Input Dims"][0]
            assert dims == [p["mb_size"], p["hidden"]] or len(dims) == 1, dims
            kinds_of_tid[e["tid"]].add(len(dims))
        assert all(len(k) == 1 for k in kinds_of_tid.values())
        per_kind = Counter(next(iter(k)) for k in kinds_of_tid.values())
        assert set(per_kind) == {1, 2} and max(per_kind.values()) <= 2


# ----------------------------------------------------------------------------------------------
# Point-to-point


def p2p(events: list[dict]) -> list[tuple[str, int, tuple]]:
    """(gloo name, peer rank in the group, shape) of each gloo:send / gloo:recv, the peer read
    from the c10d::send / c10d::recv_ call that issues it (Concrete Inputs[2])."""
    out, call = [], None
    for e in on_main(events):
        if e["name"] in ("c10d::send", "c10d::recv_"):
            call = e
        elif e["name"] in ("gloo:send", "gloo:recv"):
            assert call is not None and call["name"] == {"gloo:send": "c10d::send",
                                                          "gloo:recv": "c10d::recv_"}[e["name"]]
            assert args(call)["Input Dims"][0][0] == args(e)["Input Dims"][0]
            out.append((e["name"], int(args(call)["Concrete Inputs"][2]),
                        tuple(args(e)["Input Dims"][0])))
            call = None
    return out


@pytest.mark.parametrize("scenario", PP_SCENARIOS)
def test_p2p_counts_peers_and_shapes(scenario):
    exp = expected_of(scenario)
    p = exp["params"]
    lay = exp["layout"]["ranks"]
    got = {rank: p2p(events) for rank, (_, events) in traces(scenario).items()}
    for rank, (_, events) in traces(scenario).items():
        n_steps = len(profiler_steps(events))
        names = Counter(n for n, _, _ in got[rank])
        assert names == {"gloo:send": p["microbatches"] * n_steps,
                         "gloo:recv": p["microbatches"] * n_steps}
        # none of them on a runloop thread
        assert not [e for e in runloop_collectives(events)
                    if e["name"] in ("gloo:send", "gloo:recv")]
        pp = lay[str(rank)]["groups"]["pp"]
        peer = next(r for r in pp if r != rank)
        assert {g for _, g, _ in got[rank]} == {pp.index(peer)}
        # activations / gradients of one micro-batch: [mb_size, hidden]
        assert {s for _, _, s in got[rank]} == {(p["mb_size"], p["hidden"])}
        # stage 0 sends activations first; stage 1 receives first
        first = "gloo:send" if lay[str(rank)]["coords"]["pp"] == 0 else "gloo:recv"
        assert got[rank][0][0] == first
        # the k-th send to the peer is the peer's k-th receive from this rank
        sends = [s for n, _, s in got[rank] if n == "gloo:send"]
        peer_recvs = [s for n, _, s in got[peer] if n == "gloo:recv"]
        assert sends == peer_recvs


@pytest.mark.parametrize("scenario", PP_SCENARIOS)
def test_stage_layers_show_in_the_trace(scenario):
    """layers_per_stage from expected.json against the forward linears counted per micro-batch."""
    exp = expected_of(scenario)
    p = exp["params"]
    for rank, (_, events) in traces(scenario).items():
        stage = exp["layout"]["ranks"][str(rank)]["coords"]["pp"]
        n_steps = len(profiler_steps(events))
        linears = sum(1 for e in on_main(events) if e["name"] == "aten::linear")
        per_layer = 2 if "tp" in exp["layout"]["mesh"] else 1  # a TP block has 2 linears
        head = 1 if stage == 1 else 0
        per_microbatch = p["layers_per_stage"][stage] * per_layer + head
        assert linears == per_microbatch * p["microbatches"] * n_steps


# ----------------------------------------------------------------------------------------------
# all_to_all


def test_all_to_all_split_sizes_agree_across_ranks():
    scenario = "ep_all_to_all"
    if scenario not in SCENARIOS:
        pytest.fail("ep_all_to_all not recorded")
    exp = expected_of(scenario)
    p, ws = exp["params"], exp["world_size"]
    dispatch = {}
    for rank, (_, events) in traces(scenario).items():
        calls = [e for e in on_main(events) if e["name"] == "c10d::alltoall_base_"]
        n_steps = len(profiler_steps(events))
        # per step: counts exchange, dispatch, combine, and the two in backward
        assert len(calls) == 5 * n_steps
        runs = [e for e in runloop_collectives(events) if e["name"] == "gloo:all_to_all"]
        assert len(runs) == len(calls)
        with_splits = [e for e in calls if args(e)["Concrete Inputs"][3] != "[]"]
        assert len(with_splits) == 4 * n_steps
        first = with_splits[0]
        out_splits = json.loads(args(first)["Concrete Inputs"][3])
        in_splits = json.loads(args(first)["Concrete Inputs"][4])
        # Input Dims: [[output rows, d], [input rows, d], ...]
        assert args(first)["Input Dims"][0] == [sum(out_splits), p["d_model"]]
        assert args(first)["Input Dims"][1] == [p["tokens_per_rank"], p["d_model"]]
        dispatch[rank] = (out_splits, in_splits)
    n_hot = round(p["tokens_per_rank"] * p["hot_share"])
    for r in range(ws):
        out_splits, in_splits = dispatch[r]
        assert sum(in_splits) == p["tokens_per_rank"]
        assert in_splits[p["hot_expert"]] == n_hot
        for j in range(ws):  # what r sends to j is what j receives from r
            assert in_splits[j] == dispatch[j][0][r]
    assert sum(dispatch[p["hot_expert"]][0]) == n_hot * ws


# ----------------------------------------------------------------------------------------------
# The injected regions


def union_len(intervals: list[tuple]) -> Decimal:
    total, cur = Decimal(0), None
    for lo, hi in sorted(intervals):
        if cur is None or lo > cur[1]:
            if cur is not None:
                total += cur[1] - cur[0]
            cur = [lo, hi]
        else:
            cur[1] = max(cur[1], hi)
    return total + (cur[1] - cur[0] if cur is not None else 0)


def injected_list(exp: dict) -> list[dict]:
    inj = exp["injected"]
    return [] if inj is None else [inj]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_injected_region_is_on_the_culprit_only(scenario):
    exp = expected_of(scenario)
    for inj in injected_list(exp):
        if "region" not in inj or inj.get("delay_ms") is None:
            continue
        for rank, (_, events) in traces(scenario).items():
            regions = [e for e in on_main(events) if e["name"] == inj["region"]]
            n_steps = len(profiler_steps(events))
            if inj["region"] == "data.fetch_batch":  # every rank fetches; one sleeps
                assert len(regions) == n_steps
                continue
            assert len(regions) == (n_steps if rank == inj["rank"] else 0), rank
        culprit = traces(scenario)[inj["rank"]][1]
        durs_ms = [e["dur"] / 1000 for e in on_main(culprit) if e["name"] == inj["region"]]
        # each step's region lasts at least the injected delay (busy loop / sleep until then)
        assert min(durs_ms) >= Decimal(inj["delay_ms"]) * Decimal("0.99")


def test_fsdp_input_straggler_is_idle_host_time():
    scenario = "fsdp2_annotated_input_straggler"
    if scenario not in SCENARIOS:
        pytest.fail(f"{scenario} not recorded")
    exp = expected_of(scenario)
    inj = exp["injected"]
    fetch = {}
    for rank, (_, events) in traces(scenario).items():
        main = on_main(events)
        regions = [e for e in main if e["name"] == inj["region"]]
        fetch[rank] = sum(e["dur"] for e in regions) / len(regions) / 1000
        if rank == inj["rank"]:
            # the sleep leaves no op: the part of each region no op covers lasts the delay
            for a in regions:
                end = a["ts"] + a["dur"]
                kids = [(e["ts"], min(e["ts"] + e["dur"], end)) for e in main
                        if e is not a and a["ts"] <= e["ts"] < end]
                idle_ms = (a["dur"] - union_len(kids)) / 1000
                assert idle_ms >= Decimal(inj["delay_ms"]) * Decimal("0.99")
        # FSDP2 all-gathers each Linear's shard twice per step (forward, backward)
        n_linear = exp["params"]["layers"] + 1
        n_steps = len(profiler_steps(events))
        ag = [e for e in runloop_collectives(events) if e["name"] == "gloo:all_gather"]
        assert len(ag) == 2 * n_linear * n_steps
    others = [v for r, v in fetch.items() if r != inj["rank"]]
    assert fetch[inj["rank"]] - max(others) >= Decimal(inj["delay_ms"]) * Decimal("0.9")
