"""Read-only `sql` reads the shard files its views need and writes nothing anywhere.

A database of a big job is views over the Parquet files of its shard folder, so DuckDB must
be allowed to read there; DuckDB's permission is read and write alike, so the statements are
checked with DuckDB's parser. Each attack runs through the real command line; the shard
folder's bytes (hashed before and after) and its listing must not change.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import xxhash
from conftest import FIXTURES, run_cli

from traceanalyze.load import load_shards, reduce
from traceanalyze.load.discover import identify
from traceanalyze.load.map import map_rank

SCENARIO = FIXTURES / "input_straggler"


def _tree(folder: Path) -> dict[str, str]:
    """Every file under `folder` (relative name -> hash of its bytes)."""
    return {str(p.relative_to(folder)): xxhash.xxh3_128(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _events(folder: Path) -> int:
    return sum(len(json.loads(gzip.decompress(p.read_bytes()))["traceEvents"]) for p in folder.glob("rank*.json.gz"))


@pytest.fixture(scope="module")
def views_db(tmp_path_factory) -> tuple[Path, Path]:
    """(database, shard folder): a shard set written one rank at a time, reduced into a database
    of views over its Parquet files (as a job too big to copy)."""
    base = tmp_path_factory.mktemp("views_db")
    shards = base / "shards"
    for path in sorted(SCENARIO.glob("rank*.json.gz")):
        map_rank(identify(path, only_file=True), str(shards))
    (shards / "notes.txt").write_text("a file of the user's beside the rank folders\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(reduce, "MATERIALIZE_MAX_BYTES", 0)
        load_shards(str(shards), base / "trace.duckdb")
    return base / "trace.duckdb", shards


def _attacks(target: Path) -> list[str]:
    """Statements that would write into the folder `target` (a rank folder or the shard root)."""
    return [
        f"COPY (SELECT * FROM steps WHERE rank = 0) TO '{target}/steps.parquet' (FORMAT parquet)",
        f"COPY (SELECT 1 AS one) TO '{target}/x.csv'",
        f"COPY steps TO '{target}/extra.parquet'",
        f"EXPORT DATABASE '{target}/export'",
        f"ATTACH '{target}/new.duckdb' AS n",
        f"EXPLAIN ANALYZE COPY (SELECT 1 AS one) TO '{target}/e.csv'",
        f"EXPLAIN (ANALYZE, FORMAT json) COPY (SELECT 1 AS one) TO '{target}/j.csv'",
        f"SELECT 1; COPY (SELECT 1 AS one) TO '{target}/m.csv'",
        f"PREPARE p AS COPY (SELECT 1 AS one) TO '{target}/p.csv'",
        f"CALL enable_logging(storage = 'file', storage_config = {{'path': '{target}/log'}})",
        "SET enable_external_access = true",
        "LOAD httpfs",
    ]


def _refused(proc) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith("traceanalyze: ")]
    assert len(lines) == 1 and lines[0].startswith("error: query refused: "), proc.stderr
    assert "Traceback" not in proc.stderr


def test_no_write_into_the_shard_folder_of_a_views_database(views_db):
    db, shards = views_db
    before, db_before = _tree(shards), db.read_bytes()
    for target in (shards / "rank=2", shards):
        for statement in _attacks(target):
            _refused(run_cli("sql", db, statement))
    assert _tree(shards) == before  # no byte changed, nothing new (the listing is the keys)
    assert db.read_bytes() == db_before


def test_the_views_still_read_their_shards_and_nothing_else(views_db):
    db, shards = views_db
    proc = run_cli("sql", db, "SELECT count(*) AS n FROM raw_events", "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["n", str(_events(SCENARIO))]
    for query in ("EXPLAIN SELECT count(*) FROM steps", "PRAGMA table_info('steps')", "DESCRIBE steps"):
        proc = run_cli("sql", db, query, "--format", "csv")
        assert proc.returncode == 0, (query, proc.stderr)
    proc = run_cli("sql", db, "PRAGMA table_info('steps')", "--format", "json")
    assert "rank" in [c["name"] for c in json.loads(proc.stdout)]
    # files outside the rank folders the views read: the user's file beside them, /etc/passwd
    for path in (shards / "notes.txt", "/etc/passwd"):
        proc = run_cli("sql", db, f"SELECT * FROM read_text('{path}')")
        assert proc.returncode == 2 and "disabled by configuration" in proc.stderr, proc.stderr


def test_no_write_through_a_trace_folder_source(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    for path in SCENARIO.glob("rank*.json.gz"):
        (traces / path.name).write_bytes(path.read_bytes())
    proc = run_cli("sql", traces, "SELECT value FROM load_meta WHERE key = 'shards'", "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    shards = Path(proc.stdout.split()[1])  # the cache folder's shards of this trace folder
    assert sorted(p.name for p in shards.iterdir()) == [f"rank={r}" for r in range(4)]
    before, traces_before = _tree(shards), _tree(traces)
    for target in (shards / "rank=2", traces):
        for statement in _attacks(target)[:5]:
            _refused(run_cli("sql", traces, statement))
    assert _tree(shards) == before and _tree(traces) == traces_before

