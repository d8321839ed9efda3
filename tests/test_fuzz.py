"""Issue 6, property-based: whatever the input, the loader either loads it or raises the
project's own TraceanalyzeError (exit 2 on the command line) — never another exception.

Fixed budget and derandomized (same examples on every run) so CI stays fast and reproducible.
Where the input is a well-formed event list, the loaded counts are also checked against
counts computed here from the generated events.
"""

from __future__ import annotations

import gzip
import json
import tempfile
from collections import Counter
from decimal import Decimal
from pathlib import Path

import duckdb
import tracejson as tj
from conftest import REAL_TRACES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceanalyze.errors import TraceanalyzeError
from traceanalyze.load import load_trace_dir

FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

OUTCOMES: Counter = Counter()  # what the examples came to (for a look with -s; see the last test)

# ---------------------------------------------------------------- generated event lists

good_ts = st.one_of(
    st.integers(min_value=0, max_value=2_000_000),
    st.integers(min_value=1_600_000_000_000_000, max_value=1_800_000_000_000_000),  # epoch us
    st.decimals(min_value=0, max_value=10**13, places=3, allow_nan=False, allow_infinity=False),
    st.decimals(min_value=1_700_000_000_000_000, max_value=1_700_100_000_000_000, places=3,
                allow_nan=False, allow_infinity=False),  # epoch us with ns digits
)
odd_number = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-(10**16), max_value=10**16),  # around the int64-ns limit (9.2e15 us)
    st.sampled_from([Decimal("-0.5"), Decimal("1e400"), Decimal("9.3e15"), 2**63, -(2**63)]),
)
odd_value = st.one_of(
    st.none(), st.booleans(), st.text(max_size=8), st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
names = st.one_of(
    st.sampled_from(["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#x", "aten::mm", "[memory]",
                     "gloo:all_reduce", "ncclDevKernel_AllReduce_Sum_f32", "cudaLaunchKernel",
                     "Memcpy HtoD (Pageable -> Device)", "record_param_comms", ""]),
    st.text(max_size=12),
)
phases = st.one_of(st.sampled_from(["X", "X", "X", "B", "E", "i", "M", "s", "f", "C"]), odd_value)
cats = st.one_of(st.sampled_from(["cpu_op", "user_annotation", "gpu_user_annotation", "kernel",
                                  "cuda_runtime", "gpu_memcpy", "gpu_memset", "Operator", "Kernel",
                                  "Runtime", "cpu_instant_event", "Trace"]), odd_value)
arg_values = st.one_of(st.integers(min_value=-5, max_value=5), odd_number, odd_value)
args = st.one_of(
    st.fixed_dictionaries({}, optional={
        "correlation": arg_values, "External id": arg_values, "device": arg_values,
        "stream": arg_values, "Bytes": arg_values, "bytes": arg_values, "Collective name": odd_value,
        "In msg nelems": arg_values, "dtype": odd_value, "Total Allocated": arg_values,
        "Device Type": arg_values, "Input Dims": st.just([[8, 512], []]), "name": odd_value,
    }),
    odd_value,
)
event = st.fixed_dictionaries({}, optional={
    "ph": phases, "cat": cats, "name": st.one_of(names, odd_value),
    "pid": st.one_of(st.integers(0, 3), st.text(max_size=4), odd_value),
    "tid": st.one_of(st.integers(0, 3), st.text(max_size=4), odd_value),
    "ts": st.one_of(good_ts, good_ts, odd_number, odd_value),
    "dur": st.one_of(st.integers(0, 1000), st.decimals(0, 1000, places=3), odd_number, odd_value),
    "args": args, "id": st.one_of(st.integers(0, 5), odd_value), "s": st.sampled_from(["t", "g"]),
})
element = st.one_of(event, event, event, event, odd_value, odd_number)
tops = st.fixed_dictionaries({}, optional={
    "schemaVersion": st.integers(0, 2),
    "baseTimeNanoseconds": st.one_of(st.integers(0, 2 * 10**18), st.integers(0, 2**63), odd_value),
    "distributedInfo": st.one_of(st.fixed_dictionaries({}, optional={
        "rank": st.one_of(st.integers(-1, 3), odd_value), "world_size": st.one_of(st.integers(0, 4), odd_value),
        "backend": st.one_of(st.just("nccl"), odd_value)}), odd_value),
    "host_name": st.one_of(st.just("node"), odd_value),
    "deviceProperties": st.one_of(st.lists(st.fixed_dictionaries({"name": odd_value}), max_size=1), odd_value),
})


def try_load(folder: Path) -> Path | None:
    """Load; None when the loader refused the input with its own error. Anything else propagates."""
    db = folder.parent / "fuzz.duckdb"
    try:
        load_trace_dir(folder, db, reuse=False)
    except TraceanalyzeError as exc:
        message = exc.format_message()
        assert message and "\n" not in message and "Traceback" not in message
        assert "rank0.json" in message, message  # the one-line error names the file
        OUTCOMES[message.split(": ", 1)[-1][:50]] += 1
        return None
    OUTCOMES["loaded"] += 1
    return db


LIMIT_NS = 2**62  # the loader's documented time range: |ns| up to 2**62 (year 2116)


def ns_in_range(v, base: int = 0) -> bool:
    return tj.is_number(v) and abs(int(Decimal(v) * 1000) + base) <= LIMIT_NS


def expected_counts(top: dict, elements: list) -> dict:
    base = tj.base_ns(top) if 0 <= tj.base_ns(top) < 2**62 else 0
    events = [e for e in elements if isinstance(e, dict)]

    def complete(e):
        return (e.get("ph") == "X" and ns_in_range(e.get("ts"), base) and ns_in_range(e.get("dur"))
                and e["dur"] >= 0)

    steps = {int(tj.STEP_NAME.match(e["name"]).group(1)) for e in events
             if complete(e) and isinstance(e.get("name"), str) and tj.STEP_NAME.match(e["name"])
             and e.get("cat") != "gpu_user_annotation"}
    return {
        "cpu_ops": sum(1 for e in events if complete(e) and e.get("cat") in ("cpu_op", "Operator")),
        "kernels": sum(1 for e in events if complete(e) and e.get("cat") in tj.GPU_CATS),
        "steps": steps,
    }


def _plausible_count(value, lowest: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lowest <= value < 1 << 24


def _rank_outside_world(top: dict) -> bool:
    info = top.get("distributedInfo")
    if not isinstance(info, dict):
        return False
    rank, world = info.get("rank"), info.get("world_size")
    return _plausible_count(rank, 0) and _plausible_count(world, 1) and rank >= world


@FUZZ
@given(top=tops, elements=st.lists(element, max_size=25), bare=st.booleans(), gz=st.booleans())
def test_generated_event_lists_load_or_fail_cleanly(top, elements, bare, gz):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "t"
        folder.mkdir()
        text = tj.dumps(elements if bare else {**top, "traceEvents": elements}).encode()
        (folder / ("rank0.json.gz" if gz else "rank0.json")).write_bytes(gzip.compress(text) if gz else text)
        db = try_load(folder)
        # a well-formed trace always loads; the one refusal it can earn is a distributedInfo that
        # contradicts itself (a rank outside its own world size)
        assert (db is None) == (not bare and _rank_outside_world(top)), OUTCOMES
        if db is None:
            return
        with duckdb.connect(str(db), read_only=True) as con:
            (n,) = con.execute("SELECT count(*) FROM raw_events").fetchone()
            (pairs,) = con.execute(
                "SELECT coalesce(sum(count), 0) FROM load_issues WHERE kind = 'begin-end'").fetchone()
            assert n + pairs == len(elements)  # every element is a row (B/E pairs: one row each)
            if not any(isinstance(e, dict) and e.get("ph") in ("B", "E") for e in elements):
                want = expected_counts({} if bare else top, elements)
                (cpu,) = con.execute("SELECT count(*) FROM cpu_ops").fetchone()
                (gpu,) = con.execute("SELECT count(*) FROM kernels").fetchone()
                steps = {s for (s,) in con.execute("SELECT step FROM steps WHERE NOT synthetic").fetchall()}
                assert (cpu, gpu, steps) == (want["cpu_ops"], want["kernels"], want["steps"])


# ---------------------------------------------------------------- mutated real trace

SMALL = next((REAL_TRACES / "hta-critical-path-cuda-event-sync").glob("*.json.gz"))


def small_text() -> bytes:
    return tj.read_bytes(SMALL)


mutation = st.one_of(
    st.tuples(st.just("flip"), st.floats(0, 1), st.integers(0, 255)),
    st.tuples(st.just("cut"), st.floats(0, 1), st.just(0)),
    st.tuples(st.just("delete"), st.floats(0, 1), st.integers(1, 64)),
    st.tuples(st.just("insert"), st.floats(0, 1), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("insert"), st.floats(0, 1), st.sampled_from([b"{", b"}", b"[", b"]", b",", b'"', b"\\",
                                                                     b"\xff", b"NaN", b"-", b"e9"])),
)


def mutate(data: bytes, mutations) -> bytes:
    out = bytearray(data)
    for kind, where, arg in mutations:
        i = min(int(where * len(out)), max(len(out) - 1, 0))
        if kind == "flip" and out:
            out[i] = arg
        elif kind == "cut":
            del out[i:]
        elif kind == "delete":
            del out[i:i + arg]
        elif kind == "insert":
            out[i:i] = arg
    return bytes(out)


@FUZZ
@given(mutations=st.lists(mutation, min_size=1, max_size=4), gz=st.booleans())
def test_mutated_real_trace_loads_or_fails_cleanly(mutations, gz):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "t"
        folder.mkdir()
        data = mutate(small_text(), mutations)
        (folder / ("rank0.json.gz" if gz else "rank0.json")).write_bytes(gzip.compress(data) if gz else data)
        try_load(folder)


@FUZZ
@given(mutations=st.lists(mutation, min_size=1, max_size=3))
def test_mutated_gzip_bytes_load_or_fail_cleanly(mutations):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "t"
        folder.mkdir()
        (folder / "rank0.json.gz").write_bytes(mutate(SMALL.read_bytes(), mutations))
        try_load(folder)


def test_the_mutation_source_is_a_loadable_trace():
    """The unmutated source loads, with its event count (the fuzz above starts from a good trace)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "t"
        folder.mkdir()
        (folder / "rank0.json").write_bytes(small_text())
        db = try_load(folder)
        assert db is not None
        with duckdb.connect(str(db), read_only=True) as con:
            (n,) = con.execute("SELECT count(*) FROM raw_events").fetchone()
        assert n == len(json.loads(small_text())["traceEvents"])
