"""raw_events, row for row, against an independent reading of the JSON with Python's json
module (times through Decimal, so exact to the ns), on every recorded fixture and real trace."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import ROUND_HALF_UP, Decimal

import duckdb
import pytest
from conftest import FIXTURES, REAL_TRACES


# Recorded scenarios that are another one's twin: the same recorder, model and profiler settings,
# only the injected behaviour differs (the reader sees the same kinds of events, arguments and
# layout), so their raw_events prove nothing their twin does not; left out to keep the suite fast.
TWINS = {"small_buckets_default": "small_buckets", "grad_accum_nosync": "grad_accum_no_nosync",
         "fsdp_compute_straggler": "fsdp_balanced", "syncbn_off": "syncbn_cpu", "token_budget": "token_skew",
         "find_unused_false": "find_unused_true", "scaling_ws2": "scaling_ws4"}
FOLDERS = sorted(p for p in REAL_TRACES.iterdir() if p.is_dir() and p.name != "hta-rank-unavailable") \
    + sorted(p for p in FIXTURES.iterdir() if p.is_dir() and p.name not in TWINS)
TEXT_KEYS = [("ph", "ph"), ("cat", "cat"), ("name", "name"), ("pid", "pid"), ("tid", "tid"), ("id", "flow_id")]
INT_ARGS = [("External id", "external_id"), ("correlation", "correlation"), ("device", "device"),
            ("stream", "stream"), ("Sequence number", "seq_number"), ("Fwd thread id", "fwd_thread_id"),
            ("In msg nelems", "in_msg_nelems"), ("Out msg nelems", "out_msg_nelems"), ("Seq", "collective_seq")]
TEXT_ARGS = [("Collective name", "collective_name"), ("dtype", "dtype"), ("name", "label"),
             ("cuda_sync_kind", "sync_kind")]
TYPED = {"External id", "external id", "correlation", "device", "stream", "bytes", "Bytes", "Input Dims",
         "Input type", "Sequence number", "Fwd thread id", "Collective name", "In msg nelems", "Out msg nelems",
         "dtype", "Group size", "Process Group Name", "Process Group Description", "Process Group Ranks", "Seq",
         "Total Allocated", "Total Reserved", "Device Type", "Device Id", "Addr", "name", "labels", "cuda_sync_kind"}
# (one decoder and one encoder for every row: json.loads / json.dumps with options build a new one per call)
DECIMAL_JSON = json.JSONDecoder(parse_float=Decimal)
SORTED_JSON = json.JSONEncoder(sort_keys=True, default=str)
DIMS_JSON = json.JSONEncoder(separators=(",", ":"))
COLUMNS = ["ts_ns", "dur_ns"] + [c for _, c in TEXT_KEYS + INT_ARGS + TEXT_ARGS] + ["bytes", "input_dims", "other_args"]


def _ns(value) -> int | None:
    if isinstance(value, (int, Decimal)) and not isinstance(value, bool):
        return int((Decimal(value) * 1000).to_integral_value(ROUND_HALF_UP))
    return None


def _text(value) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else str(value)


def _int(value) -> int | None:
    """As documented for integer args: a JSON integer, or a string holding one (also 0x hex)."""
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text, 16) if text.lower().startswith("0x") else int(text)
        except ValueError:
            return None
    return value if isinstance(value, int) and not isinstance(value, bool) and -2**63 <= value < 2**63 else None


def expected_rows(top: dict) -> list[tuple]:
    """One tuple of COLUMNS per event (built straight as a tuple: the suite runs it on every
    event of every fixture)."""
    base = top.get("baseTimeNanoseconds", 0)
    text_keys = [key for key, _ in TEXT_KEYS]
    int_keys = [key for key, _ in INT_ARGS]
    text_args = [key for key, _ in TEXT_ARGS]
    ext_at = int_keys.index("External id")
    rows = []
    for e in top["traceEvents"]:
        args = e.get("args") or {}
        ts, dur = _ns(e.get("ts")), _ns(e.get("dur"))
        ints = [None if (v := args.get(key)) is None else _int(v) for key in int_keys]
        # the other spellings: read when the first one is absent (or not an integer)
        if ints[ext_at] is None:
            ints[ext_at] = _int(args.get("external id"))
        nbytes = _int(args.get("bytes"))
        if nbytes is None:
            nbytes = _int(args.get("Bytes"))
        dims = args.get("Input Dims")
        others = {k: v for k, v in args.items() if k not in TYPED}
        rows.append((None if ts is None else ts + base, dur,
                     *[_text(e.get(key)) for key in text_keys], *ints,
                     *[_text(args.get(key)) for key in text_args], nbytes,
                     None if dims is None else DIMS_JSON.encode(dims),
                     SORTED_JSON.encode(others) if others else None))
    return rows


def _normalized_other_args(text: str | None) -> str | None:
    if text is None:
        return None
    return SORTED_JSON.encode(DECIMAL_JSON.decode(text))  # (numbers as written)


@pytest.mark.parametrize("folder", FOLDERS, ids=[p.name for p in FOLDERS])
def test_raw_events_equal_an_independent_parse(folder, fixture_db):
    with duckdb.connect(str(fixture_db(folder)), read_only=True) as con:
        files = con.execute("SELECT rank, file FROM ranks").fetchall()
        for rank, file in files:
            raw = open(file, "rb").read()
            top = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw, parse_float=Decimal)
            want = Counter(expected_rows(top))
            got_rows = con.execute(f"SELECT {', '.join(COLUMNS)} FROM raw_events WHERE rank = ?", [rank]).fetchall()
            normal: dict[str | None, str | None] = {}  # (a text seen again is normalized once)
            got = Counter(tuple(r[:-1]) + (normal[r[-1]] if r[-1] in normal
                                           else normal.setdefault(r[-1], _normalized_other_args(r[-1])),)
                          for r in got_rows)
            assert sum(want.values()) > 0
            assert got == want, (file, list((got - want).items())[:3], list((want - got).items())[:3])


def test_each_twin_left_out_has_its_twin_checked():
    """A scenario left out of the row-for-row check (TWINS) is recorded like the one it names,
    which is checked: the same recorder parameters but the injected problem (expected.json)."""
    checked = {p.name for p in FOLDERS}
    for name, twin in TWINS.items():
        assert twin in checked and (FIXTURES / name).is_dir(), name
        mine, theirs = (json.loads((FIXTURES / n / "expected.json").read_text())["params"] for n in (name, twin))
        assert mine.get("model") == theirs.get("model") and mine.get("profiler") == theirs.get("profiler"), name
        assert mine.get("backend") == theirs.get("backend"), name
