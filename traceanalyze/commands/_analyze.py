"""Where `check` and `diff` meet the rest of the pipeline: analysis, config and the rule list."""

from __future__ import annotations

from pathlib import Path

from traceanalyze.errors import TraceanalyzeError

GATE_KEYS = ("fail_on", "select", "ignore", "max_regression_pct")


def analyzer(out_dir: Path | None = None, ranks: set[int] | None = None, params=()):
    """A `source -> summary dict` function: with `out_dir`, the full pipeline writing out_dir/
    (like `traceanalyze DIR --out out_dir`); without, only the database, in the cache folder."""
    def analyze_source(source: Path) -> dict:
        from traceanalyze.api import analyze
        from traceanalyze.pipeline import cache_db_path, run_analysis

        if out_dir is not None:
            return run_analysis(source, out_dir, ranks, list(params), html=True).summary
        with analyze(source, ranks, db=cache_db_path(source), params=list(params),
                     config=Path.cwd(), progress=False) as analysis:
            return analysis.summary_dict
    return analyze_source


def gate_settings(start_dir: Path) -> dict:
    """fail_on / select / ignore / max_regression_pct from `[tool.traceanalyze]` ({} if unset)."""
    try:
        from traceanalyze.diagnosis.config import load_config
    except ImportError:  # config.py not there yet: defaults only
        return {}
    config = load_config(start_dir, [])
    return {key: getattr(config, key, None) for key in GATE_KEYS}


def known_rules() -> dict[str, str]:
    """Rule id -> title of every built-in rule ({} when the rule pack cannot be read)."""
    try:
        from traceanalyze.diagnosis.ruleset import load_rules

        return {rule.id: rule.summary for rule in load_rules()}
    except (ImportError, TraceanalyzeError):
        return {}
