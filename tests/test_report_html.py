"""report.html: one self-contained file, findings first by severity then cost, charts present, every trace string escaped."""

from __future__ import annotations

import base64
import copy
import hashlib
import re
import shlex
from html.parser import HTMLParser

import duckdb
import pytest
from report_helpers import FIXTURES, IMG, SCRIPT, hostile_summary, injected

from traceanalyze.output.html import build_context, render_html, sql_command, undocumented_fields
from traceanalyze.output.presentation import ordered_findings
from traceanalyze.output.units import fmt_ms

DB_SHOWN = "reports/input_straggler/trace.duckdb"


class _Elements(HTMLParser):
    """Collects (tag, attrs, text-so-far) of a page: enough to check structure without a browser."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def parse(html: str) -> _Elements:
    p = _Elements()
    p.feed(html)
    return p


@pytest.fixture(scope="module")
def straggler(fixture_summary) -> dict:
    return fixture_summary(FIXTURES / "input_straggler", "fixtures/ddp/input_straggler")


@pytest.fixture(scope="module")
def page(straggler) -> str:
    return render_html(build_context(straggler, DB_SHOWN))


def test_every_context_field_is_documented():
    assert undocumented_fields() == []


def test_report_is_self_contained(page):
    doc = parse(page)
    fetching = [(t, a) for t, a in doc.tags
                if t in ("link", "img", "iframe", "object", "embed") or (t == "script" and "src" in a)]
    assert fetching == []
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert not re.search(r"@import|url\(\s*['\"]?https?:", page)
    assert sum(1 for t, _ in doc.tags if t == "style") == 1


def test_findings_come_first_ordered_by_severity_then_cost(straggler):
    base = straggler["findings"][0]
    many = dict(straggler, findings=[
        dict(base, severity=sev, title=f"{sev} finding costing {ms} ms", cost={"ms_per_step": ms, "pct_of_step": None})
        for sev, ms in (("warning", 3.0), ("error", None), ("info", 90.0), ("error", 12.0), ("warning", 40.0))])
    page = render_html(build_context(many, DB_SHOWN))
    doc = parse(page)
    cards = [a["id"] for t, a in doc.tags if t == "article" and "finding" in a.get("class", "")]
    assert len(cards) == 5
    # errors first (the one with a cost before the one without), then warnings by cost, then info
    # however large its cost
    expected = [("error", 12.0), ("error", None), ("warning", 40.0), ("warning", 3.0), ("info", 90.0)]
    positions = [page.index(f"{sev} finding costing {ms} ms") for sev, ms in expected]
    assert positions == sorted(positions)
    assert page.index('id="findings"') < page.index('id="charts"')


def test_the_injected_straggler_is_the_verdict_and_is_highlighted(straggler, page):
    rank = injected("input_straggler")["rank"]
    top = build_context(straggler, DB_SHOWN)
    assert f"rank {rank}" in top.verdict
    timeline = page[page.index('id="chart-timeline"'):page.index("</svg>", page.index('id="chart-timeline"'))]
    assert f'class="lbl lbl-hot" text-anchor="end">rank {rank}<' in timeline


def test_each_finding_shows_evidence_events_sql_and_advice(straggler, page):
    assert straggler["findings"], "the input straggler scenario should produce findings"
    text = "".join(parse(page).text)
    for f in straggler["findings"]:
        assert f["title"] in text
        if f.get("sql"):
            assert sql_command(DB_SHOWN, f["sql"]) in text
        for line in (f.get("advice") or "").splitlines():
            assert line.strip().lstrip("-* ") in text
        for key, value in (f.get("evidence") or {}).items():
            if key != "events" and isinstance(value, str):
                assert value in text
        for event in ((f.get("evidence") or {}).get("events") or [])[:5]:
            for value in event.values():
                if isinstance(value, (str, int)) and not isinstance(value, bool):
                    assert str(value) in text


def test_charts_present_for_cpu_trace_with_memory(straggler, page):
    ids = {a.get("id") for t, a in parse(page).tags if t == "svg"}
    expected = {"chart-timeline", "chart-step-times", "chart-lateness", "chart-phases"}
    if straggler["memory"]:
        expected.add("chart-memory")
    assert expected <= ids


def test_timeline_has_a_row_per_rank_and_a_column_per_step(straggler, page):
    start = page.index('id="chart-timeline"')
    svg = page[start:page.index("</svg>", start)]
    for r in straggler["ranks"]:
        assert f">rank {r['rank']}<" in svg
    for step in straggler["steps"]["aligned"][:12]:
        assert f">step {step}<" in svg
    step_bars = svg.count('class="tl-step"')
    assert step_bars == len([t for t in straggler["timeline"] if t["step"] in straggler["steps"]["aligned"][:12]])


def test_hostile_trace_strings_stay_text(straggler):
    page = render_html(build_context(hostile_summary(straggler), DB_SHOWN))
    doc = parse(page)
    assert SCRIPT not in page and IMG not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert sum(1 for t, _ in doc.tags if t == "script") == 1  # only the report's own script
    assert not [a for t, a in doc.tags if t == "img" or any(k.startswith("on") for k in a)]
    text = "".join(doc.text)
    assert f"kernel {SCRIPT} is tiny" in text  # shown to the reader as the literal name
    assert f"file ends abruptly {SCRIPT}" in text


def test_only_the_reports_own_script_may_run(page):
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1)
    allowed = re.search(r"script-src '(sha256-[^']+)'", csp).group(1)
    script = re.search(r"<script>(.*?)</script>", page, re.S).group(1)
    assert "default-src 'none'" in csp
    assert allowed == "sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()


def test_report_is_deterministic(straggler):
    assert render_html(build_context(straggler, DB_SHOWN)) == render_html(build_context(straggler, DB_SHOWN))


def test_load_issues_are_visible(straggler):
    s = dict(straggler, load_issues=[{"rank": 3, "file": "rank3.json", "kind": "truncated",
                                      "severity": "warning", "message": "file ends abruptly at byte 1,024",
                                      "count": None}])
    page = render_html(build_context(s, DB_SHOWN))
    section = page[page.index('id="load-issues"'):page.index('id="explore"')]
    assert "file ends abruptly at byte 1,024" in section and "truncated" in section


def test_a_trace_without_findings_says_so(straggler):
    page = render_html(build_context(dict(straggler, findings=[]), DB_SHOWN))
    assert "No rule fired on this trace" in page
    assert "No problem found" in page


@pytest.mark.parametrize("sql", [
    "SELECT rank, step FROM steps WHERE rank = 1 ORDER BY step",
    "-- steps of rank 1\nSELECT \"rank\", step FROM steps\nWHERE rank::VARCHAR NOT LIKE '$x%' -- odd chars\nORDER BY 2;",
    "SELECT 'it''s' AS q, `step` FROM steps WHERE rank = 0 AND 1 <> 2 ORDER BY step;",
])
def test_copyable_command_runs_the_same_query(sql, balanced_db):
    argv = shlex.split(sql_command("reports/my run/trace.duckdb", sql))
    assert argv[:3] == ["traceanalyze", "sql", "reports/my run/trace.duckdb"]
    assert len(argv) == 4
    con = duckdb.connect(str(balanced_db), read_only=True)
    try:
        assert con.execute(argv[3]).fetchall() == con.execute(sql).fetchall()
    finally:
        con.close()


def test_a_256_rank_job_stays_a_small_readable_page():
    from summary_builder import finding, make_summary

    step_ms = {r: 100.0 + (r % 7) for r in range(256)}
    step_ms[201] = 190.0
    s = make_summary(step_ms, findings=[finding("collective-straggler", ranks=[201], ms_per_step=90.0)])
    s["steps"]["lateness_ms"] = [{"step": st, "rank": r, "late_ms": 90.0 if r == 201 else 1.0}
                                 for st in s["steps"]["aligned"] for r in range(256)]
    page = render_html(build_context(s, DB_SHOWN))
    assert len(page) < 2_000_000
    for chart in ("chart-timeline", "chart-phases"):
        start = page.index(f'id="{chart}"')
        svg = page[start:page.index("</svg>", start)]
        labels = re.findall(r"<text[^>]*>rank (\d+)</text>", svg)
        assert "201" in labels  # the straggler is never left out
        assert 8 <= len(labels) <= 32
    # the heatmap bins consecutive ranks into at most 32 rows; the straggler's row is one of them
    start = page.index('id="chart-lateness"')
    svg = page[start:page.index("</svg>", start)]
    bins = [(int(lo), int(hi)) for lo, hi in re.findall(r"<text[^>]*>ranks (\d+)-(\d+)</text>", svg)]
    assert 8 <= len(bins) <= 32 and bins[0][0] == 0 and bins[-1][1] == 255
    assert any(lo <= 201 <= hi for lo, hi in bins)
    assert "showing 32 of 256 ranks" in page or "of 256 ranks" in page


class _Evidence(HTMLParser):
    """The evidence blocks of a page: per finding, (label, text of its value) pairs and the SVG shapes inside."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[list[list[str]]] = []
        self.bars: list[int] = []
        self.rows: list[int] = []
        self.depth = 0
        self.where = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section" and a.get("class") == "evidence":
            self.depth = 1
            self.blocks.append([])
            self.bars.append(0)
            self.rows.append(0)
        elif self.depth:
            if tag == "section":
                self.depth += 1
            if tag == "dt":
                self.blocks[-1].append(["", ""])
                self.where = "dt"
            elif tag == "dd" and self.where == "dt":
                self.where = "dd"
            elif tag in ("li", "td", "th") and self.where == "dd":
                self.blocks[-1][-1][1] += " "
            elif tag == "rect" and "series-bar" in a.get("class", ""):
                self.bars[-1] += 1
            elif tag == "tr":
                self.rows[-1] += 1

    def handle_endtag(self, tag):
        if self.depth and tag == "section":
            self.depth -= 1
        if tag == "dl":
            self.where = ""

    def handle_data(self, data):
        if self.depth and self.where and self.blocks[-1]:
            self.blocks[-1][-1][0 if self.where == "dt" else 1] += data


def evidence_blocks(page: str) -> _Evidence:
    p = _Evidence()
    p.feed(page)
    return p


@pytest.fixture(scope="module")
def region_summary(fixture_summary) -> dict:
    return fixture_summary(FIXTURES.parent / "parallel" / "fsdp2_annotated_input_straggler",
                           "fixtures/parallel/fsdp2_annotated_input_straggler")


@pytest.fixture(scope="module")
def periodic_summary(fixture_summary) -> dict:
    return fixture_summary(FIXTURES / "periodic_host_end", "fixtures/ddp/periodic_host_end")


def _values(block: list[list[str]]) -> dict[str, str]:
    return {label.strip(): " ".join(value.split()) for label, value in block}


@pytest.mark.parametrize("which", ["region_summary", "periodic_summary"])
def test_evidence_reads_as_values_with_units(which, request):
    summary = request.getfixturevalue(which)
    page = render_html(build_context(summary, DB_SHOWN))
    blocks = evidence_blocks(page).blocks
    assert len(blocks) == len(summary["findings"]) > 0
    for f, block in zip(ordered_findings(summary), blocks):
        shown = _values(block)
        text = " ".join(f"{k} {v}" for k, v in shown.items())
        # nothing empty, NULL or dumped as JSON
        assert not re.search(r"\bNone\b|\bNULL\b|[{}\[\]]|\bnull\b", text), text
        assert all(v for v in shown.values()), shown
        for key, value in f["evidence"].items():
            if value is None or value == "" or value == [] or key.endswith(("_text", "_note", "_advice")):
                assert key.replace("_", " ") not in shown and key not in shown
        # times carry their unit, the ms of the summary to the shown precision
        for key, value in f["evidence"].items():
            if key.endswith("_ms") and isinstance(value, (int, float)) and value is not None:
                assert shown[key[:-3].replace("_", " ")] == fmt_ms(value)


def test_a_code_region_is_readable_lines(region_summary):
    page = render_html(build_context(region_summary, DB_SHOWN))
    ordered = ordered_findings(region_summary)
    i = next(i for i, f in enumerate(ordered) if f["evidence"].get("region"))   # the straggler's block
    f = ordered[i]
    region = f["evidence"]["region"]
    shown = _values(evidence_blocks(page).blocks[i])
    assert shown["region"] == (f"name: {region['name']} kind: {region['kind']} "
                               f"excess per step: {fmt_ms(region['excess_ms_per_step'])} idle: {region['idle_pct']:.0f}%")


def test_a_per_step_series_is_a_small_chart_and_a_table(periodic_summary):
    page = render_html(build_context(periodic_summary, DB_SHOWN))
    ordered = ordered_findings(periodic_summary)
    i = next(i for i, f in enumerate(ordered) if f["evidence"].get("per_step"))
    per_step = ordered[i]["evidence"]["per_step"]
    ev = evidence_blocks(page)
    assert ev.bars[i] == len(per_step)           # one bar per step
    assert ev.rows[i] == len(per_step) + 1       # the table: a header and a row per step
    for row in per_step:
        assert f"<title>step {row['step']}: {fmt_ms(row['held_ms'])}</title>" in page


def test_evidence_strings_are_escaped(region_summary):
    s = copy.deepcopy(region_summary)
    evidence = next(f["evidence"] for f in s["findings"] if f["evidence"].get("region"))
    evidence["region"]["name"] = SCRIPT
    evidence["per_step"] = [{"step": 3, "held_ms": 5.0, "cause": IMG}]
    page = render_html(build_context(s, DB_SHOWN))
    assert SCRIPT not in page and IMG not in page
    assert "name: &lt;script&gt;alert(1)&lt;/script&gt;" in page
