"""Issue 18: the hostile corpus (tests/hostile/generate.py writes the cases), run through the
real command line with a time and memory budget per case.

Every case asserts what a user is promised: no traceback, the documented exit code (0 / 1 /
2, 130 after Ctrl-C, 143 after SIGTERM), no hang (each run has a timeout), bounded memory
(peak RSS of the process, from wait4) and staging disk, no leftover work files, no raw
control characters or GitHub workflow commands in any output, and every lost or altered
value named in load_issues.

The last section tests the trace reader itself (header scan, gzip bound, duplicate keys,
numbers out of range, deep metadata, long step numbers).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

from hostile import generate as gen

MiB = 1 << 20
# budgets: generous for a loaded CI machine, far below what the failures of issue 18 cost
CASE_TIMEOUT_S = 60
CASE_RSS_BYTES = 600 * MiB
STAGING_PEAK_BYTES = 64 * MiB



@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str
    peak_rss_bytes: int
    seconds: float
    staging_peak_bytes: int


def _du(folder: Path | None) -> int:
    total = 0
    if folder is None:
        return 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def run(*args, cwd: Path, env: dict | None = None, timeout: float = CASE_TIMEOUT_S,
        signal_after: tuple | None = None, staging: Path | None = None,
        fsize_limit: int | None = None) -> Run:
    """The real command in a subprocess: output, exit code, peak RSS and staging disk.

    `signal_after` = (text, signal[, seconds]): send the signal once `text` appears on stderr
    (and at least `seconds` after the start).
    """
    full_env = {**os.environ, **(env or {})}
    if staging is not None:
        full_env.setdefault("TRACEANALYZE_TMPDIR", str(staging))

    def limits():
        if fsize_limit is not None:
            import resource
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_limit, fsize_limit))

    out_path, err_path = cwd / f".out-{time.monotonic_ns()}", cwd / f".err-{time.monotonic_ns()}"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "traceanalyze", *map(str, args)], cwd=cwd,
                                env=full_env, stdout=out, stderr=err, preexec_fn=limits)
    start, staging_peak, sent, hwm = time.monotonic(), 0, False, 0
    while True:
        hwm = max(hwm, _vm_hwm_bytes(proc.pid))
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - start > timeout:
            proc.kill()
            _, status, usage = os.wait4(proc.pid, 0)
            pytest.fail(f"hang: {args} still running after {timeout} s")
        staging_peak = max(staging_peak, _du(staging))
        if signal_after and not sent and signal_after[0] in err_path.read_text(errors="replace") \
                and time.monotonic() - start > (signal_after[2] if len(signal_after) > 2 else 0):
            proc.send_signal(signal_after[1])
            sent = True
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    stdout, stderr = out_path.read_text(errors="replace"), err_path.read_text(errors="replace")
    out_path.unlink()
    err_path.unlink()
    if signal_after:
        assert sent, f"never saw {signal_after[0]!r}: {stderr}"
    # the child's own high-water mark after exec (ru_maxrss also counts the pages of this test
    # process that the fork copied before exec); ru_maxrss when /proc gave nothing
    return Run(proc.returncode, stdout, stderr, hwm or usage.ru_maxrss * 1024, time.monotonic() - start,
               staging_peak)


def _vm_hwm_bytes(pid: int) -> int:
    """VmHWM (peak resident set) of a running process, from /proc; 0 when it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def assert_clean(r: Run, rc: int, *, github: bool = False) -> None:
    """The promises every case keeps."""
    assert "Traceback" not in r.stdout + r.stderr, r.stderr[-3000:]
    assert r.rc == rc, (r.rc, r.stdout[-2000:], r.stderr[-2000:])
    assert r.peak_rss_bytes < CASE_RSS_BYTES, f"peak RSS {r.peak_rss_bytes / MiB:.0f} MiB"
    for name, text in (("stdout", r.stdout), ("stderr", r.stderr)):
        bad = CONTROL.search(text)
        assert bad is None, f"raw control character {bad.group(0)!r} in {name}: {text[max(0, bad.start() - 80):bad.end() + 80]!r}"
        for line in text.splitlines():
            if line.lstrip().startswith("::"):
                assert github and line.startswith(("::error title=traceanalyze ", "::warning title=traceanalyze ",
                                                   "::notice title=traceanalyze ")), f"workflow command in {name}: {line!r}"
    if rc == 2:  # one error line (besides progress messages)
        lines = [line for line in r.stderr.strip().splitlines()
                 if line.strip() and not line.startswith("traceanalyze: ")]
        assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr


def load_issues(db: Path) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute("SELECT rank, file, kind, severity, message, count FROM load_issues").fetchall()


def no_leftovers(out_dir: Path, staging: Path, keep: set[str]) -> None:
    left = sorted(p.name for p in out_dir.iterdir()) if out_dir.exists() else []
    assert set(left) <= keep, left
    assert list(staging.iterdir()) == [], list(staging.iterdir())


@pytest.fixture()
def box(tmp_path):
    """(work folder, private staging folder) for one case."""
    staging = tmp_path / "staging"
    staging.mkdir()
    return tmp_path, staging


# ---------------------------------------------------------------- discovery and ranks

@pytest.mark.parametrize("make, what", [(gen.fifo_rank, "a FIFO"), (gen.dev_zero_rank, "a device"),
                                        (gen.dangling_rank, "a dangling link")])
def test_a_rank_file_that_is_not_a_file_is_noted_and_fails_the_gate(box, make, what):
    work, staging = box
    folder = make(work / "t")
    r = run("load", folder, "--db", work / "t.duckdb", cwd=work, staging=staging)
    assert_clean(r, 0)
    notes = [i for i in load_issues(work / "t.duckdb") if i[2] == "not-a-file"]
    assert [(n[1], n[3]) for n in notes] == [(str(folder / "rank2.pt.trace.json"), "warning")]
    assert what in notes[0][4] and what in r.stderr
    check = run("check", folder, "--out", work / "out", cwd=work, staging=staging)
    assert_clean(check, 1)
    assert "load issue not-a-file" in check.stdout and "could not be read at all" in check.stdout


def test_a_fifo_given_as_the_trace_is_an_error_not_a_hang(box):
    work, staging = box
    os.mkfifo(work / "rank0.pt.trace.json")
    r = run("load", work / "rank0.pt.trace.json", "--db", work / "t.duckdb", cwd=work, staging=staging)
    assert_clean(r, 2)
    assert "a FIFO" in r.stderr


@pytest.mark.parametrize("command", ["analyze", "check", "sql", "load"])
def test_distributed_info_nested_100k_deep(box, command):
    work, staging = box
    folder = gen.deep_distributed_info(work / "t")
    args = {"analyze": ("analyze", folder, "--out", work / "o"), "check": ("check", folder, "--out", work / "o"),
            "sql": ("sql", folder, "SELECT count(*) AS n FROM ranks", "--format", "csv"),
            "load": ("load", folder, "--db", work / "t.duckdb")}[command]
    r = run(*args, cwd=work, staging=staging)
    assert "RecursionError" not in r.stderr
    assert_clean(r, 0)


def test_deeply_nested_distributed_info_does_not_mark_the_file_truncated(box):
    work, staging = box
    folder = gen.deep_distributed_info(work / "t")
    r = run("load", folder, "--db", work / "t.duckdb", cwd=work, staging=staging)
    assert_clean(r, 0)
    assert not [i for i in load_issues(work / "t.duckdb") if i[2] == "truncated"]


def test_a_huge_rank_range_is_refused_at_once(box):
    work, staging = box
    folder = gen.small_trace(work / "t")
    r = run("load", folder, "--db", work / "t.duckdb", "--ranks", "0-20000000", cwd=work, staging=staging)
    assert_clean(r, 2)
    assert "--ranks selects 20,000,001 ranks" in r.stderr
    assert r.peak_rss_bytes < 200 * MiB


def test_a_large_rank_range_is_one_note(box):
    work, staging = box
    folder = gen.small_trace(work / "t")
    r = run("load", folder, "--db", work / "t.duckdb", "--ranks", "0-1000000", cwd=work, staging=staging)
    assert_clean(r, 0)
    missing = [i for i in load_issues(work / "t.duckdb") if i[2] == "rank-missing"]
    assert [m[4] for m in missing] == ["999,999 selected rank(s) have no trace file: 2-1000000"]


# ---------------------------------------------------------------- injection

def test_a_folder_named_with_escape_sequences_prints_escaped(box):
    work, staging = box
    folder = gen.hostile_folder_name(work)
    r = run(folder, "--out", work / "o", cwd=work, staging=staging)
    assert_clean(r, 0)
    assert "\\x1b]0;pwned\\x07" in r.stdout and "\\n::error::forged" in r.stdout  # shown, escaped


def test_trace_strings_with_escapes_in_every_output(box):
    work, staging = box
    folder = gen.hostile_strings_trace(work / "t")
    db = work / "o" / "trace.duckdb"
    assert_clean(run("load", folder, "--db", db, cwd=work, staging=staging), 0)
    query = "SELECT DISTINCT name FROM raw_events WHERE name LIKE '%error%'"
    table = run("sql", db, query, cwd=work, staging=staging)
    assert_clean(table, 0)
    assert "\\x1b]52;c;" in table.stdout
    as_json = run("sql", db, query, "--format", "json", cwd=work, staging=staging)
    assert_clean(as_json, 0)
    assert json.loads(as_json.stdout)[0]["name"].startswith("\x1b]52;c;")  # the value survives
    # csv on a pipe keeps the data as it is (what a CSV consumer needs); on a terminal it is
    # escaped like the table (tabular.py)
    as_csv = run("sql", db, query, "--format", "csv", cwd=work, staging=staging)
    assert as_csv.rc == 0 and "\x1b]52;c;" in as_csv.stdout
    for fmt in ("text", "junit", "sarif"):
        r = run("check", folder, "--out", work / "o", "--format", fmt, cwd=work, staging=staging)
        assert_clean(r, r.rc)


@pytest.mark.parametrize("fmt", ["text", "junit", "sarif", "github"])
def test_a_crafted_summary_cannot_print_workflow_commands(box, fmt):
    work, staging = box
    summary = gen.injecting_summary(work / "summary.json")
    r = run("check", summary, "--format", fmt, cwd=work, staging=staging)
    assert_clean(r, 1, github=fmt == "github")
    assert "forged by the summary" in r.stdout  # the text is there, harmless


def test_the_query_hint_is_shell_quoted(box):
    work, staging = box
    folder = gen.small_trace(work / "t")
    out = work / "o $(touch pwned) `id`"
    r = run(folder, "--out", out, cwd=work, staging=staging)
    assert_clean(r, 0)
    hint = next(line for line in r.stdout.splitlines() if line.startswith("query "))
    argv = shlex.split(hint[len("query "):])
    assert argv == ["traceanalyze", "sql", str(out / "trace.duckdb"), "SELECT * FROM steps"]
    assert not (work / "pwned").exists()


# ---------------------------------------------------------------- writes through symlinks

def test_outputs_never_write_through_a_planted_symlink(box):
    work, staging = box
    folder = gen.small_trace(work / "t")
    out = work / "o"
    out.mkdir()
    victims = {}
    for name in ("report.html", "summary.json", "trace.duckdb", "trace.perfetto-trace"):
        victim = work / f"victim-{name}"
        victim.write_text("precious")
        (out / name).symlink_to(victim)
        victims[name] = victim
    r = run(folder, "--out", out, "--perfetto", cwd=work, staging=staging)
    assert_clean(r, 0)
    for name, victim in victims.items():
        assert victim.read_text() == "precious", name
        assert (out / name).is_file() and not (out / name).is_symlink(), name
    check_out = out / "check.xml"
    victim = work / "victim-check"
    victim.write_text("precious")
    check_out.symlink_to(victim)
    assert_clean(run("check", out / "summary.json", "--format", "junit", "-o", check_out, cwd=work), 0)
    assert victim.read_text() == "precious" and check_out.read_text().startswith("<?xml")
    diff_html = out / "diff.html"
    diff_html.symlink_to(victim)
    assert_clean(run("diff", out / "summary.json", out / "summary.json", "--html", diff_html, cwd=work), 0)
    assert victim.read_text() == "precious" and not diff_html.is_symlink()


# ---------------------------------------------------------------- signals and faults

@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    return gen.big_trace(tmp_path_factory.mktemp("big") / "t", mb=60)


@pytest.mark.parametrize("sig, rc, word", [(signal.SIGTERM, 143, "interrupted (SIGTERM)"),
                                           (signal.SIGINT, 130, "interrupted")])
def test_a_signal_during_a_load_cleans_up(box, big, sig, rc, word):
    work, staging = box
    out = work / "o"
    r = run("load", big, "--db", out / "trace.duckdb", cwd=work, staging=staging,
            signal_after=("parsing", sig))
    assert_clean(r, rc)
    assert r.stderr.strip().splitlines()[-1] == word
    no_leftovers(out, staging, keep=set())


def test_a_signal_during_a_query_interrupts_it(box):
    work, staging = box
    db = work / "t.duckdb"
    duckdb.connect(str(db)).close()
    runaway = "SELECT count(*) FROM range(10000000000) t(x) WHERE x % 7 = 3"
    r = run("sql", db, runaway, cwd=work, staging=staging, timeout=30,
            signal_after=("", signal.SIGINT, 3.0))  # (no progress message: after 3 s)
    assert_clean(r, 130)
    r = run("sql", db, runaway, "--timeout", "1", cwd=work, staging=staging, timeout=30)
    assert_clean(r, 2)
    assert "query stopped after the --timeout of 1 s" in r.stderr


def test_work_files_of_killed_runs_are_swept(box):
    """A killed run's work files go at the next run when made on this host by a process that is
    gone; the folders may be shared (NFS) by other hosts, whose files go only once a day old."""
    from traceanalyze.load.stale import OTHER_HOST_STALE_S, host_tag

    work, staging = box
    folder = gen.small_trace(work / "t")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = work / "o"
    out.mkdir()
    here, elsewhere = f"{dead.pid}@{host_tag()}", f"{dead.pid}@{host_tag()}-other-node"
    stale = [out / f"trace.duckdb.{here}.tmp", out / f"trace.duckdb.{here}.tmp.wal",
             out / f".report.html.{here}.k2j3h4g5.tmp", out / f"trace.duckdb.{elsewhere}.tmp",
             out / f".summary.json.{dead.pid}.a1b2c3d4.tmp",  # (a name without its host)
             staging / f"traceanalyze-{here}-abc123", staging / f"traceanalyze-{elsewhere}-def456"]
    old = {stale[3], stale[4], stale[6]}  # another host's (or an unknown one's): a day old, then gone
    live = [out / f"trace.duckdb.{os.getpid()}@{host_tag()}.tmp",  # this process is alive
            out / f"trace.duckdb.{elsewhere}-2.tmp",  # a pid on another host: may be running there
            out / f".summary.json.{dead.pid}.e5f6g7h8.tmp",
            staging / f"traceanalyze-{elsewhere}-2-ghi789"]
    day_ago = time.time() - OTHER_HOST_STALE_S - 60
    for p in stale + live:
        if "-abc" in p.name or "-def" in p.name or "-ghi" in p.name:
            p.mkdir()
            (p / "rank.duckdb").write_text("x")
        else:
            p.write_text("x")
        if p in old:
            os.utime(p, (day_ago, day_ago))
    assert_clean(run(folder, "--out", out, "--force", cwd=work, staging=staging), 0)
    assert [p for p in stale if p.exists()] == []
    assert [p for p in live if not p.exists()] == []


def test_a_file_size_limit_is_a_one_line_error(box, big):
    work, staging = box
    # (1 MiB: the shard's biggest files, raw_events and cpu_ops, are 2-4 MB; its database is small)
    r = run("load", big, "--db", work / "o" / "trace.duckdb", cwd=work, staging=staging, fsize_limit=1 * MiB)
    assert_clean(r, 2)
    assert "File too large" in r.stderr
    no_leftovers(work / "o", staging, keep=set())


def test_a_missing_staging_folder_is_a_one_line_error(box):
    work, staging = box
    folder = gen.small_trace(work / "t")
    r = run("load", folder, "--db", work / "t.duckdb", cwd=work,
            env={"TRACEANALYZE_TMPDIR": str(work / "no" / "such")})
    assert_clean(r, 2)
    assert "No such file or directory" in r.stderr


# ---------------------------------------------------------------- sql

def test_sql_streams_a_large_result_in_bounded_memory(box):
    work, staging = box
    db = work / "t.duckdb"
    duckdb.connect(str(db)).close()
    r = run("sql", db, "SELECT range AS i, repeat('x', 40) || range AS s FROM range(3000000)", "--format", "csv",
            cwd=work, staging=staging, timeout=120)
    assert_clean(r, 0)
    assert r.stdout.count("\n") == 3_000_001
    assert r.peak_rss_bytes < 300 * MiB, f"{r.peak_rss_bytes / MiB:.0f} MiB"  # the rows alone: ~250 MB


def test_sql_table_format_is_limited_and_says_so(box):
    work, staging = box
    db = work / "t.duckdb"
    duckdb.connect(str(db)).close()
    r = run("sql", db, "SELECT * FROM range(5000)", cwd=work, staging=staging)
    assert_clean(r, 0)
    assert r.stdout.strip().splitlines()[-1] == "(1,000 rows)"
    assert "only the first 1,000 rows are shown" in r.stderr
    r = run("sql", db, "SELECT * FROM range(5000)", "--limit", "0", "--format", "json", cwd=work)
    assert len(json.loads(r.stdout)) == 5000


def test_sql_enable_logging_to_a_file_is_refused_read_only(box):
    work, staging = box
    db = work / "t.duckdb"
    duckdb.connect(str(db)).close()
    r = run("sql", db, f"CALL enable_logging(storage='file', storage_path='{work / 'logs'}'); SELECT 1",
            cwd=work, staging=staging)
    assert_clean(r, 2)
    assert "query refused: CALL is not a read-only statement" in r.stderr
    assert not (work / "logs").exists()


# ---------------------------------------------------------------- the gate and lost data

def test_check_on_a_heavily_truncated_rank_does_not_pass(box):
    work, staging = box
    folder = gen.truncated_rank(work / "t", keep=0.56)
    r = run("check", folder, "--out", work / "o", cwd=work, staging=staging)
    assert_clean(r, 1)
    assert "load issue truncated (rank 1" in r.stdout and "[heavy: about" in r.stdout


# ---------------------------------------------------------------- the trace reader

def test_a_header_with_20000_keys_loads_in_linear_time(box):
    work, staging = box
    folder = gen.wide_header(work / "t", keys=20_000)
    r = run("load", folder, "--db", work / "t.duckdb", cwd=work, staging=staging, timeout=30)
    assert_clean(r, 0)


def test_a_whitespace_gzip_bomb_stays_within_the_staging_budget(box):
    work, staging = box
    folder = gen.whitespace_gzip_bomb(work / "t", gib=1.0)
    r = run("load", folder, "--db", work / "t.duckdb", cwd=work, staging=staging, timeout=60)
    assert r.rc in (0, 2)
    assert_clean(r, r.rc)
    assert r.staging_peak_bytes < STAGING_PEAK_BYTES, f"{r.staging_peak_bytes / MiB:.0f} MiB staged"


def _loaded_issues(work: Path, staging: Path, folder: Path) -> list[tuple]:
    r = run("load", folder, "--db", work / "t.duckdb", cwd=work, staging=staging)
    assert_clean(r, 0)
    return load_issues(work / "t.duckdb")


def test_duplicate_keys_are_reported(box):
    work, staging = box
    issues = _loaded_issues(work, staging, gen.duplicate_keys(work / "t"))
    assert any("duplicate" in (i[2] + i[4]).lower() and (i[5] or 0) >= 1 for i in issues), issues


@pytest.mark.parametrize("make, field", [(gen.nan_external_id, "External id"),
                                         (gen.huge_external_id, "External id"),
                                         (gen.huge_sequence_number, "Sequence number")])
def test_out_of_range_ids_are_counted(box, make, field):
    work, staging = box
    issues = _loaded_issues(work, staging, make(work / "t"))
    # named by its field, or counted with the other NaN / Infinity values (not JSON) it was read among
    assert any((field in i[4] or i[2] == "non-finite") and i[5] == 1 for i in issues), issues


def test_metadata_nested_deeper_than_1000_is_not_a_truncation(box):
    work, staging = box
    issues = _loaded_issues(work, staging, gen.deep_metadata(work / "t"))
    assert not [i for i in issues if i[2] in ("truncated", "clock-offset")], issues


def test_a_31_digit_step_number_is_read_or_reported(box):
    work, staging = box
    issues = _loaded_issues(work, staging, gen.long_step_number(work / "t"))
    with duckdb.connect(str(work / "t.duckdb"), read_only=True) as con:
        (steps,) = con.execute("SELECT count(*) FROM steps WHERE NOT synthetic").fetchone()
    # the four steps are read, or a load issue (other than 'no ProfilerStep annotations') says why not
    assert steps == 4 or any("ProfilerStep" in i[4] and i[2] != "no-steps" for i in issues), issues
