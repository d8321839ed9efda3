"""Convert a Kineto / Chrome JSON trace to a Perfetto protobuf trace (.pftrace), Kineto's layout.

    python tests/pftrace_convert.py rank0.json.gz rank0.pftrace [--gzip] [--compress] [--reset-every N]

Layout (what Kineto's PerfettoTraceBuilder and torch's .pftrace export write):
- one sequence (trusted_packet_sequence_id 1); event names, categories and debug annotation names
  interned (InternedData; SEQ_INCREMENTAL_STATE_CLEARED on the first packet and again every
  `--reset-every` packets, which starts the interning over);
- a process track (ProcessDescriptor) per pid and a thread track (ThreadDescriptor) per pid/tid
  (GPU streams are the "threads" of the device "process", as in the JSON). A pid or tid that is
  not a 32-bit integer is a named track (its name is the text; a tid's track is a child of its
  pid's track);
- complete (X) events are TYPE_SLICE_BEGIN / TYPE_SLICE_END pairs; slices that overlap without
  nesting on one thread go on an unnamed child track of the thread track (an overflow lane);
- the Chrome args are debug annotations (int, uint, double, string, bool, nested dict / array;
  a JSON null, or an integer beyond 64 bits, as legacy_json_value);
- instants (i) are TYPE_INSTANT; flow events (s / f) are TYPE_INSTANT events carrying the flow
  name / category with flow_ids (s) or terminating_flow_ids (f); counters (C) are TYPE_COUNTER
  events (named as the event) on one counter track per (thread, name, series key), named after
  the series key (the args key of its value);
- metadata events: process_name / process_labels / process_sort_index and thread_name /
  thread_sort_index are descriptor fields (process_name, process_labels, legacy_sort_index,
  thread_name), on a descriptor packet stamped with the event's ts; any other event is a
  TrackEvent whose legacy_event.phase is its ph (Chrome's own JSON-in-protobuf carrier);
- the trace's top-level keys (distributedInfo, baseTimeNanoseconds, deviceProperties, ...) are
  the first packet's chrome_events.metadata entries (json_value for objects and arrays).
  Timestamps are absolute ns (baseTimeNanoseconds already added).

`--compress` writes the events as Perfetto compressed_packets (zlib), `--gzip` gzips the file.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import zlib
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

SEQUENCE_ID = 1
INT32 = range(-(1 << 31), 1 << 31)
TIME_LIMIT_NS = 1 << 62
DESCRIPTOR_NAMES = {"process_name": "name", "process_labels": "labels", "process_sort_index": "sort_index",
                    "thread_name": "name", "thread_sort_index": "sort_index"}


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def frame(packet_bytes: bytes) -> bytes:
    """One `repeated TracePacket packet = 1` entry of a Trace."""
    return b"\x0a" + _varint(len(packet_bytes)) + packet_bytes


def text(value) -> str | None:
    """A JSON value as DuckDB's JSON reader gives it to a VARCHAR column."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return repr(float(value))
    if isinstance(value, int):
        return str(value)
    return json.dumps(_plain(value), separators=(",", ":"), ensure_ascii=False)


def _plain(value):
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def time_ns(value, base_ns: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
        return None
    ns = int((value * 1000).to_integral_value(ROUND_HALF_UP)) if isinstance(value, Decimal) else value * 1000
    ns += base_ns
    return ns if 0 <= ns <= TIME_LIMIT_NS else None


def _int32_text(t: str | None) -> int | None:
    if t is None:
        return None
    try:
        n = int(t)
    except ValueError:
        return None
    return n if str(n) == t and n in INT32 else None


def annotate(ann: pb.DebugAnnotation, value) -> None:
    if isinstance(value, bool):
        ann.bool_value = value
    elif isinstance(value, int):
        if -(1 << 63) <= value < (1 << 63):
            ann.int_value = value
        elif 0 <= value < (1 << 64):
            ann.uint_value = value
        else:
            ann.legacy_json_value = str(value)
    elif isinstance(value, Decimal):
        ann.double_value = float(value)
    elif isinstance(value, str):
        ann.string_value = value
    elif isinstance(value, list):
        for v in value:
            annotate(ann.array_values.add(), v)
        if not value:
            ann.legacy_json_value = "[]"
    elif isinstance(value, dict):
        for k, v in value.items():
            entry = ann.dict_entries.add()
            entry.name = k
            annotate(entry, v)
        if not value:
            ann.legacy_json_value = "{}"
    else:
        ann.legacy_json_value = "null"


class Converter:
    def __init__(self, out, reset_every: int = 0) -> None:
        self.out = out
        self.reset_every = reset_every
        self.packets = 0
        self.uuids = iter(range(1, 1 << 62))
        self.tracks: dict[tuple, int] = {}
        self.interned: dict[str, dict[str, int]] = {}
        self.skipped = 0

    def packet(self, ts_ns: int | None = None) -> pb.TracePacket:
        p = pb.TracePacket()
        p.trusted_packet_sequence_id = SEQUENCE_ID
        if self.packets == 0 or (self.reset_every and self.packets % self.reset_every == 0):
            p.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            self.interned = {"event_names": {}, "event_categories": {}, "debug_annotation_names": {}}
        else:
            p.sequence_flags = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        if ts_ns is not None:
            p.timestamp = ts_ns
        self.packets += 1
        return p

    def emit(self, p: pb.TracePacket) -> None:
        self.out(frame(p.SerializeToString()))

    def iid(self, p: pb.TracePacket, table: str, value: str) -> int:
        known = self.interned[table]
        if value not in known:
            known[value] = len(known) + 1
            entry = getattr(p.interned_data, table).add()
            entry.iid = known[value]
            entry.name = value
        return known[value]

    # tracks -----------------------------------------------------------------------------------
    def process_track(self, pid: str | None) -> int:
        key = ("p", pid)
        if key not in self.tracks:
            uuid = self.tracks[key] = next(self.uuids)
            p = self.packet()
            p.track_descriptor.uuid = uuid
            if _int32_text(pid) is not None:
                p.track_descriptor.process.pid = _int32_text(pid)
            elif pid is not None:
                p.track_descriptor.name = pid
            self.emit(p)
        return self.tracks[key]

    def thread_track(self, pid: str | None, tid: str | None) -> int:
        key = ("t", pid, tid)
        if key not in self.tracks:
            parent = self.process_track(pid)
            uuid = self.tracks[key] = next(self.uuids)
            p = self.packet()
            d = p.track_descriptor
            d.uuid = uuid
            d.parent_uuid = parent
            if _int32_text(pid) is not None and _int32_text(tid) is not None:
                d.thread.pid, d.thread.tid = _int32_text(pid), _int32_text(tid)
            elif tid is not None:
                d.name = tid
            self.emit(p)
        return self.tracks[key]

    def child_track(self, key: tuple, parent: int, name: str | None = None, counter: bool = False) -> int:
        if key not in self.tracks:
            uuid = self.tracks[key] = next(self.uuids)
            p = self.packet()
            p.track_descriptor.uuid = uuid
            p.track_descriptor.parent_uuid = parent
            if name is not None:
                p.track_descriptor.name = name
            if counter:
                p.track_descriptor.counter.SetInParent()
            self.emit(p)
        return self.tracks[key]

    # events -----------------------------------------------------------------------------------
    def track_event(self, ts_ns, track: int, kind: int, e: dict | None, args: bool = True,
                    **extra) -> pb.TracePacket:
        p = self.packet(ts_ns if ts_ns is not None and ts_ns >= 0 else None)
        te = p.track_event
        te.type = kind
        te.track_uuid = track
        if e is not None:
            if isinstance(e.get("name"), str):
                te.name_iid = self.iid(p, "event_names", e["name"])
            if isinstance(e.get("cat"), str):
                te.category_iids.append(self.iid(p, "event_categories", e["cat"]))
            if args and isinstance(e.get("args"), dict):
                for key, value in e["args"].items():
                    ann = te.debug_annotations.add()
                    ann.name_iid = self.iid(p, "debug_annotation_names", key)
                    annotate(ann, value)
        for key, value in extra.items():
            if key == "phase":
                te.legacy_event.phase = value
            elif isinstance(value, list):
                getattr(te, key).extend(value)
            else:
                setattr(te, key, value)
        return p

    def metadata_event(self, e: dict, ts_ns: int | None, pid: str | None, tid: str | None) -> bool:
        """A process / thread metadata event as descriptor fields; False when it does not fit."""
        name, args = e.get("name"), e.get("args")
        key = DESCRIPTOR_NAMES.get(name)
        if key is None or not isinstance(args, dict) or set(args) != {key} or _int32_text(pid) is None:
            return False
        value = args[key]
        is_process = name.startswith("process_")
        if (is_process and tid != "0") or (not is_process and _int32_text(tid) is None):
            return False
        if key == "sort_index" and not (isinstance(value, int) and not isinstance(value, bool) and value in INT32):
            return False
        if key != "sort_index" and not isinstance(value, str):
            return False
        uuid = self.process_track(pid) if is_process else self.thread_track(pid, tid)
        p = self.packet(ts_ns)
        d = p.track_descriptor
        d.uuid = uuid
        if is_process:
            d.process.pid = _int32_text(pid)
            if key == "name":
                d.process.process_name = value
            elif key == "labels":
                d.process.process_labels.append(value)
            else:
                d.process.legacy_sort_index = value
        else:
            d.parent_uuid = self.process_track(pid)
            d.thread.pid, d.thread.tid = _int32_text(pid), _int32_text(tid)
            if key == "name":
                d.thread.thread_name = value
            else:
                d.thread.legacy_sort_index = value
        self.emit(p)
        return True

    def convert(self, doc) -> None:
        events = doc if isinstance(doc, list) else doc.get("traceEvents", [])
        meta = {} if isinstance(doc, list) else {k: v for k, v in doc.items() if k != "traceEvents"}
        base = meta.get("baseTimeNanoseconds")
        base_ns = base if isinstance(base, int) and not isinstance(base, bool) and 0 <= base < 2**62 else 0
        p = self.packet()
        for key, value in meta.items():
            entry = p.chrome_events.metadata.add()
            entry.name = key
            if isinstance(value, str):
                entry.string_value = value
            elif isinstance(value, int) and not isinstance(value, bool) and -(1 << 63) <= value < (1 << 63):
                entry.int_value = value
            else:
                entry.json_value = json.dumps(_plain(value))
        self.emit(p)
        slices: dict[int, list] = {}
        timed: list[tuple[int, int, object]] = []  # (ts, order, packet) of non-slice events
        for i, e in enumerate(events):
            if not isinstance(e, dict):
                self.skipped += 1
                continue
            ph, pid, tid = e.get("ph"), text(e.get("pid")), text(e.get("tid"))
            ts_ns = time_ns(e.get("ts"), base_ns)
            if ph == "M" and self.metadata_event(e, ts_ns, pid, tid):
                continue
            if ts_ns is None and ph != "M":
                self.skipped += 1
                continue
            track = self.thread_track(pid, tid)
            if ph == "X":
                dur = time_ns(e.get("dur"), 0)
                if dur is None or ts_ns + dur > TIME_LIMIT_NS:
                    self.skipped += 1
                    continue
                slices.setdefault(track, []).append((ts_ns, -dur, i, e))
            elif ph == "i" or (ph in ("s", "f") and _flow_id(e) is not None):
                extra = {"flow_ids": [_flow_id(e)]} if ph == "s" else \
                    {"terminating_flow_ids": [_flow_id(e)]} if ph == "f" else {}
                timed.append((ts_ns, i, (ts_ns, track, pb.TrackEvent.TYPE_INSTANT, e, True, extra)))
            elif ph == "C" and isinstance(e.get("args"), dict) and isinstance(e.get("name"), str):
                for key, value in e["args"].items():
                    if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
                        continue
                    counter = self.child_track(("c", track, e["name"], key), track, key, counter=True)
                    extra = ({"counter_value": value} if isinstance(value, int) and -(1 << 63) <= value < (1 << 63)
                             else {"double_counter_value": float(value)})
                    timed.append((ts_ns, i, (ts_ns, counter, pb.TrackEvent.TYPE_COUNTER, e, False, extra)))
            elif isinstance(ph, str) and len(ph) == 1:
                spec = (ts_ns, track, pb.TrackEvent.TYPE_UNSPECIFIED, e, True, {"phase": ord(ph)})
                timed.append((ts_ns if ts_ns is not None else -1, i, spec))
            else:
                self.skipped += 1
        for track, items in slices.items():
            timed.extend(self._slice_packets(track, sorted(items, key=lambda s: s[:3])))
        timed.sort(key=lambda t: (t[0], t[1]))
        for _, _, spec in timed:  # (packets built in time order, so interning follows it)
            self.emit(self.track_event(*spec[:5], **spec[5]))

    def _slice_packets(self, track: int, items: list):
        """BEGIN/END packets of one thread's slices: nested ones on the thread track, the rest
        on overflow lanes (unnamed child tracks)."""
        lanes: list[tuple[int, list[int]]] = []
        order = 0
        for ts_ns, neg_dur, _, e in items:
            end = ts_ns - neg_dur
            placed = None
            for uuid, stack in lanes:
                while stack and stack[-1] <= ts_ns:
                    order += 1
                    end_ns = stack.pop()
                    yield (end_ns, order, (end_ns, uuid, pb.TrackEvent.TYPE_SLICE_END, None, False, {}))
                if placed is None and (not stack or end <= stack[-1]):
                    placed = (uuid, stack)
            if placed is None:
                uuid = track if not lanes else self.child_track(("lane", track, len(lanes)), track)
                placed = (uuid, [])
                lanes.append(placed)
            order += 1
            yield (ts_ns, order, (ts_ns, placed[0], pb.TrackEvent.TYPE_SLICE_BEGIN, e, True, {}))
            placed[1].append(end)
        for uuid, stack in lanes:
            while stack:
                order += 1
                end_ns = stack.pop()
                yield (end_ns, order, (end_ns, uuid, pb.TrackEvent.TYPE_SLICE_END, None, False, {}))

def _flow_id(e: dict) -> int | None:
    fid = e.get("id")
    return fid if isinstance(fid, int) and not isinstance(fid, bool) and 0 <= fid < (1 << 64) else None


def read_json(path: Path):
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rb") as fh:
        return json.load(fh, parse_float=Decimal)


COMPRESSED_CHUNK_BYTES = 256 << 10


def convert_file(src: Path, dst: Path, gzipped: bool = False, compress: bool = False,
                 reset_every: int = 0) -> int:
    """Write `dst` from the JSON trace `src`; returns the number of events skipped (not representable)."""
    return convert_doc(read_json(src), dst, gzipped, compress, reset_every)


def convert_doc(doc, dst: Path, gzipped: bool = False, compress: bool = False, reset_every: int = 0) -> int:
    """convert_file for a JSON trace already read (read_json's value, left unchanged)."""
    frames: list[bytes] = []
    conv = Converter(frames.append, reset_every)
    conv.convert(doc)
    if compress:
        chunks, chunk, size = [], [], 0
        for f in frames:
            chunk.append(f)
            size += len(f)
            if size >= COMPRESSED_CHUNK_BYTES:
                chunks.append(b"".join(chunk))
                chunk, size = [], 0
        if chunk:
            chunks.append(b"".join(chunk))
        frames = []
        for c in chunks:
            p = pb.TracePacket()
            p.compressed_packets = zlib.compress(c)
            frames.append(frame(p.SerializeToString()))
    data = b"".join(frames)
    dst.write_bytes(gzip.compress(data, compresslevel=1) if gzipped else data)
    return conv.skipped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--gzip", action="store_true", help="gzip the output file")
    ap.add_argument("--compress", action="store_true", help="write Perfetto compressed_packets")
    ap.add_argument("--reset-every", type=int, default=0, help="clear the interning every N packets")
    a = ap.parse_args(argv)
    skipped = convert_file(a.src, a.dst, a.gzip, a.compress, a.reset_every)
    if skipped:
        print(f"{a.src}: {skipped} events not representable were skipped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
