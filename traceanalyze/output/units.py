"""How numbers read to a person: ms, bytes, percentages (shared by the terminal and HTML renderers)."""

from __future__ import annotations

import math

# the one list of phase names and their labels (re-exported)
from traceanalyze.analysis.metrics import PHASE_LABELS, PHASE_LONG_LABELS, PHASES  # noqa: F401

# column heads of the terminal's phase table (7 characters a column)
PHASE_SHORT_LABELS = {"data_wait": "data", "h2d": "h2d", "forward": "fwd", "backward": "bwd",
                      "optimizer": "optim", "comm_exposed": "comm", "pipeline_wait": "pipe",
                      "other": "other"}
# the phases of `traceanalyze scaling` (scaling.PHASES: comm_exposed split into communication + wait)
SCALING_PHASE_LABELS = {**{p: PHASE_LABELS[p] for p in ("data_wait", "h2d", "forward", "backward", "optimizer")},
                        "communication": "communication", "wait": "wait for ranks", "other": "other host"}


def fmt_ms(value: float | None) -> str:
    """12.3 ms, 150 ms, 0.42 ms; an em dash when unknown."""
    if value is None:
        return "—"
    if abs(value) >= 100:
        return f"{value:,.0f} ms"
    if abs(value) >= 10:
        return f"{value:.1f} ms"
    return f"{value:.2f} ms"


def fmt_pct(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.0f}%" if abs(value) >= 10 else f"{value:.1f}%"


def fmt_bytes(value: int | None) -> str:
    """Binary units: 7.0 MiB."""
    if value is None:
        return "—"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # pragma: no cover


def fmt_steps(steps: list[int]) -> str:
    """[2, 3, 4, 7] -> '2-4, 7'."""
    if not steps:
        return "none"
    ordered = sorted(set(steps))
    runs: list[list[int]] = [[ordered[0], ordered[0]]]
    for s in ordered[1:]:
        if s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def fmt_ranks(ranks: list[int]) -> str:
    return fmt_steps(ranks).replace("none", "—")


def fmt_rank_count(loaded: int, world_size: int) -> str:
    """'4 ranks', '1 rank', or '2 of 128 ranks' when only some ranks' traces were analysed."""
    if world_size > loaded:
        return f"{loaded} of {world_size} ranks"
    return f"{loaded} rank{'s' if loaded != 1 else ''}"


def nice_ticks(max_value: float, count: int = 4) -> list[float]:
    """Round axis ticks from 0 up to at least max_value: 0, 50, 100, 150."""
    if max_value <= 0:
        return [0.0]
    raw = max_value / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(int(math.ceil(max_value / step)) + 1)]


def fmt_tick(value: float) -> str:
    return f"{value:g}"


def text_table(header: list[str], rows: list[list[str]], right_from: int = 1) -> list[str]:
    """Aligned plain-text table lines (header, rule, rows): columns from `right_from` on right-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells):
        return "  ".join(c.rjust(w) if i >= right_from else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return [line(header), line(["-" * w for w in widths]), *map(line, rows)]
