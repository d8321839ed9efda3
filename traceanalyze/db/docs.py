"""Turn the `--` comments of the schema SQL into documentation (the schema page, `sql --schema`)."""

from __future__ import annotations

import re

_MACRO = re.compile(r"CREATE (?:OR REPLACE )?MACRO (\w+\([^)]*\))", re.IGNORECASE)
_CREATE = re.compile(r"CREATE (?:OR REPLACE )?(?:TEMP(?:ORARY)? )?(?:TABLE|VIEW) (?:IF NOT EXISTS )?(\w+)", re.IGNORECASE)
_COLUMN = re.compile(r"^\s*(?:[\w.]+\s+AS\s+|[\w.]+\.)?(\w+)\b[^-]*?,?\s*--\s*(.+)$")
_COLUMN_AS = re.compile(r"\bAS\s+(\w+),?\s*--\s*(.+)$", re.IGNORECASE)


def parse_comments(sql: str) -> dict[str, dict[str, str]]:
    """Table and column comments: the `--` line just above CREATE, and `col ... -- text` lines."""
    tables: dict[str, dict[str, str]] = {}
    current = None
    last_comment = ""
    depth = 0
    for line in sql.splitlines():
        stripped = line.strip()
        m = _CREATE.search(line)
        if m:
            current = m.group(1)
            tables[current] = {"": last_comment}
            depth = 0
            continue
        if stripped.startswith("--"):
            last_comment = stripped[2:].strip()
            continue
        if current is None or "--" not in line:
            depth += line.count("(") - line.count(")")
            continue
        code, _, comment = line.partition("--")
        if code.rstrip().endswith("("):  # `name AS (   -- ...`: a CTE or subquery, not a column
            depth += code.count("(") - code.count(")")
            continue
        m_as = _COLUMN_AS.search(code + "--" + comment)
        name = m_as.group(1) if m_as else _column_name(code)
        if name and depth <= 1:
            tables[current][name] = comment.strip()
        depth += code.count("(") - code.count(")")
    return tables


def _column_name(code: str) -> str | None:
    code = code.strip().rstrip(",").strip()
    if not code:
        return None
    token = code.split()[0]
    return token.split(".")[-1] if re.fullmatch(r"[\w.]+", token) else None


def schema_markdown(comments: dict[str, dict[str, str]]) -> str:
    """A Markdown section documenting every public table and column."""
    lines = []
    for table, cols in comments.items():
        if table.startswith("_"):
            continue
        lines.append(f"#### `{table}`\n\n{cols.get('', '')}\n")
        lines.append("| column | meaning |\n|---|---|")
        lines.extend(f"| `{c}` | {t} |" for c, t in cols.items() if c)
        lines.append("")
    return "\n".join(lines)


def macros_markdown(sql: str) -> str:
    """A Markdown table of the SQL macros: each one's signature and the `--` lines above it."""
    lines = ["| macro | what it does |", "|---|---|"]
    comment: list[str] = []
    for line in sql.splitlines():
        stripped = line.strip()
        m = _MACRO.search(line)
        if m:
            lines.append(f"| `{m.group(1)}` | {' '.join(comment)} |")
        if stripped.startswith("--"):
            comment.append(stripped[2:].strip())
        elif not stripped or m:
            comment = []
    return "\n".join(lines) + "\n"
