"""Loading on a file system that is slow to sync (a network one: NFS, Lustre, a cloud disk).

Each fsync / fdatasync of the load's process is made to wait --sync-ms (bench/sync_shim.c,
loaded with LD_PRELOAD; built here with the C compiler), and counted. Runs `traceanalyze load
DIR --db FILE --force` with this checkout and, side by side, alternated, an earlier one:

    python bench/bench_sync.py /tmp/traceanalyze-bench/200MB --previous-checkout DIR --sync-ms 5

prints, per run: wall seconds, the syncs (all, and of the database's log), and the same without
the delay once per checkout (what the syncs cost is the difference). The delay is an
assumption about the file system, not a measurement of one: read the counts first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def build_shim(folder: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        sys.exit("error: bench_sync.py needs a C compiler (cc) for bench/sync_shim.c")
    out = folder / "sync_shim.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(HERE / "sync_shim.c"), "-ldl"], check=True)
    return out


def run(checkout: Path, trace_dir: Path, work: Path, shim: Path, delay_us: int) -> tuple[float, int, int]:
    db, log = work / "trace.duckdb", work / "syncs.log"
    log.unlink(missing_ok=True)
    env = {**os.environ, "LD_PRELOAD": str(shim), "SYNC_LOG": str(log), "PYTHONPATH": str(checkout)}
    if delay_us:
        env["SYNC_DELAY_US"] = str(delay_us)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "traceanalyze", "load", str(trace_dir), "--db", str(db), "--force"],
                          cwd=checkout, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if proc.returncode != 0:
        sys.exit(f"error: {checkout}: load failed ({proc.stderr.strip().splitlines()[-1:]})")
    synced = log.read_text().splitlines() if log.exists() else []
    return seconds, len(synced), sum(p.endswith(".wal") for p in synced)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace_dir", type=Path)
    ap.add_argument("--previous-checkout", type=Path, help="an earlier checkout (with its native extension built)")
    ap.add_argument("--sync-ms", type=float, default=5.0)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    checkouts = [("traceanalyze", HERE.parent)]
    if args.previous_checkout:
        checkouts.append(("previous", args.previous_checkout.resolve()))
    with tempfile.TemporaryDirectory(prefix="bench-sync-") as tmp:
        work = Path(tmp)
        shim = build_shim(work)
        delay_us = int(args.sync_ms * 1000)
        print(f"| tool | sync delay | seconds | syncs | of the database's log |\n|---|---:|---:|---:|---:|")
        for label, checkout in checkouts:
            seconds, syncs, wal = run(checkout, args.trace_dir, work, shim, 0)
            print(f"| {label} | 0 ms | {seconds:.2f} | {syncs} | {wal} |", flush=True)
        for _ in range(args.repeat):
            for label, checkout in checkouts:
                seconds, syncs, wal = run(checkout, args.trace_dir, work, shim, delay_us)
                print(f"| {label} | {args.sync_ms:g} ms | {seconds:.2f} | {syncs} | {wal} |", flush=True)


if __name__ == "__main__":
    main()
