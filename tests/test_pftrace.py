"""Issue 15: Perfetto protobuf traces (.pftrace) load into the same tables as the JSON.

Real traces are converted to Perfetto protobuf (tests/pftrace_convert.py, Kineto's layout) and
loaded both ways: every documented table must hold the same rows, and the rules the same
findings. Hostile protobuf gets a one-line error (exit 2) or a recorded load issue.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

sys.path.insert(0, str(Path(__file__).parent))
import pftrace_convert as conv
from table_compare import assert_same_tables as same_tables

import traceanalyze
from traceanalyze import db as tracedb
from traceanalyze.errors import TraceanalyzeError
from traceanalyze.load import load_trace_dir
from traceanalyze.load.discover import identify
from traceanalyze.load.read import read_rank
from traceanalyze.pipeline import run_analysis

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "fixtures" / "real"
DDP = ROOT / "fixtures" / "ddp"
# every real trace folder that loads (hta-rank-unavailable is refused either way: checked below),
# and the DDP scenarios of distinct shapes (FSDP, a straggler and its DataLoader, memory, SyncBN,
# token skew; balanced and compute_straggler hold a subset of input_straggler's kinds of events)
REAL_DIRS = sorted(p.name for p in REAL.iterdir() if p.is_dir() and p.name != "hta-rank-unavailable")
DDP_DIRS = ["fsdp_balanced", "memory_creep", "syncbn_cpu", "token_skew", "input_straggler"]
# tables whose rows name the files (paths differ by construction) are compared without them
FILE_TABLES = {"ranks", "load_meta", "load_issues"}


def convert_dir(src: Path, dst: Path, counted: list[int] | None = None, **options) -> list[Path]:
    """The JSON traces of `src` as .pftrace files in `dst`; `counted` (if given) receives the
    number of events of every JSON file, counted from the same reading of it."""
    dst.mkdir(parents=True, exist_ok=True)
    out = []
    for f in sorted(src.iterdir()):
        if f.name.endswith((".json", ".json.gz")) and f.name != "expected.json":
            target = dst / (f.name.removesuffix(".gz").removesuffix(".json") + ".pftrace"
                            + (".gz" if options.get("gzipped") else ""))
            doc = conv.read_json(f)
            if counted is not None:
                counted.append(len(doc if isinstance(doc, list) else doc.get("traceEvents", [])))
            assert conv.convert_doc(doc, target, **options) == 0  # every event representable
            out.append(target)
    return out


def documented_tables() -> list[str]:
    return sorted(t for t in tracedb.table_comments() if not t.startswith("_") and t not in FILE_TABLES)


def table_rows(db: Path, table: str) -> list[tuple]:
    """Every row of `table`, sorted. raw_events.other_args (the JSON text of the args without a
    column) is compared as the JSON value it is: a protobuf double has no text of its own, so
    the JSON's `1.000000` arrives as `1.0`."""
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(f"SELECT * FROM {table}").fetchall()
        columns = [d[0] for d in con.description]
    if "other_args" in columns:
        at = columns.index("other_args")
        rows = [(*r[:at], None if r[at] is None else json.dumps(json.loads(r[at])), *r[at + 1:]) for r in rows]
    return sorted(rows, key=repr)  # (any total order: equal multisets of rows give equal lists)


def rank_rows(db: Path) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute("SELECT * EXCLUDE (file, file_bytes, file_mtime_ns, events_bytes) FROM ranks"
                           " ORDER BY rank").fetchall()


def assert_same_tables(json_db: Path, pf_db: Path) -> None:
    """Every documented table holds the same rows (raw_events.other_args compared as the JSON value
    it holds: see table_rows), and the ranks the same but for their files."""
    same_tables(pf_db, json_db, documented_tables(), json_columns=["other_args"])
    assert rank_rows(pf_db) == rank_rows(json_db)


@pytest.mark.parametrize("folder", [REAL / d for d in REAL_DIRS] + [DDP / d for d in DDP_DIRS],
                         ids=lambda p: p.name)
def test_converted_traces_give_the_same_tables_and_findings(folder: Path, tmp_path: Path, fixture_db):
    """The JSON side is the session's shared database of the folder, analyzed as run_analysis
    analyzes (the configuration looked up from the working folder)."""
    counted: list[int] = []
    convert_dir(folder, tmp_path / "pf", counted)
    with traceanalyze.analyze(folder, db=fixture_db(folder), config=Path.cwd(), progress=False) as a:
        json_summary = a.summary_dict
    pf_run = run_analysis(tmp_path / "pf", tmp_path / "pf-out", html=False)
    assert_same_tables(fixture_db(folder), pf_run.paths.db)
    with duckdb.connect(str(pf_run.paths.db), read_only=True) as con:
        (events,) = con.execute("SELECT count(*) FROM raw_events").fetchone()
    assert events == sum(counted)  # every event of the JSON, one row each
    assert pf_run.summary["findings"] == json_summary["findings"]
    assert without_files(pf_run.summary["ranks"]) == without_files(json_summary["ranks"])


def without_files(ranks: list[dict]) -> list[dict]:
    """A rank's summary without what describes its file (path, bytes of JSON vs protobuf)."""
    return [{k: v for k, v in r.items() if k not in ("file", "events_bytes")} for r in ranks]


def test_gzipped_compressed_packets_and_interning_resets_read_the_same(tmp_path: Path, fixture_db):
    folder = REAL / "kineto-resnet50-nw0"
    convert_dir(folder, tmp_path / "pf", gzipped=True, compress=True, reset_every=7)
    (pf_file,) = (tmp_path / "pf").iterdir()
    raw = gzip.decompress(pf_file.read_bytes())
    packets = list(pb.Trace.FromString(raw).packet)
    assert packets and all(p.HasField("compressed_packets") for p in packets)  # the layout we mean to test
    pf_db = tmp_path / "p.duckdb"
    load_trace_dir(tmp_path / "pf", pf_db)
    assert_same_tables(fixture_db(folder), pf_db)


def test_counters_begin_end_named_tracks_and_odd_metadata(tmp_path: Path):
    """Events no real fixture has: counters, B/E pairs, text pids/tids, metadata not in descriptors."""
    events = [
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "ts": 0, "args": {"name": "trainer"}},
        {"ph": "M", "name": "thread_name", "pid": "Spans", "tid": "main", "ts": 0, "args": {"name": "x"}},
        {"ph": "M", "name": "process_labels", "pid": 7, "tid": 3, "ts": 0, "args": {"labels": "odd tid"}},
        {"ph": "X", "name": "ProfilerStep#1", "cat": "user_annotation", "pid": 7, "tid": 3, "ts": 10, "dur": 100},
        {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": 7, "tid": 3, "ts": 20, "dur": 50,
         "args": {"External id": 4, "Input Dims": [[2, 3], []], "Sequence number": "12", "flag": True}},
        {"ph": "X", "name": "overlapping", "cat": "cpu_op", "pid": 7, "tid": 3, "ts": 60, "dur": 60},
        {"ph": "B", "name": "phase", "pid": "Spans", "tid": "main", "ts": 15},
        {"ph": "E", "pid": "Spans", "tid": "main", "ts": 25.5},
        {"ph": "C", "name": "memory", "pid": 7, "tid": 3, "ts": 30, "args": {"MB": 12.5}},
        {"ph": "i", "name": "[memory]", "pid": 7, "tid": 3, "ts": 40, "s": "t",
         "args": {"Bytes": -64, "Total Allocated": 2**70, "Addr": 12345, "Device Type": 1.0}},
        {"ph": "s", "name": "fwdbwd", "cat": "fwdbwd", "id": 9, "pid": 7, "tid": 3, "ts": 20},
        {"ph": "f", "name": "fwdbwd", "cat": "fwdbwd", "id": 9, "pid": 7, "tid": 3, "ts": 60, "bp": "e"},
    ]
    src = tmp_path / "json"
    src.mkdir()
    (src / "rank0.json").write_text(json.dumps({"traceEvents": events, "baseTimeNanoseconds": 1000}))
    json_db, pf_db = tmp_path / "j.duckdb", tmp_path / "p.duckdb"
    convert_dir(src, tmp_path / "pf")
    load_trace_dir(src, json_db)
    load_trace_dir(tmp_path / "pf", pf_db)
    assert table_rows(pf_db, "raw_events") == table_rows(json_db, "raw_events")
    by_name = {r[3]: r for r in table_rows(pf_db, "raw_events")}
    assert by_name["phase"][1] == "X" and by_name["phase"][7] == 10_500  # B/E at 15 and 25.5 us
    assert by_name["overlapping"][7] == 60_000  # on an overflow lane, not cut by its neighbour
    assert table_rows(pf_db, "threads") == table_rows(json_db, "threads")


def one_rank(tmp_path: Path, folder: str = "hta-cpu-only", **options) -> Path:
    (pf,) = convert_dir(REAL / folder, tmp_path / folder, **options)
    return pf


def fresh_db():
    con = duckdb.connect()
    tracedb.create_schema(con)
    return con


def read(path: Path):
    con = fresh_db()
    read = read_rank(con, identify(path, only_file=True))
    rows = con.execute("SELECT * FROM raw_events ORDER BY ALL").fetchall()
    return read, rows


def test_truncated_file_keeps_whole_packets(tmp_path: Path):
    full = one_rank(tmp_path, "kineto-resnet50-nw0")
    _, all_rows = read(full)
    data = full.read_bytes()
    cut = tmp_path / "rank0.pftrace"
    cut.write_bytes(data[:len(data) * 2 // 3])
    got, rows = read(cut)
    assert got.truncated_at_byte is not None and 0 < got.truncated_at_byte < len(data) * 2 // 3
    assert got.lost_bytes == len(data) * 2 // 3 - got.truncated_at_byte
    assert 0 < len(rows) < len(all_rows)
    assert set(rows) <= set(all_rows)  # nothing invented: every row kept is a row of the whole file
    db = tmp_path / "cut.duckdb"
    load_trace_dir(cut, db)
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT truncated FROM ranks").fetchall() == [(True,)]
        assert con.execute("SELECT count(*) FROM load_issues WHERE kind = 'truncated'").fetchone() == (1,)
    gz = tmp_path / "gz" / "rank0.pftrace.gz"
    gz.parent.mkdir()
    gz.write_bytes(gzip.compress(data)[:-200])
    got, rows = read(gz)
    assert got.truncated_at_byte is not None and set(rows) <= set(all_rows) and rows


def run_cli(target: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traceanalyze", str(target), "--out", str(target.parent / "out")],
                          capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"}, timeout=300,
                          check=False)


def assert_one_line_error(proc: subprocess.CompletedProcess, path: Path, words: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("traceanalyze: ")]  # (progress)
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: ") and words in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("content, words", [
    (b'{"traceEvents": []}', "not a Perfetto protobuf trace"),
    (b"\x0a" + conv._varint(1 << 40) + b"\x00" * 32, "not a Perfetto protobuf trace"),
    (b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", "not a Perfetto protobuf trace"),
], ids=["json-named-pb", "huge-first-length", "overlong-varint"])
def test_not_protobuf_is_one_line_error(tmp_path: Path, content: bytes, words: str):
    path = tmp_path / "rank0.pb"
    path.write_bytes(content)
    assert_one_line_error(run_cli(path), path, words)


def test_compressed_packets_zip_bomb_is_one_line_error(tmp_path: Path):
    z = zlib.compressobj(9)
    bomb = b"".join(z.compress(b"\0" * (1 << 20)) for _ in range(80)) + z.flush()  # 80 MiB inflated
    packet = pb.TracePacket()
    packet.compressed_packets = bomb
    path = tmp_path / "rank0.pftrace"
    path.write_bytes(one_rank(tmp_path).read_bytes() + conv.frame(packet.SerializeToString()))
    assert_one_line_error(run_cli(path), path, "zip bomb")


def test_damaged_middle_and_wrong_wire_types_are_load_issues(tmp_path: Path):
    good = one_rank(tmp_path).read_bytes()
    _, all_rows = read(one_rank(tmp_path))
    # a packet whose track_event (field 11) is a varint: decoded as an unknown field, ignored
    wrong_type = conv.frame(bytes([11 << 3 | 0, 1]))
    # a packet whose bytes are not a TracePacket (a length running past its end)
    garbage = conv.frame(b"\x5a\x7f\x01")
    path = tmp_path / "rank0.pftrace"
    path.write_bytes(good + wrong_type + garbage + b"\x0a" + conv._varint(1 << 40) + b"rest")
    got, rows = read(path)
    assert rows == all_rows
    kinds = {kind for kind, _, _ in got.notes}
    assert {"bad-packets", "damaged"} <= kinds
    db = tmp_path / "t.duckdb"
    load_trace_dir(path, db)
    with duckdb.connect(str(db), read_only=True) as con:
        issues = {k for (k,) in con.execute("SELECT kind FROM load_issues WHERE severity = 'warning'").fetchall()}
    assert {"bad-packets", "damaged"} <= issues


FUZZ = settings(max_examples=80, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@FUZZ
@given(data=st.data())
def test_fuzz_mutated_bytes_load_or_fail_cleanly(tmp_path_factory, data):
    base = getattr(test_fuzz_mutated_bytes_load_or_fail_cleanly, "base", None)
    if base is None:
        base = one_rank(tmp_path_factory.mktemp("fuzzbase")).read_bytes()[:60_000]
        test_fuzz_mutated_bytes_load_or_fail_cleanly.base = base
    raw = bytearray(base)
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(raw) - 1))
        action = data.draw(st.sampled_from(["flip", "insert", "delete", "cut"]))
        if action == "flip":
            raw[at] = data.draw(st.integers(0, 255))
        elif action == "insert":
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=12))
        elif action == "delete":
            del raw[at:at + data.draw(st.integers(1, 64))]
        else:
            del raw[at:]
        if not raw:
            raw = bytearray(b"\x0a")
    path = tmp_path_factory.mktemp("fuzz") / "rank0.pftrace"
    path.write_bytes(bytes(raw))
    con = fresh_db()
    try:
        got = read_rank(con, identify(path, only_file=True))
    except TraceanalyzeError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc)
        return
    (n,) = con.execute("SELECT count(*) FROM raw_events").fetchone()
    assert n == got.events


def test_our_merged_perfetto_trace_reads_back(tmp_path: Path):
    run = run_analysis(REAL / "kineto-resnet50-nw0", tmp_path / "out", html=False, perfetto=True)
    merged = run.paths.perfetto_trace
    trace = pb.Trace.FromString(merged.read_bytes())
    begins = sum(p.track_event.type == pb.TrackEvent.TYPE_SLICE_BEGIN for p in trace.packet)
    counters = sum(p.track_event.type == pb.TrackEvent.TYPE_COUNTER for p in trace.packet)
    names = {p.track_descriptor.process.process_name for p in trace.packet if p.track_descriptor.process.pid}
    db = tmp_path / "merged.duckdb"
    load_trace_dir(merged, db)
    with duckdb.connect(str(db), read_only=True) as con:
        (x,) = con.execute("SELECT count(*) FROM raw_events WHERE ph = 'X' AND dur_ns >= 0").fetchone()
        (c,) = con.execute("SELECT count(*) FROM raw_events WHERE ph = 'C'").fetchone()
        processes = {n for (n,) in con.execute(
            "SELECT process_name FROM threads WHERE process_name IS NOT NULL").fetchall()}
        (steps_track,) = con.execute(
            "SELECT count(*) FROM raw_events WHERE tid = 'steps' AND name LIKE 'ProfilerStep#%'").fetchone()
    assert x == begins > 0 and c == counters
    assert processes == names == {"rank 0"}
    assert steps_track > 0  # the steps track (a named child track) keeps its name as the tid


def test_invalid_utf8_and_odd_phases_do_not_break_the_read(tmp_path: Path):
    track = pb.TracePacket(trusted_packet_sequence_id=1)
    track.track_descriptor.uuid = 5
    track.track_descriptor.thread.pid, track.track_descriptor.thread.tid = 1, 2
    event = pb.TracePacket(timestamp=1000, trusted_packet_sequence_id=1)
    event.track_event.type = pb.TrackEvent.TYPE_INSTANT
    event.track_event.track_uuid = 5
    event.track_event.name = "Xbc"
    odd = pb.TracePacket(timestamp=2000, trusted_packet_sequence_id=1)
    odd.track_event.track_uuid = 5
    odd.track_event.legacy_event.phase = -7  # not a Chrome phase
    data = b"".join(conv.frame(p.SerializeToString()) for p in (track, event, odd)).replace(b"Xbc", b"\xffbc")
    path = tmp_path / "rank0.pftrace"
    path.write_bytes(data)
    got, rows = read(path)
    assert [(r[1], r[3], r[4], r[5], r[6]) for r in rows] == [("i", "\ufffdbc", "1", "2", 1000)]
    assert ("unknown-event-type", 1) in {(k, n) for k, _, n in got.notes}
