"""Stage 4 output: a Finding (one diagnosis of one rule) and how findings are ordered.

`Finding.to_dict()` is exactly the `findings[]` item of the summary.json contract
(ARCHITECTURE.md); `Finding.from_dict()` reads it back (baselines, diffs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

SEVERITIES = ("info", "warning", "error")  # ascending
_SEVERITY_LEVEL = {name: i for i, name in enumerate(SEVERITIES)}


def severity_level(severity: str) -> int:
    """info 0 < warning 1 < error 2; ValueError for anything else."""
    try:
        return _SEVERITY_LEVEL[severity]
    except KeyError:
        raise ValueError(f"severity must be one of {', '.join(SEVERITIES)}, not {severity!r}") from None


@dataclass(frozen=True)
class Cost:
    """What the problem costs the job: time per step, and that time as a share of the step."""

    ms_per_step: float | None = None
    pct_of_step: float | None = None

    def to_dict(self) -> dict:
        return {"ms_per_step": self.ms_per_step, "pct_of_step": self.pct_of_step}


@dataclass(frozen=True)
class Finding:
    """One diagnosis: which rule, how bad, where (ranks, steps), why (evidence), what to try (advice)."""

    rule: str                                   # rule id, e.g. "collective-straggler"
    severity: str                               # info | warning | error
    title: str                                  # one line for the user
    ranks: tuple[int, ...] = ()                 # ranks concerned (every rank for job-wide problems)
    steps: tuple[int, ...] = ()                 # ProfilerStep numbers where it was seen
    cost: Cost = field(default_factory=Cost)
    evidence: Mapping[str, Any] = field(default_factory=dict)  # numbers, cause, and "events" rows
    advice: str = ""                            # what to try first
    sql: str | None = None                      # runnable SQL (parameters bound) reproducing the evidence

    def __post_init__(self) -> None:
        severity_level(self.severity)

    def at_least(self, severity: str) -> bool:
        return severity_level(self.severity) >= severity_level(severity)

    def to_dict(self) -> dict:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "ranks": list(self.ranks),
            "steps": list(self.steps),
            "title": self.title,
            "cost": self.cost.to_dict(),
            "evidence": dict(self.evidence),
            "advice": self.advice,
            "sql": self.sql,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        cost = data.get("cost") or {}
        return cls(
            rule=data["rule"],
            severity=data["severity"],
            title=data.get("title", ""),
            ranks=tuple(data.get("ranks") or ()),
            steps=tuple(data.get("steps") or ()),
            cost=Cost(cost.get("ms_per_step"), cost.get("pct_of_step")),
            evidence=dict(data.get("evidence") or {}),
            advice=data.get("advice") or "",
            sql=data.get("sql"),
        )


def finding_order(severity: str, ms_per_step: float | None, rule: str, ranks: Iterable[int]) -> tuple:
    """THE order of findings, everywhere they are listed (summary.json, the terminal verdict, the
    HTML report, the notebook, the CI formats and the gate, diff): worst first.

    Severity first (an unknown one after info), then cost per step (largest first, unknown cost
    last), then rule id and ranks.
    Why severity before cost: severity is the verdict (an error holds the whole job back and is
    what fails `check` by default; an info finding is a code observation whose "cost" can be a
    large share of a step that is fine), and the root-cause engine makes costs additive in this
    order (`rootcause.cap_costs`: a finding keeps at most what the ones above it left), so read
    top down the costs add up only in this order.
    """
    return (-_SEVERITY_LEVEL.get(severity, -1), ms_per_step is None, -(ms_per_step or 0.0), rule,
            tuple(sorted(ranks)))


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Findings in `finding_order` (worst first)."""
    return sorted(findings, key=lambda f: finding_order(f.severity, f.cost.ms_per_step, f.rule, f.ranks))


def sort_finding_dicts(findings: Iterable[Mapping[str, Any]] | None) -> list[Mapping[str, Any]]:
    """summary.json `findings[]` items in `finding_order` (a summary written by this version is
    already in it; an older or hand-made one is put in it)."""
    def key(f: Mapping[str, Any]):
        return finding_order(f.get("severity"), (f.get("cost") or {}).get("ms_per_step"),
                             str(f.get("rule")), f.get("ranks") or ())

    return sorted(findings or (), key=key)
