"""The one Jinja environment of every HTML page (report, diff, scaling, notebook cell): autoescaped, strict."""

from __future__ import annotations

from functools import lru_cache

from jinja2 import Environment, PackageLoader, StrictUndefined

from traceanalyze.output.units import PHASE_LABELS, PHASES, fmt_ranks


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(loader=PackageLoader("traceanalyze.output", "templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.globals["PHASE_LABELS"] = PHASE_LABELS
    env.globals["PHASES"] = PHASES
    env.filters["ranks"] = fmt_ranks
    return env


def render(template: str, **context) -> str:
    return environment().get_template(template).render(**context)
