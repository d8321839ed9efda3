"""Find per-rank trace files in a directory and tell which rank each one is."""

from __future__ import annotations

import itertools
import json
import os
import re
import stat
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from traceanalyze.errors import TraceanalyzeError
from traceanalyze.extension import native as _native
from traceanalyze.load.flight_recorder import DumpFile, identify_dump, looks_like_dump
from traceanalyze.load.source import estimated_uncompressed_bytes, open_trace_bytes

PROTOBUF_SUFFIXES = (".pftrace", ".perfetto-trace", ".pb")  # Perfetto protobuf (plain or .gz)

# Chrome / Kineto JSON, and Perfetto protobuf (pftrace.py), each plain or gzipped
TRACE_SUFFIXES = tuple(s + gz for s in (".json", *PROTOBUF_SUFFIXES) for gz in ("", ".gz"))
OUR_OUTPUTS = ("summary.json", "expected.json", "trace.perfetto-trace", "manifest.json")  # written by us (manifest.json: a rank shard's), not traces
# rank-3, rank3, rank_3, worker3, worker0.1623143089861.pt.trace.json
RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
# tensorboard_trace_handler: <worker_name>.<time_ms>.pt.trace.json[.gz]
WINDOW_IN_NAME = re.compile(
    r"^(?P<worker>.+?)\.(?P<window>\d+)\.pt\.trace\.(?:json|pftrace|perfetto-trace|pb)(?:\.gz)?$")
HEAD_PROBE_BYTES = 1 << 20
# files never opened to look for a Flight Recorder dump (ours, and what sits beside traces)
NOT_DUMPS = (".parquet", ".duckdb", ".wal", ".tmp", ".lock", ".html", ".md", ".txt", ".csv", ".log", ".py",
             ".yaml", ".toml", ".perfetto-trace.gz")


@dataclass(frozen=True)
class TraceFile:
    """One per-rank trace file picked for loading."""

    path: Path
    rank: int
    rank_source: str  # 'distributedInfo' | 'file name' | 'single process'
    world_size: int | None
    backend: str | None
    size_bytes: int
    mtime_ns: int
    url: str | None = None  # the fsspec URL of an object-storage trace (path is then its key)
    etag: str | None = None  # the object's ETag (object storage), else None
    unusable_rank: str | None = None  # distributedInfo.rank as the JSON wrote it, when it is no rank number


def trace_bytes(tf: TraceFile) -> int:
    """The JSON bytes of a rank's trace (estimated for gzip; the object size for a URL)."""
    if tf.url:
        return tf.size_bytes
    try:
        return estimated_uncompressed_bytes(tf.path)
    except OSError:
        return tf.size_bytes


@dataclass
class Discovery:
    """What discovery found: the files to load and notes about the rest."""

    files: list[TraceFile]
    notes: list[tuple[str, str, str]] = field(default_factory=list)  # (path, kind, message)
    dumps: list[DumpFile] = field(default_factory=list)  # Flight Recorder dumps, one per rank (by content)


# A selection is materialized as a set: a range like 0-20000000 would cost seconds and
# gigabytes for ranks no job has. More than this many selected ranks is a usage error.
MAX_SELECTED_RANKS = 1 << 20


def parse_rank_selection(spec: str | None) -> set[int] | None:
    """`all` -> None; `0,3` -> {0, 3}; `0-7` -> {0..7}; mixtures allowed (`0-3,8`)."""
    if spec is None or spec.strip().lower() in ("", "all"):
        return None
    bounds: list[tuple[int, int]] = []
    for part in spec.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d{1,18})(?:-(\d{1,18}))?", part)
        if not m:
            raise TraceanalyzeError(f"--ranks: cannot read {part[:40]!r}; use all, 0,3 or 0-7")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        if hi < lo:
            raise TraceanalyzeError(f"--ranks: empty range {part!r}")
        bounds.append((lo, hi))
    total = sum(hi - lo + 1 for lo, hi in bounds)  # counted before anything is built
    if total > MAX_SELECTED_RANKS:
        raise TraceanalyzeError(f"--ranks selects {total:,} ranks; at most {MAX_SELECTED_RANKS:,} "
                                "can be selected (use all)")
    ranks: set[int] = set()
    for lo, hi in bounds:
        ranks.update(range(lo, hi + 1))
    return ranks


def format_ranks(ranks) -> str:
    """{0, 1, 2, 3, 8} -> '0-3,8' (short, whatever the number of ranks)."""
    out: list[list[int]] = []
    for r in sorted(ranks):
        if out and r == out[-1][1] + 1:
            out[-1][1] = r
        else:
            out.append([r, r])
    return ",".join(f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in out)


def _kind_of(path: Path) -> str | None:
    """None for a regular file (or a link to one); else what it is, without opening it."""
    try:
        mode = path.stat().st_mode  # follows links; never opens (a FIFO would block a reader)
    except FileNotFoundError:
        return "a dangling link" if path.is_symlink() else "gone"
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device" + (f" (a link to {os.readlink(path)})" if path.is_symlink() else "")
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def _scan(target: Path) -> tuple[list[Path], list[tuple[str, str, str]]]:
    """(trace files under `target`, notes for entries named like traces that are not files)."""
    paths, skipped = [], []
    for p in target.rglob("*"):
        if not p.name.endswith(TRACE_SUFFIXES) or p.name.startswith(".") \
                or p.name in OUR_OUTPUTS:
            continue
        kind = _kind_of(p)
        if kind is None:
            paths.append(p)
        elif kind != "gone":
            skipped.append((str(p), "not-a-file", f"named like a trace file but {kind}: skipped (not read)"))
    return sorted(paths), sorted(skipped)


def list_trace_paths(target: Path) -> list[Path]:
    """Trace files under `target` (a file or a directory, searched recursively)."""
    return _list(target)[0]


def listed(target: Path) -> tuple[list[Path], list[tuple[str, str, str]]]:
    """(trace files under `target`, notes of entries named like traces that are not files);
    raises TraceanalyzeError for a target that is none."""
    return _list(target)


def _list(target: Path) -> tuple[list[Path], list[tuple[str, str, str]]]:
    if not target.exists():
        what = "a dangling link" if target.is_symlink() else "no such file or directory"
        raise TraceanalyzeError(what, str(target))
    kind = _kind_of(target)
    if kind is None:
        return ([], []) if looks_like_dump(target) else ([target], [])
    if kind != "a folder":
        raise TraceanalyzeError(f"not a trace file or folder: {kind}", str(target))
    paths, skipped = _scan(target)
    if not paths and not list_dump_paths(target):
        extra = f" ({len(skipped)} entries named like traces are not regular files)" if skipped else ""
        raise TraceanalyzeError(f"no trace files (*.json, *.pftrace, *.perfetto-trace, *.pb; or .gz) found, nor any Flight Recorder dump{extra}",
                                str(target))
    return paths, skipped


def list_dump_paths(target: Path) -> list[Path]:
    """Flight Recorder dumps under `target`, recognized by content (a pickle naming `entries` /
    `version`, whatever its name): files named like traces are not dumps."""
    if _kind_of(target) is None:
        return [target] if looks_like_dump(target) else []
    return sorted(p for p in target.rglob("*")
                  if not p.name.endswith(TRACE_SUFFIXES + NOT_DUMPS) and not p.name.startswith(".")
                  and _kind_of(p) is None and looks_like_dump(p))


def find_dumps(target: Path, ranks: set[int] | None = None) -> list[DumpFile]:
    """One Flight Recorder dump per rank under `target` (of the selected ranks); two dumps of
    one rank are an error."""
    found: dict[int, DumpFile] = {}
    for path in list_dump_paths(target):
        dump = identify_dump(path)
        if dump.rank in found:
            raise TraceanalyzeError(f"two Flight Recorder dumps claim rank {dump.rank}: {found[dump.rank].path}, "
                                    f"{path}", str(path))
        found[dump.rank] = dump
    return [d for r, d in sorted(found.items()) if ranks is None or r in ranks]


def is_protobuf(path: Path) -> bool:
    """A Perfetto protobuf trace, by its name (read by the native reader's protobuf decoder)."""
    return path.name.lower().removesuffix(".gz").endswith(PROTOBUF_SUFFIXES)


def head_metadata(head: bytes) -> dict:
    """The trace metadata (chrome_events.metadata) in the first packets of a Perfetto protobuf
    file's first (decompressed) bytes; values too deep to decode are left out."""
    meta = {}
    for key, raw in _native.pftrace_head_metadata(head) or []:
        checked = _native.checked_metadata(raw)
        if checked is not None:
            meta[key] = json.loads(checked)
    return meta


def read_distributed_info(path: Path, head: bytes | None = None) -> dict | None:
    """The `distributedInfo` object if it appears in the first MiB of the file (or of `head`)."""
    head = open_trace_bytes(path, limit=HEAD_PROBE_BYTES) if head is None else head
    if is_protobuf(path):  # (Perfetto: in the first packets' metadata)
        value = head_metadata(head).get("distributedInfo")
        return value if isinstance(value, dict) else None
    at = head.find(b'"distributedInfo"')
    if at < 0:
        return None
    colon = head.find(b":", at)
    text = head[colon + 1:].decode("utf-8", errors="replace").lstrip()
    try:
        value, _ = json.JSONDecoder().raw_decode(text)
    except (ValueError, RecursionError):  # not JSON, or nested too deeply to read: not used
        return None
    return value if isinstance(value, dict) else None


MAX_RANKS = 1 << 24  # ranks and world sizes beyond this are not a real job


def _count(value, lowest: int) -> bool:
    """An integer rank / world size in a plausible range (the JSON may hold anything)."""
    return isinstance(value, int) and not isinstance(value, bool) and lowest <= value < MAX_RANKS


def _shown(value) -> str:
    """A JSON value as the trace wrote it, cut to 40 characters (for a message)."""
    text = json.dumps(value, ensure_ascii=True, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def identify(path: Path, only_file: bool = False, remote: dict | None = None) -> TraceFile:
    """Tell the rank of one file: distributedInfo.rank, else the file name, else an error.

    The one exception: a lone file without any distributedInfo comes from a
    single-process (non-distributed) run, and is rank 0.
    """
    found = read_distributed_info(path, remote and remote["head"])
    info = found or {}
    rank, source = info.get("rank"), "distributedInfo"
    unusable = None if "rank" not in info or _count(rank, 0) else _shown(info["rank"])
    if not _count(rank, 0):
        m = RANK_IN_NAME.search(path.name)
        if m:
            rank, source = int(m.group(1)), "file name"
        elif only_file and found is None:
            rank, source = 0, "single process"
        else:
            said = (f"its distributedInfo.rank ({unusable}) is not a rank number" if unusable
                    else "it has no distributedInfo.rank")
            raise TraceanalyzeError(
                f"cannot tell which rank this trace is: {said} and its "
                "name has no rank number (rename it like rank0.json)", str(path))
    if not _count(rank, 0):
        raise TraceanalyzeError(f"rank {rank} (from the {source}) is not a plausible rank number", str(path))
    world = info.get("world_size") if _count(info.get("world_size"), 1) else None
    if world is not None and source == "distributedInfo" and rank >= world:
        raise TraceanalyzeError(f"distributedInfo says rank {rank} in a world of {world} ranks", str(path))
    backend = info.get("backend") if isinstance(info.get("backend"), str) else None
    if remote:  # an object in a bucket (remote.py): path is its key, url and etag say where
        return TraceFile(path=path, rank=rank, rank_source=source, world_size=world, backend=backend,
                         size_bytes=remote["size"], mtime_ns=0, url=remote["url"], etag=remote["etag"],
                         unusable_rank=unusable)
    stat = path.stat()
    return TraceFile(
        path=path, rank=rank, rank_source=source,
        world_size=world, backend=backend,
        size_bytes=stat.st_size, mtime_ns=stat.st_mtime_ns, unusable_rank=unusable,
    )


def _window_key(tf: TraceFile) -> tuple[int, int, str]:
    m = WINDOW_IN_NAME.match(tf.path.name)
    return (int(m.group("window")) if m else -1, tf.mtime_ns, tf.path.name)


def _worker_name(tf: TraceFile) -> str:
    m = WINDOW_IN_NAME.match(tf.path.name)
    return str(tf.path.parent / (m.group("worker") if m else tf.path.name))


def _claimed_twice(rank: int, group: list[TraceFile]) -> str:
    """The error for files of several workers claiming one rank: the first two named, and a
    hint when they lie in different folders (a folder of several runs given)."""
    names = ", ".join(str(tf.path) for tf in group[:2]) + (f" and {len(group) - 2} more" if len(group) > 2 else "")
    folders = {tf.path.parent for tf in group}
    hint = f" (in {len(folders)} folders: give the folder of one run)" if len(folders) > 1 else ""
    count = "two" if len(group) == 2 else str(len(group))
    return f"{count} trace files claim rank {rank}: {names}{hint}"


def pick_windows(files: list[TraceFile]) -> Discovery:
    """One file per rank. Several windows of one worker: keep the last one and say so.

    Files of one rank from different workers (different name prefixes) are two
    traces claiming the same rank: an error, since either choice could be wrong.
    """
    by_rank: dict[int, list[TraceFile]] = {}
    for tf in files:
        by_rank.setdefault(tf.rank, []).append(tf)
    chosen, notes = [], []
    for rank, group in sorted(by_rank.items()):
        if len(group) > 1 and len({_worker_name(tf) for tf in group}) > 1:
            raise TraceanalyzeError(_claimed_twice(rank, group), str(group[0].path))
        group.sort(key=_window_key)
        chosen.append(group[-1])
        for skipped in group[:-1]:
            notes.append((str(skipped.path), "window-skipped",
                          f"rank {rank} has {len(group)} profiling windows; analyzing the last "
                          f"one ({group[-1].path.name}), skipping this one"))
    return Discovery(files=chosen, notes=notes)


def discover(target: Path, ranks: set[int] | None = None, found: list[TraceFile] | None = None) -> Discovery:
    """Files to load for `target` (or the `found` ones), filtered to the selected ranks."""
    skipped: list[tuple[str, str, str]] = []
    dumps: list[DumpFile] = []
    if found is None:
        paths, skipped = _list(target)
        dumps = find_dumps(target, ranks)
        found = [identify(p, only_file=len(paths) == 1) for p in paths]
    result = pick_windows(found)
    result.notes += skipped
    result.dumps = dumps
    if not result.files:  # Flight Recorder dumps alone: no profiler trace to select ranks of
        return result
    if ranks is not None:
        present = {tf.rank for tf in result.files}
        missing = sorted(ranks - present)
        result.files = [tf for tf in result.files if tf.rank in ranks]
        if not result.files:
            raise TraceanalyzeError(
                f"none of the selected ranks ({_cut(format_ranks(ranks))}) has a trace "
                f"(present: {_cut(format_ranks(present))})", str(target))
        if missing:  # one note, however many ranks the selection names
            result.notes.append((str(target), "rank-missing",
                                 f"{len(missing):,} selected rank(s) have no trace file: "
                                 f"{_cut(format_ranks(missing))}"))
    worlds = {tf.world_size for tf in result.files if tf.world_size}
    if len(worlds) > 1:  # name a file whose world size differs from most others'
        usual = Counter(tf.world_size for tf in result.files if tf.world_size).most_common(1)[0][0]
        odd = next(tf for tf in result.files if tf.world_size and tf.world_size != usual)
        other = next(tf for tf in result.files if tf.world_size == usual)
        raise TraceanalyzeError(
            f"the traces come from different runs: world size {odd.world_size} in this file but "
            f"{usual} in {other.path.name} (world sizes {sorted(worlds)} in one folder)", str(odd.path))
    if worlds and ranks is None:
        world = worlds.pop()
        present = {tf.rank for tf in result.files}
        n_absent = world - len({r for r in present if r < world})
        if 0 < n_absent < world:
            first = list(itertools.islice((r for r in range(world) if r not in present), 16))
            shown = ", ".join(map(str, first)) + (" ..." if n_absent > 16 else "")
            result.notes.append((str(target), "rank-missing",
                                 f"world size is {world} but {n_absent} rank files are absent "
                                 f"({shown}); analyzing the {len(present)} ranks present"))
    return result


def _cut(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit - 4] + " ..."
