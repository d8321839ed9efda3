"""Issue 6: hostile and broken inputs, generated here from real traces.

Every case ends one of two ways: exit 2 with one line `error: <file>: <problem>` (no
traceback), or a database whose load_issues record what was wrong, while the rest of the
analysis equals what the intact input gives. Expected numbers come from the JSON (tracejson).
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import shutil
import subprocess
import sys
import zlib
from collections import Counter
from pathlib import Path

import duckdb
import pytest
import tracejson as tj
from conftest import REAL_TRACES

from traceanalyze.errors import TraceanalyzeError
from traceanalyze.load import load_trace_dir
from traceanalyze.load import source as source_module

# ---------------------------------------------------------------- helpers


def load(folder: Path) -> Path:
    """In-process load (the CLI is exercised where stderr matters); returns the database."""
    db = folder.parent / f"{folder.name}.duckdb"
    load_trace_dir(folder, db, reuse=False)
    return db


def q(db: Path, sql: str, *params):
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql, list(params)).fetchall()


def issues(db: Path) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    for rank, file, kind, severity, message, count in q(db, "SELECT * FROM load_issues"):
        out.setdefault(kind, []).append((rank, file, severity, message, count))
    return out


def one_line_error(proc, path: Path, *words: str) -> str:
    """Exit 2, one line on stderr naming exactly `path`, with the key words; no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith("traceanalyze: ")]
    assert len(lines) == 1, proc.stderr  # one error line (besides progress messages)
    assert lines[0].startswith(f"error: {path}: "), (lines[0], str(path))
    assert proc.stderr.strip().splitlines()[-1] == lines[0]
    for w in words:
        assert w.lower() in lines[0].lower(), (w, lines[0])
    return lines[0]


def raises_naming(folder: Path, path: Path, *words: str) -> str:
    with pytest.raises(TraceanalyzeError) as info:
        load(folder)
    message = info.value.format_message()
    assert message.startswith(f"{path}: "), (message, path)
    for w in words:
        assert w.lower() in message.lower(), (w, message)
    return message


def put(folder: Path, name: str, data: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(data)
    return path


def copy_world(run: dict[int, Path], folder: Path, ranks=None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for r, p in run.items():
        if ranks is None or r in ranks:
            shutil.copy2(p, folder / p.name)
    return folder


@pytest.fixture(scope="session")
def run0(recorded_runs):
    return recorded_runs[0]


@pytest.fixture(scope="session")
def rank0_text(run0) -> bytes:
    """The uncompressed JSON text of rank 0 of a recorded run."""
    return tj.read_bytes(run0[0])


@pytest.fixture(scope="session")
def rank0_events(rank0_text):
    obj = tj.load_json(rank0_text)
    return {k: v for k, v in obj.items() if k != "traceEvents"}, obj["traceEvents"]


@pytest.fixture(scope="session")
def intact(run0, tmp_path_factory) -> Path:
    """The recorded run loaded as it is: the reference the damaged copies are compared with."""
    return load(copy_world(run0, tmp_path_factory.mktemp("intact") / "t"))


@pytest.fixture(scope="session")
def intact_rank0(run0, rank0_text, tmp_path_factory) -> Path:
    return load(put(tmp_path_factory.mktemp("intact0") / "t", "rank0.json", rank0_text).parent)


# ---------------------------------------------------------------- truncation

CUTS = 20


def cut_points(text: bytes) -> list[int]:
    start, ends = tj.event_end_offsets(text)
    span = len(text) - start
    points = [start + span * k // (CUTS + 1) for k in range(1, CUTS + 1)]
    points[0] = ends[10]  # exactly after an event
    points[1] = ends[10] + 1  # just after it: the separating comma
    points[-1] = len(text) - 5  # inside the metadata after the events
    return points


@pytest.mark.parametrize("k", range(CUTS))
def test_truncated_plain_file_keeps_every_complete_event(rank0_text, rank0_events, tmp_path, k):
    cut = cut_points(rank0_text)[k]
    _, ends = tj.event_end_offsets(rank0_text)
    expected = sum(1 for end in ends if end <= cut)
    db = load(put(tmp_path / "t", "rank0.json", rank0_text[:cut]).parent)
    assert q(db, "SELECT count(*) FROM raw_events") == [(expected,)]
    # and they are exactly the first `expected` events, times exact
    top, events = rank0_events
    base = tj.base_ns(top)
    want = Counter((e.get("ph"), e.get("name"), tj.to_ns(e.get("ts"), base)) for e in events[:expected])
    got = Counter({(ph, name, ts): n for ph, name, ts, n in q(
        db, "SELECT ph, name, ts_ns, count(*) FROM raw_events GROUP BY ALL")})
    assert got == want
    (truncated,) = issues(db)["truncated"]
    assert truncated[2] == "warning" and f"byte {cut:,}" in truncated[3]
    assert q(db, "SELECT truncated FROM ranks") == [(True,)]


@pytest.mark.parametrize("k", range(CUTS))
def test_truncated_gzip_stream_keeps_every_complete_event(run0, rank0_text, tmp_path, k):
    """A job killed while writing rank0.json.gz: the compressed stream stops mid-way."""
    compressed = run0[0].read_bytes()
    cut = len(compressed) * (k + 1) // (CUTS + 1)
    readable = len(zlib.decompressobj(31).decompress(compressed[:cut]))  # what stdlib zlib can decode
    _, ends = tj.event_end_offsets(rank0_text)
    expected = sum(1 for end in ends if end <= readable)
    assert 0 < expected < len(ends)
    db = load(put(tmp_path / "t", "rank0.json.gz", compressed[:cut]).parent)
    assert q(db, "SELECT count(*) FROM raw_events") == [(expected,)]
    assert "truncated" in issues(db)


def test_truncation_is_reported_on_stderr(cli, run0, rank0_text, tmp_path):
    folder = tmp_path / "t"
    copy_world(run0, folder, ranks={1, 2, 3})
    path = put(folder, run0[0].name, gzip.compress(rank0_text)[: len(run0[0].read_bytes()) // 2])
    proc = cli("load", folder, "--db", tmp_path / "x.duckdb")
    assert proc.returncode == 0, proc.stderr
    warning = [line for line in proc.stderr.splitlines() if "ends abruptly" in line]
    assert warning and warning[0].startswith(f"traceanalyze: warning: {path}: ")
    assert "Traceback" not in proc.stderr
    # -q hides progress, not warnings
    quiet = cli("load", folder, "--db", tmp_path / "y.duckdb", "-q")
    assert any("ends abruptly" in line for line in quiet.stderr.splitlines())


def test_a_load_prints_the_load_issues_its_database_holds(cli, run0, rank0_text, tmp_path):
    """The load hands the command the issues it read while building the database (not opened
    again to read them): the lines are the database's load_issues, warnings first, the same
    as a re-run (which reads them from the stored database) prints."""
    folder = tmp_path / "t"
    copy_world(run0, folder, ranks={1, 2, 3})
    put(folder, run0[0].name, gzip.compress(rank0_text)[: len(run0[0].read_bytes()) // 2])
    db = tmp_path / "x.duckdb"
    fresh, again = cli("load", folder, "--db", db), cli("load", folder, "--db", db)
    assert fresh.returncode == 0 and again.returncode == 0, fresh.stderr + again.stderr
    assert "reused" in again.stdout

    def printed(proc):
        return [line for line in proc.stderr.splitlines()
                if line.startswith(("traceanalyze: warning: ", "traceanalyze: info: "))]

    rows = q(db, "SELECT severity, file, message, count FROM load_issues")
    assert any(severity == "warning" for severity, *_ in rows)
    expected = [f"traceanalyze: {sev}: " + (f"{file}: " if file else "") + message
                + (f" ({count:,} events)" if count else "") for sev, file, message, count in rows]
    assert sorted(printed(fresh)) == sorted(expected)
    assert [line.split(": ")[1] for line in printed(fresh)] == sorted(
        [sev for sev, *_ in rows], key=lambda s: s == "info")
    assert printed(fresh) == printed(again)


def test_cut_inside_the_header_is_a_clear_error(cli, rank0_text, tmp_path):
    start, _ = tj.event_end_offsets(rank0_text)
    folder = tmp_path / "t"
    path = put(folder, "rank0.json", rank0_text[: start // 2])
    one_line_error(cli("load", folder, "--db", tmp_path / "x.duckdb"), path, "traceEvents")
    # the same cut in a gzip stream
    stream = gzip.compress(rank0_text)
    assert len(zlib.decompressobj(31).decompress(stream[:40])) < start
    gz_folder = tmp_path / "g"
    gz_path = put(gz_folder, "rank0.json.gz", stream[:40])
    one_line_error(cli("load", gz_folder, "--db", tmp_path / "y.duckdb"), gz_path, "cut short", "traceEvents")


# ---------------------------------------------------------------- corrupt and empty files

@pytest.mark.parametrize("where", [0.001, 0.1, 0.5, 0.9, -8, -1, 3])  # (-8: CRC, -1: length, 3: flags)
def test_corrupt_gzip_is_a_clear_error(cli, run0, tmp_path, where):
    data = bytearray(run0[0].read_bytes())
    i = int(len(data) * where) if isinstance(where, float) else where % len(data)
    data[i] ^= 0x5A
    folder = tmp_path / "t"
    path = put(folder, run0[0].name, bytes(data))
    proc = cli("load", folder, "--db", tmp_path / "x.duckdb")
    one_line_error(proc, path, "corrupt gzip")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]  # no database, no leftovers


def test_gzip_with_trailing_garbage_loads_with_a_warning(run0, tmp_path):
    folder = tmp_path / "t"
    put(folder, "rank0.json.gz", run0[0].read_bytes() + b"garbage after the stream")
    db = load(folder)
    assert q(db, "SELECT count(*) FROM raw_events") == [(len(tj.read_trace(run0[0])[1]),)]
    assert "gzip-trailing-data" in issues(db)


def test_concatenated_gzip_members_are_one_stream(rank0_text, tmp_path):
    folder = tmp_path / "t"
    half = len(rank0_text) // 2
    put(folder, "rank0.json.gz", gzip.compress(rank0_text[:half]) + gzip.compress(rank0_text[half:]) + b"\0" * 64)
    db = load(folder)
    assert q(db, "SELECT count(*) FROM raw_events") == [(len(tj.event_end_offsets(rank0_text)[1]),)]
    assert issues(db).keys() <= {"rank-missing"}  # (a world of 4 of which only rank 0 is here)


UNTIMED = [  # (trace, what the error says of it)
    ({"traceEvents": []}, "an empty trace"),
    ({"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}]}, "an empty trace"),
    ({"traceEvents": [{"ph": "X", "name": "x", "ts": "12", "dur": "5", "pid": 1, "tid": 1},
                      {"ph": "X", "name": "y", "ts": 1e300, "dur": 5, "pid": 1, "tid": 1}]},
     "every event was skipped: bad-ts 2"),
]


@pytest.mark.parametrize("trace, why", UNTIMED, ids=["no-events", "metadata-only", "bad-ts"])
def test_a_trace_with_no_timed_event_is_a_clear_error_to_analyze_and_a_database_to_query(cli, tmp_path, trace,
                                                                                         why):
    # the analysis has nothing to measure: exit 2 naming the file (it once ended in a traceback
    # in the terminal verdict); `load` still builds the database, whose load_issues say why
    path = put(tmp_path / "t", "rank0.json", json.dumps(trace).encode())
    out = tmp_path / "out"
    line = one_line_error(cli(path.parent, "--out", out), path, "no event with a time to analyze")
    assert f"({why})" in line
    assert not (out / "summary.json").exists() and not (out / "report.html").exists()
    db = tmp_path / "x.duckdb"
    proc = cli("load", path.parent, "--db", db)
    assert proc.returncode == 0, proc.stderr
    assert q(db, "SELECT count(*) FROM steps") == [(0,)]
    bad_ts = issues(db).get("bad-ts")
    assert (bad_ts[0][4] if bad_ts else 0) == sum(1 for e in trace["traceEvents"] if e["ph"] == "X")


def test_a_rank_with_no_timed_event_beside_good_ones_is_left_out_and_reported(cli, run0, tmp_path):
    # as a rank that cannot be read is (it once failed the whole load: 'the ranks share no step')
    folder = copy_world(run0, tmp_path / "t", ranks={0})
    path = put(folder, "rank1.json", json.dumps({"distributedInfo": {"rank": 1}, "traceEvents": []}).encode())
    db = tmp_path / "x.duckdb"
    proc = cli("load", folder, "--db", db)
    assert proc.returncode == 0, proc.stderr
    assert q(db, "SELECT rank FROM ranks") == [(0,)]
    ((rank, file, severity, message, _),) = issues(db)["rank-untimed"]
    assert (rank, file, severity) == (1, str(path), "warning") and "no event with a time" in message
    gate = cli("check", folder, "--out", tmp_path / "report")  # a rank lost as a whole fails the gate
    assert gate.returncode == 1 and "rank 1" in gate.stdout + gate.stderr, gate.stdout + gate.stderr


def test_ranks_that_all_lack_a_timed_event_are_one_error_naming_the_first(cli, tmp_path):
    folder = tmp_path / "t"
    paths = [put(folder, f"rank{r}.json", json.dumps({"distributedInfo": {"rank": r}, "traceEvents": []}).encode())
             for r in (0, 1)]
    one_line_error(cli(folder, "--out", tmp_path / "out"), paths[0],
                   "no rank has an event with a time to analyze (rank 0: an empty trace; 2 ranks)")


@pytest.mark.parametrize("command", ["load", "analyze"])
def test_a_failed_load_leaves_no_folder_it_made_for_its_outputs(cli, tmp_path, command):
    path = put(tmp_path / "t", "rank0.json", b'{"traceEvents": {"ph": "X"}}')
    (tmp_path / "kept").mkdir()
    made = tmp_path / "kept" / "new" / "deeper"
    args = ["load", path.parent, "--db", made / "x.duckdb"] if command == "load" else [path.parent, "--out", made]
    one_line_error(cli(*args), path, "no traceEvents")
    assert list((tmp_path / "kept").iterdir()) == []  # the folder that was there stays, empty


@pytest.mark.parametrize("name", ["rank0.json", "rank0.json.gz"])
def test_zero_byte_file(cli, tmp_path, name):
    path = put(tmp_path / "u", name, b"")
    one_line_error(cli("load", path.parent, "--db", tmp_path / "x.duckdb"), path, "empty")


def test_a_rank_that_cannot_be_read_is_left_out_and_reported(cli, run0, tmp_path):
    """One bad rank among good ones: the others are analyzed, the bad one is a load issue
    naming its file, on stderr and in load_issues."""
    folder = copy_world(run0, tmp_path / "t", ranks={0})
    path = put(folder, "rank1.pt.trace.json.gz", b"")
    db = tmp_path / "x.duckdb"
    proc = cli("load", folder, "--db", db)
    assert proc.returncode == 0, proc.stderr
    assert f"warning: {path}: this rank could not be read" in proc.stderr
    assert q(db, "SELECT rank FROM ranks") == [(0,)]
    ((rank, file, severity, message, _),) = issues(db)["rank-failed"]
    assert (rank, file, severity) == (1, str(path), "warning") and "empty" in message



def test_a_load_with_a_rank_left_out_is_never_reused(cli, run0, tmp_path):
    """The traces unchanged, a database missing a rank is built again (the rank is read again and
    reported again), never reused as it is."""
    folder = copy_world(run0, tmp_path / "t", ranks={0})
    path = put(folder, "rank1.pt.trace.json.gz", b"")
    db = tmp_path / "x.duckdb"
    first, second = cli("load", folder, "--db", db), cli("load", folder, "--db", db)
    assert (first.returncode, second.returncode) == (0, 0), second.stderr
    assert "reusing" not in second.stderr and "parsing 1 of 2 trace file(s)" in second.stderr
    assert f"warning: {path}: this rank could not be read" in second.stderr
    assert q(db, "SELECT rank FROM ranks") == [(0,)]

NOT_TRACES = [
    (b'{"foo": 1, "bar": [1, 2]}', ["no traceEvents"]),
    (b'"just a string"', ["no traceEvents"]),
    (b"null", ["no traceEvents"]),
    (b'{"traceEvents": 5}', ["no traceEvents"]),
    (b'{"traceEvents": {"ph": "X"}}', ["no traceEvents"]),
    (b"hello, this is not JSON", ["not JSON"]),
    (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 20, ["not JSON"]),
    ('{"traceEvents": []}'.encode("utf-16"), ["UTF-16"]),
    (b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}, {"ph": "X", oops}]}', ["malformed"]),
    (b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1},, {"ph": "X"}]}', ["malformed"]),
]


@pytest.mark.parametrize("content, words", NOT_TRACES, ids=[f"case{i}" for i in range(len(NOT_TRACES))])
def test_not_a_trace_is_a_clear_error(cli, tmp_path, content, words):
    folder = tmp_path / "t"
    path = put(folder, "rank0.json", content)
    one_line_error(cli("load", folder, "--db", tmp_path / "x.duckdb"), path, *words)


def test_unusable_database_paths(cli, tmp_path):
    trace = REAL_TRACES / "hta-cpu-only"
    (tmp_path / "a_folder").mkdir()
    put(tmp_path, "a_file", b"x")
    one_line_error(cli("load", trace, "--db", tmp_path / "a_folder"), tmp_path / "a_folder", "is a folder")
    one_line_error(cli("load", trace, "--db", tmp_path / "a_file" / "x.duckdb"), tmp_path / "a_file" / "x.duckdb",
                   "cannot write the database")
    one_line_error(cli("load", trace, "--db", "/proc/x.duckdb"), Path("/proc/x.duckdb"), "cannot write the database")


def test_empty_folder_and_missing_path(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    put(tmp_path / "empty", "notes.txt", b"hello")
    one_line_error(cli("load", tmp_path / "empty", "--db", tmp_path / "x.duckdb"), tmp_path / "empty", "no trace files")
    one_line_error(cli("load", tmp_path / "nope", "--db", tmp_path / "x.duckdb"), tmp_path / "nope", "no such file")


@pytest.mark.parametrize("events", [
    [1, "two", None, [], {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}],
    [{"ph": "X", "cat": "cpu_op", "name": {"not": "a string"}, "pid": [1], "tid": {"t": 1},
      "ts": 1, "dur": 1, "args": [1, 2, 3]}],
    [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5, "dur": 1,
      "args": {"correlation": "abc", "device": 1.5, "stream": [7], "External id": {"x": 1}}}],
])
def test_events_of_the_wrong_shape_load_with_issues(tmp_path, events):
    folder = tmp_path / "t"
    put(folder, "rank0.json", json.dumps({"traceEvents": events}).encode())
    db = load(folder)
    assert q(db, "SELECT count(*) FROM raw_events") == [(len(events),)]
    non_objects = sum(1 for e in events if not isinstance(e, dict))
    found = issues(db)
    if non_objects:
        assert found["no-ph"][0][4] == non_objects
    if any(isinstance(e, dict) and not isinstance(e.get("args", {}), dict) for e in events) or non_objects:
        assert "unexpected-types" in found


GOOD = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 100, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 110, "dur": 10}]
GOOD_TEXT = json.dumps({"traceEvents": GOOD})


@pytest.mark.parametrize("text, events, kinds", [
    ("\ufeff" + GOOD_TEXT, 2, set()),                                                  # a UTF-8 BOM
    ('{"meta": {"traceEvents": [1]}, "traceEvents": ' + json.dumps(GOOD) + "}", 2, set()),  # nested key first
    (GOOD_TEXT.replace('"ts": 110', '"ts": 110, "ts": 115'), 2, {"duplicate-keys"}),  # the last one is read
    (GOOD_TEXT + "trailing garbage", 2, {"trailing-data"}),
    ('{"traceEvents": [' + "[" * 100_000 + "]" * 100_000 + "]}", 1, {"no-ph", "unexpected-types"}),
    ('{"traceEvents": [' + json.dumps(GOOD[0]) + ", " + "[" * 100_000, 1, {"truncated"}),  # deep and cut
], ids=["bom", "nested-traceEvents", "duplicate-key", "trailing-garbage", "deep-nesting", "deep-and-cut"])
def test_odd_json_layouts(tmp_path, text, events, kinds):
    db = load(put(tmp_path / "t", "rank0.json", text.encode()).parent)
    assert q(db, "SELECT count(*) FROM raw_events") == [(events,)]
    assert set(issues(db)) - {"rank-from-name"} == kinds
    if not kinds:
        assert q(db, "SELECT name, ts_ns, dur_ns FROM cpu_ops") == [("aten::mm", 110_000, 10_000)]
    if kinds == {"duplicate-keys"}:
        assert q(db, "SELECT name, ts_ns FROM cpu_ops") == [("aten::mm", 115_000)]


# ---------------------------------------------------------------- wrong types inside a real trace

def test_wrong_types_are_counted_and_the_rest_is_intact(rank0_events, intact_rank0, tmp_path):
    top, events = rank0_events
    tid = next(e["tid"] for e in events if e.get("cat") == "cpu_op")
    pid = next(e["pid"] for e in events if e.get("cat") == "cpu_op")
    ts = next(e["ts"] for e in events if e.get("cat") == "cpu_op")
    bad = lambda **kw: {"ph": "X", "cat": "cpu_op", "name": "injected", "pid": pid, "tid": tid,  # noqa: E731
                        "ts": ts, "dur": 1, **kw}
    injected = (
        [bad(ts=str(ts)) for _ in range(3)]                    # string ts
        + [bad(ts=None), bad(ts=True), bad(ts={"us": 1})]      # null, bool, object ts
        + [bad(ts="NaN-MARK"), bad(ts="INF-MARK")]             # NaN and Infinity (non-standard JSON)
        + [bad(dur=-5) for _ in range(4)]                      # negative dur
        + [bad(dur="12")]                                      # string dur
        + [{k: v for k, v in bad().items() if k != "ph"} for _ in range(2)]  # missing ph
    )
    rng = random.Random(6)
    mixed = list(events)
    for e in injected:
        mixed.insert(rng.randrange(len(mixed) + 1), e)
    text = tj.dumps({**top, "traceEvents": mixed})
    text = text.replace('"NaN-MARK"', "NaN").replace('"INF-MARK"', "Infinity")
    db = load(put(tmp_path / "t", "rank0.json", text.encode()).parent)
    found = issues(db)
    assert found["bad-ts"][0][4] == 8
    assert found["bad-dur"][0][4] == 5
    assert found["no-ph"][0][4] == 2
    assert q(db, "SELECT count(*) FROM raw_events") == [(len(events) + len(injected),)]
    # nothing injected reached the tables; everything else is as in the intact trace
    assert q(db, "SELECT count(*) FROM cpu_ops WHERE name = 'injected'") == [(0,)]
    for table in ("steps", "cpu_ops", "annotations", "collectives", "memory"):
        sql = f"SELECT * FROM {table} ORDER BY ALL"
        assert q(db, sql) == q(intact_rank0, sql), table


def test_events_out_of_order_give_the_same_tables(run0, intact, tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    rng = random.Random(2)
    for r, p in run0.items():
        top, events = tj.read_trace(p)
        rng.shuffle(events)
        tj.write_trace(folder / p.name, top, events, gz=r % 2 == 0)
    db = load(folder)
    for table in ("steps", "aligned_steps", "cpu_ops", "annotations", "collectives", "memory"):
        sql = f"SELECT * FROM {table} ORDER BY ALL"
        assert q(db, sql) == q(intact, sql), table
    sql = "SELECT rank, clock_offset_ns FROM ranks ORDER BY rank"
    assert q(db, sql) == q(intact, sql)


# ---------------------------------------------------------------- B/E pairs

def to_begin_end(events: list[dict]) -> tuple[list[dict], int]:
    """Rewrite host X events as B/E pairs, thread by thread, where they nest like a stack
    (threads where they do not stay X). Returns (events, number of pairs written)."""
    host = [e for e in events if tj.complete(e) and e.get("cat") in ("cpu_op", "user_annotation")]
    by_thread: dict = {}
    for i, e in enumerate(host):
        by_thread.setdefault((str(e.get("pid")), str(e.get("tid"))), []).append((i, e))
    converted, out_of = set(), []
    for group in by_thread.values():
        group.sort(key=lambda ie: (ie[1]["ts"], -ie[1]["dur"], ie[0]))
        emitted, stack, ok = [], [], True
        for i, e in group:
            end = e["ts"] + e["dur"]
            while stack and stack[-1][0] <= e["ts"]:
                emitted.append(stack.pop()[1])
            if stack and end > stack[-1][0]:
                ok = False
                break
            emitted.append({k: v for k, v in e.items() if k != "dur"} | {"ph": "B"})
            closing = {"ph": "E", "pid": e["pid"], "tid": e["tid"], "ts": end}
            if i % 2:
                closing["name"] = e["name"]
            stack.append((end, closing))
        emitted += [c for _, c in reversed(stack)]
        if ok:
            converted.update(id(e) for _, e in group)
            out_of.extend(emitted)
    rest = [e for e in events if id(e) not in converted]
    return rest + out_of, len(converted)


def test_begin_end_pairs_work_like_complete_events(run0, intact, tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    pairs = {}
    for r, p in run0.items():
        top, events = tj.read_trace(p)
        rewritten, pairs[r] = to_begin_end(events)
        assert pairs[r] > 0.9 * sum(1 for e in events if e.get("cat") in ("cpu_op", "user_annotation"))
        tj.write_trace(folder / p.name, top, rewritten)
    db = load(folder)
    for table in ("steps", "aligned_steps", "cpu_ops", "annotations", "collectives"):
        sql = f"SELECT * FROM {table} ORDER BY ALL"
        assert q(db, sql) == q(intact, sql), table
    got = {rank: n for rank, _, _, _, n in issues(db)["begin-end"]}
    assert got == pairs
    assert "unmatched-begin-end" not in issues(db)


def test_begin_end_edge_cases(tmp_path):
    ev = lambda ph, ts, name=None, tid=1: {"ph": ph, "pid": 1, "tid": tid, "ts": ts,  # noqa: E731
                                           "cat": "cpu_op", **({"name": name} if name else {})}
    events = [
        ev("B", 100, "ProfilerStep#1"), ev("B", 110, "outer"), ev("B", 110, "inner"), ev("E", 120),
        ev("E", 130), ev("B", 130, "zero"), ev("E", 130, "zero"), ev("E", 200),
        ev("B", 200, "ProfilerStep#2"), ev("E", 300, "ProfilerStep#2"),
        ev("E", 150, tid=2),                      # an end without a begin
        ev("B", 160, "never closed", tid=3),      # a begin without an end
        {"ph": "X", "cat": "cpu_op", "name": "x-op", "pid": 1, "tid": 1, "ts": 210, "dur": 5},
    ]
    for e in events:
        if e.get("name", "").startswith("ProfilerStep"):
            e["cat"] = "user_annotation"
    db = load(put(tmp_path / "t", "rank0.json", json.dumps({"traceEvents": events}).encode()).parent)
    assert q(db, "SELECT step, ts_ns, dur_ns FROM steps ORDER BY step") == [
        (1, 100_000, 100_000), (2, 200_000, 100_000)]
    assert q(db, "SELECT step, name, ts_ns, dur_ns FROM cpu_ops ORDER BY ts_ns, name") == [
        (1, "inner", 110_000, 10_000), (1, "outer", 110_000, 20_000), (1, "zero", 130_000, 0),
        (2, "x-op", 210_000, 5_000)]
    found = issues(db)
    assert found["begin-end"][0][4] == 5
    assert found["unmatched-begin-end"][0][4] == 2


def test_a_step_number_that_occurs_twice_is_reported(tmp_path):
    step = lambda n, ts: {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}",  # noqa: E731
                          "pid": 1, "tid": 1, "ts": ts, "dur": 10}
    events = [step(1, 0), step(2, 10), step(1, 100), step(3, 110)]  # a restarted schedule
    db = load(put(tmp_path / "t", "rank0.json", json.dumps({"traceEvents": events}).encode()).parent)
    (dup,) = issues(db)["duplicate-step"]
    assert dup[2] == "warning" and "ProfilerStep#1" in dup[3] and dup[4] == 1
    assert q(db, "SELECT step, ts_ns, end_ns FROM steps ORDER BY step") == [
        (1, 0, 110_000), (2, 10_000, 20_000), (3, 110_000, 120_000)]


# ---------------------------------------------------------------- several ranks

def rename_steps(text: bytes, delta: int) -> bytes:
    return re.sub(rb"ProfilerStep#(\d+)", lambda m: b"ProfilerStep#%d" % (int(m.group(1)) + delta), text)


def test_ranks_with_disjoint_step_sets(cli, run0, tmp_path):
    folder = copy_world(run0, tmp_path / "t", ranks={0})
    put(folder, run0[1].name, gzip.compress(rename_steps(tj.read_bytes(run0[1]), 100)))
    one_line_error(cli("load", folder, "--db", tmp_path / "x.duckdb"), folder / run0[0].name,
                   "share no ProfilerStep", "different runs")


def test_ranks_with_partly_overlapping_steps(run0, tmp_path):
    folder = copy_world(run0, tmp_path / "t", ranks={0, 2, 3})
    put(folder, run0[1].name, gzip.compress(rename_steps(tj.read_bytes(run0[1]), 3)))
    mine = sorted(int(n) for n in re.findall(rb'"ProfilerStep#(\d+)"', tj.read_bytes(run0[0])))
    db = load(folder)
    assert [s for (s,) in q(db, "SELECT step FROM aligned_steps ORDER BY step")] == [n for n in mine if n - 3 in mine]
    dropped = {r: n for r, _, _, _, n in issues(db)["step-not-on-all-ranks"]}
    assert dropped == {0: 3, 1: 3, 2: 3, 3: 3}


def test_two_runs_with_different_world_sizes(cli, run0, tmp_path):
    folder = copy_world(run0, tmp_path / "t", ranks={0, 1, 2})
    text = tj.read_bytes(run0[3])
    assert text.count(b'"world_size": 4') == 1
    odd = put(folder, run0[3].name, gzip.compress(text.replace(b'"world_size": 4', b'"world_size": 8')))
    one_line_error(cli("load", folder, "--db", tmp_path / "x.duckdb"), odd, "different runs", "world size 8")


def test_two_runs_of_the_same_world_in_one_folder(cli, recorded_runs, tmp_path):
    """Ranks 0-1 of one run and 2-3 of another, recorded on the same host minutes apart."""
    a, b = recorded_runs
    folder = copy_world(a, tmp_path / "t", ranks={0, 1})
    copy_world(b, folder, ranks={2, 3})

    def first_step_ns(path):
        top, events = tj.read_trace(path)
        return min(lo for lo, _ in tj.steps(events, tj.base_ns(top)).values())

    starts = {r: first_step_ns(p) for r, p in [(0, a[0]), (1, a[1]), (2, b[2]), (3, b[3])]}
    later = [0, 1] if min(starts[0], starts[1]) > min(starts[2], starts[3]) else [2, 3]
    first_of_later = min(later, key=starts.get)
    named = folder / (a if first_of_later < 2 else b)[first_of_later].name
    proc = cli("load", folder, "--db", tmp_path / "x.duckdb")
    line = one_line_error(proc, named, "different runs", "host")
    assert f"rank {first_of_later} " in line


def with_base(text: bytes, value) -> bytes:
    """The trace `text` with its baseTimeNanoseconds set to `value` (the JSON as written)."""
    new, n = re.subn(rb'"baseTimeNanoseconds": *-?[0-9]+', b'"baseTimeNanoseconds": ' + value, text)
    assert n == 1
    return new


def test_one_rank_whose_time_base_is_not_a_number_is_the_one_named(cli, run0, tmp_path):
    """Rank 1's baseTimeNanoseconds spoilt (a string): its relative times are read as absolute,
    decades before the other three ranks recorded on the same host. The error names rank 1's
    file and its time base, not a rank of the three that agree (the later ones)."""
    folder = copy_world(run0, tmp_path / "t", ranks={0, 2, 3})
    bad = put(folder, run0[1].name, gzip.compress(with_base(tj.read_bytes(run0[1]), b'"1790857026000000000"')))
    line = one_line_error(cli("load", folder, "--db", tmp_path / "x.duckdb"), bad, "baseTimeNanoseconds",
                          "ranks 0, 2, 3")
    assert line.startswith(f"error: {bad}: rank 1's ")


def test_a_rank_recorded_long_before_the_others_is_the_one_named(cli, run0, tmp_path):
    """Rank 2's time base a day early (a number: usable, but wrong): the three others overlap, so
    rank 2 is the one outside the run, named though its window comes first."""
    folder = copy_world(run0, tmp_path / "t", ranks={0, 1, 3})
    text = tj.read_bytes(run0[2])
    (old,) = re.findall(rb'"baseTimeNanoseconds": *([0-9]+)', text)
    early = str(int(old) - 86_400 * 10**9).encode()
    bad = put(folder, run0[2].name, gzip.compress(with_base(text, early)))
    line = one_line_error(cli("load", folder, "--db", tmp_path / "x.duckdb"), bad, "different runs", "host",
                          "ranks 0, 1, 3", "before theirs began")
    assert line.startswith(f"error: {bad}: rank 2 was recorded")
    assert "baseTimeNanoseconds" not in line


@pytest.mark.parametrize("value", ['"x"', "true", "-1", "1.790857026e+18", "4611686018427387904", "null", "[]"])
def test_an_unusable_time_base_is_noted_for_its_rank(run0, tmp_path, value):
    """A single rank whose baseTimeNanoseconds no clock can use (text, a boolean, negative, a
    float, 2^62 and over, null, a list) still loads, with a bad-time-base warning for it."""
    folder = copy_world(run0, tmp_path / "t", ranks={0})
    put(folder, run0[0].name, gzip.compress(with_base(tj.read_bytes(run0[0]), value.encode())))
    (note,) = issues(load(folder))["bad-time-base"]
    assert note[0] == 0 and note[2] == "warning" and "baseTimeNanoseconds" in note[3]


@pytest.mark.parametrize("value", ["0", None])
def test_a_zero_or_missing_time_base_is_no_issue(run0, tmp_path, value):
    """0 (the times are absolute) and no key at all are what older traces write: no note."""
    folder = copy_world(run0, tmp_path / "t", ranks={0})
    text = tj.read_bytes(run0[0])
    text = with_base(text, value.encode()) if value else re.sub(rb'"baseTimeNanoseconds": *[0-9]+,?', b"", text)
    put(folder, run0[0].name, gzip.compress(text))
    assert "bad-time-base" not in issues(load(folder))


def test_two_files_claiming_one_rank(cli, recorded_runs, tmp_path):
    a, b = recorded_runs
    folder = copy_world(a, tmp_path / "t")
    put(folder, "copy_of_rank_one.json.gz", b[1].read_bytes())  # distributedInfo.rank = 1
    proc = cli("load", folder, "--db", tmp_path / "x.duckdb")
    line = one_line_error(proc, sorted([folder / a[1].name, folder / "copy_of_rank_one.json.gz"])[0],
                          "two trace files claim rank 1")
    assert a[1].name in line and "copy_of_rank_one.json.gz" in line


def test_a_folder_of_several_runs_is_named_as_such(cli, recorded_runs, tmp_path):
    a, b = recorded_runs
    for name, run in (("run_a", a), ("run_b", b), ("run_c", a)):
        copy_world(run, tmp_path / "runs" / name)
    proc = cli("load", tmp_path / "runs", "--db", tmp_path / "x.duckdb")
    first = sorted([*tmp_path.glob("runs/*/" + a[0].name), *tmp_path.glob("runs/*/" + b[0].name)])
    line = one_line_error(proc, first[0], "3 trace files claim rank 0", "and 1 more",
                          "(in 3 folders: give the folder of one run)")
    assert len(line) < 600  # two files named, not every one


@pytest.mark.parametrize("name, info, outcome", [
    ("a.json", {"rank": 99_999_999_999, "world_size": 4}, "distributedInfo.rank (99999999999) is not a rank number"),
    ("a.json", {"world_size": 4}, "it has no distributedInfo.rank"),
    ("rank99999999999.json", {}, "not a plausible rank"),
    ("a.json", {"rank": 5, "world_size": 4}, "rank 5 in a world of 4"),
    ("rank1.json", {"rank": "0", "world_size": 4}, 1),          # a string rank: the name decides
    ("rank2.json", {"rank": 2, "world_size": 10**12}, 2),        # an absurd world size is ignored
    ("rank3.json", {"rank": True, "world_size": "4"}, 3),
])
def test_hostile_distributed_info(cli, tmp_path, name, info, outcome):
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 10}]
    folder = tmp_path / "t"
    path = put(folder, name, json.dumps({"distributedInfo": info, "traceEvents": events}).encode())
    proc = cli("load", folder, "--db", tmp_path / "x.duckdb", timeout=60)
    if isinstance(outcome, str):
        one_line_error(proc, path, outcome)
    else:
        assert proc.returncode == 0, proc.stderr
        assert q(tmp_path / "x.duckdb", "SELECT rank FROM ranks") == [(outcome,)]
        # the note says what the trace held in place of a rank (the JSON's own text)
        notes = q(tmp_path / "x.duckdb", "SELECT message FROM load_issues WHERE kind = 'rank-from-name'")
        if info["rank"] != outcome:
            assert notes == [(f"distributedInfo.rank {json.dumps(info['rank'])} is not a rank number; "
                              f"rank {outcome} taken from the file name",)]
        else:
            assert notes == []


def test_rank_from_the_file_name_when_distributed_info_is_missing(run0, tmp_path):
    text = tj.read_bytes(run0[3])
    stripped = re.sub(rb'"distributedInfo": \{.*?\]\}\]\},', b"", text, count=1, flags=re.S)
    assert b"distributedInfo" not in stripped
    folder = copy_world(run0, tmp_path / "t", ranks={0, 1, 2})
    put(folder, "worker-3.pt.trace.json", stripped)
    db = load(folder)
    assert q(db, "SELECT rank, rank_source FROM ranks WHERE rank = 3") == [(3, "file name")]
    assert "rank-from-name" in issues(db)


def shift_ts(text: bytes, delta_us: int) -> bytes:
    """Add `delta_us` to every "ts" (integer part only: exact, fraction untouched)."""
    def shift(m):
        return m.group(1) + str(int(m.group(2)) + delta_us).encode()
    out, n = re.subn(rb'("ts"\s*:\s*)(\d+)', shift, text)
    assert n > 1000
    return out


def test_clock_skew_between_ranks_is_estimated_not_a_straggler(cli, run0, intact, tmp_path):
    """Rank 2's host clock runs 5 s ahead: its collectives-based offset says so, and every
    step-relative comparison (and the analysis' findings) stays what it was."""
    folder = copy_world(run0, tmp_path / "t", ranks={0, 1, 3})
    text = shift_ts(tj.read_bytes(run0[2]), 5_000_000)
    text = re.sub(rb'("host_name": ")([^"]*)"', rb'\1\2-other-host"', text, count=1)
    put(folder, run0[2].name, gzip.compress(text))
    db = load(folder)
    offsets = dict(q(db, "SELECT rank, clock_offset_ns FROM ranks"))
    before = dict(q(intact, "SELECT rank, clock_offset_ns FROM ranks"))
    assert offsets[2] - before[2] == 5_000_000_000
    assert abs(offsets[2] - 5_000_000_000) < 100_000_000
    assert {r: offsets[r] for r in (0, 1, 3)} == {r: before[r] for r in (0, 1, 3)}
    (note,) = issues(db)["clock-offset"]
    assert note[0] == 2 and "5.0" in note[3] and "ahead" in note[3]
    rel = """SELECT c.rank, c.step, c.seq, c.ts_ns - s.ts_ns, c.end_ns - s.ts_ns, c.dur_ns
             FROM collectives c JOIN steps s USING (rank, step) ORDER BY ALL"""
    assert q(db, rel) == q(intact, rel)
    for sql in ("SELECT rank, step, dur_ns FROM steps ORDER BY ALL", "SELECT * FROM aligned_steps ORDER BY ALL"):
        assert q(db, sql) == q(intact, sql)
    # the whole analysis: same verdict with and without the skew
    verdicts = []
    for target in (folder, intact.parent / intact.stem):
        proc = cli("analyze", target, "--out", tmp_path / f"out-{len(verdicts)}", "--no-html", "--format", "json", "-q")
        assert proc.returncode == 0, proc.stderr
        summary = json.loads(proc.stdout)
        verdicts.append(([(f["rule"], f["ranks"], f["steps"]) for f in summary["findings"]],
                         summary["steps"]["worst_rank"]))
    assert verdicts[0] == verdicts[1]


def test_minutes_of_clock_offset_are_a_warning(run0, tmp_path):
    """Hosts two minutes apart: loaded, but the offset is flagged as a possible mix of runs."""
    folder = copy_world(run0, tmp_path / "t", ranks={0, 1})
    for r in (2, 3):
        text = shift_ts(tj.read_bytes(run0[r]), 120_000_000)
        text = re.sub(rb'("host_name": ")([^"]*)"', rb'\1\2-far"', text, count=1)
        put(folder, run0[r].name, gzip.compress(text))
    db = load(folder)
    notes = {rank: (sev, msg) for rank, _, sev, msg, _ in issues(db)["clock-offset"]}
    assert sorted(notes) == [2, 3]
    assert all(sev == "warning" and "different runs" in msg and "ahead" in msg for sev, msg in notes.values())


# ---------------------------------------------------------------- odd content

def test_a_100k_character_kernel_name(tmp_path):
    (src,) = (REAL_TRACES / "hta-trace-filter").glob("sampled_rank-0.json.gz")
    top, events = tj.read_trace(src)
    kernel = next(e for e in events if e.get("cat") == "kernel" and "nccl" not in e["name"])
    name = ("void big<" + "T&amp;<x>, " * 10_000)[:99_999] + ">"
    events.append(dict(kernel, name=name, ts=kernel["ts"] + 1))
    folder = tmp_path / "t"
    folder.mkdir()
    db = load(tj.write_trace(folder / "rank0.json.gz", top, events, gz=True).parent)
    (twin_step,) = q(db, "SELECT step FROM kernels WHERE ts_ns = ? AND name = ?",
                     tj.to_ns(kernel["ts"], tj.base_ns(top)), kernel["name"])[0]
    rows = q(db, "SELECT kind, step, length(name), name FROM kernels WHERE length(name) >= 99000")
    assert len(rows) == 1 and rows[0][:3] == ("compute", twin_step, 100_000)
    assert rows[0][3] == name


@pytest.mark.parametrize("gz", [False, True])
def test_invalid_utf8_is_replaced_and_reported(rank0_text, tmp_path, gz):
    names = [m.start() for m in re.finditer(rb'"name": "aten::', rank0_text)][:5]
    data = bytearray(rank0_text)
    for at in names:
        data[at + 9: at + 11] = b"\xff\xc3"  # 'at' of aten -> invalid bytes
    meta_at = data.index(b'"host_name": "') + 14
    data[meta_at: meta_at + 1] = b"\xfe"  # and in the metadata
    folder = tmp_path / "t"
    put(folder, "rank0.json.gz" if gz else "rank0.json", gzip.compress(bytes(data)) if gz else bytes(data))
    db = load(folder)
    assert q(db, "SELECT count(*) FROM raw_events") == [(len(tj.event_end_offsets(rank0_text)[1]),)]
    assert q(db, "SELECT count(*) FROM raw_events WHERE name LIKE '\ufffd%'")[0][0] == len(names)
    assert "invalid-utf8" in issues(db)


@pytest.mark.parametrize("value", ["10" * 20, "-1", "1e400", "18446744073709551616"])
def test_numbers_out_of_range(tmp_path, value):
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": VALUE, "dur": 1,'
        ' "args": {"correlation": VALUE, "External id": VALUE, "device": VALUE}}'.replace("VALUE", value),
    ]
    text = '{"traceEvents": [' + json.dumps(events[0]) + ", " + events[1] + "]}"
    db = load(put(tmp_path / "t", "rank0.json", text.encode()).parent)
    assert q(db, "SELECT count(*) FROM raw_events") == [(2,)]
    if value == "-1":  # a legal (if odd) time before the first step: kept, no step
        assert q(db, "SELECT step, ts_ns FROM kernels") == [(None, -1000)]
    else:
        assert issues(db)["bad-ts"][0][4] == 1


@pytest.mark.parametrize("top, ts, dur", [
    ({}, 9_000_000_000_000_000, 9_000_000_000_000_000),                   # ts + dur beyond int64 ns
    ({}, -9_000_000_000_000_000, 1),
    ({"baseTimeNanoseconds": 4_000_000_000_000_000_000}, 6_000_000_000_000_000, 1),  # base + ts
    ({}, 1, 9_000_000_000_000_000),
])
def test_times_beyond_the_int64_range_are_bad_not_a_crash(tmp_path, top, ts, dur):
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
              {"ph": "X", "cat": "cpu_op", "name": "huge", "pid": 1, "tid": 1, "ts": ts, "dur": dur},
              {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": ts, "dur": dur}]
    db = load(put(tmp_path / "t", "rank0.json", json.dumps({**top, "traceEvents": events}).encode()).parent)
    found = issues(db)
    assert sum(n for *_, n in found.get("bad-ts", []) + found.get("bad-dur", [])) >= 2
    assert q(db, "SELECT count(*) FROM cpu_ops WHERE name = 'huge'") == [(0,)]


# ---------------------------------------------------------------- security

def test_file_names_are_passed_to_sql_as_parameters(cli, run0, tmp_path):
    """Quotes and SQL in a path reach the database as data, never as SQL."""
    folder = tmp_path / "it's \"odd\"; DROP TABLE raw_events; --"
    folder.mkdir()
    path = Path(shutil.copy2(run0[0], folder / "rank0.o'clock\".json.gz"))
    db = tmp_path / "o'db\".duckdb"
    proc = cli("load", folder, "--db", db)
    assert proc.returncode == 0, proc.stderr
    assert q(db, "SELECT file FROM ranks") == [(str(path),)]
    assert q(db, "SELECT count(*) FROM raw_events")[0][0] == len(tj.read_trace(run0[0])[1])


def gzip_bomb(path: Path) -> int:
    """A valid gzip of a trace whose events are padded with whitespace: ~1 MB on disk that
    expands past the loader's bound (source.MAX_EXPANSION x its size, at least
    MIN_ALLOWANCE_BYTES). Built from repeated members, so it takes no time to make."""
    chunk = 1 << 20
    pad = gzip.compress(b" " * chunk, 9)
    bound = max(source_module.MIN_ALLOWANCE_BYTES, source_module.MAX_EXPANSION * 2 * len(pad))
    members = bound // chunk + 8
    with open(path, "wb") as fh:
        fh.write(gzip.compress(b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "name": "a"}, '))
        for _ in range(members):
            fh.write(pad)
        fh.write(gzip.compress(b"]}"))
    size = path.stat().st_size
    assert members * chunk > max(source_module.MIN_ALLOWANCE_BYTES, source_module.MAX_EXPANSION * size)
    return members * chunk


def test_gzip_bomb_is_refused_with_bounded_memory_and_disk(tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    bomb = folder / "rank0.json.gz"
    expands_to = gzip_bomb(bomb)
    assert expands_to > 400 * bomb.stat().st_size
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    # run the CLI in a child and measure its peak memory from a small wrapper process
    wrapper = (
        "import resource, subprocess, sys\n"
        "p = subprocess.run([sys.executable, '-m', 'traceanalyze', 'load', sys.argv[1], '--db', sys.argv[2]],"
        " capture_output=True, text=True)\n"
        "sys.stderr.write(p.stderr)\n"
        "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    env = dict(os.environ, TMPDIR=str(scratch))
    proc = subprocess.run([sys.executable, "-c", wrapper, str(folder), str(tmp_path / "x.duckdb")],
                          capture_output=True, text=True, env=env, timeout=300)
    rc, peak_kib = map(int, proc.stdout.split())
    one_line_error(subprocess.CompletedProcess([], rc, "", proc.stderr), bomb, "decompression bomb")
    assert peak_kib < 400 * 1024, f"peak RSS {peak_kib} KiB"
    assert list(scratch.iterdir()) == []  # the scratch part files were removed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scratch", "t"]  # no database, no leftovers
