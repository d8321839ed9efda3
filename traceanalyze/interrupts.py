"""SIGINT / SIGTERM held back while a file or folder is made and its removal set up.

Made-then-registered is two steps (`mkdtemp`, then the `try` whose `finally` removes it): a
signal between the two raised KeyboardInterrupt with the folder made and nothing to remove it
(a CI run once kept a work folder that way). Inside `interrupts_held()` the signals are only
noted; the last one is raised again as the block ends, where the caller's cleanup covers what
the block made.
"""

from __future__ import annotations

import signal
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
