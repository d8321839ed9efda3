"""Print a comparison (text or JSON) and write its HTML page: shared by `diff` and `scaling`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import click

from traceanalyze.errors import TraceanalyzeError
from traceanalyze.atomic import write_text_atomic
from traceanalyze.escape import terminal


def emit(data: dict, render_text: Callable[[], str], render_html: Callable[[], str],
         fmt: str, html_path: Path | None) -> None:
    """Write the HTML page first (so a bad path fails before any output), then print."""
    if html_path is not None:
        try:
            html_path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(html_path, render_html())
        except OSError as exc:
            raise TraceanalyzeError(f"cannot write: {exc.strerror}", str(html_path)) from None
    if fmt == "json":
        click.echo(json.dumps(data, indent=2))
    else:
        # names in the text come from the traces: no control sequence reaches the terminal
        click.echo("\n".join(terminal(line) for line in render_text().split("\n")), nl=False)
    if html_path is not None:
        click.echo(f"wrote {terminal(html_path)}", err=True)
