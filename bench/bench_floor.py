#!/usr/bin/env python3
"""How fast can the loader's stages go on this machine? Lower bounds for `traceanalyze load`.

The end-to-end benchmark (bench_load.py) times the whole load. This one times its first two
stages alone, on the same file, to show how much of the budget they take before anything
is stored or derived:

1. split: split.py copying the events into part files (one thread per file, as in a load);
2. parse: DuckDB's read_json of those parts, with the loader's typed columns, into an
   in-memory temporary table: nothing written to a database file, no derived table;
3. parse + store: kineto.insert_events into `raw_events` of a database file, as a load does;
4. polars: polars' read_ndjson of the same events (NDJSON copies of the parts, made
   beforehand and not timed) with an equivalent schema, the other columnar JSON reader
   at hand, for comparison with (2).

Each stage runs in a fresh process (page cache warm), `--repeat` times; the median is
printed. The bound at the end assumes split and parse overlap perfectly on every core:
bytes / ((split CPU s + parse CPU s) / cores).

    python bench/bench_floor.py                      # the 500 MB trace bench_load.py builds
    python bench/bench_floor.py --trace FILE.json --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
parts = sorted(glob.glob(str(work / "parts" / "*.json")))
def timed(fn):
    t, c = time.perf_counter(), os.times()
    fn()
    c2 = os.times()
    print(json.dumps({"seconds": time.perf_counter() - t,
                      "cpu": (c2.user - c.user) + (c2.system - c.system)}))
"""
STAGES = {
    "split": """
from traceanalyze.load.split import split_trace
out = work / "split-out"
out.mkdir()
timed(lambda: split_trace(trace, out))
""",
    "parse": """
import duckdb
from traceanalyze.load import kineto
con = duckdb.connect()
columns = kineto.typed_read_json_columns()
columns[kineto.TS_PREFIX_KEY] = "BIGINT"
timed(lambda: con.execute("CREATE TEMP TABLE t AS SELECT * FROM read_json($f, format = 'array', columns = $c)",
                          {"f": parts, "c": columns}))
""",
    "parse + store": """
import duckdb
from traceanalyze import db as tracedb
from traceanalyze.load import kineto
con = duckdb.connect(str(work / "store.duckdb"))
tracedb.create_schema(con)
def run():
    kineto.insert_events(con, [(0, p, 0) for p in parts], typed=True)
    con.execute("CHECKPOINT")
timed(run)
""",
    "polars read_ndjson": """
import polars as pl
from traceanalyze.load import kineto
kind = {"BIGINT": pl.Int64, "INTEGER": pl.Int64}
args = pl.Struct({key: kind.get(sqltype, pl.Utf8) for key, sqltype in kineto._arg_keys()})
schema = {**{k: pl.Utf8 for k in kineto.EVENT_COLUMNS}, "ts": pl.Float64, "dur": pl.Float64,
          kineto.TS_PREFIX_KEY: pl.Int64, "args": args}
ndjson = sorted(glob.glob(str(work / "ndjson" / "*.ndjson")))
timed(lambda: pl.concat([pl.scan_ndjson(p, schema=schema) for p in ndjson]).collect())
""",
}


def _run_stage(name: str, trace: Path, work: Path) -> dict:
    code = PRELUDE + STAGES[name]
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    for leftover in ("split-out", "store.duckdb", "store.duckdb.wal"):
        path = work / leftover
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    out = subprocess.run([sys.executable, "-c", code, str(trace), str(work)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _prepare(trace: Path, work: Path) -> int:
    """Part files (as a load writes them) and their NDJSON copies; returns the events' bytes."""
    sys.path.insert(0, str(REPO))
    from traceanalyze.load.split import split_trace

    (work / "parts").mkdir()
    (work / "ndjson").mkdir()
    split = split_trace(trace, work / "parts")
    for part in split.parts:
        events = json.loads(part.read_bytes())
        with open(work / "ndjson" / (part.stem + ".ndjson"), "w") as fh:
            fh.writelines(json.dumps(e) + "\n" for e in events)
    return split.events_bytes


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
        events_mb = _prepare(args.trace, work) / 1e6
        rows = {}
        for name in STAGES:
            runs = [_run_stage(name, args.trace, work) for _ in range(args.repeat)]
            rows[name] = {k: statistics.median(r[k] for r in runs) for k in ("seconds", "cpu")}
    print(f"{args.trace.name}: {events_mb:,.0f} MB of events, {cores} cores, median of {args.repeat}\n")
    print("| stage | seconds | MB/s | CPU s | MB per CPU s |")
    print("|---|---:|---:|---:|---:|")
    for name, r in rows.items():
        print(f"| {name} | {r['seconds']:.2f} | {events_mb / r['seconds']:,.0f} | {r['cpu']:.2f} | "
              f"{events_mb / r['cpu']:,.0f} |")
    bound = events_mb / ((rows["split"]["cpu"] + rows["parse"]["cpu"]) / cores)
    print(f"\nsplit + parse overlapped perfectly on {cores} cores, nothing stored: at most {bound:,.0f} MB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
