"""Perfetto protobuf traces (.pftrace, .perfetto-trace, .pb; gzipped or not) -> `raw_events`.

The only module that knows the Perfetto TrackEvent layout (Kineto's PerfettoTraceBuilder and
torch's .pftrace export; tests/pftrace_convert.py writes it from the JSON). It produces the rows
the JSON reading produces for the same events:

- track descriptors give pid / tid: a ThreadDescriptor its (pid, tid); a ProcessDescriptor its
  pid; a named child track its parent's pid and its name as tid (e.g. a GPU stream track); a
  named top-level track its name as pid; an unnamed child track its parent's pid / tid;
- process_name / process_labels / process_sort_index (tid '0', as Kineto writes them) and
  thread_name / thread_sort_index descriptor fields become ph 'M' rows, stamped with the
  descriptor packet's timestamp;
- TYPE_SLICE_BEGIN / TYPE_SLICE_END pairs (per track, nested) become one X row with its dur;
  TYPE_INSTANT an 'i' row, or 's' / 'f' rows when it carries flow_ids / terminating_flow_ids
  (flows on a slice: 's' / 'f' rows named 'ac2g' at the slice's start); TYPE_COUNTER a 'C' row
  named after its counter track; a legacy_event's phase is its row's ph;
- names, categories and annotation names are resolved through the sequence's interned data
  (cleared by SEQ_INCREMENTAL_STATE_CLEARED); debug annotations are the args, typed into the
  columns as the JSON reading types them (ARG_FIELDS: text, then TRY_CAST in SQL);
- chrome_events.metadata entries are the trace metadata (distributedInfo, baseTimeNanoseconds,
  ...); timestamps are absolute ns.

Rows go to DuckDB in batches through Parquet files written by polars (bounded memory).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import polars as pl
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket, TrackEvent

from traceanalyze.load.extension import native as _native
from traceanalyze.load.discover import TraceFile
from traceanalyze.load.pftrace_packets import PacketReader, annotation_text, metadata_of, text_of
from traceanalyze.load.rank_read import RankRead

# args keys kept as typed columns: (key, column, SQL type), and their other spellings (the first
# non-NULL value wins): the native JSON reader's own lists, so both readers type the same keys
ARG_FIELDS = [tuple(field) for field in _native.arg_fields()]
ARG_ALIASES = dict(_native.arg_aliases())
BATCH_ROWS = 200_000
TIME_LIMIT_NS = 1 << 62  # (as the JSON reading: beyond it a time is malformed, NULL)
MAX_TRACK_DEPTH = 32
FLOW_NAME = "ac2g"  # name and category of the rows of flows attached to slices (Kineto's)
CLEARED = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
BEGIN, END, INSTANT, COUNTER = (TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END,
                                TrackEvent.TYPE_INSTANT, TrackEvent.TYPE_COUNTER)
# args columns of the staging rows: every key read (aliases included)
ARG_COLUMNS = [k for key, _, _ in ARG_FIELDS for k in [key, *ARG_ALIASES.get(key, [])]]
# a debug annotation name -> its staging column
ARG_INDEX = {k: i for i, k in enumerate(ARG_COLUMNS)}
SCHEMA = {"ph": pl.Utf8, "cat": pl.Utf8, "name": pl.Utf8, "pid": pl.Utf8, "tid": pl.Utf8, "track": pl.UInt64,
          "ts_ns": pl.Int64, "dur_ns": pl.Int64, "flow_id": pl.Utf8, **{f"a{i}": pl.Utf8 for i in range(len(ARG_COLUMNS))}}
NO_ARGS = (None,) * len(ARG_COLUMNS)
DESCRIPTOR_ROWS = [  # (descriptor, field, M event name, args key)
    ("process", "process_name", "process_name", "name"), ("process", "process_labels", "process_labels", "labels"),
    ("process", "legacy_sort_index", "process_sort_index", None),
    ("thread", "thread_name", "thread_name", "name"), ("thread", "legacy_sort_index", "thread_sort_index", None),
]


def _ns(value: int) -> int | None:
    return value if -TIME_LIMIT_NS <= value <= TIME_LIMIT_NS else None


class _Sequence:
    """Interned data and defaults of one packet sequence (incremental state)."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.names: dict[int, str] = {}
        self.cats: dict[int, str] = {}
        self.ann_names: dict[int, str] = {}
        self.ann_strings: dict[int, str] = {}
        self.default_track: int | None = None


class _Reading:
    """Packets -> staged rows of one file."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.rows: list[tuple] = []
        self.parts: list[str] = []
        self.events = 0
        self.seqs: dict[int, _Sequence] = {}
        self.tracks: dict[int, dict] = {}
        self.open: dict[int, list[tuple]] = {}  # track -> stack of open slices
        self.metadata: dict = {}
        self.counts = {"unmatched-slice-end": 0, "unknown-interned": 0, "unknown-event-type": 0}

    def add(self, row: tuple) -> None:
        self.rows.append(row)
        if len(self.rows) >= BATCH_ROWS:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            part = self.work / f"rows{len(self.parts)}.parquet"
            pl.DataFrame(self.rows, schema=SCHEMA, orient="row").write_parquet(part)
            self.parts.append(str(part))
            self.events += len(self.rows)
            self.rows = []

    def packet(self, packet: TracePacket) -> None:
        seq = self.seqs.get(packet.trusted_packet_sequence_id)
        if seq is None:
            seq = self.seqs[packet.trusted_packet_sequence_id] = _Sequence()
        if packet.sequence_flags & CLEARED or packet.incremental_state_cleared:
            seq.clear()
        if packet.HasField("interned_data"):
            self._intern(seq, packet.interned_data)
        if packet.HasField("trace_packet_defaults"):
            defaults = packet.trace_packet_defaults.track_event_defaults
            seq.default_track = defaults.track_uuid if defaults.HasField("track_uuid") else None
        kind = packet.WhichOneof("data")
        ts = _ns(packet.timestamp) if packet.HasField("timestamp") else None
        if kind == "track_event":
            self._event(packet.track_event, ts, seq)
        elif kind == "track_descriptor":
            self._descriptor(packet.track_descriptor, ts)
        elif kind == "chrome_events":
            self.metadata.update(metadata_of(packet))

    @staticmethod
    def _intern(seq: _Sequence, data) -> None:
        for entry in data.event_names:
            seq.names[entry.iid] = text_of(entry.name)
        for entry in data.event_categories:
            seq.cats[entry.iid] = text_of(entry.name)
        for entry in data.debug_annotation_names:
            seq.ann_names[entry.iid] = text_of(entry.name)
        for entry in data.debug_annotation_string_values:
            seq.ann_strings[entry.iid] = entry.str.decode("utf-8", errors="replace")

    def _descriptor(self, d, ts: int | None) -> None:
        info = self.tracks.setdefault(d.uuid, {})
        if d.HasField("parent_uuid"):
            info["parent"] = d.parent_uuid
        if d.HasField("name"):
            info["name"] = text_of(d.name)
        if d.HasField("counter"):
            info["counter"] = True
        if d.HasField("process") and d.process.HasField("pid"):
            info["pid"] = str(d.process.pid)
        if d.HasField("thread") and d.thread.HasField("pid") and d.thread.HasField("tid"):
            info["pid"], info["tid"] = str(d.thread.pid), str(d.thread.tid)
        for which, field, event, key in DESCRIPTOR_ROWS:
            if not d.HasField(which):
                continue
            desc = getattr(d, which)
            if field == "process_labels":
                if not desc.process_labels:
                    continue
                value = ",".join(map(text_of, desc.process_labels))
            elif not desc.HasField(field):
                continue
            else:
                value = getattr(desc, field)
                value = text_of(value) if key is not None else value
            args = list(NO_ARGS)
            if key is not None:  # (process_labels: text; names: text)
                args[ARG_INDEX[key]] = value
            tid = "0" if which == "process" else None
            self.add(("M", None, event, None, tid, d.uuid, ts, None, None, *args))

    def _args(self, te, seq: _Sequence) -> tuple:
        if not te.debug_annotations:
            return NO_ARGS
        args = list(NO_ARGS)
        names = seq.ann_names
        for ann in te.debug_annotations:
            iid = ann.name_iid
            at = ARG_INDEX.get(names.get(iid) if iid else text_of(ann.name))
            if at is None:
                continue
            if ann.string_value_iid:
                args[at] = seq.ann_strings.get(ann.string_value_iid)
            else:
                args[at] = annotation_text(ann)
        return tuple(args)

    def _names(self, te, seq: _Sequence) -> tuple[str | None, str | None]:
        which = te.WhichOneof("name_field")
        if which == "name":
            name = text_of(te.name)
        elif which == "name_iid":
            name = seq.names.get(te.name_iid)
            if name is None:
                self.counts["unknown-interned"] += 1
        else:
            name = None
        cats = [text_of(c) for c in te.categories]
        for iid in te.category_iids:
            cat = seq.cats.get(iid)
            if cat is None:
                self.counts["unknown-interned"] += 1
            else:
                cats.append(cat)
        return name, ",".join(cats) if cats else None

    def _event(self, te, ts: int | None, seq: _Sequence) -> None:
        track = te.track_uuid if te.HasField("track_uuid") else seq.default_track
        kind = te.type
        if kind == END:
            stack = self.open.get(track)
            if not stack or ts is None:
                self.counts["unmatched-slice-end"] += 1
                return
            ph, cat, name, begin_ts, args = stack.pop()
            self.add(("X", cat, name, None, None, track, begin_ts, ts - begin_ts, None, *args))
            return
        name, cat = self._names(te, seq)
        legacy = te.legacy_event.phase if te.HasField("legacy_event") else 0
        if legacy and not 0x21 <= legacy <= 0x7E:  # a Chrome phase is one printable ASCII letter
            self.counts["unknown-event-type"] += 1
            return
        if legacy:
            ev = te.legacy_event
            pid = str(ev.pid_override) if ev.HasField("pid_override") else None
            tid = str(ev.tid_override) if ev.HasField("tid_override") else None
            dur = ev.duration_us * 1000 if ev.HasField("duration_us") else None
            self.add((chr(legacy), cat, name, pid, tid, track, ts, dur, None, *self._args(te, seq)))
            return
        if ts is None:
            self.counts["unknown-event-type"] += 1
            return
        flows = [("s", f) for f in (*te.flow_ids, *te.flow_ids_old)] + \
                [("f", f) for f in (*te.terminating_flow_ids, *te.terminating_flow_ids_old)]
        if kind == BEGIN:
            self.open.setdefault(track, []).append(("X", cat, name, ts, self._args(te, seq)))
            for ph, fid in flows:
                self.add((ph, FLOW_NAME, FLOW_NAME, None, None, track, ts, None, str(fid), *NO_ARGS))
        elif kind == INSTANT:
            args = self._args(te, seq)
            if not flows:
                self.add(("i", cat, name, None, None, track, ts, None, None, *args))
            for ph, fid in flows:
                self.add((ph, cat, name, None, None, track, ts, None, str(fid), *args))
        elif kind == COUNTER:
            self.add(("C", cat, name, None, None, track, ts, None, None, *NO_ARGS))
        else:
            self.counts["unknown-event-type"] += 1

    def track_rows(self) -> list[tuple]:
        """(uuid, pid, tid, counter name) of every track."""
        def resolve(uuid, depth: int = 0) -> tuple[str | None, str | None]:
            info = self.tracks.get(uuid)
            if info is None or depth > MAX_TRACK_DEPTH:
                return None, None
            parent = info.get("parent")
            if "pid" in info:
                return info["pid"], info.get("tid")
            if info.get("counter"):
                return resolve(parent, depth + 1)
            if "name" in info:
                return (resolve(parent, depth + 1)[0] if parent is not None else info["name"],
                        info["name"] if parent is not None else None)
            return resolve(parent, depth + 1) if parent is not None else (None, None)
        return [(uuid, *resolve(uuid), info.get("name") if info.get("counter") else None)
                for uuid, info in self.tracks.items()]


def _insert(con, reading: _Reading, rank: int) -> None:
    tracks = pl.DataFrame(reading.track_rows(), orient="row",
                          schema={"uuid": pl.UInt64, "pid": pl.Utf8, "tid": pl.Utf8, "counter_name": pl.Utf8})
    track_file = reading.work / "tracks.parquet"
    tracks.write_parquet(track_file)
    args = []
    for key, col, sqltype in ARG_FIELDS:
        values = [f"TRY_CAST(s.a{ARG_COLUMNS.index(k)} AS {sqltype})" for k in [key, *ARG_ALIASES.get(key, [])]]
        args.append(f"{values[0] if len(values) == 1 else 'coalesce(' + ', '.join(values) + ')'} AS {col}")
    con.execute(f"""
        INSERT INTO raw_events BY NAME
        SELECT CAST($rank AS INTEGER) AS rank, s.ph, s.cat,
               CASE WHEN s.ph = 'C' THEN coalesce(s.name, t.counter_name) ELSE s.name END AS name,
               coalesce(s.pid, t.pid) AS pid, coalesce(s.tid, t.tid) AS tid,
               s.ts_ns, s.dur_ns, s.flow_id, {", ".join(args)}
        FROM read_parquet($parts) AS s LEFT JOIN read_parquet($tracks) AS t ON t.uuid = s.track
    """, {"rank": rank, "parts": reading.parts, "tracks": str(track_file)})


NOTES = {
    "unmatched-slice-end": "slice ends without a begin on their track were skipped",
    "unclosed-slices": "slice begins without an end were skipped",
    "unknown-interned": "names or categories referring to interned data never sent were read as NULL",
    "unknown-event-type": "track events of an unknown type (or without a timestamp) were skipped",
    "bad-packets": "packets that could not be decoded were skipped",
}


def read_pftrace(con, tf: TraceFile) -> RankRead:
    """Read one rank's Perfetto protobuf trace into raw_events (rank = tf.rank)."""
    reader = PacketReader(tf.path)
    with tempfile.TemporaryDirectory(prefix="traceanalyze-pf-", dir=os.environ.get("TRACEANALYZE_TMPDIR")) as work:
        reading = _Reading(Path(work))
        for packet in reader:
            reading.packet(packet)
        reading.counts["unclosed-slices"] = sum(len(stack) for stack in reading.open.values())
        reading.counts["bad-packets"] = reader.bad_packets
        reading.flush()
        if reading.parts:
            _insert(con, reading, tf.rank)
    notes = [(kind, NOTES[kind], n) for kind, n in reading.counts.items() if n]
    if reader.damaged:
        notes.append(("damaged", (f"the packet stream is corrupt from {reader.damaged}: "
                                  "kept the packets before it"), None))
    return RankRead(metadata=reading.metadata, events=reading.events, events_bytes=reader.state["offset"],
                    truncated_at_byte=reader.truncated_at, lost_bytes=reader.lost_bytes, notes=notes)
