"""Read a trace file as a stream of bytes: plain or gzip, decompression streamed and bounded."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

from traceanalyze.errors import TraceanalyzeError

try:  # ISA-L's inflate is ~3-5x faster than zlib's; same format.
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - isal is a declared dependency
    _zlib = zlib
_INFLATE_ERRORS = (zlib.error, _zlib.error)

GZIP_MAGIC = b"\x1f\x8b"
BLOCK_BYTES = 2 << 20
READ_BYTES = 1 << 20  # compressed bytes read at a time
# A hostile gzip can expand a thousandfold. Real Kineto traces compress 10-40x.
MAX_EXPANSION = 400
MIN_ALLOWANCE_BYTES = 512 << 20


class StreamCut(Exception):
    """The compressed stream ended early (a killed job): the bytes before the cut are usable."""


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == GZIP_MAGIC


def estimated_uncompressed_bytes(path: Path) -> int:
    """The size of the file's content: its size, or for gzip the length its trailer records
    (modulo 4 GiB, so a bigger file is underestimated; never below the compressed size)."""
    size = path.stat().st_size
    if not is_gzip(path) or size < 18:
        return size
    with open(path, "rb") as fh:
        fh.seek(size - 4)
        return max(size, int.from_bytes(fh.read(4), "little"))


def max_uncompressed_bytes(path: Path) -> int:
    """Bound on what one gzip file may expand to before we refuse it."""
    return max(MIN_ALLOWANCE_BYTES, path.stat().st_size * MAX_EXPANSION)


def iter_blocks(path: Path, block_bytes: int = BLOCK_BYTES,
                notes: list[tuple[str, str]] | None = None) -> Iterator[bytes]:
    """Yield the (decompressed) content of `path` in blocks.

    Raises StreamCut at the end of a truncated gzip stream (after yielding everything
    that was decodable before the cut), and TraceanalyzeError for a file that is corrupt
    or expands beyond the bound. Oddities that lose nothing are appended to `notes`.
    """
    if not is_gzip(path):
        with open(path, "rb") as fh:
            while block := fh.read(block_bytes):
                yield block
        return
    yield from _gunzip_blocks(path, block_bytes, notes if notes is not None else [])


def _gunzip_blocks(path: Path, block_bytes: int, notes: list[tuple[str, str]]) -> Iterator[bytes]:
    """Inflate member after member, at most `block_bytes` of output per step (memory stays
    bounded whatever the compression ratio), checking each member's CRC and length."""
    budget = max_uncompressed_bytes(path)
    total = 0
    inflater = _zlib.decompressobj(16 + zlib.MAX_WBITS)
    with open(path, "rb") as fh:
        data, full = b"", False
        while True:
            if not data and not full:  # (a full block may leave output waiting without more input)
                data = fh.read(READ_BYTES)
                if not data:
                    break
            try:
                out = inflater.decompress(data, block_bytes)
            except _INFLATE_ERRORS as exc:
                raise TraceanalyzeError(
                    f"corrupt gzip data ({exc})", str(path)) from None
            data, full = inflater.unconsumed_tail, len(out) >= block_bytes
            if out:
                total += len(out)
                if total > budget:
                    raise TraceanalyzeError(
                        f"gzip expands beyond {budget >> 20} MiB ({MAX_EXPANSION}x its size); "
                        "refusing it as a possible decompression bomb", str(path))
                yield out
            if inflater.eof:  # end of a gzip member: another member, zero padding, or garbage
                rest = inflater.unused_data + data + fh.read(max(0, 2 - len(inflater.unused_data + data)))
                if rest[:2] == GZIP_MAGIC:
                    inflater, data, full = _zlib.decompressobj(16 + zlib.MAX_WBITS), rest, False
                    continue
                while rest and not rest.strip(b"\0"):  # zero padding (tape/blocked writes) is fine
                    rest = fh.read(READ_BYTES)
                if rest:
                    notes.append(("gzip-trailing-data", "bytes after the end of the gzip stream were ignored"))
                return
    if not inflater.eof:
        tail = inflater.flush()
        if tail:
            total += len(tail)
            yield tail
        raise StreamCut(f"the gzip stream ends after {total:,} uncompressed bytes")


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
