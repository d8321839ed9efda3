"""Stage 6a: a summary + a policy (+ a baseline summary) -> GateResult(exit_code, reasons).

The gate fails (exit code 1) when, after `--select` / `--ignore`:
  - a finding's severity is at or above `fail_on` and, when a baseline is given, the
    finding is new (its rule is not in the baseline, or it is there on other ranks);
    findings already in the baseline are accepted, like a linter's baseline file;
  - a load issue has severity "error" (a rank's data cannot be trusted), or is a "heavy"
    warning: data of a rank lost beyond HEAVY_LOSS_PCT (see `heavy_loss`). Lighter load
    warnings do not fail the gate but are always named in its output ("passed with N load
    warnings"), never silent;
  - with a baseline, a job metric regressed beyond `max_regression_pct`.

When does a metric regress? Higher is worse for every compared metric.
  - times (ms) and memory (bytes): the increase is more than `max_regression_pct` % of the
    baseline value AND at least an absolute floor (`min_regression_ms`, 1 ms;
    `min_regression_bytes`, 1 MiB), so 0.1 -> 0.2 ms is not a "100 % regression";
  - shares of the step (pct: GPU idle %, rank skew %): the increase is more than
    `max_regression_pct` percentage points (2 % -> 3 % idle is +1 point, not +50 %).
Metrics that are null in either summary (GPU metrics of a CPU trace) are not compared; one
the baseline has and the candidate lacks (null or NaN) is named in a note.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from traceanalyze.compare.diff import Delta, diff_summaries, finding_key
from traceanalyze.errors import TraceanalyzeError
from traceanalyze.findings import SEVERITIES, severity_level, sort_finding_dicts
from traceanalyze.analysis.metrics import median

DEFAULT_FAIL_ON = "error"
# A load warning is heavy (fails the gate) when it cost a rank at least this share of its
# data: a truncated file whose events are this much smaller than the median other rank's, or
# a counted issue (events skipped) covering this share of the rank's events. A trace file
# that could not be read at all (a FIFO, a device, a dangling link named like a rank) is heavy.
HEAVY_LOSS_PCT = 10.0
WHOLE_FILE_LOST_KINDS = frozenset({"not-a-file", "rank-failed", "rank-untimed", "shard-unusable",
                                   "shard-corrupt"})
DEFAULT_MAX_REGRESSION_PCT = 10.0
MIN_REGRESSION_MS = 1.0
MIN_REGRESSION_BYTES = 1 << 20


@dataclass(frozen=True)
class GatePolicy:
    """What makes the gate fail. Empty `select` means every rule."""

    fail_on: str = DEFAULT_FAIL_ON
    select: frozenset[str] = frozenset()
    ignore: frozenset[str] = frozenset()
    max_regression_pct: float = DEFAULT_MAX_REGRESSION_PCT
    min_regression_ms: float = MIN_REGRESSION_MS
    min_regression_bytes: int = MIN_REGRESSION_BYTES

    def __post_init__(self) -> None:
        if self.fail_on not in SEVERITIES:
            raise TraceanalyzeError(f"fail-on must be one of {', '.join(SEVERITIES)}, "
                                    f"not {self.fail_on!r}")
        if not self.max_regression_pct >= 0:
            raise TraceanalyzeError(f"max-regression must be a percentage >= 0, "
                                    f"not {self.max_regression_pct!r}")

    def selects(self, rule: str) -> bool:
        return (not self.select or rule in self.select) and rule not in self.ignore


@dataclass(frozen=True)
class Regression:
    """A baseline comparison that exceeded its limit."""

    delta: Delta
    limit: str  # e.g. "+10% and >= 1 ms"

    def reason(self) -> str:
        d = self.delta
        return (f"regression: {d.label} {_fmt(d.old, d.unit)} -> {_fmt(d.new, d.unit)} "
                f"({_fmt_change(d)}; limit {self.limit})")


@dataclass(frozen=True)
class GateResult:
    """The gate's verdict; `findings` are the selected ones, each with "new" and "fails"."""

    exit_code: int
    reasons: list[str]
    findings: list[dict]
    new_findings: list[dict]
    regressions: list[Regression] = field(default_factory=list)
    compared: list[Delta] = field(default_factory=list)
    load_issues: list[dict] = field(default_factory=list)  # those that fail the gate
    notes: list[str] = field(default_factory=list)
    load_warnings: list[dict] = field(default_factory=list)  # load warnings that do not fail it
    baseline_used: bool = False
    policy: GatePolicy = GatePolicy()

    @property
    def passed(self) -> bool:
        return self.exit_code == 0


def severity_at_least(severity: str, threshold: str) -> bool:
    try:
        return severity_level(severity) >= severity_level(threshold)
    except ValueError as exc:
        raise TraceanalyzeError(f"bad finding in the summary: {exc}") from None


def parse_rule_list(text: str | None) -> frozenset[str]:
    """'a,b , c' -> {'a', 'b', 'c'}; None or '' -> empty."""
    return frozenset(part.strip() for part in (text or "").split(",") if part.strip())


def mark_findings(summary: dict, policy: GatePolicy, baseline: dict | None) -> list[dict]:
    """Selected findings as copies with "new" (vs the baseline) and "fails" (the gate) set."""
    known = {finding_key(f) for f in (baseline or {}).get("findings") or []}
    out = []
    for finding in sort_finding_dicts(summary.get("findings")):
        if not policy.selects(finding["rule"]):
            continue
        new = baseline is None or finding_key(finding) not in known
        fails = new and severity_at_least(finding.get("severity", ""), policy.fail_on)
        out.append({**finding, "new": new, "fails": fails})
    return out


def find_regressions(baseline: dict, summary: dict, policy: GatePolicy
                     ) -> tuple[list[Delta], list[Regression], list[str]]:
    """(compared deltas, regressions beyond the policy's limits, notes) for the job metrics."""
    diff = diff_summaries(baseline, summary)
    compared = [d for d in diff.job if d.change is not None and math.isfinite(d.change)]
    regressions = [Regression(d, _limit(d, policy)) for d in compared if _regressed(d, policy)]
    # a metric the baseline has but this run cannot compute (null, NaN) is said, not dropped
    dropped = [d for d in diff.job if _finite(d.old) and not _finite(d.new)]
    notes = [*diff.notes, *(f"not compared: {d.label} is {_fmt(d.old, d.unit)} in the baseline but "
                            f"not computable in this run ({d.new})" for d in dropped)]
    return compared, regressions, notes


def _finite(value) -> bool:
    return value is not None and math.isfinite(value)


def _limit(delta: Delta, policy: GatePolicy) -> str:
    pct = f"{policy.max_regression_pct:g}"
    if delta.unit == "pct":
        return f"+{pct} points"
    floor = (f"{policy.min_regression_ms:g} ms" if delta.unit == "ms"
             else _fmt(policy.min_regression_bytes, "bytes"))
    return f"+{pct}% and >= {floor}"


def _regressed(delta: Delta, policy: GatePolicy) -> bool:
    change = delta.change
    if change is None or change <= 0:
        return False
    if delta.unit == "pct":
        return change > policy.max_regression_pct
    floor = policy.min_regression_ms if delta.unit == "ms" else policy.min_regression_bytes
    return change >= floor and change > abs(delta.old) * policy.max_regression_pct / 100.0


def finding_reason(finding: dict) -> str:
    """One line: severity, rule, ranks, title (and whether it is new vs a baseline)."""
    ranks = finding.get("ranks") or []
    where = f" rank{'s' if len(ranks) > 1 else ''} {','.join(map(str, ranks))}" if ranks else ""
    title = " ".join(str(finding.get("title", "")).split())  # one line, whatever the trace held
    return f"{finding.get('severity')} {finding['rule']}{where}: {title}"


def load_issue_reason(issue: dict) -> str:
    rank = issue.get("rank")
    where = f"rank {rank}" if rank is not None else "trace"
    message = " ".join(str(issue.get("message", "")).split())
    heavy = f" [heavy: {issue['heavy']}]" if issue.get("heavy") else ""
    return f"load issue {issue.get('kind')} ({where}, {issue.get('file')}): {message}{heavy}"


def heavy_loss(issue: dict, summary: dict) -> str | None:
    """Why a warning-level load issue is heavy (see HEAVY_LOSS_PCT), or None."""
    if issue.get("severity") != "warning":
        return None
    if issue.get("kind") in WHOLE_FILE_LOST_KINDS:
        return "a trace file could not be read at all"
    ranks = {r.get("rank"): r for r in summary.get("ranks") or []}
    entry = ranks.get(issue.get("rank"))
    if entry is None:
        return None
    if issue.get("kind") == "truncated":
        others = [r.get("events_bytes") for k, r in ranks.items() if k != issue.get("rank")]
        others = [b for b in others if isinstance(b, (int, float)) and b > 0]
        mine = entry.get("events_bytes")
        if others and isinstance(mine, (int, float)):
            lost_pct = round(100.0 * (1 - mine / median(others)), 6)
            if lost_pct >= HEAVY_LOSS_PCT:
                return (f"about {lost_pct:.0f}% of the rank's events are missing against the median "
                        f"other rank (limit {HEAVY_LOSS_PCT:g}%)")
        return None
    count, events = issue.get("count"), entry.get("events")
    if isinstance(count, int) and isinstance(events, int) and events > 0:
        share_pct = round(100.0 * count / events, 6)
        if share_pct >= HEAVY_LOSS_PCT:
            return f"{share_pct:.0f}% of the rank's events (limit {HEAVY_LOSS_PCT:g}%)"
    return None


def evaluate(summary: dict, policy: GatePolicy = GatePolicy(), baseline: dict | None = None
             ) -> GateResult:
    """Apply the policy (and the baseline comparison) to one summary."""
    findings = mark_findings(summary, policy, baseline)
    reasons = [finding_reason(f) + (" [new]" if baseline is not None else "")
               for f in findings if f["fails"]]
    issues, light = [], []
    for issue in summary.get("load_issues") or []:
        heavy = heavy_loss(issue, summary)
        if issue.get("severity") == "error" or heavy:
            issues.append({**issue, "heavy": heavy} if heavy else issue)
        elif issue.get("severity") == "warning":
            light.append(issue)
    reasons += [load_issue_reason(i) for i in issues]
    compared, regressions, notes = [], [], []
    if baseline is not None:
        compared, regressions, notes = find_regressions(baseline, summary, policy)
        reasons += [r.reason() for r in regressions]
    if light:
        kinds = ", ".join(sorted({str(i.get("kind")) for i in light}))
        notes = [*notes, f"{len(light)} load warning(s) ({kinds}) below the heavy-loss limit of "
                         f"{HEAVY_LOSS_PCT:g}% do not fail the gate; see load_issues in summary.json"]
    return GateResult(
        exit_code=1 if reasons else 0, reasons=reasons, findings=findings,
        new_findings=[f for f in findings if f["new"]], regressions=regressions,
        compared=compared, load_issues=issues, notes=notes, load_warnings=light,
        baseline_used=baseline is not None, policy=policy,
    )


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "bytes":
        return f"{value / (1 << 20):,.1f} MiB"
    if unit == "pct":
        return f"{value:.1f}%"
    return f"{value:,.1f} ms"


def _fmt_change(delta: Delta) -> str:
    if delta.unit == "pct":
        return f"{delta.change:+.1f} points"
    rel = delta.change_pct
    return f"+{rel:.1f}%" if rel is not None else f"+{_fmt(delta.change, delta.unit)}"
