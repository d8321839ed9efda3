"""Perfetto protobuf traces: the packet stream, bounded (pftrace.py turns packets into rows).

A Trace is `repeated TracePacket packet = 1`: the packets are walked one at a time from the
(gunzipped, bounded: source.iter_blocks) byte stream and decoded one by one with the perfetto
package's protos, so memory stays at one block and one packet whatever the file size. Perfetto's
own compressed_packets (zlib) are expanded within a byte budget (a zip bomb is refused). A file
cut short keeps its whole packets; a corrupt header stops the walk (recorded by the caller).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from traceanalyze.errors import TraceanalyzeError, TraceFormatError
from traceanalyze.load.source import StreamCut, iter_blocks, max_uncompressed_bytes

if TYPE_CHECKING:
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import DebugAnnotation, TracePacket

PROTOBUF_SUFFIXES = (".pftrace", ".perfetto-trace", ".pb")
PACKET_TAG = 0x0A  # field 1 (packet), wire type 2 (length-delimited)
MAX_PACKET_BYTES = 64 << 20  # a real packet is at most a few MB; beyond this the length is corrupt
MAX_NESTING = 32  # nested debug annotations deeper than this are corrupt

def _protos():
    """(TracePacket, DecodeError), imported when a protobuf trace is met: the perfetto and
    protobuf modules cost every command a third of its start-up time otherwise."""
    from google.protobuf.message import DecodeError
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket

    return TracePacket, DecodeError


def is_protobuf(path: Path) -> bool:
    name = path.name.lower().removesuffix(".gz")
    return name.endswith(PROTOBUF_SUFFIXES)


class Damaged(Exception):
    """The packet stream is corrupt from this byte on."""

    def __init__(self, offset: int, why: str) -> None:
        super().__init__(why)
        self.offset, self.why = offset, why


def _varint(buf, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise IndexError
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def walk_packets(blocks: Iterator[bytes], state: dict) -> Iterator[bytes]:
    """The packets of a Trace, from a stream of byte blocks. `state['offset']` is the byte
    where the packet being read starts; Damaged at a corrupt tag or length."""
    buf = bytearray()
    pos = 0
    for block in blocks:
        buf += block
        end = len(buf)
        while pos < end:
            try:
                tag, p = _varint(buf, pos, end)
                length, p = _varint(buf, p, end)
            except IndexError:
                break
            except ValueError:
                raise Damaged(state["offset"], "a corrupt packet header") from None
            if tag != PACKET_TAG:
                raise Damaged(state["offset"], f"field tag {tag} where a packet should start")
            if length > MAX_PACKET_BYTES:
                raise Damaged(state["offset"], f"a packet length of {length:,} bytes")
            if p + length > end:
                break
            yield bytes(buf[p:p + length])
            state["offset"] += p + length - pos
            pos = p + length
        del buf[:pos]
        pos = 0
    state["left"] = len(buf)


MAX_INFLATED_BYTES = 64 << 20  # one compressed_packets chunk (Perfetto writes ~1 MB ones)


def _inflate(data: bytes, budget: list[int], path: Path) -> bytes:
    """One compressed_packets chunk, inflated within the file's budget and MAX_INFLATED_BYTES."""
    cap = min(budget[0], MAX_INFLATED_BYTES)
    try:
        out = zlib.decompressobj().decompress(data, cap + 1)
    except zlib.error:
        raise ValueError("undecodable compressed_packets") from None
    if len(out) > cap:
        raise TraceFormatError(f"compressed packets expand beyond {cap >> 20} MiB (a zip bomb?)", str(path))
    budget[0] -= len(out)
    return out


class PacketReader:
    """Decoded packets of one file; what was lost is recorded on the reader."""

    def __init__(self, path: Path, limit: int | None = None) -> None:
        self.path = path
        self.limit = limit
        self.state = {"offset": 0, "left": 0}
        self.truncated_at: int | None = None
        self.lost_bytes = 0
        self.damaged: str | None = None
        self.bad_packets = 0
        self.budget = [max_uncompressed_bytes(path)]
        self.packets = 0

    def _decode(self, data: bytes) -> TracePacket | None:
        trace_packet, decode_error = _protos()
        try:
            return trace_packet.FromString(data)
        except (decode_error, RecursionError, ValueError):
            self.bad_packets += 1
            return None

    def __iter__(self) -> Iterator[TracePacket]:
        blocks = iter_blocks(self.path) if self.limit is None else _head(self.path, self.limit)
        try:
            for data in walk_packets(blocks, self.state):
                packet = self._decode(data)
                if packet is None:
                    continue
                self.packets += 1
                if packet.HasField("compressed_packets"):
                    yield from self._inner(packet.compressed_packets)
                else:
                    yield packet
        except StreamCut:
            self.state["left"] = self.state.get("left", 0)
            self.truncated_at = self.state["offset"]
        except Damaged as exc:
            if self.packets == 0:
                raise TraceFormatError(f"not a Perfetto protobuf trace ({exc.why} at byte {exc.offset:,})",
                                       str(self.path)) from None
            self.damaged = f"{exc.why} at byte {exc.offset:,}"
            return
        if self.state["left"] and self.limit is None:
            self.truncated_at, self.lost_bytes = self.state["offset"], self.state["left"]

    def _inner(self, data: bytes) -> Iterator[TracePacket]:
        try:
            raw = _inflate(data, self.budget, self.path)
            inner = {"offset": 0, "left": 0}
            for chunk in walk_packets(iter([raw]), inner):
                packet = self._decode(chunk)
                if packet is not None and not packet.HasField("compressed_packets"):
                    yield packet
            if inner["left"]:
                self.bad_packets += 1
        except (ValueError, Damaged):
            self.bad_packets += 1


def _head(path: Path, limit: int) -> Iterator[bytes]:
    got = 0
    try:
        for block in iter_blocks(path):
            yield block
            got += len(block)
            if got >= limit:
                return
    except (StreamCut, TraceanalyzeError):
        return


def text_of(value) -> str:
    """A protobuf string field: upb hands back bytes when they are not valid UTF-8."""
    return value if type(value) is str else bytes(value).decode("utf-8", errors="replace")


def metadata_of(packet: TracePacket) -> dict:
    out = {}
    for entry in packet.chrome_events.metadata:
        kind = entry.WhichOneof("value")
        if kind == "json_value":
            try:
                out[text_of(entry.name)] = json.loads(entry.json_value)
            except (ValueError, RecursionError):
                out[text_of(entry.name)] = None
        elif kind == "string_value":
            out[text_of(entry.name)] = text_of(entry.string_value)
        elif kind is not None:
            out[text_of(entry.name)] = getattr(entry, kind)
    return out


HEAD_PACKETS = 64


def read_head_metadata(path: Path, limit: int = 1 << 20) -> dict | None:
    """The trace metadata (chrome_events.metadata) found in the first packets, or None."""
    found = None
    try:
        for i, packet in enumerate(PacketReader(path, limit)):
            if packet.HasField("chrome_events"):
                found = {**(found or {}), **metadata_of(packet)}
            if i >= HEAD_PACKETS:
                break
    except TraceFormatError:
        return None
    return found


def head_metadata(head: bytes) -> dict | None:
    """read_head_metadata for the first bytes of a file (plain or gzip) already in memory."""
    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(31).decompress(head, 1 << 20)
        except zlib.error:
            return None
    trace_packet, decode_error = _protos()
    found = None
    try:
        for data in walk_packets(iter([head]), {"offset": 0, "left": 0}):
            try:
                packet = trace_packet.FromString(data)
            except (decode_error, RecursionError, ValueError):
                return found
            if packet.HasField("chrome_events"):
                found = {**(found or {}), **metadata_of(packet)}
    except Damaged:
        return found
    return found


def annotation_value(ann: DebugAnnotation, depth: int = 0):
    """A debug annotation as the JSON value it carries."""
    if depth > MAX_NESTING:
        return None
    kind = ann.WhichOneof("value")
    if kind is None:
        if ann.dict_entries:
            return {text_of(e.name): annotation_value(e, depth + 1) for e in ann.dict_entries}
        if ann.array_values:
            return [annotation_value(v, depth + 1) for v in ann.array_values]
        return None
    if kind == "legacy_json_value":
        text = text_of(ann.legacy_json_value)
        if text in LEGACY_CONSTANTS:
            return LEGACY_CONSTANTS[text]()
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            return text
    if kind == "nested_value":
        return None
    if kind == "pointer_value":
        return hex(ann.pointer_value)
    if kind == "string_value":
        return text_of(ann.string_value)
    return getattr(ann, kind)


LEGACY_CONSTANTS = {"[]": list, "{}": dict, "null": lambda: None}


def annotation_text(ann: DebugAnnotation) -> str | None:
    """A debug annotation as DuckDB's JSON reader gives the value to a VARCHAR column (the
    loader then TRY_CASTs it, as for the JSON): strings as they are, numbers and bools as JSON
    text, arrays and dicts as compact JSON."""
    kind = ann.WhichOneof("value")
    if kind == "string_value":
        return text_of(ann.string_value)
    if kind == "int_value":
        return str(ann.int_value)
    return value_text(annotation_value(ann))


def value_text(value) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
