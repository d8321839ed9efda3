"""The documentation tells the truth: every table and column is documented, the generated reference
pages are current, the paths it names exist, and the docs site builds with --strict."""

import html
import re
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


def test_generated_reference_pages_are_up_to_date():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "update_docs.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_architecture_paths_exist():
    """The 'where does X happen' table (ARCHITECTURE.md, the Architecture page) names files that exist."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    section = text.split("## Where does X happen", 1)[1].split("\n## ", 1)[0]
    paths = re.findall(r"`([\w./-]+/[\w./-]*)`", section)
    assert len(paths) >= 20, paths
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, missing


def test_readme_is_a_front_door_whose_links_exist():
    """README.md stays short, keeps the two commands, and every relative link it makes (docs pages,
    the screenshot) points at a file of the repository, so the links work on GitHub too."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    assert "pip install . && traceanalyze fixtures/ddp/input_straggler" in readme
    assert "bash scripts/install-test-deps.sh && python3 -m pytest -q -n 2" in readme
    links = [link.split("#")[0] for link in re.findall(r"\]\(([^)\s]+)\)", readme)
             if "://" not in link and not link.startswith("#")]
    assert {"docs/getting-started.md", "docs/img/report.png", "docs/reference/schema.md"} <= set(links)
    missing = [link for link in links if not (ROOT / link).is_file()]
    assert not missing, missing
    assert (ROOT / "docs" / "img" / "report.png").stat().st_size < 300_000



def strict_build(root: Path, site: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` as the README writes it: no -q, no filtered log, the user's
    environment (only the output folder is ours)."""
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                          cwd=root, capture_output=True, text=True)


def test_docs_build_fails_on_a_planted_broken_reference(tmp_path):
    """The strict build is a real check: a reference-style link to nothing (what mkdocs-autorefs
    warns about) in a copy of the docs makes it fail."""
    import shutil

    copy = tmp_path / "checkout"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    for name in ("README.md", "CHANGELOG.md", "ARCHITECTURE.md", "rules/README.md"):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, copy / name)
    clean = strict_build(copy, tmp_path / "clean")
    assert clean.returncode == 0, clean.stdout + clean.stderr  # the copy builds as the checkout does
    page = copy / "docs" / "efficiency.md"
    page.write_text(page.read_text(encoding="utf-8") + "\nSee [the shapes][B,K,N].\n", encoding="utf-8")
    result = strict_build(copy, tmp_path / "site")
    assert result.returncode != 0
    assert "B,K,N" in result.stdout + result.stderr


def test_docs_site_builds_strict(tmp_path):
    """`mkdocs build --strict` (a broken link, a missing include or a bad API reference fails it)
    writes the pages the README links to, with their generated content."""
    site = tmp_path / "site"
    result = strict_build(ROOT, site)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Aborted" not in result.stdout + result.stderr
    pages = {p: (site / p / "index.html") for p in
             ["getting-started", "concepts", "usage", "outputs", "python-api", "ci", "configuration",
              "scale-out", "rules", "benchmarks", "changelog", "architecture",
              "reference/schema", "reference/cli", "reference/rules", "reference/sql-helpers"]}
    missing = [p for p, path in pages.items() if not path.is_file()]
    assert not missing, missing
    assert (site / "index.html").is_file() and (site / "img" / "report.png").is_file()

    def text(page: str) -> str:
        return html.unescape(re.sub(r"<[^>]+>", "", pages[page].read_text()))

    # generated content made it into the pages: every table, every rule, every command
    schema = text("reference/schema")
    assert [t for t in table_comments() if not t.startswith("_") and t not in schema] == []
    rules = text("reference/rules")
    rule_ids = sorted(p.parent.name for p in (ROOT / "rules").glob("*/rule.yaml"))
    assert rule_ids and [r for r in rule_ids if r not in rules] == []
    from traceanalyze.cli import all_commands
    cli_page = text("reference/cli")
    commands = all_commands()
    assert "load" in commands and "analyze" in commands
    assert [c for c in commands if f"traceanalyze {c} --help" not in cli_page] == []
    # the API reference is rendered from the docstrings of traceanalyze.api
    api = pages["python-api"].read_text()
    for name in ["analyze", "Analysis", "Analysis.sql", "diff", "scaling"]:
        assert f'id="traceanalyze.api.{name}"' in api, name
    # the included root files: the changelog and the architecture (with its 'where' table)
    first_change = (ROOT / "CHANGELOG.md").read_text().split("\n- ", 1)[1].split("\n")[0]
    assert html.unescape(re.sub(r"[*`]", "", first_change)).strip()[:40] in " ".join(text("changelog").split())
    assert "Where does X happen" in text("architecture")
    assert "--8<--" not in text("changelog") + text("architecture") + text("rules")
