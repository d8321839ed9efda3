"""Progress of a long load: a tqdm bar in a terminal or a notebook, plain lines in logs, or nothing.

The pipeline reports progress as stage messages (`say("parsing 120.0 MB of trace events")`);
`progress_reporter` turns the user's choice into such a function:

- "auto": a bar when a person watches (stderr is a terminal, or a Jupyter kernel runs the code:
  tqdm.auto's notebook widget when ipywidgets is installed), nothing otherwise;
- True / False: always a bar / nothing;
- a function: called with each message (the command line prints them as `traceanalyze: ...`
  lines when stderr is not a terminal, so CI logs show the stages).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Literal, Union

Say = Callable[[str], None]
ProgressChoice = Union[bool, Literal["auto"], Say, None]


def in_notebook() -> bool:
    """True inside a Jupyter kernel (where stderr is not a terminal but a person watches)."""
    shell = sys.modules.get("IPython")
    get_ipython = getattr(shell, "get_ipython", None)
    kernel = get_ipython() if get_ipython else None
    return kernel is not None and hasattr(kernel, "kernel")


def _stderr_is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class StageBar:
    """A tqdm bar that counts stages and shows the current one; `close()` removes it."""

    def __init__(self) -> None:
        if in_notebook():
            from tqdm.auto import tqdm
        else:
            from tqdm import tqdm
        self._bar = tqdm(total=None, desc="traceanalyze", unit="stage", leave=False,
                         bar_format="{desc} [{elapsed}]", file=None if in_notebook() else sys.stderr)

    def __call__(self, message: str) -> None:
        from traceanalyze.escape import terminal

        # every stage is drawn (tqdm's update skips redraws within 0.1 s; stages are few)
        self._bar.update(1)
        self._bar.set_description_str(f"traceanalyze: {terminal(message)}", refresh=True)

    def close(self) -> None:
        self._bar.close()


def progress_reporter(choice: ProgressChoice) -> tuple[Say, Callable[[], None]]:
    """(say, done): the function the stages call, and what to call when the work is over."""
    if callable(choice):
        return choice, lambda: None
    wanted = (in_notebook() or _stderr_is_tty()) if choice == "auto" else bool(choice)
    if not wanted:
        return (lambda _message: None), lambda: None
    bar = StageBar()
    return bar, bar.close


def cli_progress(quiet: bool) -> ProgressChoice:
    """The command line's choice: nothing with --quiet, a bar on a terminal, lines in a log."""
    if quiet:
        return False
    if _stderr_is_tty():
        return True
    import click

    from traceanalyze.escape import terminal

    return lambda message: click.echo(f"traceanalyze: {terminal(message)}", err=True)
