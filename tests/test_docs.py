"""The documentation tells the truth: every table and column is documented, README is regenerated."""

import subprocess
import sys
from pathlib import Path

import duckdb

from traceanalyze.db import table_comments

ROOT = Path(__file__).resolve().parent.parent


def test_every_table_and_column_of_a_real_database_is_documented(balanced_db):
    docs = table_comments()
    con = duckdb.connect(str(balanced_db), read_only=True)
    try:
        tables = [t for (t,) in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'").fetchall()]
        missing = []
        for table in tables:
            if table.startswith("_") or table == "kernel_classes":
                continue
            if not docs.get(table, {}).get(""):
                missing.append(f"table {table}")
                continue
            cols = [c for (c,) in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [table]).fetchall()]
            missing += [f"{table}.{c}" for c in cols if not docs[table].get(c)]
    finally:
        con.close()
    assert tables, "the database has no tables"
    assert not missing, f"undocumented: {missing}"


def test_readme_generated_sections_are_up_to_date():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "update_docs.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_readme_paths_exist():
    """The 'where does X happen' table names files that exist."""
    import re

    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Where does X happen", 1)[1].split("\n## ", 1)[0]
    paths = re.findall(r"`([\w./-]+/[\w./-]*)`", section)
    assert paths
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, missing
