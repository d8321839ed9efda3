"""The loader's fast paths give the same database as its careful ones.

kineto.py reads events first with typed columns (DOUBLE times, BIGINT args) and falls back
to a generic reading (everything as text, typed with TRY_CAST) when a value has an
unexpected type; the loader reads JSON with small buffers and retries with large ones for a
huge event; it runs DuckDB under a memory limit and lifts the limit when an operator runs
out. Each shortcut is checked here against the path it shortcuts, on real traces.
"""

from __future__ import annotations

import functools
import gzip
import json

import duckdb
import pytest
from conftest import FIXTURES, REAL_TRACES

import traceanalyze.load as load
from traceanalyze.load import read
from traceanalyze.load.kineto import MAX_OBJECT_BYTES, TIME_LIMIT_NS

# The maps run in this process (workers=1), so that the readings, part sizes and spies this
# module patches apply to them (a pool worker is another process).
load_in_process = functools.partial(load.load_trace_dir, workers=1)

FOLDERS = sorted(p for p in REAL_TRACES.iterdir() if p.is_dir() and p.name != "hta-rank-unavailable") \
    + [FIXTURES / "balanced", FIXTURES / "memory_creep"]
COMPARED_TABLES = ["raw_events", "cpu_ops", "kernels", "runtime", "collectives", "steps", "phase_intervals",
                   "gpu_idle_gaps", "load_issues"]


def table_rows(db, table: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return sorted(con.execute(f"SELECT COLUMNS(*)::VARCHAR FROM {table}").fetchall(),
                      key=lambda r: tuple("" if v is None else v for v in r))


@pytest.mark.parametrize("folder", FOLDERS, ids=[p.name for p in FOLDERS])
def test_typed_reading_equals_generic_reading(folder, tmp_path, monkeypatch):
    typed_db, generic_db = tmp_path / "typed.duckdb", tmp_path / "generic.duckdb"
    load_in_process(folder, typed_db, reuse=False)
    monkeypatch.setattr(read, "READINGS", (False,))
    load_in_process(folder, generic_db, reuse=False)
    for table in COMPARED_TABLES:
        assert table_rows(typed_db, table) == table_rows(generic_db, table), table
    with duckdb.connect(str(typed_db), read_only=True) as con:
        (n, outside) = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE abs(ts_ns) > ? OR abs(dur_ns) > ?) FROM raw_events",
            [TIME_LIMIT_NS, TIME_LIMIT_NS]).fetchone()
    assert n > 0
    assert outside == 0  # no internal marker for inexact times is left in the table


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
    big = "x" * (MAX_OBJECT_BYTES + (1 << 20))
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::cat", "pid": 1, "tid": 1, "ts": 20.0, "dur": 5.0,
                   "args": {"Input Dims": big, "External id": 99}})
    path = tmp_path / "traces" / "rank0.pt.trace.json.gz"
    path.parent.mkdir()
    with gzip.open(path, "wt") as fh:
        json.dump(_trace(events), fh)
    db = tmp_path / "t.duckdb"
    load_in_process(path.parent, db)
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM raw_events").fetchone()[0] == len(events)
        assert con.execute("SELECT length(input_dims), ts_ns FROM cpu_ops WHERE external_id = 99").fetchall() \
            == [(len(big), 20_000)]


def test_a_tiny_memory_limit_is_lifted_rather_than_failing(tmp_path, monkeypatch):
    """TRACEANALYZE_MEMORY_LIMIT below what DuckDB's JSON reader needs: the load still
    succeeds with the same tables, and says that the limit was lifted."""
    folder = FIXTURES / "balanced"
    ref, tight = tmp_path / "ref.duckdb", tmp_path / "tight.duckdb"
    load_in_process(folder, ref, reuse=False)
    monkeypatch.setenv("TRACEANALYZE_MEMORY_LIMIT", "24MB")
    load_in_process(folder, tight, reuse=False)
    for table in COMPARED_TABLES:
        if table != "load_issues":
            assert table_rows(ref, table) == table_rows(tight, table), table
    with duckdb.connect(str(tight), read_only=True) as con:
        notes = con.execute("SELECT message FROM load_issues WHERE kind = 'memory-limit-lifted'").fetchall()
    # (each rank's map has its own limit: one note per rank that needed more)
    assert 1 <= len(notes) <= 4 and all("TRACEANALYZE_MEMORY_LIMIT" in m for (m,) in notes)
    assert table_rows(ref, "load_issues") == [r for r in table_rows(tight, "load_issues") if r[2] != "memory-limit-lifted"]


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
    load_in_process(path.parent, db)
    with duckdb.connect(str(db), read_only=True) as con:
        got = dict(con.execute("SELECT name, ts_ns FROM raw_events").fetchall())
    want = {f"op{i}": int(Decimal(t) * 1000) for i, t in enumerate(texts)}
    assert got == want


@pytest.fixture
def small_parts(monkeypatch):
    """Part files of 256 KiB (and a 64 KiB tail held back), so that a few-MB trace is split into
    many parts and most of them are parsed while the rest of the file is still being split."""
    from traceanalyze.load import overlap, split

    monkeypatch.setattr(split, "PART_TARGET_BYTES", 256 << 10)
    monkeypatch.setattr(split, "HOLD_BACK_BYTES", 64 << 10)
    runs = []  # Overlapped of each rank's read
    real = overlap.split_while_parsing

    def spy(files, *args, **kwargs):
        result = real(files, *args, **kwargs)
        runs.append(result)
        return result

    monkeypatch.setattr(read, "split_while_parsing", spy)
    return runs


def _plain_copies(folder, dest):
    """The folder's gzipped traces, uncompressed (only plain files are parsed while splitting)."""
    dest.mkdir()
    for path in sorted(folder.glob("*.pt.trace.json.gz")):
        (dest / path.name[:-3]).write_bytes(gzip.decompress(path.read_bytes()))
    return dest


def test_parts_parsed_while_splitting_give_the_same_database(tmp_path, small_parts):
    traces = _plain_copies(FIXTURES / "balanced", tmp_path / "traces")
    early_db = tmp_path / "early.duckdb"
    load_in_process(traces, early_db)
    assert len(small_parts) == 4  # one read per rank
    for run in small_parts:  # each file's parts were parsed while it was split, the last ones too
        assert len(run.parsed) == sum(len(sp.parts) for sp in run.splits) > 1
    reference = tmp_path / "ref.duckdb"
    load_in_process(FIXTURES / "balanced", reference)  # gzip, 48 MB parts: nothing early
    for table in COMPARED_TABLES:
        if table != "load_issues":
            assert table_rows(early_db, table) == table_rows(reference, table), table


def test_a_value_the_typed_reading_refuses_in_an_early_part_is_read_the_careful_way(
        tmp_path, small_parts, monkeypatch):
    traces = _plain_copies(FIXTURES / "balanced", tmp_path / "traces")
    first = sorted(traces.iterdir())[0]
    text = first.read_text()
    at = text.index('"External id": ', len(text) // 10)
    end = text.index(",", at)
    first.write_text(text[:at] + '"External id": "not a number"' + text[end:])
    db = tmp_path / "t.duckdb"
    load_in_process(traces, db)
    # the bad file's early parse failed and was undone; the other ranks' were kept
    assert sorted(bool(run.parsed) for run in small_parts) == [False, True, True, True]
    monkeypatch.setattr(read, "READINGS", (False,))
    generic = tmp_path / "generic.duckdb"
    load_in_process(traces, generic)
    for table in COMPARED_TABLES:
        assert table_rows(db, table) == table_rows(generic, table), table
    with duckdb.connect(str(db), read_only=True) as con:
        (n,) = con.execute("SELECT count(*) FROM raw_events").fetchone()
    assert n == sum(len(json.loads(p.read_text())["traceEvents"]) for p in traces.iterdir())


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
    load_in_process(folder, db)
    with duckdb.connect(str(db), read_only=True) as con:
        got_bytes = dict(con.execute("SELECT rank, sum(bytes) FROM raw_events WHERE bytes IS NOT NULL GROUP BY rank").fetchall())
        got_ext = dict(con.execute("SELECT rank, count(external_id) FROM raw_events GROUP BY rank").fetchall())
    assert got_bytes == want_bytes
    assert got_ext == want_ext


@pytest.mark.parametrize("plain", [False, True], ids=["gzip", "uncompressed"])
def test_a_time_base_written_after_the_events_applies_to_parts_parsed_early(tmp_path, small_parts, plain,
                                                                            monkeypatch):
    """baseTimeNanoseconds comes after the events: an uncompressed file's is read from its end
    first; a gzip file's parts are parsed with 0 and the rank's times shifted afterwards."""
    source = REAL_TRACES / "hta-nccl-parser-config" / "nccl_data.json.gz"
    traces = tmp_path / "traces"
    traces.mkdir()
    if plain:
        (traces / "rank0.json").write_bytes(gzip.decompress(source.read_bytes()))
    else:
        (traces / "rank0.json.gz").write_bytes(source.read_bytes())
    early_db = tmp_path / "early.duckdb"
    load_in_process(traces, early_db)
    assert len(small_parts[0].parsed) >= 2  # several parts were parsed before the base was known
    from traceanalyze.load import split

    monkeypatch.setattr(split, "PART_TARGET_BYTES", 1 << 30)  # the reference: one part, nothing early
    reference = tmp_path / "ref.duckdb"
    load_in_process(traces, reference)
    for table in COMPARED_TABLES:
        assert table_rows(early_db, table) == table_rows(reference, table), table
    with duckdb.connect(str(early_db), read_only=True) as con:
        (lo,) = con.execute("SELECT min(ts_ns) FROM raw_events").fetchone()
    assert lo > 1711964646000000000  # the base is in every time


def test_a_truncated_file_split_while_parsing_keeps_every_complete_event(tmp_path, small_parts):
    """The last part of a cut file is rewritten after the split has found the cut: it is parsed
    only then, and with the early parts it gives exactly the events before the cut."""
    traces = _plain_copies(FIXTURES / "balanced", tmp_path / "traces")
    first = min(traces.iterdir())
    text = first.read_text()
    events = json.loads(text)["traceEvents"]
    cut = int(len(text) * 0.8)
    first.write_text(text[:cut])
    db = tmp_path / "t.duckdb"
    load_in_process(traces, db)
    (run,) = [r for r in small_parts if r.splits[0].truncated_at_byte is not None]
    assert len(run.parsed) == sum(len(sp.parts) for sp in run.splits) > 1  # all parsed while splitting
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
