"""The Python API used as a notebook user would: analyze a recorded run, look at findings,
query, compare with what the command line writes for the same traces."""

from __future__ import annotations

import glob
import gzip
import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

import traceanalyze
from traceanalyze.compare.diff import diff_summaries

ROOT = Path(__file__).resolve().parent.parent
STRAGGLER = ROOT / "fixtures" / "ddp" / "input_straggler"
BALANCED = ROOT / "fixtures" / "ddp" / "balanced"
SCALING = [ROOT / "fixtures" / "ddp" / f"scaling_ws{n}" for n in (1, 2, 4)]


def cli_json(*args) -> dict:
    proc = subprocess.run([sys.executable, "-m", "traceanalyze", *map(str, args)], capture_output=True,
                          text=True, check=True)
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def straggler(tmp_path_factory, fixture_db):
    """The run analysed by the API (its database the session's shared one), and the summary.json
    the command line writes for it."""
    cli_summary = cli_json(STRAGGLER, "--out", tmp_path_factory.mktemp("cli"), "--quiet", "--format", "json",
                           "--no-html")
    a = traceanalyze.analyze(STRAGGLER, db=fixture_db(STRAGGLER), progress=False)
    yield a, cli_summary
    a.close()


def test_analyze_writes_nothing_and_removes_its_temporary_database(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a = traceanalyze.analyze(STRAGGLER, progress=False)
    assert a.db_path.is_file()
    assert list(tmp_path.iterdir()) == []
    a.close()
    assert not a.db_path.exists() and not a.db_path.parent.exists()
    with pytest.raises(traceanalyze.TraceError, match="closed"):
        a.sql("SELECT 1")


def test_the_same_findings_and_summary_as_the_command_line(straggler):
    a, cli_summary = straggler
    assert [f.to_dict() for f in a.findings] == cli_summary["findings"]
    assert a.summary.to_dict() == cli_summary
    worst = a.findings[0]
    assert (worst.rule, worst.severity, worst.ranks) == ("collective-straggler", "error", (2,))
    assert worst.evidence["cause"] == "input"
    assert isinstance(worst.cost, traceanalyze.Cost) and worst.cost.ms_per_step > 100


def test_verdict_is_what_the_terminal_prints(straggler, tmp_path):
    a, _ = straggler
    proc = subprocess.run([sys.executable, "-m", "traceanalyze", STRAGGLER, "--out", tmp_path, "--quiet"],
                          capture_output=True, text=True, check=True)
    assert proc.stdout.startswith(a.verdict.rstrip("\n") + "\n\n")
    assert "rank 2" in a.verdict and "input" in a.verdict and "\x1b[" not in a.verdict


def test_sql_and_table_agree_with_the_trace_files(straggler):
    a, _ = straggler
    files = sorted(Path(p).name for p in glob.glob(str(STRAGGLER / "*.pt.trace.json*")))
    ranks = a.table("ranks")
    assert sorted(Path(f).name for f in ranks["file"].to_list()) == files
    # ProfilerStep#N events per rank, counted straight from the JSON
    expected = {}
    for path in STRAGGLER.glob("*.pt.trace.json*"):
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as fh:
            trace = json.load(fh)
        rank = trace["distributedInfo"]["rank"]
        expected[rank] = sum(1 for e in trace["traceEvents"]
                             if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"))
    got = a.sql("SELECT rank, count(*) AS n FROM steps GROUP BY rank ORDER BY rank")
    assert dict(zip(got["rank"].to_list(), got["n"].to_list())) == expected
    bound = a.sql("SELECT count(*) AS n FROM steps WHERE rank = ?", [2])
    assert bound["n"][0] == expected[2]
    with pytest.raises(traceanalyze.TraceError, match="no table"):
        a.table("steps; DROP TABLE steps")
    with pytest.raises(traceanalyze.TraceError, match="query failed"):
        a.sql("SELECT nonsense FROM nowhere")


def test_sql_is_read_only_and_writes_no_file(straggler, tmp_path):
    a, _ = straggler
    out = tmp_path / "steps.parquet"
    for statement in (f"COPY steps TO '{out}' (FORMAT parquet)", f"EXPORT DATABASE '{tmp_path / 'x'}'",
                      f"SELECT 1; COPY (SELECT 1) TO '{out}'"):
        with pytest.raises(traceanalyze.TraceError, match="query refused: (COPY|EXPORT) is not a read-only"):
            a.sql(statement)
    assert list(tmp_path.iterdir()) == []
    assert a.sql("EXPLAIN SELECT count(*) FROM steps").height > 0


def test_evidence_reproduces_the_finding(straggler):
    a, _ = straggler
    worst = a.findings[0]
    rows = a.evidence(worst)
    assert rows.to_dicts() == list(worst.evidence["events"])
    assert a.evidence("collective-straggler").equals(rows) and a.evidence(0).equals(rows)


def test_repr_html_shows_verdict_findings_and_timeline(straggler):
    a, _ = straggler
    page = a._repr_html_()
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "collective-straggler" in page and "<svg" in page and 'id="chart-timeline"' in page
    from markupsafe import escape  # (the templates' escaping: ' as &#39;)

    assert str(escape(a.findings[0].title)) in page  # the title, escaped as HTML text


def test_repr_html_escapes_strings_from_the_trace():
    from traceanalyze.output.notebook import render_analysis_html

    summary = json.loads((ROOT / "reports" / "examples" / "input_straggler" / "summary.json").read_text())
    summary["findings"][0]["title"] = "<img src=x onerror=alert(1)>"
    summary["trace_dir"] = "runs/<b>x</b>"
    page = render_analysis_html(summary)
    assert "<img" not in page and "<b>x" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page


def test_write_report_writes_what_the_command_line_writes(straggler, tmp_path):
    a, cli_summary = straggler
    paths = a.write_report(tmp_path / "out")
    assert json.loads(paths.summary_json.read_text()) == cli_summary
    assert paths.report_html.read_text().startswith("<!doctype html>") or "<html" in paths.report_html.read_text()
    assert paths.perfetto_trace is None


def test_a_kept_database_is_reused(tmp_path):
    db = tmp_path / "keep" / "trace.duckdb"
    with traceanalyze.analyze(STRAGGLER, db=db, progress=False) as a:
        first = a.summary.to_dict()
    assert db.is_file()
    seen = []
    with traceanalyze.analyze(STRAGGLER, db=db, progress=seen.append) as again:
        assert again.summary.to_dict() == first
    assert any(m.startswith("reusing") for m in seen)


def test_params_change_a_threshold(fixture_db):
    with traceanalyze.analyze(STRAGGLER, db=fixture_db(STRAGGLER), progress=False) as a:
        late_ms = a.findings[0].evidence["late_ms"]
    above = {"collective-straggler.min_late_ms": late_ms * 2}
    with traceanalyze.analyze(STRAGGLER, db=fixture_db(STRAGGLER), params=above, progress=False) as quiet:
        assert "collective-straggler" not in [f.rule for f in quiet.findings]
    with pytest.raises(traceanalyze.TraceError, match="no_such"):
        traceanalyze.analyze(STRAGGLER, params={"collective-straggler.no_such": 1})


def test_bad_input_is_a_catchable_trace_error(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(traceanalyze.TraceError) as info:
        traceanalyze.analyze(missing, progress=False)
    assert info.value.path == str(missing)
    assert not isinstance(info.value, click.ClickException)
    assert traceanalyze.TraceanalyzeError is traceanalyze.TraceError
    broken = tmp_path / "rank0.pt.trace.json"
    broken.write_text("this is not JSON")
    with pytest.raises(traceanalyze.TraceError) as info:
        traceanalyze.analyze(broken, progress=False)
    assert str(broken) in str(info.value)
    proc = subprocess.run([sys.executable, "-m", "traceanalyze", str(missing)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith(f"error: {missing}: ")


def test_summary_load_validates_and_round_trips(tmp_path):
    for path in sorted((ROOT / "reports" / "examples").glob("*/summary.json")):
        data = json.loads(path.read_text())
        assert traceanalyze.Summary.load(path).to_dict() == data
    data = next(d for d in (json.loads(p.read_text()) for p in sorted(
        (ROOT / "reports" / "examples").glob("*/summary.json"))) if d["findings"])
    data["added_by_a_later_version"] = {"x": 1}
    data["findings"][0]["confidence"] = 0.9
    assert traceanalyze.Summary.from_dict(data).to_dict() == data
    bad = tmp_path / "summary.json"
    data["world_size"] = "four"
    bad.write_text(json.dumps(data))
    with pytest.raises(traceanalyze.TraceError, match="world_size") as info:
        traceanalyze.Summary.load(bad)
    assert info.value.path == str(bad)


def test_diff_of_analyses_is_the_diff_of_their_summaries(straggler, tmp_path, fixture_db):
    a, cli_summary = straggler
    balanced = cli_json(BALANCED, "--out", tmp_path, "--quiet", "--format", "json", "--no-html")
    with traceanalyze.analyze(BALANCED, db=fixture_db(BALANCED), progress=False) as b:
        got = traceanalyze.diff(b, a).to_dict()
    assert got == diff_summaries(balanced, cli_summary).to_dict()
    assert traceanalyze.diff(traceanalyze.Summary.from_dict(balanced), cli_summary).to_dict() == got


def test_diff_of_summary_files_runs_without_the_command_line_layer(tmp_path):
    """The library reads summary.json files itself: `traceanalyze.diff(path, path)` in a fresh
    interpreter loads neither click commands nor cli.py, and names what moved."""
    old = ROOT / "reports" / "examples" / "balanced" / "summary.json"
    new = ROOT / "reports" / "examples" / "input_straggler" / "summary.json"
    code = ("import sys, json, traceanalyze\n"
            f"d = traceanalyze.diff({str(old)!r}, {str(new)!r}).to_dict()\n"
            "cli = sorted(m for m in sys.modules if m == 'traceanalyze.cli' or m.startswith('traceanalyze.commands'))\n"
            "print(json.dumps({'cli': cli, 'added': [[f['rule'], sorted(f['ranks'])] for f in d['findings']['added']]}))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    got = json.loads(proc.stdout)
    assert got["cli"] == []
    def keys(path):  # a finding is the same finding when its rule and ranks are
        return [[f["rule"], sorted(f["ranks"])] for f in json.loads(path.read_text())["findings"]]
    expected = [k for k in keys(new) if k not in keys(old)]
    assert expected and got["added"] == expected


def test_scaling_of_analyses_matches_the_command_line(fixture_db):
    expected = cli_json("scaling", *SCALING, "--format", "json", "--quiet")
    runs = [traceanalyze.analyze(d, db=fixture_db(d), progress=False) for d in SCALING]
    try:
        assert traceanalyze.scaling(runs).to_dict() == expected
    finally:
        for r in runs:
            r.close()
    assert traceanalyze.scaling(SCALING).to_dict() == expected


def test_analyze_from_a_script_read_on_stdin(tmp_path):
    """`python3 - <<EOF ... EOF` (a script with no file): the map workers must not try to run
    the script again (they died at start and every rank failed); the analysis finds the
    straggler, as from a file."""
    script = ("import traceanalyze\n"
              f"a = traceanalyze.analyze({str(STRAGGLER)!r}, progress=False)\n"
              "print(len(a.summary.ranks), sorted({f.rule for f in a.findings}))\n")
    r = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, cwd=tmp_path,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    ranks, rules = r.stdout.strip().split(" ", 1)
    assert int(ranks) == len(list(STRAGGLER.glob("rank*.json.gz")))
    assert "straggler" in rules
