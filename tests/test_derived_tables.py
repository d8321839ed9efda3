"""The per-rank tables the native reader derives from its one-pass tables (native/src/derived:
collectives, phases, GPU activity, code regions, FLOPs, ...) against the SQL that built them
until it did (tests/data/derived_oracle/, run here over the same one-pass tables), on generated
traces full of what those tables handle: nested and overlapping ops on several threads, gloo
runs paired with their c10d calls, sends and receives, NCCL kernels and copies launched from
either thread, allocator events, FLOP-formula ops with their shapes, DataLoader, DDP forward,
optimizer and backward ranges, events outside every step.

Every start time is distinct (the SQL numbered ties in no stated order), and the args are what
the profiler writes (integers in shapes: the reader reads JSON strictly, SQL's casts leniently;
CHANGELOG). The readings of names the reader shares with SQL macros (collective_op,
dtype_bytes, is_data_range) are checked against those macros too."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceanalyze import db as tracedb
from traceanalyze.extension import native as _native
from traceanalyze.load.map import pg_config_rows
from traceanalyze.load.read import DERIVED_TABLES, NATIVE_TABLES, _derived_params

ORACLE = Path(__file__).parent / "data" / "derived_oracle"
MAIN, OTHER, PID = "1", "2", "100"

# ---------------------------------------------------------------- generated traces

dim = st.integers(1, 6)
FLOAT_TYPES = st.sampled_from(["float", "c10::BFloat16", "c10::Half", "double"])


@st.composite
def op_args(draw, name: str) -> dict:
    """The args torch writes for `name` (shapes sometimes missing or mismatched)."""
    d = lambda: draw(dim)  # noqa: E731
    t = draw(FLOAT_TYPES)
    shapes = {
        "aten::mm": lambda: [[d(), k := d()], [k if draw(st.booleans()) else d(), d()]],
        "aten::addmm": lambda: [[d()], [d(), k := d()], [k, d()]],
        "aten::linear": lambda: [[d(), d(), k := d()], [d(), k], [d()]],
        "aten::matmul": lambda: draw(st.sampled_from([[[d(), d(), k := d()], [k, d()]], [[k := d()], [k]],
                                                      [[d(), k := d()], [k]]])),
        "aten::conv2d": lambda: [[d(), c := d(), d() + 4, d() + 4], [d(), c, 3, 3], [d()]],
        "aten::convolution_backward": lambda: [[d(), co := d(), d() + 2, d() + 2], [d(), c := d(), 6, 6],
                                               [co, c, 3, 3]],
        "aten::_scaled_dot_product_flash_attention": lambda: [[b := d(), h := d(), s := d(), e := d()],
                                                              [b, h, s, e], [b, h, s, d()]],
        "aten::native_layer_norm": lambda: [[d(), d()], [d()], [d()]],
        "aten::add": lambda: [[d(), d()], draw(st.sampled_from([[], [1], [d(), d()]]))],
        "aten::addcmul_": lambda: [[d()], [d()], [d()]],
        "aten::embedding": lambda: [[d() * 10, d()], [d(), d()]],
        "aten::copy_": lambda: [[d()], [d()]],
        "aten::view": lambda: [[d(), d()], []],
        "c10d::alltoall_base_": lambda: [[d(), 8], [d(), 8]],
        "c10d::allreduce_": lambda: [[d() * 4]],
    }
    args: dict = {"External id": draw(st.integers(1, 12))}
    if name in shapes and draw(st.integers(0, 5)):
        args["Input Dims"] = shapes[name]()
        kinds = {"aten::embedding": [t, "long int"], "aten::copy_": ["long int", "long int"]}
        args["Input type"] = kinds.get(name, [t] * len(args["Input Dims"]))
    if name in ("aten::conv2d", "aten::convolution_backward", "c10d::alltoall_base_", "c10d::send"):
        concrete = [""] * 11
        concrete[2] = str(draw(st.integers(0, 1)))
        concrete[3] = draw(st.sampled_from(["[1, 1]", "[2, 2]", "", "[2, 1]", "[1, -1]"]))
        concrete[4] = draw(st.sampled_from(["[0, 0]", "[1, 1]", "[3, 1]", ""]))
        concrete[5] = draw(st.sampled_from(["[1, 1]", "[2, 2]"]))
        concrete[10] = draw(st.sampled_from(["[True, True, False]", "[False, True, True]", ""]))
        args["Concrete Inputs"] = concrete
    if name == "record_param_comms":
        op = draw(st.sampled_from(["allreduce", "send", "recv", "all_to_all", "allgather", "barrier", "bogus!"]))
        args.update({"Collective name": op, "In msg nelems": d() * 100, "Out msg nelems": d() * 100,
                     "dtype": draw(st.sampled_from(["Float", "BFloat16", "Long"]))})
        if draw(st.booleans()):
            args.update({"Process Group Name": draw(st.sampled_from(["0", "1"])), "Process Group Ranks": "[0, 1]"})
        if op in ("send", "recv") and draw(st.booleans()):
            args["Dst Rank"] = draw(st.integers(0, 1))
        if op == "all_to_all" and draw(st.booleans()):
            args.update({"In split size": "[1, 2]", "Out split size": [2, 1]})
    return args


CPU_NAMES = ["aten::mm", "aten::addmm", "aten::linear", "aten::matmul", "aten::conv2d",
             "aten::convolution_backward", "aten::_scaled_dot_product_flash_attention",
             "aten::native_layer_norm", "aten::add", "aten::addcmul_", "aten::embedding", "aten::copy_",
             "aten::to", "aten::view", "c10d::allreduce_", "c10d::_reduce_scatter_base_", "c10d::broadcast_",
             "c10d::send", "c10d::recv_", "record_param_comms", "c10d::alltoall_base_",
             "_c10d_functional::all_reduce", "autograd::engine::evaluate_function: MmBackward0",
             "MmBackward0", "Optimizer.step#SGD.step", "nccl:all_reduce"]
ANNOTATION_NAMES = ["gloo:all_reduce", "gloo:broadcast", "gloo:send", "gloo:recv", "gloo:all_to_all",
                    "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                    "DistributedDataParallel.forward", "## data ##", "Optimizer.step#SGD.step",
                    "Optimizer.zero_grad#SGD.zero_grad", "my_region", "nccl:all_reduce", "fetch_batch"]
RUNTIME_NAMES = ["cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize", "cudaEventQuery"]
KERNELS = [("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"), ("kernel", "ampere_sgemm_128x64_tn"),
           ("kernel", "void at::native::elementwise_kernel"), ("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)"),
           ("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)")]


@st.composite
def traces(draw) -> tuple[dict, list[dict]]:
    """(the top-level keys, the events) of one rank's trace."""
    events: list[dict] = []
    serial = iter(range(1000))  # (each event's start gets a distinct ns part: no two start alike)

    def at(us: int) -> float:
        return us + next(serial) / 1000

    t = 0
    for step in range(draw(st.integers(0, 3))):
        t += draw(st.integers(0, 40))
        length = draw(st.integers(60, 400))
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step + 2}", "pid": PID,
                       "tid": MAIN, "ts": at(t), "dur": length})
        t += length
    span = max(t, 100) + 50
    time = st.integers(0, span)
    # (gloo as it runs, below: then no other c10d group call or gloo run, which would not pair)
    coherent = draw(st.booleans())
    pairable = ("c10d::allreduce_", "c10d::_reduce_scatter_base_", "c10d::broadcast_", "gloo:all_reduce",
                "gloo:broadcast", "gloo:all_to_all", "c10d::alltoall_base_")
    cpu_names = [n for n in CPU_NAMES if not (coherent and n in pairable)]
    annotation_names = [n for n in ANNOTATION_NAMES if not (coherent and n in pairable)]
    length = st.integers(0, 120)
    tid = st.sampled_from([MAIN, MAIN, MAIN, OTHER])
    for _ in range(draw(st.integers(0, 30))):
        name = draw(st.sampled_from(cpu_names))
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": PID, "tid": draw(tid), "ts": at(draw(time)),
                       "dur": draw(length), "args": draw(op_args(name))})
    # a pass of the loop: ops back to back with short gaps (Python between them)
    if draw(st.booleans()):
        clock = draw(time)
        for _ in range(draw(st.integers(2, 6))):
            name = draw(st.sampled_from(["MmBackward0", "autograd::engine::evaluate_function: AddBackward0",
                                         "aten::mm", "aten::add"]))
            dur = draw(st.integers(1, 40))
            events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": PID, "tid": MAIN, "ts": at(clock),
                           "dur": dur, "args": draw(op_args(name))})
            clock += dur + draw(st.integers(0, 30))
    for _ in range(draw(st.integers(0, 12))):
        name = draw(st.sampled_from(annotation_names))
        on = OTHER if name.startswith("gloo:") and not name.startswith(("gloo:send", "gloo:recv")) \
            and draw(st.booleans()) else draw(tid)
        event = {"ph": "X", "cat": draw(st.sampled_from(["user_annotation"] * 5 + ["gpu_user_annotation"])),
                 "name": name, "pid": PID, "tid": on, "ts": at(draw(time)), "dur": draw(length)}
        if name.startswith("gloo:") and draw(st.booleans()):
            event["args"] = {"Input Dims": [[draw(dim) * 64]], "Input type": [draw(FLOAT_TYPES)]}
        events.append(event)
    # gloo as it runs: c10d calls on the loop, each one's run on the runloop thread after it (the
    # i-th run the i-th call's), sends and receives inside their c10d call
    if coherent:
        clock = draw(time)
        for _ in range(draw(st.integers(1, 4))):
            call, run = draw(st.sampled_from([("c10d::allreduce_", "gloo:all_reduce"),
                                              ("c10d::_reduce_scatter_base_", "gloo:all_reduce"),
                                              ("c10d::broadcast_", "gloo:broadcast"),
                                              ("c10d::alltoall_base_", "gloo:all_to_all")]))
            call_us = draw(st.integers(2, 30))
            events.append({"ph": "X", "cat": "cpu_op", "name": call, "pid": PID, "tid": MAIN, "ts": at(clock),
                           "dur": call_us, "args": draw(op_args(call))})
            events.append({"ph": "X", "cat": "user_annotation", "name": run, "pid": PID, "tid": OTHER,
                           "ts": at(clock + draw(st.integers(1, call_us))), "dur": draw(st.integers(5, 150)),
                           "args": {"Input Dims": [[draw(dim) * 64]], "Input type": ["float"]}})
            clock += call_us + draw(st.integers(0, 60))
        for _ in range(draw(st.integers(0, 2))):
            name = draw(st.sampled_from(["send", "recv"]))
            call = {"send": "c10d::send", "recv": "c10d::recv_"}[name]
            start, dur = draw(time), draw(st.integers(10, 100))
            events.append({"ph": "X", "cat": "cpu_op", "name": call, "pid": PID, "tid": MAIN, "ts": at(start),
                           "dur": dur, "args": {"Concrete Inputs": ["", "", str(draw(st.integers(0, 1)))]}})
            events.append({"ph": "X", "cat": "user_annotation", "name": f"gloo:{name}", "pid": PID, "tid": MAIN,
                           "ts": at(start + 1), "dur": dur - 2})
    for _ in range(draw(st.integers(0, 10))):
        correlation = draw(st.integers(1, 12))
        launch = draw(time)
        events.append({"ph": "X", "cat": "cuda_runtime", "name": draw(st.sampled_from(RUNTIME_NAMES)), "pid": PID,
                       "tid": draw(tid), "ts": at(launch), "dur": draw(st.integers(0, 30)),
                       "args": {"correlation": correlation, "External id": draw(st.integers(1, 12))}})
        if draw(st.integers(0, 3)):
            cat, name = draw(st.sampled_from(KERNELS))
            args = {"device": draw(st.integers(0, 1)), "stream": draw(st.sampled_from([7, 20])),
                    "correlation": correlation, "External id": draw(st.integers(1, 12))}
            if cat == "gpu_memcpy":
                args["bytes"] = draw(st.integers(0, 1 << 20))
            elif name.startswith("nccl") and draw(st.booleans()):
                args.update({"Collective name": "allreduce", "In msg nelems": 256, "dtype": "Float",
                             "Process Group Name": "0", "Process Group Ranks": "[0, 1]"})
            events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": args["stream"],
                           "ts": at(launch + draw(st.integers(0, 40))), "dur": draw(length), "args": args})
    total = 0
    for _ in range(draw(st.integers(0, 8))):
        device = draw(st.sampled_from([(0, -1), (1, 0)]))
        change = draw(st.sampled_from([512, 1024, -512, -1024]))
        total += change
        args = {"Device Type": device[0], "Device Id": device[1], "Addr": draw(st.sampled_from([11, 12, 13])),
                "Total Allocated": total, "Total Reserved": 1 << 20}
        if draw(st.integers(0, 3)):
            args["Bytes"] = change
        events.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": PID,
                       "tid": draw(tid), "ts": at(draw(time)), "args": args})
    groups = draw(st.sampled_from([[], [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1]}],
                                   [{"pg_name": "0", "pg_desc": "undefined", "ranks": [0, 1]},
                                    {"pg_name": "1", "pg_desc": "mesh_tp", "ranks": [1]}]]))
    top = {"distributedInfo": {"rank": 0, "world_size": 2, "backend": "gloo", "pg_config": groups}}
    return top, events


# ---------------------------------------------------------------- the oracle


def oracle_tables(folder: Path, configs: list[tuple]) -> duckdb.DuckDBPyConnection:
    """A database with the one-pass tables of `folder` and the per-rank tables the SQL of
    tests/data/derived_oracle builds from them."""
    con = duckdb.connect()
    tracedb.create_schema(con)
    tracedb.create_macros(con)
    con.execute((ORACLE / "00_flops.sql").read_text())
    con.execute("INSERT INTO ranks (rank, file) VALUES (0, 'rank0.json')")
    if configs:
        con.executemany("INSERT INTO pg_configs VALUES (?, ?, ?, ?, ?, ?, ?)", configs)
    con.execute("DROP TABLE raw_events")
    con.execute(f"CREATE VIEW raw_events AS SELECT * FROM read_parquet('{folder / 'raw_events.parquet'}')")
    for table in NATIVE_TABLES:
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM read_parquet('{folder / table}.parquet')")
    con.execute(tracedb._sql_text("tables/00_parameters.sql"))
    for sql in sorted(ORACLE.glob("[5-9]*.sql")):
        con.execute(sql.read_text())
    return con


def test_the_oracle_covers_every_derived_table():
    """Each table the reader derives is one the oracle's SQL made (none left unchecked)."""
    made = set()
    for sql in ORACLE.glob("[5-9]*.sql"):
        made |= {line.split()[4] for line in sql.read_text().splitlines()
                 if line.startswith("CREATE OR REPLACE TABLE ")}
    assert set(DERIVED_TABLES) == made
    assert set(DERIVED_TABLES) == set(_native.derived_tables())


@settings(max_examples=45, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(trace=traces())
def test_the_reader_derives_the_tables_the_sql_did(trace, tmp_path_factory):
    top, events = trace
    folder = tmp_path_factory.mktemp("derived")
    path = folder / "rank0.json"
    path.write_text(json.dumps({**top, "traceEvents": events}))
    shard = folder / "shard"
    shard.mkdir()
    _native.write_raw_events_parquet(str(path), str(shard / "raw_events.parquet"), 0, tables_dir=str(shard),
                                     kernel_classes=tracedb.kernel_classes())
    configs, _ = pg_config_rows(0, top["distributedInfo"]["pg_config"])
    groups = [(name, desc, ranks, size, index) for _, name, desc, ranks, size, _, index in configs]
    rows, _ = _native.derive_rank_tables(str(shard), str(shard), 0, groups, _derived_params())
    with oracle_tables(shard, configs) as con:
        for table in DERIVED_TABLES:
            mine = f"read_parquet('{shard / table}.parquet')"
            only_sql = con.execute(f"SELECT * FROM {table} EXCEPT ALL SELECT * FROM {mine}").fetchall()
            only_reader = con.execute(f"SELECT * FROM {mine} EXCEPT ALL SELECT * FROM {table}").fetchall()
            assert (only_sql, only_reader) == ([], []), table
            assert rows[table] == con.execute(f"SELECT count(*) FROM {table}").fetchone()[0], table


# ---------------------------------------------------------------- the shared readings

NAMES = st.one_of(
    st.sampled_from(["AllReduce", "allreduce_", "_allgather_base_", "reduce_scatter_tensor_coalesced", "SendRecv",
                     "send", "recv_", "all-to-all", "ncclDevKernel_AllGather_RING", "Foo Bar9", "___", "9", "",
                     "İx", "\u212aelvin", "float", "c10::BFloat16", "at::Half", "C10::Float", "torch.float",
                     "long int", "Long", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
                     "## data ##", "load_batch", "dataset", "Data.Loading", "get_batch_x"]),
    st.text(alphabet=st.sampled_from("aAlLrReduce_:-# .0123456789İΣ\u212a()"), max_size=24),
    st.text(max_size=12))


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(name=st.none() | NAMES, is_annotation=st.booleans())
def test_the_readings_of_names_agree_with_the_sql_macros(name, is_annotation, macros):
    want = macros.execute("SELECT collective_op(?), dtype_bytes(?), is_data_range(?, ?)",
                          [name, name, name, is_annotation]).fetchone()
    got = (_native.reading("collective_op", name), _native.reading("dtype_bytes", name),
           _native.reading("is_data_range", name, is_annotation))
    assert got == want


@pytest.fixture(scope="module")
def macros():
    con = duckdb.connect()
    tracedb.create_macros(con)
    yield con
    con.close()
