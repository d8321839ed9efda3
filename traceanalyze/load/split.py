"""Split a trace's `traceEvents` array into JSON-array part files that DuckDB reads in parallel.

This is the only module besides `kineto.py` that knows the Chrome/Kineto JSON layout:
`{...metadata..., "traceEvents": [ {event}, {event}, ... ], ...metadata...}` (or a bare
top-level array). The events are copied, never decoded, in blocks: memory stays at a few
blocks whatever the file size. Part boundaries are placed between two events; a wrong
guess (an object inside an event's args) cannot go unnoticed, because DuckDB then fails
to parse the part and the loader retries with a single part.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from traceanalyze.errors import TraceFormatError
from traceanalyze.load.source import StreamCut, iter_blocks

PART_TARGET_BYTES = 48 << 20
HEAD_SEARCH_BYTES = 256 << 20
EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
# between two events: `}` `,` whitespace, then `{` opening an event
EVENT_GAP = re.compile(rb'\}\s*,\s*(?=\{\s*")')
TAIL_CANDIDATES = 64
HOLD_BACK_BYTES = 8 << 20  # the array's end and the metadata after it must fit here


@dataclass
class SplitTrace:
    """The events of one trace as part files, plus the metadata around them."""

    parts: list[Path]
    metadata: dict
    events_bytes: int
    truncated_at_byte: int | None = None  # uncompressed offset of the cut, when truncated
    lost_bytes: int = 0
    notes: list[tuple[str, str]] = field(default_factory=list)  # (kind, message)


class _PartWriter:
    """Writes `[` + events + `]` files of about PART_TARGET_BYTES each."""

    def __init__(self, out_dir: Path, stem: str, target_bytes: int) -> None:
        self.out_dir, self.stem, self.target = out_dir, stem, target_bytes
        self.parts: list[Path] = []
        self.fh = None
        self.size = 0
        self.events_bytes = 0

    def _open(self) -> None:
        path = self.out_dir / f"{self.stem}.part{len(self.parts):04d}.json"
        self.parts.append(path)
        self.fh = open(path, "wb")
        self.fh.write(b"[")
        self.size = 0

    def write(self, data: bytes) -> None:
        """Append event text; start a new part at an event gap once the target is reached."""
        if self.fh is None:
            self._open()
        if self.size + len(data) >= self.target:
            gap = EVENT_GAP.search(data, max(0, self.target - self.size))
            if gap is not None:
                self._emit(data[: gap.start() + 1])
                self.close()
                self._open()
                data = data[gap.end():]
        self._emit(data)

    def _emit(self, data: bytes) -> None:
        self.fh.write(data)
        self.size += len(data)
        self.events_bytes += len(data)

    def close(self) -> None:
        if self.fh is not None:
            self.fh.write(b"]")
            self.fh.close()
            self.fh = None


def _find_events_start(buf: bytes) -> int | None:
    """Offset just after the `[` that opens the events, or None if not seen yet."""
    stripped = buf.lstrip()
    if stripped.startswith(b"["):  # Chrome "JSON Array Format": the file is the array
        return len(buf) - len(stripped) + 1
    m = EVENTS_KEY.search(buf)
    return m.end() if m else None


def _parse_metadata(head: bytes, tail: bytes) -> dict | None:
    """The top-level object with `traceEvents` emptied, or None if head+tail is not JSON."""
    try:
        obj = json.loads(head + b"]" + tail)
    except (ValueError, RecursionError):
        return None
    if isinstance(obj, list):
        return {}
    return obj if isinstance(obj, dict) else None


def _find_events_end(pending: bytes, head: bytes) -> tuple[int, dict] | None:
    """Where the events array closes within `pending` (the last bytes of the file)."""
    pos = len(pending)
    for _ in range(TAIL_CANDIDATES):
        pos = pending.rfind(b"]", 0, pos)
        if pos < 0:
            return None
        before = pending[:pos].rstrip()
        if before.endswith(b"}") or (not before and head.rstrip().endswith(b"[")):
            meta = _parse_metadata(head, pending[pos + 1:])
            if meta is not None:
                return pos, meta
    return None


def _complete_events_prefix(text: bytes) -> int:
    """Length of the longest prefix of `text` made of whole events (for a truncated file)."""
    decoder = json.JSONDecoder()
    s = text.decode("utf-8", errors="surrogateescape")
    i, good, n = 0, 0, len(s)
    while i < n:
        while i < n and s[i] in " \t\r\n,":
            i += 1
        if i >= n:
            break
        try:
            _, i = decoder.raw_decode(s, i)
        except ValueError:
            break
        good = i
    return len(s[:good].encode("utf-8", errors="surrogateescape"))


def split_trace(path: Path, out_dir: Path, target_bytes: int = PART_TARGET_BYTES) -> SplitTrace:
    """Copy the events of `path` into part files under `out_dir`."""
    writer = _PartWriter(out_dir, path.name.replace(".", "_"), target_bytes)
    head = b""
    start = None
    pending = b""  # held back: the array's end is searched here at EOF
    consumed = 0  # uncompressed bytes before `pending`
    cut = False
    try:
        for block in iter_blocks(path):
            if start is None:
                head += block
                start = _find_events_start(head)
                if start is None:
                    if len(head) > HEAD_SEARCH_BYTES:
                        raise TraceFormatError("no traceEvents array found: not a torch.profiler "
                                               "or Chrome trace", str(path))
                    continue
                block, head = head[start:], head[:start]
                consumed = len(head)
            pending += block
            if len(pending) > HOLD_BACK_BYTES:
                out = len(pending) - HOLD_BACK_BYTES
                writer.write(pending[:out])
                consumed += out
                pending = pending[out:]
    except StreamCut:
        cut = True
    if start is None:
        writer.close()
        raise TraceFormatError(_describe_non_trace(head), str(path))
    end = None if cut else _find_events_end(pending, head)
    if end is not None:
        pos, meta = end
        writer.write(pending[:pos])
        writer.close()
        result = SplitTrace(writer.parts, meta, writer.events_bytes)
    else:
        result = _recover_truncated(writer, pending, head, consumed)
    if not result.parts:
        writer._open()
        writer.close()
        result.parts = writer.parts
    return result


def _recover_truncated(writer: _PartWriter, pending: bytes, head: bytes, consumed: int) -> SplitTrace:
    """Keep every whole event before the cut; measure what was lost."""
    writer.close()
    last = writer.parts[-1] if writer.parts else None
    carried = b""
    if last is not None:
        carried = last.read_bytes()[1:-1]
        writer.parts.pop()
        writer.events_bytes -= len(carried)
        last.unlink()
    text = carried + pending
    keep = _complete_events_prefix(text)
    writer.target = 1 << 62  # the recovered tail goes into one part
    if keep:
        writer.write(text[:keep])
    writer.close()
    meta = _parse_metadata(head, b"}") or {}
    cut_at = consumed + len(pending)
    lost = len(text) - keep
    return SplitTrace(writer.parts, meta, writer.events_bytes, truncated_at_byte=cut_at,
                      lost_bytes=lost)


def _describe_non_trace(head: bytes) -> str:
    if not head.strip():
        return "the file is empty"
    try:
        value = json.loads(head)
    except (ValueError, RecursionError):
        return "not JSON, or a JSON without a traceEvents array: not a torch.profiler trace"
    kind = type(value).__name__
    return f"valid JSON ({kind}) but no traceEvents array: not a torch.profiler trace"
