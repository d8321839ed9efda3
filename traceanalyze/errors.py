"""The project's own error type: one line for the user, exit code 2."""

from __future__ import annotations

import click


class TraceanalyzeError(click.ClickException):
    """A user-facing error (bad input or usage). Printed as one line; exit code 2."""

    exit_code = 2

    def __init__(self, message: str, path: str | None = None) -> None:
        self.path = path
        text = f"{path}: {message}" if path else message
        super().__init__(" ".join(str(text).split()))

    def show(self, file=None) -> None:  # one line, no traceback, no control characters
        from traceanalyze.output.escape import terminal

        click.echo(f"error: {terminal(self.format_message())}", err=True, file=file)


class TraceFormatError(TraceanalyzeError):
    """The file is not a usable torch.profiler / Chrome trace."""
