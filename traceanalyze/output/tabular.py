"""Query results -> an aligned text table, CSV or JSON (for `traceanalyze sql`), streamed.

Rows arrive in chunks (a DuckDB cursor's fetchmany) and are written as they come, so a
10-million-row result never sits in memory. The table format is for reading: every cell is
escaped for the terminal and shortened to 80 characters; CSV keeps values as they are
(escaped only when stdout is a terminal); JSON escapes control characters by itself.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Iterator
from datetime import date, datetime
from decimal import Decimal
from typing import TextIO

from traceanalyze.escape import terminal

MAX_CELL_CHARS = 80


def _jsonable(value):
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (date, datetime)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", errors="replace")
    return value


def limited(chunks: Iterable[list[tuple]], limit: int | None
            ) -> tuple[Iterator[list[tuple]], Callable[[], bool]]:
    """(the chunks cut to `limit` rows in all (None: no limit), a function telling afterwards
    whether rows were left out)."""
    state = {"cut": False}

    def upto():
        left = limit
        for chunk in chunks:
            if left is None:
                yield chunk
            elif left == 0:  # the limit was reached exactly: one more chunk tells if there is more
                state["cut"] = bool(chunk)
                return
            elif len(chunk) > left:
                state["cut"] = True
                yield chunk[:left]
                return
            else:
                left -= len(chunk)
                yield chunk

    return upto(), lambda: state["cut"]


def write_rows(columns: list[str], chunks: Iterable[list[tuple]], fmt: str, out: TextIO,
               tty: bool = False) -> int:
    """Write the rows in `fmt` (table, csv, json) to `out` as they come; returns the row count."""
    if fmt == "json":
        return _json(columns, chunks, out)
    if fmt == "csv":
        return _csv(columns, chunks, out, tty)
    return _table(columns, chunks, out)


def _json(columns: list[str], chunks, out: TextIO) -> int:
    n = 0
    out.write("[")
    for chunk in chunks:
        out.write("".join(("," if n + i else "") + "\n" + json.dumps(
            {c: _jsonable(v) for c, v in zip(columns, row)}, default=str) for i, row in enumerate(chunk)))
        n += len(chunk)
    out.write("\n]\n" if n else "]\n")
    return n


def _csv(columns: list[str], chunks, out: TextIO, tty: bool) -> int:
    buf = io.StringIO()  # one write per chunk (a row-by-row write costs more than the rest)
    writer = csv.writer(buf)
    writer.writerow(columns)
    n = 0
    for chunk in chunks:
        if tty:  # a person reads it: no control sequence reaches the terminal
            chunk = [[terminal(v) if isinstance(v, str) else v for v in row] for row in chunk]
        writer.writerows(chunk)
        n += len(chunk)
        out.write(buf.getvalue())
        buf.seek(0)
        buf.truncate()
    out.write(buf.getvalue())
    return n


def _cell(value) -> str:
    if value is None:
        return "NULL"
    text = terminal(value)
    return text if len(text) <= MAX_CELL_CHARS else text[:MAX_CELL_CHARS - 3] + "..."


def _table(columns: list[str], chunks, out: TextIO) -> int:
    """Column widths from the first chunk; later rows are written as they come."""
    if not columns:
        out.write("(ok)\n")
        return 0
    names = [_cell(c) for c in columns]
    it = iter(chunks)
    first = [[_cell(v) for v in row] for row in next(it, [])]
    widths = [max([len(c)] + [len(r[i]) for r in first]) for i, c in enumerate(names)]

    def line(values):
        return "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip() + "\n"

    out.write(line(names) + line(["-" * w for w in widths]))
    out.write("".join(line(r) for r in first))
    n = len(first)
    for chunk in it:
        out.write("".join(line([_cell(v) for v in row]) for row in chunk))
        n += len(chunk)
    out.write(f"({n:,} row{'s' if n != 1 else ''})\n")
    return n
