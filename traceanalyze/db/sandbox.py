"""What a read-only query may run: statements that read, and nothing that writes a file.

A read-only connection (db.connect with enable_external_access False) reads no file but the
shard folders its views need. DuckDB's file permission is read and write alike, so a
`COPY ... TO` into such a folder would still be allowed by DuckDB: the statements themselves
are checked first, with DuckDB's own parser (never a regular expression). Allowed: SELECT (with
DESCRIBE, SHOW, SUMMARIZE, FROM-first, VALUES), EXPLAIN [ANALYZE] of an allowed statement, and
the PRAGMAs that only describe the database. Everything else (COPY, EXPORT, ATTACH, INSERT,
CREATE, SET, CALL, LOAD, ...) is refused before it runs.
"""

from __future__ import annotations

from traceanalyze.lazy_import import duckdb

# PRAGMAs that only describe the database or the engine (each is a table function too)
DESCRIBING_PRAGMAS = frozenset({
    "table_info", "show", "show_tables", "show_tables_expanded", "show_databases", "database_list",
    "database_size", "storage_info", "metadata_info", "version", "platform", "user_agent", "collations",
    "functions",
})
ALLOWED = "SELECT, EXPLAIN and the PRAGMAs that describe tables"


def refusal(con: duckdb.DuckDBPyConnection, query: str) -> str | None:
    """Why `query` may not run on a read-only connection, or None when every statement of it
    only reads. A query DuckDB cannot parse is not refused here: running it says why."""
    try:
        statements = con.extract_statements(query)
    except duckdb.Error:
        return None
    for statement in statements:
        reason = _statement_refusal(con, statement.type, statement.query)
        if reason:
            return reason
    return None


def _statement_refusal(con, kind, text: str) -> str | None:
    if kind == duckdb.StatementType.SELECT:
        return None
    tokens = _tokens(text)
    if kind == duckdb.StatementType.EXPLAIN:
        inner = _explained(text, tokens)
        return refusal(con, inner) if inner is not None else "an EXPLAIN whose statement cannot be found"
    if kind == duckdb.StatementType.PRAGMA and len(tokens) >= 2 and tokens[0][1].upper() == "PRAGMA":
        name = tokens[1][1].strip('"').lower()
        if name in DESCRIBING_PRAGMAS:
            return None
        return f"PRAGMA {name} is not a read-only statement"
    first = tokens[0][1].upper() if tokens else kind.name
    return f"{first} is not a read-only statement" + (f" ({kind.name})" if first != kind.name else "")


def _tokens(text: str) -> list[tuple[int, str, bool]]:
    """(offset, text, is an operator) of each token of `text` but comments, from DuckDB's tokenizer."""
    raw = list(duckdb.tokenize(text))
    out = []
    for i, (offset, kind) in enumerate(raw):
        end = raw[i + 1][0] if i + 1 < len(raw) else len(text)
        if kind != duckdb.token_type.comment:
            out.append((offset, text[offset:end].strip(), kind == duckdb.token_type.operator))
    return out


def _explained(text: str, tokens: list[tuple[int, str, bool]]) -> str | None:
    """The statement that `EXPLAIN [ANALYZE] [(options)] statement` explains."""
    i = 1  # (tokens[0] is EXPLAIN)
    if i < len(tokens) and tokens[i][1].upper() in ("ANALYZE", "ANALYSE"):
        i += 1
    elif i < len(tokens) and tokens[i][2] and tokens[i][1].startswith("("):
        depth = 0
        while i < len(tokens):
            if tokens[i][2]:
                depth += tokens[i][1].count("(") - tokens[i][1].count(")")
            i += 1
            if depth <= 0:
                break
    return text[tokens[i][0]:] if i < len(tokens) else None
