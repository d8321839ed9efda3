"""The rule pack on real recorded traces: each scenario gets exactly its injected diagnosis.

Ground truth is each scenario's expected.json (`injected`: rule, rank, cause, written by the
recording script from what it injected; `inherent`: what is true of the job as recorded without
any injection, with the test that measures it from the JSON), not numbers produced by the code
under test. Every finding at warning or above must be one of those diagnoses; a balanced DDP run
gets none.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import duckdb
import pytest
from gate_runs import expected

from traceanalyze.diagnosis.diagnose import diagnose
from traceanalyze.diagnosis.ruleset import load_rules
from traceanalyze.summary.build import build_summary

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "ddp"
REAL_TRACES = ROOT / "fixtures" / "real"
TRACE_FILE = re.compile(r"\.json(\.gz)?$")


def _scenarios() -> list[str]:
    return sorted(d.name for d in FIXTURES.iterdir()
                  if (d / "expected.json").is_file() and any(TRACE_FILE.search(p.name) for p in d.iterdir()
                                                              if p.name != "expected.json"))


@pytest.fixture(scope="module")
def analyse(fixture_db):
    """analyse(folder) -> (findings of every rule, loaded ranks, database path); each folder
    loaded once per session (the shared fixture databases)."""
    cache: dict[Path, tuple] = {}

    def run(folder: Path):
        if folder not in cache:
            db = fixture_db(folder)
            con = duckdb.connect(str(db), read_only=True)
            try:
                ranks = [r for (r,) in con.execute("SELECT rank FROM ranks ORDER BY rank").fetchall()]
                cache[folder] = (list(diagnose(con).findings), ranks, db)
            finally:
                con.close()
        return cache[folder]

    return run


def _assert_exactly(findings, ranks: list[int], injected: list[dict]) -> None:
    loud = [f for f in findings if f.at_least("warning")]
    shown = [(f.rule, list(f.ranks), f.evidence.get("cause"), f.title) for f in loud]
    assert sorted(f.rule for f in loud) == sorted(i["rule"] for i in injected), shown
    for want in injected:
        (finding,) = [f for f in loud if f.rule == want["rule"]]
        expected_ranks = [want["rank"]] if want.get("rank") is not None else sorted(ranks)  # all loaded ranks
        assert sorted(finding.ranks) == expected_ranks, shown
        if "cause" in want:
            assert finding.evidence.get("cause") == want["cause"], shown
        if "explains" in want:  # one finding per root cause: the general finding is folded in
            assert [e["rule"] for e in finding.evidence.get("explains", [])] == want["explains"], shown


def test_the_recorded_scenarios_are_there():
    assert {"balanced", "input_straggler", "compute_straggler", "large_allreduce", "rank0_barrier",
            "slow_dataloader", "memory_creep", "fsdp_balanced", "fsdp_compute_straggler"} <= set(_scenarios())


def test_every_injected_pathology_has_a_rule():
    ids = {r.id for r in load_rules()}
    missing = {i["rule"] for s in _scenarios() for i in expected(s)} - ids
    assert not missing


@pytest.mark.parametrize("scenario", _scenarios())
def test_scenario_gets_exactly_its_injected_diagnosis(scenario, analyse):
    findings, ranks, _ = analyse(FIXTURES / scenario)
    _assert_exactly(findings, ranks, expected(scenario))


def _shift_clock(src: Path, dst: Path, offsets_ns: dict[int, int]) -> Path:
    """Copy a scenario as if each rank ran on its own host, some hosts' clocks off by offsets_ns."""
    dst.mkdir(parents=True)
    for path in src.iterdir():
        if not TRACE_FILE.search(path.name) or path.name == "expected.json":
            continue
        trace = json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes())
        rank = trace["distributedInfo"]["rank"]
        trace["baseTimeNanoseconds"] = trace.get("baseTimeNanoseconds", 0) + offsets_ns.get(rank, 0)
        trace["host_name"] = f"node{rank}"
        (dst / path.name.removesuffix(".gz")).write_text(json.dumps(trace))
    return dst


@pytest.mark.parametrize("scenario", ["balanced", "input_straggler", "rank0_barrier"])
def test_clock_skew_between_hosts_changes_no_diagnosis(scenario, analyse, tmp_path):
    """Hosts' clocks 7 s, -2.5 s and 40 ms apart: the same findings as with the recorded clocks."""
    skewed = _shift_clock(FIXTURES / scenario, tmp_path / scenario,
                          {1: 7_000_000_000, 2: -2_500_000_000, 3: 40_000_000})
    findings, ranks, _ = analyse(skewed)
    _assert_exactly(findings, ranks, expected(scenario))


@pytest.mark.parametrize("scenario", ["input_straggler", "compute_straggler", "rank0_barrier",
                                      "fsdp_compute_straggler"])
def test_summary_names_the_straggler_as_worst_rank(scenario, analyse):
    """The summary's worst rank (own step time, waiting excluded) is the injected late rank."""
    _, _, db = analyse(FIXTURES / scenario)
    con = duckdb.connect(str(db), read_only=True)
    try:
        summary = build_summary(con, str(FIXTURES / scenario), diagnose(con))
    finally:
        con.close()
    late_rank = expected(scenario)[0]["rank"]  # (the injected straggler comes first)
    assert summary["steps"]["worst_rank"] == late_rank
    late = {}
    for row in summary["steps"]["lateness_ms"]:
        late.setdefault(row["rank"], []).append(row["late_ms"])
    assert max(late, key=lambda r: sorted(late[r])[len(late[r]) // 2]) == late_rank


def _dataloader_share(folder: Path) -> float:
    """Share of ProfilerStep time spent in DataLoader __next__, read straight from the JSON."""
    (path,) = [p for p in folder.iterdir() if TRACE_FILE.search(p.name)]
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    waits = [(e["ts"], e["dur"]) for e in events
             if e.get("ph") == "X" and str(e.get("name", "")).startswith("enumerate(DataLoader)")]
    inside = sum(d for ts, d in waits if any(a <= ts < b for a, b in steps))
    return inside / sum(b - a for a, b in steps)


def test_resnet_dataloader_stall_with_0_workers_and_much_less_with_4(analyse):
    nw0, nw4 = REAL_TRACES / "kineto-resnet50-nw0", REAL_TRACES / "kineto-resnet50-nw4"
    share0, share4 = _dataloader_share(nw0), _dataloader_share(nw4)
    assert share0 > 0.3 and share4 < share0 / 10  # the ground truth, independent of traceanalyze

    (stall,) = [f for f in analyse(nw0)[0] if f.rule == "dataloader-stall"]
    assert stall.at_least("warning")
    assert stall.cost.pct_of_step == pytest.approx(100 * share0, abs=1.0)
    assert not [f for f in analyse(nw4)[0] if f.rule == "dataloader-stall"]


def _phases(db: Path) -> dict[int, dict[str, float]]:
    """{rank: {phase: mean ms per aligned step}} from the summary built on the database."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        summary = build_summary(con, str(db), diagnose(con))
    finally:
        con.close()
    return {r["rank"]: r["metrics"]["phases_ms"] for r in summary["ranks"]}


def _param(scenario: str, key: str) -> dict:
    return json.loads((FIXTURES / scenario / "expected.json").read_text())["params"][key]


def test_phases_show_rank2s_injected_data_wait(analyse):
    sleep_ms = 1000 * _param("input_straggler", "nominal_sleep_per_batch_s")["2"]
    phases = _phases(analyse(FIXTURES / "input_straggler")[2])
    assert phases[2]["data_wait"] >= 0.8 * sleep_ms
    for rank in (0, 1, 3):
        assert phases[rank]["data_wait"] < 0.2 * sleep_ms
        assert phases[rank]["comm_exposed"] >= 0.5 * sleep_ms  # they wait for rank 2 in the all-reduce


def test_phases_show_every_ranks_injected_data_wait(analyse):
    sleep_ms = 1000 * _param("slow_dataloader", "nominal_sleep_per_batch_s")["all"]
    for phases in _phases(analyse(FIXTURES / "slow_dataloader")[2]).values():
        assert phases["data_wait"] >= 0.8 * sleep_ms


def test_phases_show_rank0s_host_work_as_other_and_the_others_waiting(analyse):
    sleep_ms = 1000 * _param("rank0_barrier", "host_work_sleep_s")["0"]
    phases = _phases(analyse(FIXTURES / "rank0_barrier")[2])
    assert phases[0]["other"] >= 0.8 * sleep_ms
    for rank in (1, 2, 3):
        assert phases[rank]["other"] < 0.2 * sleep_ms
        assert phases[rank]["comm_exposed"] >= 0.8 * sleep_ms


def test_phase_intervals_tile_every_step_exactly(analyse):
    _, _, db = analyse(FIXTURES / "input_straggler")
    con = duckdb.connect(str(db), read_only=True)
    try:
        bad = con.execute("""
            WITH ordered AS (
                SELECT p.*, s.ts_ns AS step_ts_ns, s.end_ns AS step_end_ns,
                       lag(p.end_ns) OVER (PARTITION BY p.rank, p.step ORDER BY p.ts_ns) AS prev_end_ns
                FROM phase_intervals AS p JOIN steps AS s USING (rank, step))
            SELECT rank, step, ts_ns FROM ordered
            WHERE coalesce(prev_end_ns, step_ts_ns) <> ts_ns OR end_ns > step_end_ns
            UNION ALL
            SELECT s.rank, s.step, NULL FROM steps AS s JOIN phase_intervals AS p USING (rank, step)
            GROUP BY s.rank, s.step, s.dur_ns HAVING sum(p.dur_ns) <> s.dur_ns
        """).fetchall()
    finally:
        con.close()
    assert bad == []
