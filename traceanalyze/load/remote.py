"""Traces in object storage (s3://, gs://, any fsspec URL): list them and tell each one's rank.

Only the first bytes of each object are read here (for distributedInfo); the map downloads
the whole object into its private folder (map.py). Credentials are found the usual way of
each store (AWS_* variables or ~/.aws for s3://, application default credentials for gs://;
AWS_ENDPOINT_URL for an S3-compatible server).
"""

from __future__ import annotations

import zlib
from pathlib import PurePosixPath

import fsspec

from traceanalyze.errors import TraceanalyzeError
from traceanalyze.load.discover import HEAD_PROBE_BYTES, TRACE_SUFFIXES, Discovery, TraceFile, discover, identify

HEAD_COMPRESSED_BYTES = 1 << 20


def _fs(url: str):
    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise TraceanalyzeError(f"cannot open this URL ({exc})", url) from None


def _head(fs, path: str) -> bytes:
    try:
        raw = fs.cat_file(path, start=0, end=HEAD_COMPRESSED_BYTES)
    except Exception as exc:  # noqa: BLE001 - any client error
        raise TraceanalyzeError(f"cannot read the object ({type(exc).__name__}: {exc})", path) from None
    if raw[:2] == b"\x1f\x8b":
        try:
            return zlib.decompressobj(31).decompress(raw, HEAD_PROBE_BYTES)
        except zlib.error:
            return b""
    return raw[:HEAD_PROBE_BYTES]


def _url(fs, path: str) -> str:
    protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
    return f"{protocol}://{path}"


def identify_remote(url: str, only_file: bool = False, fs=None, info: dict | None = None) -> TraceFile:
    if fs is None:
        fs, path = _fs(url)
    else:
        path = url.split("://", 1)[-1]
    try:
        info = info or fs.info(path)
    except FileNotFoundError:
        raise TraceanalyzeError("no such object", url) from None
    etag = info.get("ETag") or info.get("etag") or info.get("md5Hash")
    return identify(PurePosixPath(path), only_file, remote={
        "head": _head(fs, path), "size": int(info.get("size") or 0), "url": _url(fs, path),
        "etag": str(etag) if etag else None})


def discover_remote(url: str, ranks: set[int] | None = None) -> Discovery:
    """Like discover() for a bucket prefix (or one object)."""
    fs, root = _fs(url)
    try:
        listing = fs.find(root, detail=True)
    except FileNotFoundError:
        listing = {}
    found = {p: i for p, i in listing.items() if p.endswith(TRACE_SUFFIXES)
             and not PurePosixPath(p).name.startswith(".") and PurePosixPath(p).name not in ("summary.json", "expected.json")}
    if not found:
        raise TraceanalyzeError("no trace objects (*.json, *.json.gz) found", url)
    files = [identify_remote(_url(fs, p), len(found) == 1, fs, info) for p, info in sorted(found.items())]
    return discover(PurePosixPath(root), ranks, found=files)
