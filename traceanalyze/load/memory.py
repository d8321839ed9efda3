"""A rank's DuckDB memory limit and the folder of its work files (its private database and spill;
the reduce's critical-path files)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from traceanalyze.errors import TraceanalyzeError
from traceanalyze.interrupts import interrupts_held
from traceanalyze.load.discover import TraceFile
from traceanalyze.load.stale import staging_prefix

# A rank's work files (its private DuckDB database and DuckDB's spill) live only while it is
# mapped. A RAM-backed folder is about 3x faster than a disk; it is used for an uncompressed trace
# that surely fits in a quarter of the available memory and of /dev/shm's free space, never for
# a gzip (its content's size is not known before it is read). TRACEANALYZE_TMPDIR overrides the
# choice. (The reader's spilled rows never go there by choice: spill_folder.)
RAM_STAGING_DIR = Path("/dev/shm")


def available_memory_bytes() -> int:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def staging_dir(files: list[TraceFile]) -> str | None:
    """Where a rank's work files go: $TRACEANALYZE_TMPDIR, else RAM when an uncompressed trace surely
    fits (four times its size both in the available memory and free in /dev/shm), else the temp
    dir."""
    chosen = os.environ.get("TRACEANALYZE_TMPDIR")
    if chosen:
        return chosen
    if any(tf.path.name.endswith(".gz") for tf in files):
        return None  # what a gzip holds is not known before it is read: never stage it in RAM
    estimate = sum(tf.size_bytes for tf in files)
    if RAM_STAGING_DIR.is_dir() and os.access(RAM_STAGING_DIR, os.W_OK) \
            and estimate * 4 < min(available_memory_bytes(), free_bytes(RAM_STAGING_DIR)):
        return str(RAM_STAGING_DIR)
    return None


def free_bytes(folder: Path) -> int:
    """Bytes free in the file system of `folder` (0 when it cannot be read): a container's
    /dev/shm is often a small file system of its own (Docker's default: 64 MB)."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


@contextmanager
def staging_folder(files: list[TraceFile] = (), in_ram: bool = True) -> Iterator[Path]:
    """A private work folder in staging_dir(files), named so that a killed run's is swept
    (load/stale.py); removed with what it holds when the block ends. `in_ram=False`: never RAM
    by our choice ($TRACEANALYZE_TMPDIR, else the system's temp folder), for files that stand
    in for memory (spill_folder)."""
    where = staging_dir(list(files)) if in_ram else os.environ.get("TRACEANALYZE_TMPDIR") or None
    folder = None
    try:
        with interrupts_held():
            folder = Path(tempfile.mkdtemp(prefix=staging_prefix(), dir=where))
        yield folder
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def spill_folder() -> AbstractContextManager[Path]:
    """The private folder of the rows a rank's reader holds past its bound in memory
    (native/src/gathered.rs), in the system's temp folder: rows spilled into a RAM-backed folder
    are the memory the bound is there to save (a 200 MB trace staged up to 67 MB in /dev/shm
    beside the reader's 154 MB resident); a disk's page cache holds them as memory the system can
    reclaim (alternated runs: 1.02x the wall at 200 MB, 1.07x at 500 MB, where 201 MB spill)."""
    return staging_folder(in_ram=False)


# DuckDB may use this much memory per byte of trace events (at least MIN_MEMORY_LIMIT_BYTES):
# beyond it, it writes to the database file or spills to disk, so the whole load stays
# under the size of the JSON. TRACEANALYZE_MEMORY_LIMIT (DuckDB syntax, e.g. '4GB') overrides.
MEMORY_LIMIT_PER_EVENT_BYTE = 0.4
MIN_MEMORY_LIMIT_BYTES = 256 << 20
MEMORY_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)", re.IGNORECASE)  # (number, unit)


def chosen_memory_limit() -> str | None:
    """TRACEANALYZE_MEMORY_LIMIT, checked (before anything is read)."""
    chosen = os.environ.get("TRACEANALYZE_MEMORY_LIMIT", "").strip()
    if chosen and not MEMORY_SIZE.fullmatch(chosen):
        raise TraceanalyzeError(f"TRACEANALYZE_MEMORY_LIMIT={chosen!r} is not a memory size such as '4GB'")
    return chosen or None


def limit_memory(con, events_bytes: int) -> None:
    chosen = chosen_memory_limit()
    if chosen:
        con.execute(f"SET memory_limit = '{chosen}'")
        return
    limit = max(MIN_MEMORY_LIMIT_BYTES, int(events_bytes * MEMORY_LIMIT_PER_EVENT_BYTE))
    if limit < available_memory_bytes() * 0.8:  # (else DuckDB's own default, 80 % of RAM, is lower)
        con.execute(f"SET memory_limit = '{limit >> 20}MiB'")

