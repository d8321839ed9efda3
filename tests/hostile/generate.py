"""Hostile and broken inputs for tests/test_hostile.py, written on demand (the big ones would
not belong in git). `python tests/hostile/generate.py OUT_DIR` writes every case into OUT_DIR
to try by hand; the tests call the functions directly.

Each function writes one case and returns the path to give the command.
"""

from __future__ import annotations

import json
import os
import sys
import zlib
from pathlib import Path

BASE_US = 5_000_000
STEP_US = 10_000


def _header(rank: int, world: int, extra: dict | None = None) -> dict:
    return {"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": world},
            "baseTimeNanoseconds": 1_700_000_000_000_000_000, **(extra or {})}


def _events(steps: int, ops_per_step: int, rank: int = 0):
    """A training loop: ProfilerStep#N annotations with `ops_per_step` aten ops each."""
    yield {"ph": "M", "name": "thread_name", "pid": 100 + rank, "tid": 1, "args": {"name": "python"}}
    for s in range(steps):
        t0 = BASE_US + s * STEP_US
        yield {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s + 2}", "pid": 100 + rank,
               "tid": 1, "ts": t0, "dur": STEP_US - 10}
        width = (STEP_US - 20) / max(ops_per_step, 1)
        for i in range(ops_per_step):
            yield {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 100 + rank, "tid": 1,
                   "ts": t0 + 5 + i * width, "dur": width * 0.8, "args": {"External id": s * ops_per_step + i}}


def trace_text(rank: int = 0, world: int = 1, steps: int = 4, ops_per_step: int = 3,
               header: dict | None = None) -> str:
    head = json.dumps(_header(rank, world, header))[:-1]
    body = ",\n".join(json.dumps(e) for e in _events(steps, ops_per_step, rank))
    return f'{head}, "traceEvents": [\n{body}\n]}}\n'


def small_trace(folder: Path, ranks: int = 2, **options) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        (folder / f"rank{r}.pt.trace.json").write_text(trace_text(r, ranks, **options))
    return folder


def big_trace(folder: Path, mb: int, ranks: int = 1) -> Path:
    """About `mb` MB of events per rank (steps of 2,000 aten ops), streamed to disk."""
    folder.mkdir(parents=True, exist_ok=True)
    per_step, width = 2000, (STEP_US - 20) / 2000
    for r in range(ranks):
        pid = 100 + r
        with open(folder / f"rank{r}.pt.trace.json", "w") as fh:
            fh.write(json.dumps(_header(r, ranks))[:-1] + ', "traceEvents": [\n')
            written, s = 0, 0
            while written < mb * 1_000_000:
                t0 = BASE_US + s * STEP_US
                lines = [f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{s + 2}", '
                         f'"pid": {pid}, "tid": 1, "ts": {t0}, "dur": {STEP_US - 10}}}']
                lines += [f'{{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": {pid}, "tid": 1, '
                          f'"ts": {t0 + 5 + i * width:.3f}, "dur": {width * 0.8:.3f}, '
                          f'"args": {{"External id": {s * per_step + i}}}}}' for i in range(per_step)]
                chunk = ("" if s == 0 else ",\n") + ",\n".join(lines)
                fh.write(chunk)
                written += len(chunk)
                s += 1
            fh.write("\n]}\n")
    return folder


# ---------------------------------------------------------------- discovery and files

def deep_distributed_info(folder: Path, depth: int = 100_000) -> Path:
    """distributedInfo nested `depth` levels deep (a RecursionError for a recursive parser)."""
    folder.mkdir(parents=True, exist_ok=True)
    nested = '{"a": ' * depth + "1" + "}" * depth
    text = trace_text(0, 1).replace('"distributedInfo": {', '"distributedInfo": {"deep": ' + nested + ", ", 1)
    (folder / "rank0.pt.trace.json").write_text(text)
    (folder / "rank1.pt.trace.json").write_text(trace_text(1, 2))
    return folder


def fifo_rank(folder: Path) -> Path:
    small_trace(folder)
    os.mkfifo(folder / "rank2.pt.trace.json")
    return folder


def dev_zero_rank(folder: Path) -> Path:
    small_trace(folder)
    os.symlink("/dev/zero", folder / "rank2.pt.trace.json")
    return folder


def dangling_rank(folder: Path) -> Path:
    small_trace(folder)
    os.symlink(folder / "no-such-file.json", folder / "rank2.pt.trace.json")
    return folder


ESCAPE_NAME = "run\x1b]0;pwned\x07\x1b[31mred\n::error::forged"


def hostile_folder_name(parent: Path) -> Path:
    """A trace folder whose name holds an OSC title sequence, a color and a newline."""
    return small_trace(parent / ESCAPE_NAME)


def hostile_strings_trace(folder: Path) -> Path:
    """Event names and thread names with escape sequences, newlines and workflow commands."""
    folder.mkdir(parents=True, exist_ok=True)
    nasty = "\x1b]52;c;cm0gLXJmIH4=\x07\n::error file=a::injected\r\x9b31m"
    for r in range(2):
        text = trace_text(r, 2).replace('"aten::mm"', json.dumps(nasty))
        (folder / f"rank{r}.pt.trace.json").write_text(text)
    return folder


def truncated_rank(folder: Path, keep: float = 0.5) -> Path:
    """Two ranks; rank 1's file cut at `keep` of its length (so it lost about half its events)."""
    small_trace(folder, ranks=2, steps=20, ops_per_step=20)
    path = folder / "rank1.pt.trace.json"
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    return folder


# ---------------------------------------------------------------- the loader (native reader)

def wide_header(folder: Path, keys: int = 20_000) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    # every key holds a `"traceEvents": [` of its own: a candidate for the events' start
    extra = {f"k{i}": {"traceEvents": []} for i in range(keys)}
    (folder / "rank0.pt.trace.json").write_text(trace_text(0, 1, header=extra))
    return folder


def whitespace_gzip_bomb(folder: Path, gib: float = 2.0) -> Path:
    """A small .gz holding `gib` GiB of spaces inside the events array."""
    folder.mkdir(parents=True, exist_ok=True)
    text = trace_text(0, 1)
    cut = text.index('"traceEvents": [') + len('"traceEvents": [')
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    with open(folder / "rank0.pt.trace.json.gz", "wb") as fh:
        fh.write(comp.compress(text[:cut].encode()))
        block = b" " * (1 << 24)
        for _ in range(int(gib * 64)):
            fh.write(comp.compress(block))
        fh.write(comp.compress(text[cut:].encode()))
        fh.write(comp.flush())
    return folder


def _one_event_case(folder: Path, event_json: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    text = trace_text(0, 1)
    text = text.replace('"traceEvents": [\n', '"traceEvents": [\n' + event_json + ",\n", 1)
    (folder / "rank0.pt.trace.json").write_text(text)
    return folder


def duplicate_keys(folder: Path) -> Path:
    return _one_event_case(folder, '{"ph": "X", "cat": "cpu_op", "name": "first", "name": "second", '
                                   '"pid": 100, "tid": 1, "ts": 5000100, "ts": 5000200, "dur": 5}')


def nan_external_id(folder: Path) -> Path:
    return _one_event_case(folder, '{"ph": "X", "cat": "cpu_op", "name": "odd", "pid": 100, "tid": 1, '
                                   '"ts": 5000100, "dur": 5, "args": {"External id": NaN}}')


def huge_external_id(folder: Path) -> Path:
    return _one_event_case(folder, '{"ph": "X", "cat": "cpu_op", "name": "odd", "pid": 100, "tid": 1, '
                                   f'"ts": 5000100, "dur": 5, "args": {{"External id": {2 ** 70}}}}}')


def huge_sequence_number(folder: Path) -> Path:
    return _one_event_case(folder, '{"ph": "X", "cat": "cpu_op", "name": "odd", "pid": 100, "tid": 1, '
                                   '"ts": 5000100, "dur": 5, "args": {"Sequence number": 1e400}}')


def deep_metadata(folder: Path, depth: int = 1500) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    text = trace_text(0, 1)
    nested = '{"a": ' * depth + "1" + "}" * depth
    text = text.replace('"schemaVersion": 1', '"schemaVersion": 1, "deep": ' + nested, 1)
    (folder / "rank0.pt.trace.json").write_text(text)
    return folder


def long_step_number(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    text = trace_text(0, 1)
    for n in range(2, 6):  # every step: ProfilerStep#<30 nines><n>, 31 digits
        text = text.replace(f'"ProfilerStep#{n}"', '"ProfilerStep#' + "9" * 30 + f'{n}"')
    (folder / "rank0.pt.trace.json").write_text(text)
    return folder


# ---------------------------------------------------------------- summaries

INJECTION = "x\n::error file=ci.yml,line=1::forged by the summary\n"


def injecting_summary(path: Path) -> Path:
    """A summary whose rule id, ranks' file, and load-issue fields carry workflow commands."""
    summary = {
        "schema": "traceanalyze.summary/1", "tool_version": "0", "trace_dir": "t" + INJECTION,
        "world_size": 1, "steps": {}, "timeline": [], "memory": [],
        "ranks": [{"rank": 0, "file": "f" + INJECTION, "clock_offset_ns": 0, "metrics": None}],
        "findings": [{"rule": "r" + INJECTION, "severity": "error", "ranks": [0], "steps": [],
                      "title": "t" + INJECTION, "cost": None}],
        "load_issues": [{"rank": 0, "file": "f" + INJECTION, "kind": "k" + INJECTION,
                         "severity": "error", "message": "m" + INJECTION, "count": None}],
    }
    path.write_text(json.dumps(summary))
    return path


CASES = {name: fn for name, fn in globals().items()
         if callable(fn) and not name.startswith("_") and name not in
         ("trace_text", "big_trace", "injecting_summary")}

if __name__ == "__main__":  # pragma: no cover - a tool for trying the cases by hand
    out = Path(sys.argv[1])
    for name, make in CASES.items():
        make(out / name)
    injecting_summary(out / "summary.json")
    print(f"wrote {len(CASES) + 1} cases into {out}")
