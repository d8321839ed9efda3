"""The native crate's critical-path walk (native/src/critical_walk.rs) against the Python walk it
replaced (kept as the oracle in tests/data/critical_path_oracle.py), on generated steps: GPU work
with and without launches and collectives, synchronizations, host-side collectives, host ops
that nest or overlap, arrivals at collectives from one or many ranks, ties everywhere (small
integer times), rows in any order in the file. The fixtures' critical paths are held against
their checksums by tests/test_table_checksums.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceanalyze.extension import native as _native

ORACLE_PATH = Path(__file__).parent / "data" / "critical_path_oracle.py"
_spec = importlib.util.spec_from_file_location("critical_path_oracle", ORACLE_PATH)
oracle = sys.modules.setdefault("critical_path_oracle", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(oracle)

COLUMNS = ("step BIGINT, src INTEGER, rank INTEGER, k1 BIGINT, k2 BIGINT, name VARCHAR, kind VARCHAR, "
           "launch_end_ns BIGINT, process_group VARCHAR, op VARCHAR, op_index BIGINT, stream BIGINT, "
           "correlation BIGINT")

names = st.sampled_from(["gemm", "conv", "nccl:all_reduce", "aten::mm", "a", "b", None])
kinds = st.sampled_from(["compute", "memcpy", "memset", "collective", None])
keys = st.tuples(st.sampled_from(["0", None]), st.sampled_from(["all_reduce", "broadcast"]),
                 st.sampled_from([0, None]))


@st.composite
def steps(draw) -> list[tuple]:
    """The walk's input rows of up to 3 steps of up to 4 ranks (columns as COLUMNS)."""
    rows: list[tuple] = []
    # ns a time unit: 1 makes ties everywhere; 250 spreads the times across the 2 µs launch slack
    unit = draw(st.sampled_from([1, 250]))
    times = st.integers(0, 24).map(lambda x: x * unit)

    def span(most: int) -> int:
        return draw(st.integers(0, most)) * unit

    for step in draw(st.lists(st.integers(1, 5), min_size=1, max_size=3, unique=True)):
        for rank in draw(st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True)):
            for _ in range(draw(st.integers(1, 2))):  # (a rank's step bounds may come twice)
                a, b = sorted(draw(st.tuples(times, times)))
                rows.append((step, 0, rank, a, b, None, None, None, None, None, None, None, None))
            for _ in range(draw(st.integers(0, 8))):  # GPU work
                ts = draw(times)
                end = ts + span(8)
                launch = draw(st.one_of(st.none(), st.integers(-12, 3).map(lambda x: ts + x * unit)))
                key = draw(st.one_of(st.none(), keys))
                pg, op, idx = key if key else (None, None, None)
                rows.append((step, 1, rank, end, ts, draw(names), draw(kinds), launch, pg, op, idx,
                             draw(st.sampled_from([7, 8, None])), draw(st.one_of(st.none(), st.integers(0, 9)))))
            for _ in range(draw(st.integers(0, 3))):  # synchronizations
                ts = draw(times)
                rows.append((step, 2, rank, ts + span(4), ts, *[None] * 8))
            for _ in range(draw(st.integers(0, 2))):  # host-side collectives
                ts = draw(times)
                pg, op, idx = draw(keys)
                rows.append((step, 3, rank, ts + span(4), ts, op, None, None, pg, op, idx,
                             None, None))
            for _ in range(draw(st.integers(0, 6))):  # host ops (any: nested, overlapping)
                ts = draw(times)
                rows.append((step, 4, rank, ts, ts + span(6), draw(names), *[None] * 7))
        for pg, op, idx in draw(st.lists(keys, max_size=3, unique=True)):  # arrivals (coarse: ties)
            for rank in draw(st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True)):
                rows.append((step, 5, rank, draw(st.integers(0, 6)) * 5 * unit, 0, None, None, None, pg, op,
                             idx, None, None))
    return rows


@pytest.fixture(scope="module")
def con():
    connection = duckdb.connect()  # (one for the module: opening one costs more than a walk)
    yield connection
    connection.close()


def native_walk(con, rows: list[tuple], folder: Path) -> list[tuple]:
    """The rows written as the walk's input file (in their given order), walked by the crate."""
    try:
        con.execute(f"CREATE OR REPLACE TABLE t ({COLUMNS})")
        if rows:  # (one statement: the columns as lists, unnested)
            con.execute("INSERT INTO t SELECT " + ", ".join(f"unnest(${i + 1})" for i in range(13)),
                        [list(column) for column in zip(*rows)])
        inputs, out = folder / "inputs.parquet", folder / "segments.parquet"
        con.execute(f"COPY t TO '{inputs}' (FORMAT parquet)")
        n = _native.walk_critical_path(str(inputs), str(out))
        got = con.execute(f"SELECT rank, step, seq, kind, name, ts_ns, dur_ns, on_rank FROM '{out}'").fetchall()
    finally:
        con.execute("DROP TABLE IF EXISTS t")
    assert n == len(got)
    return got


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(rows=steps(), order=st.randoms(use_true_random=False))
def test_the_native_walk_gives_the_python_walks_segments(rows, order, con, tmp_path):
    want = oracle.critical_path_rows(rows)
    shuffled = list(rows)
    order.shuffle(shuffled)  # (the file's row order must not matter)
    got = native_walk(con, shuffled, tmp_path)
    assert got == want


def test_a_walk_of_a_chain_of_launches_and_a_wait_for_a_late_rank(con, tmp_path):
    """One step worked by hand: rank 1 ends last; its all_reduce kernel (10-40) waited for rank 0,
    which arrived 25 ns into the step (rank 1 arrived at 5): the path goes from rank 1's kernel's
    part after the last arrival to rank 0, whose host op 'forward' held it from the start."""
    rows = [
        (1, 0, 0, 0, 30, *[None] * 8),             # rank 0's step: 0-30
        (1, 0, 1, 0, 40, *[None] * 8),             # rank 1's step: 0-40 (the longest)
        (1, 1, 1, 40, 10, "nccl:all_reduce", "collective", None, "0", "all_reduce", 0, 7, 1),
        (1, 4, 0, 0, 25, "forward", *[None] * 7),  # rank 0's host op until its arrival
        (1, 5, 0, 25, 0, None, None, None, "0", "all_reduce", 0, None, None),
        (1, 5, 1, 5, 0, None, None, None, "0", "all_reduce", 0, None, None),
    ]
    got = native_walk(con, rows, tmp_path)
    assert got == [
        (1, 1, 0, "host", "forward", 0, 25, 0),               # rank 0's host work up to its arrival
        (1, 1, 1, "collective", "nccl:all_reduce", 25, 15, 1),  # rank 1: 0 + 25 (the last arrival) .. 40
    ]
    assert got == oracle.critical_path_rows(rows)


def test_of_two_ranks_arriving_last_together_the_path_goes_to_the_lower(con, tmp_path):
    """Ranks 1 and 2 both arrive 20 ns into the step at rank 0's all_reduce (10-50): the path
    takes rank 1 (the lower), whose host op 'backward' held it until then."""
    key = ("0", "all_reduce", 3)
    rows = [
        (1, 0, 0, 0, 50, *[None] * 8),
        (1, 0, 1, 0, 40, *[None] * 8),
        (1, 0, 2, 0, 40, *[None] * 8),
        (1, 1, 0, 50, 10, "nccl:all_reduce", "collective", None, *key, 7, 1),
        (1, 4, 1, 0, 20, "backward", *[None] * 7),
        (1, 4, 2, 0, 20, "optimizer", *[None] * 7),
        *[(1, 5, rank, rel, 0, None, None, None, *key, None, None) for rank, rel in ((0, 5), (2, 20), (1, 20))],
    ]
    got = native_walk(con, rows, tmp_path)
    assert got == [(0, 1, 0, "host", "backward", 0, 20, 1), (0, 1, 1, "collective", "nccl:all_reduce", 20, 30, 0)]
    assert got == oracle.critical_path_rows(rows)


def test_an_unreadable_input_is_one_line_naming_it(tmp_path):
    bad = tmp_path / "inputs.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(ValueError) as err:
        _native.walk_critical_path(str(bad), str(tmp_path / "out.parquet"))
    assert str(bad) in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "out.parquet").exists()
