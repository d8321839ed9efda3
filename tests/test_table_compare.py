"""The tests' table comparison (table_compare.py) finds every kind of difference it claims to."""

from __future__ import annotations

import duckdb
import pytest
from table_compare import assert_same_tables

ROWS = [(1, "aten::mm", '{"x": 1.0}'), (2, None, None), (2, None, None)]


def _db(path, rows) -> str:
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE t (id BIGINT, name VARCHAR, other_args VARCHAR)")
        con.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    return path


@pytest.mark.parametrize("changed", [
    [(1, "aten::mm", '{"x": 1.0}'), (2, None, None)],                      # a duplicate row missing
    [(1, "aten::mm", '{"x": 1.0}'), (2, None, None), (2, None, None), (3, "extra", None)],
    [(1, "aten::mm", '{"x": 2.0}'), (2, None, None), (2, None, None)],      # a JSON value
    [(1, "aten::bmm", '{"x": 1.0}'), (2, None, None), (2, None, None)],     # a text value
    [(1, "aten::mm", '{"x": 1.0}'), (2, "", None), (2, None, None)],        # NULL vs empty
], ids=["fewer duplicates", "extra row", "json value", "text", "null"])
def test_a_difference_is_found_both_ways(tmp_path, changed):
    a, b = _db(tmp_path / "a.duckdb", ROWS), _db(tmp_path / "b.duckdb", changed)
    for first, second in ((a, b), (b, a)):
        with pytest.raises(AssertionError, match="only in the"):
            assert_same_tables(first, second, ["t"], json_columns=["other_args"])


def test_same_rows_in_another_order_and_json_spelling_are_equal(tmp_path):
    respelled = [(2, None, None), (1, "aten::mm", '{"x":1.000000}'), (2, None, None)]
    a, b = _db(tmp_path / "a.duckdb", ROWS), _db(tmp_path / "b.duckdb", respelled)
    assert_same_tables(a, b, ["t"], json_columns=["other_args"])
    with pytest.raises(AssertionError, match="other_args|only in the"):
        assert_same_tables(a, b, ["t"])  # compared as text, the spelling differs
