"""The session check of conftest.py (no_process_left_behind) fails a run whose test leaves a
process running, names it, and stops it; a test that stops what it starts passes."""

from __future__ import annotations

import re
from pathlib import Path

from processes import alive

pytest_plugins = ["pytester"]

HERE = Path(__file__).resolve().parent

LEAKY = '''
import subprocess, sys

def test_starts_a_server_and_forgets_it():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], start_new_session=True)
    open("leaked.pid", "w").write(str(proc.pid))  # (in the session's folder, its working directory)
'''

TIDY = '''
import subprocess, sys
from processes import stop_popen

def test_starts_a_server_and_stops_it():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], start_new_session=True)
    try:
        assert proc.poll() is None
    finally:
        stop_popen(proc)
'''


def _session(pytester, monkeypatch, test: str):
    # (the planted process never exits by itself: the check need not give it its usual 5 s)
    monkeypatch.setenv("TRACEANALYZE_TEST_SETTLE_S", "0.5")
    pytester.makeconftest((HERE / "conftest.py").read_text())
    pytester.makepyfile(processes=(HERE / "processes.py").read_text(), test_case=test)
    return pytester.runpytest_subprocess("-p", "no:xdist", "-p", "no:cacheprovider")


def test_a_process_left_running_fails_the_session_and_is_stopped(pytester, monkeypatch):
    result = _session(pytester, monkeypatch, LEAKY)
    leaked = int((pytester.path / "leaked.pid").read_text())
    assert result.ret != 0
    text = result.stdout.str()
    assert "still running at the end of the session" in text
    assert re.search(rf"\b{leaked}: \S*python\S* -c import time; time.sleep\(3600\)", text), text
    assert not alive(leaked)


def test_a_test_that_stops_its_process_passes(pytester, monkeypatch):
    result = _session(pytester, monkeypatch, TIDY)
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=1, errors=0)
