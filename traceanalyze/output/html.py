"""summary dict -> report.html: one self-contained file (inline CSS, JS and SVG; opens offline).

Templates see only `ReportContext` (below); every field documents itself. Jinja runs with
autoescape and StrictUndefined, so every trace string (kernel names contain `<` and `>`) is text.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shlex
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path

from markupsafe import Markup

from traceanalyze.output import charts as chartlib
from traceanalyze.output.evidence import EvidenceItem, evidence_items
from traceanalyze.output.group_charts import group_charts
from traceanalyze.output.presentation import is_gpu_trace, ordered_findings, rank_skew_pct
from traceanalyze.output.templating import render
from traceanalyze.output.units import (
    fmt_bytes,
    fmt_ms,
    fmt_pct,
    fmt_rank_count,
    fmt_ranks,
    fmt_steps,
)

MAX_EVENT_ROWS = 50


@dataclass(frozen=True)
class Kpi:
    """One headline number of the verdict band."""

    label: str
    value: str
    detail: str
    tone: str = ""  # "" | "bad" | "good"


@dataclass(frozen=True)
class FindingView:
    """One finding, ready to print."""

    anchor: str = field(metadata={"help": "HTML id of the finding's card, e.g. 'f1'"})
    rule: str = field(metadata={"help": "stable rule id, e.g. 'collective-straggler'"})
    severity: str = field(metadata={"help": "info | warning | error"})
    title: str = field(metadata={"help": "one-line statement of the problem, from the rule"})
    ranks: str = field(metadata={"help": "ranks concerned, compact ('2', '0-3, 5'), or 'all'"})
    steps: str = field(metadata={"help": "steps concerned, compact"})
    cost_ms: str = field(metadata={"help": "time lost per step, formatted"})
    cost_pct: str = field(metadata={"help": "share of the step, formatted"})
    cost_bar_pct: float = field(metadata={"help": "0-100, width of the cost bar"})
    has_cost: bool = field(metadata={"help": "the rule measured a cost in ms per step"})
    advice: list[tuple[str, str]] = field(metadata={"help": "advice blocks: ('p', text) or ('li', text)"})
    evidence: list[EvidenceItem] = field(metadata={
        "help": "the evidence for reading: values with units, nested values as lines, per-step series "
                "(output/evidence.py); NULL and empty values left out"})
    event_columns: list[str] = field(metadata={"help": "columns of the events table"})
    event_rows: list[list[str]] = field(metadata={"help": "the first MAX_EVENT_ROWS events, formatted"})
    event_hot: list[bool] = field(metadata={"help": "per shown event: it belongs to a rank the finding names"})
    events_total: int = field(metadata={"help": "how many events the finding carries"})
    sql: str = field(metadata={"help": "the SQL that reproduces the evidence ('' when none)"})
    sql_command: str = field(metadata={"help": "copyable shell command running that SQL on trace.duckdb"})


@dataclass(frozen=True)
class RankRow:
    """One row of the per-rank table."""

    rank: int
    file_name: str
    file: str
    clock_offset: str
    steps: int
    median: str
    p95: str
    max: str
    comm: str
    gpu_busy: str
    peak_memory: str
    hot: bool


@dataclass(frozen=True)
class EfficiencyView:
    """The efficiency section: rows of formatted cells (docs/efficiency.md explains the numbers)."""

    ranks: list[list[str]]       # rank, GPU, MFU, achieved, peak, counted, precision, note
    steps_header: list[str]      # "rank", then one column per aligned step shown
    steps: list[list[str]]       # MFU per rank and step
    ops: list[list[str]]         # rank, op, family, dtype, calls, TFLOP/s, kernel ms, roofline ms, lost ms
    bandwidth: list[tuple[list[str], float]]  # (cells, bar width % of the link) per op and size bucket
    path: list[list[str]]        # kind, rank, name, ms per step, % of the path


def _fmt_num(value, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _efficiency_view(summary: dict) -> EfficiencyView | None:
    eff = summary.get("efficiency")
    if not eff:
        return None
    ranks = [[str(r["rank"]), r["gpu"] or r["device_name"] or "—", fmt_pct(r["mfu_pct"]),
              _fmt_num(r["achieved_tflops"], 2), _fmt_num(r["peak_tflops"]), fmt_pct(r["counted_kernel_pct"]),
              r["dtype_mix"] or "—", r["note"] or ""] for r in eff["ranks"]]
    shown = sorted({s["step"] for s in eff["steps"]})[:12]
    by = {(s["rank"], s["step"]): s["mfu_pct"] for s in eff["steps"]}
    steps = [[str(rank)] + [fmt_pct(by.get((rank, st))) for st in shown]
             for rank in sorted({s["rank"] for s in eff["steps"]})] \
        if any(s["mfu_pct"] is not None for s in eff["steps"]) else []
    ops = [[str(o["rank"]), o["name"] or "(unknown op)", o["family"] or "", o["dtype"] or "", str(o["calls"]),
            _fmt_num(o["tflops"], 2), _fmt_num(o["kernel_ms"]), _fmt_num(o["roofline_ms"]), _fmt_num(o["lost_ms"])]
           for o in eff["top_ops"]]
    bandwidth = [([b["op"], f"{fmt_bytes(b['bytes_from'])} – {fmt_bytes(b['bytes_to'])}", str(b["count"]),
                   _fmt_num(b["median_busbw_gb_per_s"]), _fmt_num(b["max_busbw_gb_per_s"]),
                   _fmt_num(b["link_gb_per_s"], 0), b["layout"], fmt_pct(b["link_pct"])],
                  max(0.0, min(100.0, b["link_pct"] or 0.0))) for b in eff["bandwidth"]]
    path = [[p["kind"], str(p["on_rank"]), p["name"] or "", fmt_ms(p["ms_per_step"]), fmt_pct(p["pct_of_path"])]
            for p in eff["critical_path"]]
    if not (ops or bandwidth or path or any(r["mfu_pct"] is not None or r["achieved_tflops"] is not None
                                            for r in eff["ranks"])):
        return None
    return EfficiencyView(ranks, ["rank"] + [f"step {st}" for st in shown], steps, ops, bandwidth, path)


@dataclass(frozen=True)
class DimensionRow:
    """One parallelism dimension of the layout."""

    abbrev: str = field(metadata={"help": "'PP', 'DP', 'TP', ..."})
    name: str = field(metadata={"help": "'pipeline', 'data', 'tensor', ..."})
    size: int = field(metadata={"help": "ranks per group of the dimension"})
    source: str = field(metadata={"help": "what told the dimension: 'description' (pg_desc) or 'operations'"})
    groups: list[str] = field(metadata={"help": "its groups, 'name (desc): ranks', by lowest rank"})


@dataclass(frozen=True)
class GroupsView:
    """The "Process groups" section (docs/parallelism.md): the layout, lateness per dimension, the pipeline step."""

    layout: str = field(metadata={"help": "the layout in one line, e.g. '8 ranks = PP 2 x DP 2 x TP 2'"})
    dimensions: list[DimensionRow] = field(metadata={"help": "the layout's dimensions, outermost first"})
    charts: list[chartlib.Chart] = field(metadata={
        "help": "a lateness heatmap per dimension (two or more), then the pipeline's representative step"})


def _groups_view(summary: dict) -> GroupsView | None:
    """Shown for a job of two dimensions or more, or with a pipeline dimension."""
    layout = summary.get("layout")
    charts = group_charts(summary)
    if not layout or not charts:
        return None
    dims = [DimensionRow(d["abbrev"], d["name"], d["size"], d["source"],
                         [f"{g['name']}{' (' + g['desc'] + ')' if g.get('desc') else ''}: {fmt_ranks(g['ranks'])}"
                          for g in sorted(d["groups"], key=lambda g: (min(g["ranks"]) if g["ranks"] else -1, g["name"]))])
            for d in layout["dimensions"]]
    return GroupsView(layout["text"], dims, charts)


@dataclass(frozen=True)
class FlightRecorderView:
    """The report's Flight Recorder section: what the dumps are, and where each group stopped."""

    text: str                  # the dumps read: how many, of which ranks, how many groups
    frontiers: list[dict]      # summary flight_recorder.frontiers, the first cause first


def _flight_recorder_view(summary: dict) -> FlightRecorderView | None:
    fr = summary.get("flight_recorder")
    if not fr:
        return None
    ranks = fmt_ranks([d["rank"] for d in fr["dumps"]])
    text = (f"{len(fr['dumps'])} dumps (ranks {ranks}), {fr['groups_count']} process groups"
            + (f" ({fr['groups_inferred_count']} with members inferred from the entries)" if fr["groups_inferred_count"] else "")
            + (f"; {fr['stopped_groups_count']} stopped with members missing." if fr["stopped_groups_count"]
               else "; every group's members reached the same collective."))
    return FlightRecorderView(text, list(fr["frontiers"]))


@dataclass(frozen=True)
class ReportContext:
    """Everything report.html shows; the templates see nothing else."""

    title: str = field(metadata={"help": "page title: the trace folder's name"})
    trace_dir: str = field(metadata={"help": "the trace folder as given by the user"})
    tool_version: str = field(metadata={"help": "traceanalyze version that wrote the summary"})
    meta_line: str = field(metadata={"help": "ranks, steps and device in one line"})
    verdict: str = field(metadata={"help": "one sentence: the most costly finding, or that none was found"})
    verdict_severity: str = field(metadata={"help": "severity of the verdict: error | warning | info | ok"})
    kpis: list[Kpi] = field(metadata={"help": "headline numbers: step time median vs worst rank, steps, findings"})
    findings: list[FindingView] = field(metadata={"help": "findings ordered by cost, largest first"})
    severity_counts: dict[str, int] = field(metadata={"help": "number of findings per severity"})
    charts: list[chartlib.Chart] = field(metadata={"help": "inline SVG charts (geometry from charts.py)"})
    phase_legend: list[chartlib.LegendItem] = field(metadata={"help": "phase colours, shared by all charts"})
    ranks: list[RankRow] = field(metadata={"help": "per-rank metrics table"})
    load_issues: list[dict] = field(metadata={"help": "load_issues rows of the summary, unchanged"})
    db_path: str = field(metadata={"help": "path of trace.duckdb as the user would type it"})
    example_commands: list[str] = field(metadata={"help": "commands to explore the database further"})
    css: Markup = field(metadata={"help": "the stylesheet, inlined"})
    js: Markup = field(metadata={"help": "the script (copy buttons), inlined"})
    script_hash: str = field(metadata={"help": "CSP 'sha256-...' of `js`: only the report's own script may run"})
    efficiency: EfficiencyView | None = field(default=None, metadata={
        "help": "MFU per rank and step, ops losing most time to their roofline, bus bandwidth per size, critical path (None when nothing to show)"})
    groups: GroupsView | None = field(default=None, metadata={
        "help": "the process groups section: layout, lateness heatmap per dimension, pipeline step (None for a job of one dimension without a pipeline)"})
    ranks_note: str = field(default="", metadata={
        "help": "for a big job: which ranks the table shows, and the distribution over all ranks"})
    flight_recorder: FlightRecorderView | None = field(default=None, metadata={
        "help": "the Flight Recorder section: the dumps, and where each process group stopped (None without dumps)"})


def _asset(name: str) -> Markup:
    text = resources.files("traceanalyze.output").joinpath("templates", name).read_text(encoding="utf-8")
    return Markup(text)


def _csp_hash(script: str) -> str:
    """The CSP source allowing exactly this inline script (deterministic, unlike a nonce)."""
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")


def sql_command(db_path: str, sql: str) -> str:
    """A shell command running `sql` on the database: one line, double quotes when safe to paste."""
    lines = [line for line in sql.strip().splitlines() if not line.strip().startswith("--")]
    text = "\n".join(lines).strip().rstrip(";").strip()
    if "--" not in text:  # no comment left that a newline would end
        text = " ".join(text.split())
    quoted = f'"{text}"' if not any(c in text for c in '"\\$`!') else shlex.quote(text)
    return f"traceanalyze sql {shlex.quote(db_path)} {quoted}"


def _cell(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 1e15 else f"{value:g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    return str(value)


def _advice_blocks(advice: str) -> list[tuple[str, str]]:
    blocks: list[tuple[str, str]] = []
    for line in (advice or "").splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped[:2] in ("- ", "* "):
            blocks.append(("li", stripped[2:]))
        elif blocks and blocks[-1][0] == "p" and line.startswith(" "):
            blocks[-1] = ("p", blocks[-1][1] + " " + stripped)
        else:
            blocks.append(("p", stripped))
    return blocks


def _finding_view(i: int, f: dict, db_path: str, n_ranks: int) -> FindingView:
    evidence = {k: v for k, v in (f.get("evidence") or {}).items() if k != "events"}
    events = (f.get("evidence") or {}).get("events") or []
    columns: list[str] = []
    for row in events:
        columns += [k for k in row if k not in columns]
    cost = f.get("cost") or {}
    pct = cost.get("pct_of_step")
    ranks = f.get("ranks") or []
    return FindingView(
        anchor=f"f{i + 1}", rule=f["rule"], severity=f["severity"], title=f["title"],
        ranks="all" if n_ranks > 1 and len(set(ranks)) == n_ranks else fmt_ranks(ranks),
        steps=fmt_steps(f.get("steps") or []),
        cost_ms=fmt_ms(cost.get("ms_per_step")), cost_pct=fmt_pct(pct),
        cost_bar_pct=min(max(pct or 0.0, 0.0), 100.0), has_cost=cost.get("ms_per_step") is not None,
        advice=_advice_blocks(f.get("advice") or ""),
        evidence=evidence_items(evidence, chart_id=f"f{i + 1}"),
        event_columns=columns,
        event_rows=[[_cell(row.get(c)) for c in columns] for row in events[:MAX_EVENT_ROWS]],
        event_hot=[0 < len(set(ranks)) < n_ranks and row.get("rank") in ranks for row in events[:MAX_EVENT_ROWS]],
        events_total=len(events),
        sql=(f.get("sql") or "").strip(),
        sql_command=sql_command(db_path, f["sql"]) if f.get("sql") else "",
    )


def _kpis(summary: dict, ordered: list[dict]) -> list[Kpi]:
    st = summary["steps"]
    median, worst = st.get("median_rank_step_ms"), st.get("worst_rank_step_ms")
    slower = rank_skew_pct(summary)
    kpis = [Kpi("Median rank step", fmt_ms(median), "own step time: without waiting for other ranks")]
    if len(summary["ranks"]) > 1 and st.get("worst_rank") is not None:
        tone = "bad" if slower is not None and slower >= 5 else ""
        detail = f"{fmt_ms(worst)} per step" + (f", {slower:+.1f}% vs median" if slower is not None else "")
        kpis.append(Kpi("Worst rank", f"rank {st['worst_rank']}", detail, tone))
    aligned = st.get("aligned") or []
    where = f" on all {len(summary['ranks'])} ranks analysed" if len(summary["ranks"]) > 1 else ""
    kpis.append(Kpi("Steps compared" if where else "Steps", str(len(aligned)), f"steps {fmt_steps(aligned)}{where}"))
    costed = [f for f in ordered if (f.get("cost") or {}).get("ms_per_step") is not None]
    if costed:
        costliest = max(costed, key=lambda f: f["cost"]["ms_per_step"])  # the first of equals, in finding order
        cost = costliest["cost"]
        kpis.append(Kpi("Biggest cost", fmt_ms(cost["ms_per_step"]) + "/step",
                        f"{fmt_pct(cost.get('pct_of_step'))} of the step · {costliest['rule']}", "bad"))
    elif ordered:
        kpis.append(Kpi("Findings", str(len(ordered)), "none with a cost in time per step"))
    else:
        kpis.append(Kpi("Findings", "0", "no rule fired", "good"))
    return kpis


def _ranks_note(summary: dict) -> str:
    """A big job's table shows some ranks; this says which, and the spread over all of them."""
    shown = chartlib.rank_list(summary)
    if len(shown) == len(summary["ranks"]):
        return ""
    dist = (summary.get("rank_distribution") or {}).get("step_time_ms") or {}
    spread = (f"; median step over all ranks {fmt_ms(dist.get('median'))}, p90 {fmt_ms(dist.get('p90'))}, "
              f"max {fmt_ms(dist.get('max'))}") if dist else ""
    return (f"{len(shown)} of {len(summary['ranks'])} ranks: those named by findings, the slowest, the median "
            f"and the fastest{spread}. Every rank: the ranks and steps tables of the database.")


def _rank_rows(summary: dict) -> list[RankRow]:
    hot = chartlib.hot_ranks(summary)
    shown = set(chartlib.rank_list(summary))
    rows = []
    for r in (r for r in summary["ranks"] if r["rank"] in shown):
        m = r["metrics"]
        st = m["step_time_ms"]
        offset = r.get("clock_offset_ns")
        rows.append(RankRow(
            rank=r["rank"], file_name=Path(r.get("file") or "").name, file=r.get("file") or "",
            clock_offset="—" if offset is None else f"{offset / 1e6:+.3f} ms", steps=m["steps"],
            median=fmt_ms(st.get("median")), p95=fmt_ms(st.get("p95")), max=fmt_ms(st.get("max")),
            comm=fmt_ms(m.get("comm_ms_per_step")), gpu_busy=fmt_pct(m.get("gpu_busy_pct")),
            peak_memory=fmt_bytes(m.get("peak_memory_bytes")), hot=r["rank"] in hot))
    return rows


def _meta_line(summary: dict) -> str:
    gpu = is_gpu_trace(summary)
    aligned = summary["steps"].get("aligned") or []
    layout = summary.get("layout")
    shape = f" · {layout['text']}" if layout and [d["abbrev"] for d in layout["dimensions"]] != ["DP"] else ""
    return (f"{fmt_rank_count(len(summary['ranks']), summary['world_size'])} · "
            f"{len(aligned)} aligned step{'s' if len(aligned) != 1 else ''} ({fmt_steps(aligned)}) · "
            f"{'GPU' if gpu else 'CPU-only'} trace{shape}")


def _verdict(ordered: list[dict]) -> tuple[str, str]:
    serious = [f for f in ordered if f["severity"] in ("error", "warning")]
    if serious:
        return serious[0]["title"], serious[0]["severity"]
    if ordered:
        return ordered[0]["title"], "info"
    return "No problem found: no rule fired on this trace.", "ok"


def build_context(summary: dict, db_path: str) -> ReportContext:
    """The report's context from a summary dict (the summary.json contract)."""
    ordered = ordered_findings(summary)
    js = _asset("report.js")
    verdict, verdict_severity = _verdict(ordered)
    counts = {s: sum(1 for f in ordered if f["severity"] == s) for s in ("error", "warning", "info")}
    name = Path(summary["trace_dir"].rstrip("/")).name or summary["trace_dir"]
    return ReportContext(
        title=name, trace_dir=summary["trace_dir"], tool_version=summary["tool_version"],
        meta_line=_meta_line(summary), verdict=verdict, verdict_severity=verdict_severity,
        kpis=_kpis(summary, ordered),
        findings=[_finding_view(i, f, db_path, len(summary["ranks"])) for i, f in enumerate(ordered)],
        severity_counts=counts, charts=chartlib.build_charts(summary), phase_legend=chartlib.phase_legend(),
        ranks=_rank_rows(summary), load_issues=list(summary["load_issues"]), db_path=db_path,
        example_commands=[
            f"traceanalyze sql {shlex.quote(db_path)} --schema",
            f'traceanalyze sql {shlex.quote(db_path)} "SELECT rank, step, dur_ns / 1e6 AS ms FROM steps ORDER BY step, rank"',
            f'traceanalyze sql {shlex.quote(db_path)} "SELECT rank, step, op, seq, dur_ns / 1e6 AS ms FROM collectives ORDER BY seq, rank"',
        ],
        css=_asset("report.css"), js=js, script_hash=_csp_hash(js), ranks_note=_ranks_note(summary),
        efficiency=_efficiency_view(summary), groups=_groups_view(summary),
        flight_recorder=_flight_recorder_view(summary),
    )


def render_html(context: ReportContext) -> str:
    return render("report.html", ctx=context)


def write_html(summary: dict, out_path: Path, db_path: str) -> Path:
    """Render the report for `summary` into `out_path` (one file)."""
    from traceanalyze.atomic import write_text_atomic

    write_text_atomic(out_path, render_html(build_context(summary, db_path)))
    return out_path


def undocumented_fields() -> list[str]:
    """Context fields without help text (a contract test keeps this empty)."""
    return [f"{cls.__name__}.{f.name}" for cls in (ReportContext, FindingView, EvidenceItem, GroupsView, DimensionRow)
            for f in fields(cls) if not f.metadata.get("help")]
