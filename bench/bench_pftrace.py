#!/usr/bin/env python3
"""Perfetto protobuf reader speed: a real Kineto trace, converted to .pftrace, read into raw_events.

    python bench/bench_pftrace.py [--source fixtures/real/kineto-resnet50-nw0/worker0....json.gz] [--repeat 3]

Converts the JSON trace with tests/pftrace_convert.py (Kineto's Perfetto layout), then times
`read_pftrace` alone (packets walked and decoded, rows staged through Parquet, inserted into an
in-memory DuckDB) and prints MB/s of protobuf bytes and of the equivalent uncompressed JSON,
and events/s. The best of `--repeat` runs is kept, with its CPU time (the machine may be shared).
"""

from __future__ import annotations

import argparse
import gzip
import sys
import tempfile
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import pftrace_convert

from traceanalyze import db as tracedb
from traceanalyze.load.discover import identify
from traceanalyze.load.read import read_rank

DEFAULT = ROOT / "fixtures/real/kineto-resnet50-nw0/worker0.1623143089861.pt.trace.json.gz"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, default=DEFAULT)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    raw = a.source.read_bytes()
    json_bytes = len(gzip.decompress(raw)) if raw[:2] == b"\x1f\x8b" else len(raw)
    with tempfile.TemporaryDirectory() as tmp:
        pf = Path(tmp) / "rank0.pftrace"
        pftrace_convert.convert_file(a.source, pf)
        best = None
        for _ in range(a.repeat):
            con = duckdb.connect()
            tracedb.create_schema(con)
            t0, c0 = time.perf_counter(), time.process_time()
            read = read_rank(con, identify(pf, only_file=True))
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            best = (seconds, cpu) if best is None else min(best, (seconds, cpu))
            con.close()
        size = pf.stat().st_size
    seconds, cpu = best
    print(f"{a.source.name}: {size / 1e6:.1f} MB protobuf ({json_bytes / 1e6:.1f} MB as JSON), "
          f"{read.events:,} events: {seconds:.2f} s wall, {cpu:.2f} CPU s = {size / 1e6 / seconds:.1f} MB/s "
          f"protobuf ({size / 1e6 / cpu:.1f} per CPU s), {json_bytes / 1e6 / seconds:.1f} MB/s JSON-equivalent, "
          f"{read.events / seconds:,.0f} events/s")


if __name__ == "__main__":
    main()
