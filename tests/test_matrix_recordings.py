"""The recorded parallelism matrix (fixtures/parallel_matrix/, recorded by
fixtures/record_matrix.py with torch 2.13 on gloo) holds what its expected.json says, read from
the trace JSON with the stdlib only (tests/tracejson.py), never with traceanalyze:

- one trace per rank, with the rank and world size in `distributedInfo`, and exactly the profiled
  ProfilerStep ids;
- every group the recording made is in its members' `pg_config` with those ranks, and the
  `pg_desc` the cell's group style gives (its `group_desc`, `mesh_<dim>`, or torch's `undefined`);
- pipelines pass data between neighbouring stages only: per step every rank of a pipeline has
  `gloo:send` / `gloo:recv` on its training thread, a middle stage both; with record_shapes the peer
  in `c10d::send` / `c10d::recv_` (a group rank) maps to the neighbour, without it the peer is
  absent (those cells are for peer inference);
- the pathology is visible: the culprit's injected range lasts about the injected delay and no
  other rank has it; while the culprit is in it another rank is blocked (in `gloo:recv` on its
  training thread or a gloo collective on its runloop threads; one host clock); without a
  pipeline every other rank is blocked longer per step than the culprit (in a pipeline the
  blocked time depends on the stage's position, so that comparison does not apply); a slow
  stage's ranks spend clearly longer in matmuls (`aten::addmm` / `aten::mm`); a hot expert's FFN
  is the longest and receives the most tokens; a one-micro-batch pipeline is blocked a large share of its step.

The analyzer's verdicts on these cells are checked elsewhere; this file checks the recordings.
"""

from __future__ import annotations

import json
import statistics
from bisect import bisect_right
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

import pytest

from tests.tracejson import STEP_NAME, arg, read_bytes

ROOT = Path(__file__).resolve().parent.parent
MATRIX = ROOT / "fixtures" / "parallel_matrix"
EXPECTED = json.loads((MATRIX / "expected.json").read_text())["cells"]
CELLS = sorted(EXPECTED)

STRAGGLERS = ("tp_work", "stage_work", "data_sleep", "loader_sleep", "user_sleep", "ring_work")


def test_matrix_is_large_and_covers_every_axis():
    knobs = [EXPECTED[c]["knobs"] for c in CELLS]
    assert len(CELLS) >= 40
    assert {k["layout"] for k in knobs} >= {"dp4", "tp4", "dp2tp2", "tp2dp2", "pp4", "pp2dp2",
                                           "pp2dp2tp2", "ep4", "cp4", "cp3", "dp2cp3", "dp2ep2", "ep2dp2"}
    assert {k["groups"] for k in knobs} == {"mesh", "desc", "nodesc"}
    assert {k.get("p2p") for k in knobs if k["kind"] == "pipe"} == {"default", "own"}
    hand = {f"{s}_{c}" for s in ("gpipe", "1f1b") for c in ("blocking", "isend", "async", "batch")}
    assert {k.get("pipe") for k in knobs if k["kind"] == "pipe"} >= hand | {
        "lib_gpipe", "lib_1f1b", "lib_interleaved", "lib_loopedbfs", "lib_zb", "lib_zbv", "lib_dualpipev"}
    assert {k["pathology"] for k in knobs} >= {
        "none", "tp_work", "stage_work", "data_sleep", "loader_sleep", "user_sleep",
        "slow_stage", "hot_expert", "bubble", "ring_work", "rotating_data", "rotating_tpwork"}
    # two stragglers at once, in a plain and a tensor-parallel layout
    assert {k["layout"] for k in knobs if (k["inject"] or {}).get("ms_by_rank")} >= {"dp4", "dp2tp2"}
    assert {k["record_shapes"] for k in knobs} == {True, False}
    culprits = defaultdict(set)  # culprit first / middle / last rank, across cells
    for c in CELLS:
        e = EXPECTED[c]
        for r in e["expected"]["culprit_ranks"]:
            ws = e["world_size"]
            culprits[ws].add("first" if r == 0 else "last" if r == ws - 1 else "middle")
    assert culprits[4] == {"first", "middle", "last"}
    # worlds that are not a power of two, in every kind of layout (nothing may assume 2, 4, 8)
    odd = {EXPECTED[c]["knobs"]["kind"] for c in CELLS if EXPECTED[c]["world_size"] in (3, 6)}
    assert odd == {"plain", "pipe", "ep", "ring"}
    assert culprits[3] >= {"middle", "last"} and culprits[6] >= {"middle", "last"}


# ------------------------------------------------------------------------------------------------
# Reading one rank


REGIONS = ("## data ##", "enumerate(DataLoader)#", "tp_mlp.activation_stats",
           "stage.extra_compute", "attention_variant", "moe.expert_ffn", "ring_attn.extra_compute")


def _region_of(name: str) -> str | None:
    for r in REGIONS:
        if (name.startswith(r) if r.endswith("#") else name == r):
            return r
    return None


@lru_cache(maxsize=None)
def _rank(cell: str, rank: int) -> dict:
    """What the tests need of one rank's trace, in one pass over its events (times in ms):
    its top-level keys, ProfilerStep ids and durations, per step the time blocked (gloo:recv on
    the training thread + gloo collectives on other threads) and in each region, the names on
    the training thread, and the Concrete Inputs of its p2p and all_to_all calls."""
    [path] = sorted((MATRIX / cell).glob(f"rank{rank}.*.pt.trace.json.gz"))
    doc = json.loads(read_bytes(path))
    events = [e for e in doc["traceEvents"]  # complete events (floats: no Decimal needed here)
              if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))
              and isinstance(e.get("dur"), (int, float))]
    top = {k: v for k, v in doc.items() if k != "traceEvents"}
    steps = sorted((int(str(e["name"]).split("#")[1]), e["ts"], e["ts"] + e["dur"], e["tid"])
                   for e in events if STEP_NAME.match(str(e["name"])))
    main = steps[0][3]
    starts = [lo for _, lo, _, _ in steps]
    blocked = [0.0] * len(steps)
    matmul = [0.0] * len(steps)  # the layers' own compute: time in aten::addmm / aten::mm
    blocked_iv: list[tuple[float, float]] = []  # (start, end) in the trace's us, any step
    region_iv = defaultdict(list)
    regions = defaultdict(lambda: [0.0] * len(steps))
    names: list[str] = []
    calls = defaultdict(list)
    for e in events:
        name = str(e["name"])
        i = bisect_right(starts, e["ts"]) - 1
        inside = i >= 0 and e["ts"] < steps[i][2]
        if e["tid"] == main:
            names.append(name)
            if name in ("c10d::send", "c10d::recv_", "c10d::alltoall_base_"):
                calls[name].append(arg(e, "Concrete Inputs"))
        is_blocked = (name == "gloo:recv" if e["tid"] == main
                      else name.startswith("gloo:") and name not in ("gloo:send", "gloo:recv"))
        reg = _region_of(name)
        reg = reg if reg and e["tid"] == main and e.get("cat") == "user_annotation" else None
        if is_blocked:
            blocked_iv.append((e["ts"], e["ts"] + e["dur"]))
        if reg and inside:
            region_iv[reg].append((e["ts"], e["ts"] + e["dur"]))
        if not inside:
            continue
        if is_blocked:
            blocked[i] += e["dur"] / 1e3
        if e["tid"] == main and name in ("aten::addmm", "aten::mm"):
            matmul[i] += e["dur"] / 1e3
        if reg:
            regions[reg][i] += e["dur"] / 1e3
    return {"top": top, "step_ids": [n for n, _, _, _ in steps],
            "step_ms": [(hi - lo) / 1e3 for _, lo, hi, _ in steps], "blocked": blocked,
            "regions": {k: list(v) for k, v in regions.items()}, "names": names,
            "blocked_iv": blocked_iv, "matmul": matmul, "region_iv": dict(region_iv),
            "calls": dict(calls)}


def _range(cell: str, rank: int, region: str) -> list[float]:
    d = _rank(cell, rank)
    return d["regions"].get(region, [0.0] * len(d["step_ids"]))


def _blocked(cell: str, rank: int) -> list[float]:
    return _rank(cell, rank)["blocked"]


def _step_ms(cell: str, rank: int) -> list[float]:
    return _rank(cell, rank)["step_ms"]


# ------------------------------------------------------------------------------------------------
# Files, steps, groups


@pytest.mark.parametrize("cell", CELLS)
def test_one_trace_per_rank_with_the_profiled_steps(cell):
    e = EXPECTED[cell]
    ws = e["world_size"]
    files = sorted(p.name.split(".")[0] for p in (MATRIX / cell).glob("*.pt.trace.json.gz"))
    assert files == sorted(f"rank{r}" for r in range(ws))
    want = [int(s.split("#")[1]) for s in e["profiler"]["steps"]]
    assert len(want) == e["knobs"]["active"]
    for r in range(ws):
        info = _rank(cell, r)["top"]["distributedInfo"]
        assert (info["rank"], info["world_size"], info["backend"]) == (r, ws, "gloo")
        assert _rank(cell, r)["step_ids"] == want


@pytest.mark.parametrize("cell", CELLS)
def test_groups_are_in_pg_config(cell):
    e = EXPECTED[cell]
    for g in e["groups"]:
        for r in g["ranks"]:
            cfg = _rank(cell, r)["top"]["distributedInfo"]["pg_config"]
            if g["is_default_group"]:  # a mesh dimension over the whole world
                assert any(c["pg_desc"] == "default_pg" and c["ranks"] == g["ranks"] for c in cfg)
                continue
            want_desc = g["group_desc"] or "undefined"
            hits = [c for c in cfg if c["ranks"] == g["ranks"] and c["pg_desc"] == want_desc]
            assert hits, (r, g, [(c["pg_desc"], c["ranks"]) for c in cfg])
    made = len(e["groups"])  # + the default group; a mesh dimension over the world makes none
    made -= sum(g["is_default_group"] for g in e["groups"])
    assert _rank(cell, 0)["top"]["distributedInfo"]["pg_count"] >= made + 1


def _p2p_cells():
    return [c for c in CELLS if EXPECTED[c]["pipelines"]]


@pytest.mark.parametrize("cell", _p2p_cells())
def test_pipelines_talk_to_their_neighbours(cell):
    e = EXPECTED[cell]
    shapes = e["knobs"]["record_shapes"]
    own = {tuple(g["ranks"]) for g in e["groups"] if g["dimension"] == "PP"}
    for pipe in e["pipelines"]:
        p2p_ranks = pipe if e["p2p_group"] == "own" else list(range(e["world_size"]))
        if e["p2p_group"] == "own":
            assert tuple(sorted(pipe)) in own
        for s, r in enumerate(pipe):
            d = _rank(cell, r)
            names = d["names"]
            steps = len(d["step_ids"])
            # every stage receives from its predecessor or its successor, every step
            assert names.count("gloo:recv") >= steps * (2 if 0 < s < len(pipe) - 1 else 1)
            assert names.count("gloo:send") >= steps
            neighbours = {pipe[i] for i in (s - 1, s + 1) if 0 <= i < len(pipe)}
            peers = set()
            for ci in d["calls"].get("c10d::send", []) + d["calls"].get("c10d::recv_", []):
                if shapes:
                    peers.add(p2p_ranks[int(ci[2])])
                else:
                    assert ci is None
            if shapes:
                assert peers == neighbours, (r, peers, neighbours)


# ------------------------------------------------------------------------------------------------
# The pathology


def _mean(xs):
    return statistics.fmean(xs)


@pytest.mark.parametrize("cell", CELLS)
def test_the_pathology_is_visible(cell):
    e = EXPECTED[cell]
    t, k = e["expected"], e["knobs"]
    patho = k["pathology"]
    ws = e["world_size"]
    inj = e["injected"] or {}
    region = e["regions"]["injected"]
    blocked = {r: _mean(_blocked(cell, r)) for r in range(ws)}
    if patho in STRAGGLERS:
        [c] = t["culprit_ranks"]
        ms = inj["ms"]
        got = _mean(_range(cell, c, region))
        assert got >= 0.8 * ms
        # a second straggler (expected.also_late) has its own, smaller delay
        second = {int(r): v for r, v in (inj.get("ms_by_rank") or {}).items() if int(r) != c}
        assert [t["also_late"]["rank"]] == sorted(second) if second else not t.get("also_late")
        for r, ms2 in second.items():
            assert 0.8 * ms2 <= _mean(_range(cell, r, region)) <= got - 0.3 * ms
        for r in (r for r in t["waiting_ranks"] if r not in second):  # absent, or (a data range every rank has) far shorter
            other = statistics.median(_range(cell, r, region))
            assert other <= max(0.25 * ms, got - 0.6 * ms), (r, other, got)
            if patho in ("tp_work", "stage_work", "user_sleep", "ring_work"):
                assert other == 0
        # while the culprit is in its injected range, another rank is blocked waiting (same
        # host clock): the most-blocked other rank overlaps it by >= 0.3 x the delay (median)
        share = []
        for a, b in _rank(cell, c)["region_iv"][region]:
            share.append(max(sum(max(0.0, min(b, y) - max(a, x))
                                 for x, y in _rank(cell, r)["blocked_iv"])
                             for r in t["waiting_ranks"]) / 1e3 / ms)
        assert statistics.median(share) >= 0.3, share
        if not e["pipelines"]:  # no pipeline: every other rank is blocked longer per step
            gaps = [blocked[r] - blocked[c] for r in t["waiting_ranks"] if r not in second]
            assert min(gaps) > 0, (blocked, c)
            assert _mean(gaps) >= 0.4 * ms, (blocked, c)
    elif patho == "intermittent":
        [c] = t["culprit_ranks"]
        ids = _rank(cell, c)["step_ids"]
        data = dict(zip(ids, _range(cell, c, region)))
        slow = [n for n in ids if data[n] >= 0.8 * inj["ms"]]
        assert slow == t["steps"]
        assert len(slow) >= 2 and slow[1] - slow[0] == inj["every"]
    elif patho == "all_loader_sleep":
        for r in range(ws):
            assert _mean(_range(cell, r, region)) >= 0.8 * inj["ms"]
    elif patho in ("rotating_data", "rotating_tpwork"):   # rank (step mod world) has the range in its step, no other rank
        assert t["culprit_ranks"] == list(range(ws)) and not t["waiting_ranks"]
        ids = _rank(cell, 0)["step_ids"]
        assert t["steps"] == ids
        for r in range(ws):
            got = dict(zip(_rank(cell, r)["step_ids"], _range(cell, r, region)))
            for n in ids:
                assert (got[n] >= 0.8 * inj["ms"]) if n % ws == r else (got[n] <= 0.25 * inj["ms"]), (r, n, got[n])
    elif patho == "slow_stage":
        own = {r: _mean(_rank(cell, r)["matmul"]) for r in range(ws)}
        slow = _mean([own[r] for r in t["culprit_ranks"]])
        fast = _mean([own[r] for r in t["waiting_ranks"]])
        assert slow >= 1.5 * fast, own
        assert min(blocked[r] for r in t["waiting_ranks"]) > max(
            blocked[r] for r in t["culprit_ranks"]), blocked
    elif patho == "hot_expert":
        [c] = t["culprit_ranks"]
        ffn = {r: _mean(_range(cell, r, region)) for r in range(ws)}
        assert ffn[c] >= 2 * max(v for r, v in ffn.items() if r != c), ffn
        if k["record_shapes"]:  # the dispatch: output split sizes of the hot expert's rank
            for r in range(ws):
                splits = {str(ci[3]) for ci in _rank(cell, r)["calls"]["c10d::alltoall_base_"]}
                hot_rows = round(k["tokens"] * k["hot_share"])
                if r == c:  # (each member of its EP group sends it hot_rows: a DP x EP job has several)
                    (ep,) = [g["ranks"] for g in e["groups"] if g["dimension"] == "EP" and c in g["ranks"]]
                    assert str([hot_rows] * len(ep)) in splits
    elif patho == "bubble":
        for r in range(ws):
            assert blocked[r] >= 0.25 * _mean(_step_ms(cell, r)), (r, blocked)
        assert k["microbatches"] == 1
    else:
        assert patho == "none" and t["rule"] == "none" and not t["culprit_ranks"]
        for r in range(ws):  # nothing injected anywhere
            names = set(_rank(cell, r)["names"])
            assert not names & {"tp_mlp.activation_stats", "stage.extra_compute",
                                "attention_variant"}


@pytest.mark.parametrize("cell", CELLS)
def test_ground_truth_is_consistent_with_the_layout(cell):
    e = EXPECTED[cell]
    t = e["expected"]
    ws = e["world_size"]
    dims = e["dims"]
    size = 1
    for n in dims.values():
        size *= n
    assert size == ws
    name = {"DP": "FSDP"} if e["knobs"].get("fsdp") else {}  # (a DP dimension that shards: FSDP)
    assert e["layout"] == " x ".join(f"{name.get(d, d)} {dims[d]}" for d in ("PP", "DP", "TP", "EP", "CP") if d in dims)
    everyone = set(range(ws))
    assert set(t["culprit_ranks"]) | set(t["waiting_ranks"]) <= everyone
    assert not set(t["culprit_ranks"]) & set(t["waiting_ranks"])
    if e["pipelines"]:
        assert sorted(r for p in e["pipelines"] for r in p) == sorted(everyone)
        assert all(len(p) == dims["PP"] for p in e["pipelines"])
    if t["group"]:
        assert set(t["culprit_ranks"]) <= set(t["group"]["ranks"]) or t["rule"] in (
            "pipeline-bubble",)
    if t["stage"] is not None:
        for r in t["culprit_ranks"]:
            assert any(p.index(r) == t["stage"] for p in e["pipelines"] if r in p)
