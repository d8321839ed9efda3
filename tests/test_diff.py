"""`traceanalyze diff`: what moved per phase and per rank, findings added/removed, HTML report."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from gate_runs import FIXTURES
from summary_builder import DEFAULT_SPLIT, finding, make_summary, scale_times

from traceanalyze.cli import cli
from traceanalyze.compare.diff import diff_summaries

EVEN = {0: 100.0, 1: 100.0, 2: 100.0, 3: 100.0}


def _rank_table(lines: list[str]) -> dict[str, dict[str, str]]:
    """The printed rank x phase table, read by its column headings: {rank: {heading: cell}}."""
    start = next(i for i, line in enumerate(lines) if re.split(r"\s{2,}", line.strip())[:2] == ["rank", "step"])
    headings = re.split(r"\s{2,}", lines[start].strip())
    rows = {}
    for line in lines[start + 2:]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) != len(headings):
            break
        rows[cells[0]] = dict(zip(headings, cells))
    return rows



def _phases(step_ms: float, **override) -> dict:
    return {**{p: step_ms * f for p, f in DEFAULT_SPLIT.items()}, **override}


def _straggler_pair():
    """old: 4 even ranks; new: rank 1 computes 60 ms more forward, the others wait 60 ms in comm."""
    old = make_summary(EVEN, findings=[finding("memory-creep", "warning")])
    phases = {r: _phases(100.0, comm_exposed=80.0) for r in (0, 2, 3)}
    phases[1] = _phases(100.0, forward=85.0)
    new = make_summary({r: 160.0 for r in EVEN}, phases=phases,
                       findings=[finding("collective-straggler", "error", [1], title="rank 1 <late>"),
                                 finding("memory-creep", "warning")])
    return old, new


def test_job_and_rank_deltas():
    old, new = _straggler_pair()
    diff = diff_summaries(old, new)
    job = {d.key: d for d in diff.job}
    assert (job["step_ms.median_rank"].old, job["step_ms.median_rank"].new) == (100.0, 160.0)
    assert job["step_ms.median_rank"].change_pct == pytest.approx(60.0)
    # forward: 25 ms everywhere before; after, 85 ms on rank 1 only -> median 25, max 85
    assert job["phase_ms.forward.median"].change == pytest.approx(0.0)
    assert job["phase_ms.forward.worst"].change == pytest.approx(60.0)
    assert job["phase_ms.comm_exposed.median"].change == pytest.approx(60.0)  # 20 -> 80 on 3 of 4
    assert job["gpu_idle_pct.median"].change is None  # CPU-only: not comparable
    ranks = {r.rank: {d.key: d for d in r.metrics} for r in diff.ranks}
    assert ranks[1]["phase_ms.forward"].change == pytest.approx(60.0)
    assert ranks[1]["phase_ms.comm_exposed"].change == pytest.approx(0.0)
    assert ranks[2]["phase_ms.comm_exposed"].change == pytest.approx(60.0)
    assert ranks[2]["step_ms.median"].change_pct == pytest.approx(60.0)


def test_findings_added_removed_unchanged_by_rule_and_ranks():
    old = make_summary(EVEN, findings=[finding("collective-straggler", ranks=[2]), finding("memory-creep")])
    new = make_summary(EVEN, findings=[finding("collective-straggler", ranks=[1]), finding("memory-creep")])
    diff = diff_summaries(old, new)
    assert [(f["rule"], f["ranks"]) for f in diff.findings_added] == [("collective-straggler", [1])]
    assert [(f["rule"], f["ranks"]) for f in diff.findings_removed] == [("collective-straggler", [2])]
    assert [f["rule"] for f in diff.findings_unchanged] == ["memory-creep"]


def test_ranks_in_only_one_run_and_notes():
    old = make_summary({0: 100.0, 1: 100.0})
    new = make_summary(EVEN)
    diff = diff_summaries(old, new)
    assert [(r.rank, r.in_old, r.in_new) for r in diff.ranks] == [
        (0, True, True), (1, True, True), (2, False, True), (3, False, True)]
    rank3 = {d.key: d for d in diff.ranks[3].metrics}
    assert rank3["step_ms.median"].old is None and rank3["step_ms.median"].change is None
    assert any("world size differs: 2 -> 4" in n for n in diff.notes)


def test_same_summary_has_no_changes():
    s = make_summary({0: 90.0, 1: 110.0})
    diff = diff_summaries(s, s)
    assert all(d.change in (0.0, None) for d in diff.job)
    assert diff.findings_added == diff.findings_removed == [] and diff.notes == []


# ---- command line -------------------------------------------------------------------------

def _files(tmp_path: Path) -> tuple[Path, Path]:
    old, new = _straggler_pair()
    (tmp_path / "old.json").write_text(json.dumps({**old, "trace_dir": "runs/old"}))
    (tmp_path / "new.json").write_text(json.dumps({**new, "trace_dir": "runs/new"}))
    return tmp_path / "old.json", tmp_path / "new.json"


def test_cli_text_table(tmp_path):
    old, new = _files(tmp_path)
    res = CliRunner().invoke(cli, ["diff", str(old), str(new)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == "traceanalyze diff: runs/old -> runs/new"
    step = next(line for line in lines if line.startswith("step time, wall clock"))
    assert [c.strip() for c in step.split("  ") if c.strip()][1:] == ["100 ms", "160 ms", "+60.0 ms (+60.0%)"]
    # rank x phase table: rank 1 moved forward +60, rank 2 moved comm exposed +60
    rows = _rank_table(lines)
    assert rows["1"]["step"] == "+60.0" and rows["1"]["forward"] == "+60.0"
    assert rows["2"]["step"] == "+60.0" and rows["2"]["comm exposed"] == "+60.0"
    assert "  + error collective-straggler rank(s) 1: rank 1 <late>" in lines


def test_cli_json(tmp_path):
    old, new = _files(tmp_path)
    res = CliRunner().invoke(cli, ["diff", str(old), str(new), "--format", "json"])
    data = json.loads(res.output)
    assert data["schema"] == "traceanalyze.diff/1"
    job = {d["key"]: d for d in data["job"]}
    assert job["step_ms.worst_rank"]["change"] == pytest.approx(60.0)
    assert [f["rule"] for f in data["findings"]["added"]] == ["collective-straggler"]


class _Resources(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.urls = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.urls += [v for k, v in attrs if k in ("src", "href") and v]


def test_cli_html_is_self_contained_escaped_and_shows_ranks(tmp_path):
    old, new = _files(tmp_path)
    out = tmp_path / "out" / "diff.html"
    res = CliRunner().invoke(cli, ["diff", str(old), str(new), "--html", str(out)])
    assert res.exit_code == 0, res.output
    html = out.read_text()
    parser = _Resources()
    parser.feed(html)
    assert parser.urls == [] and "script" not in parser.tags and "link" not in parser.tags
    assert "rank 1 &lt;late&gt;" in html and "rank 1 <late>" not in html
    for rank in EVEN:
        assert f'id="rank-{rank}"' in html
    # bars are scaled to the widest step (160 ms): rank 1's new forward bar is 85/160 of the width
    section = html.split('id="rank-1"')[1].split("</section>")[0]
    widths = re.findall(r'class="ph-forward" style="width: ([0-9.]+)%"', section)
    assert [float(w) for w in widths] == [pytest.approx(100 * 25 / 160, abs=0.01),
                                          pytest.approx(100 * 85 / 160, abs=0.01)]


def test_cli_diff_bad_input_exit_2(tmp_path):
    old, _ = _files(tmp_path)
    res = CliRunner().invoke(cli, ["diff", str(old), str(tmp_path / "nope.json")])
    assert res.exit_code == 2
    res = CliRunner().invoke(cli, ["diff", str(old)])
    assert res.exit_code == 2


def test_scaled_summary_diff_matches_the_factor():
    old = make_summary({0: 80.0, 1: 120.0})
    diff = diff_summaries(old, scale_times(old, 1.3))
    for d in diff.job:
        if d.unit == "ms" and d.old:
            assert d.change_pct == pytest.approx(30.0)


# ---- two recorded runs, as trace folders, through the real command line ----------------------


def test_diff_of_two_recorded_trace_folders(tmp_path):
    html = tmp_path / "diff.html"
    proc = subprocess.run([sys.executable, "-m", "traceanalyze", "diff", str(FIXTURES / "balanced"),
                           str(FIXTURES / "compute_straggler"), "--html", str(html)],
                          capture_output=True, text=True, cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    # the runs were analyzed without writing anything the user did not ask for (only diff.html)
    assert [p.name for p in tmp_path.iterdir()] == ["diff.html"]

    def analyzed(name):  # each run on its own, by `traceanalyze DIR --format json`
        run = subprocess.run([sys.executable, "-m", "traceanalyze", str(FIXTURES / name), "--out",
                              str(tmp_path / "own" / name), "--quiet", "--format", "json"],
                             capture_output=True, text=True, check=True)
        return json.loads(run.stdout)

    old, new = analyzed("balanced"), analyzed("compute_straggler")
    lines = proc.stdout.splitlines()
    rows = _rank_table(lines)

    def phase(summary, rank, name):
        return next(r for r in summary["ranks"] if r["rank"] == rank)["metrics"]["phases_ms"][name]

    def own(summary, rank):
        return statistics.median(s["ms_by_rank"][str(rank)] for s in summary["steps"]["per_step"])

    # rank 1 (the straggler) computes more forward; the others wait in communication
    assert rows["1"]["own step"] == f"{own(new, 1) - own(old, 1):+.1f}"
    assert rows["1"]["forward"] == f"{phase(new, 1, 'forward') - phase(old, 1, 'forward'):+.1f}"
    assert phase(new, 1, "forward") - phase(old, 1, "forward") > 50
    for rank in (0, 2, 3):
        change = phase(new, rank, "comm_exposed") - phase(old, rank, "comm_exposed")
        assert rows[str(rank)]["comm exposed"] == f"{change:+.1f}" and change > 50
    added = [line for line in lines if line.startswith("  + ")]
    assert any(line.startswith("  + error collective-straggler rank(s) 1: ") for line in added)
    page = html.read_text()
    assert all(f'id="rank-{r}"' in page for r in range(4))
    assert "collective-straggler" in page
    # the output folders of those two runs compare the same, from their own summary.json
    # (their trace.shards/rank=N/manifest.json files are no traces)
    by_folder = subprocess.run([sys.executable, "-m", "traceanalyze", "diff", "--format", "json",
                                str(tmp_path / "own" / "balanced"), str(tmp_path / "own" / "compute_straggler")],
                               capture_output=True, text=True, cwd=tmp_path, check=False)
    assert by_folder.returncode == 0, by_folder.stderr
    by_summary = subprocess.run([sys.executable, "-m", "traceanalyze", "diff", "--format", "json",
                                 str(tmp_path / "own" / "balanced" / "summary.json"),
                                 str(tmp_path / "own" / "compute_straggler" / "summary.json")],
                                capture_output=True, text=True, cwd=tmp_path, check=True)
    assert json.loads(by_folder.stdout) == json.loads(by_summary.stdout)
    assert any((tmp_path / "own" / "balanced").rglob("manifest.json"))
