"""Signals and system faults -> the documented exit codes, one line on stderr, no traceback.

- SIGINT (Ctrl-C) and SIGTERM (`timeout`, CI cancellation, `docker stop`) raise
  KeyboardInterrupt in the main thread, so every `finally` runs (temporary databases, part
  files, half-written outputs are removed); the command then prints `interrupted` and exits
  130 (SIGINT) or 143 (SIGTERM). DuckDB turns a signal during a query into
  `RuntimeError: Query interrupted` or an InterruptException: the same.
  A handler that Python ran where it drops exceptions (a weakref or GC callback, a __del__)
  raises at the next call outside it; an interrupt some code swallowed still exits 130 / 143.
  Files and folders are made with the signals held until their removal is set up
  (traceanalyze/interrupts.py).
- A full disk, a file-size limit, a missing or read-only folder (OSError: ENOSPC, EFBIG,
  ENOENT, EROFS, ...), DuckDB's I/O and fatal errors, MemoryError: `error: ...`, exit 2.
- A closed stdout (`... | head`): exit 141 quietly, like other Unix tools.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
from contextlib import contextmanager, suppress

import click

import traceanalyze.interrupts as interrupts
from traceanalyze.lazy_import import duckdb, loaded

EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE  # 141
EXIT_ERROR = 2


def system_duckdb_errors() -> tuple[type[BaseException], ...]:
    """DuckDB errors that come from the machine (disk, memory, permissions), not from a bug; none
    while DuckDB is not loaded (no error can be one of its own, and Ctrl-C does not load it)."""
    if not loaded("duckdb"):
        return ()
    return (duckdb.IOException, duckdb.FatalException, duckdb.OutOfMemoryException,
            duckdb.PermissionException)

received: int | None = None  # the last signal that interrupted this process


def _interrupt(signum, frame) -> None:
    global received
    received = signum
    interrupts.raise_interrupt(signum, frame)


def _find_tempdir_unsignalled() -> None:
    """tempfile finds its folder once, on first use, by writing a probe file there and removing
    it; a signal between the two leaves the file in $TMPDIR. It is found now, SIGINT and
    SIGTERM held meanwhile (raised right after). An unusable folder is said where it is used."""
    with interrupts.interrupts_held(), suppress(OSError):
        tempfile.gettempdir()


def install_signal_handlers() -> None:
    """SIGINT and SIGTERM both interrupt the main thread (see the module docstring)."""
    for sig in interrupts.INTERRUPTS:
        signal.signal(sig, _interrupt)
    interrupts.keep_dropped_interrupts()


def is_interrupt(exc: BaseException) -> bool:
    if isinstance(exc, (KeyboardInterrupt, click.Abort)):
        return True
    if loaded("duckdb") and isinstance(exc, duckdb.InterruptException):
        return True
    return isinstance(exc, RuntimeError) and str(exc).strip() == "Query interrupted"


def interrupted_exit_code() -> int:
    return EXIT_TERMINATED if received == signal.SIGTERM else EXIT_INTERRUPTED


def fault_message(exc: BaseException) -> str | None:
    """The one-line error for a system fault, or None when `exc` is not one."""
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror or exc}"
    if isinstance(exc, system_duckdb_errors()):
        return "the trace database: " + " ".join(str(exc).split())[:300]
    if isinstance(exc, MemoryError):
        return "out of memory"
    if isinstance(exc, RecursionError):
        return "the input is nested too deeply to be read"
    return None


@contextmanager
def interrupting(con):
    """While the block runs, SIGINT / SIGTERM also call `con.interrupt()` from a watcher thread.

    DuckDB notices a signal only now and then (a long aggregate can run on for minutes), and
    Python runs its handler only between bytecodes of the main thread, which is inside DuckDB.
    The signal's number reaches the watcher through signal.set_wakeup_fd; the query stops with
    an InterruptException, and the usual handler then says 'interrupted' (run below).
    """
    global received
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    done = threading.Event()

    def watch() -> None:
        global received
        while True:
            data = os.read(read_fd, 64)
            if done.is_set() or not data:
                return
            received = data[-1]
            con.interrupt()

    watcher = threading.Thread(target=watch, name="traceanalyze-signals", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
        done.set()
        os.write(write_fd, b"\0")
        watcher.join(1.0)
        os.close(read_fd)
        os.close(write_fd)


def _quiet_stdout() -> None:
    """After EPIPE: point stdout at /dev/null so the interpreter's final flush stays silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def run(main) -> None:
    """Call `main()` (a click command in non-standalone mode) and exit with the right code."""
    try:  # (a signal that comes as the handlers are set up is answered like any other)
        install_signal_handlers()
        _find_tempdir_unsignalled()
        code = main()
    except BaseException as exc:  # noqa: BLE001 - _exit_code re-raises what is not ours
        interrupts.settled = True  # (an assignment, not a call: a pending re-raise fires at a call)
        code = _exit_code(exc)
    interrupts.settled = True
    if received is not None and code not in (EXIT_INTERRUPTED, EXIT_TERMINATED):
        # a signal whose interrupt something swallowed after all: its exit code, not success
        code = _exit_code(interrupts.Interrupted(received))
    sys.exit(code if isinstance(code, int) else 0)


def _exit_code(exc: BaseException) -> int:
    """The exit code for what the command raised, its one line printed; raises what is a bug."""
    if isinstance(exc, click.ClickException):
        exc.show()
        return exc.exit_code
    if isinstance(exc, BrokenPipeError):
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    if isinstance(exc, SystemExit):
        raise exc
    if is_interrupt(exc):
        click.echo("interrupted" + (" (SIGTERM)" if received == signal.SIGTERM else ""), err=True)
        return interrupted_exit_code()
    message = fault_message(exc)
    if message is None:
        raise exc
    from traceanalyze.escape import terminal

    click.echo(f"error: {terminal(message)}", err=True)
    return EXIT_ERROR
