"""Processes the tests start, found and stopped through /proc (no psutil: cleanup must not fail
for a missing module).

Every process a test starts inherits OWNER_VARIABLE=OWNER_TOKEN (set by conftest.py in each
pytest process, xdist workers included, each its own), and most are descendants of the pytest
process; a daemon that detaches (Ray's GCS server and raylet) still carries the variable.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

OWNER_VARIABLE = "TRACEANALYZE_TEST_OWNER"
OWNER_TOKEN = f"{os.getpid()}-{uuid.uuid4().hex}"


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(ppid, session id, state) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), int(fields[3]), fields[0].decode()


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting to be reaped)."""
    stat = _stat(pid)
    return stat is not None and stat[2] not in ("Z", "X")


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def descendants(root: int) -> list[int]:
    """Live descendants of `root` (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for pid in _pids():
        stat = _stat(pid)
        if stat is not None and stat[2] not in ("Z", "X"):
            children.setdefault(stat[0], []).append(pid)
    found, front = [], [root]
    while front:
        front = [c for p in front for c in children.get(p, [])]
        found += front
    return found


def children(pid: int) -> list[int]:
    """Live children of `pid`."""
    return [c for c in _pids() if (s := _stat(c)) is not None and s[0] == pid and s[2] not in ("Z", "X")]


def in_session(sid: int) -> list[int]:
    """Live processes of the session `sid` (one started with start_new_session=True)."""
    return [pid for pid in _pids() if (s := _stat(pid)) is not None and s[1] == sid and s[2] not in ("Z", "X")]


def carrying_owner_token(token: str = OWNER_TOKEN) -> list[int]:
    """Live processes (of this user) whose environment has this pytest process's token."""
    needle = f"{OWNER_VARIABLE}={token}".encode()
    found = []
    for pid in _pids():
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0") and alive(pid):
                    found.append(pid)
        except OSError:  # gone, or another user's
            pass
    return found


def open_paths(pid: int) -> set[str]:
    """The paths of the files a process has open (empty when it is gone)."""
    found = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for fd in fds:
        try:
            found.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return found


def stop(pids, grace_s: float = 30.0) -> list[int]:
    """SIGTERM each process, SIGKILL those still running after `grace_s` (a bound for a stuck
    process, not a timing assumption); returns the pids that were running."""
    pids = [p for p in dict.fromkeys(pids) if p != os.getpid() and alive(p)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + grace_s
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not any(alive(p) for p in pids):
            break
    return pids


def stop_popen(proc, grace_s: float = 30.0) -> None:
    """Stop a subprocess.Popen started with start_new_session=True, and everything of its
    session and everything under it (its process group is its session)."""
    if proc.poll() is None or in_session(proc.pid) or descendants(proc.pid):
        stop([proc.pid, *descendants(proc.pid), *in_session(proc.pid)], grace_s)
    try:
        proc.wait(grace_s)
    except Exception:  # noqa: BLE001 - (already reaped or still stuck: nothing more to do here)
        pass
