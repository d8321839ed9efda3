"""The loader's shortcuts give the same database as the long way round.

The native reader decodes a file block by block (the events of a block in parallel) and
guesses the time base of a plain file from its end; the loader runs DuckDB under a memory
limit and lifts the limit when an operator runs out. Each shortcut is checked here against
the path it shortcuts, on real traces.
"""

from __future__ import annotations

import gzip
import json

import duckdb
import pytest
from conftest import FIXTURES, REAL_TRACES
from table_compare import assert_same_tables

import traceanalyze.load as load
from traceanalyze.load import read

COMPARED_TABLES = ["raw_events", "cpu_ops", "kernels", "runtime", "collectives", "steps", "phase_intervals",
                   "gpu_idle_gaps", "load_issues"]


def table_rows(db, table: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return sorted(con.execute(f"SELECT COLUMNS(*)::VARCHAR FROM {table}").fetchall(),
                      key=lambda r: tuple("" if v is None else v for v in r))


def _trace(events: list[dict], rank: int = 0) -> dict:
    return {"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": 1, "backend": "nccl"},
            "traceEvents": events}


def _steps_and_ops(n_steps: int = 3) -> list[dict]:
    events = []
    for i in range(n_steps):
        t = 1000.0 * i
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
                       "ts": t, "dur": 900.0})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 10.5,
                       "dur": 100.25, "args": {"External id": i + 1}})
    return events


def test_an_event_larger_than_the_read_buffer_loads(tmp_path):
    events = _steps_and_ops()
    big = "x" * (read.BLOCK_BYTES + (1 << 20))  # (larger than the block the reader takes at a time)
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::cat", "pid": 1, "tid": 1, "ts": 20.0, "dur": 5.0,
                   "args": {"Input Dims": big, "External id": 99}})
    path = tmp_path / "traces" / "rank0.pt.trace.json.gz"
    path.parent.mkdir()
    with gzip.open(path, "wt") as fh:
        json.dump(_trace(events), fh)
    db = tmp_path / "t.duckdb"
    load.load_trace_dir(path.parent, db)
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM raw_events").fetchone()[0] == len(events)
        assert con.execute("SELECT length(input_dims), ts_ns FROM cpu_ops WHERE external_id = 99").fetchall() \
            == [(len(big), 20_000)]


def test_a_tight_memory_limit_gives_the_same_tables(tmp_path, monkeypatch):
    """A tight TRACEANALYZE_MEMORY_LIMIT: the load still succeeds with the same tables (the
    native reader streams the events and builds the per-rank tables; DuckDB holds the map's
    few rows and the reduce's tables under the limit)."""
    folder = FIXTURES / "balanced"
    ref, tight = tmp_path / "ref.duckdb", tmp_path / "tight.duckdb"
    load.load_trace_dir(folder, ref, reuse=False)
    monkeypatch.setenv("TRACEANALYZE_MEMORY_LIMIT", "24MB")
    load.load_trace_dir(folder, tight, reuse=False)
    for table in COMPARED_TABLES:
        assert table_rows(ref, table) == table_rows(tight, table), table


def test_a_malformed_memory_limit_is_a_one_line_error(cli, tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "TRACEANALYZE_MEMORY_LIMIT": "lots"}
    proc = subprocess.run([sys.executable, "-m", "traceanalyze", "load", str(FIXTURES / "balanced"),
                           "--db", str(tmp_path / "x.duckdb")], capture_output=True, text=True, env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: TRACEANALYZE_MEMORY_LIMIT='lots' is not a memory size such as '4GB'"]
    assert "Traceback" not in proc.stderr


def test_fractional_times_below_the_double_limit_are_exact_to_the_ns(tmp_path):
    """Times up to 2**43 us (about 101 days of uptime, e.g. torch 2.x's monotonic-clock ts) are
    read as doubles; every one must still come out as the exact ns written in the file."""
    import random
    from decimal import Decimal

    rng = random.Random(7)
    texts = []
    for lo, hi in ((2**42, 2**43 - 1), (2**41, 2**42), (10**9, 10**10), (0, 10**4)):
        texts += [f"{rng.randrange(lo, hi)}.{rng.randrange(1000):03d}" for _ in range(1500)]
    body = ",\n".join(f'{{"ph": "X", "cat": "cpu_op", "name": "op{i}", "pid": 1, "tid": 1, "ts": {t}, "dur": 1.5}}'
                      for i, t in enumerate(texts))
    path = tmp_path / "traces" / "rank0.pt.trace.json"
    path.parent.mkdir()
    path.write_text('{"schemaVersion": 1, "traceEvents": [\n' + body + "\n]}")
    db = tmp_path / "t.duckdb"
    load.load_trace_dir(path.parent, db)
    with duckdb.connect(str(db), read_only=True) as con:
        got = dict(con.execute("SELECT name, ts_ns FROM raw_events").fetchall())
    want = {f"op{i}": int(Decimal(t) * 1000) for i, t in enumerate(texts)}
    assert got == want


@pytest.fixture
def small_blocks(monkeypatch):
    """The reader takes 64 KiB at a time: a few-MB trace is many blocks, and many events
    (and values of the header) are cut by a block's end and scanned again with the next."""
    monkeypatch.setattr(read, "BLOCK_BYTES", 64 << 10)


def _plain_copies(folder, dest):
    """The folder's gzipped traces, uncompressed."""
    dest.mkdir()
    for path in sorted(folder.glob("*.pt.trace.json.gz")):
        (dest / path.name[:-3]).write_bytes(gzip.decompress(path.read_bytes()))
    return dest


@pytest.mark.parametrize("plain", [False, True], ids=["gzip", "uncompressed"])
def test_small_blocks_give_the_same_database(tmp_path, small_blocks, monkeypatch, plain):
    traces = _plain_copies(FIXTURES / "balanced", tmp_path / "traces") if plain else FIXTURES / "balanced"
    small_db = tmp_path / "small.duckdb"
    load.load_trace_dir(traces, small_db)
    monkeypatch.setattr(read, "BLOCK_BYTES", 1 << 30)  # the reference: each file in one block
    reference = tmp_path / "ref.duckdb"
    load.load_trace_dir(traces, reference)
    assert_same_tables(small_db, reference, COMPARED_TABLES)


def test_an_arg_of_the_wrong_type_is_null_and_counted(tmp_path, small_blocks):
    traces = _plain_copies(FIXTURES / "balanced", tmp_path / "traces")
    first = sorted(traces.iterdir())[0]
    text = first.read_text()
    at = text.index('"External id": ', len(text) // 10)
    end = text.index(",", at)
    first.write_text(text[:at] + '"External id": "not a number"' + text[end:])
    db = tmp_path / "t.duckdb"
    load.load_trace_dir(traces, db)
    with duckdb.connect(str(db), read_only=True) as con:
        (n,) = con.execute("SELECT count(*) FROM raw_events").fetchone()
        issues = con.execute("SELECT kind, count FROM load_issues WHERE file = ?", [str(first)]).fetchall()
    assert n == sum(len(json.loads(p.read_text())["traceEvents"]) for p in traces.iterdir())
    assert ("bad-arg", 1) in issues


@pytest.mark.parametrize("folder", [REAL_TRACES / "kineto-resnet50-nw0", FIXTURES / "balanced"],
                         ids=["kineto-2021", "torch-2.13"])
def test_args_keys_spelled_both_ways_are_read(folder, tmp_path):
    """`"Bytes"` ([memory] events) next to `"bytes"` (memcpy), and old Kineto's `"external id"`
    next to `"External id"`: DuckDB matches keys case-sensitively; both spellings must load."""
    want_bytes, want_ext = {}, {}
    for path in sorted(folder.glob("*.pt.trace.json.gz")):
        top = json.loads(gzip.decompress(path.read_bytes()))
        rank = (top.get("distributedInfo") or {}).get("rank", 0)
        for e in top["traceEvents"]:
            args = e.get("args") or {}
            for key in ("Bytes", "bytes"):
                if key in args:
                    want_bytes[rank] = want_bytes.get(rank, 0) + args[key]
            for key in ("External id", "external id"):
                if key in args:
                    want_ext[rank] = want_ext.get(rank, 0) + 1
    assert want_bytes and want_ext
    db = tmp_path / "t.duckdb"
    load.load_trace_dir(folder, db)
    with duckdb.connect(str(db), read_only=True) as con:
        got_bytes = dict(con.execute("SELECT rank, sum(bytes) FROM raw_events WHERE bytes IS NOT NULL GROUP BY rank").fetchall())
        got_ext = dict(con.execute("SELECT rank, count(external_id) FROM raw_events GROUP BY rank").fetchall())
    assert got_bytes == want_bytes
    assert got_ext == want_ext


@pytest.mark.parametrize("plain", [False, True], ids=["gzip", "uncompressed"])
def test_a_time_base_written_after_the_events_applies_to_every_event(tmp_path, small_blocks, plain,
                                                                     monkeypatch):
    """baseTimeNanoseconds comes after the events: an uncompressed file's is read from its end
    first; a gzip file's events are read with 0 and the rank's times shifted afterwards."""
    source = REAL_TRACES / "hta-nccl-parser-config" / "nccl_data.json.gz"
    traces = tmp_path / "traces"
    traces.mkdir()
    if plain:
        (traces / "rank0.json").write_bytes(gzip.decompress(source.read_bytes()))
    else:
        (traces / "rank0.json.gz").write_bytes(source.read_bytes())
    early_db = tmp_path / "early.duckdb"
    load.load_trace_dir(traces, early_db)
    monkeypatch.setattr(read, "BLOCK_BYTES", 1 << 30)  # the reference: one block
    reference = tmp_path / "ref.duckdb"
    load.load_trace_dir(traces, reference)
    assert_same_tables(early_db, reference, COMPARED_TABLES)
    with duckdb.connect(str(early_db), read_only=True) as con:
        (lo,) = con.execute("SELECT min(ts_ns) FROM raw_events").fetchone()
    assert lo > 1711964646000000000  # the base is in every time


def test_a_truncated_file_read_in_small_blocks_keeps_every_complete_event(tmp_path, small_blocks):
    """The events of the blocks before the cut are decoded before the cut is seen; with the
    last block they give exactly the events before the cut."""
    traces = _plain_copies(FIXTURES / "balanced", tmp_path / "traces")
    first = min(traces.iterdir())
    text = first.read_text()
    events = json.loads(text)["traceEvents"]
    cut = int(len(text) * 0.8)
    first.write_text(text[:cut])
    db = tmp_path / "t.duckdb"
    load.load_trace_dir(traces, db)
    # the events whole before the cut, counted from the text: each event object of the array
    # ends with `}` followed by `,` or the array's `]`
    decoder = json.JSONDecoder()
    pos = text.index("[", text.index('"traceEvents"')) + 1
    whole = 0
    while True:
        while text[pos] in " \n\r\t,":
            pos += 1
        if text[pos] == "]":
            break
        try:
            _, end = decoder.raw_decode(text[:cut], pos)
        except json.JSONDecodeError:
            break
        whole, pos = whole + 1, end
    assert 0 < whole < len(events)
    with duckdb.connect(str(db), read_only=True) as con:
        (rank,) = con.execute("SELECT rank FROM ranks WHERE file = ?", [str(first)]).fetchone()
        (n,) = con.execute("SELECT count(*) FROM raw_events WHERE rank = ?", [rank]).fetchone()
        (truncated,) = con.execute("SELECT truncated FROM ranks WHERE rank = ?", [rank]).fetchone()
    assert n == whole and truncated

