"""What reading one rank's file hands the map besides its `raw_events` rows: `RankRead`.

Both readers make it: read.py (Kineto JSON, the native reader) and pftrace.py (Perfetto
protobuf; read.py's `read_rank` dispatches to it by file name). A leaf, so neither reader
imports the other for the type.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RankRead:
    """What one rank's file held besides the rows it put in `raw_events`."""

    metadata: dict  # the keys around the events (distributedInfo, baseTimeNanoseconds, ...)
    events: int  # rows in raw_events (elements of the events array; a B/E pair counts once)
    events_bytes: int  # uncompressed bytes of the traceEvents array
    truncated_at_byte: int | None = None  # uncompressed offset of the cut, when truncated
    lost_bytes: int = 0
    notes: list[tuple[str, str, int | None]] = field(default_factory=list)  # (kind, message, count)
    # seconds per stage: *_cpu the process's CPU time (all its threads), *_wall elapsed
    stage_s: dict[str, float] = field(default_factory=dict)
    # rows of the shard files the reader wrote (raw_events and the one-pass tables; the map's)
    table_rows: dict[str, int] = field(default_factory=dict)
    # the events' issues the reader counted in its one-pass tables: (kind, message, count)
    event_issues: list[tuple[str, str, int | None]] = field(default_factory=list)
