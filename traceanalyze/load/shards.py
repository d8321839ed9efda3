"""The shard set: one folder per rank of Parquet tables plus a manifest, written by the map stage.

Layout (a local folder or an fsspec URL such as s3://bucket/job/shards):

    <shards>/rank=<N>/<table>.parquet   one file per per-rank table (SHARD_TABLES)
    <shards>/rank=<N>/manifest.json     written last, atomically: a shard without one is not trusted

    <shards>/rank=<N>/.lock             held (flock) while a map writes the rank: a second waits

The manifest names the source trace (path or URL, size, mtime or object ETag), the tool and
schema versions, the rank's host and event counts, and every Parquet file's size and xxh3_128
hash (`files`). A shard is reused only when all of these match the current trace and this
version (`is_current`) and its files still match their sizes and hashes (load/verify.py);
anything else is mapped again. docs/shards.md describes the format.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from traceanalyze.version import __version__
import traceanalyze.db as tracedb
from traceanalyze.load.discover import TraceFile
from traceanalyze.load.stale import marker, sweep_manifest_tmp

# /2: the manifest lists every Parquet file's size and hash (a /1 manifest is stale: mapped again)
SHARD_FORMAT = "traceanalyze.shard/2"
MANIFEST = "manifest.json"
LOCK = ".lock"
HASH = "xxh3_128"  # the manifest's content hash of each file (xxhash: GB/s, a corrupt copy's check)
_READ_CHUNK = 1 << 20
# every table the map stage writes per rank, in the order they are created
SHARD_TABLES = (
    "ranks", "pg_configs", "load_issues", "raw_events", "threads", "steps", "cpu_ops", "annotations", "runtime",
    "kernels", "memcpy", "collectives", "all_to_all_calls", "step_comm", "memory", "step_batches", "main_threads",
    "phase_intervals", "step_phases", "gpu_busy_intervals", "gpu_idle_gaps", "step_gpu", "step_regions", "op_flops",
    "top_host_ops",
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
        path = f"{self.rank_dir(rank)}/{MANIFEST}"
        try:
            if self.remote:
                with self.fs().open(path, "rb") as fh:
                    manifest = json.loads(fh.read())
            else:  # (a local file needs no fsspec, whose import costs a re-run a sixth of its time)
                with open(path, "rb") as fh:
                    manifest = json.loads(fh.read())
        except (OSError, ValueError):
            return None
        return manifest if isinstance(manifest, dict) else None

    def ranks(self) -> list[int]:
        """Ranks that have a shard folder (with or without a manifest)."""
        try:
            if self.remote:
                fs = self.fs()
                fs.invalidate_cache()  # (a listing cached before this process's maps wrote shards)
                names = [p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(self.root, detail=False)]
            else:  # (no fsspec for a local folder: its import costs every load 0.2 s)
                names = os.listdir(local_path(self.root))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(int(n[5:]) for n in names if n.startswith("rank=") and n[5:].isdigit())

    def forget(self, rank: int) -> None:
        """Remove the rank's manifest first (the shard is untrusted from then on), then its tables."""
        folder = self.rank_dir(rank)
        remove = self.fs().rm_file if self.remote else os.remove
        for name in [MANIFEST, *(f"{t}.parquet" for t in SHARD_TABLES)]:
            try:
                remove(f"{folder}/{name}")
            except (FileNotFoundError, OSError):
                pass
        if not self.remote:  # a manifest half-written by a killed map (load/stale.py)
            sweep_manifest_tmp(Path(folder), MANIFEST)

    def drop_unfinished(self, rank: int) -> None:
        """The tables of a rank whose map stopped before writing its manifest, and then its folder
        when empty (a local shard folder; a remote one keeps objects that no manifest vouches for)."""
        if self.remote:
            return
        folder = self.rank_dir(rank)
        if os.path.exists(os.path.join(folder, MANIFEST)):
            return
        self.forget(rank)
        try:
            os.rmdir(folder)  # (only when empty: nothing of anyone else's goes)
        except OSError:
            pass

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


def file_digest(path: str | os.PathLike) -> str:
    """The xxh3_128 hash of a file's bytes (hex), read in 1 MiB chunks."""
    import xxhash

    digest = xxhash.xxh3_128()
    buffer = bytearray(_READ_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buffer):
            digest.update(view[:n])
    return digest.hexdigest()


def file_entry(path: str | os.PathLike) -> dict:
    """What the manifest records of one Parquet file: its size and content hash."""
    return {"size_bytes": os.path.getsize(path), HASH: file_digest(path)}


@contextlib.contextmanager
def rank_lock(store: ShardStore, rank: int, waiting: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the rank's lock (an flock on <shards>/rank=N/.lock) while its shard is written:
    a second writer of the same rank (a retried array task, two loads into one folder) waits
    for the first. `waiting(holder)` is called once when it has to wait (`holder`: the
    `<pid>@<host>` of the writer, when known). The kernel releases the lock when the process
    ends, however it ends. A remote store has no lock (an object store has no flock)."""
    if store.remote:
        yield
        return
    folder = store.rank_dir(rank)
    os.makedirs(folder, exist_ok=True)
    fd = os.open(os.path.join(folder, LOCK), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting is not None:
                waiting(os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, marker().encode(), 0)
        yield
    finally:
        os.close(fd)  # (releases the lock)


def new_manifest(tf: TraceFile, host_name, events: int, events_bytes: int, rows: dict[str, int],
                 files: dict[str, dict]) -> dict:
    return {
        "format": SHARD_FORMAT, "tool_version": __version__, "schema_version": tracedb.SCHEMA_VERSION,
        "rank": tf.rank, "source": source_of(tf), "host_name": host_name if isinstance(host_name, str) else None,
        "world_size": tf.world_size, "events": events, "events_bytes": events_bytes, "rows": rows,
        "files": files,
    }


def is_current(manifest: dict | None, tf: TraceFile | None = None) -> bool:
    """A shard written by this version (and, given `tf`, from exactly that trace)."""
    if not manifest or manifest.get("format") != SHARD_FORMAT \
            or manifest.get("schema_version") != tracedb.SCHEMA_VERSION \
            or manifest.get("tool_version") != __version__:
        return False
    return tf is None or (manifest.get("rank") == tf.rank and manifest.get("source") == source_of(tf))
