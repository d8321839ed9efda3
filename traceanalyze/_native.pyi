"""Typed stub of the native trace reader (native/, Rust). Use traceanalyze.load.read instead."""

from typing import Any

class TraceReader:
    """One trace file's events as an Arrow C stream (read once, as it is consumed)."""

    def __init__(
        self,
        path: str,
        threads: int = 0,
        block_bytes: int = 8 << 20,
        max_expansion: int = 400,
        min_allowance_bytes: int = 512 << 20,
        max_metadata_value_bytes: int = 64 << 20,
        max_item_bytes: int = 1 << 30,
    ) -> None: ...
    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object: ...
    def result(self) -> dict[str, Any]:
        """metadata [(key, JSON text)], events, events_bytes, truncated_at_byte, lost_bytes,
        base_ns, gzip, notes [(kind, message, count)], tally {...}; raises ValueError (with
        .offset) when the file could not be read."""

def checked_metadata(raw: str) -> str | None: ...
def columns() -> list[str]: ...
