#!/usr/bin/env python3
"""How fast can the loader's stages go on this machine? Lower bounds for `traceanalyze load`.

The end-to-end benchmark (bench_load.py) times the whole load. This one times its stages
alone, on the same file, to show where the time goes:

1. read: the file's bytes, block by block (Python reading, the floor of any reader);
2. parse (1 thread, 2 threads): the native reader (scan + decode into Arrow columns),
   nothing handed to DuckDB;
3. parse + store: read_rank into `raw_events` of a database file (the map before the reader
   wrote Parquet itself);
4. tables: the SQL-built tables (db/tables/*.sql: the cross-rank ones, on one rank) from that
   `raw_events` (the reader's per-rank tables are put in first, untimed);
5. parse + write Parquet: the native reader writing raw_events.parquet and its one-pass tables,
   as the map does now;
6. per-rank tables from Parquet: the reader's derived tables (native/src/derived) from those
   files, as the map builds them.

Each stage runs in a fresh process (page cache warm), `--repeat` times; the median is
printed.

    python bench/bench_floor.py                      # the 500 MB trace bench_load.py builds
    python bench/bench_floor.py --trace FILE.json --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = Path("/tmp/traceanalyze-bench/500MB/rank-0.bench.pt.trace.json")

# each stage: a Python snippet run in a fresh process; argv[1] = trace, argv[2] = work dir.
# It prints one JSON line {"seconds": wall, "cpu": user+sys of the process for the stage}.
PRELUDE = """
import json, os, sys, time, glob
from pathlib import Path
trace, work = Path(sys.argv[1]), Path(sys.argv[2])
def timed(fn):
    t, c = time.perf_counter(), os.times()
    fn()
    c2 = os.times()
    print(json.dumps({"seconds": time.perf_counter() - t,
                      "cpu": (c2.user - c.user) + (c2.system - c.system)}))
"""
STAGES = {
    "read": """
def run():
    with open(trace, "rb") as fh:
        while fh.read(8 << 20):
            pass
timed(run)
""",
    "parse (1 thread)": """
from traceanalyze import _native
timed(lambda: _native.TraceReader(str(trace), threads=1).result())
""",
    "parse (2 threads)": """
from traceanalyze import _native
timed(lambda: _native.TraceReader(str(trace), threads=2).result())
""",
    "parse + store": """
import duckdb
from traceanalyze import db as tracedb
from traceanalyze.load.discover import TraceFile
from traceanalyze.load.read import read_rank
con = duckdb.connect(str(work / "store.duckdb"))
tracedb.create_schema(con)
tf = TraceFile(trace, 0, "file name", None, None, trace.stat().st_size, trace.stat().st_mtime_ns)
def run():
    read_rank(con, tf)
    con.execute("CHECKPOINT")
timed(run)
con.close()
""",
    "tables": """
import duckdb
from traceanalyze import _native
from traceanalyze import db as tracedb
from traceanalyze.load.read import NATIVE_TABLES
con = duckdb.connect(str(work / "store.duckdb"))
tracedb.create_macros(con)
(work / "store_tables").mkdir(exist_ok=True)
con.execute(f"COPY raw_events TO '{work / 'store_tables' / 'raw_events.parquet'}' (FORMAT parquet)")
_native.rank_tables_of_parquet(str(work / "store_tables" / "raw_events.parquet"), str(work / "store_tables"), 0,
                               kernel_classes=tracedb.kernel_classes())
from traceanalyze.load.read import DERIVED_TABLES, _derived_params
_native.derive_rank_tables(str(work / "store_tables"), str(work / "store_tables"), 0, [], _derived_params())
for table in (*NATIVE_TABLES, *DERIVED_TABLES):
    con.execute(f"DELETE FROM {table}")
    con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM read_parquet('{work / 'store_tables' / table}.parquet')")
timed(lambda: tracedb.build_tables(con))
""",
    "parse + write Parquet": """
from traceanalyze import _native
from traceanalyze import db as tracedb
classes = tracedb.kernel_classes()
timed(lambda: _native.write_raw_events_parquet(str(trace), str(work / "raw_events.parquet"), 0,
                                               tables_dir=str(work), kernel_classes=classes))
""",
    "per-rank tables from Parquet": """
from traceanalyze import _native
from traceanalyze.load.read import _derived_params
out = work / "derived"
out.mkdir(exist_ok=True)
timed(lambda: _native.derive_rank_tables(str(work), str(out), 0, [], _derived_params()))
""",
}


def _run_stage(name: str, trace: Path, work: Path) -> dict:
    code = PRELUDE + STAGES[name]
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    if name == "parse + store":
        for leftover in ("store.duckdb", "store.duckdb.wal"):
            (work / leftover).unlink(missing_ok=True)
    out = subprocess.run([sys.executable, "-c", code, str(trace), str(work)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE,
                    help="an uncompressed trace (default: bench_load.py's 500 MB one; build it first)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    if not args.trace.is_file():
        ap.error(f"{args.trace}: no such file (python bench/bench_load.py --build-only builds it)")
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="traceanalyze-floor-") as tmp:
        work = Path(tmp)
        events_mb = args.trace.stat().st_size / 1e6
        rows = {}
        for name in STAGES:
            runs = [_run_stage(name, args.trace, work) for _ in range(args.repeat)]
            rows[name] = {k: statistics.median(r[k] for r in runs) for k in ("seconds", "cpu")}
    print(f"{args.trace.name}: {events_mb:,.0f} MB of JSON, {cores} cores, median of {args.repeat}\n")
    print("| stage | seconds | MB/s | CPU s | MB per CPU s |")
    print("|---|---:|---:|---:|---:|")
    def rate(seconds: float) -> str:  # (a small trace's stage may take no measurable time)
        return f"{events_mb / seconds:,.0f}" if seconds > 0 else "—"

    for name, r in rows.items():
        print(f"| {name} | {r['seconds']:.2f} | {rate(r['seconds'])} | {r['cpu']:.2f} | {rate(r['cpu'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
