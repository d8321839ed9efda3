"""The group-aware view of the recorded parallel jobs (fixtures/parallel/): lateness per dimension
(group_lateness, summary `groups.lateness`, the report's heatmaps) and the pipeline's representative
step (summary `groups.pipeline`, the report's pipeline timeline).

Expected values are computed here from the trace JSON (stdlib only, tests/tracejson.py) and from
what the recording built (expected.json: every rank's groups and coordinates):
- a heatmap cell: each rank's arrival at each of its group's gloo collectives (the runloop's
  gloo:all_reduce annotation), step-relative, minus the group's lower median arrival at the same
  collective, the positive parts summed over the step;
- a pipeline lane: at least the rank's blocking gloo:recv time in the step, at most every send /
  recv call on its training thread (their union);
- the representative step: the aligned step of median duration.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest
from report_helpers import SCRIPT, schema_errors
from tracejson import args, complete, read_trace

from traceanalyze import analyze
from traceanalyze.output.html import build_context, render_html
from traceanalyze.output.units import fmt_ms

ROOT = Path(__file__).resolve().parent.parent
PARALLEL = ROOT / "fixtures" / "parallel"
DDP = ROOT / "fixtures" / "ddp"
DB_SHOWN = "reports/x/trace.duckdb"


def _expected(scenario: str) -> dict:
    return json.loads((PARALLEL / scenario / "expected.json").read_text(encoding="utf-8"))


def _traces(folder: Path) -> dict[int, list[dict]]:
    out = {}
    for path in sorted(folder.glob("rank*.pt.trace.json*")):
        top, events = read_trace(path)
        out[top["distributedInfo"]["rank"]] = events
    return out


def _steps(events: list[dict]) -> dict[int, tuple[Decimal, Decimal]]:
    """{N: (start, end) in us} of the rank's ProfilerStep#N."""
    return {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in events
            if complete(e) and str(e["name"]).startswith("ProfilerStep#")}


@pytest.fixture(scope="module")
def analysed(fixture_db):
    """(summary, report page, trace folder) of a folder, analysed once per module (its database
    loaded once per session: the shared fixture databases)."""
    cache: dict[Path, tuple[dict, str]] = {}

    def get(folder: Path):
        if folder not in cache:
            with analyze(folder, db=fixture_db(folder), progress=False) as a:
                summary = json.loads(json.dumps(a.summary_dict, default=str))
                stages = a.connection().execute("SELECT rank, stage, stages FROM pipeline_stages ORDER BY rank").fetchall()
            cache[folder] = (summary, render_html(build_context(summary, DB_SHOWN)), stages)
        return cache[folder]

    return get


def _titles(page: str, chart_id: str) -> list[str]:
    svg = re.search(rf'<svg id="{re.escape(chart_id)}".*?</svg>', page, re.S)
    assert svg, chart_id
    return re.findall(r"<title>(.*?)</title>", svg.group(0), re.S)


# ---- lateness per dimension ---------------------------------------------------------------------

def _lateness_by_hand(scenario: str) -> dict[tuple[str, int, int], Decimal]:
    """{(mesh dim, rank, step): ms} from the JSON: the TP all_reduces carry activations
    ([batch, hidden]), the DP one the flat gradient (1-D) (tests/test_parallel_fixtures.py)."""
    exp = _expected(scenario)
    traces = _traces(PARALLEL / scenario)
    arrivals: dict[tuple[str, int, int], list[Decimal]] = defaultdict(list)   # (dim, rank, step) -> rel us
    for rank, events in traces.items():
        steps = _steps(events)
        main = {e["tid"] for e in events if complete(e) and str(e["name"]).startswith("ProfilerStep#")}
        for e in sorted((e for e in events if complete(e) and e["name"] == "gloo:all_reduce" and e["tid"] not in main),
                        key=lambda e: e["ts"]):
            dim = "dp" if len(args(e)["Input Dims"][0]) == 1 else "tp"
            (step,) = [s for s, (lo, hi) in steps.items() if lo <= e["ts"] < hi]
            arrivals[(dim, rank, step)].append(e["ts"] - steps[step][0])
    late: dict[tuple[str, int, int], Decimal] = {}
    for (dim, rank, step), mine in arrivals.items():
        group = exp["layout"]["ranks"][str(rank)]["groups"][dim]
        total = Decimal(0)
        for k, arrival in enumerate(mine):
            at_k = sorted(arrivals[(dim, r, step)][k] for r in group)
            lower_median = at_k[(len(at_k) - 1) // 2]
            total += max(Decimal(0), arrival - lower_median)
        late[(dim, rank, step)] = total / 1000   # us -> ms
    return late


def test_every_heatmap_cell_is_the_lateness_computed_from_the_json(analysed):
    scenario = "dp2_tp2_tp_straggler"
    want = _lateness_by_hand(scenario)
    summary, page, _ = analysed(PARALLEL / scenario)
    rows = summary["groups"]["lateness"]
    names = {"data": "dp", "tensor": "tp"}
    got = {(names[r["dimension"]], r["rank"], r["step"]): r["late_ms"] for r in rows}
    assert set(got) == set(want)
    for key, ms in want.items():
        assert got[key] == pytest.approx(float(ms), abs=0.0015), key
    # the injected rank keeps its tensor partner waiting on every step; nobody is late at the DP all-reduce
    culprit = _expected(scenario)["injected"]["rank"]
    assert all(float(want[("tp", culprit, s)]) > 50 for s in summary["steps"]["aligned"])
    # the report: a heatmap per dimension; each cell's hover title holds the exact value
    for dim in ("data", "tensor"):
        titles = _titles(page, f"chart-group-lateness-{dim}")
        for (d, rank, step), ms in want.items():
            if d != names[dim]:
                continue
            (title,) = [t for t in titles if t.startswith(f"rank {rank} ·") and f"· step {step} ·" in t]
            shown = float(re.search(r"step \d+ · ([0-9.]+) ms late", title).group(1))
            assert shown == pytest.approx(float(ms), abs=0.0015), title


def test_3d_job_has_a_heatmap_per_dimension_and_a_pipeline_step(analysed):
    summary, page, stages = analysed(PARALLEL / "pp2_dp2_tp2_3d")
    exp = _expected("pp2_dp2_tp2_3d")
    assert summary["groups"]["dimensions"] == ["pipeline", "data", "tensor"]
    assert schema_errors(summary) == []
    # send / recv are no group collectives: no pipeline heatmap, one for data and one for tensor
    assert 'id="chart-group-lateness-data"' in page and 'id="chart-group-lateness-tensor"' in page
    assert 'id="chart-group-lateness-pipeline"' not in page
    assert 'id="chart-pipeline"' in page and '<section id="groups">' in page
    # a rank's stage is its pipeline coordinate in the recorded mesh
    assert stages == [(int(r), info["coords"]["pp"], exp["layout"]["mesh"]["pp"])
                      for r, info in sorted(exp["layout"]["ranks"].items(), key=lambda kv: int(kv[0]))]
    # the injected TP straggler is the darkest row of the tensor heatmap
    culprit = exp["injected"]["rank"]
    tensor = [r for r in summary["groups"]["lateness"] if r["dimension"] == "tensor"]
    for step in summary["steps"]["aligned"]:
        at_step = [r for r in tensor if r["step"] == step]
        assert max(at_step, key=lambda r: r["late_ms"])["rank"] == culprit


# ---- the pipeline's representative step ---------------------------------------------------------

def _union_us(intervals: list[tuple[Decimal, Decimal]]) -> Decimal:
    total, end = Decimal(0), None
    for lo, hi in sorted(intervals):
        if end is None or lo > end:
            total, end = total + hi - lo, hi
        elif hi > end:
            total, end = total + hi - end, hi
    return total


def test_pipeline_lanes_wait_in_send_and_recv_on_the_median_step(analysed):
    scenario = "pp2_bubble"
    exp = _expected(scenario)
    traces = _traces(PARALLEL / scenario)
    steps = {rank: _steps(events) for rank, events in traces.items()}
    aligned = sorted(set.intersection(*(set(s) for s in steps.values())))
    # the step of median duration: each step's median over the ranks, the lower middle one
    # (DuckDB's median of two is their mean, stored as whole ns)
    durations = {s: sorted((steps[r][s][1] - steps[r][s][0]) * 1000 for r in steps) for s in aligned}
    median_ns = {s: int((d[(len(d) - 1) // 2] + d[len(d) // 2]) / 2) for s, d in durations.items()}
    by_length = sorted(aligned, key=lambda s: (median_ns[s], s))
    step = by_length[(len(by_length) - 1) // 2]

    summary, page, _ = analysed(PARALLEL / scenario)
    pipe = summary["groups"]["pipeline"]
    assert (pipe["step"], pipe["step_choice"], pipe["stages"]) == (step, "median", exp["injected"]["stages"])
    assert pipe["dur_ms"] == pytest.approx(median_ns[step] / 1e6, abs=0.001)
    assert [(la["rank"], la["stage"]) for la in pipe["lanes"]] == sorted(
        ((int(r), info["coords"]["pp"]) for r, info in exp["layout"]["ranks"].items()), key=lambda x: (x[1], x[0]))
    titles = _titles(page, "chart-pipeline")
    for lane in pipe["lanes"]:
        rank, events = lane["rank"], traces[lane["rank"]]
        lo, hi = steps[rank][step]
        main = {e["tid"] for e in events if complete(e) and e["name"] == f"ProfilerStep#{step}"}

        def clipped(names):
            return [(max(lo, e["ts"]), min(hi, e["ts"] + e["dur"])) for e in events
                    if complete(e) and e["name"] in names and e["tid"] in main
                    and e["ts"] < hi and e["ts"] + e["dur"] > lo]

        recv_ms = float(sum(b - a for a, b in clipped({"gloo:recv"}))) / 1000
        calls_ms = float(_union_us(clipped({"gloo:recv", "gloo:send", "c10d::send", "c10d::recv_"}))) / 1000
        assert recv_ms > 10   # the bubble: each stage waits for the other
        assert recv_ms - 0.001 <= lane["pipeline_wait_ms"] <= calls_ms + 0.001, (rank, lane, recv_ms, calls_ms)
        # the lane's brown bars add up to that wait but for slivers too thin to draw (hover
        # titles hold each bar's exact value), and the lane's label says it
        bars = [float(m.group(1)) for t in titles if t.startswith(f"rank {rank} ·")
                for m in [re.search(r"pipeline wait ([0-9.]+) ms", t)] if m]
        assert bars and -0.003 <= lane["pipeline_wait_ms"] - sum(bars) <= 0.5, (rank, bars, lane)
        assert f"wait {fmt_ms(lane['pipeline_wait_ms'])}</text>" in page
    # one micro-batch, two stages: stage 0 waits for the gradient longer than it computes
    stage0 = next(la for la in pipe["lanes"] if la["stage"] == 0)
    assert stage0["pipeline_wait_ms"] > stage0["compute_ms"]


# ---- where the section is absent, escaping, determinism ----------------------------------------

@pytest.mark.parametrize("folder", [DDP / "input_straggler", PARALLEL / "fsdp2_annotated_input_straggler",
                                    PARALLEL / "ep_all_to_all"], ids=lambda p: p.name)
def test_no_groups_section_for_a_job_of_one_dimension_without_a_pipeline(folder, analysed):
    summary, page, stages = analysed(folder)
    assert "groups" not in summary and stages == []
    assert 'id="groups"' not in page and 'href="#groups"' not in page
    assert "chart-group-lateness" not in page and 'id="chart-pipeline"' not in page
    assert 'id="chart-lateness"' in page   # the job's own lateness heatmap is still there


def test_a_pipeline_alone_shows_its_step_but_no_dimension_heatmap(analysed):
    summary, page, _ = analysed(PARALLEL / "pp2_bubble")
    assert summary["groups"]["lateness"] == []
    assert 'id="chart-pipeline"' in page and "chart-group-lateness" not in page


def _hostile_copy(src: Path, dst: Path, desc: str) -> Path:
    """The traces of `src` with every tensor-parallel group's pg_desc replaced by `desc`."""
    dst.mkdir()
    for path in sorted(src.glob("rank*.pt.trace.json.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            data = json.load(f)
        for g in data["distributedInfo"]["pg_config"]:
            if g["pg_desc"] == "mesh_tp":
                g["pg_desc"] = desc
        with gzip.open(dst / path.name, "wt", encoding="utf-8") as f:
            json.dump(data, f)
    shutil.copy(src / "expected.json", dst / "expected.json")
    return dst


def test_a_hostile_group_description_stays_text(analysed, tmp_path):
    desc = f"{SCRIPT} tp"   # (still names a tensor group)
    folder = _hostile_copy(PARALLEL / "dp2_tp2_tp_straggler", tmp_path / "hostile", desc)
    summary, page, _ = analysed(folder)
    assert desc in [g["desc"] for d in summary["layout"]["dimensions"] for g in d["groups"]]
    assert summary["layout"]["text"] == "4 ranks = DP 2 x TP 2"
    assert SCRIPT not in page
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt; tp"
    assert escaped in page
    assert any(escaped in t for t in _titles(page, "chart-group-lateness-tensor"))
    assert page.count("<script") == 1   # only the report's own script


def test_the_group_view_is_deterministic(analysed, tmp_path):
    folder = PARALLEL / "pp2_dp2_tp2_3d"
    summary, page, _ = analysed(folder)
    with analyze(folder, db=tmp_path / "again.duckdb", progress=False, workers=1) as a:
        again = json.loads(json.dumps(a.summary_dict, default=str))
    assert again["groups"] == summary["groups"]
    assert render_html(build_context(again, DB_SHOWN)) == page
