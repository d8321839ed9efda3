"""`traceanalyze scaling` on the recorded weak-scaling runs (the balanced MLP job at world size 1, 2, 4).

Every expected number is computed here straight from the trace JSON (tests/tracejson.py, stdlib
only): the ProfilerStep durations of every rank and the batch each rank feeds its model (the
first input of the first op inside DistributedDataParallel.forward). The batch is also checked
against the recording's own record of what it ran (expected.json `batch_size_per_rank`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.tracejson import base_ns, complete, read_trace, steps, to_ns
from traceanalyze.errors import TraceanalyzeError
from traceanalyze.compare.scaling import PHASES, analyze_runs, build_report

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "ddp"
RUNS = {1: FIXTURES / "scaling_ws1", 2: FIXTURES / "scaling_ws2", 4: FIXTURES / "scaling_ws4"}


def _rank_files(run: Path) -> list[Path]:
    return sorted(p for p in run.iterdir() if p.name.endswith(".pt.trace.json.gz"))


def _batch_of_step(events: list[dict], base: int, window: tuple[int, int]) -> int:
    """Leading dim of the first shaped input of the first op inside the step's DDP forward."""
    fwd = min((e for e in events if complete(e) and e.get("name") == "DistributedDataParallel.forward"
               and window[0] <= to_ns(e["ts"], base) < window[1]), key=lambda e: e["ts"])
    start, end = to_ns(fwd["ts"], base), to_ns(fwd["ts"], base) + to_ns(fwd["dur"])
    inside = sorted((e for e in events if complete(e) and e.get("cat") == "cpu_op" and e.get("tid") == fwd["tid"]
                     and start <= to_ns(e["ts"], base) < end and (e.get("args") or {}).get("Input Dims")
                     and e["args"]["Input Dims"][0]), key=lambda e: e["ts"])
    return int(inside[0]["args"]["Input Dims"][0][0])


def measure_from_json(run: Path) -> dict:
    """Step time (mean over common steps of the slowest rank), per-rank batch, mean rank step, world size."""
    per_rank: dict[int, dict[int, int]] = {}
    batches = set()
    world = None
    for path in _rank_files(run):
        top, events = read_trace(path)
        base = base_ns(top)
        rank = top["distributedInfo"]["rank"]
        world = top["distributedInfo"]["world_size"]
        windows = steps(events, base)
        per_rank[rank] = {n: end - start for n, (start, end) in windows.items()}
        batches |= {_batch_of_step(events, base, w) for w in windows.values()}
    common = sorted(set.intersection(*(set(d) for d in per_rank.values())))
    slowest = [max(d[n] for d in per_rank.values()) for n in common]
    all_durs = [d[n] for d in per_rank.values() for n in common]
    (batch,) = batches
    return {"world": world, "steps": common, "step_ms": sum(slowest) / len(slowest) / 1e6,
            "batch": batch, "mean_rank_step_ms": sum(all_durs) / len(all_durs) / 1e6}


@pytest.fixture(scope="module")
def truth() -> dict[int, dict]:
    return {w: measure_from_json(run) for w, run in RUNS.items()}


@pytest.fixture(scope="module")
def report(fixture_db):
    """The runs' databases are the session's shared ones (analyze_runs finds them unchanged)."""
    return analyze_runs([RUNS[4], RUNS[1], RUNS[2]], fixture_db)


def test_the_scaling_runs_are_recorded():
    for w, run in RUNS.items():
        assert len(_rank_files(run)) == w, f"{run}: expected {w} rank files"


def test_batch_read_from_the_json_is_what_the_recording_ran(truth):
    for w, run in RUNS.items():
        recorded = json.loads((run / "expected.json").read_text())
        assert truth[w]["world"] == w == recorded["world_size"]
        assert truth[w]["batch"] == recorded["params"]["batch_size_per_rank"]


def test_runs_are_ordered_by_world_size_with_the_smallest_as_baseline(report):
    assert [r.run.world_size for r in report.runs] == [1, 2, 4]
    assert report.baseline.world_size == 1
    assert report.mode == "weak"  # same per-rank batch in every run


def test_step_time_and_throughput_match_the_json(report, truth):
    for r in report.runs:
        t = truth[r.run.world_size]
        assert list(r.run.steps) == t["steps"]
        assert r.run.step_ms == pytest.approx(t["step_ms"], rel=1e-9)
        assert r.run.samples_per_rank == t["batch"]
        assert r.run.samples_per_s == pytest.approx(t["batch"] * t["world"] / (t["step_ms"] / 1e3), rel=1e-9)


def test_weak_scaling_efficiency_is_baseline_step_time_over_step_time(report, truth):
    t1 = truth[1]["step_ms"]
    for r in report.runs:
        t = truth[r.run.world_size]
        throughput = t["batch"] * t["world"] / t["step_ms"]
        base_throughput = truth[1]["batch"] * 1 / t1
        expected = 100.0 * (throughput / t["world"]) / base_throughput
        assert r.efficiency_pct == pytest.approx(expected, rel=1e-9)
        assert r.weak_efficiency_pct == pytest.approx(100.0 * t1 / t["step_ms"], rel=1e-9)
        assert r.speedup == pytest.approx(throughput / base_throughput, rel=1e-9)
        assert r.strong_efficiency_pct is None  # not a strong-scaling experiment


def test_strong_scaling_efficiency_with_a_fixed_global_batch(report, truth):
    """The same step times read as a fixed global batch of 1024: efficiency = T1 / (W x TW)."""
    strong = build_report([r.run for r in report.runs], global_batch_size=1024)
    assert strong.mode == "strong"
    t1 = truth[1]["step_ms"]
    for r in strong.runs:
        w = r.run.world_size
        assert r.strong_efficiency_pct == pytest.approx(100.0 * t1 / (w * truth[w]["step_ms"]), rel=1e-9)
        assert r.efficiency_pct == pytest.approx(r.strong_efficiency_pct, rel=1e-9)
        assert r.weak_efficiency_pct is None
        assert r.ideal_step_ms == pytest.approx(t1 / w, rel=1e-9)  # the work per rank shrinks W-fold


def test_phases_tile_the_step_and_lost_time_adds_up(report, truth):
    for r in report.runs:
        t = truth[r.run.world_size]
        assert set(r.run.phases_ms) == set(PHASES)
        assert sum(r.run.phases_ms.values()) == pytest.approx(t["mean_rank_step_ms"], rel=1e-6)
        assert sum(r.lost_ms.values()) == pytest.approx(t["mean_rank_step_ms"] - r.ideal_step_ms, rel=1e-6)
    base = report.runs[0]
    assert all(v == pytest.approx(0.0, abs=1e-9) for v in base.lost_ms.values())
    assert base.run.phases_ms["wait"] == 0.0  # one rank waits for nobody


def test_verdict_names_the_largest_run_and_its_biggest_loss(report):
    largest = report.runs[-1]
    assert f"world size {largest.run.world_size}" in report.verdict
    assert f"{largest.efficiency_pct:.0f}%" in report.verdict
    groups = {"compute": sum(largest.lost_ms[p] for p in ("forward", "backward", "optimizer")),
              **{p: largest.lost_ms[p] for p in PHASES if p not in ("forward", "backward", "optimizer")}}
    assert f"Most of it is {max(groups, key=groups.get)}" in report.verdict


def test_one_run_is_a_usage_error(report):
    with pytest.raises(TraceanalyzeError, match="at least two runs"):
        build_report([report.runs[0].run])


def test_cli_json_text_and_html(cli, tmp_path, truth):
    html = tmp_path / "scaling.html"
    proc = cli("scaling", RUNS[1], RUNS[2], RUNS[4], "--format", "json", "--html", html, "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["schema"] == "traceanalyze.scaling/1" and data["mode"] == "weak"
    by_w = {r["world_size"]: r for r in data["runs"]}
    for w, t in truth.items():
        assert by_w[w]["weak_efficiency_pct"] == pytest.approx(100.0 * truth[1]["step_ms"] / t["step_ms"], rel=1e-9)
    page = html.read_text()
    assert page.count("<svg") == 2 and "<script" not in page and "http://" not in page.replace(
        "http://www.w3.org/2000/svg", "")
    text = cli("scaling", RUNS[1], RUNS[2], RUNS[4], "-q", cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "weak eff." in text.stdout and "verdict:" in text.stdout
    assert f"{by_w[4]['efficiency_pct']:.0f}%" in text.stdout


def test_cli_one_run_exits_2(cli, tmp_path):
    proc = cli("scaling", RUNS[1], "-q", cwd=tmp_path)
    assert proc.returncode == 2 and "at least two runs" in proc.stderr


def test_html_escapes_run_names(tmp_path):
    from traceanalyze.output.scaling_report import render_scaling_html

    runs = []
    for w in (1, 2):
        dst = tmp_path / f"run<b>{w}&"
        shutil.copytree(RUNS[w], dst)
        runs.append(dst)
    report = analyze_runs(runs, lambda d: tmp_path / "db" / f"{len(d.name)}{d.name[-2]}.duckdb")
    page = render_scaling_html(report)
    assert "run&lt;b&gt;1&amp;" in page and "run<b>1" not in page
