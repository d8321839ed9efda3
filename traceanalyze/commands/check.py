"""`traceanalyze check SOURCE`: the CI gate. Exit 0 when the policy holds, 1 when not, 2 on bad input."""

from __future__ import annotations

from pathlib import Path

import click

from traceanalyze.commands._analyze import analyzer, gate_settings, known_rules
from traceanalyze.commands._options import out_option, param_option, ranks_option
from traceanalyze.errors import TraceanalyzeError
from traceanalyze.compare.gate import SEVERITIES, GatePolicy, GateResult, evaluate, parse_rule_list
from traceanalyze.load.discover import parse_rank_selection
from traceanalyze.output import ci
from traceanalyze.atomic import write_text_atomic
from traceanalyze.pipeline import default_out_dir
from traceanalyze.summary.file import summary_from_source


def build_policy(fail_on, select, ignore, max_regression_pct, start_dir: Path) -> GatePolicy:
    """Command-line options over `[tool.traceanalyze]` config over the defaults."""
    conf = gate_settings(start_dir)
    given = {"fail_on": fail_on, "select": select, "ignore": ignore,
             "max_regression_pct": max_regression_pct}
    merged = {k: v if v is not None else conf.get(k) for k, v in given.items()}
    for key in ("select", "ignore"):
        merged[key] = _rule_set(merged[key])
    return GatePolicy(**{k: v for k, v in merged.items() if v is not None})


def _rule_set(value) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return parse_rule_list(value)
    return frozenset(str(v).strip() for v in value if str(v).strip())


def check_rule_ids(policy: GatePolicy, rules: dict[str, str], summary: dict) -> None:
    """--select/--ignore must name rules that exist (a typo would silently disable the gate)."""
    if not rules:  # rule pack unavailable: nothing to check against
        return
    known = set(rules) | {f["rule"] for f in summary.get("findings") or []}
    unknown = sorted((policy.select | policy.ignore) - known)
    if unknown:
        raise TraceanalyzeError(f"unknown rule id(s) in --select/--ignore: {', '.join(unknown)} "
                                f"(known: {', '.join(sorted(known))})")


def render(fmt: str, summary: dict, result: GateResult, rules: dict[str, str]) -> str:
    if fmt == "github":
        return ci.format_github(result)
    if fmt == "junit":
        return ci.format_junit(summary, result, rules)
    if fmt == "sarif":
        return ci.format_sarif(summary, result, rules)
    return ci.format_text(result)


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, text)
    except OSError as exc:
        raise TraceanalyzeError(f"cannot write: {exc.strerror}", str(path)) from None


@click.command(name="check")
@click.argument("source", type=click.Path(path_type=Path))
@click.option("--fail-on", type=click.Choice(SEVERITIES), default=None,
              help="Fail on findings of this severity or worse [default: error, or fail_on in config].")
@click.option("--select", default=None, metavar="RULES",
              help="Only these rules count (comma list of rule ids).")
@click.option("--ignore", default=None, metavar="RULES", help="These rules never count (comma list).")
@click.option("--baseline", type=click.Path(path_type=Path), default=None, metavar="OLD",
              help="Baseline summary.json (or trace folder): fail on regressions and on new findings only.")
@click.option("--max-regression", "max_regression_pct", type=click.FloatRange(min=0), default=None,
              metavar="PCT", help="Allowed growth of a metric vs the baseline, in % [default: 10].")
@click.option("--format", "fmt", type=click.Choice(ci.FORMATS), default="text", show_default=True)
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Write the formatted result to this file; the reasons still print.")
@ranks_option("Ranks to analyze (trace input only).")
@param_option("Override a rule threshold (trace input only; repeatable).")
@out_option("Report folder for trace input [default: reports/<trace dir name>/].")
@click.pass_context
def command(ctx, source, fail_on, select, ignore, baseline, max_regression_pct, fmt, output,
            ranks, params, out_dir):
    """CI gate on a trace folder or summary.json: exit 0 pass, 1 fail, 2 bad input."""
    policy = build_policy(fail_on, select, ignore, max_regression_pct, Path.cwd())
    summary = summary_from_source(source, analyzer(out_dir or default_out_dir(source),
                                                   parse_rank_selection(ranks), params))
    old = None
    if baseline is not None:  # a baseline trace folder: its report in --out/baseline, else only a cached database
        old = summary_from_source(baseline, analyzer(out_dir / "baseline" if out_dir else None))
    rules = known_rules()
    check_rule_ids(policy, rules, summary)
    result = evaluate(summary, policy, old)
    rendered = render(fmt, summary, result, rules)
    if output is not None:
        _write(output, rendered)
        click.echo(ci.format_text(result), nl=False)
    else:
        click.echo(rendered, nl=False)
        if fmt in ("junit", "sarif"):
            click.echo(ci.format_text(result), nl=False, err=True)
    ctx.exit(result.exit_code)
