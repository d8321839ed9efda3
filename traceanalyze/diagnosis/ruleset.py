"""Stage 4: the rule engine. A rule is a folder (`rules/<id>/`), found by existing.

Each folder holds `rule.yaml` (id, title, severity, params with default/unit/help, the
finding's message and advice, docs what/why/example/fix), `detect.sql` (one row per
finding; zero rows = pass), optionally `evidence.sql` (the events shown under a finding)
and `cases.yaml` (the rule's tests). Where SQL truly cannot express a check, a
`detect.py` with `detect(con, params) -> Iterable[Mapping]` replaces `detect.sql`.

detect.sql row contract: `ranks` (INTEGER[]), `steps` (BIGINT[]), `ms_per_step` and
`pct_of_step` (DOUBLE, may be NULL); optional `severity` (info | warning | error, to
escalate); every other column becomes `evidence[column]`. `message` and `advice` in
rule.yaml are `str.format` templates over the row's columns and the parameters.
Parameters are bound as DuckDB named parameters (`$min_gap_us`); SQL is never built by
string formatting.
"""

from __future__ import annotations

import importlib.util
import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from traceanalyze.errors import TraceanalyzeError
from traceanalyze.findings import SEVERITIES, Cost, Finding
from traceanalyze.diagnosis.judge import Judge, Window, window_facts
from traceanalyze.diagnosis.rootcause import Explains

REQUIRED_COLUMNS = ("ranks", "steps", "ms_per_step", "pct_of_step")
DOC_SECTIONS = ("what", "why", "example", "fix", "tuning")  # tuning: why the thresholds
UNITS = {"ns": "_ns", "us": "_us", "ms": "_ms", "%": "_pct", "bytes": "_bytes", "count": "_count",
         "ratio": "_ratio", "TFLOP/s": "_tflops", "GB/s": "_gb_per_s"}
MAX_EVENTS = 50
_PARAM_REF = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


class RuleDefinitionError(TraceanalyzeError):
    """A rule folder is malformed (bad rule.yaml, missing detect.sql, ...)."""


@dataclass(frozen=True)
class Param:
    """A rule threshold: its default, its unit and what it means."""

    name: str
    default: Any
    unit: str
    help: str

    def coerce(self, raw: Any) -> Any:
        """A value from config or `--param` (maybe text) -> a value of the default's kind."""
        want = type(self.default)
        if isinstance(raw, str) and want is not str:
            raw = self._parse_text(raw)
        if want is bool:
            ok = isinstance(raw, bool)
        elif want in (int, float):
            ok = isinstance(raw, (int, float)) and not isinstance(raw, bool)
        else:
            ok = isinstance(raw, want)
        if not ok:
            kind = "number" if want in (int, float) else want.__name__
            raise ValueError(f"expects a {kind} ({self.unit}), not {raw!r}")
        return raw

    def _parse_text(self, text: str) -> Any:
        value = text.strip().lower()
        if isinstance(self.default, bool):
            if value in ("true", "yes", "1"):
                return True
            if value in ("false", "no", "0"):
                return False
            return text
        try:
            return int(value) if re.fullmatch(r"[+-]?\d+", value) else float(value)
        except ValueError:
            return text


@dataclass(frozen=True)
class Rule:
    """One rule, validated from its folder."""

    id: str
    title: str
    severity: str
    params: Mapping[str, Param]
    message: str
    advice: str | Mapping[str, str]
    docs: Mapping[str, str]
    folder: Path
    detect_sql: str | None = None
    evidence_sql: str | None = None
    detect_py: Path | None = None
    references: tuple[str, ...] = field(default_factory=tuple)
    judge: Judge = field(default_factory=Judge)          # below this the rule abstains
    explains: tuple[Explains, ...] = ()                  # general findings this rule's findings explain
    group_ranks: tuple[str, ...] | None = None           # evidence keys: per-rank findings alike -> one
    severity_rule: str | None = None                     # how detect raises/lowers the severity

    def severity_text(self) -> str:
        """How a finding's severity is decided (what `explain` prints)."""
        return self.severity_rule or f"{self.severity} (always)"

    @property
    def summary(self) -> str:
        return self.title

    def defaults(self) -> dict[str, Any]:
        return {name: p.default for name, p in self.params.items()}


def builtin_rules_dir() -> Path:
    """The rule pack: packaged in the wheel as traceanalyze/_builtin_rules, else the checkout's rules/."""
    package = Path(__file__).resolve().parent.parent
    packaged = package / "_builtin_rules"
    if packaged.is_dir():
        return packaged
    checkout = package.parent / "rules"
    if checkout.is_dir():
        return checkout
    raise TraceanalyzeError("the built-in rule pack is missing (no traceanalyze/_builtin_rules "
                            "and no rules/ next to the package); reinstall traceanalyze")


# libyaml's safe loader when PyYAML was built with it (7x faster on the rule pack), else the Python one
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER)  # noqa: S506 (a safe loader)
    except (OSError, yaml.YAMLError) as exc:
        raise RuleDefinitionError(f"cannot read: {exc}", str(path)) from None
    if not isinstance(data, dict):
        raise RuleDefinitionError("must be a mapping", str(path))
    return data


def _parse_params(raw: Any, where: str) -> dict[str, Param]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RuleDefinitionError("params must be a mapping of name -> {default, unit, help}", where)
    params = {}
    for name, spec in raw.items():
        if not isinstance(spec, dict) or not {"default", "unit", "help"} <= spec.keys():
            raise RuleDefinitionError(f"param {name} needs default, unit and help", where)
        params[name] = Param(name, spec["default"], str(spec["unit"]), str(spec["help"]).strip())
    return params


def load_rule(folder: Path) -> Rule:
    """Read and validate one rule folder."""
    where = str(folder / "rule.yaml")
    data = _read_yaml(folder / "rule.yaml")
    missing = [k for k in ("id", "title", "severity", "message", "advice", "docs") if not data.get(k)]
    if missing:
        raise RuleDefinitionError(f"missing {', '.join(missing)}", where)
    if data["severity"] not in SEVERITIES:
        raise RuleDefinitionError(f"severity must be one of {', '.join(SEVERITIES)}", where)
    detect_sql = _optional_text(folder / "detect.sql")
    detect_py = folder / "detect.py" if (folder / "detect.py").is_file() else None
    if (detect_sql is None) == (detect_py is None):
        raise RuleDefinitionError("needs exactly one of detect.sql or detect.py", str(folder))
    docs, advice = data["docs"], data["advice"]
    if not isinstance(docs, dict):
        raise RuleDefinitionError(f"docs must be a mapping ({', '.join(DOC_SECTIONS)})", where)
    if not isinstance(advice, str) and not (isinstance(advice, dict) and advice):
        raise RuleDefinitionError("advice must be a text or a mapping of cause -> text", where)
    return Rule(
        id=str(data["id"]), title=str(data["title"]).strip(), severity=data["severity"],
        params=_parse_params(data.get("params"), where), message=str(data["message"]).strip(),
        advice=advice, docs={k: str(v).strip() for k, v in docs.items()}, folder=folder,
        detect_sql=detect_sql, evidence_sql=_optional_text(folder / "evidence.sql"),
        detect_py=detect_py, references=tuple(data.get("references") or ()),
        judge=Judge.parse(data.get("judge"), where, RuleDefinitionError),
        explains=Explains.parse_list(data.get("explains"), where, RuleDefinitionError),
        group_ranks=None if data.get("group_ranks") is None else tuple(data["group_ranks"]),
        severity_rule=_severity_rule(data, detect_sql, detect_py, where),
    )


def _severity_rule(data: dict, detect_sql: str | None, detect_py: Path | None, where: str) -> str | None:
    """A rule whose detect sets each finding's severity says how, in `severity_rule`."""
    text = data.get("severity_rule")
    decides = "severity" in (detect_sql or (detect_py.read_text() if detect_py else "")).lower()
    if decides and not text:
        raise RuleDefinitionError("detect sets the severity: say how in severity_rule", where)
    if text is not None and not isinstance(text, str):
        raise RuleDefinitionError("severity_rule must be a text", where)
    return " ".join(text.split()) if text else None


def _optional_text(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None


def load_rules(extra_dirs: Iterable[Path] = ()) -> list[Rule]:
    """Every rule of the built-in pack plus those under `extra_dirs`, sorted by id."""
    return sorted(_load_rules_cached(tuple(Path(d).resolve() for d in extra_dirs)), key=lambda r: r.id)


@lru_cache(maxsize=8)
def _load_rules_cached(extra_dirs: tuple[Path, ...]) -> tuple[Rule, ...]:
    rules: dict[str, Rule] = {}
    for base in (builtin_rules_dir(), *extra_dirs):
        if not base.is_dir():
            raise TraceanalyzeError("rules directory not found", str(base))
        for yaml_path in sorted(base.glob("*/rule.yaml")):
            rule = load_rule(yaml_path.parent)
            if rule.id in rules:
                raise RuleDefinitionError(f"rule id {rule.id} is defined twice "
                                          f"(also in {rules[rule.id].folder})", str(yaml_path))
            rules[rule.id] = rule
    return tuple(rules.values())


def sql_param_names(sql: str) -> set[str]:
    """The `$name` parameters a SQL text uses (comments ignored)."""
    code = "\n".join(line.split("--", 1)[0] for line in sql.splitlines())
    return set(_PARAM_REF.findall(code))


def sql_literal(value: Any) -> str:
    """A Python value as a DuckDB literal, for the runnable SQL shown to the user (never executed here)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float, Decimal)):
        return repr(float(value)) if isinstance(value, Decimal) else repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(sql_literal(v) for v in value) + "]"
    return "'" + str(value).replace("'", "''") + "'"


def bound_sql_text(sql: str, values: Mapping[str, Any]) -> str:
    """SQL with its `$name` parameters replaced by literals: paste it into `traceanalyze sql`."""
    return _PARAM_REF.sub(lambda m: sql_literal(values[m.group(1)]) if m.group(1) in values
                          else m.group(0), sql).strip()


def _execute(con, sql: str, values: Mapping[str, Any]) -> list[dict]:
    names = sql_param_names(sql)
    missing = names - values.keys()
    if missing:
        raise RuleDefinitionError(f"SQL uses undefined parameters: {', '.join(sorted(missing))}")
    cur = con.execute(sql, {n: values[n] for n in names})
    columns = [d[0] for d in cur.description]
    return [dict(zip(columns, row)) for row in cur.fetchall()]


def _plain(value: Any) -> Any:
    """DuckDB values -> JSON-friendly Python (Decimal -> float, floats rounded, nested)."""
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (int, str, bool)):
        return value
    return str(value)


_FIXED_POINT = re.compile(r"\.(\d+)f")


class _Template(string.Formatter):
    """str.format that prints NULL values as 'n/a' whatever the format spec, a nonzero
    number that a fixed-point spec would round to zero ('0 ms' for 0.15 ms) with two
    significant digits instead, and `{n:times}` as 'once', 'twice', '3 times'."""

    def format_field(self, value, format_spec):
        if value is None:
            return "n/a"
        if format_spec == "times":  # a count of occurrences: 'once', 'twice', '3 times'
            n = round(value)
            return {1: "once", 2: "twice"}.get(n, f"{n} times")
        fixed = _FIXED_POINT.fullmatch(format_spec)
        if (fixed and isinstance(value, (int, float)) and not isinstance(value, bool) and value != 0
                and abs(value) < 0.5 * 10 ** -int(fixed.group(1))):
            return f"{value:.2g}"
        return super().format_field(value, format_spec)


def _render(rule: Rule, template: str, row: Mapping[str, Any]) -> str:
    try:
        return _Template().vformat(template, (), row).strip()
    except (KeyError, IndexError, ValueError) as exc:
        raise RuleDefinitionError(f"cannot render a template with the row's columns: {exc!r}",
                                  str(rule.folder / "rule.yaml")) from None


def _advice_template(rule: Rule, row: Mapping[str, Any]) -> str:
    if isinstance(rule.advice, str):
        return rule.advice
    cause = row.get("cause")
    return rule.advice.get(cause) or rule.advice.get("default") or next(iter(rule.advice.values()))


def _detect_rows(con, rule: Rule, params: Mapping[str, Any]) -> list[dict]:
    if rule.detect_sql is not None:
        return _execute(con, rule.detect_sql, params)
    spec = importlib.util.spec_from_file_location(f"traceanalyze_rule_{rule.id.replace('-', '_')}",
                                                  rule.detect_py)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [dict(row) for row in module.detect(con, dict(params))]


def _finding(con, rule: Rule, params: Mapping[str, Any], row: dict, severity: str | None) -> Finding:
    missing = [c for c in REQUIRED_COLUMNS if c not in row]
    if missing:
        raise RuleDefinitionError(f"detect output lacks columns {', '.join(missing)}", str(rule.folder))
    row = {k: _plain(v) for k, v in row.items()}
    values = {**params, **row}
    if rule.evidence_sql is not None:
        sql_text, events = rule.evidence_sql, _execute(con, rule.evidence_sql, values)[:MAX_EVENTS]
    else:
        sql_text, events = rule.detect_sql or "", []
    evidence = {k: v for k, v in row.items() if k not in (*REQUIRED_COLUMNS, "severity")}
    if rule.evidence_sql is not None:
        evidence["events"] = [{k: _plain(v) for k, v in e.items()} for e in events]
    return Finding(
        rule=rule.id,
        severity=severity or row.get("severity") or rule.severity,
        title=_render(rule, rule.message, values),
        ranks=tuple(int(r) for r in row["ranks"] or ()),
        steps=tuple(int(s) for s in row["steps"] or ()),
        cost=Cost(row["ms_per_step"], row["pct_of_step"]),
        evidence=evidence,
        advice=_render(rule, _advice_template(rule, row), values),
        sql=bound_sql_text(sql_text, values) if sql_text else None,
    )


def resolve_params(rule: Rule, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Defaults overridden by `overrides`; an unknown name is an error."""
    values = rule.defaults()
    for name, raw in (overrides or {}).items():
        if name not in rule.params:
            known = ", ".join(sorted(rule.params)) or "none"
            raise TraceanalyzeError(f"rule {rule.id} has no parameter {name!r} (parameters: {known})")
        try:
            values[name] = rule.params[name].coerce(raw)
        except ValueError as exc:
            raise TraceanalyzeError(f"parameter {rule.id}.{name} {exc}") from None
    return values


def run_rule(con, rule: Rule, overrides: Mapping[str, Any] | None = None,
             severity: str | None = None, window: Window | None = None,
             abstained: list[tuple[str, str]] | None = None) -> list[Finding]:
    """Run one rule on an open trace database; `severity` (from config) replaces the rule's.
    Below its `judge` needs the rule abstains (`(rule id, reason)` appended to `abstained`, see
    `Window.screen`); `window=False` judges regardless of the window."""
    params = resolve_params(rule, overrides)
    if window is not False:
        reason, severity = (window or window_facts(con)).screen(rule.judge, severity)
        if reason is not None:
            if abstained is not None:
                abstained.append((rule.id, reason))
            return []
    return [_finding(con, rule, params, row, severity) for row in _detect_rows(con, rule, params)]


def rules_markdown(rules: Iterable[Rule] | None = None) -> str:
    """The rules table of docs/reference/rules.md (generated; `scripts/update_docs.py`)."""
    lines = ["| rule | severity | what it catches | parameters (default) | judges with | explains |",
             "|---|---|---|---|---|---|"]
    for rule in rules if rules is not None else load_rules():
        params = "<br>".join(f"`{p.name}` = {p.default} {p.unit}" for p in rule.params.values())
        explains = "<br>".join(e.describe() for e in rule.explains)
        lines.append(f"| `{rule.id}` | {rule.severity} | {rule.title} | {params} | {rule.judge.describe()} "
                     f"| {explains} |")
    return "\n".join(lines) + "\n"
