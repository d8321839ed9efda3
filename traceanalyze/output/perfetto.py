"""One merged Perfetto trace of all ranks, clocks aligned, phases and findings marked (`--perfetto`).

Each rank is a process ("rank N") with tracks, top to bottom: findings, steps, phases,
collectives, one track per host thread (annotations and operators), one per GPU stream, and a
memory counter. Every timestamp is moved onto the reference rank's clock
(`ts_ns - ranks.clock_offset_ns`), so the same step lines up across ranks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import count
from pathlib import Path

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import CounterDescriptor, TracePacket, TrackDescriptor, TrackEvent
from perfetto.trace_builder.proto_builder import TraceProtoBuilder

from traceanalyze.output.units import PHASE_LABELS

SEQUENCE_ID = 7301
MAX_HOST_SLICES = 400_000  # bound on operator slices; shorter operators are left out beyond it
RANK_PID_BASE = 10_000     # Perfetto pids of the rank processes: 10000 + rank (sorted by rank)


@dataclass(frozen=True)
class Slice:
    ts_ns: int
    dur_ns: int
    name: str
    args: tuple[tuple[str, object], ...] = ()


class _Writer:
    """Packets on one sequence; tracks get uuids in creation order."""

    def __init__(self, t0_ns: int) -> None:
        self.builder = TraceProtoBuilder()
        self.t0_ns = t0_ns
        self._uuids = count(1)
        self._first = True
        self.slices = 0

    def _packet(self) -> TracePacket:
        packet = self.builder.add_packet()
        packet.trusted_packet_sequence_id = SEQUENCE_ID
        if self._first:
            packet.sequence_flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            self._first = False
        return packet

    def process_track(self, rank: int, name: str) -> int:
        uuid = next(self._uuids)
        desc = self._packet().track_descriptor
        desc.uuid = uuid
        desc.process.pid = RANK_PID_BASE + rank
        desc.process.process_name = name
        desc.child_ordering = TrackDescriptor.EXPLICIT
        return uuid

    def child_track(self, parent: int, name: str, order: int, counter_unit: int | None = None) -> int:
        uuid = next(self._uuids)
        desc = self._packet().track_descriptor
        desc.uuid = uuid
        desc.parent_uuid = parent
        desc.name = name
        desc.sibling_order_rank = order
        if counter_unit is not None:
            desc.counter.unit = counter_unit
        return uuid

    def _event(self, track: int, ts_ns: int, kind: int, name: str | None = None) -> TrackEvent:
        packet = self._packet()
        packet.timestamp = max(ts_ns - self.t0_ns, 0)
        event = packet.track_event
        event.type = kind
        event.track_uuid = track
        if name is not None:
            event.name = name
        return event

    def slices_on(self, track: int, slices: Iterable[Slice]) -> None:
        """Slices as BEGIN/END pairs, properly nested (a child never outlives its parent)."""
        stack: list[int] = []
        for s in sorted(slices, key=lambda s: (s.ts_ns, -s.dur_ns)):
            while stack and stack[-1] <= s.ts_ns:
                self._event(track, stack.pop(), TrackEvent.TYPE_SLICE_END)
            end = s.ts_ns + max(s.dur_ns, 0)
            if stack:
                end = min(end, stack[-1])
            event = self._event(track, s.ts_ns, TrackEvent.TYPE_SLICE_BEGIN, s.name)
            _annotate(event, s.args)
            stack.append(end)
            self.slices += 1
        while stack:
            self._event(track, stack.pop(), TrackEvent.TYPE_SLICE_END)

    def note(self, text: str) -> None:
        """An instant on a top-level 'traceanalyze' track, at the start of the trace."""
        uuid = next(self._uuids)
        desc = self._packet().track_descriptor
        desc.uuid = uuid
        desc.name = "traceanalyze"
        self._event(uuid, self.t0_ns, TrackEvent.TYPE_INSTANT, text)

    def counter(self, track: int, points: Iterable[tuple[int, int]]) -> None:
        for ts_ns, value in points:
            self._event(track, ts_ns, TrackEvent.TYPE_COUNTER).counter_value = int(value)


def _annotate(event: TrackEvent, args: tuple[tuple[str, object], ...]) -> None:
    for key, value in args:
        if value is None:
            continue
        ann = event.debug_annotations.add()
        ann.name = key
        if isinstance(value, bool):
            ann.bool_value = value
        elif isinstance(value, int):
            ann.int_value = value
        elif isinstance(value, float):
            ann.double_value = value
        else:
            ann.string_value = str(value)


# ---- what goes on the tracks (SQL on the documented tables; shifted onto the reference clock) ----

def _offsets(con) -> dict[int, int]:
    return {r: off or 0 for r, off in con.execute("SELECT rank, clock_offset_ns FROM ranks ORDER BY rank").fetchall()}


def _t0(con) -> int:
    (t0,) = con.execute("""
        SELECT min(e.ts_ns - coalesce(r.clock_offset_ns, 0)) FROM raw_events AS e JOIN ranks AS r USING (rank)
        WHERE e.ts_ns IS NOT NULL AND e.ph IN ('X', 'i', 'I')""").fetchone()
    return int(t0 or 0)


def _steps(con, rank: int, offset: int) -> dict[int, tuple[int, int]]:
    rows = con.execute("SELECT step, ts_ns, dur_ns FROM steps WHERE rank = ? ORDER BY ts_ns", [rank]).fetchall()
    return {step: (ts - offset, dur) for step, ts, dur in rows}


def _host_min_dur_ns(con) -> int:
    """0, or the shortest operator duration kept when there are more than MAX_HOST_SLICES operators."""
    (n,) = con.execute("SELECT count(*) FROM cpu_ops").fetchone()
    if n <= MAX_HOST_SLICES:
        return 0
    (cut,) = con.execute("SELECT quantile_disc(dur_ns, ?) FROM cpu_ops", [1 - MAX_HOST_SLICES / n]).fetchone()
    return int(cut or 0)


def _host_threads(con, rank: int, offset: int, min_dur_ns: int) -> dict[str, list[Slice]]:
    rows = con.execute("""
        SELECT h.tid, coalesce(t.thread_name, 'thread ' || h.tid) AS thread, h.name, h.ts_ns, h.dur_ns, h.step
        FROM (SELECT rank, pid, tid, name, ts_ns, dur_ns, step FROM annotations WHERE NOT on_gpu
              UNION ALL
              SELECT rank, pid, tid, name, ts_ns, dur_ns, step FROM cpu_ops WHERE dur_ns >= ?) AS h
        LEFT JOIN threads AS t ON t.rank = h.rank AND t.pid = h.pid AND t.tid = h.tid
        WHERE h.rank = ?""", [min_dur_ns, rank]).fetchall()
    threads: dict[str, list[Slice]] = {}
    for _tid, thread, name, ts, dur, step in rows:
        threads.setdefault(thread, []).append(Slice(ts - offset, dur, name, (("step", step),)))
    return threads


def _gpu_streams(con, rank: int, offset: int) -> dict[str, list[Slice]]:
    rows = con.execute("""
        SELECT device, stream, name, kind, ts_ns, dur_ns, step, correlation FROM kernels WHERE rank = ?""",
                       [rank]).fetchall()
    streams: dict[str, list[Slice]] = {}
    for device, stream, name, kind, ts, dur, step, corr in rows:
        streams.setdefault(f"GPU {device} stream {stream}", []).append(
            Slice(ts - offset, dur, name, (("kind", kind), ("step", step), ("correlation", corr))))
    return streams


def _collectives(con, rank: int, offset: int) -> list[Slice]:
    rows = con.execute("""
        SELECT op, seq, process_group, bytes, ts_ns, dur_ns, step FROM collectives WHERE rank = ?""",
                       [rank]).fetchall()
    return [Slice(ts - offset, dur, f"{op} #{seq}",
                  (("process_group", pg), ("bytes", b), ("seq", seq), ("step", step)))
            for op, seq, pg, b, ts, dur, step in rows]


def _memory(con, rank: int, offset: int) -> list[tuple[int, int]]:
    rows = con.execute("""
        SELECT ts_ns, total_allocated_bytes FROM memory
        WHERE rank = ? AND total_allocated_bytes IS NOT NULL ORDER BY ts_ns""", [rank]).fetchall()
    return [(ts - offset, b) for ts, b in rows]


def _phase_slices(con, rank: int, offset: int) -> list[Slice]:
    """The phase intervals of the aligned steps, exact to the ns (phase_intervals)."""
    rows = con.execute("""
        SELECT p.step, p.phase, p.ts_ns, p.dur_ns FROM phase_intervals AS p JOIN aligned_steps USING (step)
        WHERE p.rank = ? ORDER BY p.ts_ns""", [rank]).fetchall()
    return [Slice(ts - offset, dur, PHASE_LABELS[phase],
                  (("phase", phase), ("step", step), ("dur_ms", dur / 1e6)))
            for step, phase, ts, dur in rows]


# ---- from the summary ---------------------------------------------------------------------------

def _finding_slices(summary: dict, rank: int, steps: dict[int, tuple[int, int]]) -> list[Slice]:
    out = []
    for f in summary["findings"]:
        if f.get("ranks") and rank not in f["ranks"]:
            continue
        cost = f.get("cost") or {}
        args = (("rule", f["rule"]), ("severity", f["severity"]), ("title", f["title"]),
                ("cost_ms_per_step", cost.get("ms_per_step")), ("advice", f.get("advice")))
        for step in f.get("steps") or []:
            if step in steps:
                ts, dur = steps[step]
                out.append(Slice(ts, dur, f"[{f['severity']}] {f['rule']}: {f['title']}", args + (("step", step),)))
    return out


def _write_rank(w: _Writer, con, summary: dict, rank: int, offset: int, min_dur_ns: int) -> None:
    proc = w.process_track(rank, f"rank {rank}")
    steps = _steps(con, rank, offset)
    w.slices_on(w.child_track(proc, "findings", 0), _finding_slices(summary, rank, steps))
    w.slices_on(w.child_track(proc, "steps", 1),
                [Slice(ts, dur, f"ProfilerStep#{s}", (("step", s),)) for s, (ts, dur) in steps.items()])
    w.slices_on(w.child_track(proc, "phases", 2), _phase_slices(con, rank, offset))
    w.slices_on(w.child_track(proc, "collectives", 3), _collectives(con, rank, offset))
    order = 4
    for thread, slices in sorted(_host_threads(con, rank, offset, min_dur_ns).items()):
        w.slices_on(w.child_track(proc, thread, order), slices)
        order += 1
    for stream, slices in sorted(_gpu_streams(con, rank, offset).items()):
        w.slices_on(w.child_track(proc, stream, order), slices)
        order += 1
    points = _memory(con, rank, offset)
    if points:
        w.counter(w.child_track(proc, "allocated memory", order, CounterDescriptor.UNIT_SIZE_BYTES), points)


def build_perfetto_trace(con, summary: dict) -> bytes:
    """The merged trace as serialized Perfetto protobuf (a `Trace` message)."""
    w = _Writer(_t0(con))
    min_dur_ns = _host_min_dur_ns(con)
    if min_dur_ns:
        w.note(f"operators shorter than {min_dur_ns / 1e3:.1f} us are left out "
               f"(more than {MAX_HOST_SLICES:,} operators)")
    for rank, offset in _offsets(con).items():
        _write_rank(w, con, summary, rank, offset, min_dur_ns)
    return w.builder.serialize()


def write_perfetto_trace(con, summary: dict, out_path: Path) -> Path:
    from traceanalyze.atomic import write_bytes_atomic

    write_bytes_atomic(out_path, build_perfetto_trace(con, summary))
    return out_path
