"""A rule that breaks on an odd trace is skipped and reported; the other rules still run."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import duckdb
import jsonschema
import pytest
import yaml

import traceanalyze
from traceanalyze.diagnosis.diagnose import STRICT_RULES_ENV, diagnose
from traceanalyze.diagnosis.ruleset import builtin_rules_dir, load_rules
from traceanalyze.summary.build import build_summary


@dataclass
class _Config:
    rules_dirs: tuple[Path, ...]


def _broken_rule_pack(tmp_path: Path) -> Path:
    """A copy of step-jitter under another id whose SQL reads a column no table has."""
    pack = tmp_path / "pack"
    folder = pack / "broken-rule"
    shutil.copytree(builtin_rules_dir() / "step-jitter", folder)
    meta = yaml.safe_load((folder / "rule.yaml").read_text())
    meta["id"] = "broken-rule"
    (folder / "rule.yaml").write_text(yaml.safe_dump(meta))
    (folder / "detect.sql").write_text("-- broken on purpose\nSELECT no_such_column FROM steps\n")
    return pack


def test_a_failing_rule_becomes_a_load_issue_and_the_others_still_report(
        tmp_path, monkeypatch, balanced_db):
    monkeypatch.delenv(STRICT_RULES_ENV, raising=False)
    config = _Config(rules_dirs=(_broken_rule_pack(tmp_path),))
    con = duckdb.connect(str(balanced_db), read_only=True)
    try:
        summary = build_summary(con, "balanced", diagnose(con, config))
    finally:
        con.close()
    failed = [i for i in summary["load_issues"] if i["kind"] == "rule-failed"]
    assert len(failed) == 1
    assert "broken-rule" in failed[0]["message"] and "no_such_column" in failed[0]["message"]
    assert failed[0]["severity"] == "warning"
    # the summary with the failure still honours the contract
    schema = json.loads((Path(traceanalyze.__file__).parent / "summary" / "summary.schema.json").read_text())
    jsonschema.validate(summary, schema)
    assert len(load_rules(config.rules_dirs)) == len(load_rules()) + 1


def test_strict_mode_raises_so_tests_see_broken_rules(tmp_path, monkeypatch, balanced_db):
    monkeypatch.setenv(STRICT_RULES_ENV, "1")
    config = _Config(rules_dirs=(_broken_rule_pack(tmp_path),))
    con = duckdb.connect(str(balanced_db), read_only=True)
    try:
        with pytest.raises(duckdb.Error):
            diagnose(con, config)
    finally:
        con.close()
