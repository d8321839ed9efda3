"""--perfetto: one merged trace of all ranks, clocks aligned, findings marked.

Perfetto's trace_processor downloads its binary on first use, which cannot happen offline, so the
trace is verified by parsing the protobuf back with the perfetto package's own `Trace` message.
"""

from __future__ import annotations

import shutil
from collections import defaultdict

import duckdb
import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent
from report_helpers import FIXTURES, injected

from traceanalyze.output.perfetto import build_perfetto_trace

SCENARIO = "input_straggler"


@pytest.fixture(scope="module")
def loaded(fixture_db, fixture_summary):
    return fixture_db(FIXTURES / SCENARIO), fixture_summary(FIXTURES / SCENARIO, f"fixtures/ddp/{SCENARIO}")


def _trace(db, summary) -> Trace:
    con = duckdb.connect(str(db), read_only=True)
    try:
        data = build_perfetto_trace(con, summary)
    finally:
        con.close()
    trace = Trace()
    trace.ParseFromString(data)
    return trace


def _slices(trace: Trace) -> tuple[dict, dict]:
    """(tracks by uuid as (name, parent), slices by track as [(name, begin, end)]), checking nesting."""
    tracks = {p.track_descriptor.uuid: (p.track_descriptor.name or p.track_descriptor.process.process_name,
                                        p.track_descriptor.parent_uuid)
              for p in trace.packet if p.HasField("track_descriptor")}
    open_: dict[int, list] = defaultdict(list)
    done: dict[int, list] = defaultdict(list)
    for p in trace.packet:
        if not p.HasField("track_event"):
            continue
        ev = p.track_event
        assert ev.track_uuid in tracks
        if ev.type == TrackEvent.TYPE_SLICE_BEGIN:
            open_[ev.track_uuid].append((ev.name, p.timestamp))
        elif ev.type == TrackEvent.TYPE_SLICE_END:
            name, begin = open_[ev.track_uuid].pop()  # IndexError = an END without a BEGIN
            assert p.timestamp >= begin
            done[ev.track_uuid].append((name, begin, p.timestamp))
    assert not any(open_.values()), "slices left open"
    return tracks, done


@pytest.fixture(scope="module")
def parsed(loaded):
    return _slices(_trace(*loaded))


def _rank_tracks(tracks: dict, rank: int) -> dict[str, int]:
    (proc,) = [u for u, (name, parent) in tracks.items() if name == f"rank {rank}" and not parent]
    return {name: u for u, (name, parent) in tracks.items() if parent == proc}


def test_every_rank_is_a_process_with_steps_phases_collectives_and_findings(loaded, parsed):
    _, summary = loaded
    tracks, slices = parsed
    for r in summary["ranks"]:
        children = _rank_tracks(tracks, r["rank"])
        assert {"findings", "steps", "phases", "collectives"} <= set(children)
        step_names = {name for name, _, _ in slices[children["steps"]]}
        assert {f"ProfilerStep#{s}" for s in summary["steps"]["aligned"]} <= step_names
        assert slices[children["collectives"]]


def test_the_same_step_overlaps_in_time_on_every_rank(loaded, parsed):
    _, summary = loaded
    tracks, slices = parsed
    for step in summary["steps"]["aligned"]:
        spans = []
        for r in summary["ranks"]:
            steps = slices[_rank_tracks(tracks, r["rank"])["steps"]]
            spans += [(b, e) for name, b, e in steps if name == f"ProfilerStep#{step}"]
        assert max(b for b, _ in spans) < min(e for _, e in spans), f"step {step} not aligned"


def test_clock_offsets_are_applied(loaded, tmp_path):
    db, summary = loaded
    shifted = tmp_path / "shifted.duckdb"
    shutil.copy(db, shifted)
    shift_ns = 7_000_000_000  # pretend rank 1's clock runs 7 s ahead
    con = duckdb.connect(str(shifted))
    con.execute("UPDATE ranks SET clock_offset_ns = clock_offset_ns + ? WHERE rank = 1", [shift_ns])
    con.close()

    def first_step_gap(trace: Trace) -> int:
        tracks, slices = _slices(trace)
        start = {r: min(b for _, b, _ in slices[_rank_tracks(tracks, r)["steps"]]) for r in (0, 1)}
        return start[1] - start[0]

    assert first_step_gap(_trace(db, summary)) - first_step_gap(_trace(shifted, summary)) == shift_ns


def test_findings_are_marked_on_the_ranks_and_steps_they_name(loaded, parsed):
    _, summary = loaded
    tracks, slices = parsed
    want = injected(SCENARIO)
    straggler = [f for f in summary["findings"] if f["rule"] == want["rule"]]
    assert straggler
    marks = slices[_rank_tracks(tracks, want["rank"])["findings"]]
    marked = [name for name, _, _ in marks if want["rule"] in name]
    assert len(marked) == len(straggler[0]["steps"])
    other = next(r["rank"] for r in summary["ranks"] if r["rank"] not in straggler[0]["ranks"])
    assert not [n for n, _, _ in slices[_rank_tracks(tracks, other)["findings"]] if want["rule"] in n]


def test_phases_of_the_summary_are_on_the_phase_track(loaded, parsed):
    _, summary = loaded
    tracks, slices = parsed
    for r in summary["ranks"]:
        expected = sum(len(t["phases"]) for t in summary["timeline"] if t["rank"] == r["rank"])
        assert len(slices[_rank_tracks(tracks, r["rank"])["phases"]]) == expected
