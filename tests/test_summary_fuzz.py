"""Crafted summary.json files given to `check`, `check --baseline` and `diff`.

Whatever a file holds, the command ends with a valid result (exit 0 or 1) or a one-line
`error: <file>: ...` with exit code 2: never a traceback. Cases from issue 18 first (deep
nesting, 10**400, NaN, a string where a number belongs), then hypothesis mutations of a
valid summary at every path the readers look at.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from summary_builder import finding, make_summary

from traceanalyze.cli import cli

BASE = make_summary({0: 100.0, 1: 104.0}, findings=[finding("collective-straggler", ranks=[1])])
COMMANDS = [["check", "{new}"], ["check", "{new}", "--format", "junit"],
            ["check", "{new}", "--format", "sarif"], ["check", "{new}", "--format", "github"],
            ["check", "{new}", "--baseline", "{old}"], ["diff", "{old}", "{new}"],
            ["diff", "{old}", "{new}", "--format", "json"]]


def run(args: list[str], old: Path, new: Path):
    argv = [a.format(old=old, new=new) for a in args]
    return CliRunner().invoke(cli, argv, catch_exceptions=True)


def assert_clean(result, path: Path) -> None:
    """Exit 0/1 with no exception, or exit 2 with one line naming the crafted file."""
    exc = result.exception
    assert exc is None or isinstance(exc, SystemExit), (exc, result.output)
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.output)
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        lines = result.output.strip().splitlines()
        assert lines[-1].startswith(f"error: {path}: "), result.output


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture()
def old(tmp_path) -> Path:
    return write(tmp_path, "old.json", json.dumps(BASE))


def test_the_unmutated_summary_is_read(tmp_path, old):
    new = write(tmp_path, "summary.json", json.dumps(BASE))
    for args in COMMANDS:
        result = run(args, old, new)
        assert result.exit_code in (0, 1) and result.exception is None or \
            isinstance(result.exception, SystemExit), (args, result.output)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


ISSUE_CASES = {
    "nested 100k deep": lambda: json.dumps({**BASE, "timeline": "@"}).replace('"@"', _nested(100_000)),
    "10**400 as a metric": lambda: json.dumps(BASE).replace('"median": 100.0', '"median": 1' + "0" * 400),
    "a 5000-digit integer": lambda: json.dumps(BASE).replace('"median": 100.0', '"median": 1' + "0" * 5000),
    "1e400 (infinity)": lambda: json.dumps(BASE).replace('"median": 100.0', '"median": 1e400'),
    "NaN metric": lambda: json.dumps(BASE).replace('"median": 100.0', '"median": NaN'),
    "string metric": lambda: json.dumps(BASE).replace('"median": 100.0', '"median": "100"'),
    "string rank list": lambda: json.dumps(BASE).replace('"ranks": [1]', '"ranks": "1"'),
    "null ms_by_rank": lambda: json.dumps(BASE).replace('"ms_by_rank": {', '"ms_by_rank": null, "x": {'),
}


@pytest.mark.parametrize("case", sorted(ISSUE_CASES))
@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: "-".join(a).replace("{", "").replace("}", ""))
def test_crafted_summaries_from_the_issue(tmp_path, old, case, args):
    text = ISSUE_CASES[case]()
    assert text != json.dumps(BASE)  # the crafted value is really in the file
    new = write(tmp_path, "summary.json", text)
    result = run(args, old, new)
    assert_clean(result, new)
    assert result.exit_code == 2, (case, result.output)  # none of these is a usable summary


def test_nan_in_a_candidate_is_refused_not_dropped_from_the_comparison(tmp_path, old):
    """NaN used to compare as 'no change': a regression could hide behind it."""
    text = json.dumps(BASE).replace('"median_rank_step_ms": ', '"median_rank_step_ms": NaN, "_": ')
    new = write(tmp_path, "summary.json", text)
    result = run(["check", "{new}", "--baseline", "{old}"], old, new)
    assert result.exit_code == 2 and "NaN" in result.output, result.output


# ---------------------------------------------------------------- hypothesis mutations

HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10 ** 30), max_value=10 ** 30),
    st.just(10 ** 400), st.just(-(10 ** 400)), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20), st.just("\n::error file=x::injected"), st.just("\x1b]0;owned\x07"),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.just(json.loads(_nested(80))),  # deeper than any summary
)


def _paths(value, prefix=()):
    """Every path (tuple of keys / indexes) inside a JSON value."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):
            yield from _paths(v, prefix + (i,))


ALL_PATHS = [p for p in _paths(BASE) if p and p != ("schema",)]


def _set(data, path, value):
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


@settings(max_examples=150, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(st.tuples(st.sampled_from(ALL_PATHS), HOSTILE), min_size=1, max_size=3),
       args=st.sampled_from(COMMANDS), which=st.sampled_from(["new", "old"]))
def test_mutated_summaries_give_a_result_or_a_one_line_error(tmp_path_factory, mutations, args, which):
    folder = tmp_path_factory.mktemp("fuzz")
    data = copy.deepcopy(BASE)
    for path, value in mutations:
        try:
            _set(data, path, value)
        except (KeyError, IndexError, TypeError):  # an earlier mutation replaced a parent
            pass
    crafted = json.dumps(data)
    intact = json.dumps(BASE)
    old = write(folder, "old.json", crafted if which == "old" else intact)
    new = write(folder, "summary.json", crafted if which == "new" else intact)
    result = run(args, old, new)
    assert_clean(result, old if which == "old" else new)
    if "--format" in args and args[-1] in ("junit", "sarif"):
        assert not any(line.lstrip().startswith("::") for line in result.stdout.splitlines())
