"""Imports go down the layers: the import-linter contracts hold, and no file of the package
takes part in an import cycle (ARCHITECTURE.md, "Import layers").

The cycle check builds the graph itself, from the source with `ast`, independently of
import-linter: every import statement counts, also one inside a function or under
TYPE_CHECKING. `import a.b.c` is an import of module a.b.c. `from P import N` reads P's
namespace first, so it is an import of P (the package's `__init__.py`) and, when N is a
submodule, of P.N too: `from traceanalyze import db` inside a stage depends on the package
root, which imports the API, which imports every stage.
"""

from __future__ import annotations

import ast
import graphlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "traceanalyze"

Graph = dict[str, dict[str, list[str]]]  # importer -> imported -> ["file:line", ...]


def module_files(source_root: Path) -> dict[str, Path]:
    """Every module of the package, by dotted name: its .py files, and its compiled modules
    by their .pyi stubs (traceanalyze._native). The rule pack (_builtin_rules) is data."""
    found: dict[str, Path] = {}
    package_dir = source_root / PACKAGE
    for path in sorted(package_dir.rglob("*.py*")):
        if path.suffix not in (".py", ".pyi") or "_builtin_rules" in path.relative_to(package_dir).parts:
            continue
        parts = list(path.relative_to(source_root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if path.suffix == ".py" or name not in found:
            found[name] = path
    return found


def import_graph(source_root: Path) -> Graph:
    modules = module_files(source_root)

    def known(name: str) -> str | None:
        """The module an import of `name` runs: the longest prefix that is a module of ours."""
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: Graph = {}
    for module, path in modules.items():
        edges = graph.setdefault(module, {})
        if path.suffix == ".pyi":
            continue
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]

        def add(target: str | None, line: int) -> None:
            if target is not None and target != module:
                edges.setdefault(target, []).append(f"{path.relative_to(source_root)}:{line}")

        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(known(alias.name), node.lineno)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    source = f"{base}.{node.module}" if node.module else base
                else:
                    source = node.module or ""
                if source != PACKAGE and not source.startswith(PACKAGE + "."):
                    continue
                add(known(source), node.lineno)
                for alias in node.names:
                    if f"{source}.{alias.name}" in modules:
                        add(f"{source}.{alias.name}", node.lineno)
    return graph


def find_cycle(graph: Graph) -> list[str] | None:
    """One import cycle (as a list of modules, first == last), or None."""
    try:
        tuple(graphlib.TopologicalSorter({m: set(e) for m, e in graph.items()}).static_order())
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


def describe(graph: Graph, cycle: list[str]) -> str:
    # graphlib lists a cycle against the edges' direction: b, a, b for a -> b -> a
    steps = list(reversed(cycle))
    return "\n".join(f"  {a} -> {b}   ({', '.join(graph[a][b])})" for a, b in zip(steps, steps[1:]))


def assert_no_cycle(graph: Graph) -> None:
    cycle = find_cycle(graph)
    assert cycle is None, "an import cycle between the package's files:\n" + describe(graph, cycle)


def lint_imports(source_root: Path) -> subprocess.CompletedProcess:
    """`lint-imports` over the package found under `source_root`, with its pyproject.toml."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(source_root)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    return subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                               "sys.exit(lint_imports_command())", "--no-cache", "--no-logo"],
        cwd=source_root, env=env, capture_output=True, text=True)


def test_the_package_has_no_import_cycle():
    graph = import_graph(ROOT)
    # the graph is the real one: the files this repository has, the imports that break the
    # layers when reversed (a wrong resolver would find no cycle because it finds no edge)
    assert {"traceanalyze", "traceanalyze.api", "traceanalyze.load.read", "traceanalyze._native"} <= set(graph)
    assert "traceanalyze.api" in graph["traceanalyze"]
    assert "traceanalyze.load.discover" in graph["traceanalyze.load.read"]
    assert "traceanalyze.extension" in graph["traceanalyze.load.read"]  # (it loads _native)
    assert_no_cycle(graph)


def test_no_module_of_the_package_imports_the_package_root():
    """traceanalyze/__init__.py is the public API for users; a stage reads the version from
    traceanalyze.version and the database helpers from traceanalyze.db."""
    graph = import_graph(ROOT)
    importers = {m: e[PACKAGE] for m, e in graph.items() if PACKAGE in e}
    assert not importers, f"modules that import the package root: {importers}"


def test_the_import_linter_contracts_are_kept():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.fixture
def package_copy(tmp_path):
    """The package's Python sources and pyproject.toml, copied to change one import."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for name, path in module_files(ROOT).items():
        target = tmp_path / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    return tmp_path


def _plant(root: Path, relative: str, code: str) -> None:
    path = root / relative
    path.write_text(path.read_text(encoding="utf-8") + "\n\n" + code + "\n", encoding="utf-8")


@pytest.mark.parametrize("relative, code, cycle_through", [
    # a stage reading the version from the package root: the root imports the API, which loads
    ("traceanalyze/load/shards.py", "from traceanalyze import __version__ as _v", "traceanalyze"),
    # an import hidden in a function still closes a cycle: the executor interface naming its registry
    ("traceanalyze/load/executors.py",
     "def _registry():\n    from traceanalyze.load.executor_registry import EXECUTORS\n    return EXECUTORS",
     "traceanalyze.load.executor_registry"),
])
def test_the_checks_catch_a_planted_cycle(package_copy, relative, code, cycle_through):
    assert_no_cycle(import_graph(package_copy))  # the copy as it is: no cycle
    _plant(package_copy, relative, code)
    graph = import_graph(package_copy)
    cycle = find_cycle(graph)
    assert cycle is not None and cycle_through in cycle, cycle
    planted = relative.removesuffix(".py").replace("/", ".")
    assert planted in cycle
    result = lint_imports(package_copy)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout and planted in result.stdout, result.stdout


def test_lint_imports_catches_an_output_module_importing_the_loader(package_copy):
    _plant(package_copy, "traceanalyze/output/terminal.py", "from traceanalyze.load.discover import TraceFile")
    assert_no_cycle(import_graph(package_copy))  # no cycle: only the contract says no
    result = lint_imports(package_copy)
    assert result.returncode != 0
    assert "traceanalyze.output.terminal -> traceanalyze.load.discover" in result.stdout, result.stdout
