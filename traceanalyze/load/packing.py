"""Small ranks packed: one task maps several ranks one after the other, so a thousand small
files cost a hundred tasks, not a thousand process (or Ray task) round trips. Every executor
packs the same way (in rank order, by trace bytes: the same input gives the same packs); a rank
that fails inside a pack fails alone, the others' shards stand."""

from __future__ import annotations

from traceanalyze.load.discover import TraceFile, trace_bytes
from traceanalyze.load.map_outcome import MapOutcome, map_guarded

# a task maps ranks until it holds this much trace (JSON bytes, estimated for gzip) ...
PACK_BYTES = 64 << 20


def packs(files: list[TraceFile], workers: int, pack_bytes: int = PACK_BYTES) -> list[list[TraceFile]]:
    """The ranks in tasks: in rank order, each pack closed once it holds `pack_bytes` of trace
    (... or its share of the whole, when that is less: every worker gets work)."""
    ordered = sorted(files, key=lambda tf: tf.rank)
    sizes = [trace_bytes(tf) for tf in ordered]
    target = max(1, min(pack_bytes, -(-sum(sizes) // max(1, workers))))
    out: list[list[TraceFile]] = []
    held = 0
    for tf, size in zip(ordered, sizes):
        if not out or held >= target:
            out.append([])
            held = 0
        out[-1].append(tf)
        held += size
    return out


def map_pack(files: list[TraceFile], shards_root: str, threads: int | None) -> list[MapOutcome]:
    """Map the ranks of one pack, each by itself (map.py), in rank order; each rank's outcome
    its own."""
    return [map_guarded(tf, shards_root, threads) for tf in sorted(files, key=lambda tf: tf.rank)]
