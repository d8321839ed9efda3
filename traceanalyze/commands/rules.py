"""`traceanalyze rules`: list the rule pack (id, severity, title, parameters)."""

from __future__ import annotations

import json

import click

from traceanalyze.diagnosis.ruleset import load_rules, rules_markdown


def rules_as_dicts(rules) -> list[dict]:
    return [{"id": r.id, "title": r.title, "severity": r.severity,
             "params": {p.name: {"default": p.default, "unit": p.unit, "help": p.help}
                        for p in r.params.values()}}
            for r in rules]


def rules_table(rules) -> str:
    width = max((len(r.id) for r in rules), default=4)
    lines = [f"{'rule':<{width}}  {'severity':<8}  title"]
    lines += [f"{r.id:<{width}}  {r.severity:<8}  {r.title}" for r in rules]
    return "\n".join(lines) + "\n"


@click.command(name="rules")
@click.option("--format", "fmt", type=click.Choice(["table", "markdown", "json"]), default="table",
              show_default=True)
def command(fmt: str):
    """List the rules; `traceanalyze explain RULE` tells what one checks and how to tune it."""
    rules = load_rules()
    if fmt == "json":
        click.echo(json.dumps(rules_as_dicts(rules), indent=2))
    elif fmt == "markdown":
        click.echo(rules_markdown(rules), nl=False)
    else:
        click.echo(rules_table(rules), nl=False)
