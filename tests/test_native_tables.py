"""The per-rank tables the native reader builds as it parses (threads, steps, cpu_ops,
annotations, runtime: native/src/rank_tables.rs) against the rules db/schema.sql states,
computed here straight from the generated events; the rows the map fixes after the read (B/E
pairs, a time base written after the events) give the tables of the fixed rows; and the
reader's peer rank of a send / recv agrees with the SQL macro the kernels table uses."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import duckdb
import pytest
import tracejson as tj
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from traceanalyze import _native
from traceanalyze import db as tracedb
from traceanalyze.load import load_trace_dir

TABLES = ("threads", "steps", "cpu_ops", "annotations", "runtime", "kernels")
SYNC = re.compile(r"(Synchronize|StreamWaitEvent|EventQuery|StreamQuery)", re.IGNORECASE)
CUT_SHORT = (1, 10)  # tables/00_parameters.sql: cut_short_max_ratio = 0.1

# ---------------------------------------------------------------- the rules, from the events


def _text(v) -> str | None:
    """pid / tid / label as the reader stores them: text, numbers as written."""
    return None if v is None else str(v)


def _group_rank(v) -> int | None:
    """A rank named by an argument: a JSON integer or a string of digits (a minus first) that an
    INTEGER holds."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        number = v
    elif isinstance(v, str) and re.fullmatch(r"-?[0-9]+", v):
        number = int(v)
    else:
        return None
    return number if -(2**31) <= number < 2**31 else None


def peer_of(name, args) -> int | None:
    if not isinstance(args, dict):
        return None
    for key in ("Dst Rank", "Src Rank"):
        if (r := _group_rank(args.get(key))) is not None:
            return r
    concrete = args.get("Concrete Inputs")
    if name in ("c10d::send", "c10d::recv_") and isinstance(concrete, list) and len(concrete) > 2:
        return _group_rank(concrete[2])
    return None


# the columns after the key that order twins (native/src/rank_tables.rs: the gathered columns of
# each table but pid, tid, ts_ns, dur_ns, name, external_id, seq_number, in the reader's order)
CONTENT = {"cpu_ops": ["input_dims", "input_type", "collective_name", "in_msg_nelems", "dtype", "pg_name",
                       "pg_desc", "pg_ranks", "collective_seq", "group_size", "other_args"],
           "annotations": ["cat", "input_dims", "input_type"]}


def self_times(rows: list[dict], table: str) -> list[int]:
    """Each row's exclusive time, by the schema's rule, pair by pair: its duration less the union
    of the other rows of its thread (pid, tid) that start and end within it; of two rows with the
    same span the later in (name, External id, Sequence number, then the rest of the row as the
    reader wrote it; byte order, NULL last) is inside the earlier."""
    def order(k: int) -> tuple:
        e = rows[k]
        raw = e.get("_raw") or {}
        keys = [e.get("name"), _int_arg(e, "External id"), _int_arg(e, "Sequence number"),
                *(raw.get(c) for c in CONTENT[table])]
        # (then file order: rows equal in all of it are alike in every column compared)
        return (*(part for v in keys for part in (v is None, v.encode() if isinstance(v, str) else v or 0)), k)

    out = []
    for i, r in enumerate(rows):
        lo, hi = r["ts"], r["ts"] + r["dur"]
        inside = sorted(
            (s["ts"], s["ts"] + s["dur"]) for k, s in enumerate(rows)
            if k != i and _text(s.get("pid")) == _text(r.get("pid")) and _text(s.get("tid")) == _text(r.get("tid"))
            and lo <= s["ts"] and s["ts"] + s["dur"] <= hi
            and (s["ts"] > lo or s["ts"] + s["dur"] < hi or order(k) > order(i)))
        covered, reach = 0, None
        for a, b in inside:  # the union's length
            if reach is None or a > reach:
                covered += b - a
                reach = b
            elif b > reach:
                covered += b - reach
                reach = b
        out.append(hi - lo - covered)
    return out


def expected_tables(events: list[dict], rank: int, raw: list[dict] | None = None) -> dict[str, Counter]:
    """Every table as a multiset of rows (the columns compared), from the events themselves
    (their integer µs as ns). `raw`: each event's raw_events row as the reader wrote it (only to
    order rows that nothing else tells apart)."""
    raw = raw or [{}] * len(events)
    events = [{**e, **{k: e[k] * 1000 for k in ("ts", "dur") if isinstance(e.get(k), int)}, "_raw": r}
              for e, r in zip(events, raw)]
    xs = [e for e in events if e.get("ph") == "X" and isinstance(e.get("ts"), int)]
    ok = [e for e in xs if isinstance(e.get("dur"), int) and e["dur"] >= 0]
    marks: dict[int, tuple[int, int]] = {}
    for e in ok:
        m = tj.STEP_NAME.match(e["name"]) if isinstance(e.get("name"), str) else None
        if m and e.get("cat") != "gpu_user_annotation" and int(m.group(1)) < 2**63:
            n, lo, hi = int(m.group(1)), e["ts"], e["ts"] + e["dur"]
            a, b = marks.get(n, (lo, hi))
            marks[n] = (min(a, lo), max(b, hi))
    synthetic = not marks
    if synthetic:  # every complete event but the Trace span (a missing dur counts as 0)
        spans = [(e["ts"], e["ts"] + (e["dur"] if isinstance(e.get("dur"), int) else 0))
                 for e in xs if e.get("cat") != "Trace"]
        if spans:
            marks = {0: (min(lo for lo, _ in spans), max(hi for _, hi in spans))}
    ordered = sorted(marks.items(), key=lambda kv: (kv[1][0], kv[0]))
    durs = [hi - lo for _, (lo, hi) in ordered]
    steps = Counter()
    for i, (n, (lo, hi)) in enumerate(ordered):
        last = i == len(ordered) - 1
        cut = last and not synthetic and len(ordered) > 1 and \
            (hi - lo) * CUT_SHORT[1] < CUT_SHORT[0] * min(durs[:-1])
        steps[(rank, n, lo, hi - lo, hi, synthetic, i, cut)] += 1
    starts = [lo for _, (lo, _) in ordered]

    def step_of(ts: int) -> int | None:
        i = max((k for k, s in enumerate(starts) if s <= ts), default=None)
        return ordered[i][0] if i is not None and ts < ordered[i][1][1] else None

    threads: dict[tuple, list] = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") in ("thread_name", "process_name"):
            names = threads.setdefault((_text(e.get("pid")), _text(e.get("tid"))), [None, None])
            label = tj.args(e).get("name")
            slot = 0 if e["name"] == "thread_name" else 1
            if isinstance(label, str) and (names[slot] is None or label.encode() < names[slot].encode()):
                names[slot] = label
    out = {"steps": steps, "threads": Counter((rank, *k, *v) for k, v in threads.items())}
    ops = [e for e in ok if e.get("cat") in ("cpu_op", "Operator")]
    ops_self = self_times(ops, "cpu_ops")
    out["cpu_ops"] = Counter(
        (rank, step_of(e["ts"]), e.get("name"), _text(e.get("pid")), _text(e.get("tid")), e["ts"], e["dur"],
         e["ts"] + e["dur"], own,
         peer_of(e.get("name"), e.get("args"))
         if e.get("name") in ("c10d::send", "c10d::recv_") or tj.args(e).get("Collective name") is not None else None)
        for e, own in zip(ops, ops_self))
    ranges = [e for e in ok if e.get("cat") in ("user_annotation", "gpu_user_annotation")
              and isinstance(e.get("name"), str) and not e["name"].startswith("ProfilerStep#")]
    out["annotations"] = Counter(
        (rank, step_of(e["ts"]), e["name"], e["cat"] == "gpu_user_annotation", e["ts"], e["dur"], own)
        for e, own in zip(ranges, self_times(ranges, "annotations")))
    out["runtime"] = Counter(
        (rank, step_of(e["ts"]), e.get("name"), e["ts"], e["dur"],
         None if e.get("name") is None else bool(SYNC.search(e["name"])))
        for e in ok if e.get("cat") in ("cuda_runtime", "Runtime", "cuda_driver"))
    out["kernels"] = expected_kernels(ok, rank, step_of)
    return out


GPU_CATS = ("kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset", "cuda_profiler_range")
LAUNCH_NAMES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchCooperativeKernel", "hipLaunchKernel",
                "hipModuleLaunchKernel")


def _decimal(v) -> int | None:
    """pid / tid as a device / stream: an integer written in decimal digits (a minus first)."""
    text = _text(v)
    return int(text) if text is not None and re.fullmatch(r"-?[0-9]+", text) else None


def _int_arg(e: dict, key: str) -> int | None:
    v = tj.args(e).get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def expected_kernels(ok: list[dict], rank: int, step_of) -> Counter:
    """The kernels table by the schema's rules: classes by priority (kernel_classes.csv), the n-th
    range profiler kernel paired with the n-th launch when the counts agree, one row per runtime
    call carrying the correlation (its start and end)."""
    classes = sorted(tracedb.kernel_classes())
    runtime = [e for e in ok if e.get("cat") in ("cuda_runtime", "Runtime", "cuda_driver")]
    calls: dict[int, list] = {}
    for e in runtime:
        if (c := _int_arg(e, "correlation")) is not None:
            calls.setdefault(c, []).append((e["ts"], e["ts"] + e["dur"], step_of(e["ts"])))
    launches = sorted((e["ts"], c) for e in runtime if (c := _int_arg(e, "correlation")) is not None
                      and isinstance(e.get("name"), str) and e["name"].startswith(LAUNCH_NAMES))
    gpu = [e for e in ok if e.get("cat") in GPU_CATS]
    ranges = sorted((e for e in gpu if e["cat"] == "cuda_profiler_range"),
                    key=lambda e: (e["ts"], e.get("name") is None, e.get("name") or ""))
    places: dict[tuple, list] = {}
    for n, e in enumerate(ranges):
        places.setdefault((e["ts"], e.get("name")), []).append(
            launches[n][1] if len(launches) == len(ranges) else None)
    rows = Counter()
    for e in gpu:
        name = e.get("name")
        kind = next((k for _, cat_re, name_re, k in classes
                     if name is not None and re.search(cat_re, e["cat"]) and re.search(name_re, name)), None)
        own = _int_arg(e, "correlation")
        paired = places[(e["ts"], name)] if e["cat"] == "cuda_profiler_range" else [None]
        for place in paired:
            c = own if own is not None else place
            for launch_ts, launch_end, launch_step in calls.get(c, [(None,) * 3]) if c is not None else [(None,) * 3]:
                step = launch_step if launch_step is not None else step_of(e["ts"])
                device = _int_arg(e, "device")
                stream = _int_arg(e, "stream")
                rows[(rank, step, kind, name, _decimal(e.get("pid")) if device is None else device,
                      _decimal(e.get("tid")) if stream is None else stream, e["ts"], e["dur"], c, launch_ts,
                      launch_end)] += 1
    return rows


COLUMNS = {
    "threads": "rank, pid, tid, thread_name, process_name",
    "steps": "rank, step, ts_ns, dur_ns, end_ns, synthetic, step_index, cut_short",
    "cpu_ops": "rank, step, name, pid, tid, ts_ns, dur_ns, end_ns, self_ns, peer_group_rank",
    "annotations": "rank, step, name, on_gpu, ts_ns, dur_ns, self_ns",
    "runtime": "rank, step, name, ts_ns, dur_ns, is_sync",
    "kernels": "rank, step, kind, name, device, stream, ts_ns, dur_ns, correlation, launch_ts_ns, launch_end_ns",
}


def tables_in(con: duckdb.DuckDBPyConnection, source) -> dict[str, Counter]:
    """`source(table)`: the SQL relation of a table; its rows as multisets of COLUMNS."""
    return {t: Counter(con.execute(f"SELECT {COLUMNS[t]} FROM {source(t)}").fetchall()) for t in TABLES}


# ---------------------------------------------------------------- generated events

names = st.sampled_from([
    "ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#2", "ProfilerStep#007", "ProfilerStep#x", "ProfilerStep#",
    "ProfilerStep#99999999999999999999", "aten::mm", "c10d::send", "c10d::recv_", "record_param_comms",
    "cudaLaunchKernel", "cuLaunchKernelEx", "ncclDevKernel_AllReduce", "Memcpy HtoD", "void c10d::x", "cudaDeviceSynchronize", "CUDAEVENTQUERY", "cudaStreamſynchronize", "gloo:all_reduce",
    "enumerate(DataLoader)", "thread_name", "process_name", "",
])
ranks_arg = st.one_of(st.integers(-3, 8), st.integers(2**31 - 2, 2**31 + 1), st.sampled_from(
    ["3", "-1", " 3", "3.0", "+2", "007", "x", True, None, 2.0, [1]]))
args = st.fixed_dictionaries({}, optional={
    "Dst Rank": ranks_arg, "Src Rank": ranks_arg, "Concrete Inputs": st.lists(ranks_arg, max_size=4),
    "Collective name": st.sampled_from(["send", "recv", "allreduce"]), "name": st.text(max_size=4),
    "Process Group Description": st.sampled_from(["undefined", " undefined ", "\tundefined", "mesh_tp", ""]),
    "correlation": st.integers(0, 3), "device": st.integers(0, 2), "stream": st.integers(0, 9),
    "External id": st.integers(0, 2), "Sequence number": st.integers(0, 2),
})
event = st.fixed_dictionaries({"ph": st.sampled_from(["X", "X", "X", "X", "M", "i"])}, optional={
    "cat": st.sampled_from(["cpu_op", "Operator", "user_annotation", "gpu_user_annotation", "cuda_runtime",
                            "Runtime", "cuda_driver", "kernel", "Kernel", "gpu_memcpy", "Memset",
                            "cuda_profiler_range", "Trace", None]),
    "name": st.one_of(names, st.none()),
    "pid": st.one_of(st.integers(0, 2), st.sampled_from(["a", "b"])),
    "tid": st.one_of(st.integers(0, 2), st.sampled_from(["t", "u"])),
    "ts": st.integers(0, 1000),
    "dur": st.one_of(st.integers(0, 300), st.integers(-5, -1)),
    "args": args,
})


@pytest.fixture(scope="module")
def schema():
    """A database with the documented (empty) tables."""
    with duckdb.connect() as con:
        tracedb.create_schema(con)
        yield con


def _reader_tables(con, tmp: Path, events: list[dict], rank: int) -> dict[str, Counter]:
    trace = tj.write_trace(tmp / "rank.json", {}, events)
    out = tmp / "shard"
    out.mkdir()
    got = _native.write_raw_events_parquet(str(trace), str(out / "raw_events.parquet"), rank,
                                           tables_dir=str(out), cut_short=CUT_SHORT,
                                           kernel_classes=tracedb.kernel_classes())
    assert sorted(got["tables"]) == sorted(TABLES)
    for t in TABLES:  # (into the schema's tables: the files have the documented columns and types)
        con.execute(f"DELETE FROM {t}")
        con.execute(f"INSERT INTO {t} BY NAME SELECT * FROM read_parquet('{out / t}.parquet')")
        assert con.execute(f"DESCRIBE SELECT * FROM read_parquet('{out / t}.parquet')").fetchall() \
            == con.execute(f"DESCRIBE {t}").fetchall()
    found = tables_in(con, lambda t: t)
    assert got["tables"] == {t: sum(found[t].values()) for t in TABLES}
    return found


@settings(max_examples=120, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(events=st.lists(event, max_size=30), rank=st.integers(0, 5))
@example(events=[  # two steps, the last one cut short; an op in each, one after the steps
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 0, "dur": 100},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "ts": 100, "dur": 5},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": 5},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 103, "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 400, "dur": 1},
], rank=1)
@example(events=[  # nesting: two overlapping children, a grandchild, twins, a child ending late, another thread
    {"ph": "X", "cat": "cpu_op", "name": "parent", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
    {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 10, "dur": 30},
    {"ph": "X", "cat": "cpu_op", "name": "c", "pid": 1, "tid": 1, "ts": 30, "dur": 30},
    {"ph": "X", "cat": "cpu_op", "name": "d", "pid": 1, "tid": 1, "ts": 20, "dur": 10},
    {"ph": "X", "cat": "cpu_op", "name": "twin", "pid": 1, "tid": 1, "ts": 70, "dur": 10},
    {"ph": "X", "cat": "cpu_op", "name": "twin", "pid": 1, "tid": 1, "ts": 70, "dur": 10},
    {"ph": "X", "cat": "cpu_op", "name": "late", "pid": 1, "tid": 1, "ts": 90, "dur": 11},
    {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 2, "ts": 10, "dur": 30},
    {"ph": "X", "cat": "user_annotation", "name": "outer", "pid": 1, "tid": 1, "ts": 0, "dur": 50},
    {"ph": "X", "cat": "user_annotation", "name": "inner", "pid": 1, "tid": 1, "ts": 5, "dur": 5},
], rank=0)
@example(events=[  # twins that only their args tell apart: which one holds the time follows the rows' content
    {"ph": "X", "cat": "cpu_op", "name": "c10d::send", "pid": 1, "tid": 1, "ts": 0, "dur": 10,
     "args": {"Dst Rank": 3, "Collective name": "send"}},
    {"ph": "X", "cat": "cpu_op", "name": "c10d::send", "pid": 1, "tid": 1, "ts": 0, "dur": 10,
     "args": {"Dst Rank": 2}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 2, "dur": 3,
     "args": {"External id": 9}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 2, "dur": 3,
     "args": {"External id": 8}},
], rank=0)
@example(events=[  # range profiler kernels paired with launches; a correlation two runtime calls carry
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 1,
     "args": {"correlation": 1}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 20, "dur": 1,
     "args": {"correlation": 2}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": 25, "dur": 1,
     "args": {"correlation": 2}},
    {"ph": "X", "cat": "cuda_profiler_range", "name": "k", "pid": 0, "tid": 7, "ts": 150, "dur": 0},
    {"ph": "X", "cat": "cuda_profiler_range", "name": "ncclDevKernel_AllReduce", "pid": 0, "tid": 7, "ts": 160,
     "dur": 0},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": "0", "tid": "x", "ts": 40, "dur": 3,
     "args": {"correlation": 3, "stream": 4}},
], rank=0)
def test_the_reader_builds_the_tables_the_schema_states(schema, tmp_path_factory, events, rank):
    tmp = tmp_path_factory.mktemp("native")
    got = _reader_tables(schema, tmp, events, rank)
    relation = schema.execute(f"SELECT * FROM read_parquet('{tmp / 'shard' / 'raw_events.parquet'}')")
    columns = [d[0] for d in relation.description]
    raw = [dict(zip(columns, row)) for row in relation.fetchall()]
    assert len(raw) == len(events)  # (one row per event, in file order)
    assert got == expected_tables(events, rank, raw)


def test_a_named_trace_gives_every_table_its_rows(schema, tmp_path):
    """A small trace with each kind of row: the counts and the steps, by hand."""
    events = [
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 8, "args": {"name": "main"}},
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 8, "args": {"name": "python3"}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#5", "pid": 7, "tid": 8, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#6", "pid": 7, "tid": 8, "ts": 100, "dur": 90},
        {"ph": "X", "cat": "cpu_op", "name": "c10d::send", "pid": 7, "tid": 8, "ts": 120, "dur": 10,
         "args": {"Concrete Inputs": ["", "", "3"]}},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "forward", "pid": 0, "tid": 7, "ts": 50, "dur": 10},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 7, "tid": 8, "ts": 60, "dur": 1},
    ]
    got = _reader_tables(schema, tmp_path, events, 2)
    assert got["threads"] == Counter({(2, "7", "8", "main", "python3"): 1})
    # ProfilerStep#6 (90 us) is not under a tenth of #5 (100 us): not cut short
    assert got["steps"] == Counter({(2, 5, 0, 100_000, 100_000, False, 0, False): 1,
                                    (2, 6, 100_000, 90_000, 190_000, False, 1, False): 1})
    assert got["cpu_ops"] == Counter({(2, 6, "c10d::send", "7", "8", 120_000, 10_000, 130_000, 10_000, 3): 1})
    assert got["annotations"] == Counter({(2, 5, "forward", True, 50_000, 10_000, 10_000): 1})
    assert got["runtime"] == Counter({(2, 5, "cudaStreamSynchronize", 60_000, 1_000, True): 1})


def test_exclusive_times_by_hand(schema, tmp_path):
    """self_ns: a parent whose two children overlap (their union counts once), a grandchild, a
    span recorded twice (one copy inside the other), a child ending after its parent (not inside
    it), the same name on another thread (inside nothing)."""
    op = lambda name, tid, ts, dur: {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid,  # noqa: E731
                                     "ts": ts, "dur": dur}
    events = [op("parent", 1, 0, 100), op("b", 1, 10, 30), op("c", 1, 30, 30), op("d", 1, 20, 10),
              op("twin", 1, 70, 10), op("twin", 1, 70, 10), op("late", 1, 90, 11), op("b", 2, 10, 30),
              {"ph": "X", "cat": "user_annotation", "name": "outer", "pid": 1, "tid": 1, "ts": 0, "dur": 50},
              {"ph": "X", "cat": "user_annotation", "name": "inner", "pid": 1, "tid": 1, "ts": 5, "dur": 5}]
    got = _reader_tables(schema, tmp_path, events, 0)
    own = Counter((row[2], row[4], row[8]) for row in got["cpu_ops"].elements())
    # parent: 100 less b..c (10-60, 50) and the twins (70-80, 10); b: less d; late ends at 101 > 100
    assert own == Counter({("parent", "1", 40_000): 1, ("b", "1", 20_000): 1, ("c", "1", 30_000): 1,
                           ("d", "1", 10_000): 1, ("twin", "1", 0): 1, ("twin", "1", 10_000): 1,
                           ("late", "1", 11_000): 1, ("b", "2", 30_000): 1})
    assert sorted((row[2], row[6]) for row in got["annotations"]) == [("inner", 5_000), ("outer", 45_000)]


# ---------------------------------------------------------------- rows fixed by the map


def test_begin_end_pairs_and_a_late_time_base_reach_the_tables(tmp_path):
    """B/E pairs become complete events, and a baseTimeNanoseconds followed by 100 KB of other keys
    (beyond the reader's peek at the file's end) shifts every time: the tables are those of the
    fixed rows."""
    base = 1_700_000_000_000_000_000
    events = [{"ph": "B", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0},
              {"ph": "B", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10},
              {"ph": "E", "pid": 1, "tid": 1, "ts": 30},
              {"ph": "E", "pid": 1, "tid": 1, "ts": 100}]
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "rank0.json").write_text(json.dumps({"traceEvents": events, "baseTimeNanoseconds": base,
                                                   "padding": "x" * 100_000}))
    db = tmp_path / "t.duckdb"
    load_trace_dir(folder, db, reuse=False)
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT step, ts_ns, dur_ns, synthetic FROM steps").fetchall() == \
            [(1, base, 100_000, False)]
        assert con.execute("SELECT step, name, ts_ns, dur_ns FROM cpu_ops").fetchall() == \
            [(1, "aten::mm", base + 10_000, 20_000)]


# ---------------------------------------------------------------- one reading of a peer rank

@pytest.fixture(scope="module")
def macros():
    with duckdb.connect() as con:
        tracedb.create_macros(con)
        yield con


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.integers(-3, 3),
              st.floats(allow_nan=False, allow_infinity=False), st.text(alphabet="0123456789-+ .e_x", max_size=6)),
    lambda inner: st.lists(inner, max_size=3), max_leaves=4)


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["c10d::send", "c10d::recv_", "record_param_comms", None]),
       other=st.one_of(st.fixed_dictionaries({}, optional={"Dst Rank": json_values, "Src Rank": json_values,
                                                            "Concrete Inputs": json_values}),
                       json_values))
@example(name="c10d::send", other={"Dst Rank": "2147483648", "Concrete Inputs": ["", "", "-7"]})
def test_the_reader_and_the_sql_macro_read_a_peer_rank_alike(macros, name, other):
    text = json.dumps(other)
    (sql,) = macros.execute("SELECT p2p_peer_arg(?, ?)", [name, text]).fetchone()
    assert _native.p2p_peer_arg(name, text) == sql == peer_of(name, other)
