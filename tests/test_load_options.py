"""Issue 2: rank selection, several windows of a rank, a missing rank, reuse of a stored database."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import duckdb
import pytest
import tracejson as tj


@pytest.fixture(scope="session")
def world(recorded_runs) -> dict[int, Path]:
    """The four rank files of a recorded 4-rank run."""
    return recorded_runs[0]


@pytest.fixture(scope="session")
def other_world(recorded_runs) -> dict[int, Path]:
    """The rank files of a second, different recorded run."""
    return recorded_runs[1]


@pytest.fixture(scope="session")
def event_counts(world, other_world) -> dict[Path, int]:
    return {p: len(tj.read_trace(p)[1]) for p in [*world.values(), *other_world.values()]}


def query(db: Path, sql: str, *params):
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql, list(params)).fetchall()


def assert_clean_error(proc, *words):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith("traceanalyze: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def place(files: dict[int, Path], folder: Path, ranks=None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for r, p in files.items():
        if ranks is None or r in ranks:
            shutil.copy2(p, folder / p.name)
    return folder


@pytest.mark.parametrize("spec, want", [
    ("all", [0, 1, 2, 3]),
    ("0,3", [0, 3]),
    ("0-7", [0, 1, 2, 3]),
    ("1-2", [1, 2]),
    ("0-1,3", [0, 1, 3]),
    ("2", [2]),
])
def test_rank_selection(cli, world, event_counts, tmp_path, spec, want):
    folder = place(world, tmp_path / "t")
    db = tmp_path / "x.duckdb"
    proc = cli("load", folder, "--db", db, "--ranks", spec)
    assert proc.returncode == 0, proc.stderr
    assert query(db, "SELECT rank FROM ranks ORDER BY rank") == [(r,) for r in want]
    for r in want:
        assert query(db, "SELECT count(*) FROM raw_events WHERE rank = ?", r) == [(event_counts[world[r]],)]
    missing = query(db, "SELECT message FROM load_issues WHERE kind = 'rank-missing' ORDER BY message")
    if spec == "0-7":  # ranks 4..7 were asked for and do not exist: said (one note, as a range)
        assert missing == [("4 selected rank(s) have no trace file: 4-7",)]
        assert "4 selected rank(s) have no trace file: 4-7" in proc.stderr
    else:
        assert missing == []


@pytest.mark.parametrize("spec, words", [
    ("x", ["--ranks", "'x'"]),
    ("3-1", ["--ranks", "empty range"]),
    ("9", ["none of the selected ranks (9)"]),
    ("4-5", ["none of the selected ranks (4-5)", "present: 0-3"]),
    ("0-20000000,99", ["--ranks selects 20,000,002 ranks; at most 1,048,576"]),  # not minutes of work
])
def test_bad_rank_selection_is_a_clear_error(cli, world, tmp_path, spec, words):
    folder = place(world, tmp_path / "t")
    proc = cli("load", folder, "--db", tmp_path / "x.duckdb", "--ranks", spec)
    assert_clean_error(proc, *words)


def test_several_windows_of_a_rank_use_the_last(cli, world, other_world, event_counts, tmp_path):
    """tensorboard_trace_handler wrote two windows of rank 0: the later one (by the number in the
    name, even when the earlier file is newer on disk) is analyzed, and a note says so."""
    folder = place(other_world, tmp_path / "t", ranks={1, 2, 3})
    first = Path(shutil.copy2(world[0], folder / "rank0.111.pt.trace.json.gz"))
    last = Path(shutil.copy2(other_world[0], folder / "rank0.222.pt.trace.json.gz"))
    os.utime(first, ns=(last.stat().st_mtime_ns + 10**9,) * 2)
    db = tmp_path / "x.duckdb"
    proc = cli("load", folder, "--db", db)
    assert proc.returncode == 0, proc.stderr
    assert query(db, "SELECT file FROM ranks WHERE rank = 0") == [(str(last),)]
    assert query(db, "SELECT count(*) FROM raw_events WHERE rank = 0") == [(event_counts[other_world[0]],)]
    notes = query(db, "SELECT file, message FROM load_issues WHERE kind = 'window-skipped'")
    assert len(notes) == 1 and notes[0][0] == str(first) and "rank0.222.pt.trace.json.gz" in notes[0][1]
    assert "rank0.111.pt.trace.json.gz" in proc.stderr and "2 profiling windows" in proc.stderr


def test_a_world_with_a_missing_rank_is_analyzed_on_the_ranks_present(cli, world, event_counts, tmp_path):
    folder = place(world, tmp_path / "t", ranks={0, 1, 3})
    db = tmp_path / "x.duckdb"
    proc = cli("load", folder, "--db", db)
    assert proc.returncode == 0, proc.stderr
    assert query(db, "SELECT rank FROM ranks ORDER BY rank") == [(0,), (1,), (3,)]
    (msg,) = query(db, "SELECT message FROM load_issues WHERE kind = 'rank-missing'")
    assert "world size is 4" in msg[0] and "(2)" in msg[0]
    assert "world size is 4" in proc.stderr
    assert query(db, "SELECT count(*) FROM aligned_steps")[0][0] > 0


def test_stored_database_is_reused_and_rebuilt_when_a_trace_changes(cli, world, tmp_path):
    folder = place(world, tmp_path / "t")
    db = tmp_path / "x.duckdb"
    first = cli("load", folder, "--db", db)
    assert first.returncode == 0 and first.stdout.startswith("wrote "), first.stderr
    built = db.stat().st_mtime_ns

    again = cli("load", folder, "--db", db)
    assert again.returncode == 0 and again.stdout.startswith("reused "), again.stdout
    assert "reusing" in again.stderr and "parsing" not in again.stderr
    assert db.stat().st_mtime_ns == built  # not rewritten, not re-parsed
    assert again.stdout.split(":", 1)[1] == first.stdout.split(":", 1)[1]

    # another selection of ranks is another database (from the ranks' shards: nothing parsed)
    sel = cli("load", folder, "--db", db, "--ranks", "0,1")
    assert sel.stdout.startswith("wrote ") and "shard(s) up to date" in sel.stderr
    assert query(db, "SELECT count(*) FROM ranks") == [(2,)]
    assert cli("load", folder, "--db", db).stdout.startswith("wrote ")
    built = db.stat().st_mtime_ns

    # rank 2's file is rewritten with one more event (same name): parsed again
    target = folder / world[2].name
    top, events = tj.read_trace(target)
    tj.write_trace(target, top, [*events, {"ph": "i", "name": "added", "pid": 1, "tid": 1, "ts": 1, "s": "t"}],
                   gz=True)
    changed = cli("load", folder, "--db", db)
    assert changed.returncode == 0 and changed.stdout.startswith("wrote "), changed.stdout
    assert db.stat().st_mtime_ns != built
    assert query(db, "SELECT count(*) FROM raw_events WHERE rank = 2") == [(len(tj.read_trace(target)[1]),)]

    # --force parses even when nothing changed
    built = db.stat().st_mtime_ns
    forced = cli("load", folder, "--db", db, "--force")
    assert forced.stdout.startswith("wrote ") and db.stat().st_mtime_ns != built


def test_touching_a_file_rebuilds(cli, world, tmp_path):
    folder = place(world, tmp_path / "t", ranks={0})
    db = tmp_path / "x.duckdb"
    assert cli("load", folder, "--db", db).stdout.startswith("wrote ")
    p = folder / world[0].name
    os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10**9))
    assert cli("load", folder, "--db", db).stdout.startswith("wrote ")
    assert cli("load", folder, "--db", db).stdout.startswith("reused ")


def test_a_corrupt_stored_database_is_rebuilt(cli, world, tmp_path):
    folder = place(world, tmp_path / "t", ranks={0})
    db = tmp_path / "x.duckdb"
    db.write_bytes(b"not a duckdb file at all" * 100)
    proc = cli("load", folder, "--db", db)
    assert proc.returncode == 0 and proc.stdout.startswith("wrote "), proc.stderr
    assert query(db, "SELECT rank FROM ranks") == [(0,)]


def test_a_single_file_can_be_loaded(cli, world, event_counts, tmp_path):
    db = tmp_path / "x.duckdb"
    proc = cli("load", world[3], "--db", db)
    assert proc.returncode == 0, proc.stderr
    assert query(db, "SELECT rank FROM ranks") == [(3,)]
    assert query(db, "SELECT count(*) FROM raw_events") == [(event_counts[world[3]],)]


def test_a_local_analysis_imports_no_remote_storage_or_dataframe_library(world, tmp_path):
    """fsspec (only for URLs) and polars (only for many critical-path rows or a notebook's
    frames) cost a command's start a third of a second or more: a local run loads neither, the
    first time (maps, reduce, critical path, rules, report) or when its database is reused."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from traceanalyze.cli import cli\n"
            "for _ in range(2):\n"
            "    cli.main([sys.argv[1], '--out', sys.argv[2], '-q'], standalone_mode=False)\n"
            "print(sorted(m for m in ('fsspec', 'polars', 'pyarrow') if m in sys.modules))\n")
    traces = place(world, tmp_path / "traces")
    proc = subprocess.run([sys.executable, "-c", code, str(traces), str(tmp_path / "out")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "report.html").is_file() and (tmp_path / "out" / "summary.json").is_file()
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_a_reused_database_is_answered_without_opening_a_trace(world, tmp_path, monkeypatch):
    """A re-run over the same names, sizes and modification times opens no trace (each trace's
    head was read for its rank: 4 s at 1,024 ranks); touching one file reads them all again."""
    from traceanalyze.load import discover, trace_dir

    traces, db = place(world, tmp_path / "traces"), tmp_path / "trace.duckdb"
    built = trace_dir.load_trace_dir(traces, db)
    assert not built.reused
    opened = []
    real = discover.identify
    monkeypatch.setattr(discover, "identify", lambda path, *a, **k: opened.append(path) or real(path, *a, **k))
    again = trace_dir.load_trace_dir(traces, db)
    assert again.reused and again.ranks == built.ranks == sorted(world) and opened == []
    touched = traces / world[1].name
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 10**9))
    rebuilt = trace_dir.load_trace_dir(traces, db)
    assert not rebuilt.reused and rebuilt.mapped == 1
    assert sorted(p.name for p in opened) == sorted(p.name for p in world.values())


def test_a_reused_database_is_answered_without_the_map_and_reduce_stages(world, tmp_path):
    """A re-run whose traces did not change reads the database's fingerprint and stops: the
    stages that would rebuild it (executors, maps, reduce, the Flight Recorder's database) are
    not even imported (their imports were a sixth of a re-run's time)."""
    import subprocess
    import sys

    traces, db = place(world, tmp_path / "traces"), tmp_path / "trace.duckdb"
    code = ("import sys\n"
            "from traceanalyze.load import load_trace_dir\n"
            "result = load_trace_dir(sys.argv[1], sys.argv[2])\n"
            "stages = ('traceanalyze.load.executors', 'traceanalyze.load.map', 'traceanalyze.load.reduce',\n"
            "          'traceanalyze.load.fr_database', 'multiprocessing')\n"
            "print(result.reused, sorted(m for m in stages if m in sys.modules))\n")
    runs = [subprocess.run([sys.executable, "-c", code, str(traces), str(db)], capture_output=True, text=True,
                           check=False) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    first, second = (r.stdout.strip().splitlines()[-1] for r in runs)
    assert first.startswith("False [") and "traceanalyze.load.reduce" in first  # built: the stages ran
    assert second == "True []"
