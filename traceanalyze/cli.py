"""Command line: a thin layer over the Python API (traceanalyze/api.py).

Every command lives in traceanalyze/commands/<name>.py. Errors: the library raises
traceanalyze.TraceError; this module alone turns it into `error: <file>: <problem>` and exit 2.
"""

from __future__ import annotations

import importlib

import click

from traceanalyze.version import __version__
from traceanalyze.commands import COMMAND_MODULES
from traceanalyze.errors import TraceError


class _UserError(click.ClickException):
    """A TraceError on its way out of click: one line on stderr, exit code 2."""

    exit_code = TraceError.exit_code

    def show(self, file=None) -> None:  # one line, no traceback, no control characters
        from traceanalyze.escape import terminal

        click.echo(f"error: {terminal(self.format_message())}", err=True, file=file)


class TraceanalyzeGroup(click.Group):
    """`traceanalyze DIR ...` runs `analyze DIR ...` (like `datasette file.db`); TraceError -> exit 2."""

    default_command = "analyze"

    def parse_args(self, ctx, args):
        if args and args[0] not in COMMAND_MODULES and not args[0].startswith("-"):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)

    # a command's module is imported when the command runs (or --help lists them all): a re-run
    # of `traceanalyze load` then imports none of the analysis, report or rule modules
    def list_commands(self, ctx):
        return sorted(COMMAND_MODULES)

    def get_command(self, ctx, name):
        if name not in self.commands and name in COMMAND_MODULES:
            self.add_command(importlib.import_module(f"traceanalyze.commands.{name}").command)
        return self.commands.get(name)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TraceError as exc:
            raise _UserError(exc.format_message()) from None


@click.group(cls=TraceanalyzeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="traceanalyze")
def cli():
    """Find which rank and which phase slows a distributed PyTorch job.

    \b
    traceanalyze TRACE_DIR [--ranks all] [--out DIR]   analyze and write a report
    traceanalyze load TRACE_DIR --db trace.duckdb      only build the trace database
    traceanalyze sql DB_OR_DIR "SELECT ..."            query the trace database
    """


def all_commands() -> dict[str, click.Command]:
    """Every command by name, their modules imported (the docs list them all)."""
    for name in COMMAND_MODULES:
        cli.get_command(None, name)
    return dict(cli.commands)


def main() -> None:
    """Exit 0 / 1 / 2; 130 (Ctrl-C) or 143 (SIGTERM) when interrupted (see faults.py)."""
    import traceanalyze.faults as faults

    faults.run(lambda: cli.main(standalone_mode=False))


if __name__ == "__main__":  # pragma: no cover
    main()
