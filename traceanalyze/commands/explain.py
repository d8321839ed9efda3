"""`traceanalyze explain RULE`: what a rule checks, why it matters, what to do, its parameters."""

from __future__ import annotations

import textwrap

import click

from traceanalyze.errors import TraceanalyzeError
from traceanalyze.diagnosis.ruleset import Rule, load_rules

SECTIONS = (("what", "What it does"), ("why", "Why is this bad?"), ("example", "Example"),
            ("fix", "What to do"), ("tuning", "Why these thresholds"))


def _para(text: str) -> str:
    return "\n\n".join(textwrap.fill(p, width=88) for p in text.split("\n\n"))


def explain_text(rule: Rule) -> str:
    lines = [f"{rule.id}: {rule.title}",
             textwrap.fill(f"severity: {rule.severity_text()} (a config file's severity for the "
                           "rule replaces it)", width=88, subsequent_indent="  "), ""]
    for key, heading in SECTIONS:
        if rule.docs.get(key):
            lines += [f"## {heading}", _para(rule.docs[key]), ""]
    lines += ["## When it judges", _para(f"Needs {rule.judge.describe()}; below that it abstains "
                                         "(no finding; the summary's judgement says why)."), ""]
    if rule.explains:
        lines += ["## Root cause", _para("A finding of this rule explains, and absorbs (one finding, the "
                                         "cost counted once), a finding of: "
                                         + "; ".join(e.describe() for e in rule.explains) + "."), ""]
    if rule.params:
        lines.append("## Parameters")
        for p in rule.params.values():
            lines.append(f"  {p.name} = {p.default} ({p.unit})")
            lines.append(textwrap.indent(textwrap.fill(p.help, width=84), "      "))
        lines += ["", f"Override with --param {rule.id}.NAME=VALUE, or in pyproject.toml:",
                  f"  [tool.traceanalyze.rules.{rule.id}]", ""]
    return "\n".join(lines)


@click.command(name="explain")
@click.argument("rule_id")
def command(rule_id: str):
    """Explain one rule (see `traceanalyze rules` for the ids)."""
    rules = {r.id: r for r in load_rules()}
    if rule_id not in rules:
        raise TraceanalyzeError(f"unknown rule {rule_id!r} (rules: {', '.join(sorted(rules))})")
    click.echo(explain_text(rules[rule_id]), nl=False)
