"""Rows -> an aligned text table, CSV or JSON (for `traceanalyze sql`)."""

from __future__ import annotations

import csv
import io
import json
from datetime import date, datetime
from decimal import Decimal


def _jsonable(value):
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (date, datetime)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", errors="replace")
    return value


def format_rows(columns: list[str], rows: list[tuple], fmt: str) -> str:
    if fmt == "json":
        return json.dumps([{c: _jsonable(v) for c, v in zip(columns, row)} for row in rows],
                          default=str) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(columns)
        writer.writerows(rows)
        return buf.getvalue()
    return _table(columns, rows)


def _cell(value) -> str:
    if value is None:
        return "NULL"
    text = str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _table(columns: list[str], rows: list[tuple]) -> str:
    if not columns:
        return "(ok)\n"
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    def line(values):
        return "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()
    out = [line(columns), line(["-" * w for w in widths])]
    out.extend(line(r) for r in cells)
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out) + "\n"
