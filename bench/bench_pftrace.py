#!/usr/bin/env python3
"""Perfetto protobuf reader speed vs the JSON reader, on the same events.

    python bench/bench_pftrace.py [--source fixtures/real/kineto-resnet50-nw0/worker0....json.gz]
                                  [--replicas 8] [--repeat 3]

Writes the JSON trace uncompressed (`--replicas` copies of its events end to end, ts shifted by
the trace's span per copy, so the file is big enough to time), converts it with
tests/pftrace_convert.py (Kineto's Perfetto layout), then times `read_rank` (the native reader
streamed into an in-memory DuckDB's raw_events, B/E pairs and notes included) on each file.
Prints, per format, seconds and CPU seconds (best of `--repeat`) and MB/s counted in
JSON-equivalent bytes (the uncompressed JSON's size, for both files), and the ratio of the
protobuf's to the JSON's MB per CPU second (CPU time: the machine may be shared).
"""

from __future__ import annotations

import argparse
import gzip
import json
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


def replicate(src: Path, dst: Path, replicas: int) -> None:
    raw = src.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = doc["traceEvents"]
    times = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(times) - min(times) + 1000
    out = []
    for r in range(replicas):
        for e in events:
            e = dict(e)
            if r and isinstance(e.get("ts"), (int, float)):
                if e.get("ph") == "M":
                    continue
                e["ts"] = e["ts"] + r * span
            out.append(e)
    doc["traceEvents"] = out
    dst.write_text(json.dumps(doc))


def best_read(path: Path, repeat: int):
    best = None
    for _ in range(repeat):
        con = duckdb.connect()
        tracedb.create_schema(con)
        t0, c0 = time.perf_counter(), time.process_time()
        read = read_rank(con, identify(path, only_file=True))
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        best = (seconds, cpu, read) if best is None or cpu < best[1] else best
        con.close()
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, default=DEFAULT)
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        js, pf = Path(tmp) / "rank0.json", Path(tmp) / "rank0.pftrace"
        replicate(a.source, js, a.replicas)
        pftrace_convert.convert_file(js, pf)
        json_mb = js.stat().st_size / 1e6
        results = {fmt: best_read(path, a.repeat) for fmt, path in (("json", js), ("pftrace", pf))}
        pf_mb = pf.stat().st_size / 1e6
    print(f"{a.source.name} x{a.replicas}: {json_mb:.1f} MB of JSON, {pf_mb:.1f} MB as protobuf")
    for fmt, (seconds, cpu, read) in results.items():
        print(f"  {fmt:8} {read.events:,} events: {seconds:.2f} s wall, {cpu:.2f} CPU s = "
              f"{json_mb / seconds:.0f} MB/s, {json_mb / cpu:.0f} MB per CPU s (JSON-equivalent)")
    ratio = results["json"][1] / results["pftrace"][1]
    print(f"  protobuf / JSON, MB per CPU s: {ratio:.2f}x")


if __name__ == "__main__":
    main()
