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
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from traceanalyze.errors import TraceFormatError
from traceanalyze.load.kineto import EXACT_DOUBLE_LIMIT_US
from traceanalyze.load.source import StreamCut, is_gzip, iter_blocks

PART_TARGET_BYTES = 48 << 20
HEAD_SEARCH_BYTES = 256 << 20
HEAD_PEEK_BYTES = 2 << 20  # (peek_metadata)
EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
# between two events: `}` `,` whitespace, then `{` opening an event
EVENT_GAP = re.compile(rb'\}\s*,\s*(?=\{\s*")')
TAIL_CANDIDATES = 64
HOLD_BACK_BYTES = 8 << 20  # the array's end and the metadata after it must fit here
# Epoch-microsecond timestamps with ns digits (1712195495519689.047) are too long for the
# double DuckDB's JSON reader parses them into. When the first event has one, every
# `"ts": <P><digits>` (P: the leading digits, the same in the whole trace, or P+1 after a
# rollover) is written as `"__ta_tsp": <P - d>, "ts": <d><digits>` (d: one digit, see
# _PartWriter.use_ts_prefix): the short number keeps its ns
# exactly, and kineto.py puts P back (see kineto.TS_PREFIX_KEY). A C-speed bytes.replace,
# no per-event Python; a ts this misses stays long and is caught by kineto's exactness check.
TS_PREFIX_KEY = b"__ta_tsp"
# DuckDB's JSON reader matches keys case-sensitively but refuses two STRUCT fields that differ
# only in case: args keys spelled both ways in the wild get a distinct name (kineto.py reads
# both). `"Bytes"`: [memory] events (`"bytes"`: memcpy); `"external id"`: Kineto before ~2022.
KEY_RENAMES = [(b'"Bytes":', b'"__ta_Bytes":'), (b'"external id":', b'"__ta_external_id":')]
LONG_FRACTIONAL_TS = re.compile(rb'"ts": (\d{13,})\.\d')
TS_KEPT_DIGITS = 10  # digits after the prefix: d + 10 digits + 3 decimals are exact in a double


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

    def __init__(self, out_dir: Path, stem: str, target_bytes: int,
                 on_part: Callable[[Path], None] | None = None) -> None:
        self.out_dir, self.stem, self.target = out_dir, stem, target_bytes
        self.on_part = on_part  # told of each part as soon as it is complete (not of the last one)
        self.parts: list[Path] = []
        self.fh = None
        self.size = 0
        self.events_bytes = 0
        self.subs: list[tuple[bytes, bytes]] = list(KEY_RENAMES)  # (original, rewritten) byte patterns

    def use_ts_prefix(self, prefix: int) -> None:
        """Rewrite `"ts": <prefix>...` and `"ts": <prefix + 1>...` (before the first write).

        `"ts": <Q><rest>` becomes `"__ta_tsp": <Q - d>, "ts": <d><rest>`, d a digit that no
        `"ts": <Q>` starts with (so the second pass cannot match what the first one wrote):
        the time is then ts + (Q - d) x 10^(digits of ts before the point - 1).
        """
        firsts = {str(prefix)[0], str(prefix + 1)[0]}
        d = next(x for x in (9, 7, 5) if str(x) not in firsts)
        self.subs += [(b'"ts": %d' % q, b'"%s": %d, "ts": %d' % (TS_PREFIX_KEY, q - d, d))
                      for q in (prefix, prefix + 1)]

    def restore(self, data: bytes) -> bytes:
        """The original text of rewritten `data`."""
        for original, rewritten in reversed(self.subs):
            data = data.replace(rewritten, original)
        return data

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
                if self.on_part is not None:
                    self.on_part(self.parts[-1])
                self._open()
                data = data[gap.end():]
        self._emit(data)

    def _emit(self, data: bytes) -> None:
        self.events_bytes += len(data)
        for original, rewritten in self.subs:
            data = data.replace(original, rewritten)
        self.fh.write(data)
        self.size += len(data)

    def close(self) -> None:
        if self.fh is not None:
            self.fh.write(b"]")
            self.fh.close()
            self.fh = None


def _find_events_start(buf: bytes) -> int | None:
    """Offset just after the `[` that opens the events, or None if not seen yet."""
    stripped = buf.lstrip().removeprefix(b"\xef\xbb\xbf").lstrip()  # (a UTF-8 BOM is allowed)
    if stripped.startswith(b"["):  # Chrome "JSON Array Format": the file is the array
        return len(buf) - len(stripped) + 1
    matches = list(EVENTS_KEY.finditer(buf))
    for m in matches:  # the top-level key, not a "traceEvents" nested in some metadata object
        if _parse_metadata(buf[:m.end()], b"}") is not None:
            return m.end()
    return matches[0].end() if matches else None


def _parse_metadata(head: bytes, tail: bytes) -> dict | None:
    """The top-level object with `traceEvents` emptied, or None if head+tail is not JSON."""
    try:  # metadata with invalid UTF-8 (a host name...) is still metadata
        obj = json.loads((head + b"]" + tail).decode("utf-8-sig", errors="replace"))
    except (ValueError, RecursionError):
        return None
    if isinstance(obj, list):
        return {}
    return obj if isinstance(obj, dict) else None


def _find_events_end(pending: bytes, head: bytes) -> tuple[int, dict] | None:
    """Where the events array closes within `pending` (the last bytes of the file)."""
    pos = len(pending)
    found = None
    for _ in range(TAIL_CANDIDATES):
        pos = pending.rfind(b"]", 0, pos)
        if pos < 0:
            break
        j = pos - 1
        while j >= 0 and pending[j] in b" \t\r\n":
            j -= 1
        # the last event is usually an object, but any JSON value may end the array
        if (j >= 0 and pending[j] != ord(",")) or (j < 0 and head.rstrip().endswith(b"[")):
            meta = _parse_metadata(head, pending[pos + 1:])
            if meta is not None:
                # keep looking: a later top-level list ("INFO": [...]) also reads as valid
                # metadata; the events end at the first `]` that does
                found = pos, meta
    return found


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
        except (ValueError, RecursionError):  # cut inside this event (or nested beyond Python's limit)
            break
        good = i
    return len(s[:good].encode("utf-8", errors="surrogateescape"))


def split_trace(path: Path, out_dir: Path, target_bytes: int = PART_TARGET_BYTES,
                on_part: Callable[[Path], None] | None = None) -> SplitTrace:
    """Copy the events of `path` into part files under `out_dir`.

    `on_part(path)` is called from this thread for every part but the last as soon as it is
    complete (the last one may still be rewritten if the file turns out to be truncated).
    """
    writer = _PartWriter(out_dir, path.name.replace(".", "_"), target_bytes, on_part)
    head = b""
    start = None
    held: deque[bytes] = deque()  # written only once HOLD_BACK_BYTES follow them: the array's
    # end is searched in what is held at EOF. Whole blocks, never copied to be held.
    held_bytes = 0
    carry = b""  # the end of the last block, after its last `\n` or `,`
    consumed = 0  # uncompressed bytes before the held blocks
    cut = False
    read_notes: list[tuple[str, str]] = []
    try:
        for block in iter_blocks(path, notes=read_notes):
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
                first_ts = LONG_FRACTIONAL_TS.search(block, 0, 1 << 20)
                # (below 2**43 us, about 101 days of uptime, a double holds the ns: nothing to do)
                if first_ts is not None and int(first_ts.group(1)) >= EXACT_DOUBLE_LIMIT_US:
                    writer.use_ts_prefix(int(first_ts.group(1)[:-TS_KEPT_DIGITS]))
            # blocks end after a `\n` or `,`: never inside a key or `"ts": <prefix>` being rewritten
            block = carry + block if carry else block
            safe = max(block.rfind(b"\n"), block.rfind(b",")) + 1 or len(block)
            block, carry = (block[:safe], block[safe:]) if safe < len(block) else (block, b"")
            held.append(block)
            held_bytes += len(block)
            while held_bytes - len(held[0]) >= HOLD_BACK_BYTES:
                out = held.popleft()
                writer.write(out)
                held_bytes -= len(out)
                consumed += len(out)
    except StreamCut:
        cut = True
    held.append(carry)
    if start is None:
        writer.close()
        if cut:
            raise TraceFormatError("the gzip stream is cut short before the traceEvents array "
                                   f"({len(head):,} bytes readable): nothing to load", str(path))
        raise TraceFormatError(_describe_non_trace(head), str(path))
    pending = b"".join(held)
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
    result.notes[:0] = read_notes
    return result


def peek_metadata(path: Path) -> dict | None:
    """The metadata around the events of an uncompressed trace, read from its two ends
    without the events; None for a gzip file or when it cannot be found that way."""
    if is_gzip(path):
        return None
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(min(size, HEAD_PEEK_BYTES))
        start = _find_events_start(head)
        if start is None or size - start < 2 * HOLD_BACK_BYTES:
            return None
        fh.seek(size - HOLD_BACK_BYTES)
        tail = fh.read()
    found = _find_events_end(tail, head[:start])
    return found[1] if found is not None else None


def _recover_truncated(writer: _PartWriter, pending: bytes, head: bytes, consumed: int) -> SplitTrace:
    """Keep every whole event before the cut; measure what was lost."""
    writer.close()
    last = writer.parts[-1] if writer.parts else None
    carried = b""
    if last is not None:
        carried = writer.restore(last.read_bytes()[1:-1])
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
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "the file is UTF-16 text; torch.profiler traces are UTF-8 JSON"
    try:
        value = json.loads(head)
    except (ValueError, RecursionError):
        return "not JSON, or a JSON without a traceEvents array: not a torch.profiler trace"
    kind = type(value).__name__
    return f"valid JSON ({kind}) but no traceEvents array: not a torch.profiler trace"
