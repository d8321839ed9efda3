"""Stage 6: a SummaryDiff -> a side-by-side terminal table, or one self-contained HTML page."""

from __future__ import annotations

from dataclasses import dataclass, field


from traceanalyze.compare.diff import PHASES, Delta, SummaryDiff
from traceanalyze.output.templating import render
from traceanalyze.output.units import PHASE_LABELS, fmt_bytes, fmt_ms, fmt_pct, fmt_ranks, text_table



def fmt_value(value: float | None, unit: str) -> str:
    if unit == "bytes":
        return fmt_bytes(None if value is None else int(value))
    if unit == "pct":
        return fmt_pct(value)
    return fmt_ms(value)


def fmt_change(delta: Delta) -> str:
    """'+12.3 ms (+10.2%)', '+4.0 points', '—' when not comparable."""
    change = delta.change
    if change is None:
        return "—"
    if change == 0:
        return "no change"
    if delta.unit == "pct":
        return f"{change:+.1f} points"
    sign = "+" if change >= 0 else "-"
    text = sign + fmt_value(abs(change), delta.unit)
    return f"{text} ({delta.change_pct:+.1f}%)" if delta.change_pct is not None else text


def shown(delta: Delta) -> bool:
    """Leave out rows that say nothing: unknown in both, or zero in both."""
    return not ((delta.old is None and delta.new is None) or (delta.old == 0 and delta.new == 0))


def _finding_line(sign: str, f: dict) -> str:
    ranks = f" rank(s) {fmt_ranks(f.get('ranks') or [])}" if f.get("ranks") else ""
    return f"  {sign} {f.get('severity')} {f['rule']}{ranks}: {f.get('title', '')}"


def render_diff_text(diff: SummaryDiff) -> str:
    """Job metrics side by side, a rank x phase table of changes, findings added/removed."""
    out = [f"traceanalyze diff: {diff.old} -> {diff.new}", ""]
    rows = [[d.label, fmt_value(d.old, d.unit), fmt_value(d.new, d.unit), fmt_change(d)]
            for d in diff.job if shown(d)]
    out += text_table(["job", "old", "new", "change"], rows)
    out += ["", "per rank: change in ms/step (new - old); '—' = rank missing in one run"]
    header = ["rank", "step", "own step"] + [PHASE_LABELS[p] for p in PHASES]
    out += text_table(header, [_rank_row(r) for r in diff.ranks])
    out += ["", (f"findings: {len(diff.findings_added)} added, {len(diff.findings_removed)} removed, "
                 f"{len(diff.findings_unchanged)} unchanged")]
    out += [_finding_line("+", f) for f in diff.findings_added]
    out += [_finding_line("-", f) for f in diff.findings_removed]
    out += [f"note: {n}" for n in diff.notes]
    return "\n".join(out) + "\n"


def _rank_row(rank_diff) -> list[str]:
    by_key = {d.key: d for d in rank_diff.metrics}
    keys = ["step_ms.median", "step_ms.own"] + [f"phase_ms.{p}" for p in PHASES]
    cells = [by_key[k].change for k in keys]
    return [str(rank_diff.rank)] + ["—" if c is None else f"{c:+.1f}" for c in cells]


# ---- HTML -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class PhaseBar:
    """One stacked bar (a rank's phases in one run), widths in % of the widest step."""

    label: str = field(metadata={"help": "'old' or 'new'"})
    total_ms: float | None = field(metadata={"help": "sum of the phases, ms/step"})
    segments: list[dict] = field(metadata={"help": "[{phase, label, ms, width_pct}] in PHASES order"})


@dataclass(frozen=True)
class RankSection:
    rank: int = field(metadata={"help": "rank id"})
    rows: list[dict] = field(metadata={"help": "[{label, old, new, change, worse}] per metric"})
    bars: list[PhaseBar] = field(metadata={"help": "old and new phase bars"})


@dataclass(frozen=True)
class DiffPage:
    """Everything diff.html reads (StrictUndefined: nothing else is available)."""

    title: str = field(metadata={"help": "page title"})
    old: str = field(metadata={"help": "the old run's trace_dir"})
    new: str = field(metadata={"help": "the new run's trace_dir"})
    job_rows: list[dict] = field(metadata={"help": "[{label, old, new, change, worse}] job metrics"})
    ranks: list[RankSection] = field(metadata={"help": "one section per rank"})
    phases: list[dict] = field(metadata={"help": "[{phase, label}] legend, in PHASES order"})
    findings_added: list[dict] = field(metadata={"help": "findings only in the new run"})
    findings_removed: list[dict] = field(metadata={"help": "findings only in the old run"})
    findings_unchanged: list[dict] = field(metadata={"help": "findings in both runs"})
    notes: list[str] = field(metadata={"help": "caveats (world size or step count differ)"})


def _row(d: Delta) -> dict:
    return {"label": d.label, "old": fmt_value(d.old, d.unit), "new": fmt_value(d.new, d.unit),
            "change": fmt_change(d), "worse": (d.change or 0) > 0, "better": (d.change or 0) < 0}


def _bars(rank_diff, scale_ms: float) -> list[PhaseBar]:
    by_key = {d.key: d for d in rank_diff.metrics}
    bars = []
    for side in ("old", "new"):
        values = {p: getattr(by_key[f"phase_ms.{p}"], side) for p in PHASES}
        total = sum(v for v in values.values() if v is not None) if any(
            v is not None for v in values.values()) else None
        segments = [{"phase": p, "label": PHASE_LABELS[p], "ms": fmt_ms(v),
                     "width_pct": round(100.0 * v / scale_ms, 2) if v and scale_ms > 0 else 0.0}
                    for p, v in values.items()]
        bars.append(PhaseBar(side, total, segments))
    return bars


def _scale_ms(diff: SummaryDiff) -> float:
    totals = [0.0]
    for r in diff.ranks:
        for side in ("old", "new"):
            totals.append(sum(getattr(d, side) or 0.0 for d in r.metrics if d.key.startswith("phase_ms.")))
    return max(totals)


def diff_page(diff: SummaryDiff) -> DiffPage:
    scale = _scale_ms(diff)
    ranks = [RankSection(r.rank, [_row(d) for d in r.metrics if shown(d)], _bars(r, scale))
             for r in diff.ranks]
    return DiffPage(
        title=f"traceanalyze diff: {diff.old} -> {diff.new}", old=diff.old, new=diff.new,
        job_rows=[_row(d) for d in diff.job if shown(d)], ranks=ranks,
        phases=[{"phase": p, "label": PHASE_LABELS[p]} for p in PHASES],
        findings_added=diff.findings_added, findings_removed=diff.findings_removed,
        findings_unchanged=diff.findings_unchanged, notes=diff.notes,
    )


def render_diff_html(diff: SummaryDiff) -> str:
    """One self-contained HTML page (inline CSS, no scripts, no network); all text escaped."""
    return render("diff.html", page=diff_page(diff))
