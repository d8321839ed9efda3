"""Chart geometry for report.html: summary dict -> shapes in SVG user units (no markup here).

The template `_svg.html` turns shapes into inline SVG, so every label is escaped by jinja.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from traceanalyze.output.presentation import mean_step_ms
from traceanalyze.output.units import PHASE_LABELS, PHASES, fmt_bytes, fmt_ms, fmt_tick, nice_ticks

WIDTH = 960
MAX_TIMELINE_STEPS = 12
MAX_HEATMAP_STEPS = 60
MAX_RANK_ROWS = 32       # charts with a row per rank show at most this many ranks
MAX_MEMORY_SERIES = 8
SERIES_COLOURS = 8


@dataclass(frozen=True)
class Rect:
    x: float
    y: float
    w: float
    h: float
    cls: str
    tip: str = ""
    fill: str = ""  # explicit colour (heatmap); empty = from the CSS class
    kind: str = "rect"


@dataclass(frozen=True)
class Text:
    x: float
    y: float
    text: str
    cls: str = "lbl"
    anchor: str = "start"  # start | middle | end
    kind: str = "text"


@dataclass(frozen=True)
class Line:
    x1: float
    y1: float
    x2: float
    y2: float
    cls: str = "grid"
    kind: str = "line"


@dataclass(frozen=True)
class Polyline:
    points: str  # "x,y x,y ..." (numbers only)
    cls: str
    kind: str = "polyline"


@dataclass(frozen=True)
class Circle:
    cx: float
    cy: float
    r: float
    cls: str
    tip: str = ""
    kind: str = "circle"


@dataclass(frozen=True)
class LegendItem:
    label: str
    cls: str  # CSS class giving the swatch colour
    fill: str = ""


@dataclass
class Chart:
    """One inline SVG chart."""

    id: str
    title: str
    caption: str
    height: float
    shapes: list = field(default_factory=list)
    legend: list[LegendItem] = field(default_factory=list)
    width: float = WIDTH
    note: str = ""


def _r(v: float) -> float:
    return round(v, 1)


def phase_legend() -> list[LegendItem]:
    return [LegendItem(PHASE_LABELS[p], f"ph-{p}") for p in PHASES]


def rank_list(summary: dict, limit: int = MAX_RANK_ROWS) -> list[int]:
    """Every rank, or for a big job: those named by findings, the slowest, the median and the fastest."""
    ranks = [r["rank"] for r in summary["ranks"]]
    if len(ranks) <= limit:
        return ranks
    speed = {r["rank"]: r["metrics"]["step_time_ms"].get("median") or 0.0 for r in summary["ranks"]}
    by_speed = sorted(ranks, key=lambda r: (-speed[r], r))
    mid = len(by_speed) // 2
    picked = list(dict.fromkeys([*sorted(hot_ranks(summary)), *by_speed[:limit // 2],
                                 *by_speed[mid - limit // 8: mid + limit // 8], *by_speed[-(limit // 8):]]))
    return sorted(picked[:limit])


def _rank_note(summary: dict, shown: list[int]) -> str:
    total = len(summary["ranks"])
    if len(shown) == total:
        return ""
    return (f"showing {len(shown)} of {total} ranks: those named by findings, the slowest, "
            "the median and the fastest")


def _row_height(n_rows: int, budget: float = 380, lo: float = 11, hi: float = 26) -> float:
    return max(lo, min(hi, budget / max(n_rows, 1)))


def hot_ranks(summary: dict) -> set[int]:
    """Ranks singled out: named by an error/warning finding that does not name every rank, and the worst rank."""
    everyone = {r["rank"] for r in summary["ranks"]}
    hot = {r for f in summary["findings"] if f["severity"] in ("error", "warning") and set(f["ranks"]) < everyone
           for r in f["ranks"]}
    if summary["steps"].get("worst_rank") is not None and len(everyone) > 1:
        hot.add(summary["steps"]["worst_rank"])
    return hot


# ---- step timeline: ranks stacked, phases as bars, aligned by step ------------------------------

def _timeline_steps(summary: dict) -> list[int]:
    aligned = summary["steps"]["aligned"]
    return aligned[:MAX_TIMELINE_STEPS]


def step_timeline(summary: dict) -> Chart | None:
    steps = _timeline_steps(summary)
    rows = {(t["rank"], t["step"]): t for t in summary["timeline"]}
    if not steps or not rows:
        return None
    with_rows = {r for r, _ in rows}  # (a big job's summary has timelines of its detail_ranks only)
    ranks = [r for r in rank_list(summary) if r in with_rows] or sorted(with_rows)[:MAX_RANK_ROWS]
    col_ms = [max((rows[(r, s)]["dur_ms"] for r in ranks if (r, s) in rows), default=0.0) for s in steps]
    left, top, gap, rh = 70.0, 34.0, 6.0, _row_height(len(ranks))
    plot_w = WIDTH - left - 10 - gap * (len(steps) - 1)
    px_per_ms = plot_w / (sum(col_ms) or 1.0)
    chart = Chart("chart-timeline", "Step timeline per rank",
                  "Each column is one ProfilerStep, every rank starts at the step's start: "
                  "the view you would build by hand in Perfetto. Hover a bar for its numbers.",
                  height=top + rh * len(ranks) + 40, legend=phase_legend())
    hot = hot_ranks(summary)
    for i, r in enumerate(ranks):
        y = top + i * rh
        chart.shapes.append(Text(left - 8, y + rh * 0.68, f"rank {r}", "lbl lbl-hot" if r in hot else "lbl", "end"))
    x = left
    for s, width_ms in zip(steps, col_ms):
        _timeline_column(chart, rows, ranks, s, x, top, rh, px_per_ms)
        chart.shapes.append(Text(_r(x + width_ms * px_per_ms / 2), top - 20, f"step {s}", "lbl lbl-b", "middle"))
        chart.shapes.append(Text(_r(x + width_ms * px_per_ms / 2), top - 7, fmt_ms(width_ms), "lbl lbl-s", "middle"))
        x += width_ms * px_per_ms + gap
    _scale_bar(chart, left, top + rh * len(ranks) + 16, px_per_ms, max(col_ms))
    notes = [_rank_note(summary, ranks)]
    if len(summary["steps"]["aligned"]) > len(steps):
        notes.append(f"the first {len(steps)} of {len(summary['steps']['aligned'])} aligned steps")
    chart.note = "; ".join(n for n in notes if n)
    return chart


def _timeline_column(chart: Chart, rows: dict, ranks: list[int], step: int, x0: float, top: float,
                     rh: float, px_per_ms: float) -> None:
    bar_h = max(rh * 0.74, 4)
    for i, r in enumerate(ranks):
        row = rows.get((r, step))
        if row is None:
            continue
        y = top + i * rh + (rh - bar_h) / 2
        chart.shapes.append(Rect(_r(x0), _r(y), _r(row["dur_ms"] * px_per_ms), _r(bar_h), "tl-step",
                                 f"rank {r} · step {step} · {fmt_ms(row['dur_ms'])}"))
        for ph in row["phases"]:
            w = ph["dur_ms"] * px_per_ms
            if w < 0.3:
                continue
            tip = (f"rank {r} · step {step} · {PHASE_LABELS[ph['phase']]} {fmt_ms(ph['dur_ms'])}"
                   f" (from +{fmt_ms(ph['start_ms'])})")
            chart.shapes.append(Rect(_r(x0 + ph["start_ms"] * px_per_ms), _r(y), _r(max(w, 0.8)), _r(bar_h),
                                     f"ph ph-{ph['phase']}", tip))


def _scale_bar(chart: Chart, x: float, y: float, px_per_ms: float, max_ms: float) -> None:
    ticks = nice_ticks(max_ms / 3, 1)
    length_ms = ticks[1] if len(ticks) > 1 else max_ms / 3
    w = length_ms * px_per_ms
    chart.shapes += [Line(x, y, _r(x + w), y, "axis"), Line(x, y - 4, x, y + 4, "axis"),
                     Line(_r(x + w), y - 4, _r(x + w), y + 4, "axis"),
                     Text(_r(x + w + 6), y + 4, f"{fmt_tick(length_ms)} ms", "lbl lbl-s")]


# ---- worst rank vs median rank, per step --------------------------------------------------------

def step_times(summary: dict) -> Chart | None:
    per_step = [p for p in summary["steps"]["per_step"] if p.get("median_ms") is not None]
    if not per_step:
        return None
    left, top, plot_h = 56.0, 26.0, 190.0
    max_ms = max(p["worst_ms"] or 0 for p in per_step) or 1.0
    ticks = nice_ticks(max_ms)
    scale = plot_h / ticks[-1]
    chart = Chart("chart-step-times", "Worst rank vs median rank, per step",
                  "The job runs at the speed of its slowest rank. Each rank's own step time: its step "
                  "minus the time it waited at collectives for the others. Grey: median over ranks; "
                  "red: the slowest rank of that step (named above the bar).",
                  height=top + plot_h + 40,
                  legend=[LegendItem("median rank", "bar-median"), LegendItem("worst rank", "bar-worst")])
    _y_axis(chart, left, top, plot_h, ticks, scale, "ms")
    slot = (WIDTH - left - 10) / len(per_step)
    bar_w = min(slot * 0.36, 28)
    for i, p in enumerate(per_step):
        cx = left + slot * (i + 0.5)
        for value, cls, dx, who in ((p["median_ms"], "bar-median", -bar_w - 1, "median rank"),
                                    (p["worst_ms"], "bar-worst", 1, f"worst: rank {p['worst_rank']}")):
            h = (value or 0) * scale
            chart.shapes.append(Rect(_r(cx + dx), _r(top + plot_h - h), _r(bar_w), _r(h), cls,
                                     f"step {p['step']} · {who} · {fmt_ms(value)}"))
        if slot >= 22:
            y_lbl = top + plot_h - (p["worst_ms"] or 0) * scale - 4
            chart.shapes.append(Text(_r(cx + 1 + bar_w / 2), _r(y_lbl), f"r{p['worst_rank']}", "lbl lbl-s", "middle"))
        if slot >= 22 or i % max(1, int(22 / slot)) == 0:
            chart.shapes.append(Text(_r(cx), top + plot_h + 16, str(p["step"]), "lbl lbl-s", "middle"))
    chart.shapes.append(Text(_r(left + (WIDTH - left) / 2), top + plot_h + 34, "step", "lbl lbl-s", "middle"))
    return chart


def _y_axis(chart: Chart, left: float, top: float, plot_h: float, ticks: list[float], scale: float,
            unit: str) -> None:
    for t in ticks:
        y = _r(top + plot_h - t * scale)
        chart.shapes.append(Line(left, y, WIDTH - 10, y, "grid"))
        chart.shapes.append(Text(left - 6, _r(y + 4), f"{fmt_tick(t)} {unit}" if t == ticks[-1] else fmt_tick(t),
                                 "lbl lbl-s", "end"))


# ---- lateness heatmap ---------------------------------------------------------------------------

def heat_colour(fraction: float) -> str:
    """0 -> pale grey-blue, 1 -> deep red, through amber."""
    stops = [(0.0, (238, 241, 246)), (0.35, (253, 212, 120)), (0.7, (240, 110, 60)), (1.0, (180, 20, 40))]
    f = min(max(fraction, 0.0), 1.0)
    for (f0, c0), (f1, c1) in zip(stops, stops[1:]):
        if f <= f1:
            t = (f - f0) / (f1 - f0)
            rgb = [round(a + (b - a) * t) for a, b in zip(c0, c1)]
            return "#{:02x}{:02x}{:02x}".format(*rgb)
    return "#b41428"  # pragma: no cover


def lateness_heatmap(summary: dict) -> Chart | None:
    cells = {(c["rank"], c["step"]): c["late_ms"] for c in summary["steps"]["lateness_ms"]}
    if not cells:
        return None
    all_ranks = sorted({r["rank"] for r in summary["ranks"]})
    # a big job: one row per bin of consecutive ranks, each cell the bin's latest rank
    per_bin = -(-len(all_ranks) // MAX_RANK_ROWS)
    bins = [all_ranks[i:i + per_bin] for i in range(0, len(all_ranks), per_bin)]
    if per_bin > 1:
        cells = {(b[0], s): max((cells[(r, s)] or 0 for r in b if (r, s) in cells), default=None)
                 for b in bins for s in {s for _, s in cells}}
    ranks = [b[0] for b in bins]
    names = {b[0]: (f"rank {b[0]}" if len(b) == 1 else f"ranks {b[0]}-{b[-1]}") for b in bins}
    all_steps = sorted({s for _, s in cells})
    steps = all_steps[:MAX_HEATMAP_STEPS]
    left, top, rh = (70.0 if per_bin == 1 else 96.0), 24.0, _row_height(len(ranks), 340, 11, 30)
    cw = min((WIDTH - left - 10) / len(steps), 90)
    max_late = max((v or 0) for v in cells.values()) or 1.0
    chart = Chart("chart-lateness", "Lateness at collectives (rank × step)",
                  "How much later than the median rank each rank reached its latest collective of the "
                  "step, in step-relative time (0 when early). A dark row is a straggler; everyone else "
                  "waits for it.",
                  height=top + rh * len(ranks) + 44)
    hot = hot_ranks(summary)
    hot_bins = {b[0] for b in bins if hot & set(b)}
    for j, s in enumerate(steps):
        chart.shapes.append(Text(_r(left + cw * (j + 0.5)), top - 8, str(s), "lbl lbl-s", "middle"))
    for i, r in enumerate(ranks):
        y = top + i * rh
        chart.shapes.append(Text(left - 8, _r(y + rh * 0.66), names[r], "lbl lbl-hot" if r in hot_bins else "lbl", "end"))
        for j, s in enumerate(steps):
            late = cells.get((r, s))
            if late is None:
                continue
            frac = (late or 0) / max_late
            chart.shapes.append(Rect(_r(left + cw * j + 1), _r(y + 1), _r(cw - 2), _r(rh - 2), "cell",
                                     f"{names[r]} · step {s} · {fmt_ms(late)} late"
                                     + (" (the latest of them)" if per_bin > 1 else ""), heat_colour(frac)))
            if cw >= 40 and rh >= 14 and late is not None:
                cls = "lbl lbl-s lbl-inv" if frac > 0.55 else "lbl lbl-s"
                chart.shapes.append(Text(_r(left + cw * (j + 0.5)), _r(y + rh * 0.66), f"{late:.0f}", cls, "middle"))
    _heat_legend(chart, left, top + rh * len(ranks) + 16, max_late)
    notes = [f"{len(all_ranks)} ranks in bins of {per_bin}: each cell is the latest rank of its bin"
             if per_bin > 1 else ""]
    if len(all_steps) > len(steps):
        notes.append(f"the first {len(steps)} of {len(all_steps)} steps")
    chart.note = "; ".join(n for n in notes if n)
    return chart


def _heat_legend(chart: Chart, x: float, y: float, max_late: float) -> None:
    chart.shapes.append(Text(x, y + 11, "0 ms", "lbl lbl-s"))
    for k in range(10):
        chart.shapes.append(Rect(_r(x + 34 + k * 16), y, 16, 14, "cell", "", heat_colour(k / 9)))
    chart.shapes.append(Text(_r(x + 34 + 10 * 16 + 6), y + 11, f"{fmt_ms(max_late)} late",
                             "lbl lbl-s"))


# ---- phase split per rank -----------------------------------------------------------------------

def phase_split(summary: dict) -> Chart | None:
    shown = set(rank_list(summary))
    ranks = [r for r in summary["ranks"] if r["rank"] in shown]
    totals = [mean_step_ms(r["metrics"]) or 0.0 for r in ranks]
    if not ranks or not any(totals):
        return None
    left, top, rh = 70.0, 8.0, _row_height(len(ranks), 320, 13, 28)
    plot_w = WIDTH - left - 90
    scale = plot_w / max(totals)
    chart = Chart("chart-phases", "Where each rank's step goes",
                  "Mean time per step in each phase, per rank. Compare a rank's bar with the others: "
                  "the phase that differs is the reason.",
                  height=top + rh * len(ranks) + 12, legend=phase_legend())
    hot = hot_ranks(summary)
    for i, (r, total) in enumerate(zip(ranks, totals)):
        y = top + i * rh
        chart.shapes.append(Text(left - 8, _r(y + rh * 0.66), f"rank {r['rank']}",
                                 "lbl lbl-hot" if r["rank"] in hot else "lbl", "end"))
        x = left
        for p in PHASES:
            ms = r["metrics"]["phases_ms"].get(p) or 0
            if ms <= 0:
                continue
            pct = (r["metrics"].get("phases_pct") or {}).get(p)
            share = f" ({pct:.0f}%)" if pct is not None else ""
            chart.shapes.append(Rect(_r(x), _r(y + rh * 0.15), _r(ms * scale), _r(rh * 0.7), f"ph ph-{p}",
                                     f"rank {r['rank']} · {PHASE_LABELS[p]} {fmt_ms(ms)} per step{share}"))
            x += ms * scale
        chart.shapes.append(Text(_r(x + 6), _r(y + rh * 0.66), fmt_ms(total), "lbl lbl-s"))
    chart.note = _rank_note(summary, sorted(shown))
    return chart


# ---- memory over steps --------------------------------------------------------------------------

def memory_over_steps(summary: dict) -> Chart | None:
    rows = [m for m in summary["memory"] if m.get("peak_allocated_bytes") is not None]
    if not rows:
        return None
    steps = sorted({m["step"] for m in rows})
    ranks = [r for r in rank_list(summary, MAX_MEMORY_SERIES) if any(m["rank"] == r for m in rows)]
    rows = [m for m in rows if m["rank"] in set(ranks)]
    left, top, plot_h = 70.0, 14.0, 170.0
    max_b = max(m["peak_allocated_bytes"] for m in rows) or 1
    mib = 1024 * 1024
    ticks = nice_ticks(max_b / mib)
    scale = plot_h / (ticks[-1] * mib)
    chart = Chart("chart-memory", "Peak allocated memory per step",
                  "Allocator peak within each step, per rank. A line that keeps rising is a leak "
                  "(tensors kept alive across steps).", height=top + plot_h + 40)
    _y_axis(chart, left, top, plot_h, ticks, scale * mib, "MiB")
    slot = (WIDTH - left - 20) / max(len(steps), 1)
    xs = {s: left + slot * (j + 0.5) for j, s in enumerate(steps)}
    every = max(1, -(-len(steps) // 20))  # at most about 20 step labels
    for j, s in enumerate(steps):
        if j % every == 0:
            chart.shapes.append(Text(_r(xs[s]), top + plot_h + 16, str(s), "lbl lbl-s", "middle"))
    for k, r in enumerate(ranks):
        pts = [(xs[m["step"]], top + plot_h - m["peak_allocated_bytes"] * scale, m)
               for m in sorted(rows, key=lambda m: m["step"]) if m["rank"] == r]
        cls = f"series-{k % SERIES_COLOURS}"
        chart.shapes.append(Polyline(" ".join(f"{_r(x)},{_r(y)}" for x, y, _ in pts), f"line {cls}"))
        if len(steps) <= 40:
            chart.shapes += [Circle(_r(x), _r(y), 3.2, f"dot {cls}",
                                    f"rank {r} · step {m['step']} · {fmt_bytes(m['peak_allocated_bytes'])}")
                             for x, y, m in pts]
        chart.legend.append(LegendItem(f"rank {r}", cls))
    chart.shapes.append(Text(_r(left + (WIDTH - left) / 2), top + plot_h + 34, "step", "lbl lbl-s", "middle"))
    if len(ranks) > 1 and len({_series(rows, r) for r in ranks}) == 1:
        chart.note = "every rank has the same values: the lines lie on top of each other"
    elif len(ranks) < len(summary["ranks"]):
        chart.note = f"{len(ranks)} of {len(summary['ranks'])} ranks"
    return chart


def _series(rows: list[dict], rank: int) -> tuple:
    return tuple((m["step"], m["peak_allocated_bytes"]) for m in sorted(rows, key=lambda m: m["step"])
                 if m["rank"] == rank)


def build_charts(summary: dict) -> list[Chart]:
    """Every chart the data supports, in report order."""
    makers = (step_timeline, step_times, lateness_heatmap, phase_split, memory_over_steps)
    return [c for c in (make(summary) for make in makers) if c is not None]


# ---- a finding's per-step series (evidence): one small bar per step ------------------------------

SERIES_WIDTH = 360
SERIES_HEIGHT = 96


def step_series(chart_id: str, steps: list[int], values: list[float], tips: list[str], what: str) -> Chart:
    """Bars of one value per step (e.g. the time a rank held the others back), zero at the baseline."""
    chart = Chart(id=chart_id, title=f"{what} per step", caption="", height=SERIES_HEIGHT, width=SERIES_WIDTH)
    left, top, bottom = 8.0, 6.0, 20.0
    plot_w, plot_h = SERIES_WIDTH - 2 * left, SERIES_HEIGHT - top - bottom
    hi, lo = max([0.0, *values]), min([0.0, *values])
    span = (hi - lo) or 1.0
    base_y = top + plot_h * hi / span
    slot = plot_w / max(len(values), 1)
    bar_w = max(1.0, min(28.0, slot * 0.7))
    chart.shapes.append(Line(_r(left), _r(base_y), _r(left + plot_w), _r(base_y), "axis"))
    label_every = max(1, len(steps) // 12 + (len(steps) % 12 > 0))
    for i, (step, value, tip) in enumerate(zip(steps, values, tips)):
        x = left + slot * i + (slot - bar_w) / 2
        h = plot_h * abs(value) / span
        y = base_y - h if value >= 0 else base_y
        chart.shapes.append(Rect(_r(x), _r(y), _r(bar_w), _r(max(h, 0.5)), "series-bar", f"step {step}: {tip}"))
        if i % label_every == 0:
            chart.shapes.append(Text(_r(x + bar_w / 2), SERIES_HEIGHT - 6, str(step), "tick", "middle"))
    return chart
