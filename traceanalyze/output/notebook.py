"""An Analysis in a notebook cell (`_repr_html_`): the verdict, the findings and the report's
step timeline chart, styled with the report's own chart CSS. No script, no network; every
string from a trace goes through Jinja's autoescape."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from traceanalyze.output import charts as chartlib
from traceanalyze.output.presentation import ordered_findings
from traceanalyze.output.templating import render
from traceanalyze.output.terminal import render_verdict
from traceanalyze.output.units import fmt_ms, fmt_ranks

SCOPE = ".traceanalyze-nb"
OWN_CSS = f"""
{SCOPE} .ta-verdict {{ white-space: pre-wrap; font-size: 12.5px; background: #f8f9fc;
  border-left: 5px solid #667085; padding: 8px 12px; }}
{SCOPE} table.ta-findings {{ border-collapse: collapse; font-size: 13px; margin: 8px 0 16px; }}
{SCOPE} table.ta-findings th, {SCOPE} table.ta-findings td {{ text-align: left; padding: 4px 10px;
  border-bottom: 1px solid #e3e7ee; vertical-align: top; }}
{SCOPE} tr.sev-error td:first-child {{ color: #c62f3a; font-weight: 700; }}
{SCOPE} tr.sev-warning td:first-child {{ color: #c77c02; font-weight: 700; }}
{SCOPE} td.num {{ text-align: right; white-space: nowrap; }}
"""


@cache
def chart_css() -> str:
    """report.css's colour variables (scoped to the cell) and its chart rules: one source."""
    css = resources.files("traceanalyze.output").joinpath("templates/report.css").read_text(encoding="utf-8")
    root = re.search(r":root\s*\{[^}]*\}", css)
    charts = css[css.index("/* charts */"):css.index(".page-foot")]
    variables = root.group(0).replace(":root", SCOPE, 1) if root else ""
    return variables + "\n" + charts + OWN_CSS


def render_analysis_html(summary: dict) -> str:
    findings = [{"severity": f["severity"], "rule": f["rule"], "title": f["title"],
                 "ranks": fmt_ranks(f.get("ranks") or []),
                 "cost": fmt_ms((f.get("cost") or {}).get("ms_per_step"))}
                for f in ordered_findings(summary)]
    return render("notebook.html", css=chart_css(), verdict=render_verdict(summary, [], color=False),
                  findings=findings, timeline=chartlib.step_timeline(summary))
