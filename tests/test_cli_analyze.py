"""`traceanalyze DIR`: the real command line on recorded fixtures — exit codes, files, verdict."""

from __future__ import annotations

import json
import re
import shlex

import duckdb
import pytest
from report_helpers import FIXTURES, injected, schema_errors

from traceanalyze.output.html import sql_command

SCENARIO = "input_straggler"


@pytest.fixture(scope="module")
def straggler_run(tmp_path_factory, cli):
    work = tmp_path_factory.mktemp("analyze")
    result = cli(FIXTURES / SCENARIO, "--ranks", "all", "--out", "out", "--perfetto", cwd=work)
    return work / "out", result


@pytest.fixture(scope="module")
def straggler_summary(straggler_run) -> dict:
    out, result = straggler_run
    assert result.returncode == 0, result.stderr
    return json.loads((out / "summary.json").read_text())


def test_analysis_exits_0_and_writes_the_report_folder(straggler_run):
    out, result = straggler_run
    assert result.returncode == 0, result.stderr
    for name in ("report.html", "summary.json", "trace.duckdb", "trace.perfetto-trace"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert "Traceback" not in result.stderr


def test_summary_json_satisfies_the_schema(straggler_summary):
    assert schema_errors(straggler_summary) == []
    assert straggler_summary["trace_dir"].endswith(SCENARIO)


def test_verdict_names_the_injected_straggler_rank(straggler_run, straggler_summary):
    want = injected(SCENARIO)  # what the recording injected, not what the tool said
    rule, rank = want["rule"], want["rank"]
    stdout = straggler_run[1].stdout
    hits = [f for f in straggler_summary["findings"] if f["rule"] == rule]
    assert hits and hits[0]["ranks"] == [rank]
    findings_part = stdout[stdout.index("Findings"):]
    assert re.search(rf"{re.escape(rule)} \| rank {rank}\b", findings_part), stdout
    assert f"rank {rank} *" in stdout  # highlighted in the phase table


def test_verdict_shows_step_time_median_and_worst_rank(straggler_run, straggler_summary):
    stdout = straggler_run[1].stdout
    steps = straggler_summary["steps"]
    assert "median rank" in stdout
    assert f"worst: rank {steps['worst_rank']}" in stdout
    for r in straggler_summary["ranks"]:
        assert re.search(rf"^  rank {r['rank']}\b", stdout, re.M)


def test_verdict_is_plain_text_in_80_columns(straggler_run):
    stdout = straggler_run[1].stdout
    assert "\x1b[" not in stdout  # not a terminal: no colour codes
    assert max(len(line) for line in stdout.splitlines()) <= 80


def test_progress_goes_to_stderr_and_the_paths_to_stdout(straggler_run):
    out, result = straggler_run
    assert "traceanalyze: " in result.stderr
    assert "traceanalyze: " not in result.stdout
    assert "out/report.html" in result.stdout


def test_every_findings_copyable_command_runs_on_the_written_database(straggler_run, straggler_summary, cli):
    """The exact command report.html offers to copy, pasted into a shell in the working folder."""
    out, _ = straggler_run
    commands = [sql_command(str(out / "trace.duckdb"), f["sql"]) for f in straggler_summary["findings"]
                if f.get("sql")]
    assert commands
    for command in commands:
        argv = shlex.split(command)
        assert argv[:2] == ["traceanalyze", "sql"]
        result = cli(*argv[1:])
        assert result.returncode == 0, (command, result.stderr)
        assert "(0 rows)" not in result.stdout, command


def test_default_output_folder_is_reports_slash_trace_dir_name(tmp_path, cli):
    result = cli(FIXTURES / "balanced", "-q", "--no-html", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "reports" / "balanced"
    assert (folder / "summary.json").is_file() and (folder / "trace.duckdb").is_file()
    assert not (folder / "report.html").exists()
    assert result.stderr == ""  # -q: no progress


def test_format_json_prints_the_summary(tmp_path, cli):
    result = cli(FIXTURES / "balanced", "-q", "--format", "json", "--out", tmp_path / "o")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == json.loads((tmp_path / "o" / "summary.json").read_text())


def test_explicit_analyze_subcommand_is_the_same_command(tmp_path, cli):
    result = cli("analyze", FIXTURES / "balanced", "-q", "--out", tmp_path / "o")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "o" / "report.html").is_file()


@pytest.mark.parametrize("args", [
    ["{missing}"],
    ["{empty}"],
    ["{fixture}", "--ranks", "9"],
    ["{fixture}", "--ranks", "zero"],
    ["{fixture}", "--param", "not-a-param"],
    ["{fixture}", "--param", "no-such-rule.min_late_ms=3"],
    ["{fixture}", "--format", "yaml"],
    ["{fixture}", "--out", "{file}/sub"],
], ids=["missing-dir", "empty-dir", "absent-rank", "bad-ranks", "malformed-param", "unknown-rule",
        "bad-format", "out-under-a-file"])
def test_bad_input_exits_2_with_one_line_and_no_traceback(args, tmp_path, cli):
    (tmp_path / "empty").mkdir()
    (tmp_path / "a-file").write_text("x")
    subs = {"missing": tmp_path / "nope", "empty": tmp_path / "empty", "fixture": FIXTURES / "balanced",
            "file": tmp_path / "a-file"}
    argv = [a.format(**subs) for a in args]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "out")]
    result = cli(*argv)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.lower().startswith("error")]
    assert len(errors) == 1, result.stderr


def test_a_mistyped_param_fails_before_the_traces_are_loaded(tmp_path, cli):
    result = cli(FIXTURES / "balanced", "--param", "collective-straggler.no_such_param=1", "--out", tmp_path / "o")
    assert result.returncode == 2
    assert "no_such_param" in result.stderr
    assert not (tmp_path / "o" / "trace.duckdb").exists()


def test_a_stored_database_with_older_macros_is_analyzed_with_the_current_ones(tmp_path, cli):
    """A database written by another version is reused when its traces are unchanged; the rules
    must still find the SQL helpers they use (here one is dropped, another replaced by a wrong
    definition) and give the same findings as a fresh load."""
    out = tmp_path / "out"
    first = cli(FIXTURES / "large_allreduce", "--out", out, "--format", "json")
    assert first.returncode == 0, first.stderr
    with duckdb.connect(str(out / "trace.duckdb")) as con:
        con.execute("DROP MACRO collective_moved_bytes")
        con.execute("CREATE OR REPLACE MACRO collective_op(raw) AS (NULL)")
        # (the hash of the macros it stores, as a version before this one recorded: none)
        con.execute("DELETE FROM load_meta WHERE key = 'macros'")
    again = cli(FIXTURES / "large_allreduce", "--out", out, "--format", "json")
    assert "reusing" in again.stderr
    before, after = json.loads(first.stdout), json.loads(again.stdout)
    assert not [i for i in after["load_issues"] if i["kind"] == "rule-failed"]
    assert [(f["rule"], f["ranks"]) for f in after["findings"]] == [(f["rule"], f["ranks"]) for f in before["findings"]]
    assert "comm-dominated" in {f["rule"] for f in after["findings"]}
    sql = cli("sql", out / "trace.duckdb", "SELECT collective_op('AllReduce')", "--format", "csv")
    assert sql.stdout.strip().splitlines()[-1] == "all_reduce"


def test_a_database_of_this_version_is_read_with_its_stored_macros_another_with_a_copy(tmp_path, balanced_db):
    """A connection to a database this version built uses the macros stored in it (no temporary
    copy); one whose stored macros are another version's (load_meta 'macros' differs) gets this
    version's as temporary macros, which shadow the stored ones."""
    import shutil

    from traceanalyze import db as tracedb

    def temporary_macros(path) -> set[str]:
        con = tracedb.connect(path, read_only=True)
        try:
            return {name for (name,) in con.execute(
                "SELECT function_name FROM duckdb_functions() WHERE database_name = 'temp' "
                "AND function_type IN ('macro', 'table_macro')").fetchall()}
        finally:
            con.close()

    assert temporary_macros(balanced_db) == set()
    other = tmp_path / "other.duckdb"
    shutil.copyfile(balanced_db, other)
    with duckdb.connect(str(other)) as con:
        con.execute("UPDATE load_meta SET value = 'another version' WHERE key = 'macros'")
        con.execute("CREATE OR REPLACE MACRO collective_op(raw) AS (NULL)")
        stored = {name for (name,) in con.execute(
            "SELECT function_name FROM duckdb_functions() WHERE database_name = 'other' "
            "AND function_type IN ('macro', 'table_macro')").fetchall()}
    assert "collective_op" in stored and temporary_macros(other) == stored
    con = tracedb.connect(other, read_only=True)
    try:
        assert con.execute("SELECT collective_op('AllReduce')").fetchone() == ("all_reduce",)
    finally:
        con.close()
