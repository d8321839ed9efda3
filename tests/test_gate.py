"""The CI gate: policy (fail-on, select/ignore), baseline regressions, new findings, exit codes.

Summaries are built from numbers the test controls (tests/summary_builder.py), so every
expected percentage below is arithmetic on those numbers, not read back from the gate.
The last section runs the real `traceanalyze check` on the recorded fixtures/ddp runs and
derives what it must say from their expected.json and summary.json.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner
from gate_runs import FIXTURES, check_fixture, expected
from summary_builder import MiB, finding, load_issue, make_summary, scale_times

from traceanalyze.cli import cli
from traceanalyze.errors import TraceanalyzeError
from traceanalyze.compare.gate import GatePolicy, evaluate, parse_rule_list

SUMMARY_SCHEMA = Path(__file__).resolve().parent.parent / "traceanalyze" / "summary" / "summary.schema.json"
EVEN = {0: 100.0, 1: 100.0, 2: 100.0, 3: 100.0}


def test_builder_follows_the_summary_contract():
    schema = json.loads(SUMMARY_SCHEMA.read_text())
    summary = make_summary(EVEN, findings=[finding("collective-straggler", ranks=[2])],
                           load_issues=[load_issue()], gpu_idle_pct={0: 5.0, 1: 5.0, 2: 5.0, 3: 5.0})
    jsonschema.Draft202012Validator(schema).validate(summary)
    jsonschema.Draft202012Validator(schema).validate(scale_times(summary, 1.3))


# ---- policy without a baseline ----------------------------------------------------------

def test_no_findings_passes():
    result = evaluate(make_summary(EVEN))
    assert (result.exit_code, result.reasons) == (0, [])


def test_error_finding_fails_by_default_naming_rule_and_rank():
    s = make_summary(EVEN, findings=[finding("collective-straggler", "error", [2], "rank 2 is late")])
    result = evaluate(s)
    assert result.exit_code == 1
    assert result.reasons == ["error collective-straggler rank 2: rank 2 is late"]


@pytest.mark.parametrize("severity, fail_on, fails", [
    ("warning", "error", False), ("warning", "warning", True), ("warning", "info", True),
    ("info", "warning", False), ("info", "info", True), ("error", "warning", True),
])
def test_fail_on_threshold(severity, fail_on, fails):
    s = make_summary(EVEN, findings=[finding("step-jitter", severity)])
    assert evaluate(s, GatePolicy(fail_on=fail_on)).exit_code == (1 if fails else 0)


def test_select_and_ignore():
    s = make_summary(EVEN, findings=[finding("collective-straggler", ranks=[1]), finding("memory-creep")])
    assert evaluate(s, GatePolicy(ignore=parse_rule_list("collective-straggler, memory-creep"))).exit_code == 0
    only = evaluate(s, GatePolicy(select=parse_rule_list("memory-creep")))
    assert [f["rule"] for f in only.findings] == ["memory-creep"]
    assert only.reasons == ["error memory-creep: memory-creep on ranks []"]
    # ignore wins over select
    assert evaluate(s, GatePolicy(select=frozenset({"memory-creep"}),
                                  ignore=frozenset({"memory-creep"}))).exit_code == 0


def test_load_issue_of_severity_error_fails_warning_does_not():
    assert evaluate(make_summary(EVEN, load_issues=[load_issue("warning")])).exit_code == 0
    result = evaluate(make_summary(EVEN, load_issues=[load_issue("error", rank=3)]))
    assert result.exit_code == 1
    assert result.reasons[0].startswith("load issue truncated (rank 3, rank3.pt.trace.json)")


def test_bad_policy_values_are_input_errors():
    with pytest.raises(TraceanalyzeError):
        GatePolicy(fail_on="fatal")
    with pytest.raises(TraceanalyzeError):
        GatePolicy(max_regression_pct=-1)


# ---- baseline: new findings --------------------------------------------------------------

def test_same_run_as_baseline_passes_even_with_findings():
    s = make_summary(EVEN, findings=[finding("collective-straggler", ranks=[2])])
    result = evaluate(s, GatePolicy(), baseline=s)
    assert result.exit_code == 0
    assert result.new_findings == [] and result.findings[0]["new"] is False
    assert result.regressions == [] and len(result.compared) > 0


def test_finding_on_other_ranks_than_baseline_is_new_and_fails():
    old = make_summary(EVEN, findings=[finding("collective-straggler", ranks=[2])])
    new = make_summary(EVEN, findings=[finding("collective-straggler", ranks=[1], title="rank 1 late")])
    result = evaluate(new, GatePolicy(), baseline=old)
    assert result.exit_code == 1
    assert [f["ranks"] for f in result.new_findings] == [[1]]
    assert result.reasons == ["error collective-straggler rank 1: rank 1 late [new]"]


def test_rule_absent_from_baseline_is_new():
    old = make_summary(EVEN)
    new = make_summary(EVEN, findings=[finding("memory-creep", "warning")])
    result = evaluate(new, GatePolicy(fail_on="warning"), baseline=old)
    assert result.findings[0]["new"] is True and result.exit_code == 1
    # below fail-on: marked new, but the gate holds
    assert evaluate(new, GatePolicy(), baseline=old).exit_code == 0


# ---- baseline: regressions ----------------------------------------------------------------

@pytest.mark.parametrize("factor, max_pct, fails", [
    (1.25, 10, True), (1.05, 10, False), (1.25, 30, False), (1.25, 24, True), (0.5, 10, False),
])
def test_scaled_step_times(factor, max_pct, fails):
    old = make_summary({0: 100.0, 1: 102.0, 2: 98.0, 3: 100.0})
    result = evaluate(scale_times(old, factor), GatePolicy(max_regression_pct=max_pct), baseline=old)
    assert result.exit_code == (1 if fails else 0)
    if fails:
        grown = f"{100 * (factor - 1):.1f}%"  # every time grew by the same factor
        step = [r for r in result.reasons if r.startswith("regression: own step time, median rank")]
        assert step == [(f"regression: own step time, median rank 100.0 ms -> {100 * factor:.1f} ms "
                         f"(+{grown}; limit +{max_pct}% and >= 1 ms)")]
        # every time metric moved by the same %; no pct metric moved (rank skew unchanged)
        assert all(f"(+{grown};" in r for r in result.reasons)
        assert not any("rank skew" in r for r in result.reasons)


def test_tiny_absolute_times_do_not_count_as_regressions():
    phases = {r: {"data_wait": 0.1, "h2d": 0.0, "forward": 30.0, "backward": 50.0, "optimizer": 5.0,
                  "comm_exposed": 10.0, "other": 4.9} for r in EVEN}
    old = make_summary(EVEN, phases=phases)
    doubled = {r: {**p, "data_wait": 0.2, "other": 4.8} for r, p in phases.items()}  # +100%, +0.1 ms
    assert evaluate(make_summary(EVEN, phases=doubled), GatePolicy(), baseline=old).exit_code == 0
    # from 0.1 ms to 3.1 ms: +3 ms is above the 1 ms floor and +3000%
    grown = {r: {**p, "data_wait": 3.1, "other": 1.9} for r, p in phases.items()}
    result = evaluate(make_summary(EVEN, phases=grown), GatePolicy(), baseline=old)
    assert result.exit_code == 1
    assert {r.delta.key for r in result.regressions} == {"phase_ms.data_wait.median",
                                                          "phase_ms.data_wait.worst"}


def test_phase_on_one_rank_is_caught_by_the_max_over_ranks():
    base = {p: 100.0 * f for p, f in {"data_wait": 0.05, "h2d": 0.0, "forward": 0.25, "backward": 0.40,
                                          "optimizer": 0.05, "comm_exposed": 0.20, "other": 0.05}.items()}
    old = make_summary(EVEN, phases={r: dict(base) for r in EVEN})
    slow = {r: dict(base) for r in EVEN}
    slow[1] = {**base, "forward": 40.0, "other": 0.0}  # forward 25 -> 40 ms on rank 1 only (+60%)
    result = evaluate(make_summary(EVEN, phases=slow), GatePolicy(), baseline=old)
    assert [r.delta.key for r in result.regressions] == ["phase_ms.forward.worst"]
    assert "(+60.0%;" in result.reasons[0]


def test_rank_skew_is_compared_in_points_of_step_time():
    old = make_summary({0: 100.0, 1: 100.0, 2: 100.0, 3: 101.0})  # skew 1 %
    new = make_summary({0: 100.0, 1: 100.0, 2: 100.0, 3: 115.0})  # skew 15 %: +14 points
    result = evaluate(new, GatePolicy(max_regression_pct=20), baseline=old)
    assert result.exit_code == 0  # worst rank +13.9 %, skew +14 points: both under 20
    result = evaluate(new, GatePolicy(max_regression_pct=10), baseline=old)
    keys = {r.delta.key for r in result.regressions}
    assert {"rank_skew_pct", "step_ms.worst_rank"} <= keys and "step_ms.median_rank" not in keys
    skew = next(r for r in result.regressions if r.delta.key == "rank_skew_pct")
    assert skew.delta.old == pytest.approx(1.0) and skew.delta.new == pytest.approx(15.0)


def test_peak_memory_has_a_one_mib_floor():
    old = make_summary(EVEN, peak_bytes={r: 1 * MiB for r in EVEN})
    half_mib_more = make_summary(EVEN, peak_bytes={r: MiB + MiB // 2 for r in EVEN})  # +50 %, 0.5 MiB
    assert evaluate(half_mib_more, GatePolicy(), baseline=old).exit_code == 0
    old = make_summary(EVEN, peak_bytes={r: 10 * MiB for r in EVEN})
    new = make_summary(EVEN, peak_bytes={0: 10 * MiB, 1: 10 * MiB, 2: 12 * MiB, 3: 10 * MiB})
    result = evaluate(new, GatePolicy(), baseline=old)
    assert [r.reason() for r in result.regressions] == [
        "regression: peak memory (max over ranks) 10.0 MiB -> 12.0 MiB (+20.0%; limit +10% and >= 1.0 MiB)"]


def test_gpu_idle_in_points_and_null_is_not_compared():
    def idle(pct):
        return {r: pct for r in EVEN}
    old = make_summary(EVEN, gpu_idle_pct=idle(5.0))
    assert evaluate(make_summary(EVEN, gpu_idle_pct=idle(12.0)), GatePolicy(), baseline=old).exit_code == 0
    result = evaluate(make_summary(EVEN, gpu_idle_pct=idle(20.0)), GatePolicy(), baseline=old)
    assert {r.delta.key for r in result.regressions} == {"gpu_idle_pct.median", "gpu_idle_pct.worst"}
    cpu_only = evaluate(make_summary(EVEN), GatePolicy(), baseline=old)
    assert not any(d.key.startswith("gpu_idle") for d in cpu_only.compared)


# ---- the command line: exit codes 0 / 1 / 2 ----------------------------------------------

def _write(tmp_path: Path, name: str, summary: dict) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(summary))
    return path


def _check(*args) -> object:
    return CliRunner().invoke(cli, ["check", *map(str, args)])


def test_cli_exit_0_when_the_policy_holds(tmp_path):
    path = _write(tmp_path, "summary.json", make_summary(EVEN, findings=[finding("step-jitter", "warning")]))
    res = _check(path)
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[-1].startswith("traceanalyze check: passed")


def test_cli_exit_1_prints_one_line_per_reason(tmp_path):
    old = make_summary(EVEN)
    new = scale_times(make_summary(EVEN, findings=[finding("collective-straggler", ranks=[3], title="late")]), 1.5)
    res = _check(_write(tmp_path, "new.json", new), "--baseline", _write(tmp_path, "old.json", old))
    assert res.exit_code == 1
    lines = res.output.splitlines()
    assert lines[0] == "error collective-straggler rank 3: late [new]"
    assert "regression: step time, wall clock (median over ranks) 100.0 ms -> 150.0 ms (+50.0%; limit +10% and >= 1 ms)" in lines
    assert lines[-1].startswith("traceanalyze check: FAILED")
    # the same run as its own baseline passes
    assert _check(_write(tmp_path, "again.json", new), "--baseline", tmp_path / "new.json").exit_code == 0


def test_cli_options_change_the_verdict(tmp_path):
    path = _write(tmp_path, "s.json", make_summary(EVEN, findings=[finding("memory-creep", "warning")]))
    assert _check(path, "--fail-on", "warning").exit_code == 1
    assert _check(path, "--fail-on", "warning", "--ignore", "memory-creep").exit_code == 0
    assert _check(path, "--fail-on", "warning", "--select", "step-jitter,host-sync").exit_code == 0
    old = _write(tmp_path, "old.json", make_summary(EVEN))
    grown = _write(tmp_path, "grown.json", scale_times(make_summary(EVEN), 1.2))
    assert _check(grown, "--baseline", old).exit_code == 1
    assert _check(grown, "--baseline", old, "--max-regression", "25").exit_code == 0


@pytest.mark.parametrize("make_args", [
    lambda d: [d / "missing.json"],
    lambda d: [_text(d / "summary.json", "{not json")],
    lambda d: [_text(d / "summary.json", '{"schema": "other/9"}')],
    lambda d: [_text(d / "summary.json", json.dumps({**make_summary(EVEN), "findings": [{"title": "x"}]}))],
    lambda d: [_ok(d), "--baseline", d / "missing.json"],
    lambda d: [_ok(d), "--fail-on", "fatal"],
    lambda d: [_ok(d), "--max-regression", "-5"],
    lambda d: [_ok(d), "--format", "xml"],
], ids=["missing-file", "broken-json", "other-schema", "finding-without-rule", "missing-baseline",
        "bad-fail-on", "negative-max-regression", "unknown-format"])
def test_cli_exit_2_on_usage_or_input_errors(tmp_path, make_args):
    res = _check(*make_args(tmp_path))
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output


def _text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _ok(tmp_path: Path) -> Path:
    return _write(tmp_path, "ok.json", make_summary(EVEN))


def test_cli_output_file_gets_the_format_and_stdout_the_reasons(tmp_path):
    path = _write(tmp_path, "s.json", make_summary(EVEN, findings=[finding("collective-straggler", ranks=[0])]))
    out = tmp_path / "ci" / "report.sarif"
    res = _check(path, "--format", "sarif", "--output", out)
    assert res.exit_code == 1
    assert json.loads(out.read_text())["version"] == "2.1.0"
    assert res.output.splitlines()[0].startswith("error collective-straggler rank 0")


def test_reasons_are_one_line_even_when_the_trace_text_is_not():
    s = make_summary(EVEN, findings=[finding("collective-straggler", ranks=[2], title="late\nat <all_reduce>\r\n")],
                     load_issues=[load_issue("error", rank=0) | {"message": "cut\nhere"}])
    result = evaluate(s)
    assert result.reasons == ["error collective-straggler rank 2: late at <all_reduce>",
                              "load issue truncated (rank 0, rank0.pt.trace.json): cut here"]


def test_config_file_sets_the_policy_and_options_override_it(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.traceanalyze]\nfail_on = "warning"\nignore = ["step-jitter"]\nmax_regression_pct = 50\n')
    monkeypatch.chdir(tmp_path)
    creep = _write(tmp_path, "creep.json", make_summary(EVEN, findings=[finding("memory-creep", "warning")]))
    jitter = _write(tmp_path, "jitter.json", make_summary(EVEN, findings=[finding("step-jitter", "error")]))
    assert _check(creep).exit_code == 1                         # fail_on = "warning" from the file
    assert _check(creep, "--fail-on", "error").exit_code == 0   # the option wins
    assert _check(jitter).exit_code == 0                        # ignored in the file
    assert _check(jitter, "--ignore", "memory-creep").exit_code == 1  # the option replaces the list
    old = _write(tmp_path, "old.json", make_summary(EVEN))
    grown = _write(tmp_path, "grown.json", scale_times(make_summary(EVEN), 1.3))
    assert _check(grown, "--baseline", old).exit_code == 0      # +30 % < 50 % from the file
    assert _check(grown, "--baseline", old, "--max-regression", "20").exit_code == 1


def test_unknown_rule_ids_are_usage_errors(tmp_path):
    path = _write(tmp_path, "s.json", make_summary(EVEN))
    res = _check(path, "--ignore", "colective-straggler")
    assert res.exit_code == 2 and "unknown rule id(s) in --select/--ignore: colective-straggler" in res.output


# ---- the recorded 4-rank gloo DDP fixtures, through the real command line ----------------

SEVERITY_ORDER = ["info", "warning", "error"]
# docs/ci.md: "--fail-on (default error): findings of this severity or worse fail the gate"
FAILING_SEVERITIES = {"info": {"info", "warning", "error"}, "warning": {"warning", "error"}, "error": {"error"}}
PATHOLOGICAL = sorted(p.parent.name for p in FIXTURES.glob("*/expected.json") if expected(p.parent.name))
HEALTHY = ["balanced", "find_unused_false", "grad_accum_nosync", "scaling_ws4"]


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("check-runs")


def _rank_text(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {','.join(map(str, ranks))}"


@pytest.mark.parametrize("scenario", HEALTHY)
def test_check_passes_on_healthy_runs_at_every_level(scenario, runs_dir):
    run = check_fixture(scenario, runs_dir, "--fail-on", "info")
    assert run.proc.returncode == 0, run.proc.stdout + run.proc.stderr
    assert run.reasons == []
    assert run.proc.stdout.splitlines()[-1] == "traceanalyze check: passed [fail-on info]"


@pytest.mark.parametrize("scenario, injected", [
    (s, inj) for s in PATHOLOGICAL for inj in expected(s)], ids=lambda v: v if isinstance(v, str) else v["rule"])
def test_check_fails_on_each_pathological_run_naming_rule_and_rank(scenario, injected, runs_dir):
    run = check_fixture(scenario, runs_dir, "--fail-on", "info")
    assert run.proc.returncode == 1, run.proc.stdout + run.proc.stderr
    loaded = [r["rank"] for r in run.summary["ranks"]]  # a job-wide finding names every loaded rank
    ranks = [injected["rank"]] if injected.get("rank") is not None else loaded
    prefix = f"{injected['rule']} {_rank_text(ranks)}: "
    assert any(prefix in reason for reason in run.reasons), (prefix, run.reasons)


@pytest.mark.parametrize("scenario", PATHOLOGICAL + HEALTHY)
@pytest.mark.parametrize("fail_on", SEVERITY_ORDER)
def test_exit_code_matches_the_worst_finding_severity(scenario, fail_on, runs_dir):
    """At each --fail-on level the gate fails exactly when some finding is at or above it."""
    summary_path = check_fixture(scenario, runs_dir, "--fail-on", "info").summary_path
    findings = json.loads(summary_path.read_text())["findings"]
    counted = [f for f in findings if f["severity"] in FAILING_SEVERITIES[fail_on]]
    res = _check(summary_path, "--fail-on", fail_on)
    # one reason line per counted finding (its severity, rule and title), and exit 1 exactly then
    reasons = [line for line in res.output.splitlines() if not line.startswith(("traceanalyze", "note"))]
    assert len(reasons) == len(counted), (reasons, counted)
    for f in counted:
        assert any(r.startswith(f"{f['severity']} {f['rule']} ") and r.endswith(f["title"]) for r in reasons), f
    assert res.exit_code == (1 if counted else 0), res.output


def test_real_run_against_itself_as_baseline_passes(runs_dir):
    path = check_fixture("compute_straggler", runs_dir, "--fail-on", "info").summary_path
    assert _check(path).exit_code == 1  # it has an error finding...
    res = _check(path, "--baseline", path)
    assert res.exit_code == 0, res.output  # ...which the baseline already has


def _wall_ms(summary: dict) -> float:
    return statistics.median(r["metrics"]["step_time_ms"]["median"] for r in summary["ranks"])


def test_straggler_run_against_balanced_baseline(runs_dir):
    old = check_fixture("balanced", runs_dir, "--fail-on", "info")
    new = check_fixture("compute_straggler", runs_dir, "--fail-on", "info")
    res = _check(new.summary_path, "--baseline", old.summary_path)
    assert res.exit_code == 1
    lines = res.output.splitlines()
    straggler = next(f for f in new.summary["findings"] if f["rule"] == "collective-straggler")
    assert straggler["ranks"] == [1]
    assert f"error collective-straggler rank 1: {straggler['title']} [new]" in lines
    # the wall-clock step grows: expected % from the two summaries' per-rank step times
    before, after = _wall_ms(old.summary), _wall_ms(new.summary)
    pct = 100 * (after - before) / before
    assert pct > 10
    assert (f"regression: step time, wall clock (median over ranks) {before:,.1f} ms -> {after:,.1f} ms "
            f"(+{pct:.1f}%; limit +10% and >= 1 ms)") in lines
    # rank 1 holds the job back: the skew between worst and median rank grows by many points
    def skew(s):
        return 100 * (s["steps"]["worst_rank_step_ms"] / s["steps"]["median_rank_step_ms"] - 1)
    assert skew(new.summary) - skew(old.summary) > 10
    assert any(line.startswith("regression: rank skew") for line in lines)
    # and a generous threshold lets the metrics through, not the new error finding
    res = _check(new.summary_path, "--baseline", old.summary_path, "--max-regression", "100000")
    assert [line for line in res.output.splitlines() if not line.startswith(("traceanalyze", "note"))] == [
        f"error collective-straggler rank 1: {straggler['title']} [new]"]


def test_straggler_moving_to_another_rank_is_a_new_finding(runs_dir):
    old = check_fixture("input_straggler", runs_dir, "--fail-on", "info").summary_path
    new = check_fixture("compute_straggler", runs_dir, "--fail-on", "info").summary_path
    res = _check(new, "--baseline", old, "--max-regression", "100000")
    assert res.exit_code == 1
    assert res.output.splitlines()[0].startswith("error collective-straggler rank 1: ")


@pytest.mark.parametrize("factor, fails", [(1.3, True), (1.05, False)])
def test_injected_slowdown_of_a_real_run(runs_dir, tmp_path, factor, fails):
    base = check_fixture("balanced", runs_dir, "--fail-on", "info").summary
    old = _write(tmp_path, "old.json", base)
    new = _write(tmp_path, "new.json", scale_times(base, factor))
    res = _check(new, "--baseline", old)
    assert res.exit_code == (1 if fails else 0), res.output
    regressions = [line for line in res.output.splitlines() if line.startswith("regression: ")]
    if fails:
        # every time metric over the 1 ms floor grew by exactly (factor - 1)
        assert regressions and all(f"(+{100 * (factor - 1):.1f}%;" in line for line in regressions)
        assert any("step time, wall clock" in line for line in regressions)
    else:
        assert regressions == []
