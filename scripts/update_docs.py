#!/usr/bin/env python3
"""Regenerate the generated sections of README.md (schema; macros; rules; every command's --help)
— `--check` fails on drift.

Sections are delimited by `<!-- NAME:start -->` / `<!-- NAME:end -->` markers.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def generated_sections() -> dict[str, str]:
    from traceanalyze.db import _sql_text, table_comments
    from traceanalyze.db.docs import macros_markdown, schema_markdown

    sections = {"schema": schema_markdown(table_comments()),
                "macros": macros_markdown(_sql_text("tables/00_macros.sql"))}
    try:
        from traceanalyze.ruleset import rules_markdown
    except ImportError:
        rules_markdown = None
    if rules_markdown is not None:
        sections["rules"] = rules_markdown()
    sections["help"] = help_markdown()
    return sections


def help_markdown() -> str:
    """`traceanalyze --help` and every command's --help, as the terminal shows them (100 columns)."""
    from click.testing import CliRunner

    from traceanalyze.cli import cli

    runner = CliRunner()
    blocks = []
    for args in [[], *([name] for name in sorted(cli.commands))]:
        result = runner.invoke(cli, [*args, "--help"], prog_name="traceanalyze", terminal_width=100)
        blocks.append(f"```\n$ traceanalyze {' '.join(args + ['--help'])}\n{result.output.rstrip()}\n```")
    return "\n\n".join(blocks) + "\n"


def render(readme: str, sections: dict[str, str]) -> str:
    for name, body in sections.items():
        pattern = re.compile(rf"(<!-- {name}:start -->\n).*?(<!-- {name}:end -->)", re.DOTALL)
        readme = pattern.sub(lambda m: m.group(1) + body.rstrip() + "\n" + m.group(2), readme)
    return readme


def main() -> int:
    path = ROOT / "README.md"
    old = path.read_text()
    new = render(old, generated_sections())
    if "--check" in sys.argv:
        if new != old:
            print("README.md is out of date: run python scripts/update_docs.py", file=sys.stderr)
            return 1
        return 0
    path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
