"""Stage 6: a GateResult (+ its summary) -> CI formats: text, GitHub annotations, JUnit, SARIF.

All four render the same verdict as the exit code: a JUnit failure / a failing reason is
exactly a finding, load issue or regression that made `gate.evaluate` fail.
"""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from traceanalyze.version import __version__
from traceanalyze.compare.gate import GateResult, finding_reason, load_issue_reason
import traceanalyze.escape as escape

FORMATS = ("text", "github", "junit", "sarif")
GITHUB_LEVELS = {"error": "error", "warning": "warning", "info": "notice"}
SARIF_LEVELS = {"error": "error", "warning": "warning", "info": "note"}
SARIF_SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
# pseudo-rules for what is not a finding of a rule
REGRESSION_RULE = "baseline-regression"
LOAD_ISSUE_RULE = "load-issue"
PSEUDO_RULES = {
    REGRESSION_RULE: "A job metric regressed against the baseline summary beyond --max-regression.",
    LOAD_ISSUE_RULE: "A trace file could not be used as it is (truncated, unreadable, ...).",
}


def ci_safe(value):
    """Every string of a summary / result escaped for a CI log (see escape.py)."""
    return escape.deep(value, escape.ci_line)


def _safe_result(result: GateResult) -> GateResult:
    return dataclasses.replace(
        result, reasons=ci_safe(result.reasons), findings=ci_safe(result.findings),
        new_findings=ci_safe(result.new_findings), load_issues=ci_safe(result.load_issues),
        notes=ci_safe(result.notes), load_warnings=ci_safe(result.load_warnings))


# ---- text ------------------------------------------------------------------------------

def format_text(result: GateResult) -> str:
    """One line per failing reason, notes, then the verdict line."""
    result = _safe_result(result)
    lines = list(result.reasons)
    lines += [f"note: {note}" for note in result.notes]
    below = [f for f in result.findings if not f["fails"]]
    if below:
        lines.append(f"note: {len(below)} finding(s) do not fail the gate (below --fail-on "
                     f"{result.policy.fail_on}{' or already in the baseline' if result.baseline_used else ''})")
    verdict = "passed" if result.passed else f"FAILED ({len(result.reasons)} reason(s))"
    if result.passed and result.load_warnings:  # never a bare "passed" over lost data
        verdict += f" with {len(result.load_warnings)} load warning(s)"
    baseline = f", {len(result.compared)} metric(s) compared with the baseline" if result.baseline_used else ""
    lines.append(f"traceanalyze check: {verdict} [fail-on {result.policy.fail_on}{baseline}]")
    return "\n".join(lines) + "\n"


# ---- GitHub Actions workflow commands ----------------------------------------------------

def escape_data(text: str) -> str:
    """Escape a workflow command's message (GitHub's rules: % CR LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a workflow command's property value (% CR LF : ,)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(level: str, message: str, title: str | None = None) -> str:
    props = f" title={escape_property(title)}" if title else ""
    return f"::{level}{props}::{escape_data(message)}"


def format_github(result: GateResult) -> str:
    """`::error` / `::warning` / `::notice` lines for findings, load issues and regressions.

    Messages and titles are escaped by GitHub's own rules (escape_data / escape_property),
    which keep a multi-line title readable in the annotation.
    """
    lines = []
    for f in result.findings:
        known = "" if f["new"] or not result.baseline_used else " (already in the baseline)"
        lines.append(annotation(GITHUB_LEVELS[f["severity"]], finding_reason(f) + _cost(f) + known,
                                title=f"traceanalyze {f['rule']}"))
    lines += [annotation("error", load_issue_reason(i), title=f"traceanalyze {LOAD_ISSUE_RULE}")
              for i in result.load_issues]
    lines += [annotation("error", r.reason(), title=f"traceanalyze {REGRESSION_RULE}")
              for r in result.regressions]
    verdict = "passed" if result.passed else f"FAILED ({len(result.reasons)} reason(s))"
    lines.append(f"traceanalyze check: {verdict}")
    return "\n".join(lines) + "\n"


def _cost(finding: dict) -> str:
    cost = finding.get("cost") or {}
    parts = []
    if cost.get("ms_per_step") is not None:
        parts.append(f"costs {cost['ms_per_step']:.1f} ms/step")
    if cost.get("pct_of_step") is not None:
        parts.append(f"{cost['pct_of_step']:.0f}% of step")
    return f" ({', '.join(parts)})" if parts else ""


# ---- JUnit XML ---------------------------------------------------------------------------

def format_junit(summary: dict, result: GateResult, rule_ids=()) -> str:
    """JUnit XML: one testcase per rule (+ load issues, + one per baseline metric)."""
    summary, result, rule_ids = ci_safe(summary), _safe_result(result), ci_safe(list(rule_ids))
    rules = sorted(set(rule_ids) | {f["rule"] for f in summary.get("findings") or []})
    suites = [_rules_suite(summary, result, rules)]
    if result.baseline_used:
        suites.append(_baseline_suite(result))
    root = ET.Element("testsuites", name="traceanalyze check",
                      tests=str(sum(int(s.get("tests")) for s in suites)),
                      failures=str(sum(int(s.get("failures")) for s in suites)),
                      errors="0", time="0")
    root.extend(suites)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _suite(name: str, cases: list[ET.Element], summary_dir: str | None = None) -> ET.Element:
    failures = sum(1 for c in cases if c.find("failure") is not None)
    skipped = sum(1 for c in cases if c.find("skipped") is not None)
    suite = ET.Element("testsuite", name=name, tests=str(len(cases)), failures=str(failures),
                       errors="0", skipped=str(skipped), time="0")
    if summary_dir:
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="trace_dir", value=summary_dir)
    suite.extend(cases)
    return suite


def _case(classname: str, name: str) -> ET.Element:
    return ET.Element("testcase", classname=classname, name=name, time="0")


def _rules_suite(summary: dict, result: GateResult, rules: list[str]) -> ET.Element:
    by_rule: dict[str, list[dict]] = {}
    for f in result.findings:
        by_rule.setdefault(f["rule"], []).append(f)
    cases = []
    for rule in rules:
        case = _case("traceanalyze.rules", rule)
        found = by_rule.get(rule, [])
        failing = [f for f in found if f["fails"]]
        if not result.policy.selects(rule):
            ET.SubElement(case, "skipped", message="not selected (--select / --ignore)")
        elif failing:
            failure = ET.SubElement(case, "failure", message=finding_reason(failing[0]),
                                    type=failing[0]["severity"])
            failure.text = "\n".join(finding_reason(f) + _cost(f) for f in failing)
        passing = [f for f in found if not f["fails"]]
        if passing:
            ET.SubElement(case, "system-out").text = "\n".join(
                "does not fail the gate: " + finding_reason(f) for f in passing)
        cases.append(case)
    load = _case("traceanalyze.load", LOAD_ISSUE_RULE)
    if result.load_issues:
        failure = ET.SubElement(load, "failure", message=load_issue_reason(result.load_issues[0]),
                                type="error")
        failure.text = "\n".join(load_issue_reason(i) for i in result.load_issues)
    cases.append(load)
    return _suite("traceanalyze.rules", cases, str(summary.get("trace_dir") or ""))


def _baseline_suite(result: GateResult) -> ET.Element:
    regressed = {r.delta.key: r for r in result.regressions}
    cases = []
    for delta in result.compared:
        case = _case("traceanalyze.baseline", delta.key)
        if delta.key in regressed:
            reason = regressed[delta.key].reason()
            ET.SubElement(case, "failure", message=reason, type=REGRESSION_RULE).text = reason
        cases.append(case)
    return _suite("traceanalyze.baseline", cases)


# ---- SARIF 2.1.0 ---------------------------------------------------------------------------

def format_sarif(summary: dict, result: GateResult, rule_docs: dict[str, str] | None = None) -> str:
    return json.dumps(ci_safe(sarif_log(summary, result, rule_docs)), indent=2) + "\n"


def sarif_log(summary: dict, result: GateResult, rule_docs: dict[str, str] | None = None) -> dict:
    """A SARIF 2.1.0 log with one run: rules in tool.driver.rules, one result per item."""
    docs = {**(rule_docs or {})}
    used = {f["rule"] for f in result.findings}
    if result.regressions:
        used.add(REGRESSION_RULE)
    if result.load_issues:
        used.add(LOAD_ISSUE_RULE)
    rule_ids = sorted(used | docs.keys())
    index = {rule: i for i, rule in enumerate(rule_ids)}
    results = [_finding_result(summary, f, index, result.baseline_used) for f in result.findings]
    results += [_load_issue_result(summary, i, index) for i in result.load_issues]
    results += [_regression_result(summary, r, index) for r in result.regressions]
    run = {
        "tool": {"driver": {
            "name": "traceanalyze", "version": __version__, "semanticVersion": __version__,
            "rules": [_rule_descriptor(rule, docs) for rule in rule_ids],
        }},
        "invocations": [{"executionSuccessful": True, "exitCode": result.exit_code}],
        "results": results,
        "properties": {"trace_dir": summary.get("trace_dir"), "world_size": summary.get("world_size"),
                       "gate": {"passed": result.passed, "fail_on": result.policy.fail_on,
                                "reasons": result.reasons}},
    }
    return {"$schema": SARIF_SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def _rule_descriptor(rule: str, docs: dict[str, str]) -> dict:
    text = docs.get(rule) or PSEUDO_RULES.get(rule) or f"traceanalyze rule {rule}"
    return {"id": rule, "name": rule, "shortDescription": {"text": text}}


def artifact_uri(path: str) -> str:
    """A trace file path as a SARIF uri (a relative reference, or file:// when absolute)."""
    p = Path(path)
    if p.is_absolute():
        return p.as_uri()
    return quote(PurePosixPath(*p.parts).as_posix())


def _locations(summary: dict, ranks: list[int]) -> list[dict]:
    files = {int(r["rank"]): r.get("file") for r in summary.get("ranks") or []}
    target = next((files[r] for r in ranks if files.get(r)), None) or summary.get("trace_dir") or "."
    location = {"physicalLocation": {"artifactLocation": {"uri": artifact_uri(str(target))}}}
    if ranks:
        location["logicalLocations"] = [{"name": f"rank {r}", "kind": "rank"} for r in ranks]
    return [location]


def _finding_result(summary: dict, f: dict, index: dict, baseline_used: bool) -> dict:
    ranks = list(f.get("ranks") or [])
    out = {
        "ruleId": f["rule"], "ruleIndex": index[f["rule"]], "level": SARIF_LEVELS[f["severity"]],
        "message": {"text": f.get("title") or f["rule"]},
        "locations": _locations(summary, ranks),
        "partialFingerprints": {"traceanalyzeFinding/v1": f"{f['rule']}:{','.join(map(str, sorted(ranks)))}"},
        "properties": {"severity": f["severity"], "ranks": ranks, "steps": list(f.get("steps") or []),
                       "cost": f.get("cost"), "new": f["new"], "failsGate": f["fails"]},
    }
    if baseline_used:
        out["baselineState"] = "new" if f["new"] else "unchanged"
    return out


def _load_issue_result(summary: dict, issue: dict, index: dict) -> dict:
    ranks = [issue["rank"]] if issue.get("rank") is not None else []
    return {"ruleId": LOAD_ISSUE_RULE, "ruleIndex": index[LOAD_ISSUE_RULE], "level": "error",
            "message": {"text": load_issue_reason(issue)}, "locations": _locations(summary, ranks),
            "properties": {"kind": issue.get("kind"), "ranks": ranks}}


def _regression_result(summary: dict, regression, index: dict) -> dict:
    d = regression.delta
    return {"ruleId": REGRESSION_RULE, "ruleIndex": index[REGRESSION_RULE], "level": "error",
            "message": {"text": regression.reason()}, "locations": _locations(summary, []),
            "properties": {"metric": d.key, "unit": d.unit, "old": d.old, "new": d.new,
                           "change": d.change, "change_pct": d.change_pct, "limit": regression.limit}}
