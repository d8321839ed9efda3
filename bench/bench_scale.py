"""Scale benchmark: synthetic worlds of 64, 256 and 1,024 ranks built from a real recorded run.

Each synthetic rank is a copy of a real rank of fixtures/ddp/input_straggler (a real 4-rank
gloo DDP run whose rank 2 waits for its input), its timestamps shifted by a random per-rank
clock offset (up to 0.5 ms, through baseTimeNanoseconds, which applies to every ts),
distributedInfo rewritten to its new rank and world size. The copies of ranks
0, 1 and 3 are the healthy ranks; exactly one synthetic rank, drawn at random (seeded), is a
copy of rank 2: the straggler. The benchmark checks that the analysis names that rank with
the cause `input` at every size.

    python bench/bench_scale.py [--sizes 64,256,1024] [--seed 7] [--main-checkout DIR] [--ray]

Per size: wall and CPU time and peak RSS (of the command and all its processes) of
  map     `traceanalyze load`            (parse every rank into shards + build trace.duckdb)
  reduce  `traceanalyze analyze --shards` (trace.duckdb from the shards, rules, summary, report)
  main    `traceanalyze DIR` of another checkout (--main-checkout: the single-database path)
and the shard size, summary.json / report.html sizes, seconds per rank.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "fixtures" / "ddp" / "input_straggler"
STRAGGLER_SOURCE_RANK = 2  # (what the recording injected: see fixtures/README.md)


def _real_ranks() -> dict[int, bytes]:
    """{rank: the uncompressed JSON text} of the recorded run."""
    out = {}
    for path in sorted(SOURCE.glob("rank*.json.gz")):
        text = gzip.decompress(path.read_bytes())
        out[int(RANK_IN_HEAD.search(text[:HEAD_BYTES]).group(2))] = text
    return out


HEAD_BYTES = 4096  # distributedInfo and baseTimeNanoseconds are written before the events
RANK_IN_HEAD = re.compile(rb'("distributedInfo": \{[^}]*?"rank": )(\d+)(, "world_size": )(\d+)')
BASE_IN_HEAD = re.compile(rb'("baseTimeNanoseconds": )(\d+)')


def _synthetic(text: bytes, rank: int, world: int, shift_ns: int) -> bytes:
    """The trace as rank `rank` of `world`, every timestamp shifted by `shift_ns` (a clock offset:
    baseTimeNanoseconds is added to every ts), edited in the head only, byte for byte otherwise."""
    head, body = text[:HEAD_BYTES], text[HEAD_BYTES:]
    head = RANK_IN_HEAD.sub(lambda m: m.group(1) + str(rank).encode() + m.group(3) + str(world).encode(), head, 1)
    head = BASE_IN_HEAD.sub(lambda m: m.group(1) + str(int(m.group(2)) + shift_ns).encode(), head, 1)
    return head + body


def make_world(n: int, seed: int, folder: Path) -> int:
    """Write n ranks into `folder`; returns the straggler's rank."""
    rng = random.Random(seed * 1_000_003 + n)
    real = _real_ranks()
    healthy = [r for r in sorted(real) if r != STRAGGLER_SOURCE_RANK]
    straggler = rng.randrange(n)
    folder.mkdir(parents=True)
    for rank in range(n):
        src = real[STRAGGLER_SOURCE_RANK] if rank == straggler else real[healthy[rank % len(healthy)]]
        shift_ns = rng.randrange(-500_000, 500_000)  # this host's clock offset, up to 0.5 ms
        data = gzip.compress(_synthetic(src, rank, n, shift_ns), compresslevel=1)
        (folder / f"rank{rank}.pt.trace.json.gz").write_bytes(data)
    return straggler


def timed(cmd: list[str], env: dict | None = None) -> dict:
    """Run a command; wall time, CPU time and peak RSS summed over the command and every
    process it starts (pool workers, Ray workers it owns), sampled every 0.1 s with psutil."""
    import psutil

    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env or os.environ.copy())
    root = psutil.Process(proc.pid)
    cpu: dict[int, float] = {}
    peak = 0
    while proc.poll() is None:
        total = 0
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            tree = []
        for p in tree:
            try:
                total += p.memory_info().rss
                times = p.cpu_times()
                cpu[p.pid] = times.user + times.system
            except psutil.Error:
                pass
        peak = max(peak, total)
        time.sleep(0.1)
    stderr = proc.stderr.read()
    wall = time.perf_counter() - t
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed: {stderr[-2000:]}")
    return {"rc": proc.returncode, "wall_s": wall, "cpu_s": sum(cpu.values()), "peak_rss_mb": peak / 2**20}


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def straggler_named(summary: dict, rank: int) -> str | None:
    for f in summary["findings"]:
        if f["rule"] == "collective-straggler" and f["ranks"] == [rank]:
            return f["evidence"].get("cause")
    return None


def bench_size(n: int, seed: int, work: Path, main_checkout: Path | None, use_ray: bool) -> dict:
    traces = work / f"world{n}"
    t = time.perf_counter()
    straggler = make_world(n, seed, traces)
    row = {"ranks": n, "straggler": straggler, "make_s": time.perf_counter() - t,
           "trace_mb": folder_bytes(traces) / 1e6}
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    ta = [sys.executable, "-m", "traceanalyze"]
    out = work / f"out{n}"
    row["map"] = timed([*ta, "load", str(traces), "--db", str(out / "trace.duckdb"), "-q"], env)
    row["shard_mb"] = folder_bytes(out / "trace.shards") / 1e6
    row["reduce"] = timed([*ta, "analyze", "--shards", str(out / "trace.shards"), "--out", str(out), "-q"], env)
    summary = json.loads((out / "summary.json").read_text())
    row["cause"] = straggler_named(summary, straggler)
    row["summary_mb"] = (out / "summary.json").stat().st_size / 1e6
    row["report_mb"] = (out / "report.html").stat().st_size / 1e6
    if use_ray:
        ray_out = work / f"ray{n}"
        row["ray"] = timed([*ta, "load", str(traces), "--db", str(ray_out / "trace.duckdb"), "-q",
                            "--executor", "ray"], env)
    if main_checkout is not None:
        main_out = work / f"main{n}"
        main_env = dict(os.environ, PYTHONPATH=str(main_checkout))
        row["main"] = timed([*ta, str(traces), "--out", str(main_out), "-q"], main_env)
        row["main_cause"] = straggler_named(json.loads((main_out / "summary.json").read_text()), straggler)
    shutil.rmtree(traces)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="64,256,1024")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 1000)
    parser.add_argument("--main-checkout", type=Path, default=None,
                        help="a checkout of the single-database version to compare with")
    parser.add_argument("--ray", action="store_true", help="also map with --executor ray (local cluster)")
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-scale-"))
    rows = []
    for n in [int(s) for s in args.sizes.split(",")]:
        row = bench_size(n, args.seed, work, args.main_checkout, args.ray)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items()}, default=str), flush=True)
    print(f"\nseed {args.seed}; {os.cpu_count()} cores; peak RSS: summed over every process of the command\n")
    print("| ranks | map wall s | map CPU s | map peak RSS MB | reduce wall s | reduce peak RSS MB | shards MB |"
          " s/rank (map+reduce) | summary.json MB | report.html MB | straggler named (cause) |"
          " main: wall s / peak RSS MB |" + (" ray map wall s |" if args.ray else ""))
    print("|" + "---|" * (12 + (1 if args.ray else 0)))
    for r in rows:
        m, red = r["map"], r["reduce"]
        main_cell = f"{r['main']['wall_s']:.1f} / {r['main']['peak_rss_mb']:.0f}" if "main" in r else "-"
        print(f"| {r['ranks']} | {m['wall_s']:.1f} | {m['cpu_s']:.1f} | {m['peak_rss_mb']:.0f} | "
              f"{red['wall_s']:.1f} | {red['peak_rss_mb']:.0f} | {r['shard_mb']:.0f} | "
              f"{(m['wall_s'] + red['wall_s']) / r['ranks']:.3f} | {r['summary_mb']:.2f} | {r['report_mb']:.2f} | "
              f"rank {r['straggler']} ({r['cause']}) | {main_cell} |"
              + (f" {r['ray']['wall_s']:.1f} |" if "ray" in r else ""))


if __name__ == "__main__":
    main()
