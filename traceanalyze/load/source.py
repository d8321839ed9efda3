"""Read a trace file as a stream of bytes: plain or gzip, decompression streamed and bounded."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path

from traceanalyze.errors import TraceanalyzeError

try:  # ISA-L's gzip is ~3x faster than zlib at decompression; same format.
    from isal import igzip as _gzip
except ImportError:  # pragma: no cover - isal is a declared dependency
    _gzip = gzip

GZIP_MAGIC = b"\x1f\x8b"
BLOCK_BYTES = 8 << 20
# A hostile gzip can expand a thousandfold. Real Kineto traces compress 10-40x.
MAX_EXPANSION = 400
MIN_ALLOWANCE_BYTES = 512 << 20


class StreamCut(Exception):
    """The compressed stream ended early (a killed job): the bytes before the cut are usable."""


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == GZIP_MAGIC


def max_uncompressed_bytes(path: Path) -> int:
    """Bound on what one gzip file may expand to before we refuse it."""
    return max(MIN_ALLOWANCE_BYTES, path.stat().st_size * MAX_EXPANSION)


def iter_blocks(path: Path, block_bytes: int = BLOCK_BYTES) -> Iterator[bytes]:
    """Yield the (decompressed) content of `path` in blocks.

    Raises StreamCut at the end of a truncated gzip stream (after yielding what was
    readable), and TraceanalyzeError for a file that is not gzip or is corrupt.
    """
    if not is_gzip(path):
        with open(path, "rb") as fh:
            while block := fh.read(block_bytes):
                yield block
        return
    budget = max_uncompressed_bytes(path)
    total = 0
    try:
        with _gzip.open(path, "rb") as fh:
            while True:
                block = fh.read(block_bytes)
                if not block:
                    return
                total += len(block)
                if total > budget:
                    raise TraceanalyzeError(
                        f"gzip expands beyond {budget >> 20} MiB ({MAX_EXPANSION}x its size); "
                        "refusing it as a possible decompression bomb", str(path))
                yield block
    except EOFError as exc:  # gzip stream cut short
        raise StreamCut(str(exc)) from None
    except (OSError, zlib.error, ValueError) as exc:
        if "end-of-stream" in str(exc) or "truncated" in str(exc).lower():
            raise StreamCut(str(exc)) from None
        raise TraceanalyzeError(f"corrupt gzip data after {total} bytes ({exc})", str(path)) from None


def open_trace_bytes(path: Path, limit: int) -> bytes:
    """The first `limit` bytes of the (decompressed) file; short files give all."""
    out = bytearray()
    try:
        for block in iter_blocks(path, block_bytes=min(limit, BLOCK_BYTES)):
            out += block
            if len(out) >= limit:
                break
    except StreamCut:
        pass
    return bytes(out[:limit])
