"""A signal is never lost and never leaves a file behind, wherever its handler runs.

Python runs a signal's handler at the main thread's next bytecode, which may be inside a weakref
callback (importlib's module locks have one), a __del__ or a GC callback; an exception raised
there is printed as 'Exception ignored' and dropped. The command would then run on to exit 0 and
keep what it wrote, as a CI run once saw for `ingest` under SIGTERM. Or it runs just after a work
folder was made, before the code that removes it is set up. Each case runs faults.run in a child
process of its own, the signal sent at that very point.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent("""
    import os, signal, sys, weakref
    from traceanalyze import faults

    class Thing:
        def __del__(self):
            if sys.argv[3] == "del":
                os.kill(os.getpid(), int(sys.argv[2]))
                for _ in range(1000):  # the handler runs here, inside __del__
                    pass

    def main():
        thing = Thing()

        def callback(_ref):
            if sys.argv[3] == "weakref":
                os.kill(os.getpid(), int(sys.argv[2]))
                for _ in range(1000):  # the handler runs here, inside the callback
                    pass

        ref = weakref.ref(thing, callback)
        del thing
        with open(sys.argv[1], "w") as out:  # work after the signal: must not happen
            out.write("written")
        return 0

    faults.run(main)
""")


@pytest.mark.parametrize("where", ["weakref", "del"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_handled_inside_a_callback_still_interrupts(tmp_path, where, sig):
    out = tmp_path / "after"
    run = subprocess.run([sys.executable, "-c", CHILD, str(out), str(int(sig)), where],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 128 + sig, run.stderr
    assert run.stderr.startswith("interrupted"), run.stderr
    assert "Exception ignored" not in run.stderr and "Traceback" not in run.stderr
    assert not out.exists()  # the command stopped at the signal


def test_other_dropped_exceptions_are_still_reported(tmp_path):
    child = textwrap.dedent("""
        from traceanalyze import faults

        class Thing:
            def __del__(self):
                raise ValueError("a bug in a finalizer")

        def main():
            thing = Thing()
            del thing
            return 0

        faults.run(main)
    """)
    run = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "Exception ignored" in run.stderr and "a bug in a finalizer" in run.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_interrupt_swallowed_by_the_code_still_gives_the_signals_exit_code(sig):
    # a library's `except BaseException: pass` takes the interrupt: the command then ends, but
    # not with 0 as if it had finished unasked
    child = textwrap.dedent("""
        import os, sys
        from traceanalyze import faults

        def main():
            try:
                os.kill(os.getpid(), int(sys.argv[1]))
                for _ in range(1000):
                    pass
            except BaseException:
                pass
            return 0

        faults.run(main)
    """)
    run = subprocess.run([sys.executable, "-c", child, str(int(sig))], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 128 + sig, run.stderr
    assert run.stderr.startswith("interrupted") and "Traceback" not in run.stderr


def test_a_signal_as_a_work_folder_is_made_leaves_no_folder(tmp_path):
    # the signal lands just after mkdtemp made the folder, before the code that removes it is set
    # up (where a CI run once left a work folder): it is held until then, and the folder goes
    child = textwrap.dedent("""
        import os, signal, sys, tempfile
        from traceanalyze import faults
        from traceanalyze.load.memory import staging_folder

        real_mkdtemp = tempfile.mkdtemp

        def mkdtemp_then_signalled(*args, **kwargs):
            folder = real_mkdtemp(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass
            return folder

        def main():
            tempfile.mkdtemp = mkdtemp_then_signalled
            with staging_folder(in_ram=False):
                with open(os.path.join(sys.argv[1], "after"), "w") as out:  # must not happen
                    out.write("written")
            return 0

        faults.run(main)
    """)
    work = tmp_path / "tmp"
    work.mkdir()
    env = {**os.environ, "TMPDIR": str(work)}
    env.pop("TRACEANALYZE_TMPDIR", None)
    run = subprocess.run([sys.executable, "-c", child, str(tmp_path)], capture_output=True, text=True,
                         env=env, timeout=120)
    assert run.returncode == 143, run.stderr
    assert run.stderr.startswith("interrupted (SIGTERM)") and "Traceback" not in run.stderr
    assert list(work.iterdir()) == []  # neither the work folder nor tempfile's probe file
    assert not (tmp_path / "after").exists()


def test_a_pool_worker_mapping_is_stopped_by_a_signal_handled_inside_a_callback(tmp_path):
    # a worker's SIGTERM (sent by the worker itself once the command is gone) stops its map; one
    # dropped in a callback let the map run on
    child = textwrap.dedent("""
        import os, signal, sys, tempfile, weakref
        from traceanalyze.load import executors

        executors._worker_start(os.getppid(), tempfile.gettempdir())
        executors._mapping = True  # (as _map_in_worker sets it)

        class Thing:
            pass

        def work():
            thing = Thing()

            def callback(_ref):
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):  # the handler runs here, inside the callback
                    pass

            ref = weakref.ref(thing, callback)
            del thing
            with open(sys.argv[1], "w") as out:  # the rest of the map: must not happen
                out.write("written")

        try:
            work()
        except KeyboardInterrupt:
            sys.exit(7)
    """)
    out = tmp_path / "after"
    run = subprocess.run([sys.executable, "-c", child, str(out)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 7, run.stderr
    assert "Exception ignored" not in run.stderr
    assert not out.exists()
