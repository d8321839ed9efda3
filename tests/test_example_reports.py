"""The committed example reports (reports/examples/<scenario>/, written by scripts/make_reports.sh)
say what the analysis of their fixture says today: the same findings (rule, ranks, title, cost),
the same layout and the same schema. A change of wording or of a verdict that was not followed by
`scripts/make_reports.sh` fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "reports" / "examples"
SCENARIOS = sorted(p.name for p in EXAMPLES.iterdir() if (p / "summary.json").is_file())


def _seen(summary: dict) -> dict:
    """What a reader of the report sees of a summary, without paths and timings of the run."""
    return {"schema": summary["schema"],
            "layout": (summary.get("layout") or {}).get("text"),
            "findings": [(f["rule"], f["severity"], f["ranks"], " ".join(f["title"].split()),
                          round(f["cost"]["ms_per_step"], 1) if (f.get("cost") or {}).get("ms_per_step") is not None
                          else None)
                         for f in summary["findings"]]}


def test_every_example_has_its_fixture():
    assert SCENARIOS and all((ROOT / "fixtures" / "ddp" / name).is_dir() for name in SCENARIOS)


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_example_report_is_not_stale(name, fixture_summary):
    committed = json.loads((EXAMPLES / name / "summary.json").read_text())
    fresh = fixture_summary(ROOT / "fixtures" / "ddp" / name, committed["trace_dir"])
    assert _seen(committed) == _seen(fresh), f"run scripts/make_reports.sh {name}"
    html = (EXAMPLES / name / "report.html").read_text()
    for f in fresh["findings"]:
        assert f["rule"] in html
