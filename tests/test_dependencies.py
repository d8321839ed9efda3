"""Every import is declared in pyproject.toml: a module that only arrives through another
package (or only on the machine that ran CI) fails the suite here, not on a user's machine.

deptry reads the imports of every file and the dependencies pyproject.toml declares (the
installed distributions say which module each one provides)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
# the folders whose scripts import their neighbours by bare name (tests' helpers, the
# recorders' verifier, the benchmarks' converter)
SCRIPT_FOLDERS = ("tests", "bench", "fixtures", "scripts")


def _deptry(*args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("deptry")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "deptry"]
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run([*cmd, ".", *args], cwd=ROOT, capture_output=True, text=True, env=env,
                          timeout=600)


def _report(proc: subprocess.CompletedProcess) -> str:
    return "\n".join(line for line in (proc.stdout + proc.stderr).splitlines()
                     if "DEP0" in line or "rror" in line)


def test_the_package_imports_only_what_it_declares():
    """traceanalyze/ against `dependencies` and the runtime extras ([tool.deptry] in
    pyproject.toml): no undeclared or only-transitive import, no test-only package used."""
    proc = _deptry()
    assert proc.returncode == 0, _report(proc)
    assert "Scanning" in proc.stdout + proc.stderr


# each folder against what installs it: the test command installs `.[test]`; the benchmarks
# add `bench`; the fixture recorders add `capture`
FOLDER_EXTRAS = {"tests": ["test"], "scripts": ["test"], "bench": ["test", "bench"],
                 "fixtures": ["test", "capture"]}


@pytest.mark.parametrize("folder", sorted(FOLDER_EXTRAS))
def test_each_folder_imports_only_what_its_install_declares(folder, tmp_path):
    """e.g. psutil, which the fault tests import, must be in the `test` extra: declaring it only
    in `bench` passed on a machine whose IPython happened to pull it in."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    requires = list(project["project"]["dependencies"])
    for extra in FOLDER_EXTRAS[folder]:
        requires += extras[extra]
    config = tmp_path / "pyproject.toml"
    config.write_text(
        "[project]\nname = 'traceanalyze'\nversion = '0'\n"
        f"dependencies = {json.dumps(requires)}\n"
        "[tool.deptry.package_module_name_map]\n"
        + "".join(f"{json.dumps(k)} = {json.dumps(v)}\n"
                  for k, v in project["tool"]["deptry"]["package_module_name_map"].items()))
    local = sorted({p.stem for f in SCRIPT_FOLDERS for p in (ROOT / f).glob("*.py")}
                   | {p.parent.name for f in SCRIPT_FOLDERS for p in (ROOT / f).glob("*/__init__.py")})
    assert "conftest" in local and "tracegen" in local
    first_party = [arg for name in ["traceanalyze", *local] for arg in ("--known-first-party", name)]
    others = [f for f in ("traceanalyze", "native", *FOLDER_EXTRAS) if f != folder]
    proc = _deptry("--config", str(config),
                   "--exclude", "|".join([r"\.venv", "venv", r"\.git", "build", "reports", "docs",
                                          "examples", *others]),
                   "--ignore", "DEP002", *first_party)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, _report(proc)
    scanned = int(out.split("Scanning ", 1)[1].split(" ", 1)[0])
    assert scanned >= len(list((ROOT / folder).glob("*.py"))), out
