"""Stage 4, the rules stage: the selected rules run on the trace database -> a `Diagnosis`.

The rule engine (`ruleset.py`: what a rule is, how one runs), the judge (`judge.py`: can the
window support a verdict) and the root-cause folding (`rootcause.py`) are its parts; this is
the stage the pipeline calls between the tables (stages 2-3) and the summary (stage 5):

    diagnosis = diagnose(con, config)           # findings, abstentions, rules that broke
    summary = build_summary(con, trace_dir, diagnosis)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from traceanalyze.analysis.metrics import require_analysis_tables
from traceanalyze.diagnosis.judge import Window, window_facts
from traceanalyze.diagnosis.rootcause import one_per_root_cause
from traceanalyze.diagnosis.ruleset import load_rules, run_rule
from traceanalyze.findings import Finding, finding_order
from traceanalyze.lazy_import import duckdb

# Tests set this so that a rule that breaks fails loudly instead of becoming a load issue.
STRICT_RULES_ENV = "TRACEANALYZE_STRICT_RULES"


@dataclass(frozen=True)
class Diagnosis:
    """What the rules stage hands the summary."""

    findings: tuple[Finding, ...]           # one per root cause, worst first (findings.sort_findings)
    window: Window                          # what the trace window supports (judge.window_facts)
    abstained: tuple[tuple[str, str], ...]  # (rule id, why): rules that could not judge this window
    failures: tuple[tuple[str, str], ...]   # (rule id, one-line error): rules that broke on this trace
    peak_tflops: float = 0.0                # the device peak the user gave (low-mfu.peak_tflops; 0: gpu_specs)


# the rule whose peak_tflops parameter is the user's device peak (the summary's MFU uses it too)
PEAK_RULE = "low-mfu"


def diagnose(con, config=None) -> Diagnosis:
    """Every selected rule (config: select / ignore / params / severity / rules_dirs), one
    finding per root cause (rule.yaml `explains` / `group_ranks`), worst first.

    A rule that fails on this trace (an odd trace its SQL did not foresee) does not stop the
    others: it is named in `failures` (the summary turns it into a load issue), unless
    $TRACEANALYZE_STRICT_RULES is set, which raises instead.
    """
    require_analysis_tables(con)
    window = window_facts(con)
    rules = load_rules(getattr(config, "rules_dirs", ()) or ())
    select = set(getattr(config, "select", None) or ())
    ignore = set(getattr(config, "ignore", None) or ())
    params = getattr(config, "params", None) or {}
    severities = getattr(config, "severity", None) or {}
    findings: list[Finding] = []
    failures: list[tuple[str, str]] = []
    abstained: list[tuple[str, str]] = []
    for rule in rules:
        if (select and rule.id not in select) or rule.id in ignore:
            continue
        try:
            findings += _in_order(run_rule(con, rule, params.get(rule.id), severities.get(rule.id), window,
                                           abstained))
        except (duckdb.Error, ArithmeticError, LookupError, TypeError, ValueError) as exc:
            if os.environ.get(STRICT_RULES_ENV):
                raise
            failures.append((rule.id, " ".join(f"{type(exc).__name__}: {exc}".split())[:300]))
    peak = float((params.get(PEAK_RULE) or {}).get("peak_tflops") or 0.0)
    return Diagnosis(tuple(one_per_root_cause(findings, rules)), window, tuple(abstained), tuple(failures), peak)


def _in_order(findings: list[Finding]) -> list[Finding]:
    """A rule's findings worst first, ties by steps and title: the root-cause folding takes the
    first finding that explains another, so it must not see them in the order the rule's rows
    happened to come in (a detect query need not order its rows)."""
    return sorted(findings, key=lambda f: (finding_order(f.severity, f.cost.ms_per_step, f.rule, f.ranks),
                                           f.steps, f.title))
