"""Where a straggler's extra time goes: the code region a straggler finding names, on real
recorded multi-group jobs (fixtures/parallel/, see fixtures/README.md).

Ground truth: each scenario's expected.json (`injected`: the rank, the record_function range it
slows, and whether it sleeps there or computes) and the trace JSON read with the stdlib
(tests/tracejson.py): the range's duration summed per rank and step, against the other ranks'
median (a rank without the range counts 0), and its idle share: the time inside it that no op,
runtime call or collective of the rank covers.
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean, median

import duckdb
import pytest

from tests.tracejson import base_ns, complete, rank_of, read_trace, steps, to_ns
from traceanalyze.diagnosis.config import load_config
from traceanalyze.diagnosis.diagnose import diagnose

ROOT = Path(__file__).resolve().parent.parent
PARALLEL = ROOT / "fixtures" / "parallel"
# scenario -> the injected region is idle host time (a sleep) or busy (a matmul loop)
SCENARIOS = {"fsdp2_annotated_input_straggler": True, "dp2_tp2_tp_straggler": False}
STRAGGLER_RULES = ("collective-straggler", "intermittent-straggler")


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for lo, hi in sorted(intervals):
        if end is None or lo > end:
            total, end = total + hi - lo, hi
        elif hi > end:
            total, end = total + hi - end, hi
    return total


def _read_rank(path: Path) -> dict:
    top, events = read_trace(path)
    base = base_ns(top)
    ranges = steps(events, base)
    xs = [e for e in events if complete(e)]
    main_tid = next(e["tid"] for e in xs if str(e.get("name", "")).startswith("ProfilerStep#")
                    and e.get("cat") != "gpu_user_annotation")
    return {"rank": rank_of(top, path), "base": base, "steps": ranges, "events": xs, "main_tid": main_tid}


def _step_of(ranges: dict[int, tuple[int, int]], ts: int) -> int | None:
    return next((n for n, (lo, hi) in ranges.items() if lo <= ts < hi), None)


def _region_instances(r: dict, name: str) -> dict[int, list[tuple[int, int]]]:
    """{step: [(start_ns, end_ns)]} of the host range `name` on the training-loop thread."""
    out: dict[int, list[tuple[int, int]]] = {}
    for e in r["events"]:
        if e.get("name") == name and e.get("cat") == "user_annotation" and e["tid"] == r["main_tid"]:
            ts = to_ns(e["ts"], r["base"])
            step = _step_of(r["steps"], ts)
            if step is not None:
                out.setdefault(step, []).append((ts, ts + to_ns(e["dur"])))
    return out


def _busy_inside(r: dict, lo: int, hi: int) -> int:
    """ns of [lo, hi) covered by an op or runtime call of the thread, or a gloo collective of the rank."""
    spans = []
    for e in r["events"]:
        cat, name = e.get("cat"), str(e.get("name", ""))
        on_thread = e["tid"] == r["main_tid"] and cat in ("cpu_op", "Operator", "cuda_runtime", "Runtime")
        if on_thread or (cat == "user_annotation" and name.startswith("gloo:")):
            ts = to_ns(e["ts"], r["base"])
            end = ts + to_ns(e["dur"])
            if ts < hi and end > lo:
                spans.append((max(ts, lo), min(end, hi)))
    return _union_ns(spans)


@pytest.fixture(scope="module", params=sorted(SCENARIOS))
def scenario(request, fixture_db):
    folder = PARALLEL / request.param
    expected = json.loads((folder / "expected.json").read_text())
    con = duckdb.connect(str(fixture_db(folder)), read_only=True)
    try:
        diagnosis = diagnose(con, load_config(ROOT, []))
    finally:
        con.close()
    ranks = {r["rank"]: r for r in map(_read_rank, sorted(folder.glob("*.pt.trace.json*")))}
    yield request.param, expected["injected"], diagnosis.findings, ranks


def _straggler(findings, rank: int):
    hits = [f for f in findings if f.rule in STRAGGLER_RULES and f.evidence.get("rank") == rank]
    assert len(hits) == 1, [(f.rule, f.title) for f in findings]
    return hits[0]


def _rule_steps(f) -> list[int]:
    """The steps the rule judged the rank on (its late steps; a folded finding adds its own to f.steps):
    those of its evidence events."""
    return sorted({e["step"] for e in f.evidence["events"]})


def test_the_straggler_names_the_injected_region(scenario):
    name, injected, findings, ranks = scenario
    f = _straggler(findings, injected["rank"])
    region = f.evidence["region"]
    assert region["name"] == injected["region"] and region["kind"] == "annotation"
    # its excess over the other ranks, per step of the finding, from the JSON
    per_rank = {r: _region_instances(data, injected["region"]) for r, data in ranks.items()}
    ms = {r: {s: sum(hi - lo for lo, hi in spans) / 1e6 for s, spans in inst.items()} for r, inst in per_rank.items()}
    others = [r for r in ranks if r != injected["rank"]]
    excess = mean(ms[injected["rank"]].get(s, 0.0) - median(ms[o].get(s, 0.0) for o in others) for s in _rule_steps(f))
    assert region["excess_ms_per_step"] == pytest.approx(excess, abs=0.01)
    # what was injected: the sleep or the loop lasted delay_ms each step
    assert region["excess_ms_per_step"] == pytest.approx(injected["delay_ms"], rel=0.25)


def test_idle_or_busy_is_what_the_rank_did_there(scenario):
    name, injected, findings, ranks = scenario
    f = _straggler(findings, injected["rank"])
    region = f.evidence["region"]
    culprit = ranks[injected["rank"]]
    spans = [span for s, inst in _region_instances(culprit, injected["region"]).items() if s in _rule_steps(f)
             for span in inst]
    total = sum(hi - lo for lo, hi in spans)
    idle = total - sum(_busy_inside(culprit, lo, hi) for lo, hi in spans)
    assert region["idle_pct"] == pytest.approx(100.0 * idle / total, abs=0.2)
    assert region["idle"] is SCENARIOS[name]
    words = "idle" if SCENARIOS[name] else "busy"
    # one number per fact: the title's number is the lateness; the region is named, its excess is in the evidence
    assert f"(cause: {f.evidence['cause']} — {words} inside record_function '{injected['region']}'" in f.title
    assert f.title.count(" ms") == 1 and f"by {f.evidence['late_ms']:.0f} ms" in f.title
    assert f.advice.startswith(f"The extra time is inside record_function '{injected['region']}'")


def test_a_sleep_inside_a_range_is_not_compute(scenario):
    """The phases count time by what runs: the sleeping rank's extra time is no compute (its range,
    named for data, is its data wait: cause input, as recorded), and the computing rank's is."""
    name, injected, findings, _ = scenario
    f = _straggler(findings, injected["rank"])
    assert f.evidence["cause"] == injected["cause"]
    if SCENARIOS[name]:
        assert f.evidence["compute_excess_ms"] < 0.5 * f.evidence["late_ms"]
    else:
        assert f.evidence["compute_excess_ms"] > 0.5 * f.evidence["late_ms"]


def test_median_of_others_is_the_median_without_the_rank_at_any_group_size():
    """region_excess's median of the other ranks (median_of_others, fed only the values at the
    middle places) against Python's median of the list without that rank, members without the
    region counting 0: random groups of 2 to 2,000 ranks, ties and zeros included."""
    import random

    import traceanalyze.db as tracedb

    rng = random.Random(20261126)
    con = duckdb.connect()
    try:
        tracedb.create_macros(con, temporary=True)
        checked = 0
        for _ in range(300):
            n = rng.choice([2, 3, 4, 5, rng.randint(6, 60), rng.randint(61, 2000)])
            present = sorted(rng.choice([rng.randint(0, 5), rng.randint(0, 10**6)]) for _ in range(rng.randint(1, n)))
            zeros = n - len(present)
            values = [0] * zeros + present  # the group's values in place order (absent members first, as 0)
            h = n // 2
            middle = [present[i - zeros - 1] if zeros < i <= n else None for i in (h, h + 1, h + 2)]
            for me in {rng.randrange(len(present)) for _ in range(3)}:
                place = zeros + present.index(present[me]) + 1  # the first place of its value (rank() over the values)
                others = values[:zeros + me] + values[zeros + me + 1:]
                (got,) = con.execute("SELECT median_of_others(?, ?, ?, ?, ?, ?)",
                                     [n, zeros, place, *middle]).fetchone()
                assert got == median(others), (n, zeros, present[me], got, median(others))
                checked += 1
        assert checked >= 300
    finally:
        con.close()
