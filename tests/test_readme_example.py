"""The README's Python example works on the first try: as written, as a plain script (no
`if __name__ == "__main__":` guard) saved in the repository root, next to the source folder."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    examples = [b for b in blocks if b.startswith("import traceanalyze\n")]
    assert examples, "README.md has no Python example that starts with `import traceanalyze`"
    return examples[0]


def _clean_env() -> dict[str, str]:
    """As a user's shell: the script's own folder comes first on sys.path."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONSAFEPATH")}


def _culprit_from_json(folder: Path) -> int:
    """The rank whose DataLoader time per step is largest, straight from the trace files."""
    worst, worst_ms = -1, -1.0
    for path in sorted(folder.glob("*.json.gz")):
        trace = json.loads(gzip.open(path).read())
        rank = trace["distributedInfo"]["rank"]
        loader_us = sum(e.get("dur", 0) for e in trace["traceEvents"]
                        if e.get("ph") == "X" and "DataLoader" in str(e.get("name", ""))
                        and "__next__" in str(e.get("name", "")))
        if loader_us > worst_ms:
            worst, worst_ms = rank, loader_us
    return worst


def test_the_readme_example_runs_as_a_script_in_the_repository_root(tmp_path):
    # a folder laid out as the repository root: the source folder and the fixtures beside the
    # script (Python imports the script's folder first, so the source folder is what it gets)
    (tmp_path / "traceanalyze").symlink_to(ROOT / "traceanalyze")
    (tmp_path / "fixtures").symlink_to(ROOT / "fixtures")
    script = tmp_path / "example.py"
    script.write_text(readme_example())
    assert "__main__" not in script.read_text()
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                          env=_clean_env(), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "bootstrapping" not in proc.stderr
    culprit = _culprit_from_json(ROOT / "fixtures" / "ddp" / "input_straggler")
    assert f"collective-straggler ({culprit},)" in proc.stdout
    assert (tmp_path / "out" / "report.html").stat().st_size > 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [f["ranks"] for f in summary["findings"] if f["rule"] == "collective-straggler"] == [[culprit]]


def test_a_source_folder_without_its_extension_says_so_in_one_message(tmp_path):
    """A checkout whose extension was never built (e.g. `pip install .` put it next to the
    installed package only): the import error names the cause and the command to run, at the
    first use of the API (the package root imports it lazily), as the README's example does."""
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT / "traceanalyze", checkout / "traceanalyze", symlinks=True,
                    ignore=shutil.ignore_patterns("_native*.so", "_native*.pyd", "__pycache__"))
    (checkout / "native").mkdir()
    shutil.copy(ROOT / "native" / "Cargo.toml", checkout / "native" / "Cargo.toml")
    shutil.copy(ROOT / "pyproject.toml", checkout / "pyproject.toml")
    assert not list((checkout / "traceanalyze").glob("_native*.so"))
    proc = subprocess.run([sys.executable, "-c", "from traceanalyze import analyze"], cwd=checkout,
                          capture_output=True, text=True, env=_clean_env(), timeout=300)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: traceanalyze: the source folder ")
    assert str(checkout / "traceanalyze") in last
    assert "shadows the installed package" in last
    assert f"pip install -e {checkout}" in last
    assert "partially initialized" not in proc.stderr
