"""Stage 6 for `traceanalyze scaling`: a ScalingReport -> a terminal table, or one self-contained HTML page.

The HTML page draws two inline SVG charts from the report (throughput vs world size against
linear scaling; time per step by phase against the ideal step time). Geometry is computed here
from numbers only; `templates/scaling.html` writes the markup with jinja autoescape on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources

from traceanalyze.version import __version__
from traceanalyze.output.charts import Chart, Circle, LegendItem, Line, Polyline, Rect, Text
from traceanalyze.output.templating import render
from traceanalyze.output.units import SCALING_PHASE_LABELS as PHASE_NAMES
from traceanalyze.output.units import fmt_ms, fmt_pct, fmt_tick, nice_ticks, text_table
from traceanalyze.compare.scaling import PHASES, RunScaling, ScalingReport

MODE_NAMES = {"weak": "weak scaling (same per-rank batch)", "strong": "strong scaling (same global batch)",
              "mixed": "mixed batches", "assumed-weak": "batch not visible: assumed the same per-rank batch"}
CHART_W = 760


def fmt_rate(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def fmt_eff(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}%"


def fmt_lost(value: float) -> str:
    return f"{'+' if value >= 0 else '-'}{fmt_ms(abs(value))}"


def run_rows(report: ScalingReport) -> list[list[str]]:
    """One row per run: the numbers of the terminal table and of the HTML table."""
    return [[str(r.run.world_size), str(len(r.run.steps)), fmt_ms(r.run.step_ms), fmt_ms(r.ideal_step_ms),
             fmt_rate(r.run.samples_per_s), fmt_rate(r.run.tokens_per_s), f"{r.speedup:.2f}x",
             fmt_eff(r.efficiency_pct), fmt_eff(r.weak_efficiency_pct), fmt_eff(r.strong_efficiency_pct)]
            for r in report.runs]


RUN_HEADER = ["world size", "steps", "step time", "ideal", "samples/s", "tokens/s", "speedup",
              "efficiency", "weak eff.", "strong eff."]


def phase_rows(report: ScalingReport) -> list[list[str]]:
    """One row per phase: the baseline time, then each run's time and lost time against ideal."""
    rows = []
    for p in PHASES:
        if all(abs(r.run.phases_ms[p]) < 0.005 for r in report.runs):
            continue
        rows.append([PHASE_NAMES[p], *(_phase_cell(r, p, i == 0) for i, r in enumerate(report.runs))])
    return rows


def _phase_cell(r: RunScaling, phase: str, baseline: bool) -> str:
    value = fmt_ms(r.run.phases_ms[phase])
    return value if baseline else f"{value} ({fmt_lost(r.lost_ms[phase])})"


def render_scaling_text(report: ScalingReport) -> str:
    """The terminal view: runs, phases with lost time, the verdict and notes."""
    base = report.baseline
    head = (f"traceanalyze scaling: {len(report.runs)} runs, {MODE_NAMES[report.mode]}, "
            f"baseline world size {base.world_size} ({base.trace_dir})")
    out = [head, ""]
    out += text_table(RUN_HEADER, run_rows(report))
    out += ["", "time per step by phase, mean per rank (lost time against ideal scaling in brackets)", ""]
    out += text_table(["phase", *(f"W={r.run.world_size}" for r in report.runs)], phase_rows(report))
    out += ["", f"verdict: {report.verdict}"]
    out += [f"note: {n}" for n in report.notes]
    return "\n".join(out) + "\n"


# ---- HTML ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ScalingPage:
    """What templates/scaling.html sees."""

    title: str = field(metadata={"help": "page title"})
    mode: str = field(metadata={"help": "scaling mode, in words"})
    verdict: str = field(metadata={"help": "one paragraph: efficiency and where the time went"})
    notes: list[str] = field(metadata={"help": "caveats (batch not visible, ranks not traced)"})
    run_header: list[str] = field(metadata={"help": "columns of the runs table"})
    run_rows: list[list[str]] = field(metadata={"help": "one row per run, formatted"})
    run_dirs: list[tuple[str, str]] = field(metadata={"help": "(world size, trace folder) per run"})
    phase_header: list[str] = field(metadata={"help": "columns of the phase table"})
    phase_rows: list[list[str]] = field(metadata={"help": "one row per phase, formatted"})
    charts: list[Chart] = field(metadata={"help": "inline SVG charts (geometry only)"})
    css: str = field(metadata={"help": "the page's stylesheet, inlined"})
    definitions: dict[str, str] = field(metadata={"help": "how every number is defined"})
    tool_version: str = field(metadata={"help": "traceanalyze version"})


def _x_positions(report: ScalingReport, left: float, width: float) -> dict[int, float]:
    sizes = sorted({r.run.world_size for r in report.runs})
    if len(sizes) == 1:
        return {sizes[0]: left + width / 2}
    return {w: left + width * i / (len(sizes) - 1) for i, w in enumerate(sizes)}


def throughput_chart(report: ScalingReport) -> Chart:
    """Relative throughput (speedup) per world size, with the linear-scaling line."""
    left, top, plot_h, plot_w = 60.0, 20.0, 220.0, CHART_W - 100.0
    base_w = report.baseline.world_size
    ideal = {r.run.world_size: r.run.world_size / base_w for r in report.runs}
    ticks = nice_ticks(max([*ideal.values(), *(r.speedup for r in report.runs)]))
    scale = plot_h / ticks[-1]
    xs = _x_positions(report, left + 20, plot_w - 40)
    chart = Chart("chart-throughput", "Throughput vs world size",
                  f"Throughput relative to world size {base_w} (speedup). Dashed: linear scaling; "
                  "dots: measured. The gap between them is the efficiency lost.",
                  height=top + plot_h + 48, width=CHART_W,
                  legend=[LegendItem("linear scaling", "sc-ideal"), LegendItem("measured", "sc-actual")])
    for t in ticks:
        y = round(top + plot_h - t * scale, 1)
        chart.shapes += [Line(left, y, left + plot_w, y, "grid"),
                         Text(left - 6, y + 4, f"{fmt_tick(t)}x", "lbl lbl-s", "end")]
    pts_ideal = " ".join(f"{xs[w]:.1f},{top + plot_h - v * scale:.1f}" for w, v in sorted(ideal.items()))
    chart.shapes.append(Polyline(pts_ideal, "line sc-ideal-line"))
    measured = sorted(report.runs, key=lambda r: r.run.world_size)
    chart.shapes.append(Polyline(" ".join(f"{xs[r.run.world_size]:.1f},{top + plot_h - r.speedup * scale:.1f}"
                                          for r in measured), "line sc-actual-line"))
    for r in measured:
        x, y = xs[r.run.world_size], top + plot_h - r.speedup * scale
        tip = (f"world size {r.run.world_size}: {r.speedup:.2f}x, efficiency {fmt_pct(r.efficiency_pct)}, "
               f"step {fmt_ms(r.run.step_ms)}")
        chart.shapes += [Circle(round(x, 1), round(y, 1), 5, "sc-actual", tip),
                         Text(round(x, 1), round(y - 10, 1), fmt_eff(r.efficiency_pct), "lbl lbl-s", "middle"),
                         Text(round(x, 1), top + plot_h + 18, f"W={r.run.world_size}", "lbl", "middle")]
    chart.shapes.append(Text(left + plot_w / 2, top + plot_h + 38, "world size (labels: efficiency)",
                             "lbl lbl-s", "middle"))
    return chart


def phases_chart(report: ScalingReport) -> Chart:
    """A stacked bar of phase time per run, with the ideal step time marked."""
    left, top, plot_h, plot_w = 60.0, 20.0, 240.0, CHART_W - 100.0
    tallest = max(max(sum(r.run.phases_ms.values()), r.ideal_step_ms) for r in report.runs)
    ticks = nice_ticks(tallest)
    scale = plot_h / ticks[-1]
    chart = Chart("chart-phases", "Where the step time goes",
                  "Mean time per step and rank by phase; the black tick is the ideal step time "
                  "(the baseline scaled by the work per rank). Hover a segment for its numbers.",
                  height=top + plot_h + 36, width=CHART_W,
                  legend=[LegendItem(PHASE_NAMES[p], f"sc-{p}") for p in PHASES]
                  + [LegendItem("ideal step time", "sc-ideal")])
    for t in ticks:
        y = round(top + plot_h - t * scale, 1)
        chart.shapes += [Line(left, y, left + plot_w, y, "grid"),
                         Text(left - 6, y + 4, f"{fmt_tick(t)} ms" if t == ticks[-1] else fmt_tick(t),
                              "lbl lbl-s", "end")]
    slot = plot_w / len(report.runs)
    bar_w = min(slot * 0.5, 90)
    for i, r in enumerate(report.runs):
        x = left + slot * (i + 0.5) - bar_w / 2
        y = top + plot_h
        for p in PHASES:
            h = r.run.phases_ms[p] * scale
            if h <= 0:
                continue
            y -= h
            tip = (f"W={r.run.world_size} · {PHASE_NAMES[p]} {fmt_ms(r.run.phases_ms[p])} "
                   f"(expected {fmt_ms(r.expected_phases_ms[p])}, lost {fmt_lost(r.lost_ms[p])})")
            chart.shapes.append(Rect(round(x, 1), round(y, 1), round(bar_w, 1), round(h, 1), f"sc-{p}", tip))
        yi = round(top + plot_h - r.ideal_step_ms * scale, 1)
        chart.shapes += [Line(round(x - 8, 1), yi, round(x + bar_w + 8, 1), yi, "sc-ideal-tick"),
                         Text(round(x + bar_w / 2, 1), top + plot_h + 18,
                              f"W={r.run.world_size} · {fmt_ms(r.run.step_ms)}", "lbl", "middle")]
    return chart


def scaling_page(report: ScalingReport) -> ScalingPage:
    css = resources.files("traceanalyze.output").joinpath("templates/scaling.css").read_text(encoding="utf-8")
    return ScalingPage(
        title=f"Scaling: world size {', '.join(str(r.run.world_size) for r in report.runs)}",
        mode=MODE_NAMES[report.mode], verdict=report.verdict, notes=list(report.notes),
        run_header=RUN_HEADER, run_rows=run_rows(report),
        run_dirs=[(str(r.run.world_size), r.run.trace_dir) for r in report.runs],
        phase_header=["phase", *(f"W={r.run.world_size}" for r in report.runs)],
        phase_rows=phase_rows(report), charts=[throughput_chart(report), phases_chart(report)],
        css=css, definitions=report.to_dict()["definitions"], tool_version=__version__,
    )


def render_scaling_html(report: ScalingReport) -> str:
    """One self-contained page (inline CSS and SVG, no script, no network)."""
    return render("scaling.html", page=scaling_page(report))
