"""Order-independent checksums of every table of a trace database, to compare two loaders.

Each table gives (rows, digest): the digest is the sum, modulo 2**128, of the SHA-256 of every
row's repr (exact ints, strings as stored), so row order does not count but every value does.
What depends on where the repository lies is left out: the repository's folder in strings reads
`<root>`, and file modification times (`*_mtime_ns`) are not hashed. `load_meta` (the
fingerprint of paths and times) is not compared.

    python tests/table_checksums.py > tests/data/table_checksums.json

first wrote the reference from the loader before the native reader wrote the raw_events shard
itself (commit 55c1711: the reader's Arrow stream inserted into a private DuckDB database); the
Parquet-writing loader gave the same checksums for every table of all 40 folders (at its merge,
eff9b03, against the tables of the commit before it). Tables changed on purpose since (process
groups, code regions, efficiency: SCHEMA_VERSION 11) were written again by the same command, so
the file pins today's tables row for row against any later loader change. SCHEMA_VERSION 12
added pipeline_stages, group_lateness, all_to_all_calls, all_to_all_volumes and
collective_exposure and the GPU idle-gap cause comm_wait, and the recorded multi-group
(fixtures/parallel) and CUDA (fixtures/cuda) folders joined the corpus. SCHEMA_VERSION 14 (waits
by time: a wait inside a range is no longer that range's phase, `step_phases.idle_ns`,
`phase_intervals.idle`; pipelines from the send / recv traffic: `pipeline_stages.pipeline`,
`pipeline_ranks`, `source`; `step_lateness` names where the lateness starts, `start_late_ns`;
process groups' dimensions from decisive operations first) changed phase_intervals,
step_phases and every table built on them, and was written again by the same command.
SCHEMA_VERSION 15 added `cpu_ops.self_ns` and `annotations.self_ns` (built by the native reader;
step_regions reads them): every table of every folder hashed without those two columns gave the
previous reference's checksums, and the file was then written again by the same command.
SCHEMA_VERSION 17 added `top_host_ops` (the critical path's top-level host ops, built by the
reader): every other table of every folder, critical_path included, gave the previous
reference's checksums, and the file was then written again by the same command.
SCHEMA_VERSION 18 added `kernels.launch_end_ns` (the critical path's gathering joined the runtime
table for it): every table of every folder, kernels hashed without that column and
critical_path included, gave the previous reference's checksums, and the file was then written
again by the same command. fixtures/parallel/hsdp3x2_input_straggler joined the corpus with the
groups' balance by squared deviations (every other folder's checksums unchanged by it): its entry
alone was added, from `load_checksums` of that folder.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Callable

import duckdb

ROOT = Path(__file__).resolve().parents[1]
SKIPPED_TABLES = {"load_meta"}


def _normalized(value, root: str):
    if isinstance(value, str):
        return value.replace(root, "<root>")
    if isinstance(value, list):
        return [_normalized(v, root) for v in value]
    if isinstance(value, dict):
        return {k: _normalized(v, root) for k, v in value.items()}
    return value


def table_checksums(db_path: Path, root: Path = ROOT) -> dict[str, list]:
    """{table: [rows, hex digest]} for every table and view of the database."""
    out = {}
    # a root that repr() writes as it is (no quote, backslash or unprintable character): the
    # root replaced in a row's repr is the repr of the row with the root replaced in its strings
    # (the faster way, for every row of every table of every fixture)
    plain = repr(str(root)) == f"'{root}'" and str(root).isprintable()
    with duckdb.connect(str(db_path), read_only=True) as con:
        tables = [t for (t,) in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' ORDER BY 1").fetchall()
            if t not in SKIPPED_TABLES]
        for table in tables:
            cols = [c for (c,) in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' AND table_name = ?"
                " ORDER BY ordinal_position", [table]).fetchall() if not c.endswith("_mtime_ns")]
            select = ", ".join(f'"{c}"' for c in cols)
            total, rows = 0, 0
            for row in con.execute(f'SELECT {select} FROM "{table}"').fetchall():
                text = (repr(row).replace(str(root), "<root>") if plain else
                        repr(tuple(_normalized(v, str(root)) for v in row))).encode()
                total += int.from_bytes(hashlib.sha256(text).digest()[:16], "big")
                rows += 1
            out[table] = [rows, f"{total % (1 << 128):032x}"]
    return out


def corpus() -> list[Path]:
    """Every fixture folder holding traces: fixtures/{ddp,real,parallel,cuda}/*."""
    dirs = []
    for parent in (ROOT / "fixtures" / name for name in ("ddp", "real", "parallel", "cuda")):
        dirs += sorted(p for p in parent.iterdir() if p.is_dir() and any(
            q.name.endswith((".json", ".json.gz")) and q.name != "expected.json" for q in p.rglob("*")))
    return dirs


def load_checksums(folder: Path, db_of: Callable[[Path], Path] | None = None) -> dict:
    """The checksums of `folder` loaded into a fresh database (one map at a time), or the load's
    one-line error. `db_of(folder)`: where the folder is loaded already that way (the tests'
    shared fixture databases), instead of a fresh load."""
    from traceanalyze.errors import TraceanalyzeError
    from traceanalyze.load import load_trace_dir

    with tempfile.TemporaryDirectory() as tmp:
        try:
            if db_of is not None:
                db = db_of(folder)
            else:
                db = Path(tmp) / "trace.duckdb"
                load_trace_dir(folder, db, workers=1)
        except TraceanalyzeError as exc:
            return {"error": _normalized(str(exc), str(ROOT))}
        return table_checksums(db)


if __name__ == "__main__":
    json.dump({str(d.relative_to(ROOT)): load_checksums(d) for d in corpus()}, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
