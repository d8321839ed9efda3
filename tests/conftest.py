"""Shared test fixtures: real traces loaded once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "ddp"
SHARED_TRACES = ROOT.parent / "shared" / "traces"


@pytest.fixture(scope="session")
def balanced_db(tmp_path_factory) -> Path:
    """The recorded balanced 4-rank gloo DDP run, loaded into a DuckDB file."""
    from traceanalyze.load import load_trace_dir

    db = tmp_path_factory.mktemp("balanced") / "trace.duckdb"
    load_trace_dir(FIXTURES / "balanced", db)
    return db
