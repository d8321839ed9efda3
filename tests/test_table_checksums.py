"""The loader builds the same database as before the native reader wrote raw_events.parquet
itself: every table of every fixture (fixtures/ddp/*, fixtures/real/*,
fixtures/parallel/*, fixtures/cuda/*), row for row and exact
ns, against checksums written by the previous loader (tests/data/table_checksums.json, see
tests/table_checksums.py for how they are computed and what is left out)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.table_checksums import ROOT, corpus, load_checksums

REFERENCE = json.loads((Path(__file__).parent / "data" / "table_checksums.json").read_text())
DIRS = corpus()


def test_reference_covers_the_corpus():
    """Every fixture folder has a reference, and every reference a folder (none skipped quietly)."""
    assert sorted(str(d.relative_to(ROOT)) for d in DIRS) == sorted(REFERENCE)
    assert len(DIRS) >= 30


@pytest.mark.parametrize("folder", DIRS, ids=[str(d.relative_to(ROOT)) for d in DIRS])
def test_every_table_as_before(folder: Path, fixture_db):
    got = load_checksums(folder, fixture_db)
    want = REFERENCE[str(folder.relative_to(ROOT))]
    assert sorted(got) == sorted(want)  # the same tables (or the same error)
    differing = {t: (got[t], want[t]) for t in want if got[t] != want[t]}
    assert not differing, differing
