#!/usr/bin/env python3
"""Loader benchmark: traceanalyze's loader vs HolisticTraceAnalysis 0.5.0's parser.

Builds large traces by replicating a real Kineto trace (a V100 run, fractional-ns
timestamps) in Kineto's own text layout, then times each tool end to end, each run in a
fresh subprocess, and prints a Markdown table (also written to bench/RESULTS.md).

    python bench/bench_load.py                       # 100MB, 500MB, 500MB.gz, 2GB; 3 runs each
    python bench/bench_load.py --sizes 100MB --repeat 1
    python bench/bench_load.py --tools traceanalyze  # skip HTA
    python bench/bench_load.py --hta-python /tmp/hta-venv/bin/python
    python bench/bench_load.py --cpu-trace --previous-checkout DIR --max-regression 10
        # the torch 2.13 CPU layout (gloo, many small ops) at 200 MB against an earlier
        # checkout: exits 1 when this one needs over 10 % more CPU, per-rank tables listed

Replication: replica r shifts every `ts` by r x (trace span + 1 ms) so steps do not
overlap, renames ProfilerStep#N so step numbers stay unique, and offsets External id,
correlation, flow ids and Sequence numbers so the links stay one-to-one. Only those
numbers change; the text layout (indentation, key order, number format) is Kineto's.

Measured per run (a fresh process, page cache warm):
- seconds: wall time of the whole process (interpreter start, imports, parse, write);
- MB/s: uncompressed JSON bytes / seconds;
- peak RSS: the child's VmHWM, which it prints at exit (DuckDB's and pandas' memory
  included); ru_maxrss from wait4 only if it does not (that one also counts this process's
  pages that the child shares between fork and exec);
- peak RSS + RAM staging: traceanalyze's resident memory plus the files it keeps in its
  RAM-backed work folder (/dev/shm for an uncompressed trace that fits), sampled every 5 ms.
traceanalyze runs `traceanalyze load DIR --db FILE --force` (cold), then the same
command without --force on the unchanged files (reuse of the stored database).
HTA runs `TraceAnalysis(trace_files={0: path}, trace_dir=dir)`, which is how a user
loads a trace (Trace + parse_traces + align_and_filter_trace).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gzip
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = Path("/work/shared/traces/hta-ns-resolution-trace/"
                      "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
DEFAULT_SCRATCH = Path("/tmp/traceanalyze-bench")
RAM_STAGING = Path("/dev/shm")  # where the loader stages a trace that fits (load/memory.py)
# what the real traces the benchmark is run on are (the table says it)
# the CPU-trace layout (--cpu-trace): rank 0 of a recorded 4-rank gloo DDP run, torch 2.13
CPU_SOURCE_GLOB = ("fixtures/ddp/balanced", "rank0.*.pt.trace.json.gz")
SOURCE_KINDS = {
    DEFAULT_SOURCE.name: "a real V100 Kineto trace, 2024, epoch-µs timestamps with ns digits",
    "nccl_data.json.gz": "a real A100 NCCL trace of torch 2.x: relative timestamps + baseTimeNanoseconds",
    "cpu": "rank 0 of the recorded gloo DDP run fixtures/ddp/balanced: torch 2.13's CPU layout "
           "(relative timestamps + baseTimeNanoseconds, shapes and memory recorded, many small ops)",
}
SIZES = {"100MB": 100_000_000, "200MB": 200_000_000, "500MB": 500_000_000, "2GB": 2_000_000_000}
GZ_OF = "500MB"  # the size that also gets a gzipped copy
TRACE_NAME = "rank-0.bench.pt.trace.json"

# numbers rewritten per replica
TS_RE = re.compile(rb'("ts": )(\d+)(?=[.,\s}])')
STEP_RE = re.compile(rb'("ProfilerStep#)(\d+)(")')
ID_RE = re.compile(rb'("(?:External id|correlation|Sequence number|id)": )(\d+)')


# ----------------------------------------------------------------------------- traces

def _split_source(text: bytes) -> tuple[bytes, bytes, bytes]:
    """head (through `"traceEvents": [`), events body, tail (from the array's `]`)."""
    m = re.search(rb'"traceEvents"\s*:\s*\[', text)
    if not m:
        raise SystemExit("source trace has no traceEvents array")
    end = text.rfind(b"]", 0, text.rfind(b'"traceName"') if b'"traceName"' in text else len(text))
    # walk back to the `]` that closes the events: the one after the last event's `}`
    while not text[:end].rstrip().endswith(b"}"):
        end = text.rfind(b"]", 0, end)
    body = text[m.end():end].strip()
    head, tail = text[:m.end()] + b"\n  ", b"\n  " + text[end:].lstrip()
    json.loads(head + tail)  # the layout is what we think it is
    return head, body, tail


class _Template:
    """The events body cut around the numbers a replica rewrites, for fast re-joining."""

    def __init__(self, body: bytes) -> None:
        subs = []  # (start, end, kind, value)
        for kind, rx, grp in (("ts", TS_RE, 2), ("step", STEP_RE, 2), ("id", ID_RE, 2)):
            subs.extend((m.start(grp), m.end(grp), kind, int(m.group(grp))) for m in rx.finditer(body))
        subs.sort()
        self.literals, self.kinds, self.values = [], [], []
        pos = 0
        for start, end, kind, value in subs:
            self.literals.append(body[pos:start])
            self.kinds.append(kind)
            self.values.append(value)
            pos = end
        self.literals.append(body[pos:])
        ts = [v for k, v in zip(self.kinds, self.values) if k == "ts"]
        durs = [float(x) for x in re.findall(rb'"dur": (\d+(?:\.\d+)?)', body)]
        self.span_us = max(ts) - min(ts) + int(max(durs or [0])) + 1000
        steps = [v for k, v in zip(self.kinds, self.values) if k == "step"]
        self.step_stride = (max(steps) - min(steps) + 1) if steps else 1
        ids = [v for k, v in zip(self.kinds, self.values) if k == "id"]
        self.id_stride = 10 ** len(str(max(ids or [1])))
        self.body_bytes = len(body)

    def replica(self, r: int) -> bytes:
        shift = {"ts": r * self.span_us, "step": r * self.step_stride, "id": r * self.id_stride}
        lits, out = self.literals, []
        append = out.append
        for i, (kind, value) in enumerate(zip(self.kinds, self.values)):
            append(lits[i])
            append(str(value + shift[kind]).encode())
        append(lits[-1])
        return b"".join(out)


def build_trace(source: Path, target_bytes: int, out: Path) -> int:
    """Write a trace of about `target_bytes` (uncompressed); returns its exact size."""
    with gzip.open(source, "rb") as fh:
        text = fh.read()
    head, body, tail = _split_source(text)
    tpl = _Template(body)
    n = max(1, round((target_bytes - len(head) - len(tail)) / (len(body) + 2)))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(head)
        for r in range(n):
            if r:
                fh.write(b",\n  ")
            fh.write(tpl.replica(r))
        fh.write(tail)
    os.replace(tmp, out)
    return out.stat().st_size


def ensure_traces(source: Path, scratch: Path, sizes: list[str], log) -> dict[str, dict]:
    """{label: {dir, file, json_bytes}}; built once, reused while the recipe is unchanged."""
    cases = {}
    stamp = f"{source}:{source.stat().st_size}:{source.stat().st_mtime_ns}:v2"
    for label in sizes:
        gz = label.endswith(".gz")
        base = label[:-3] if gz else label
        plain_dir = scratch / base
        plain = plain_dir / TRACE_NAME
        recipe = plain_dir / ".recipe"
        if not (plain.exists() and recipe.exists() and recipe.read_text() == stamp):
            log(f"building {plain} ...")
            t0 = time.perf_counter()
            shutil.rmtree(plain_dir, ignore_errors=True)
            build_trace(source, SIZES[base], plain)
            recipe.write_text(stamp)
            log(f"  {plain.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - t0:.1f} s")
        json_bytes = plain.stat().st_size
        if not gz:
            cases[label] = {"dir": plain_dir, "file": plain, "json_bytes": json_bytes}
            continue
        gz_dir = scratch / label
        gz_file = gz_dir / (TRACE_NAME + ".gz")
        gz_recipe = gz_dir / ".recipe"
        if not (gz_file.exists() and gz_recipe.exists() and gz_recipe.read_text() == stamp):
            log(f"compressing {gz_file} ...")
            shutil.rmtree(gz_dir, ignore_errors=True)
            gz_dir.mkdir(parents=True)
            subprocess.run(f"gzip -c -6 {plain} > {gz_file}.tmp", shell=True, check=True)
            os.replace(f"{gz_file}.tmp", gz_file)
            gz_recipe.write_text(stamp)
        cases[label] = {"dir": gz_dir, "file": gz_file, "json_bytes": json_bytes}
    return cases


# ----------------------------------------------------------------------------- running

def _folder_bytes(folder: Path) -> int:
    """Bytes the files under `folder` hold (allocated blocks; 0 for what vanished meanwhile)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _staged_bytes(pid: int) -> int:
    """Bytes in the RAM-backed work folders of the process `pid` (traceanalyze-<pid>@<host>-*
    in /dev/shm, load/stale.py's names)."""
    try:
        names = os.listdir(RAM_STAGING)
    except OSError:
        return 0
    return sum(_folder_bytes(RAM_STAGING / n) for n in names if n.startswith(f"traceanalyze-{pid}@"))


def sample_held(pid: int, done: threading.Event, peak: dict) -> None:
    """Every 5 ms until `done`: the child's resident memory plus the files in its RAM-backed
    work folders (the critical path's files, a private database: memory of the machine that RSS
    does not count); the highest sum and the most staged into `peak`."""
    while not done.wait(0.005):
        staged = _staged_bytes(pid)
        peak["held"] = max(peak.get("held", 0), _rss_bytes(pid) + staged)
        peak["staged"] = max(peak.get("staged", 0), staged)


def run_measured(cmd: list[str], timeout: float, env: dict | None = None, cwd: Path | None = None,
                 staging: bool = False) -> dict:
    """Run `cmd` in a fresh process group; wall seconds, peak RSS (wait4), rc, timeout flag;
    with `staging` also the peak of its memory plus the files it staged in RAM (sampled)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, env=env, cwd=cwd)
    timed_out, sampled, peak = threading.Event(), threading.Event(), {}
    sampler = None
    if staging:
        sampler = threading.Thread(target=sample_held, args=(proc.pid, sampled, peak), daemon=True)
        sampler.start()

    def kill():
        timed_out.set()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout, kill)
    timer.start()
    output = proc.stdout.read()  # until the child closes it
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    timer.cancel()
    if sampler is not None:
        sampled.set()
        sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = output.decode(errors="replace")
    # the child's own high-water mark (VmHWM) when it reports it: wait4's ru_maxrss also counts
    # the pages of this (large) benchmark process that the child shared between fork and exec
    hwm = re.findall(r"^BENCH_HWM_KB (\d+)$", text, re.MULTILINE)
    rss = int(hwm[-1]) * 1024 if hwm else usage.ru_maxrss * 1024
    return {"seconds": wall, "rss_bytes": rss, "rc": proc.returncode,
            "held_bytes": max(peak.get("held", 0), rss) if staging else None,
            "staged_bytes": peak.get("staged") if staging else None,
            "cpu_seconds": usage.ru_utime + usage.ru_stime,
            "timed_out": timed_out.is_set(), "output": text[-2000:]}


# printed by every measured child at exit: its peak resident memory
HWM_REPORT = r"""
import atexit as _atexit, sys as _sys
def _report_hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            print("BENCH_HWM_KB", line.split()[1], file=_sys.stderr, flush=True)
_atexit.register(_report_hwm)
"""

TRACEANALYZE_SNIPPET = HWM_REPORT + r"""
import glob as _glob, json as _json, os as _os, runpy, time as _time
_stage = {"reduce_cpu": 0.0}
try:  # the reduce's seconds (a checkout without reduce_to_db reports none)
    try:
        import traceanalyze.load.trace_dir as _load
    except ImportError:  # a checkout from before the loader's orchestration had its own module
        import traceanalyze.load as _load
    _reduce = _load.reduce_to_db
    def _timed(*a, **k):
        t = _time.process_time()
        try:
            return _reduce(*a, **k)
        finally:
            _stage["reduce_cpu"] += _time.process_time() - t
    _load.reduce_to_db = _timed
except (ImportError, AttributeError):
    pass
def _report_stages():
    db = _sys.argv[_sys.argv.index("--db") + 1]
    total = {}
    for m in _glob.glob(_os.path.splitext(db)[0] + ".shards/rank=*/manifest.json"):
        for k, v in _json.load(open(m)).get("stage_s", {}).items():
            total[k] = total.get(k, 0.0) + v
    total["reduce_cpu"] = _stage["reduce_cpu"]
    print("BENCH stages " + " ".join(f"{k}={v:.2f}" for k, v in total.items()), file=_sys.stderr, flush=True)
_atexit.register(_report_stages)
_sys.argv = ["traceanalyze", *_sys.argv[1:]]
runpy.run_module("traceanalyze", run_name="__main__")
"""

HTA_SNIPPET = HWM_REPORT + r"""
import logging, os, sys, time
logging.disable(logging.WARNING)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
path = sys.argv[1]
analyzer = TraceAnalysis(trace_files={0: path}, trace_dir=os.path.dirname(path))
df = analyzer.t.get_trace(0)
t2 = time.perf_counter()
print(f"BENCH events={len(df)} import_s={t1 - t0:.2f} parse_s={t2 - t1:.2f}")
"""


def traceanalyze_cmd(case: dict, db: Path, force: bool) -> list[str]:
    cmd = [sys.executable, "-c", TRACEANALYZE_SNIPPET, "load", str(case["dir"]), "--db", str(db), "-q"]
    return cmd + (["--force"] if force else [])


def measure(label: str, case: dict, tool: str, args, log) -> dict:
    runs, notes = [], []
    db = args.scratch / "db" / f"{label}.duckdb"
    db.parent.mkdir(parents=True, exist_ok=True)
    load_before = _loadavg_1min()
    for i in range(args.repeat):
        env = cwd = None
        if tool == "traceanalyze":
            cmd = traceanalyze_cmd(case, db, force=True)
        elif tool == "traceanalyze (re-run)":
            cmd = traceanalyze_cmd(case, db, force=False)
        elif tool == "previous":  # the same command, run from another checkout
            cmd = traceanalyze_cmd(case, db.with_name(f"{label}.previous.duckdb"), force=True)
            # (run from there: `python -c` puts the working folder first on sys.path)
            env, cwd = {**os.environ, "PYTHONPATH": str(args.previous_checkout)}, args.previous_checkout
        else:
            cmd = [args.hta_python, "-c", HTA_SNIPPET, str(case["file"])]
        res = run_measured(cmd, args.timeout, env, cwd, staging=tool != "hta" and RAM_STAGING.is_dir())
        state = "timeout" if res["timed_out"] else ("ok" if res["rc"] == 0 else f"rc={res['rc']}")
        extra = " ".join(line for line in res["output"].splitlines()
                         if line.startswith("BENCH") and not line.startswith("BENCH_HWM"))
        log(f"  {label:9} {tool:22} run {i + 1}: {res['seconds']:7.2f} s  cpu {res['cpu_seconds']:7.2f} s  "
            f"{res['rss_bytes'] / 1e6:7.0f} MB{_held_text(res)}  {state} {extra}")
        if state != "ok":
            notes.append(state if res["timed_out"] else f"{state}: {res['output'][-300:]}")
            if res["timed_out"]:
                break
            continue
        res["stages"] = dict(kv.split("=") for line in res["output"].splitlines()
                             if line.startswith("BENCH stages") for kv in line.split()[2:])
        runs.append(res)
    if not runs:
        return {"size": label, "tool": tool, "ok": False, "note": notes[0] if notes else "failed",
                "json_bytes": case["json_bytes"]}
    secs = statistics.median(r["seconds"] for r in runs)
    rss = statistics.median(r["rss_bytes"] for r in runs)
    held = [r["held_bytes"] for r in runs if r.get("held_bytes") is not None]
    cpu = statistics.median(r["cpu_seconds"] for r in runs)
    return {"size": label, "tool": tool, "ok": True, "seconds": secs, "rss_bytes": rss, "cpu_seconds": cpu,
            "held_bytes": statistics.median(held) if held else None,
            "json_bytes": case["json_bytes"], "runs": len(runs), "loadavg_before": load_before,
            "mb_per_s": case["json_bytes"] / 1e6 / secs, "note": "; ".join(notes),
            "stages": min(runs, key=lambda r: abs(r["seconds"] - secs)).get("stages", {})}


# ----------------------------------------------------------------------------- report

def _versions(args) -> dict:
    out = {"python": platform.python_version()}
    try:
        import duckdb
        out["duckdb"] = duckdb.__version__
    except ImportError:
        pass
    try:
        from traceanalyze import __version__
        out["traceanalyze"] = __version__
    except ImportError:
        pass
    if os.path.exists(args.hta_python):
        r = subprocess.run([args.hta_python, "-c",
                            "import importlib.metadata as m, pandas; "
                            "print(m.version('HolisticTraceAnalysis'), pandas.__version__)"],
                           capture_output=True, text=True)
        if r.returncode == 0:
            hta, pandas = r.stdout.split()
            out["HolisticTraceAnalysis"], out["pandas"] = hta, pandas
    return out


def machine() -> str:
    mem = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB RAM"
    except OSError:
        pass
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = ", " + line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores (nproc){cpu}, {mem}, {platform.system()} {platform.release()}"


def _held_text(res: dict) -> str:
    if res.get("held_bytes") is None:
        return ""
    return f" (with RAM staging: {res['held_bytes'] / 1e6:.0f} MB, staged up to {(res['staged_bytes'] or 0) / 1e6:.0f})"


def table(results: list[dict]) -> str:
    rows = ["| trace (uncompressed JSON) | tool | seconds | MB/s | CPU s | peak RSS MB | RSS / JSON size "
            "| peak RSS + RAM staging MB | vs HTA (MB/s) | vs HTA (CPU s) | load avg before | stages (s) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    hta = {r["size"]: r for r in results if r["tool"] == "hta" and r.get("ok")}
    for r in results:
        size = f"{r['size']} ({r['json_bytes'] / 1e6:,.0f} MB)"
        if not r.get("ok"):
            rows.append(f"| {size} | {r['tool']} | — | — | — | — | — | — | {r.get('note', 'failed')} | | | |")
            continue
        ratio = cpu_ratio = ""
        if r["tool"] in ("traceanalyze", "previous") and r["size"] in hta:
            ratio = f"{r['mb_per_s'] / hta[r['size']]['mb_per_s']:.1f}x"
            cpu_ratio = f"{hta[r['size']]['cpu_seconds'] / r['cpu_seconds']:.1f}x"
        elif r["tool"] == "traceanalyze" and any(x["size"] == r["size"] and x["tool"] == "hta"
                                                 for x in results):
            ratio = "HTA failed"
        mbps = f"{r['mb_per_s']:,.0f}" if r["tool"] != "traceanalyze (re-run)" else "—"
        rows.append(f"| {size} | {r['tool']} | {r['seconds']:.2f} | {mbps} | {r.get('cpu_seconds', 0):.1f} | "
                    f"{r['rss_bytes'] / 1e6:,.0f} | {r['rss_bytes'] / r['json_bytes']:.2f}x | {_held_cell(r)} "
                    f"| {ratio} | {cpu_ratio} "
                    f"| {r.get('loadavg_before', '?')} | {_stages(r)} |")
    return "\n".join(rows)


def _held_cell(r: dict) -> str:
    held = r.get("held_bytes")
    return "—" if held is None else f"{held / 1e6:,.0f} ({held / r['json_bytes']:.2f}x)"


def _stages(r: dict) -> str:
    """The map's stages (read_parse_write_cpu: the native reader writing raw_events.parquet,
    split by wall time into parse_wall and write_wall; tables_cpu; write_tables_cpu) and the
    reduce's CPU seconds (reduce_to_db: trace.duckdb, cross-rank tables, alignment)."""
    return ", ".join(f"{k} {float(v):.2f}" for k, v in r.get("stages", {}).items()
                     if not k.startswith(TABLE_KEY) and (r["tool"] != "traceanalyze (re-run)" or k == "reduce_cpu"))


TABLE_KEY = "table_cpu."  # the manifest's per-table stage entries (each one-pass and derived table; SQL files before 2026-12)


def table_costs(results: list[dict]) -> str:
    """Seconds of each per-rank table in the cold runs (this checkout's: each one-pass table
    the reader finishes once the events are read, gathering their rows while it parses, each
    table it derives, and reading the one-pass tables back; an older checkout's: each per-rank
    SQL file), most expensive first, with its share of all of them."""
    runs = [r for r in results if r.get("ok") and r["tool"] in ("traceanalyze", "previous")]
    if not any(k.startswith(TABLE_KEY) for r in runs for k in r.get("stages", {})):
        return ""
    head = "| per-rank table (one-pass or derived table, or SQL file) | " + " | ".join(f"{r['size']} {r['tool']}" for r in runs) + " |"
    rows = [head, "|---|" + "---:|" * len(runs)]
    costs = [{k: float(v) for k, v in r["stages"].items() if k.startswith(TABLE_KEY)} for r in runs]
    names = sorted({k for c in costs for k in c}, key=lambda k: (-max(c.get(k, 0.0) for c in costs), k))

    def cell(c: dict[str, float], key: str) -> str:
        if key not in c:
            return "—"
        total = sum(c.values())
        return f"{c[key]:.2f} ({100 * c[key] / total:.0f} %)" if total else f"{c[key]:.2f}"

    for key in names:
        rows.append(f"| {key.removeprefix(TABLE_KEY)} | " + " | ".join(cell(c, key) for c in costs) + " |")
    return "\n".join(rows)


def regressions(results: list[dict], max_pct: float) -> list[str]:
    """Sizes where this checkout's cold load needs over `max_pct` % more CPU than the previous
    checkout's in the same run."""
    found = []
    for r in results:
        prev = next((p for p in results if p["size"] == r["size"] and p["tool"] == "previous" and p.get("ok")), None)
        if r["tool"] == "traceanalyze" and r.get("ok") and prev:
            ratio = r["cpu_seconds"] / prev["cpu_seconds"]
            if ratio > 1 + max_pct / 100:
                found.append(f"{r['size']}: {r['cpu_seconds']:.1f} CPU s against the previous checkout's "
                             f"{prev['cpu_seconds']:.1f} ({ratio:.2f}x, the bound {1 + max_pct / 100:.2f}x)")
    return found


def write_results(path: Path, results: list[dict], args, versions: dict) -> None:
    date = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    vers = ", ".join(f"{k} {v}" for k, v in versions.items())
    text = f"""# Loader benchmark

`python bench/bench_load.py {' '.join(args.argv)}` — {date}

- machine: {machine()}
- versions: {vers}
- traces: {args.source.name} ({args.source_kind}, {args.source_json_mb:.1f} MB of JSON)
  replicated in Kineto's text layout (ts shifted per replica, ProfilerStep#N renamed,
  ids offset); `.gz` is `gzip -6` of the 500 MB one (MB/s counts uncompressed bytes).
- each number is the median of the runs (up to {args.repeat}), each in a fresh process (page
  cache warm); seconds are the whole process's wall time, CPU s its user + system time (less
  sensitive to other load on a shared machine); peak RSS is the child's VmHWM, printed by
  the child at exit (wait4's ru_maxrss would also count the benchmark's own pages that the
  child shared between fork and exec). "peak RSS + RAM staging" adds what traceanalyze keeps
  in files in RAM (its work folders in /dev/shm, which it picks for an uncompressed trace that
  fits: the critical path's files, a private database), sampled every 5 ms: memory of the
  machine that RSS leaves out.
- traceanalyze: `traceanalyze load DIR --db FILE --force` end to end: the native reader writing
  the rank's raw_events.parquet and its one-pass tables, the derived per-rank tables built from
  them (the shard), then `trace.duckdb` (the shard's tables copied in or viewed), cross-rank
  tables and alignment. "stages" are the map's (from the shard manifests: CPU s of the reader
  writing Parquet, split by wall time into parsing and writing; of the derived tables; of
  writing the rank's own rows) and the reduce's CPU s.
  "re-run" is the same command without `--force` on the unchanged files (database reused).
- previous: the same command run from an earlier checkout (`--previous-checkout`).
- hta: `TraceAnalysis(trace_files={{0: path}}, trace_dir=dir)` (parse + align + filter),
  timeout {args.timeout:.0f} s.

- load average of the machine (1/5/15 min) when the table was written: {_loadavg()}
  (a shared 2-core machine: when it is above 2, wall seconds are inflated by other work
  and CPU s is the better guide).

{table(results)}

{table_costs(results)}
"""
    marker = "<!-- notes: kept when the benchmark rewrites this file -->"
    if path.exists() and marker in path.read_text():
        text += "\n" + marker + path.read_text().split(marker, 1)[1]
    path.write_text(text)


def _loadavg_1min() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def _loadavg() -> str:
    try:
        return " / ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


# ----------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=None,
                    help="comma-separated: 100MB, 200MB, 500MB, 2GB, and NAME.gz for a gzipped copy "
                         "(default 100MB,500MB,500MB.gz,2GB; with --cpu-trace 200MB)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement (median)")
    ap.add_argument("--tools", default="traceanalyze,hta",
                    help="traceanalyze, hta (none: only rewrite the table from stored measurements)")
    ap.add_argument("--scratch", type=Path, default=None, help=f"where the traces are built (default {DEFAULT_SCRATCH})")
    ap.add_argument("--source", type=Path, default=None, help=f"the trace replicated (default {DEFAULT_SOURCE})")
    ap.add_argument("--cpu-trace", action="store_true",
                    help="the torch 2.13 CPU layout (a recorded gloo rank of fixtures/ddp/balanced), 200 MB by "
                         "default, in its own scratch folder and bench/RESULTS-cpu.md")
    ap.add_argument("--max-regression", type=float, default=None, metavar="PCT",
                    help="exit 1 when a cold load needs over PCT %% more CPU than --previous-checkout's")
    ap.add_argument("--previous-checkout", type=Path, default=None,
                    help="a checkout of an earlier version (e.g. `git worktree add DIR fccfe4b~1`, the "
                         "pure-Python loader before the native reader): adds the tool 'previous'")
    ap.add_argument("--hta-python", default=os.environ.get("HTA_PYTHON", "/tmp/hta-venv/bin/python"),
                    help="python with HolisticTraceAnalysis==0.5.0 installed")
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds before a run is killed")
    ap.add_argument("--results", type=Path, default=None,
                    help="Markdown file to write ('-' for none)")
    ap.add_argument("--build-only", action="store_true", help="only build the traces")
    ap.add_argument("--fresh", action="store_true", help="forget measurements stored by earlier runs")
    args = ap.parse_args(argv)
    args.argv = argv if argv is not None else sys.argv[1:]
    args.source_kind = None
    if args.cpu_trace:
        folder, pattern = CPU_SOURCE_GLOB
        if not args.source:
            args.source = next(iter(sorted((REPO / folder).glob(pattern))))
            args.source_kind = SOURCE_KINDS["cpu"]
        args.scratch = args.scratch or DEFAULT_SCRATCH / "cpu"
        args.results = args.results or REPO / "bench" / "RESULTS-cpu.md"
        args.sizes = args.sizes or "200MB"
    args.source = args.source or DEFAULT_SOURCE
    args.source_kind = args.source_kind or SOURCE_KINDS.get(args.source.name, "a real Kineto trace")
    args.scratch = args.scratch or DEFAULT_SCRATCH
    args.results = args.results or REPO / "bench" / "RESULTS.md"
    args.sizes = args.sizes or "100MB,500MB,500MB.gz,2GB"
    if args.max_regression is not None and not args.previous_checkout:
        ap.error("--max-regression compares with --previous-checkout: give one")
    if "hta" in [t.strip() for t in args.tools.split(",")] and not os.access(args.hta_python, os.X_OK):
        ap.error(f"no HTA python at {args.hta_python} (python3 -m venv DIR && DIR/bin/pip install "
                 "HolisticTraceAnalysis==0.5.0, then --hta-python DIR/bin/python), or --tools traceanalyze")
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    for s in sizes:
        if s.removesuffix(".gz") not in SIZES:
            ap.error(f"unknown size {s!r}; choose from {', '.join(SIZES)} (+ .gz)")
    args.tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    if args.previous_checkout and "previous" not in args.tools:
        args.tools.append("previous")

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    with gzip.open(args.source, "rb") as fh:
        args.source_json_mb = len(fh.read()) / 1e6
    cases = ensure_traces(args.source, args.scratch, sizes, log)
    if args.fresh:
        (args.scratch / "results.json").unlink(missing_ok=True)
    if args.build_only:
        return 0
    store = args.scratch / "results.json"  # every measurement, so tools can be run separately
    saved = json.loads(store.read_text()) if store.exists() else {}
    for label in sizes:
        case = cases[label]
        tools = (["traceanalyze", "traceanalyze (re-run)"] if "traceanalyze" in args.tools else []) \
            + [t for t in ("previous", "hta") if t in args.tools]
        for tool in tools:
            res = measure(label, case, tool, args, log)
            saved[f"{label}|{tool}"] = res
            store.write_text(json.dumps(saved, indent=1))
    order = ["traceanalyze", "traceanalyze (re-run)", "previous", "hta"]
    results = [saved[f"{label}|{tool}"] for label in sizes for tool in order if f"{label}|{tool}" in saved]
    md = table(results)
    print(md)
    costs = table_costs(results)
    if costs:
        print("\n" + costs)
    if str(args.results) != "-":
        write_results(args.results, results, args, _versions(args))
        log(f"wrote {args.results}")
    if args.max_regression is not None:
        found = regressions(results, args.max_regression)
        for line in found:
            log(f"REGRESSION {line}")
        return 1 if found else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
