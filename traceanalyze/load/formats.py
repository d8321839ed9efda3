"""Which reader reads a trace file: the JSON one (split.py + kineto.py) or the Perfetto one.

`RankRead` is what a reader returns for one rank's file (the shared reader contract); the
loader turns it into the SplitTrace it keeps per file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from traceanalyze.load.pftrace_packets import is_protobuf
from traceanalyze.load.split import SplitTrace


@dataclass
class RankRead:
    """What reading one rank's trace file into raw_events gave."""

    metadata: dict
    events: int
    events_bytes: int
    truncated_at_byte: int | None
    lost_bytes: int
    notes: list[tuple[str, str, int | None]] = field(default_factory=list)  # (kind, message, count)


def read_protobuf_files(con, files) -> dict:
    """{path: SplitTrace} of the Perfetto protobuf files among `files`, read into raw_events."""
    from traceanalyze.load.pftrace import read_pftrace

    out = {}
    for tf in files:
        if is_protobuf(tf.path):
            read = read_pftrace(con, tf)
            notes = [(kind, message if count is None else f"{message} ({count:,})")
                     for kind, message, count in read.notes]
            out[tf.path] = SplitTrace([], read.metadata, read.events_bytes, read.truncated_at_byte,
                                      read.lost_bytes, notes)
    return out
