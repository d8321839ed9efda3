"""Chart geometry of the report's "Process groups" section: summary `groups` + `layout` -> shapes.

- `dimension_heatmaps`: one heatmap per parallelism dimension (a job of two or more): a row per
  rank, grouped by its process group of that dimension, a column per aligned step, the colour the
  time the rank kept its group waiting at the group's collectives in that step (`late_ms`, summed
  over the step's collectives of the group). One colour scale for every dimension, so the
  dimensions compare.
- `pipeline_timeline`: the representative step of a pipeline job, one lane per rank grouped by
  stage, its phases as bars (compute, pipeline wait, ...) on the rank's step-relative time.

Like charts.py, no markup here: `_svg.html` draws the shapes and escapes every label.
"""

from __future__ import annotations

from traceanalyze.output.charts import (
    MAX_HEATMAP_STEPS,
    MAX_RANK_ROWS,
    WIDTH,
    Chart,
    Line,
    Rect,
    Text,
    _r,
    _row_height,
    _scale_bar,
    heat_colour,
    hot_ranks,
    phase_legend,
    rank_list,
)
from traceanalyze.output.units import PHASE_LABELS, fmt_ms, fmt_ranks

ABBREV = {"pipeline": "PP", "data": "DP", "fsdp": "FSDP", "expert": "EP", "context": "CP", "tensor": "TP"}


def _exact(ms: float | None) -> str:
    """A value as stored in the summary (3 decimals): hover titles show it exactly."""
    return "—" if ms is None else f"{ms:.3f} ms"


def _group_order(layout: dict, dimension: str) -> list[dict]:
    """The dimension's groups as the layout lists them, ordered by their lowest rank."""
    for d in layout.get("dimensions") or []:
        if d["name"] == dimension:
            return sorted(d["groups"], key=lambda g: (min(g["ranks"]) if g["ranks"] else -1, g["name"]))
    return []


def _short(text: str, limit: int) -> str:
    """A label that fits its column (hover titles carry the whole text)."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _group_label(dimension: str, group: dict) -> str:
    desc = f" ({group['desc']})" if group.get("desc") else ""
    return f"{ABBREV.get(dimension, dimension)} group {group['name']}{desc}"


def dimension_heatmaps(summary: dict) -> list[Chart]:
    """One lateness heatmap per dimension that has rows (a job of two dimensions or more)."""
    groups = summary.get("groups") or {}
    layout = summary.get("layout") or {}
    rows_in = groups.get("lateness") or []
    dims = [d for d in groups.get("dimensions") or [] if any(r["dimension"] == d for r in rows_in)]
    if len(groups.get("dimensions") or []) < 2 or not dims:
        return []
    aligned = summary["steps"].get("aligned") or sorted({r["step"] for r in rows_in})
    steps = [s for s in aligned if any(r["step"] == s for r in rows_in)][:MAX_HEATMAP_STEPS]
    max_late = max((r["late_ms"] or 0.0) for r in rows_in) or 1.0
    shown = set(rank_list(summary))
    hot = hot_ranks(summary)
    charts = []
    for dim in dims:
        chart = _heatmap(summary, layout, dim, [r for r in rows_in if r["dimension"] == dim and r["rank"] in shown],
                         steps, max_late, hot)
        if chart is not None:
            charts.append(chart)
    return charts


def _heatmap(summary: dict, layout: dict, dim: str, rows: list[dict], steps: list[int], max_late: float,
             hot: set[int]) -> Chart | None:
    cells = {(r["process_group"], r["rank"], r["step"]): r for r in rows}
    present = {(r["process_group"], r["rank"]) for r in rows}
    ordered = []   # (group dict, rank) in the layout's order; groups the layout lacks after them
    known = _group_order(layout, dim)
    for g in known:
        ordered += [(g, rank) for rank in g["ranks"] if (g["name"], rank) in present]
    listed = {(g["name"], rank) for g, rank in ordered}
    for name, rank in sorted(present - listed, key=lambda k: (k[0], k[1])):
        desc = next((r["pg_desc"] for r in rows if r["process_group"] == name), None)
        ordered.append(({"name": name, "desc": desc, "ranks": []}, rank))
    ordered = ordered[:MAX_RANK_ROWS]
    if not ordered or not steps:
        return None
    abbrev = ABBREV.get(dim, dim)
    left, top, rh = 236.0, 24.0, _row_height(len(ordered), 340, 12, 26)
    cw = min((WIDTH - left - 10) / len(steps), 90)
    chart = Chart(f"chart-group-lateness-{dim}", f"{abbrev}: lateness at the {dim} groups' collectives (rank × step)",
                  f"Per step, how long each rank kept the other ranks of its {dim} group waiting: its arrival "
                  "at each of the group's collectives after the group's median rank, summed over the step's "
                  "collectives of the group (0 when early). Rows are grouped by process group. One colour "
                  "scale for every dimension. A rank that waited in another dimension's group is late here "
                  "too: compare the dimensions to find where the delay starts. Hover a cell for its numbers.",
                  height=top + rh * len(ordered) + 44)
    for j, s in enumerate(steps):
        chart.shapes.append(Text(_r(left + cw * (j + 0.5)), top - 8, str(s), "lbl lbl-s", "middle"))
    previous = None
    for i, (g, rank) in enumerate(ordered):
        y = top + i * rh
        if g["name"] != previous:
            if previous is not None:
                chart.shapes.append(Line(8, _r(y), WIDTH - 10, _r(y), "axis"))
            chart.shapes.append(Text(8, _r(y + rh * 0.66), _short(_group_label(dim, g), 30), "lbl lbl-s"))
            previous = g["name"]
        chart.shapes.append(Text(left - 8, _r(y + rh * 0.66), f"rank {rank}",
                                 "lbl lbl-hot" if rank in hot else "lbl", "end"))
        members = f"ranks {fmt_ranks(g['ranks'])}; " if g["ranks"] else ""
        for j, s in enumerate(steps):
            cell = cells.get((g["name"], rank, s))
            if cell is None:
                continue
            late = cell["late_ms"] or 0.0
            frac = late / max_late
            tip = (f"rank {rank} · {_group_label(dim, g)} ({members}{cell['collectives']} collective"
                   f"{'s' if cell['collectives'] != 1 else ''} in the step) · step {s} · {_exact(cell['late_ms'])} late"
                   f" (largest at one collective {_exact(cell['max_late_ms'])}) · waited {_exact(cell['wait_ms'])}"
                   " for the group's last rank")
            chart.shapes.append(Rect(_r(left + cw * j + 1), _r(y + 1), _r(cw - 2), _r(rh - 2), "cell", tip,
                                     heat_colour(frac)))
            if cw >= 40 and rh >= 14:
                cls = "lbl lbl-s lbl-inv" if frac > 0.55 else "lbl lbl-s"
                chart.shapes.append(Text(_r(left + cw * (j + 0.5)), _r(y + rh * 0.66), f"{late:.0f}", cls, "middle"))
    _legend(chart, left, top + rh * len(ordered) + 16, max_late)
    notes = []
    total_rows = len(present)
    if total_rows > len(ordered):
        notes.append(f"{len(ordered)} of {total_rows} ranks")
    aligned = summary["steps"].get("aligned") or []
    if len(aligned) > len(steps):
        notes.append(f"the first {len(steps)} of {len(aligned)} aligned steps")
    chart.note = "; ".join(notes)
    return chart


def _legend(chart: Chart, x: float, y: float, max_late: float) -> None:
    chart.shapes.append(Text(x - 8, y + 11, "0 ms", "lbl lbl-s", "end"))
    for k in range(10):
        lo, hi = max_late * k / 10, max_late * (k + 1) / 10
        chart.shapes.append(Rect(_r(x + k * 16), y, 16, 14, "cell", f"{lo:.1f} – {hi:.1f} ms late",
                                 heat_colour(k / 9)))
    chart.shapes.append(Text(_r(x + 10 * 16 + 6), y + 11, f"{fmt_ms(max_late)} late (the largest cell of any dimension)",
                             "lbl lbl-s"))


# ---- the pipeline: one step, a lane per rank grouped by stage -------------------------------------

def pipeline_timeline(summary: dict) -> Chart | None:
    pipe = (summary.get("groups") or {}).get("pipeline")
    if not pipe or not pipe.get("lanes"):
        return None
    step = pipe["step"]
    rows = {t["rank"]: t for t in summary["timeline"] if t["step"] == step}
    lanes = [la for la in pipe["lanes"] if la["rank"] in rows][:MAX_RANK_ROWS]
    if not lanes:
        return None
    left, top, rh = 150.0, 20.0, _row_height(len(lanes), 300, 16, 30)
    right = 250.0
    max_ms = max(rows[la["rank"]]["dur_ms"] or 0.0 for la in lanes) or 1.0
    px_per_ms = (WIDTH - left - right) / max_ms
    chart = Chart("chart-pipeline", f"Pipeline: step {step}, one lane per rank by stage",
                  f"Step {step} is the aligned step of median duration ({fmt_ms(pipe['dur_ms'])}). Each lane is one "
                  "rank, grouped by its pipeline stage, on its own step-relative time. Brown is the time blocked "
                  "in send / recv (pipeline wait): the bubble, and the stages waiting for a slower one. On the "
                  "right, the step's compute (forward + backward + optimizer) and wait per rank.",
                  height=top + rh * len(lanes) + 40, legend=phase_legend())
    hot = hot_ranks(summary)
    bar_h = max(rh * 0.7, 6)
    previous = None
    for i, la in enumerate(lanes):
        y = top + i * rh
        if la["stage"] != previous:
            if previous is not None:
                chart.shapes.append(Line(8, _r(y), WIDTH - 10, _r(y), "axis"))
            chart.shapes.append(Text(8, _r(y + rh * 0.62), f"stage {la['stage']} of {la['stages']}", "lbl lbl-b"))
            previous = la["stage"]
        rank = la["rank"]
        chart.shapes.append(Text(left - 8, _r(y + rh * 0.62), f"rank {rank}",
                                 "lbl lbl-hot" if rank in hot else "lbl", "end"))
        row = rows[rank]
        by = y + (rh - bar_h) / 2
        chart.shapes.append(Rect(left, _r(by), _r((row["dur_ms"] or 0) * px_per_ms), _r(bar_h), "tl-step",
                                 f"rank {rank} · stage {la['stage']} · step {step} · {_exact(row['dur_ms'])}"))
        for ph in row["phases"]:
            w = (ph["dur_ms"] or 0) * px_per_ms
            if w < 0.3:
                continue
            chart.shapes.append(Rect(_r(left + ph["start_ms"] * px_per_ms), _r(by), _r(max(w, 0.8)), _r(bar_h),
                                     f"ph ph-{ph['phase']}",
                                     f"rank {rank} · stage {la['stage']} · {PHASE_LABELS[ph['phase']]} "
                                     f"{_exact(ph['dur_ms'])} (from +{_exact(ph['start_ms'])})"))
        chart.shapes.append(Text(_r(WIDTH - right + 10), _r(y + rh * 0.62),
                                 f"compute {fmt_ms(la['compute_ms'])} · wait {fmt_ms(la['pipeline_wait_ms'])}",
                                 "lbl lbl-s"))
    _scale_bar(chart, left, top + rh * len(lanes) + 18, px_per_ms, max_ms)
    if len(lanes) < len(pipe["lanes"]):
        chart.note = f"{len(lanes)} of {len(pipe['lanes'])} ranks"
    return chart


def group_charts(summary: dict) -> list[Chart]:
    """The section's charts in report order: the heatmaps per dimension, then the pipeline step."""
    out = dimension_heatmaps(summary)
    pipe = pipeline_timeline(summary)
    return out + ([pipe] if pipe is not None else [])

