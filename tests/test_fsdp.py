"""FSDP2 (`fully_shard`) on real recorded CPU gloo jobs: the collectives table, the straggler
verdict and memory, checked against the trace JSON and what the recording ran.

Ground truth: fixtures/ddp/fsdp_*/expected.json (`params`: the MLP's layer sizes, the world size,
one FSDP unit per nn.Linear; `injected`: the straggling rank) and the trace JSON read with the
stdlib (tests/tracejson.py), never numbers produced by the code under test.

How FSDP2 looks in a gloo trace (fixtures/README.md): every unit's parameters are all-gathered
(`c10d::_allgather_base_` on the training thread, `gloo:all_gather` of the rank's shard on a
runloop thread) before its forward and again before its backward; its gradients are
reduce-scattered (`c10d::_reduce_scatter_base_`), which gloo runs as a `gloo:all_reduce` of the
whole unsharded gradient.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from pathlib import Path
from statistics import median

import duckdb
import pytest

from tests.tracejson import args, base_ns, complete, read_trace, steps, to_ns
from traceanalyze.diagnosis.diagnose import diagnose
from traceanalyze.diagnosis.ruleset import load_rules, run_rule

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "ddp"
SCENARIOS = ("fsdp_balanced", "fsdp_compute_straggler")
# the c10d calls FSDP2 makes, and the collective each one is (torch.distributed's API names)
CALL_OP = {"c10d::_allgather_base_": "all_gather", "c10d::_reduce_scatter_base_": "reduce_scatter"}
COLLECTIVE_RANGES = ("c10d::", "gloo:", "nccl:", "record_param_comms")
MiB = 1 << 20


def expected_of(scenario: str) -> dict:
    return json.loads((FIXTURES / scenario / "expected.json").read_text())


def units(params: dict) -> list[list[tuple[int, ...]]]:
    """Parameter shapes of each FSDP unit (one per nn.Linear of record_ddp.py's MLP), in forward order."""
    mlp, dims = params["mlp"], []
    d = mlp["in_dim"]
    for _ in range(mlp["layers"]):
        dims.append((d, mlp["hidden"]))
        d = mlp["hidden"]
    dims.append((d, mlp["classes"]))
    return [[(out, inp), (out,)] for inp, out in dims]  # Linear weight [out, in], bias [out]


def shard_numel(unit: list[tuple[int, ...]], world: int) -> int:
    """Elements of one rank's shard of a unit: FSDP2 shards every parameter on dim 0, padded to a
    multiple of the world size, and all-gathers the unit's shards as one flat tensor."""
    return sum(math.ceil(shape[0] / world) * math.prod(shape[1:]) for shape in unit)


def rank_traces(scenario: str):
    """(rank, base_ns, events) of every rank file of a scenario."""
    for path in sorted((FIXTURES / scenario).glob("*.pt.trace.json.gz")):
        top, events = read_trace(path)
        yield top["distributedInfo"]["rank"], base_ns(top), events


def json_calls(events: list[dict], base: int) -> list[tuple[int, str, int]]:
    """(ts_ns, op, input bytes) of the FSDP collective calls inside ProfilerSteps, in issue order.
    The calls' Input Dims are [output, input]; input is the shard (all_gather) or the whole
    gradient (reduce_scatter)."""
    windows = list(steps(events, base).values())
    out = []
    for e in events:
        if complete(e) and e.get("name") in CALL_OP:
            ts = to_ns(e["ts"], base)
            if any(a <= ts < b for a, b in windows):
                in_dims = args(e)["Input Dims"][1]
                assert args(e)["Input type"][1] == "float"
                out.append((ts, CALL_OP[e["name"]], 4 * math.prod(in_dims)))
    return sorted(out)


@pytest.fixture(scope="module")
def db(fixture_db):
    """db(scenario) -> path of its trace database (each folder loaded once per session, shared)."""

    def get(scenario: str) -> Path:
        folder = FIXTURES / scenario
        assert any(folder.glob("*.pt.trace.json.gz")), f"{scenario} is not recorded (fixtures/record_ddp.py)"
        return fixture_db(folder)

    return get


def query(db_path: Path, sql: str, *params) -> list[tuple]:
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        return con.execute(sql, list(params)).fetchall()
    finally:
        con.close()


def findings_of(db_path: Path, rule: str | None = None):
    rules = load_rules()
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        if rule is None:
            return list(diagnose(con).findings)
        (r,) = [r for r in rules if r.id == rule]
        return run_rule(con, r)
    finally:
        con.close()


# ---- collectives ----------------------------------------------------------------------------

@pytest.mark.parametrize("scenario", SCENARIOS)
def test_one_row_per_fsdp_collective_per_rank_named_as_the_program_called_it(scenario, db):
    exp = expected_of(scenario)
    n_units, world = len(units(exp["params"])), exp["world_size"]
    n_steps = len(exp["params"]["profiler"]["recorded_steps"])
    got = defaultdict(Counter)
    for rank, op, n in query(db(scenario), "SELECT rank, op, count(*) FROM collectives GROUP BY ALL"):
        got[rank][op] = n
    for rank, base, events in rank_traces(scenario):
        calls = Counter(op for _, op, _ in json_calls(events, base))
        windows = list(steps(events, base).values())
        runs = sum(1 for e in events if complete(e) and str(e.get("name")).startswith("gloo:")
                   and any(a <= to_ns(e["ts"], base) < b for a, b in windows))
        # reshard_after_forward=True: each unit is gathered for its forward and again for its backward
        assert calls == {"all_gather": 2 * n_units * n_steps, "reduce_scatter": n_units * n_steps}, rank
        assert runs == calls.total()  # one gloo run per call (reduce_scatter runs as gloo:all_reduce)
        assert got[rank] == calls, rank
    assert sorted(got) == list(range(world))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_bytes_are_the_shards_gathered_and_the_gradients_scattered(scenario, db):
    exp = expected_of(scenario)
    world, layers = exp["world_size"], units(exp["params"])
    gathered = [4 * shard_numel(u, world) for u in layers]          # float32 shard of each unit
    scattered = [4 * world * shard_numel(u, world) for u in layers]  # the padded, unsharded gradient
    rows = query(db(scenario), "SELECT rank, step, op, bytes FROM collectives ORDER BY rank, seq")
    per_step = defaultdict(lambda: defaultdict(list))
    for rank, step, op, nbytes in rows:
        per_step[(rank, step)][op].append(nbytes)
    assert per_step
    for key, ops in per_step.items():
        assert ops["all_gather"][:len(layers)] == gathered, key  # forward: units in order
        assert sorted(ops["all_gather"]) == sorted(2 * gathered), key
        assert sorted(ops["reduce_scatter"]) == sorted(scattered), key
    # the same numbers, in the same order, as the c10d calls in the JSON
    for rank, base, events in rank_traces(scenario):
        table = [(op, b) for r, _, op, b in rows if r == rank]
        assert table == [(op, b) for _, op, b in json_calls(events, base)], rank


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_seq_is_the_same_collective_on_every_rank(scenario, db):
    rows = query(db(scenario), "SELECT seq, list(DISTINCT op), list(DISTINCT bytes), list(DISTINCT step), "
                               "count(*) FROM collectives GROUP BY seq ORDER BY seq")
    world = expected_of(scenario)["world_size"]
    assert [r[0] for r in rows] == list(range(len(rows)))
    for seq, ops, sizes, step_list, n in rows:
        assert n == world and len(ops) == 1 and len(sizes) == 1 and len(step_list) == 1, seq


# ---- straggler verdict ----------------------------------------------------------------------

def _extra_mm_ms_per_step(scenario: str, rank: int, dim: int) -> list[float]:
    """Per step, the time the rank spends in the injected torch.mm of [dim, dim] x [dim, dim]."""
    for r, base, events in rank_traces(scenario):
        if r == rank:
            return [sum(to_ns(e["dur"]) for e in events if complete(e) and e.get("name") == "aten::mm"
                        and args(e).get("Input Dims") == [[dim, dim], [dim, dim]] and a <= to_ns(e["ts"], base) < b) / 1e6
                    for a, b in steps(events, base).values()]
    raise AssertionError(rank)


def test_compute_straggler_names_the_rank_and_the_first_backward_all_gather(db):
    exp = expected_of("fsdp_compute_straggler")
    want, p = exp["injected"], exp["params"]
    late_rank = want["rank"]
    loud = [f for f in findings_of(db("fsdp_compute_straggler")) if f.at_least("warning")]
    # the straggler first; besides it, what is inherent to the job (expected.json): every rank
    # waits for FSDP's transfers themselves (fsdp-exposed-comm, tests/test_fsdp_ep_comm.py)
    assert [(f.rule, list(f.ranks), f.evidence.get("cause")) for f in loud] == [
        (want["rule"], [late_rank], want["cause"])] + [
        (i["rule"], list(range(exp["world_size"])), i["cause"]) for i in exp["inherent"]]
    f = loud[0]
    others = [r for r in range(exp["world_size"]) if r != late_rank]
    assert f.evidence["others"] == ",".join(map(str, others))
    # late where rank 1's extra forward work ends: at the first all-gather of the backward pass,
    # i.e. the one after every unit's forward all-gather
    assert f.evidence["op"] == "all_gather"
    late_rows = [e for e in f.evidence["events"] if e["rank"] == late_rank]
    assert late_rows and {e["op_index"] for e in late_rows} == {len(units(p))}
    # as late as the injected matmuls take, per the JSON
    extra = median(_extra_mm_ms_per_step("fsdp_compute_straggler", late_rank, p["extra_matmul_dim"]))
    assert extra > 20
    assert 0.75 * extra <= f.cost.ms_per_step <= 1.25 * extra
    assert f.evidence["late_steps_count"] == f.evidence["aligned_steps_count"] == len(
        p["profiler"]["recorded_steps"])


def test_balanced_fsdp_gets_no_straggler_and_no_warning_but_exposed_communication(db):
    path = db("fsdp_balanced")
    assert findings_of(path, "collective-straggler") == []
    # the ranks really are balanced: no rank is consistently late at the collectives (JSON-free
    # cross-check on the table the rule reads: lateness stays far below the straggler's 100 ms)
    ((worst_ns,),) = query(path, "SELECT max(abs(late_ns)) FROM (SELECT rank, median(late_ns) AS late_ns "
                                 "FROM collective_arrivals GROUP BY rank)")
    assert worst_ns < 20e6
    # the one thing wrong: every rank waits on FSDP's collectives for about half its step; the
    # FSDP rule names the transfers and folds comm-dominated in (one root cause)
    loud = [f for f in findings_of(path) if f.at_least("warning")]
    assert [f.rule for f in loud] == ["fsdp-exposed-comm"]
    assert [e["rule"] for e in loud[0].evidence["explains"]] == ["comm-dominated"]


def test_fsdp_communication_share_and_size_come_from_the_gathered_and_scattered_tensors(db):
    """comm-dominated on the balanced FSDP2 run: the share is what the JSON shows the training
    thread waiting for its collectives, the size an all-gather's output (shard x ranks), not the
    shard, and the advice is FSDP's."""
    exp = expected_of("fsdp_balanced")
    world, layers = exp["world_size"], units(exp["params"])
    (f,) = findings_of(db("fsdp_balanced"), "comm-dominated")
    assert list(f.ranks) == list(range(world))
    assert f.evidence["cause"] == "fsdp" and "prefetch" in f.advice and "no_sync" not in f.advice
    # the largest collective: a unit's whole (padded) parameters gathered, or its gradient reduced
    assert f.evidence["largest_collective_bytes"] == max(4 * world * shard_numel(u, world) for u in layers)
    # the share per rank, from the JSON: at least the waiting after each c10d call, at most that
    # plus the calls themselves (what the rule subtracts, waiting for a late rank, is small here)
    shares = {}
    for rank, base, events in rank_traces("fsdp_balanced"):
        windows, waits = steps(events, base), _json_waits(events, base)
        dur = sum(b - a for n, (a, b) in windows.items() if n in f.steps)
        waited = sum(waits[n][0] for n in f.steps)
        shares[rank] = (100 * waited / dur, 100 * (waited + sum(waits[n][1] for n in f.steps)) / dur)
    assert sorted(shares) == list(range(world))
    assert min(lo for lo, _ in shares.values()) - 5 <= f.evidence["comm_pct_least_rank"]
    assert f.evidence["comm_pct_most_rank"] <= max(hi for _, hi in shares.values())
    assert f.evidence["comm_pct_least_rank"] >= 35  # the rule's threshold: it had to fire


def _json_waits(events: list[dict], base: int) -> dict[int, tuple[int, int]]:
    """{step: (ns the training thread waits for its collectives, ns inside its c10d calls)} from the JSON.

    FSDP2 on CPU waits for each collective right after issuing it (async_op False), so the thread
    waits from the end of each c10d call to the end of the gloo run it queued: gloo runs its queue
    in order, so the i-th run on the runloop threads belongs to the i-th call. The intervals are
    merged (runs on the two runloop threads may overlap) and clipped to the step."""
    windows = steps(events, base)
    (main,) = {e["tid"] for e in events if complete(e) and str(e.get("name")).startswith("ProfilerStep#")}
    calls = sorted((to_ns(e["ts"], base), to_ns(e["ts"], base) + to_ns(e["dur"])) for e in events
                   if complete(e) and e.get("name") in CALL_OP and e["tid"] == main)
    runs = sorted((to_ns(e["ts"], base), to_ns(e["ts"], base) + to_ns(e["dur"])) for e in events
                  if complete(e) and str(e.get("name")).startswith("gloo:"))
    assert len(calls) == len(runs) > 0
    spans = [(call_end, run_end) for (_, call_end), (_, run_end) in zip(calls, runs) if run_end > call_end]

    def clipped(intervals, a, b):
        return sorted((max(x, a), min(y, b)) for x, y in intervals if min(y, b) > max(x, a))

    out = {}
    for n, (a, b) in windows.items():
        waited, cur_lo, cur_hi = 0, None, None
        for lo, hi in clipped(spans, a, b):
            if cur_hi is None or lo > cur_hi:
                waited += 0 if cur_hi is None else cur_hi - cur_lo
                cur_lo, cur_hi = lo, hi
            else:
                cur_hi = max(cur_hi, hi)
        waited += 0 if cur_hi is None else cur_hi - cur_lo
        out[n] = (waited, sum(hi - lo for lo, hi in clipped(calls, a, b)))
    return out


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fsdp_waits_inside_ranges_are_exposed_communication(scenario, db):
    """The waits happen inside FSDP::all_gather ranges (forward) and autograd nodes (backward);
    they are comm_exposed all the same: at least the waiting the JSON shows, at most that plus
    the time in the c10d calls themselves (exposed when no forward/backward range encloses them)."""
    got = {(rank, step): ns for rank, step, ns in query(db(scenario), "SELECT rank, step, comm_exposed_ns FROM step_phases")}
    for rank, base, events in rank_traces(scenario):
        for step, (waited, in_calls) in _json_waits(events, base).items():
            assert waited > 0, (rank, step)
            assert waited <= got[(rank, step)] <= waited + in_calls, (rank, step, waited, in_calls)


def test_ranks_waiting_for_the_fsdp_straggler_show_it_as_exposed_communication(db):
    exp = expected_of("fsdp_compute_straggler")
    late_rank = exp["injected"]["rank"]
    extra = median(_extra_mm_ms_per_step("fsdp_compute_straggler", late_rank, exp["params"]["extra_matmul_dim"]))
    rows = query(db("fsdp_compute_straggler"), "SELECT rank, median(comm_exposed_ns), median(backward_ns) "
                                               "FROM step_phases GROUP BY rank")
    comm = {rank: ns / 1e6 for rank, ns, _ in rows}
    backward = {rank: ns / 1e6 for rank, _, ns in rows}
    assert sorted(comm) == list(range(exp["world_size"]))
    for rank in comm:
        if rank != late_rank:
            assert comm[rank] >= 0.5 * extra, rank  # as test_rules_fixtures checks for DDP
            # they wait about as long as the late rank's extra matmuls take, on top of what it waits
            assert 0.75 * extra <= comm[rank] - comm[late_rank] <= 1.25 * extra, rank
            # and that wait is no longer counted as backward (it was: ~285 ms against rank 1's ~176 ms)
            assert abs(backward[rank] - backward[late_rank]) < 0.25 * extra, rank


# ---- memory ---------------------------------------------------------------------------------

def _json_memory(events: list[dict], base: int):
    """[memory] events of a rank in time order, each with whether it lies inside a collective call
    on its thread and (allocations) whether a free of its address follows before it is reused."""
    ranges = defaultdict(list)
    for e in events:
        if complete(e) and str(e.get("name")).startswith(COLLECTIVE_RANGES):
            ranges[e["tid"]].append((to_ns(e["ts"], base), to_ns(e["ts"], base) + to_ns(e["dur"])))
    mem = sorted((e for e in events if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    rows = []
    for i, e in enumerate(mem):
        a, ts = args(e), to_ns(e["ts"], base)
        nxt = next((m for m in mem[i + 1:] if args(m)["Addr"] == a["Addr"]), None)
        rows.append({"ts": ts, "bytes": a["Bytes"], "total": a["Total Allocated"],
                     "in_collective": any(lo <= ts <= hi for lo, hi in ranges[e["tid"]]),
                     "freed": a["Bytes"] > 0 and nxt is not None and args(nxt)["Bytes"] < 0})
    return rows


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_memory_rows_match_the_allocator_events(scenario, db):
    table = defaultdict(list)
    for rank, ts, b, inside, freed in query(db(scenario), "SELECT rank, ts_ns, alloc_bytes, in_collective, "
                                                          "freed_in_trace FROM memory ORDER BY rank, ts_ns"):
        table[rank].append((ts, b, inside, freed))
    for rank, base, events in rank_traces(scenario):
        rows = _json_memory(events, base)
        got = table[rank]
        assert [t for t, *_ in got] == [r["ts"] for r in rows]
        # alloc_bytes is the event's Bytes (the first event of a rank may lack it: nothing before it)
        assert [b for _, b, _, _ in got][1:] == [r["bytes"] for r in rows][1:]
        assert [i for _, _, i, _ in got] == [r["in_collective"] for r in rows]
        assert [f for _, b, _, f in got if b is not None and b > 0] == [
            r["freed"] for r, g in zip(rows, got) if g[1] is not None and g[1] > 0]


def test_memory_creep_ignores_collective_buffers_the_trace_never_frees(db):
    """gloo frees FSDP's reduce-scatter copies on its runloop thread, unseen by the profiler: Total
    Allocated climbs on some ranks of these recordings by exactly those blocks."""
    raw_growth = []
    for scenario in SCENARIOS:
        for rank, base, events in rank_traces(scenario):
            rows = _json_memory(events, base)
            ends = []
            for a, b in steps(events, base).values():
                inside = [r for r in rows if r["ts"] < b]
                lost = sum(r["bytes"] for r in inside if r["in_collective"] and r["bytes"] > 0 and not r["freed"])
                ends.append((inside[-1]["total"], inside[-1]["total"] - lost))
            raw_growth.append(ends[-1][0] - ends[0][0])
            assert abs(ends[-1][1] - ends[0][1]) < MiB, (scenario, rank)  # the program's memory is flat
        assert findings_of(db(scenario), "memory-creep") == []
    assert max(raw_growth) >= 2 * MiB  # the trap the rule must not fall into is in the recordings
