"""summary dict -> the compact verdict printed in the terminal (plain text, 80 columns)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import click

import traceanalyze.escape as escape
from traceanalyze.output.charts import hot_ranks
from traceanalyze.output.presentation import is_gpu_trace, mean_step_ms, ordered_findings, rank_skew_pct
from traceanalyze.output.units import (
    PHASE_SHORT_LABELS,
    PHASES,
    fmt_ms,
    fmt_pct,
    fmt_rank_count,
    fmt_ranks,
    fmt_steps,
)

WIDTH = 80
MAX_RANK_ROWS = 8
SEVERITY_STYLE = {"error": {"fg": "red", "bold": True}, "warning": {"fg": "yellow", "bold": True},
                  "info": {"fg": "blue", "bold": True}}


class _Style:
    def __init__(self, color: bool) -> None:
        self.color = color

    def __call__(self, text: str, **style) -> str:
        return click.style(text, **style) if self.color else text


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}" if value else "0"


def _header(summary: dict, st: _Style) -> list[str]:
    aligned = summary["steps"].get("aligned") or []
    gpu = is_gpu_trace(summary)
    name = Path(summary["trace_dir"].rstrip("/")).name or summary["trace_dir"]
    ranks = fmt_rank_count(len(summary["ranks"]), summary["world_size"])
    lines = [st(name, bold=True) + f" - {ranks}, {len(aligned)} aligned step"
             f"{'s' if len(aligned) != 1 else ''} ({fmt_steps(aligned)}), {'GPU' if gpu else 'CPU-only'}"]
    layout = summary.get("layout")
    if layout and [d["abbrev"] for d in layout["dimensions"]] != ["DP"]:  # (plain data parallel needs no line)
        lines.append(f"Parallelism  {layout['text']}")
    return lines


def _step_line(summary: dict, st: _Style) -> list[str]:
    steps = summary["steps"]
    median, worst = steps.get("median_rank_step_ms"), steps.get("worst_rank_step_ms")
    if len(summary["ranks"]) < 2 or steps.get("worst_rank") is None:
        return [f"Step time  {fmt_ms(median)} (median)"]
    skew = rank_skew_pct(summary)
    delta = f" ({skew:+.1f}%)" if skew is not None else ""
    return [f"Own step time  median rank {fmt_ms(median)} | worst: rank {steps['worst_rank']} "
            f"{fmt_ms(worst)}{delta}",
            "  (own = the step minus the time spent waiting for other ranks)"]


def _shown_ranks(summary: dict, hot: set[int]) -> list[dict]:
    ranks = summary["ranks"]
    if len(ranks) <= MAX_RANK_ROWS:
        return ranks
    return [r for r in ranks if r["rank"] in hot][:MAX_RANK_ROWS]


def _shown_phases(summary: dict) -> tuple[str, ...]:
    """PHASES, less pipeline_wait when no rank waits at a send / recv (a job without pipeline stages)."""
    piped = any((r["metrics"].get("phases_ms") or {}).get("pipeline_wait") for r in summary["ranks"])
    return PHASES if piped else tuple(p for p in PHASES if p != "pipeline_wait")


def _phase_table(summary: dict, hot: set[int], st: _Style) -> list[str]:
    phases_shown = _shown_phases(summary)
    head = "Phases (mean ms)".ljust(17) + "".join(PHASE_SHORT_LABELS[p].rjust(7) for p in phases_shown) + "   step"
    lines = [head]
    rows = [(f"  rank {r['rank']}" + (" *" if r["rank"] in hot else ""), r["metrics"]["phases_ms"],
             mean_step_ms(r["metrics"])) for r in _shown_ranks(summary, hot)]
    spread = summary.get("rank_distribution") or {}
    if len(summary["ranks"]) > MAX_RANK_ROWS and spread.get("phases_ms"):
        rows.insert(0, ("  median rank", {p: (spread["phases_ms"].get(p) or {}).get("median") for p in PHASES},
                        (spread.get("mean_step_ms") or {}).get("median")))
    for label, phases, step_ms in rows:
        text = label.ljust(17) + "".join(_num(phases.get(p)).rjust(7) for p in phases_shown) + _num(step_ms).rjust(7)
        lines.append(st(text, bold=True) if label.endswith("*") else text)
    hidden = len(summary["ranks"]) - len(rows) + (1 if rows and rows[0][0] == "  median rank" else 0)
    if hidden > 0:
        lines.append(f"  ({hidden} more ranks in report.html)")
    lines.append("  comm = communication exposed (blocked on a collective); step = the mean step")
    if "pipeline_wait" in phases_shown:
        lines.append("  pipe = blocked on a send / recv (between pipeline stages, or round a ring exchange)")
    if hot:
        lines.append("  * named by a finding, or the slowest rank")
    return lines


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _advice_text(advice: str) -> str:
    """The advice in full, as one paragraph per blank-line-separated block (wrapped by the caller)."""
    paras = [" ".join(line.strip().lstrip("-* ").strip() for line in block.splitlines())
             for block in (advice or "").split("\n\n")]
    return "\n".join(p for p in paras if p)


def _finding_lines(f: dict, n_ranks: int, st: _Style) -> list[str]:
    sev = f["severity"].upper().ljust(7)
    cost = f.get("cost") or {}
    ranks = f.get("ranks") or []
    who = "all ranks" if n_ranks > 1 and len(set(ranks)) == n_ranks else (
        f"rank{'s' if len(ranks) != 1 else ''} {fmt_ranks(ranks)}" if ranks else "no rank")
    parts = [f["rule"], who]
    if cost.get("ms_per_step") is not None:
        parts.append(f"costs {fmt_ms(cost['ms_per_step'])}/step ({fmt_pct(cost.get('pct_of_step'))} of the step)")
    indent = " " * 9
    lines = [" " + st(sev, **SEVERITY_STYLE.get(f["severity"], {})) + " " + " | ".join(parts)]
    lines += textwrap.wrap(f["title"], WIDTH, initial_indent=indent, subsequent_indent=indent)
    folded = [e["rule"] for e in (f.get("evidence") or {}).get("explains", [])]
    if folded:
        lines += textwrap.wrap("explains: " + ", ".join(folded) + " (one root cause, cost counted once)",
                               WIDTH, initial_indent=indent, subsequent_indent=indent + "  ")
    for i, para in enumerate(_advice_text(f.get("advice") or "").splitlines()):
        lines += textwrap.wrap(para, WIDTH, initial_indent=indent + ("try: " if i == 0 else "     "),
                               subsequent_indent=indent + "     ")
    return lines


def _findings(summary: dict, st: _Style) -> list[str]:
    ordered = ordered_findings(summary)
    if not ordered:
        return ["No findings: no rule fired on this trace."]
    counts = [_plural(sum(1 for f in ordered if f["severity"] == sev), sev) for sev in ("error", "warning")]
    counts.append(f"{sum(1 for f in ordered if f['severity'] == 'info')} info")
    lines = [f"Findings ({', '.join(counts)}), by severity, then cost"]
    for f in ordered:
        lines += _finding_lines(f, len(summary["ranks"]), st)
    return lines


def _load_issues(summary: dict, st: _Style) -> list[str]:
    issues = summary["load_issues"]
    warnings = [i for i in issues if i["severity"] in ("warning", "error")]
    if not issues:
        return []
    notes = len(issues) - len(warnings)
    lines = [f"Load issues: {_plural(len(warnings), 'warning')}, {_plural(notes, 'note')}"]
    for issue in (warnings or issues)[:3]:
        who = f"rank {issue['rank']}: " if issue.get("rank") is not None else ""
        lines += textwrap.wrap(f"{who}{issue['message']}", WIDTH, initial_indent="  ",
                               subsequent_indent="    ")
    if len(warnings or issues) > 3:
        lines.append(f"  ... {len(warnings or issues) - 3} more in the report")
    return lines


def _flight_recorder(summary: dict, st: _Style) -> list[str]:
    """What the Flight Recorder dumps are: how many, of which ranks, and the groups that stopped."""
    fr = summary.get("flight_recorder")
    if not fr:
        return []
    versions = sorted({d["version"] or "?" for d in fr["dumps"]})
    text = (f"Flight Recorder  {_plural(len(fr['dumps']), 'dump')} (ranks {fmt_ranks([d['rank'] for d in fr['dumps']])}, "
            f"version {', '.join(versions)}), {_plural(fr['groups_count'], 'process group')}"
            + (f" ({fr['groups_inferred_count']} with members inferred)" if fr["groups_inferred_count"] else "")
            + (f"; {fr['stopped_groups_count']} stopped with members missing" if fr["stopped_groups_count"]
               else "; every group's members reached the same collective"))
    return textwrap.wrap(text, WIDTH, subsequent_indent="  ")


def _judgement(summary: dict, st: _Style) -> list[str]:
    statement = (summary.get("judgement") or {}).get("statement")
    if not statement:
        return []
    return textwrap.wrap(statement, WIDTH, initial_indent="Judgement: ", subsequent_indent="  ")


def render_verdict(summary: dict, outputs: list[tuple[str, str]] = (), color: bool = False) -> str:
    """The terminal verdict; `outputs` are (label, path) lines printed at the end.

    Every string of the summary (trace folder, titles, load issues) and of `outputs` is
    escaped for the terminal (escape.py): a trace cannot send control sequences.
    """
    summary, outputs = escape.deep(summary, escape.terminal), escape.deep(list(outputs), escape.terminal)
    st = _Style(color)
    hot = hot_ranks(summary)
    if summary.get("flight_recorder") and not summary["ranks"]:  # dumps without profiler traces
        name = Path(summary["trace_dir"].rstrip("/")).name or summary["trace_dir"]
        head = [st(name, bold=True) + " - Flight Recorder dumps, no profiler trace"]
        blocks = [head + _flight_recorder(summary, st), _findings(summary, st), _load_issues(summary, st),
                  [f"{label:<8} {path}" for label, path in outputs]]
        return "\n\n".join("\n".join(b) for b in blocks if b) + "\n"
    blocks = [_header(summary, st) + _step_line(summary, st) + _flight_recorder(summary, st),
              _phase_table(summary, hot, st), _judgement(summary, st), _findings(summary, st),
              _load_issues(summary, st), [f"{label:<8} {path}" for label, path in outputs]]
    return "\n\n".join("\n".join(b) for b in blocks if b) + "\n"
