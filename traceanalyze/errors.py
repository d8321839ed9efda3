"""The library's error types: catchable in a notebook, one line `error: <file>: <problem>` (exit 2) in the CLI.

`TraceError` is a plain Exception (not a click exception): the library raises it, `cli.py`
turns it into the one-line message and exit code 2 in one place.
"""

from __future__ import annotations


class TraceError(Exception):
    """Bad input or usage: `.path` is the file concerned (or None), `.problem` what is wrong with it."""

    exit_code = 2  # what the command line exits with

    def __init__(self, message: str, path: str | None = None) -> None:
        self.path = None if path is None else str(path)
        self.problem = " ".join(str(message).split())
        super().__init__(self.format_message())

    def format_message(self) -> str:
        """`<file>: <problem>`, or the problem alone: one line."""
        text = f"{self.path}: {self.problem}" if self.path else self.problem
        return " ".join(text.split())


# The historical name: `raise TraceanalyzeError(...)` and `except TraceanalyzeError` keep working.
TraceanalyzeError = TraceError


class TraceFormatError(TraceError):
    """The file is not a usable torch.profiler / Chrome trace."""


class TraceConfigError(TraceError):
    """The configuration (traceanalyze.toml, [tool.traceanalyze], --param) is wrong."""


__all__ = ["TraceError", "TraceanalyzeError", "TraceFormatError", "TraceConfigError"]
