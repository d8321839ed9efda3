"""Issue 2: the loader is correct on every real trace and every recorded DDP scenario.

Each folder is loaded with the real command line (`traceanalyze load DIR --db X`) and the
database is compared with numbers computed straight from the JSON in this file (see
tracejson.py: stdlib json with Decimal times, no traceanalyze code).
"""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path

import duckdb
import pytest
import tracejson as tj
from conftest import FIXTURES, REAL_TRACES

from tests.tracegen import write_trace_dir

BAD_TRACES = {"hta-rank-unavailable"}
TRACE_DIRS = sorted(p for p in REAL_TRACES.iterdir() if p.is_dir() and p.name not in BAD_TRACES)
SCENARIO_DIRS = sorted(p for p in FIXTURES.iterdir() if p.is_dir() and any(p.glob("*.pt.trace.json*"))) \
    if FIXTURES.is_dir() else []
ALL_DIRS = TRACE_DIRS + SCENARIO_DIRS
IDS = [f"{p.parent.name}/{p.name}" for p in ALL_DIRS]


def test_the_corpus_is_there():
    """The parametrized tests below run over these folders; an empty list must not pass quietly."""
    assert len(TRACE_DIRS) >= 12, TRACE_DIRS
    assert len(SCENARIO_DIRS) >= 3, SCENARIO_DIRS


@functools.cache
def expected(folder: Path) -> dict[int, dict]:
    """{rank: facts computed from the JSON} for every trace file in `folder`."""
    files = sorted(p for p in folder.rglob("*") if p.name.endswith((".json", ".json.gz"))
                   and p.name != "expected.json")
    out = {}
    for path in files:
        top, events = tj.read_trace(path)
        base = tj.base_ns(top)
        rank = tj.rank_of(top, path)
        assert rank not in out, f"two files for rank {rank} in {folder}"
        step_ranges = tj.steps(events, base)
        find = tj.StepFinder(tj.window(events, base))
        gpu = tj.gpu_events(events)
        kernel_steps = tj.kernel_steps(events, base)
        out[rank] = {
            "path": path,
            "top": top,
            "events": len(events),
            "ph_cat": tj.ph_cat_counts(events),
            "steps": step_ranges,
            "kinds": Counter(tj.gpu_kind(e) for e in gpu),
            "kernel_steps": kernel_steps,
            "launched_in_other_step": sum(n for (ts, _, step), n in kernel_steps.items() if step != find(ts)),
            "memcpy": sum(1 for e in gpu if tj.gpu_kind(e) == "memcpy"),
            "cpu_ops": Counter((tj.to_ns(e["ts"], base), e["name"], find(tj.to_ns(e["ts"], base)))
                               for e in tj.cpu_ops(events)),
            "memory": len(tj.memory_events(events)),
            "gloo": Counter((name, find(tj.to_ns(e["ts"], base))) for name, e in tj.gloo_collectives(events)),
            "ts_ns": sorted(tj.to_ns(e.get("ts"), base) for e in events if tj.is_number(e.get("ts"))),
            "dur_ns": sorted(tj.to_ns(e.get("dur")) for e in events if tj.is_number(e.get("dur"))),
        }
    return out




def rows(con, sql, *params):
    return con.execute(sql, list(params)).fetchall()


def check_ranks_and_total_events(case):
    folder, exp, con, proc = case
    assert [r for (r,) in rows(con, "SELECT rank FROM ranks ORDER BY rank")] == sorted(exp)
    total = sum(x["events"] for x in exp.values())
    assert f"{len(exp)} rank(s), {total:,} events" in proc.stdout
    for rank, x in exp.items():
        (n,) = con.execute("SELECT count(*) FROM raw_events WHERE rank = ?", [rank]).fetchone()
        assert n == x["events"], rank
        (file,) = con.execute("SELECT file FROM ranks WHERE rank = ?", [rank]).fetchone()
        assert Path(file).name == x["path"].name


def check_event_counts_per_phase_and_category(case):
    folder, exp, con, _ = case
    for rank, x in exp.items():
        got = Counter({(ph, cat): n for ph, cat, n in rows(
            con, "SELECT ph, cat, count(*) FROM raw_events WHERE rank = ? GROUP BY ALL", rank)})
        assert got == x["ph_cat"], rank


def check_steps_per_rank(case):
    folder, exp, con, _ = case
    for rank, x in exp.items():
        got = rows(con, "SELECT step, ts_ns, end_ns, synthetic FROM steps WHERE rank = ? ORDER BY step", rank)
        if x["steps"]:
            assert got == [(n, lo, hi, False) for n, (lo, hi) in sorted(x["steps"].items())], rank
        else:  # profiled without a schedule: one synthetic whole-trace window, and a note
            assert [(s, synth) for s, _, _, synth in got] == [(0, True)], rank
            kinds = [k for (k,) in rows(con, "SELECT kind FROM load_issues WHERE rank = ?", rank)]
            assert "no-steps" in kinds


def check_kernels_kinds_and_launching_step(case):
    folder, exp, con, _ = case
    for rank, x in exp.items():
        kinds = Counter({k: n for k, n in rows(
            con, "SELECT kind, count(*) FROM kernels WHERE rank = ? GROUP BY kind", rank)})
        assert kinds == x["kinds"], rank
        got = Counter({(ts, name, step): n for ts, name, step, n in rows(
            con, "SELECT ts_ns, name, step, count(*) FROM kernels WHERE rank = ? GROUP BY ALL", rank)})
        assert got == x["kernel_steps"], rank


def check_memcpy_count(case):
    folder, exp, con, _ = case
    for rank, x in exp.items():
        (n,) = con.execute("SELECT count(*) FROM memcpy WHERE rank = ?", [rank]).fetchone()
        assert n == x["memcpy"], rank


def check_cpu_ops_count_and_step_by_time_range(case):
    folder, exp, con, _ = case
    for rank, x in exp.items():
        got = Counter({(ts, name, step): n for ts, name, step, n in rows(
            con, "SELECT ts_ns, name, step, count(*) FROM cpu_ops WHERE rank = ? GROUP BY ALL", rank)})
        assert got == x["cpu_ops"], rank


def check_memory_event_count(case):
    folder, exp, con, _ = case
    for rank, x in exp.items():
        (n,) = con.execute("SELECT count(*) FROM memory WHERE rank = ?", [rank]).fetchone()
        assert n == x["memory"], rank


def check_timestamps_and_durations_are_exact_ns(case):
    """Every ts and dur, as exact integers: no float rounding anywhere."""
    folder, exp, con, _ = case
    for rank, x in exp.items():
        ts = [t for (t,) in rows(con, "SELECT ts_ns FROM raw_events WHERE rank = ? AND ts_ns IS NOT NULL"
                                      " ORDER BY ts_ns", rank)]
        assert ts == x["ts_ns"], rank
        dur = [d for (d,) in rows(con, "SELECT dur_ns FROM raw_events WHERE rank = ? AND dur_ns IS NOT NULL"
                                       " ORDER BY dur_ns", rank)]
        assert dur == x["dur_ns"], rank


def check_gloo_annotations_become_collectives(case):
    folder, exp, con, _ = case
    for rank, x in exp.items():
        if not x["gloo"]:
            continue
        got = Counter({("gloo:" + op, step): n for op, step, n in rows(
            con, "SELECT op, step, count(*) FROM collectives WHERE rank = ? AND source = 'gloo_annotation'"
                 " GROUP BY ALL", rank)})
        assert got == x["gloo"], rank


CHECKS = [check_ranks_and_total_events, check_event_counts_per_phase_and_category, check_steps_per_rank,
          check_kernels_kinds_and_launching_step, check_memcpy_count, check_cpu_ops_count_and_step_by_time_range,
          check_memory_event_count, check_timestamps_and_durations_are_exact_ns,
          check_gloo_annotations_become_collectives]


# folder-major order: xdist hands consecutive tests to one worker, so each folder is loaded
# and read once, by one worker, while the other works on another folder
@pytest.mark.parametrize("folder, check", [(f, c) for f in ALL_DIRS for c in CHECKS],
                         ids=[f"{i}-{c.__name__[len('check_'):]}" for i in IDS for c in CHECKS])
def test_loaded_trace(folder, check, loaded_with_cli, once_per_session):
    db, proc = loaded_with_cli(folder)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    facts = once_per_session(f"expected {folder}", lambda _: expected(folder))  # (computed by one worker)
    with duckdb.connect(str(db), read_only=True) as con:
        check((folder, facts, con, proc))


def test_launch_step_matters_in_the_corpus(once_per_session):
    """GPU work that runs in a later step than the one that launched it exists in the real
    traces, so the check above really tells correlation-based assignment from time-based."""
    moved = {f"{folder.name}/{rank}": x["launched_in_other_step"]
             for folder in TRACE_DIRS
             for rank, x in once_per_session(f"expected {folder}", lambda _, f=folder: expected(f)).items()}
    assert moved["hta-ns-resolution-trace/0"] > 1000 and moved["kineto-resnet50-nw0/0"] > 1000, moved


def test_gloo_scenarios_have_collectives(once_per_session):
    """The recorded scenarios are gloo DDP runs: the check above must not be vacuous for them."""
    for folder in SCENARIO_DIRS:
        facts = once_per_session(f"expected {folder}", lambda _, f=folder: expected(f))
        assert all(x["gloo"] for x in facts.values()), folder


# ---- single facts about particular real traces ------------------------------------------

def test_fractional_ts_of_the_ns_resolution_trace_is_exact(loaded_with_cli):
    folder = REAL_TRACES / "hta-ns-resolution-trace"
    db, proc = loaded_with_cli(folder)
    assert proc.returncode == 0, proc.stderr
    (path,) = folder.glob("*.json.gz")
    text = tj.read_bytes(path)
    assert b'"ts": 1712195495519689.047' in text or b'"ts":1712195495519689.047' in text
    top, _ = tj.read_trace(path)
    want = 1712195495519689047 + tj.base_ns(top)
    with duckdb.connect(str(db), read_only=True) as con:
        (n,) = con.execute("SELECT count(*) FROM raw_events WHERE ts_ns = ?", [want]).fetchone()
    assert n >= 1
    assert int(float("1712195495519689.047") * 1000) != want  # a float could not get it right


def test_large_integer_trace_loads(loaded_with_cli):
    folder = REAL_TRACES / "hta-large-integer"
    db, proc = loaded_with_cli(folder)
    assert proc.returncode == 0, proc.stderr
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT name FROM cpu_ops").fetchall() == [("record_param_comms",)]
        assert con.execute("SELECT kind, name FROM kernels").fetchall() == [("communication", "ncclKernel_AllReduce")]


def test_distributed_info_unavailable_is_rank_0_with_a_note(loaded_with_cli):
    db, proc = loaded_with_cli(REAL_TRACES / "hta-distributed-info-unavailable")
    assert proc.returncode == 0, proc.stderr
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT rank, rank_source FROM ranks").fetchall() == [(0, "single process")]
        assert con.execute("SELECT kind FROM load_issues WHERE kind = 'single-process'").fetchall()


def test_rank_unavailable_fails_with_one_line_naming_the_file(cli, tmp_path):
    folder = REAL_TRACES / "hta-rank-unavailable"
    (path,) = folder.glob("*.json.gz")
    proc = cli("load", folder, "--db", tmp_path / "x.duckdb")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith("traceanalyze: ")]
    assert len(lines) == 1, proc.stderr  # one error line (besides progress messages)
    assert lines[0].startswith(f"error: {path}: ")
    assert "rank" in lines[0]
    assert not (tmp_path / "x.duckdb").exists()


def test_old_and_new_step_categories(once_per_session):
    """Sanity of the corpus itself: old traces mark steps as Operator, new ones as user_annotation."""
    cats = set()
    for folder in TRACE_DIRS:
        for x in once_per_session(f"expected {folder}", lambda _, f=folder: expected(f)).values():
            cats |= {cat for (ph, cat) in x["ph_cat"] if ph == "X"}
    assert {"Operator", "cpu_op", "Kernel", "kernel", "Runtime", "cuda_runtime"} <= cats


def test_a_last_step_cut_short_by_the_profiler_is_left_out_with_a_note(loaded_with_cli):
    """The MI250 trace ends with a ProfilerStep of a few µs after a ~9 ms one (the profiler
    stopped as it began): it stays in `steps`, marked, but is not an aligned step, so per-step
    figures are those of the real step; load_issues says so."""
    folder = REAL_TRACES / "hta-amd-trace"
    db, proc = loaded_with_cli(folder)
    assert proc.returncode == 0, proc.stderr
    (path,) = folder.glob("*.json.gz")
    top, events = tj.read_trace(path)
    windows = tj.steps(events, tj.base_ns(top))
    first, last = min(windows), max(windows)
    dur = {n: b - a for n, (a, b) in windows.items()}
    assert len(windows) == 2 and dur[last] < 0.1 * dur[first]  # the trace is what the test is about
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT step, dur_ns, cut_short FROM steps ORDER BY step").fetchall() == [
            (first, dur[first], False), (last, dur[last], True)]
        assert con.execute("SELECT step FROM aligned_steps").fetchall() == [(first,)]
        (note,) = con.execute("SELECT message FROM load_issues WHERE kind = 'step-cut-short'").fetchall()
    assert f"step {last} lasts" in note[0]


@pytest.mark.parametrize("last_ms, cut", [(0.05, True), (3.0, False)])
@pytest.mark.parametrize("first_ms", [10, 300])  # (300: a slow first step, e.g. compilation)
def test_a_step_cut_short_on_one_rank_is_left_out_for_every_rank(cli, tmp_path, last_ms, cut, first_ms):
    """Cut short = a rank's last step under a tenth of the shortest of its others; a short but
    real last step (3 ms against 10 ms) is kept."""
    folder = write_trace_dir({"ranks": 2, "steps": 4, "first_step": 1, "step_ms": [first_ms, 10, 10, 10],
                              "rank_step_ms": {1: [first_ms, 10, 10, last_ms]},
                              "timeline": [["op", 0.01, 0.02, {"name": "aten::mm"}]]}, tmp_path / "traces")
    db = tmp_path / "t.duckdb"
    proc = cli("load", folder, "--db", db)
    assert proc.returncode == 0, proc.stderr
    with duckdb.connect(str(db), read_only=True) as con:
        marked = con.execute("SELECT rank, step FROM steps WHERE cut_short").fetchall()
        aligned = [s for (s,) in con.execute("SELECT step FROM aligned_steps ORDER BY step").fetchall()]
        kinds = {k for (k,) in con.execute("SELECT kind FROM load_issues").fetchall()}
    assert marked == ([(1, 4)] if cut else [])
    assert aligned == ([1, 2, 3] if cut else [1, 2, 3, 4])
    assert ("step-cut-short" in kinds) == cut
    assert "step-not-on-all-ranks" not in kinds  # it is on every rank: not what that note says
