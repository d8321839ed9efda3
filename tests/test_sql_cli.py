"""`traceanalyze sql`: output formats that parse, read-only by default, clear errors."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from pathlib import Path

import duckdb
import pytest
from conftest import FIXTURES, REAL_TRACES

# kernel names with commas, quotes, < > and spaces: a good test of the CSV/JSON writers
TRACE = REAL_TRACES / "hta-trace-filter"
KERNELS_SQL = "SELECT rank, step, name, ts_ns, dur_ns FROM kernels ORDER BY rank, ts_ns, name"


@pytest.fixture(scope="module")
def db(loaded_with_cli, tmp_path_factory):
    """A private copy of a loaded database (tests below write to it)."""
    src, proc = loaded_with_cli(TRACE)
    assert proc.returncode == 0, proc.stderr
    dst = tmp_path_factory.mktemp("sql") / "trace.duckdb"
    shutil.copy2(src, dst)
    return dst


@pytest.fixture(scope="module")
def kernels(db):
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(KERNELS_SQL).fetchall()


def one_line_error(proc, *words):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith("traceanalyze: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for w in words:
        assert w.lower() in lines[0].lower(), (w, lines[0])
    return lines[0]


def test_csv_output_parses_and_matches(cli, db, kernels):
    proc = cli("sql", db, KERNELS_SQL, "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    table = list(csv.reader(io.StringIO(proc.stdout)))
    assert table[0] == ["rank", "step", "name", "ts_ns", "dur_ns"]
    assert len(table) - 1 == len(kernels) > 100
    assert any("," in row[2] for row in table[1:])  # names with commas survived quoting
    parsed = [(int(r), int(s) if s else None, n, int(t), int(d)) for r, s, n, t, d in table[1:]]
    assert parsed == kernels


def test_json_output_parses_and_keeps_exact_integers(cli, db, kernels):
    proc = cli("sql", db, KERNELS_SQL, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [(r["rank"], r["step"], r["name"], r["ts_ns"], r["dur_ns"]) for r in rows] == kernels
    assert all(isinstance(r["ts_ns"], int) for r in rows)


def test_json_output_of_other_types(cli, db):
    proc = cli("sql", db, "SELECT sum(dur_ns) AS total, avg(dur_ns) AS mean, NULL AS nothing,"
                          " [1, 2] AS list, {'a': 1} AS struct, DATE '2024-01-02' AS day,"
                          " 1.5::DECIMAL(10, 2) AS dec FROM kernels", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)
    with duckdb.connect(str(db), read_only=True) as con:
        (total,) = con.execute("SELECT sum(dur_ns) FROM kernels").fetchone()
    assert row["total"] == total and row["nothing"] is None and row["list"] == [1, 2]
    assert row["day"] == "2024-01-02" and row["dec"] == 1.5


def test_table_output(cli, db, kernels):
    proc = cli("sql", db, "SELECT rank, count(*) AS n FROM kernels GROUP BY rank ORDER BY rank")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["rank", "n"] and set(lines[1]) <= {"-", " "}
    assert lines[-1] == "(2 rows)"
    want = {}
    for r, *_ in kernels:
        want[r] = want.get(r, 0) + 1
    assert [tuple(map(int, line.split())) for line in lines[2:-1]] == sorted(want.items())


def test_empty_result_in_every_format(cli, db):
    q = "SELECT name FROM kernels WHERE false"
    assert json.loads(cli("sql", db, q, "--format", "json").stdout) == []
    assert list(csv.reader(io.StringIO(cli("sql", db, q, "--format", "csv").stdout))) == [["name"]]
    assert cli("sql", db, q).stdout.splitlines()[-1] == "(0 rows)"


def test_query_from_a_file(cli, db, tmp_path):
    f = tmp_path / "q.sql"
    f.write_text("SELECT count(*) AS n FROM ranks")
    proc = cli("sql", db, "--file", f, "--format", "json")
    assert json.loads(proc.stdout) == [{"n": 2}]


@pytest.mark.parametrize("statement", [
    "INSERT INTO load_issues VALUES (0, 'x', 'manual', 'info', 'hello', NULL)",
    "DELETE FROM kernels",
    "DROP TABLE kernels",
    "CREATE TABLE t AS SELECT 1",
    "UPDATE ranks SET rank = 5",
])
def test_read_only_by_default(cli, db, statement):
    before = (db.stat().st_mtime_ns, db.stat().st_size)
    proc = cli("sql", db, statement)
    one_line_error(proc, "query refused", "is not a read-only statement")
    assert (db.stat().st_mtime_ns, db.stat().st_size) == before


def test_read_only_query_cannot_write_or_read_other_files(cli, db, tmp_path):
    out = tmp_path / "out.csv"
    one_line_error(cli("sql", db, f"COPY (SELECT 1) TO '{out}'"), "query refused", "COPY")
    assert not out.exists()
    one_line_error(cli("sql", db, f"ATTACH '{tmp_path / 'new.duckdb'}' AS n"), "query refused", "ATTACH")
    assert not (tmp_path / "new.duckdb").exists()
    one_line_error(cli("sql", db, "SELECT * FROM read_text('/etc/hostname')"), "query failed")


def test_write_allows_changes(cli, db, tmp_path):
    proc = cli("sql", db, "INSERT INTO load_issues VALUES (0, 'x', 'manual', 'info', 'hello', NULL)", "--write")
    assert proc.returncode == 0, proc.stderr
    got = cli("sql", db, "SELECT message FROM load_issues WHERE kind = 'manual'", "--format", "json")
    assert json.loads(got.stdout) == [{"message": "hello"}]
    out = tmp_path / "k.csv"
    assert cli("sql", db, f"COPY (SELECT 1 AS one) TO '{out}'", "--write").returncode == 0
    assert out.read_text().split() == ["one", "1"]


def test_sql_on_a_trace_folder_loads_it_first(cli, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRACEANALYZE_CACHE_DIR", str(cache))
    work = tmp_path / "work"
    work.mkdir()
    proc = cli("sql", REAL_TRACES / "hta-cpu-only", "SELECT rank FROM ranks", "--format", "json", cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [{"rank": 34}]
    # nothing written in the working folder: the derived database lives in the cache folder
    assert list(work.iterdir()) == []
    (db,) = cache.glob("hta-cpu-only-*/trace.duckdb")
    again = cli("sql", db, "SELECT rank FROM ranks", "--format", "json", cwd=work)
    assert json.loads(again.stdout) == [{"rank": 34}]


@pytest.mark.parametrize("args, words", [
    (["SELECT nonsense FROM nowhere"], ["query failed", "nowhere"]),
    (["SELEC 1"], ["query failed", "syntax"]),
    ([], ["no query"]),
])
def test_bad_queries_are_one_line_errors(cli, db, args, words):
    one_line_error(cli("sql", db, *args), *words)


def test_missing_and_broken_databases(cli, tmp_path):
    one_line_error(cli("sql", tmp_path / "nope.duckdb", "SELECT 1"), "nope.duckdb", "no such file")
    bad = tmp_path / "bad.duckdb"
    bad.write_bytes(b"\x00garbage" * 1000)
    one_line_error(cli("sql", bad, "SELECT 1"), "bad.duckdb", "cannot open the database")


def test_schema_lists_documented_tables(cli):
    proc = cli("sql", "--schema")
    assert proc.returncode == 0, proc.stderr
    for table in ("raw_events", "steps", "kernels", "collectives", "load_issues"):
        assert table in proc.stdout


def test_table_format_shortens_a_huge_cell(cli, tmp_path):
    """A 100k-character value prints as one short cell in the table format, in full in JSON."""
    db = tmp_path / "x.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("CREATE TABLE t AS SELECT repeat('k', 100000) AS name")
    proc = cli("sql", db, "SELECT name FROM t")
    assert proc.returncode == 0 and max(len(line) for line in proc.stdout.splitlines()) < 100
    assert len(json.loads(cli("sql", db, "SELECT name FROM t", "--format", "json").stdout)[0]["name"]) == 100000


def test_fixture_dir_is_queryable(cli, tmp_path):
    """Queries on a recorded scenario folder (the documented example usage)."""
    scenario = next(p for p in sorted(FIXTURES.iterdir()) if any(p.glob("*.pt.trace.json.gz")))
    proc = cli("sql", scenario, "SELECT count(DISTINCT rank) AS n FROM steps", "--format", "csv", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert list(csv.reader(io.StringIO(proc.stdout)))[1] == [str(len(list(scenario.glob("*.pt.trace.json.gz"))))]


def test_query_may_start_with_a_comment_line(cli, db, kernels):
    """Rule SQL starts with `-- ...`; pasted as the query it must run, not be read as an option."""
    proc = cli("sql", db, "-- kernels of the trace\n" + KERNELS_SQL, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [(r["rank"], r["step"], r["name"], r["ts_ns"], r["dur_ns"]) for r in rows] == kernels


def test_the_documented_sql_helpers_exist_and_their_example_runs(cli, db):
    """The SQL helpers page: every macro listed is in a loaded database, and the example works."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "reference" / "sql-helpers.md").read_text()
    section = page[:page.index("<!-- macros:end -->")]
    listed = re.findall(r"^\| `(\w+)\(", section, re.MULTILINE)
    assert {"collective_op", "dtype_bytes", "first_input_numel", "collective_moved_bytes"} <= set(listed)
    with duckdb.connect(str(db), read_only=True) as con:
        macros = {n for (n,) in con.execute("SELECT function_name FROM duckdb_functions() "
                                            "WHERE function_type = 'macro'").fetchall()}
    assert set(listed) <= macros
    (example,) = re.findall(r"\(`(SELECT [^`]+)`\)", section)
    proc = cli("sql", db, example, "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "all_gather"


def test_stable_mode_is_the_most_frequent_value_ties_to_the_smallest(db):
    """stable_mode: what the rules name as a finding's cause or op when values tie (DuckDB's
    mode() returns any of the tied values, so a finding could read differently run to run)."""
    with duckdb.connect(str(db), read_only=True) as con:
        got = con.execute("SELECT stable_mode(['input', 'compute', 'compute', 'input', NULL, NULL]), "
                          "stable_mode([3, 1, 2, 3]), stable_mode([]::VARCHAR[])").fetchone()
    assert got == ("compute", 3, None)
