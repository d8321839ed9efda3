"""Flight Recorder dumps: torch.distributed's per-rank record of its last collectives -> rows.

A dump is a pickle (one per rank, `nccl_trace_rank_<rank>` by default) whose top-level dict holds
`version`, `entries` (one per collective: group, `collective_seq_id`, op, sizes, dtypes, state,
the Python stack), `pg_status` (per group: last enqueued / started / completed) and `pg_config`
(per group: name, description, ranks; empty on gloo). A pickle can run code when it is loaded, so
it is read by an unpickler that refuses every global (only plain containers and scalars come
back), after a size check. docs/flight-recorder.md describes what is read.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from traceanalyze.errors import TraceanalyzeError, TraceFormatError
from traceanalyze.interrupts import interrupts_held
from traceanalyze.lazy_import import duckdb

MAX_DUMP_BYTES = 256 << 20  # a 20,000-entry NCCL dump is a few tens of MB
SNIFF_BYTES = 4096
PICKLE_PROTOCOLS = range(2, 6)
# the dump's rank: the trailing number of its file name (nccl_trace_rank_3, fr_dump_3.pkl)
RANK_AT_END = re.compile(r"(\d{1,8})(?:\.(?:pkl|pickle))?$", re.IGNORECASE)
# a frame in torch itself (a folder named torch in its path): the user's frame is the first other one
TORCH_FRAME = re.compile(r"(?:^|[\\/])torch[\\/]")


class _NoGlobals(pickle.Unpickler):
    """Plain containers and scalars only: any class or function the pickle names is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"it names a Python object ({str(module)[:60]}.{str(name)[:60]}), "
                                     "which a Flight Recorder dump never does: not loaded")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("it holds a persistent reference, which a Flight Recorder dump never does")


@dataclass(frozen=True)
class DumpFile:
    """One rank's Flight Recorder dump picked for loading."""

    path: Path
    rank: int
    size_bytes: int
    mtime_ns: int


def looks_like_dump(path: Path) -> bool:
    """A pickle whose first bytes name the dump's keys (`version` / `entries`); nothing is unpickled."""
    try:
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError:
        return False
    return (len(head) > 2 and head[0] == 0x80 and head[1] in PICKLE_PROTOCOLS
            and (b"entries" in head or b"version" in head))


def identify_dump(path: Path) -> DumpFile:
    """The dump's rank from its file name's trailing number, else an error naming the file."""
    m = RANK_AT_END.search(path.name)
    if not m:
        raise TraceanalyzeError("cannot tell which rank this Flight Recorder dump is: its name does not end "
                                "with a rank number (like nccl_trace_rank_3)", str(path))
    stat = path.stat()
    return DumpFile(path=path, rank=int(m.group(1)), size_bytes=stat.st_size, mtime_ns=stat.st_mtime_ns)


def read_dump(path: Path) -> dict:
    """The dump's top-level dict, read without running anything; a one-line error otherwise."""
    size = path.stat().st_size
    if size > MAX_DUMP_BYTES:
        raise TraceFormatError(f"Flight Recorder dump of {size:,} bytes is over the {MAX_DUMP_BYTES:,}-byte "
                               "limit: not loaded", str(path))
    data = path.read_bytes()
    try:
        value = _NoGlobals(io.BytesIO(data)).load()
    except pickle.UnpicklingError as exc:
        raise TraceFormatError(f"not a readable Flight Recorder dump: {' '.join(str(exc).split())[:200]}",
                               str(path)) from None
    except (EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError,
            MemoryError, RecursionError, UnicodeDecodeError) as exc:
        raise TraceFormatError(f"not a readable Flight Recorder dump (cut short or damaged: "
                               f"{type(exc).__name__})", str(path)) from None
    if not isinstance(value, dict) or not isinstance(value.get("entries"), list):
        raise TraceFormatError("a pickle but not a Flight Recorder dump (no list of `entries` at its top)",
                               str(path))
    return value


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 1 << 63 else None


def _text(value) -> str | None:
    if isinstance(value, str):  # (a pickle may hold lone surrogates: replaced, as invalid UTF-8 is)
        return value if value.isascii() else value.encode("utf-8", errors="replace").decode("utf-8")
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


def _json_text(value) -> str | None:
    """Sizes and dtypes as compact JSON text ([[4, 16]], ["Float"]); None when absent or odd."""
    def plain(v):
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, (int, float, str)) or v is None:
            return v
        return str(v)
    return None if value is None else json.dumps(plain(value), separators=(",", ":"))


def _group(entry: dict) -> tuple[str | None, str | None]:
    pg = entry.get("process_group")
    if isinstance(pg, (list, tuple)) and pg:
        return _text(pg[0]), _text(pg[1]) if len(pg) > 1 else None
    return _text(entry.get("pg_id")), None  # older dumps: only the group's number


def user_frame(frames) -> tuple[str | None, int | None, str | None]:
    """The first frame (innermost first) whose file is not torch's: the user's line of code."""
    if not isinstance(frames, list):
        return None, None, None
    for frame in frames:
        if not isinstance(frame, dict):
            continue
        filename = _text(frame.get("filename"))
        if filename and not TORCH_FRAME.search(filename):
            return filename, _int(frame.get("line")), _text(frame.get("name"))
    return None, None, None


P2P_NAME = re.compile(r"^(send) (\d{1,8})->(\d{1,8})$|^(recv) (\d{1,8})<-(\d{1,8})$")


def p2p_peers(name: str) -> tuple[str, int | None, int | None]:
    """'send 0->1' -> ('send', 0, 1); 'recv 1<-0' -> ('recv', 0, 1) (source, destination: ranks
    of the group); a collective's name -> (name, None, None)."""
    m = P2P_NAME.match(name)
    if not m:
        return name, None, None
    if m.group(1):
        return "send", int(m.group(2)), int(m.group(3))
    return "recv", int(m.group(6)), int(m.group(5))


def entry_rows(rank: int, dump: dict) -> list[tuple]:
    """fr_entries rows of one dump (schema.sql), in the dump's order."""
    rows = []
    known: dict[str, str | None] = {}  # sizes and dtypes repeat: each distinct value is encoded once

    def as_json(value) -> str | None:
        key = repr(value)
        if key not in known:
            known[key] = _json_text(value)
        return known[key]

    for index, entry in enumerate(dump["entries"]):
        if not isinstance(entry, dict):
            continue
        name = _text(entry.get("profiling_name")) or ""
        pg_name, pg_desc = _group(entry)
        seq = _int(entry.get("collective_seq_id"))
        if seq is None:
            seq = _int(entry.get("seq_id"))  # dumps before version 2.2 numbered one sequence
        file, line, function = user_frame(entry.get("frames"))
        op, src, dst = p2p_peers(name.split(":", 1)[-1])
        rows.append((
            rank, _int(entry.get("record_id")) if _int(entry.get("record_id")) is not None else index,
            _int(entry.get("pg_id")), pg_name, pg_desc, seq, _int(entry.get("p2p_seq_id")), _int(entry.get("op_id")),
            op, name,
            as_json(entry.get("input_sizes")), as_json(entry.get("input_dtypes")),
            as_json(entry.get("output_sizes")), as_json(entry.get("output_dtypes")),
            _text(entry.get("state")), entry.get("retired") if isinstance(entry.get("retired"), bool) else None,
            _int(entry.get("time_created_ns")), _int(entry.get("time_discovered_started_ns")),
            _int(entry.get("time_discovered_completed_ns")), _int(entry.get("timeout_ms")),
            bool(entry.get("is_p2p")) if isinstance(entry.get("is_p2p"), bool) else False,
            src, dst, file, line, function))
    return rows


def _names_by_pg_id(dump: dict) -> dict[str, str]:
    """The rank's own group numbers (pg_id, the keys of pg_status) -> group names, from its entries."""
    out = {}
    for entry in dump["entries"]:
        if isinstance(entry, dict) and _int(entry.get("pg_id")) is not None:
            name = _group(entry)[0]
            if name:
                out.setdefault(str(entry["pg_id"]), name)
    return out


def status_rows(rank: int, dump: dict) -> list[tuple]:
    """fr_status rows: per group the rank's last enqueued / started / completed collective
    (pg_status is keyed by the rank's own group number, pg_id: named through the entries)."""
    status = dump.get("pg_status")
    if not isinstance(status, dict):
        return []
    names = _names_by_pg_id(dump)
    return [(rank, int(pg) if re.fullmatch(r"[0-9]{1,12}", str(pg)) else None, names.get(str(pg)),
             _int(s.get("last_enqueued_collective")), _int(s.get("last_started_collective")),
             _int(s.get("last_completed_collective")))
            for pg, s in sorted(status.items(), key=lambda kv: str(kv[0]))
            if isinstance(s, dict) and _text(pg) and len(str(pg)) < 20]


def config_groups(dump: dict) -> dict[str, tuple[str | None, list[int]]]:
    """{group name: (description, ranks)} from pg_config where it names a group and its ranks
    (NCCL fills it; gloo leaves one nameless entry, which is skipped)."""
    config = dump.get("pg_config")
    out = {}
    if not isinstance(config, dict):
        return out
    for key, spec in config.items():
        if not isinstance(spec, dict) or not _text(key):
            continue
        ranks = spec.get("ranks")
        if isinstance(ranks, str):
            try:
                ranks = json.loads(ranks)
            except ValueError:
                continue
        if isinstance(ranks, list) and ranks and all(_int(r) is not None for r in ranks):
            out[_text(key)] = (_text(spec.get("desc")), [int(r) for r in ranks])
    return out


def group_rows(per_rank: dict[int, dict]) -> list[tuple]:
    """fr_groups rows: each group's members from pg_config when a dump fills it, else the ranks
    whose dumps name the group (in an entry or in pg_status)."""
    named: dict[str, set[int]] = {}
    descs: dict[str, str] = {}
    configured: dict[str, tuple[str | None, list[int]]] = {}
    for rank, dump in sorted(per_rank.items()):
        for entry in dump["entries"]:
            if isinstance(entry, dict):
                pg_name, pg_desc = _group(entry)
                if pg_name:
                    named.setdefault(pg_name, set()).add(rank)
                    if pg_desc:
                        descs.setdefault(pg_name, pg_desc)
        for row in status_rows(rank, dump):
            if row[2]:
                named.setdefault(row[2], set()).add(rank)
        for pg, (desc, ranks) in config_groups(dump).items():
            configured.setdefault(pg, (desc, ranks))
            if desc:
                descs.setdefault(pg, desc)
    rows = []
    for pg in sorted(set(named) | set(configured), key=lambda n: (len(n), n)):
        if pg in configured:
            rows.append((pg, descs.get(pg), sorted(configured[pg][1]), "pg_config"))
        else:
            rows.append((pg, descs.get(pg), sorted(named[pg]), "inferred"))
    return rows


def dump_row(dump_file: DumpFile, dump: dict) -> tuple:
    return (dump_file.rank, str(dump_file.path), dump_file.size_bytes, _text(dump.get("version")),
            len(dump["entries"]), _text(dump.get("comm_lib_version")))


def _insert(con, table: str, rows: list[tuple], path: Path) -> None:
    """Rows into one of our tables, typed as the table's columns, through a Parquet file (one
    statement per row would cost minutes for a big job's dumps)."""
    if not rows:
        return
    import polars as pl

    columns = con.execute("SELECT column_name, data_type FROM information_schema.columns "
                          "WHERE table_name = ? ORDER BY ordinal_position", [table]).fetchall()
    kinds = {"BIGINT": pl.Int64, "INTEGER": pl.Int64, "VARCHAR": pl.Utf8, "BOOLEAN": pl.Boolean}
    frame = pl.DataFrame(rows, schema=[(name, kinds[kind]) for name, kind in columns], orient="row")
    folder = None
    try:
        with interrupts_held():  # (made and `folder` set at once: the finally removes it)
            folder = tempfile.mkdtemp(prefix="traceanalyze-fr-")
        file = os.path.join(folder, "rows.parquet")
        frame.write_parquet(file)
        con.execute(f"INSERT INTO {table} SELECT * FROM read_parquet(?)", [file])  # (our table names)
    except (duckdb.Error, pl.exceptions.PolarsError, OverflowError) as exc:
        raise TraceFormatError(f"a Flight Recorder dump with a value that does not fit {table} "
                               f"({' '.join(str(exc).split())[:160]})", str(path)) from None
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def insert_dumps(con, dumps: list[DumpFile]) -> None:
    """Read every dump (safely) and fill fr_dumps, fr_entries, fr_status and fr_groups."""
    if not dumps:
        return
    per_rank = {d.rank: read_dump(d.path) for d in dumps}
    files = {d.rank: d for d in dumps}
    entries, status = {}, {}
    for rank in sorted(per_rank):
        try:
            entries[rank] = entry_rows(rank, per_rank[rank])
            status[rank] = status_rows(rank, per_rank[rank])
        except RecursionError:  # (sizes nested thousands deep: no dump of torch's)
            raise TraceFormatError("not a readable Flight Recorder dump (values nested too deeply)",
                                   str(files[rank].path)) from None
    con.executemany("INSERT INTO fr_dumps VALUES (?, ?, ?, ?, ?, ?)",
                    [dump_row(files[r], per_rank[r]) for r in sorted(per_rank)])
    for rank in sorted(per_rank):
        _insert(con, "fr_entries", entries[rank], files[rank].path)
        _insert(con, "fr_status", status[rank], files[rank].path)
    groups = group_rows(per_rank)
    if groups:
        con.executemany("INSERT INTO fr_groups VALUES (?, ?, ?, ?)", groups)
