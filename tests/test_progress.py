"""Progress on stderr: a tqdm bar on a terminal, one line per stage in a log, nothing with --quiet."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

from processes import stop_popen

ROOT = Path(__file__).resolve().parent.parent
STRAGGLER = ROOT / "fixtures" / "ddp" / "input_straggler"


def run_with_terminal_stderr(*args) -> tuple[int, str, bytes]:
    """The real command with stderr on a pseudo-terminal (stdout a pipe): (rc, stdout, stderr bytes)."""
    leader, follower = pty.openpty()
    # a real terminal has a size (a fresh pty is 0 x 0, where tqdm draws nothing)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "traceanalyze", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=follower, stdin=subprocess.DEVNULL)
    os.close(follower)
    seen = b""
    try:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: the process is gone
                break
            if not chunk:
                break
            seen += chunk
        out = proc.stdout.read().decode()
        rc = proc.wait()
    finally:
        stop_popen(proc)  # (whatever went wrong above: the command and what it started)
        os.close(leader)
    return rc, out, seen


def test_a_terminal_gets_a_bar_a_log_gets_lines_quiet_gets_nothing(tmp_path):
    rc, out, err = run_with_terminal_stderr(STRAGGLER, "--out", tmp_path / "tty")
    assert rc == 0 and "collective-straggler" in out
    # tqdm redraws its line with carriage returns and shows the elapsed time in brackets
    assert b"\r" in err and b"traceanalyze: running rules" in err and b"[00:0" in err

    logged = subprocess.run([sys.executable, "-m", "traceanalyze", str(STRAGGLER), "--out",
                             str(tmp_path / "log")], capture_output=True, text=True, check=True)
    lines = logged.stderr.splitlines()
    assert "traceanalyze: running rules" in lines and "\r" not in logged.stderr

    rc, out, err = run_with_terminal_stderr(STRAGGLER, "--out", tmp_path / "quiet", "--quiet")
    assert rc == 0 and err == b""
