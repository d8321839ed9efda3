"""Meta-tests on every rule of the pack (ruff/sqlfluff style) and on how users configure rules.

A rule must explain itself (what / why / example / fix / tuning), give every threshold a unit,
use exactly the parameters it declares, run on an empty database, come with pass and fail
cases, and be explained by `traceanalyze explain`.
"""

from __future__ import annotations

import json
from pathlib import Path
import subprocess
import sys

import duckdb
import pytest
import yaml
from conftest import REAL_TRACES

from traceanalyze import db as tracedb
from traceanalyze.diagnosis.config import load_config
from traceanalyze.errors import TraceanalyzeError
from traceanalyze.diagnosis.ruleset import (
    DOC_SECTIONS,
    REQUIRED_COLUMNS,
    UNITS,
    builtin_rules_dir,
    load_rules,
    run_rule,
    sql_param_names,
)

CONTRACT_IDS = {"gpu-idle-gaps", "allreduce-not-overlapped", "collective-straggler", "dataloader-stall",
                "launch-bound-kernels", "pageable-memcpy", "comm-dominated", "step-jitter", "memory-creep",
                "host-sync"}
RULES = load_rules()
RULE_IDS = [r.id for r in RULES]


def _cli(*args: str):
    return subprocess.run([sys.executable, "-m", "traceanalyze", *args], check=False,
                          capture_output=True, text=True)


@pytest.fixture(scope="module")
def empty_db():
    """A trace database with every table but no events: rules must still run on it."""
    con = duckdb.connect()
    tracedb.create_schema(con)
    tracedb.create_macros(con)
    tracedb.build_tables(con)
    yield con
    con.close()


def test_the_contract_rule_ids_exist():
    assert CONTRACT_IDS <= set(RULE_IDS)


def test_rule_ids_are_unique_and_match_their_folder():
    assert len(RULE_IDS) == len(set(RULE_IDS))
    for rule in RULES:
        assert rule.folder.name == rule.id


@pytest.mark.parametrize("rule", RULES, ids=RULE_IDS)
def test_rule_documents_itself(rule):
    for section in DOC_SECTIONS:
        assert len(rule.docs.get(section, "")) > 40, f"{rule.id}: docs.{section} is missing or too short"
    assert rule.title and rule.message and rule.advice


@pytest.mark.parametrize("rule", RULES, ids=RULE_IDS)
def test_every_parameter_has_a_unit_in_its_name_and_help(rule):
    for param in rule.params.values():
        assert param.unit in UNITS, f"{rule.id}.{param.name}: unknown unit {param.unit!r}"
        assert param.name.endswith(UNITS[param.unit]), f"{rule.id}.{param.name} should end with {UNITS[param.unit]}"
        assert len(param.help) > 15
        assert isinstance(param.default, (int, float)) and not isinstance(param.default, bool)


@pytest.mark.parametrize("rule", [r for r in RULES if r.detect_sql], ids=[r.id for r in RULES if r.detect_sql])
def test_detect_sql_uses_exactly_the_declared_parameters(rule):
    assert sql_param_names(rule.detect_sql) == set(rule.params)


@pytest.mark.parametrize("rule", [r for r in RULES if r.detect_sql], ids=[r.id for r in RULES if r.detect_sql])
def test_detect_sql_runs_on_an_empty_database_and_returns_the_contract_columns(rule, empty_db):
    names = sql_param_names(rule.detect_sql)
    cur = empty_db.execute(rule.detect_sql, {n: rule.params[n].default for n in names})
    columns = {d[0] for d in cur.description}
    assert cur.fetchall() == []
    assert set(REQUIRED_COLUMNS) <= columns
    fields = set(_template_fields(rule.message))
    for advice in ([rule.advice] if isinstance(rule.advice, str) else rule.advice.values()):
        fields |= set(_template_fields(advice))
    assert fields <= columns | set(rule.params), f"{rule.id}: templates use unknown fields"
    if rule.evidence_sql:
        assert sql_param_names(rule.evidence_sql) <= columns | set(rule.params)


def _template_fields(template: str) -> list[str]:
    import string

    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


def test_rules_needing_python_are_the_exception():
    assert len([r for r in RULES if r.detect_py]) <= 2, [r.id for r in RULES if r.detect_py]


@pytest.mark.parametrize("rule", RULES, ids=RULE_IDS)
def test_rule_has_pass_and_fail_cases(rule):
    """At least one case where the rule stays silent (pass_*) and one where it reports (any other name)."""
    path = rule.folder / "cases.yaml"
    assert path.is_file(), f"{rule.id}: no cases.yaml"
    data = yaml.safe_load(path.read_text())
    assert data["rule"] == rule.id
    for name, case in data["cases"].items():
        assert name.startswith("pass_") == (case["expect"] == []), f"{rule.id}::{name}: pass_* iff expect: []"
    silent = [n for n, c in data["cases"].items() if c["expect"] == []]
    reporting = [n for n, c in data["cases"].items() if c["expect"]]
    assert silent and reporting, f"{rule.id}: needs cases that pass and cases that report"


@pytest.mark.parametrize("rule_id", sorted(CONTRACT_IDS))
def test_explain_prints_the_docs_and_every_parameter(rule_id):
    rule = {r.id: r for r in RULES}[rule_id]
    result = _cli("explain", rule_id)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    for heading in ("What it does", "Why is this bad?", "Example", "What to do", "Parameters"):
        assert heading in text
    assert " ".join(rule.docs["why"].split())[:60] in text
    for param in rule.params.values():
        assert f"{param.name} = {param.default} ({param.unit})" in text


def test_explain_unknown_rule_is_a_usage_error():
    result = _cli("explain", "no-such-rule")
    assert result.returncode == 2
    assert "unknown rule" in result.stderr and "collective-straggler" in result.stderr


def test_rules_command_lists_every_rule_with_parameters():
    result = _cli("rules", "--format", "json")
    assert result.returncode == 0, result.stderr
    listed = {r["id"]: r for r in json.loads(result.stdout)}
    assert set(listed) == set(RULE_IDS)
    assert listed["collective-straggler"]["params"]["min_late_ms"]["unit"] == "ms"


def test_builtin_rules_dir_is_the_checkout_rules_folder_in_a_source_tree():
    assert (builtin_rules_dir() / "collective-straggler" / "rule.yaml").is_file()


def test_the_packaged_rule_pack_links_every_file_of_rules():
    """traceanalyze/_builtin_rules (what the wheel ships) mirrors rules/ file for file
    (scripts/link-rules.sh makes the links): a rule added to rules/ is never missing from an install."""
    root = Path(__file__).resolve().parent.parent
    source = sorted(p.relative_to(root / "rules") for p in (root / "rules").rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts)
    packaged = root / "traceanalyze" / "_builtin_rules"
    linked = sorted(p.relative_to(packaged) for p in packaged.rglob("*")
                    if (p.is_file() or p.is_symlink()) and "__pycache__" not in p.parts)
    assert linked == source
    for rel in linked:
        assert (packaged / rel).resolve() == (root / "rules" / rel).resolve(), rel


# --- configuration ------------------------------------------------------------------------------

def test_param_override_from_the_command_line_is_typed(tmp_path):
    config = load_config(tmp_path, ["collective-straggler.min_late_ms=20", "step-jitter.min_slow_ratio=2.5"])
    assert config.params["collective-straggler"]["min_late_ms"] == 20
    assert config.params["step-jitter"]["min_slow_ratio"] == 2.5


@pytest.mark.parametrize("arg", ["collective-straggler.no_such_param=1", "no-such-rule.min_late_ms=1",
                                 "collective-straggler.min_late_ms=fast", "min_late_ms=3"])
def test_bad_param_override_is_an_error_with_exit_code_2(tmp_path, arg):
    with pytest.raises(TraceanalyzeError) as err:
        load_config(tmp_path, [arg])
    assert err.value.exit_code == 2


def test_pyproject_section_is_read_and_the_command_line_wins(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.traceanalyze]\nfail_on = "warning"\nignore = ["step-jitter"]\n\n'
        '[tool.traceanalyze.rules.collective-straggler]\nmin_late_ms = 30\nmin_late_pct = 15\nseverity = "error"\n')
    sub = tmp_path / "traces" / "run1"
    sub.mkdir(parents=True)
    config = load_config(sub, ["collective-straggler.min_late_ms=40"])
    assert config.source == tmp_path / "pyproject.toml"
    assert config.fail_on == "warning" and config.ignore == ("step-jitter",)
    assert config.params["collective-straggler"] == {"min_late_ms": 40, "min_late_pct": 15}
    assert config.severity == {"collective-straggler": "error"}


def test_traceanalyze_toml_is_read(tmp_path):
    (tmp_path / "traceanalyze.toml").write_text('[rules.dataloader-stall]\nmin_data_wait_pct = 25\n')
    assert load_config(tmp_path).params == {"dataloader-stall": {"min_data_wait_pct": 25}}


def test_unknown_setting_in_config_is_an_error(tmp_path):
    (tmp_path / "traceanalyze.toml").write_text('fail_onn = "warning"\n')
    with pytest.raises(TraceanalyzeError, match="fail_onn"):
        load_config(tmp_path)


def test_analyze_rejects_an_unknown_parameter_with_exit_code_2(tmp_path):
    from tests.tracegen import write_trace_dir

    trace = write_trace_dir({"ranks": 1, "timeline": [["forward", 0, 50]]}, tmp_path / "t")
    result = _cli("analyze", str(trace), "--out", str(tmp_path / "out"), "--param", "dataloader-stall.bogus_pct=3",
                  "-q")
    assert result.returncode == 2
    assert "bogus_pct" in result.stderr


def _findings_on_real_trace(folder: str, rule_id: str, fixture_db) -> list:
    """The findings of one rule on a trace folder of fixtures/real (copies of real traces), its
    shared database, judged whatever the window (these tests check how a finding reads; on these
    windows of one step or none the rule engine itself abstains or reports at info)."""
    rule = {r.id: r for r in load_rules()}[rule_id]
    with duckdb.connect(str(fixture_db(REAL_TRACES / folder)), read_only=True) as con:
        return run_rule(con, rule, window=False)


@pytest.mark.parametrize("folder", ["hta-large-integer", "hta-trace-file-list"])
def test_a_sub_millisecond_cost_is_not_printed_as_zero(folder, fixture_db):
    """Steps of 0.2 and 1.6 ms: a finding's title gives its sub-ms times with two significant
    digits (0.15 ms), never '0 ms' for time that is there."""
    findings = _findings_on_real_trace(folder, "gpu-idle-gaps", fixture_db)
    assert findings
    for f in findings:
        idle_ms = f.evidence["idle_ms"]
        assert 0 < idle_ms
        assert " 0 ms" not in f.title
        if idle_ms < 0.5:
            assert f"idle {idle_ms:.2g} ms per step" in f.title


def test_a_count_of_syncs_reads_as_english(fixture_db):
    """host-sync on the Triton example (one cudaDeviceSynchronize per window): 'once', not '1 times'."""
    (f,) = _findings_on_real_trace("hta-triton-example", "host-sync", fixture_db)
    assert f.evidence["syncs_per_step"] == 1
    assert "synchronizes with the GPU once per step" in f.title
