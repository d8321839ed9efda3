"""Work files of runs that were killed (SIGKILL, a power cut) and could not clean up.

Every temporary name carries a marker `<pid>@<host>` of the process that made it:
  - `<db name>.<pid>@<host>.tmp`, its `.wal` and DuckDB's spill folder `.tmp.tmp`: a database
    being written (load),
  - `traceanalyze-<pid>@<host>-*`: a rank's work folder (a map, in $TMPDIR, /dev/shm or
    $TRACEANALYZE_TMPDIR),
  - `manifest.json.<pid>@<host>.tmp`: a shard's manifest being written (shards.py),
  - `.<name>.<pid>.*.tmp`: an output being written (atomic.py; `<pid>@<host>` also read).

The folders may be shared by many hosts (an NFS shard folder that a job array writes into),
where a pid says nothing about another machine's processes. So the next run removes such a
file (one this user owns) when it was made on this host by a process that no longer exists;
one made on another host, or whose name has no host, only once it is older than
`OTHER_HOST_STALE_S` (24 hours: no map, database build or output write lasts that long).
A live run's files are left alone.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import time
from pathlib import Path

STAGING_PREFIX = "traceanalyze-"
OTHER_HOST_STALE_S = 24 * 3600
_MARK = r"(\d+)(?:@([A-Za-z0-9-]+))?"  # a pid, then (in every name but atomic.py's) its host
_STAGING = re.compile(re.escape(STAGING_PREFIX) + _MARK + r"-\w+")
_OUTPUT_TMP = re.compile(r"\..+\." + _MARK + r"\.\w+\.tmp")


def host_tag(name: str | None = None) -> str:
    """This host's name as it goes into file names: letters, digits and '-' only, at most 64."""
    return re.sub(r"[^A-Za-z0-9-]", "-", name if name is not None else socket.gethostname())[:64] or "-"


def marker() -> str:
    """`<pid>@<host>` of this process, for the names of its temporary files."""
    return f"{os.getpid()}@{host_tag()}"


def staging_prefix() -> str:
    """The prefix of this process's staging folder (tempfile.mkdtemp(prefix=...))."""
    return f"{STAGING_PREFIX}{marker()}-"


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


def is_stale(path: Path, pid: str, host: str | None, now: float | None = None) -> bool:
    """A work file of a process that is gone: this user's, and made on this host by a dead
    process, or made elsewhere (or by a name without a host) more than OTHER_HOST_STALE_S ago."""
    try:
        st = path.lstat()
    except OSError:
        return False
    if st.st_uid != os.getuid():
        return False
    if host and host == host_tag():
        return not pid_alive(int(pid))
    return (now if now is not None else time.time()) - st.st_mtime > OTHER_HOST_STALE_S


def _remove(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass


def sweep_database_tmp(db_path: Path) -> list[Path]:
    """`<db>.<pid>@<host>.tmp[.wal]` next to `db_path` left by dead processes; returns what went."""
    pattern = re.compile(re.escape(db_path.name) + r"\." + _MARK + r"\.tmp(?:\.wal|\.tmp)?")
    return _sweep(db_path.parent, pattern)


def sweep_staging(folders) -> list[Path]:
    """Staging folders of dead processes in each of `folders` (None = the temp dir)."""
    import tempfile

    gone = []
    for folder in {Path(f) if f else Path(tempfile.gettempdir()) for f in folders}:
        gone += _sweep(folder, _STAGING)
    return gone


def sweep_manifest_tmp(folder: Path, manifest_name: str) -> list[Path]:
    """`<manifest>.<pid>@<host>.tmp` in a (local) shard folder, left by dead processes."""
    return _sweep(folder, re.compile(re.escape(manifest_name) + r"\." + _MARK + r"\.tmp"))


def sweep_outputs(folder: Path) -> list[Path]:
    """Half-written outputs (atomic.py) of dead processes in `folder`."""
    return _sweep(folder, _OUTPUT_TMP)


def _sweep(folder: Path, pattern: re.Pattern) -> list[Path]:
    gone = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return gone
    now = time.time()
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if m and is_stale(Path(entry.path), m.group(1), m.group(2) or None, now):
            _remove(Path(entry.path))
            gone.append(Path(entry.path))
    return gone
