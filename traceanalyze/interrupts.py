"""SIGINT / SIGTERM as KeyboardInterrupt, never lost, and never between making a file and
setting up its removal.

- Held: made-then-registered is two steps (`mkdtemp`, then the `try` whose `finally` removes
  it); a signal between the two raised KeyboardInterrupt with the folder made and nothing to
  remove it (a CI run once kept a work folder that way). Inside `interrupts_held()` the signals
  are only noted; the last one is raised again as the block ends, where the caller's cleanup
  covers what the block made.
- Not lost: Python runs a handler at the main thread's next bytecode, which may be inside a
  weakref callback (importlib's module-lock one), a __del__ or a GC callback, where what it
  raises is dropped ('Exception ignored'); the command then ran on to exit 0 (a CI run saw
  `ingest` do so under SIGTERM). A handler that raises through `raise_interrupt`, with
  `keep_dropped_interrupts()` installed, has such an interrupt raised again at the next call
  outside the hook.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

INTERRUPTS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def interrupts_held() -> Iterator[None]:
    held: list[int] = []
    try:
        previous = {sig: signal.signal(sig, lambda signum, _frame: held.append(signum)) for sig in INTERRUPTS}
    except ValueError:  # not the main thread: signals reach only the main thread's handlers anyway
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        if held:
            signal.raise_signal(held[-1])


settled = False  # the outcome is decided (faults.run): a pending re-raise no longer raises


class Interrupted(KeyboardInterrupt):
    """What the signal handlers raise: a KeyboardInterrupt that names its signal."""

    def __init__(self, signum: int) -> None:
        super().__init__()
        self.signum = signum


def raise_interrupt(signum: int, frame) -> None:
    """For a signal handler: raise Interrupted, or, when the handler runs inside the hook below
    (whose exceptions are dropped too), raise it at the next call outside it."""
    if _in_unraisable_hook(frame):
        _trip_again(signum)
        return
    raise Interrupted(signum)


def keep_dropped_interrupts() -> None:
    sys.unraisablehook = _redeliver_lost_interrupt


def _redeliver_lost_interrupt(unraisable) -> None:
    """An Interrupted that Python dropped is raised again; any other dropped exception is
    reported as Python does."""
    if isinstance(unraisable.exc_value, Interrupted):
        _trip_again(unraisable.exc_value.signum)
        return
    sys.__unraisablehook__(unraisable)


def _in_unraisable_hook(frame) -> bool:
    while frame is not None:
        if frame.f_code is _redeliver_lost_interrupt.__code__:
            return True
        frame = frame.f_back
    return False


def _trip_again(signum: int) -> None:
    """Raise the interrupt at the main thread's next call or return outside the hook: a one-shot
    profile function, the one before put back as it fires. Synchronous, so no more work is done
    first, and one raise per lost interrupt (a second would interrupt the cleanup)."""
    previous = sys.getprofile()

    def fire(frame, event, arg) -> None:
        if _in_unraisable_hook(frame):
            return
        sys.setprofile(previous)
        if not settled:
            raise Interrupted(signum)

    sys.setprofile(fire)
