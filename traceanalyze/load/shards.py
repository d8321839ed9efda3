"""The shard set: one folder per rank of Parquet tables plus a manifest, written by the map stage.

Layout (a local folder or an fsspec URL such as s3://bucket/job/shards):

    <shards>/rank=<N>/<table>.parquet   one file per per-rank table (SHARD_TABLES)
    <shards>/rank=<N>/manifest.json     written last, atomically: a shard without one is not trusted

The manifest names the source trace (path or URL, size, mtime or object ETag), the tool and
schema versions, the rank's host and event counts. A shard is reused only when all of these
match the current trace and this version (`is_current`); anything else is mapped again.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from traceanalyze import __version__
from traceanalyze import db as tracedb
from traceanalyze.load.discover import TraceFile
from traceanalyze.load.stale import marker, sweep_manifest_tmp

SHARD_FORMAT = "traceanalyze.shard/1"
MANIFEST = "manifest.json"
# every table the map stage writes per rank, in the order they are created
SHARD_TABLES = (
    "ranks", "load_issues", "raw_events", "threads", "steps", "cpu_ops", "annotations", "runtime",
    "kernels", "memcpy", "collectives", "step_comm", "memory", "step_batches", "main_threads",
    "phase_intervals", "step_phases", "gpu_busy_intervals", "gpu_idle_gaps", "step_gpu", "op_flops",
)


def is_remote(location: str) -> bool:
    """An fsspec URL other than file:// (s3://, gs://, ...)."""
    return "://" in location and not location.startswith("file://")


def local_path(location: str) -> str:
    return location[len("file://"):] if location.startswith("file://") else location


def source_of(tf: TraceFile) -> dict:
    """What identifies the exact bytes of a trace: its location, size, and mtime or ETag."""
    return {"file": tf.url or str(Path(tf.path).resolve()), "size_bytes": tf.size_bytes,
            "mtime_ns": tf.mtime_ns, "etag": tf.etag}


@dataclass(frozen=True)
class ShardStore:
    """A shard folder, local or remote."""

    root: str  # a local path or an fsspec URL

    @property
    def remote(self) -> bool:
        return is_remote(self.root)

    def fs(self):
        import fsspec  # (only here: it costs every command's start otherwise)

        return fsspec.core.url_to_fs(self.root)[0] if self.remote else fsspec.filesystem("file")

    def rank_dir(self, rank: int) -> str:
        return f"{self.root.rstrip('/')}/rank={rank}" if self.remote \
            else os.path.join(local_path(self.root), f"rank={rank}")

    def table_path(self, rank: int, table: str) -> str:
        return f"{self.rank_dir(rank)}/{table}.parquet"

    def read_manifest(self, rank: int) -> dict | None:
        """The rank's manifest, or None when there is none or it cannot be read."""
        try:
            with self.fs().open(f"{self.rank_dir(rank)}/{MANIFEST}", "rb") as fh:
                manifest = json.loads(fh.read())
        except (OSError, ValueError):
            return None
        return manifest if isinstance(manifest, dict) else None

    def ranks(self) -> list[int]:
        """Ranks that have a shard folder (with or without a manifest)."""
        fs = self.fs()
        fs.invalidate_cache()  # (a listing cached before this process's maps wrote shards)
        root = self.root if self.remote else local_path(self.root)
        try:
            names = [p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)]
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(int(n[5:]) for n in names if n.startswith("rank=") and n[5:].isdigit())

    def forget(self, rank: int) -> None:
        """Remove the rank's manifest first (the shard is untrusted from then on), then its tables."""
        fs = self.fs()
        folder = self.rank_dir(rank)
        for name in [MANIFEST, *(f"{t}.parquet" for t in SHARD_TABLES)]:
            try:
                fs.rm_file(f"{folder}/{name}")
            except (FileNotFoundError, OSError):
                pass
        if not self.remote:  # a manifest half-written by a killed map (load/stale.py)
            sweep_manifest_tmp(Path(folder), MANIFEST)

    def write_manifest(self, rank: int, manifest: dict) -> None:
        """Atomically: a local file is renamed into place; an object PUT is atomic."""
        data = json.dumps(manifest, indent=1).encode()
        path = f"{self.rank_dir(rank)}/{MANIFEST}"
        if self.remote:
            self.fs().pipe_file(path, data)
            return
        tmp = f"{path}.{marker()}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)


def new_manifest(tf: TraceFile, host_name, events: int, events_bytes: int, rows: dict[str, int]) -> dict:
    return {
        "format": SHARD_FORMAT, "tool_version": __version__, "schema_version": tracedb.SCHEMA_VERSION,
        "rank": tf.rank, "source": source_of(tf), "host_name": host_name if isinstance(host_name, str) else None,
        "world_size": tf.world_size, "events": events, "events_bytes": events_bytes, "rows": rows,
    }


def is_current(manifest: dict | None, tf: TraceFile | None = None) -> bool:
    """A shard written by this version (and, given `tf`, from exactly that trace)."""
    if not manifest or manifest.get("format") != SHARD_FORMAT \
            or manifest.get("schema_version") != tracedb.SCHEMA_VERSION \
            or manifest.get("tool_version") != __version__:
        return False
    return tf is None or (manifest.get("rank") == tf.rank and manifest.get("source") == source_of(tf))
