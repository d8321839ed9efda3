"""Work files of runs that were killed (SIGKILL, a power cut) and could not clean up.

Every temporary name carries the pid of the process that made it:
  - `<db name>.<pid>.tmp`, its `.wal` and DuckDB's spill folder `.tmp.tmp`: a database
    being written (load),
  - `traceanalyze-<pid>-*`: a rank's work folder (load, in $TMPDIR or /dev/shm),
  - `.<name>.<pid>.*.tmp`: an output being written (output/atomic.py).
The next run removes those whose process no longer exists (and that this user owns); a
live run's files are left alone.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

STAGING_PREFIX = "traceanalyze-"
_STAGING = re.compile(re.escape(STAGING_PREFIX) + r"(\d+)-\w+")
_OUTPUT_TMP = re.compile(r"\..+\.(\d+)\.\w+\.tmp")


def staging_prefix() -> str:
    """The prefix of this process's staging folder (tempfile.mkdtemp(prefix=...))."""
    return f"{STAGING_PREFIX}{os.getpid()}-"


def pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # exists (another user's), or not a pid at all: leave it
    return True


def _dead_and_mine(path: Path, pid: str) -> bool:
    try:
        owner = path.lstat().st_uid
    except OSError:
        return False
    return owner == os.getuid() and not pid_alive(int(pid))


def _remove(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass


def sweep_database_tmp(db_path: Path) -> list[Path]:
    """`<db>.<pid>.tmp[.wal]` next to `db_path` left by dead processes; returns what went."""
    pattern = re.compile(re.escape(db_path.name) + r"\.(\d+)\.tmp(?:\.wal|\.tmp)?")
    return _sweep(db_path.parent, pattern)


def sweep_staging(folders) -> list[Path]:
    """Staging folders of dead processes in each of `folders` (None = the temp dir)."""
    import tempfile

    gone = []
    for folder in {Path(f) if f else Path(tempfile.gettempdir()) for f in folders}:
        gone += _sweep(folder, _STAGING)
    return gone


def sweep_outputs(folder: Path) -> list[Path]:
    """Half-written outputs (output/atomic.py) of dead processes in `folder`."""
    return _sweep(folder, _OUTPUT_TMP)


def _sweep(folder: Path, pattern: re.Pattern) -> list[Path]:
    gone = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return gone
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if m and _dead_and_mine(Path(entry.path), m.group(1)):
            _remove(Path(entry.path))
            gone.append(Path(entry.path))
    return gone
