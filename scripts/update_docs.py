#!/usr/bin/env python3
"""Regenerate the generated sections of the documentation pages (schema, SQL helpers, rules, every
command's --help) from the code — `--check` fails on drift instead of writing.

Each page in `PAGES` is hand-written prose with generated sections delimited by
`<!-- NAME:start -->` / `<!-- NAME:end -->` markers; every section must have exactly one marker pair
in its page (a missing marker is an error, so a section cannot silently stop being published).
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# page (relative to the repository root) -> the generated sections it holds
PAGES = {
    "docs/reference/schema.md": ("schema",),
    "docs/reference/sql-helpers.md": ("macros",),
    "docs/reference/rules.md": ("rules", "rule-docs"),
    "docs/reference/cli.md": ("help",),
}


def generated_sections() -> dict[str, str]:
    from traceanalyze.db import MACRO_FILES, _sql_text, table_comments
    from traceanalyze.db.docs import macros_markdown, schema_markdown
    from traceanalyze.diagnosis.ruleset import load_rules, rules_markdown

    rules = load_rules()
    # one page per topic: the tables are the page's second-level headings
    schema = re.sub(r"^#### ", "## ", schema_markdown(table_comments()), flags=re.MULTILINE)
    return {"schema": schema,
            "macros": macros_markdown("\n".join(_sql_text(name) for name in MACRO_FILES)),
            "rules": rules_markdown(rules),
            "rule-docs": rule_docs_markdown(rules),
            "help": help_markdown()}


def rule_docs_markdown(rules) -> str:
    """Each rule's documentation from its rule.yaml (what `traceanalyze explain RULE` prints)."""
    from traceanalyze.commands.explain import SECTIONS

    blocks = []
    for rule in rules:
        lines = [f"## `{rule.id}`", "", f"**{rule.title}** — severity `{rule.severity}`.", ""]
        for key, heading in SECTIONS:
            if rule.docs.get(key):
                lines += [f"**{heading}**", "", textwrap.dedent(rule.docs[key]).strip(), ""]
        lines += ["**When it judges**", "",
                  f"Needs {rule.judge.describe()}; below that it abstains (no finding; the "
                  "summary's judgement says why).", ""]
        if rule.explains:
            lines += ["**Root cause**", "",
                      "A finding of this rule explains, and absorbs (one finding, the cost counted "
                      "once), a finding of: " + "; ".join(e.describe() for e in rule.explains) + ".", ""]
        if rule.params:
            lines += ["**Parameters**", "", "| parameter | default | meaning |", "|---|---|---|"]
            lines += [f"| `{p.name}` | {p.default} {p.unit} | {' '.join(str(p.help).split())} |"
                      for p in rule.params.values()]
            lines += ["", f"Override with `--param {rule.id}.NAME=VALUE`, or in pyproject.toml under "
                          f"`[tool.traceanalyze.rules.{rule.id}]`.", ""]
        blocks.append("\n".join(lines).rstrip() + "\n")
    return "\n".join(blocks)


def help_markdown() -> str:
    """`traceanalyze --help` and every command's --help, as the terminal shows them (100 columns)."""
    from click.testing import CliRunner

    from traceanalyze.cli import all_commands, cli

    runner = CliRunner()
    blocks = []
    for args in [[], *([name] for name in sorted(all_commands()))]:
        result = runner.invoke(cli, [*args, "--help"], prog_name="traceanalyze", terminal_width=100)
        blocks.append(f"```\n$ traceanalyze {' '.join(args + ['--help'])}\n{result.output.rstrip()}\n```")
    return "\n\n".join(blocks) + "\n"


def render(text: str, sections: dict[str, str], page: str = "") -> str:
    for name, body in sections.items():
        pattern = re.compile(rf"(<!-- {re.escape(name)}:start -->\n).*?(<!-- {re.escape(name)}:end -->)",
                             re.DOTALL)
        text, count = pattern.subn(lambda m: m.group(1) + body.rstrip() + "\n" + m.group(2), text)
        if count != 1:
            raise SystemExit(f"{page}: expected one <!-- {name}:start --> ... <!-- {name}:end --> "
                             f"section, found {count}")
    return text


def main() -> int:
    check = "--check" in sys.argv
    sections = generated_sections()
    stale = []
    for page, names in PAGES.items():
        path = ROOT / page
        old = path.read_text()
        new = render(old, {name: sections[name] for name in names}, page)
        if new != old:
            stale.append(page)
            if not check:
                path.write_text(new)
    if check and stale:
        print(f"out of date: {', '.join(stale)}: run python scripts/update_docs.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
