"""Independent reading of trace files for the loader tests: stdlib json/gzip only.

Nothing here imports traceanalyze: every expected number in test_load*.py / test_bad_input.py
is computed from the JSON with this module, never with the code under test. Times are read
as Decimal (json's parse_float) so that fractional microseconds convert to ns exactly.
"""

from __future__ import annotations

import gzip
import json
import re
from bisect import bisect_right
from collections import Counter
from decimal import Decimal
from pathlib import Path

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
GPU_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}
RUNTIME_CATS = {"cuda_runtime", "Runtime", "cuda_driver"}
CPU_OP_CATS = {"cpu_op", "Operator"}


def read_bytes(path: Path) -> bytes:
    data = Path(path).read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def load_json(data: bytes):
    return json.loads(data, parse_float=Decimal)


def read_trace(path: Path) -> tuple[dict, list[dict]]:
    """(top-level object without traceEvents, events) of a trace file."""
    obj = load_json(read_bytes(path))
    if isinstance(obj, list):
        return {}, obj
    top = {k: v for k, v in obj.items() if k != "traceEvents"}
    return top, obj["traceEvents"]


def base_ns(top: dict) -> int:
    base = top.get("baseTimeNanoseconds")
    return base if isinstance(base, int) and not isinstance(base, bool) else 0


def is_number(v) -> bool:
    return isinstance(v, (int, Decimal)) and not isinstance(v, bool)


def to_ns(us, base: int = 0) -> int | None:
    """Microseconds (JSON int or Decimal) -> exact integer ns; None when not a number."""
    if not is_number(us):
        return None
    return int(Decimal(us) * 1000) + base


def rank_of(top: dict, path: Path) -> int:
    info = top.get("distributedInfo") or {}
    if isinstance(info.get("rank"), int):
        return info["rank"]
    m = re.search(r"(?:rank|worker)[-_]?(\d+)", Path(path).name, re.IGNORECASE)
    return int(m.group(1)) if m else 0


def complete(e: dict) -> bool:
    """A well-formed complete (X) event: numeric ts and a non-negative numeric dur."""
    return e.get("ph") == "X" and is_number(e.get("ts")) and is_number(e.get("dur")) and e["dur"] >= 0


def ph_cat_counts(events: list[dict]) -> Counter:
    return Counter((e.get("ph"), e.get("cat")) for e in events)


def steps(events: list[dict], base: int) -> dict[int, tuple[int, int]]:
    """{N: (start_ns, end_ns)} of the host ProfilerStep#N ranges."""
    out: dict[int, tuple[int, int]] = {}
    for e in events:
        m = STEP_NAME.match(str(e.get("name", "")))
        if m and complete(e) and e.get("cat") != "gpu_user_annotation":
            n, ts = int(m.group(1)), to_ns(e["ts"], base)
            end = ts + to_ns(e["dur"])
            lo, hi = out.get(n, (ts, end))
            out[n] = (min(lo, ts), max(hi, end))
    return out


def window(events: list[dict], base: int) -> dict[int, tuple[int, int]]:
    """The steps of a rank as the analysis uses them: its ProfilerSteps, or, for a trace
    recorded without a schedule, one step 0 spanning its complete events (the profiler's
    own 'Trace' span excluded)."""
    found = steps(events, base)
    if found:
        return found
    spans = [(to_ns(e["ts"], base), to_ns(e["ts"], base) + to_ns(e["dur"]))
             for e in events if complete(e) and e.get("cat") != "Trace"]
    return {0: (min(lo for lo, _ in spans), max(hi for _, hi in spans))} if spans else {}


class StepFinder:
    """Which step's [start, end) holds a time."""

    def __init__(self, step_ranges: dict[int, tuple[int, int]]):
        self.items = sorted((lo, hi, n) for n, (lo, hi) in step_ranges.items())
        self.starts = [lo for lo, _, _ in self.items]

    def __call__(self, ts_ns: int | None) -> int | None:
        if ts_ns is None:
            return None
        i = bisect_right(self.starts, ts_ns) - 1
        if i >= 0 and ts_ns < self.items[i][1]:
            return self.items[i][2]
        return None


def args(e: dict) -> dict:
    a = e.get("args")
    return a if isinstance(a, dict) else {}


def arg(e: dict, *keys):
    """An args value, matching the key case-insensitively (old traces: 'external id')."""
    a = args(e)
    lower = {k.lower(): v for k, v in a.items()}
    for k in keys:
        if k.lower() in lower:
            return lower[k.lower()]
    return None


def gpu_kind(e: dict) -> str:
    """Kind of a GPU activity, by its category and (for kernels) NCCL/RCCL names."""
    cat, name = e.get("cat"), str(e.get("name", ""))
    if cat in ("gpu_memcpy", "Memcpy"):
        return "memcpy"
    if cat in ("gpu_memset", "Memset"):
        return "memset"
    low = name.lower()
    if "ncclkernel" in low or "nccldevkernel" in low or "rcclkernel" in low:
        return "communication"
    if low.startswith("memcpy"):
        return "memcpy"
    if low.startswith("memset"):
        return "memset"
    return "compute"


def gpu_events(events: list[dict]) -> list[dict]:
    return [e for e in events if e.get("cat") in GPU_CATS and complete(e)]


def cpu_ops(events: list[dict]) -> list[dict]:
    return [e for e in events if e.get("cat") in CPU_OP_CATS and complete(e)]


def memory_events(events: list[dict]) -> list[dict]:
    return [e for e in events if e.get("name") == "[memory]" and is_number(e.get("ts"))]


def gloo_annotations(events: list[dict]) -> list[dict]:
    return [e for e in events if e.get("cat") == "user_annotation" and complete(e)
            and str(e.get("name", "")).startswith("gloo:")]


# host calls that queue a group collective on gloo's runloop (point-to-point send/recv do not)
C10D_GROUP_CALL = re.compile(r"^c10d::(allreduce|allgather|_allgather_base|reduce_scatter|_reduce_scatter_base"
                             r"|broadcast|reduce|alltoall|barrier|gather|scatter)")


def gloo_collectives(events: list[dict]) -> list[tuple[str, dict]]:
    """(collective, annotation) for every gloo:* annotation: its own name, except that gloo runs
    reduce_scatter_tensor as an all-reduce (a gloo:all_reduce queued by c10d::_reduce_scatter_base_),
    which is 'gloo:reduce_scatter'. gloo runs its queue in order: the i-th annotation in time is
    the i-th c10d group-collective call."""
    runs = sorted(gloo_annotations(events), key=lambda e: (e["ts"], e["dur"]))
    calls = sorted((e for e in events if complete(e) and C10D_GROUP_CALL.match(str(e.get("name", "")))),
                   key=lambda e: (e["ts"], e["dur"]))
    out = []
    for i, run in enumerate(runs):
        call = calls[i]["name"] if i < len(calls) else ""
        name = run["name"]
        if name == "gloo:all_reduce" and call.startswith(("c10d::_reduce_scatter_base", "c10d::reduce_scatter")):
            name = "gloo:reduce_scatter"
        out.append((name, run))
    return out


def kernel_steps(events: list[dict], base: int) -> Counter:
    """Counter of (ts_ns, name, step) for GPU activity: the step of the launching runtime call
    (matched by correlation), else the step its own time falls in."""
    find = StepFinder(window(events, base))
    launch = {}
    for e in events:
        if e.get("cat") in RUNTIME_CATS and complete(e) and arg(e, "correlation") is not None:
            launch[arg(e, "correlation")] = to_ns(e["ts"], base)
    out = Counter()
    for e in gpu_events(events):
        ts = to_ns(e["ts"], base)
        corr = arg(e, "correlation")
        step = find(launch.get(corr))
        if step is None:  # no launch seen, or launched outside every step: its own time decides
            step = find(ts)
        out[(ts, str(e.get("name")), step)] += 1
    return out


def event_end_offsets(text: bytes) -> tuple[int, list[int]]:
    """(offset of the traceEvents array's first byte, end offset of every event) in `text`.

    Used to know, for any cut point, how many events lie completely before it.
    """
    s = text.decode("latin-1")  # one char per byte: offsets are byte offsets
    m = re.search(r'"traceEvents"\s*:\s*\[', s)
    i = m.end() if m else s.index("[") + 1
    start = i
    dec = json.JSONDecoder()
    ends = []
    while True:
        while s[i] in " \t\r\n,":
            i += 1
        if s[i] == "]":
            break
        _, i = dec.raw_decode(s, i)
        ends.append(i)
    return start, ends


def dumps(obj) -> str:
    """json.dumps that writes Decimal numbers digit for digit (no float rounding)."""
    marks: list[str] = []

    def default(o):
        if isinstance(o, Decimal):
            marks.append(str(o))
            return f"\x00{len(marks) - 1}\x00"
        raise TypeError(type(o))

    text = json.dumps(obj, default=default)
    return re.sub(r'"\\u0000(\d+)\\u0000"', lambda m: marks[int(m.group(1))], text)


def write_trace(path: Path, top: dict, events: list, gz: bool = False) -> Path:
    data = dumps({**top, "traceEvents": events}).encode()
    Path(path).write_bytes(gzip.compress(data, 6) if gz else data)
    return Path(path)
