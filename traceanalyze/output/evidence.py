"""A finding's evidence dict -> items a person reads: named values with units, nested dicts as
lines, per-step series as a small chart and table; NULL, empty and template-only values left out.

Units come from the key's suffix (the naming rule of every table and rule column): `_ms`,
`_ns`, `_pct`, `_bytes`, `_count`; the label is the key without it ("others_wait_ms" -> "others
wait", 60.0 -> "60.0 ms"). Values stay plain strings: the template escapes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from traceanalyze.output import charts as chartlib
from traceanalyze.output.units import fmt_bytes, fmt_ms, fmt_pct, fmt_steps

# keys the summary carries for other purposes: `events` has its own table
SKIPPED_KEYS = ("events",)
# rule columns that exist to be spliced into the title or advice (", every 3 steps"): shown there
TEMPLATE_SUFFIXES = ("_text", "_note", "_advice")
UNIT_SUFFIXES = ("_ms", "_ns", "_pct", "_bytes", "_count")
MAX_LINES = 12
MAX_SERIES_ROWS = 60


@dataclass(frozen=True)
class EvidenceItem:
    """One piece of evidence, ready to print."""

    label: str = field(metadata={"help": "the key without its unit, spaces for underscores ('others wait')"})
    value: str = field(default="", metadata={"help": "the value with its unit ('60.0 ms'); '' for lines / series"})
    lines: list[str] = field(default_factory=list, metadata={"help": "a nested dict or list, one readable line each"})
    columns: list[str] = field(default_factory=list, metadata={"help": "a per-step series: column labels"})
    rows: list[list[str]] = field(default_factory=list, metadata={"help": "a per-step series: formatted cells"})
    chart: chartlib.Chart | None = field(default=None, metadata={"help": "a per-step series: a small bar chart"})


def _unit_key(key: str) -> str:
    """The key as far as its unit: 'excess_ms_per_step' -> 'excess_ms' (a rate per step is in ms)."""
    head, sep, _ = key.partition("_ms_per_")
    return head + "_ms" if sep else key


def label(key: str) -> str:
    """'others_wait_ms' -> 'others wait', 'late_steps_count' -> 'late steps',
    'excess_ms_per_step' -> 'excess per step'."""
    key = key.replace("_ms_per_", "_per_")
    for suffix in UNIT_SUFFIXES:
        if key.endswith(suffix) and len(key) > len(suffix):
            key = key[: -len(suffix)]
            break
    return key.replace("_", " ")


def fmt_value(key: str, value) -> str:
    """A scalar with the unit its key names: 60.0 -> '60.0 ms' for *_ms, 37.5 -> '38%' for *_pct."""
    key = _unit_key(key)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        if key.endswith("_ms"):
            return fmt_ms(value)
        if key.endswith("_ns"):
            return fmt_ms(value / 1e6) if abs(value) >= 1e4 else f"{value:,.0f} ns"
        if key.endswith("_pct"):
            return fmt_pct(value)
        if key.endswith("_bytes"):
            return f"{value:,.0f} B" if abs(value) < 1024 else f"{fmt_bytes(value)} ({value:,.0f} B)"
        if isinstance(value, int):
            return f"{value:,}" if key.endswith("_count") or abs(value) >= 10_000 else str(value)
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    return str(value)


def _empty(value) -> bool:
    return value is None or value == "" or (isinstance(value, (list, tuple, dict)) and not value)


def _shown_keys(d: dict) -> list[str]:
    """Keys worth a line: not empty, and a yes/no `x` only when no `x_pct` says more."""
    return [k for k, v in d.items()
            if not _empty(v) and not (isinstance(v, bool) and f"{k}_pct" in d and d[f"{k}_pct"] is not None)]


def _dict_line(d: dict) -> str:
    return " · ".join(f"{label(k)} {_flat(k, d[k])}" for k in _shown_keys(d))


def _flat(key: str, value) -> str:
    """Any value as one short line (nested values summarised)."""
    if isinstance(value, dict):
        return _dict_line(value)
    if isinstance(value, (list, tuple)):
        numbered = key in ("steps", "ranks") or key.endswith(("_steps", "_ranks"))
        if numbered and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return fmt_steps(list(value))
        return ", ".join(_flat(key, v) for v in value)
    return fmt_value(key, value)


def _folded_line(f: dict) -> str:
    """A finding folded into this one (`explains`) or a rank of a group (`by_rank`)."""
    cost = f.get("cost") if isinstance(f.get("cost"), dict) else f
    ms = cost.get("ms_per_step") if isinstance(cost, dict) else None
    head = " ".join(str(f[k]) for k in ("rule", "severity") if f.get(k))
    ranks = f"ranks {fmt_steps(f['ranks'])}" if isinstance(f.get("ranks"), list) and f["ranks"] else ""
    parts = [p for p in (head, ranks, str(f.get("title") or ""), f"{fmt_ms(ms)} per step" if ms is not None else "")
             if p]
    return " — ".join(parts)


def _series(key: str, rows: list[dict], chart_id: str) -> EvidenceItem:
    columns = [c for c in dict.fromkeys(k for r in rows for k in r) if not all(_empty(r.get(c)) for r in rows)]
    shown = rows[:MAX_SERIES_ROWS]
    cells = [["" if _empty(r.get(c)) else _flat(c, r.get(c)) for c in columns] for r in shown]
    value_key = next((c for c in columns if c != "step" and _unit_key(c).endswith(UNIT_SUFFIXES)
                      and all(isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool) for r in shown)),
                     None)
    chart = None
    if value_key is not None:
        chart = chartlib.step_series(f"{chart_id}-{key}-{value_key}", [r["step"] for r in shown],
                                     [float(r[value_key]) for r in shown],
                                     [fmt_value(value_key, r[value_key]) for r in shown], label(value_key))
    return EvidenceItem(label(key), columns=[label(c) for c in columns], rows=cells, chart=chart)


def evidence_items(evidence: dict, chart_id: str = "ev") -> list[EvidenceItem]:
    """The evidence of one finding as items, in the rule's column order."""
    items: list[EvidenceItem] = []
    keys = [k for k, v in evidence.items()
            if k not in SKIPPED_KEYS and not k.endswith(TEMPLATE_SUFFIXES) and not _empty(v)]
    labels = [label(k) for k in keys]
    for key in keys:
        value = evidence[key]
        name = label(key) if labels.count(label(key)) == 1 else key.replace("_", " ")  # cause_steps, cause_steps_count
        if key in ("explains", "by_rank") and isinstance(value, list):
            items.append(EvidenceItem(name, lines=[_folded_line(v) if isinstance(v, dict) else str(v)
                                                   for v in value][:MAX_LINES]))
        elif isinstance(value, dict):
            items.append(EvidenceItem(name, lines=[f"{label(k)}: {_flat(k, value[k])}"
                                                   for k in _shown_keys(value)][:MAX_LINES]))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            if all("step" in v and isinstance(v["step"], int) for v in value):
                items.append(_series(key, value, chart_id))
            else:
                items.append(EvidenceItem(name, lines=[_dict_line(v) for v in value][:MAX_LINES]))
        else:
            items.append(EvidenceItem(name, _flat(key, value)))
    return items
