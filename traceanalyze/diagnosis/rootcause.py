"""Stage 4, after the rules: one finding per root cause.

Relations are data in rule.yaml, applied here to the findings of all rules:

- `explains:` a list of `{rule, when, overlap}`: a finding of this (specific) rule explains a
  finding of `rule` (general) when the general finding's evidence has the `when` values and the
  two share what `overlap` names (`ranks`, `steps`; default ranks). The general finding is
  folded into the specific one: one finding, the specific cause and advice, the general
  finding's evidence under `evidence.explains`, the higher severity, the cost counted once
  (the specific finding's, or the general one's where the specific has none).
- `group_ranks:` evidence keys: findings of this rule on different ranks with the same values
  of those keys (and the same severity) become one finding naming all the ranks; ranks run
  concurrently, so the group costs what its worst rank costs.

Last, costs are made additive: worst first, no finding may claim more of the step than the
findings before it left (`evidence.cost_overlap_pct` keeps what was cut), so the findings'
costs never add up to more than the step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from traceanalyze.findings import Cost, Finding, severity_level, sort_findings

OVERLAP_KEYS = ("ranks", "steps")


@dataclass(frozen=True)
class Explains:
    """A finding of the rule declaring this explains a finding of `rule` that matches."""

    rule: str
    when: Mapping[str, Any]
    overlap: tuple[str, ...] = ("ranks",)

    @classmethod
    def parse_list(cls, raw: Any, where: str, error) -> tuple[Explains, ...]:
        if raw is None:
            return ()
        if not isinstance(raw, list):
            raise error("explains must be a list of {rule, when, overlap}", where)
        out = []
        for item in raw:
            if isinstance(item, str):
                item = {"rule": item}
            if not isinstance(item, Mapping) or not item.get("rule"):
                raise error("each explains entry needs a rule", where)
            overlap = tuple(item.get("overlap", ("ranks",)))
            if not set(overlap) <= set(OVERLAP_KEYS):
                raise error(f"explains overlap must name {' / '.join(OVERLAP_KEYS)}", where)
            when = item.get("when") or {}
            if not isinstance(when, Mapping):
                raise error("explains when must be a mapping of evidence key -> value", where)
            out.append(cls(str(item["rule"]), dict(when), overlap))
        return tuple(out)

    def describe(self) -> str:
        """One line for docs: `collective-straggler (cause input, same ranks)`."""
        when = ", ".join(f"{k} {'/'.join(map(str, v)) if isinstance(v, (list, tuple)) else v}"
                         for k, v in self.when.items())
        return f"{self.rule} ({when + ', ' if when else ''}same {' and '.join(self.overlap)})"

    def matches(self, specific: Finding, general: Finding) -> bool:
        if general.rule != self.rule:
            return False
        if any(_values(general.evidence.get(k)) & _values(v) == set() for k, v in self.when.items()):
            return False
        return all(set(getattr(specific, k)) & set(getattr(general, k)) for k in self.overlap)


def _values(value: Any) -> set:
    return {str(v) for v in value} if isinstance(value, (list, tuple)) else {str(value)}


def _max_severity(a: str, b: str) -> str:
    return a if severity_level(a) >= severity_level(b) else b


def _cost_once(specific: Cost, general: Cost) -> Cost:
    """The specific rule measured its cause's cost; the general one's only where it has none."""
    return specific if specific.ms_per_step is not None else general


def _fold(specific: Finding, general: Finding) -> Finding:
    folded = {"rule": general.rule, "severity": general.severity, "title": general.title,
              "ranks": list(general.ranks), "cost": general.cost.to_dict(),
              "evidence": {k: v for k, v in general.evidence.items() if k != "events"}}
    evidence = dict(specific.evidence)
    evidence["explains"] = [*evidence.get("explains", []), folded]
    # `ranks` names the culprits: the specific finding's own ranks; the general finding's (the
    # ranks a job-wide symptom touches, the ranks that wait) stay under evidence.explains
    return replace(specific, severity=_max_severity(specific.severity, general.severity),
                   ranks=tuple(sorted(specific.ranks)) if specific.ranks else tuple(sorted(general.ranks)),
                   steps=tuple(sorted(set(specific.steps) | set(general.steps))),
                   cost=_cost_once(specific.cost, general.cost), evidence=evidence)


def _explained_depth(relations: Mapping[str, tuple[Explains, ...]]) -> dict[str, int]:
    """How many levels of more specific rules sit above each rule (cycles are cut)."""
    explained_by: dict[str, set[str]] = {}
    for specific, rels in relations.items():
        for rel in rels:
            explained_by.setdefault(rel.rule, set()).add(specific)

    def depth(rule: str, seen: frozenset) -> int:
        above = explained_by.get(rule, set()) - seen
        return 0 if not above else 1 + max(depth(r, seen | {rule}) for r in above)

    return {rule: depth(rule, frozenset()) for rule in relations}


def apply_explains(findings: list[Finding], relations: Mapping[str, tuple[Explains, ...]]) -> list[Finding]:
    """Fold every general finding into a specific finding that explains it. The middle of a
    chain folds first (collective-straggler takes intermittent-straggler, then token-skew takes
    collective-straggler with it), so one finding remains per root cause."""
    out: list[Finding | None] = list(findings)
    depth = _explained_depth(relations)
    order = sorted(range(len(out)), key=lambda i: -depth.get(out[i].rule, 0))
    for i in order:
        for relation in relations.get(out[i].rule, ()) if out[i] is not None else ():
            for j in range(len(out)):
                if i != j and out[j] is not None and relation.matches(out[i], out[j]):
                    out[i], out[j] = _fold(out[i], out[j]), None
    return [f for f in out if f is not None]


def group_ranks(findings: list[Finding], keys_by_rule: Mapping[str, tuple[str, ...]]) -> list[Finding]:
    """Same rule, same severity, same values of the rule's group keys, other ranks -> one finding."""
    groups: dict[tuple, list[Finding]] = {}
    out: list[Finding | tuple] = []
    for f in findings:
        keys = keys_by_rule.get(f.rule)
        if keys is None:
            out.append(f)
            continue
        key = (f.rule, f.severity, *(repr(f.evidence.get(k)) for k in keys))
        if key not in groups:
            groups[key] = []
            out.append(key)
        groups[key].append(f)
    return [item if isinstance(item, Finding) else _merge_group(groups[item]) for item in out]


def _merge_group(members: list[Finding]) -> Finding:
    if len(members) == 1:
        return members[0]
    worst = sort_findings(members)[0]
    ranks = tuple(sorted({r for f in members for r in f.ranks}))
    others = sorted(set(ranks) - set(worst.ranks))
    evidence = dict(worst.evidence)
    evidence["by_rank"] = [{"ranks": list(f.ranks), "title": f.title, **f.cost.to_dict()}
                           for f in sorted(members, key=lambda f: f.ranks)]
    return replace(worst, ranks=ranks, steps=tuple(sorted({s for f in members for s in f.steps})),
                   title=f"{worst.title} (the same on rank{'s' if len(others) > 1 else ''} "
                         f"{', '.join(map(str, others))})",
                   evidence=evidence)


def cap_costs(findings: Iterable[Finding]) -> list[Finding]:
    """Worst first, each finding keeps at most the share of the step the ones before it left."""
    out, used_pct = [], 0.0
    for f in sort_findings(findings):
        pct = f.cost.pct_of_step
        if pct is None or pct <= 0:
            out.append(f)
            continue
        allowed = max(0.0, 100.0 - used_pct)
        if pct > allowed + 1e-9:
            scale = allowed / pct
            ms = None if f.cost.ms_per_step is None else round(f.cost.ms_per_step * scale, 3)
            f = replace(f, cost=Cost(ms, round(allowed, 3)),
                        evidence={**f.evidence, "cost_overlap_pct": round(pct - allowed, 3)})
            pct = allowed
        used_pct += pct
        out.append(f)
    return out


def one_per_root_cause(findings: list[Finding], rules: Iterable) -> list[Finding]:
    """explains, then group_ranks, then additive costs; worst first."""
    rules = list(rules)
    relations = {r.id: r.explains for r in rules if r.explains}
    grouping = {r.id: r.group_ranks for r in rules if r.group_ranks is not None}
    return cap_costs(group_ranks(apply_explains(sort_findings(findings), relations), grouping))
