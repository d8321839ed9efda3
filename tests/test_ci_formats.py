"""CI renderings of the gate: GitHub annotations, JUnit XML, SARIF 2.1.0 (official schema)."""

from __future__ import annotations

import json
import re
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner
from gate_runs import check_fixture, expected
from summary_builder import finding, load_issue, make_summary, scale_times

from traceanalyze.cli import cli
from traceanalyze.commands._analyze import known_rules
from traceanalyze.compare.gate import GatePolicy, evaluate
from traceanalyze.output import ci

SARIF_SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text())
EVEN = {0: 100.0, 1: 100.0, 2: 100.0, 3: 100.0}
NASTY = 'kernel <void at::native::f<float>(int, 50%)>\r\nsecond line: a,b & "q"'
NASTY_LINE = " ".join(NASTY.split())  # how a reason line shows it: one line


def _mixed():
    """Findings of every severity, one with a nasty title, one load issue of severity error."""
    return make_summary(EVEN, findings=[
        finding("collective-straggler", "error", [2], title=NASTY),
        finding("memory-creep", "warning", []),
        finding("step-jitter", "info", [0, 1]),
    ], load_issues=[load_issue("error", rank=1), load_issue("info", rank=0)])


# ---- GitHub --------------------------------------------------------------------------------

def _unescape(text: str) -> str:
    for code, char in (("%0D", "\r"), ("%0A", "\n"), ("%3A", ":"), ("%2C", ","), ("%25", "%")):
        text = text.replace(code, char)
    return text


def test_escaping_follows_githubs_rules():
    assert ci.escape_data("50% done\r\nnext: a,b") == "50%25 done%0D%0Anext: a,b"
    assert ci.escape_property("50% done\r\nnext: a,b") == "50%25 done%0D%0Anext%3A a%2Cb"
    assert ci.escape_data("%0A") == "%250A"  # % first, so an existing code is not decoded later


ANNOTATION = re.compile(r"^::(error|warning|notice)(?: title=([^:]*))?::(.*)$")


def test_github_annotations_one_line_each_with_level_per_severity():
    result = evaluate(_mixed(), GatePolicy(fail_on="warning"))
    lines = ci.format_github(result).splitlines()
    parsed = [ANNOTATION.match(line) for line in lines[:-1]]
    assert all(parsed), lines
    levels = {_unescape(m.group(2)): m.group(1) for m in parsed}
    assert levels == {"traceanalyze collective-straggler": "error", "traceanalyze memory-creep": "warning",
                      "traceanalyze step-jitter": "notice", "traceanalyze load-issue": "error"}
    straggler = next(m for m in parsed if "collective-straggler" in m.group(2))
    assert NASTY_LINE in _unescape(straggler.group(3))  # the message survives the round trip
    assert "\n" not in straggler.group(3) and "\r" not in straggler.group(3)
    assert lines[-1] == f"traceanalyze check: FAILED ({len(result.reasons)} reason(s))"
    cost = next(f for f in result.findings if f["rule"] == "collective-straggler")["cost"]
    assert cost["pct_of_step"] is None   # the builder's finding gives ms only
    assert _unescape(straggler.group(3)).endswith(f" (costs {cost['ms_per_step']:.1f} ms/step)")


def test_github_regressions_are_errors():
    old = make_summary(EVEN)
    result = evaluate(scale_times(old, 2.0), GatePolicy(), baseline=old)
    lines = [line for line in ci.format_github(result).splitlines() if line.startswith("::")]
    assert len(lines) == len(result.regressions) > 0
    assert all(line.startswith("::error title=traceanalyze baseline-regression::regression: ") for line in lines)


# ---- JUnit ---------------------------------------------------------------------------------

def _junit(summary, policy, baseline=None, rules=()):
    result = evaluate(summary, policy, baseline)
    return result, ET.fromstring(ci.format_junit(summary, result, rules))


def test_junit_one_testcase_per_rule_failures_at_or_above_fail_on():
    result, root = _junit(_mixed(), GatePolicy(fail_on="warning", ignore=frozenset({"step-jitter"})),
                          rules=["host-sync", "memory-creep"])
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    # every known rule and every rule with a finding, plus the load-issue case
    assert set(cases) == {"collective-straggler", "memory-creep", "step-jitter", "host-sync", "load-issue"}
    failed = {name for name, c in cases.items() if c.find("failure") is not None}
    assert failed == {"collective-straggler", "memory-creep", "load-issue"}
    assert cases["step-jitter"].find("skipped") is not None  # ignored
    assert cases["host-sync"].find("failure") is None and cases["host-sync"].find("skipped") is None
    failure = cases["collective-straggler"].find("failure")
    assert failure.get("type") == "error"
    assert NASTY_LINE in failure.get("message") and NASTY_LINE in failure.text
    assert failure.get("message").startswith("error collective-straggler rank 2: ")
    # counts agree with the cases (the common JUnit schema's tests/failures/skipped attributes)
    assert suite.get("tests") == "5" and suite.get("failures") == "3" and suite.get("skipped") == "1"
    assert root.get("tests") == "5" and root.get("failures") == "3"
    assert result.exit_code == 1


def test_junit_below_fail_on_passes_and_keeps_the_finding_as_output():
    _, root = _junit(make_summary(EVEN, findings=[finding("memory-creep", "warning")]), GatePolicy())
    case = root.find("testsuite/testcase[@name='memory-creep']")
    assert case.find("failure") is None
    assert "memory-creep" in case.find("system-out").text
    assert root.get("failures") == "0"


def test_junit_baseline_suite_one_case_per_metric():
    old = make_summary(EVEN)
    result, root = _junit(scale_times(old, 1.5), GatePolicy(), baseline=old)
    suite = root.find("testsuite[@name='traceanalyze.baseline']")
    cases = suite.findall("testcase")
    assert len(cases) == len(result.compared)
    failed = [c.get("name") for c in cases if c.find("failure") is not None]
    assert sorted(failed) == sorted(r.delta.key for r in result.regressions)
    assert "step_ms.median_rank" in failed
    assert root.get("failures") == str(len(result.reasons))


def test_junit_common_schema_attributes():
    """Structure of the common (Jenkins/Ant) JUnit schema, checked by hand (no XSD validator here)."""
    old = make_summary(EVEN)
    _, root = _junit(scale_times(_mixed(), 1.5), GatePolicy(), baseline=old, rules=["host-sync"])
    for suite in root.iter("testsuite"):
        assert suite.get("name") and suite.get("tests").isdigit()
        for attr in ("failures", "errors", "skipped"):
            assert suite.get(attr).isdigit()
        assert float(suite.get("time")) >= 0
        for case in suite:
            assert case.tag in ("testcase", "properties")
            if case.tag == "testcase":
                assert case.get("name") and case.get("classname")
                for child in case:
                    assert child.tag in ("failure", "skipped", "system-out")
                    if child.tag == "failure":
                        assert child.get("message") and child.get("type")


# ---- SARIF ---------------------------------------------------------------------------------

def _validate(log: dict) -> None:
    jsonschema.Draft4Validator(SARIF_SCHEMA).validate(log)


def test_vendored_schema_rejects_an_invalid_log():
    with pytest.raises(jsonschema.ValidationError):
        _validate({"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}},
                                                  "results": [{"message": {"text": "m"}, "level": "fatal"}]}]})


@pytest.mark.parametrize("case", ["clean", "mixed", "baseline", "absolute-paths"])
def test_sarif_validates_against_the_official_schema(case):
    summary, baseline, docs = make_summary(EVEN), None, {}
    if case in ("mixed", "baseline"):
        summary = _mixed()
        docs = {"collective-straggler": "One rank arrives late at a collective.", "host-sync": "Syncs."}
    if case == "baseline":
        baseline = make_summary(EVEN, findings=[finding("memory-creep", "warning", [])])
        summary = scale_times(summary, 1.4)
    if case == "absolute-paths":
        summary = make_summary(EVEN, findings=[finding("collective-straggler", ranks=[1])])
        summary["ranks"][1]["file"] = "/data/run 7/rank1.pt.trace.json.gz"
    result = evaluate(summary, GatePolicy(fail_on="warning"), baseline)
    log = json.loads(ci.format_sarif(summary, result, docs))
    _validate(log)


def test_sarif_content_rules_levels_properties():
    summary = _mixed()
    baseline = make_summary(EVEN, findings=[finding("memory-creep", "warning", [])])
    result = evaluate(scale_times(summary, 1.5), GatePolicy(fail_on="warning"), baseline)
    log = ci.sarif_log(summary, result, {"host-sync": "Host-device synchronizations inside steps."})
    (run,) = log["runs"]
    rules = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert set(rules) == {"collective-straggler", "memory-creep", "step-jitter", "host-sync",
                          "load-issue", "baseline-regression"}
    for res in run["results"]:
        assert rules[res["ruleIndex"]] == res["ruleId"]
    by_rule = {}
    for res in run["results"]:
        by_rule.setdefault(res["ruleId"], []).append(res)
    levels = {rule: {r["level"] for r in results} for rule, results in by_rule.items()}
    assert levels == {"collective-straggler": {"error"}, "memory-creep": {"warning"},
                      "step-jitter": {"note"}, "load-issue": {"error"}, "baseline-regression": {"error"}}
    straggler = by_rule["collective-straggler"][0]
    assert straggler["message"]["text"] == NASTY
    assert straggler["properties"]["ranks"] == [2] and straggler["properties"]["steps"] == [2, 3, 4, 5]
    assert straggler["properties"]["cost"] == {"ms_per_step": 10.0, "pct_of_step": None}
    assert straggler["baselineState"] == "new"
    assert by_rule["memory-creep"][0]["baselineState"] == "unchanged"
    assert straggler["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == \
        "traces/rank2.pt.trace.json.gz"
    assert len(by_rule["baseline-regression"]) == len(result.regressions)
    assert run["invocations"][0]["exitCode"] == 1


# ---- real runs of the recorded fixtures ------------------------------------------------------


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("check-runs")


@pytest.mark.parametrize("scenario", ["balanced", "compute_straggler", "memory_creep", "small_buckets"])
def test_sarif_of_real_runs_validates_and_carries_the_injected_finding(scenario, runs_dir):
    run = check_fixture(scenario, runs_dir, "--fail-on", "info")
    log = run.sarif
    _validate(log)
    (sarif_run,) = log["runs"]
    rule_ids = [r["id"] for r in sarif_run["tool"]["driver"]["rules"]]
    assert set(known_rules()) <= set(rule_ids)  # the whole rule pack is described
    results = {(r["ruleId"], tuple(r["properties"]["ranks"])) for r in sarif_run["results"]}
    world = run.summary["world_size"]
    for injected in expected(scenario):
        ranks = (injected["rank"],) if injected["rank"] is not None else tuple(range(world))
        assert (injected["rule"], ranks) in results
    assert len(sarif_run["results"]) == len(run.summary["findings"])
    assert sarif_run["invocations"][0]["exitCode"] == run.proc.returncode


def test_junit_of_a_real_run_has_a_case_per_rule_of_the_pack(runs_dir):
    run = check_fixture("rank0_barrier", runs_dir, "--fail-on", "info")
    summary = run.summary
    result = evaluate(summary, GatePolicy())
    root = ET.fromstring(ci.format_junit(summary, result, known_rules()))
    names = [c.get("name") for c in root.iter("testcase")]
    assert sorted(names) == sorted([*known_rules(), "load-issue"])
    failed = [c.get("name") for c in root.iter("testcase") if c.find("failure") is not None]
    assert failed == ["collective-straggler"]
    assert "rank 0" in root.find(".//testcase[@name='collective-straggler']/failure").get("message")


# ---- the CI recipes of the docs (docs/ci.md) run as written -------------------------------------

DOCS = Path(__file__).resolve().parent.parent / "docs" / "ci.md"


def _doc_yaml_blocks() -> list[dict]:
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), re.DOTALL)]


def _doc_commands() -> list[str]:
    """Every `traceanalyze ...` command of the GitHub and GitLab jobs, in order."""
    github, gitlab = _doc_yaml_blocks()
    lines = [step["run"] for step in github["jobs"]["trace-gate"]["steps"] if "run" in step]
    lines += gitlab["trace-gate"]["script"]
    return [" ".join(line.split()).removesuffix(" || true") for line in lines
            if line.strip().startswith("traceanalyze")]


def test_documented_ci_jobs_run_as_written(tmp_path, monkeypatch, runs_dir):
    commands = _doc_commands()
    assert len(commands) == 5  # analyze, check (github), check (sarif), analyze, check (junit)
    baseline = check_fixture("balanced", runs_dir, "--fail-on", "info").summary_path
    (tmp_path / "perf" / "baseline").mkdir(parents=True)
    (tmp_path / "perf" / "baseline" / "summary.json").write_text(baseline.read_text())
    monkeypatch.chdir(tmp_path)
    trace = str(Path(__file__).resolve().parent.parent / "fixtures" / "ddp" / "balanced")
    for command in commands:
        args = shlex.split(command.replace("traces/nightly", trace))[1:]
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 0, (command, res.output)
    _validate(json.loads((tmp_path / "traceanalyze.sarif").read_text()))
    junit = ET.parse(tmp_path / "reports" / "traceanalyze-junit.xml").getroot()
    assert junit.get("failures") == "0" and int(junit.get("tests")) > len(known_rules())
