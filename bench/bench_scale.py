"""Scale benchmark: synthetic worlds of 64, 256 and 1,024 ranks built from a real recorded run.

Each synthetic rank is a copy of a real rank of fixtures/ddp/input_straggler (a real 4-rank
gloo DDP run whose rank 2 waits for its input), its timestamps shifted by a random per-rank
clock offset (up to 0.5 ms, through baseTimeNanoseconds, which applies to every ts),
distributedInfo rewritten to its new rank and world size. The copies of ranks
0, 1 and 3 are the healthy ranks; exactly one synthetic rank, drawn at random (seeded), is a
copy of rank 2: the straggler. The benchmark checks that the analysis names that rank with
the cause `input` at every size.

    python bench/bench_scale.py [--sizes 64,256,1024] [--seed 7] [--main-checkout DIR] [--ray]
                                [--hta-python /tmp/hta-venv/bin/python [--hta-sizes 64]]

Per size: wall and CPU time and peak RSS (of the command and all its processes) of
  map     `traceanalyze load`            (parse every rank into shards + build trace.duckdb)
  reduce  `traceanalyze analyze --shards` (trace.duckdb from the shards, rules, summary, report)
  main    `traceanalyze DIR` of another checkout (--main-checkout: the single-database path)
  ray     `traceanalyze load --executor ray` (--ray: a local Ray cluster started by the command)
  hta     HolisticTraceAnalysis: `TraceAnalysis(trace_dir=DIR)` (parse every rank and align
          them), in its own venv (--hta-python), under a time cap and a memory cap: a run that
          passes one is stopped and recorded as such
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


def timed(cmd: list[str], env: dict | None = None, limit_s: float | None = None,
          limit_rss_mb: float | None = None, cwd: Path = ROOT) -> dict:
    """Run a command; wall time, CPU time and peak RSS summed over the command and every
    process it starts (pool workers, Ray workers it owns), sampled every 0.1 s with psutil.
    With a limit, a command that passes it is killed (with its processes) and its "status" says
    which limit ("timeout" / "memory"); otherwise "ok"."""
    import psutil

    load_before = os.getloadavg()[0]
    t = time.perf_counter()
    # (`python -m` puts the working folder first on sys.path: run in the checkout measured)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env or os.environ.copy(), cwd=cwd)
    root = psutil.Process(proc.pid)
    cpu: dict[int, float] = {}
    peak = 0
    status = "ok"
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
        if status == "ok" and limit_s is not None and time.perf_counter() - t > limit_s:
            status = "timeout"
        if status == "ok" and limit_rss_mb is not None and total / 2**20 > limit_rss_mb:
            status = "memory"
        if status != "ok":
            for p in reversed(tree):
                try:
                    p.kill()
                except psutil.Error:
                    pass
        time.sleep(0.1)
    stderr = proc.stderr.read()
    wall = time.perf_counter() - t
    if status == "ok" and proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed: {stderr[-2000:]}")
    return {"rc": proc.returncode, "status": status, "stderr_tail": stderr[-500:],
            "wall_s": wall, "cpu_s": sum(cpu.values()), "peak_rss_mb": peak / 2**20,
            "load_avg": (load_before, os.getloadavg()[0])}  # 1-minute load average before / after


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def ranks_loaded(db: Path) -> int:
    """Ranks in a database (a rank whose map failed is not: a Ray task whose node died...)."""
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute("SELECT count(*) FROM ranks").fetchone()[0]


def straggler_named(summary: dict, rank: int) -> str | None:
    for f in summary["findings"]:
        if f["rule"] == "collective-straggler" and f["ranks"] == [rank]:
            return f["evidence"].get("cause")
    return None


HTA_SNIPPET = r"""
import logging, sys, time
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
ranks = analyzer.t.get_ranks()
print("BENCH ranks", len(ranks), "events", sum(len(analyzer.t.get_trace(r)) for r in ranks), file=sys.stderr)
"""


def hta(traces: Path, python: str, limit_s: float, limit_rss_mb: float) -> dict:
    """HolisticTraceAnalysis parsing the whole world (its own process pool), capped."""
    return timed([python, "-c", HTA_SNIPPET, str(traces)], dict(os.environ), limit_s, limit_rss_mb)


def hta_cell(r: dict) -> str:
    if r["status"] == "timeout":
        return f"did not finish in {r['wall_s']:.0f} s (stopped; {r['cpu_s']:.0f} CPU s, {r['peak_rss_mb']:.0f} MB by then)"
    if r["status"] == "memory":
        return f"stopped at {r['peak_rss_mb']:.0f} MB (memory cap) after {r['wall_s']:.0f} s"
    if r["rc"] != 0:
        return f"failed: {' '.join(r['stderr_tail'].split())[-120:]}"
    return _trio(r)


def bench_size(n: int, seed: int, work: Path, main_checkout: Path | None, use_ray: bool,
               hta_args: tuple | None = None) -> dict:
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
        row["ray"]["ranks_loaded"] = ranks_loaded(ray_out / "trace.duckdb")
    if main_checkout is not None:
        main_out = work / f"main{n}"
        main_env = dict(os.environ, PYTHONPATH=str(main_checkout))
        row["main"] = timed([*ta, str(traces), "--out", str(main_out), "-q"], main_env, cwd=main_checkout)
        row["main_cause"] = straggler_named(json.loads((main_out / "summary.json").read_text()), straggler)
    if hta_args is not None:
        row["hta"] = hta(traces, *hta_args)
    shutil.rmtree(traces)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="64,256,1024")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 1000)
    parser.add_argument("--main-checkout", type=Path, default=None,
                        help="a checkout of the single-database version to compare with")
    parser.add_argument("--ray", action="store_true", help="also map with --executor ray (local cluster)")
    parser.add_argument("--hta-python", default=None,
                        help="python of a venv with HolisticTraceAnalysis: also time it (on --hta-sizes)")
    parser.add_argument("--hta-sizes", default="64", help="world sizes HTA runs on (it needs ~5x the JSON in RAM)")
    parser.add_argument("--hta-limit-s", type=float, default=1800, help="stop HTA after this many seconds")
    parser.add_argument("--hta-limit-rss-mb", type=float, default=12_000, help="stop HTA past this summed RSS")
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--table-from", type=Path, nargs="+", default=None, metavar="LOG",
                        help="print the table of the rows (JSON lines) stored in these outputs of earlier runs")
    args = parser.parse_args()
    if args.table_from:
        rows = [json.loads(line) for log in args.table_from for line in log.read_text().splitlines()
                if line.startswith("{")]
        print(table(sorted(rows, key=lambda r: r["ranks"])))
        return
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-scale-"))
    rows = []
    for n in [int(s) for s in args.sizes.split(",")]:
        hta_args = (args.hta_python, args.hta_limit_s, args.hta_limit_rss_mb) \
            if args.hta_python and str(n) in args.hta_sizes.split(",") else None
        row = bench_size(n, args.seed, work, args.main_checkout, args.ray, hta_args)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items()}, default=str), flush=True)
    print(f"\nseed {args.seed}; {os.cpu_count()} cores; peak RSS: summed over every process of the command\n")
    print(table(rows))


def _trio(r: dict | None, ranks: int | None = None) -> str:
    if r is None:
        return "not measured"
    cell = f"{r['wall_s']:,.1f} / {r['cpu_s']:,.1f} / {r['peak_rss_mb']:,.0f}"
    if ranks is not None and r.get("ranks_loaded", ranks) != ranks:
        cell += f" (only {r['ranks_loaded']} of {ranks} ranks mapped)"
    return cell


def table(rows: list[dict]) -> str:
    """The benchmarks page's table (docs/benchmarks.md; wall s / CPU s / peak RSS MB per command)."""
    lines = ["| ranks | map (`load`) wall s / CPU s / peak RSS MB | reduce (`analyze --shards`) wall s / CPU s /"
             " peak RSS MB | shards MB | CPU s per rank | summary.json / report.html MB | straggler named (cause) |"
             " single database (`main`): wall s / CPU s / peak RSS MB | Ray map: wall s / CPU s / peak RSS MB |"
             " HTA `TraceAnalysis`: wall s / CPU s / peak RSS MB | load avg (1 min) during map |",
             "|---:|---|---|---:|---:|---|---|---|---|---|---|"]
    for r in rows:
        m, red = r["map"], r["reduce"]
        lines.append(
            f"| {r['ranks']:,} | {_trio(m)} | {_trio(red)} | {r['shard_mb']:.0f} | "
            f"{(m['cpu_s'] + red['cpu_s']) / r['ranks']:.2f} | {r['summary_mb']:.2f} / {r['report_mb']:.2f} | "
            f"rank {r['straggler']} ({r['cause']}) | {_trio(r.get('main'))} | {_trio(r.get('ray'), r['ranks'])} | "
            f"{hta_cell(r['hta']) if 'hta' in r else 'not measured'} | "
            f"{m['load_avg'][0]:.1f} -> {m['load_avg'][1]:.1f} |")
    return "\n".join(lines)

if __name__ == "__main__":
    main()
