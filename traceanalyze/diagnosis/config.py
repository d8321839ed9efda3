"""User configuration: `traceanalyze.toml` or `[tool.traceanalyze]` in pyproject.toml, plus `--param`.

```toml
[tool.traceanalyze]            # in traceanalyze.toml the same keys sit at the top level
fail_on = "warning"            # what `traceanalyze check` fails on
select = ["collective-straggler", "dataloader-stall"]   # run only these rules
ignore = ["step-jitter"]       # never run these
rules_dirs = ["perf_rules"]    # extra rule folders, relative to the config file

[tool.traceanalyze.rules.collective-straggler]
min_late_ms = 20               # a parameter of the rule (see `traceanalyze explain RULE`)
severity = "error"             # replaces the rule's severity
```

`--param collective-straggler.min_late_ms=20` beats the file. Unknown keys, rules and
parameters are errors (exit 2), so a typo never silently keeps a default.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from traceanalyze.errors import TraceConfigError
from traceanalyze.findings import SEVERITIES

TOP_LEVEL_KEYS = {"fail_on", "select", "ignore", "max_regression_pct", "rules_dirs", "rules"}
_PARAM_ARG = re.compile(r"^\s*([A-Za-z0-9_-]+)\.([A-Za-z_][A-Za-z0-9_]*)\s*=(.*)$")


@dataclass(frozen=True)
class Config:
    """Validated settings; None means "not set" (the command's default applies)."""

    params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # rule id -> {param: value}
    severity: Mapping[str, str] = field(default_factory=dict)              # rule id -> severity
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] | None = None
    fail_on: str | None = None
    max_regression_pct: float | None = None
    rules_dirs: tuple[Path, ...] = ()
    source: Path | None = None                                             # the file read, if any


def find_config_file(start_dir: Path) -> tuple[Path, dict] | None:
    """The nearest traceanalyze.toml, or pyproject.toml with [tool.traceanalyze], at or above start_dir."""
    start = Path(start_dir).resolve()
    for folder in (start, *start.parents):
        own = folder / "traceanalyze.toml"
        if own.is_file():
            data = _read_toml(own)
            return own, data.get("tool", {}).get("traceanalyze", data)
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            section = _read_toml(pyproject).get("tool", {}).get("traceanalyze")
            if section is not None:
                return pyproject, section
    return None


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise TraceConfigError(f"cannot read the configuration: {exc}", str(path)) from None


def parse_param_args(args: Iterable[str]) -> dict[str, dict[str, str]]:
    """['collective-straggler.min_late_ms=20'] -> {'collective-straggler': {'min_late_ms': '20'}}."""
    out: dict[str, dict[str, str]] = {}
    for arg in args:
        m = _PARAM_ARG.match(str(arg))
        if not m:
            raise TraceConfigError(f"--param expects RULE.NAME=VALUE, not {arg!r}")
        out.setdefault(m.group(1), {})[m.group(2)] = m.group(3).strip()
    return out


def _rule_list(value: Any, key: str, where: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TraceConfigError(f"{key} must be a list of rule ids", where)
    return tuple(v.strip() for v in value)


def _check_top_level(section: Mapping[str, Any], where: str) -> None:
    unknown = sorted(set(section) - TOP_LEVEL_KEYS)
    if unknown:
        raise TraceConfigError(f"unknown setting(s) {', '.join(unknown)} "
                                f"(known: {', '.join(sorted(TOP_LEVEL_KEYS))})", where)
    fail_on = section.get("fail_on")
    if fail_on is not None and fail_on not in SEVERITIES:
        raise TraceConfigError(f"fail_on must be one of {', '.join(SEVERITIES)}", where)


def _split_rule_tables(rules: Any, where: str) -> tuple[dict, dict]:
    """[rules.<id>] tables -> ({id: {param: value}}, {id: severity})."""
    if not isinstance(rules, dict):
        raise TraceConfigError("rules must be a table of [rules.<rule id>] tables", where)
    params: dict[str, dict] = {}
    severity: dict[str, str] = {}
    for rule_id, table in rules.items():
        if not isinstance(table, dict):
            raise TraceConfigError(f"rules.{rule_id} must be a table", where)
        table = dict(table)
        if "severity" in table:
            severity[rule_id] = table.pop("severity")
            if severity[rule_id] not in SEVERITIES:
                raise TraceConfigError(f"rules.{rule_id}.severity must be one of {', '.join(SEVERITIES)}", where)
        params[rule_id] = table
    return params, severity


def _validate(params: Mapping[str, Mapping[str, Any]], names: Iterable[str],
              rules_dirs: tuple[Path, ...]) -> dict[str, dict[str, Any]]:
    """Check rule ids and parameter names against the rule pack; values become typed."""
    from traceanalyze.diagnosis.ruleset import load_rules, resolve_params

    rules = {rule.id: rule for rule in load_rules(rules_dirs)}
    for rule_id in [*params, *names]:
        if rule_id not in rules:
            raise TraceConfigError(f"unknown rule {rule_id!r} (rules: {', '.join(sorted(rules))})")
    typed = {}
    for rule_id, values in params.items():
        resolved = resolve_params(rules[rule_id], values)
        typed[rule_id] = {name: resolved[name] for name in values}
    return typed


def load_config(start_dir: Path, params: Iterable[str] = ()) -> Config:
    """Read the nearest config file at or above `start_dir`, then apply `--param` values."""
    return _config(find_config_file(Path(start_dir)), params, Path(start_dir))


def config_from_file(path: Path | None, params: Iterable[str] = ()) -> Config:
    """The settings of exactly this file (traceanalyze.toml or pyproject.toml; None: defaults)
    with `params` applied; nothing is searched for."""
    if path is None:
        return _config(None, params, Path.cwd())
    path = Path(path)
    if not path.is_file():
        raise TraceConfigError("no such configuration file", str(path))
    data = _read_toml(path)
    section = data.get("tool", {}).get("traceanalyze", {} if path.name == "pyproject.toml" else data)
    return _config((path, section), params, path.parent)


def _config(found: tuple[Path, dict] | None, params: Iterable[str], start_dir: Path) -> Config:
    source, section = found if found else (None, {})
    where = str(source) if source else "--param"
    _check_top_level(section, where)
    file_params, severity = _split_rule_tables(section.get("rules", {}), where)
    base = source.parent if source else Path(start_dir)
    rules_dirs = tuple((base / d).resolve() for d in section.get("rules_dirs", []) or [])
    merged = {rule_id: dict(values) for rule_id, values in file_params.items()}
    for rule_id, values in parse_param_args(params).items():
        merged.setdefault(rule_id, {}).update(values)
    select = _rule_list(section.get("select"), "select", where)
    ignore = _rule_list(section.get("ignore"), "ignore", where)
    typed = _validate(merged, [*severity, *(select or ()), *(ignore or ())], rules_dirs)
    max_regression = section.get("max_regression_pct")
    return Config(params=typed, severity=severity, select=select, ignore=ignore,
                  fail_on=section.get("fail_on"),
                  max_regression_pct=float(max_regression) if max_regression is not None else None,
                  rules_dirs=rules_dirs, source=source)
