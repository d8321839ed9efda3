"""Write an output file atomically, never through a symlink planted at its name.

The content goes to a new private file in the same folder (O_EXCL: it cannot be a link),
then `os.replace` renames it over the name. A symlink that was there is replaced as a
link, its target is untouched; a reader never sees half a file; a run killed half-way
leaves only the temporary file, removed by its `finally` (or swept by the next run:
load/stale.py).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from traceanalyze.interrupts import interrupts_held

TMP_SUFFIX = ".tmp"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: Path, data: bytes) -> Path:
    path = Path(path)
    tmp = None
    try:
        with interrupts_held():  # (a signal meanwhile is raised at the block's end, in this try)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.",
                                       suffix=TMP_SUFFIX)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # what a plain open() would have given
        os.replace(tmp, path)
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: Path, text: str) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"))
