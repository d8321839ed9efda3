"""Split trace files and parse their parts at the same time.

split.py copies each file's events into part files, one thread per file; as soon as a part
is complete, the caller's `parse` (DuckDB, which releases the GIL) reads it from this
thread, so copying and parsing overlap instead of running one after the other.

A part is parsed with its rank's time base (baseTimeNanoseconds, written after the events):
for an uncompressed file `peek_metadata` reads it from the file's two ends first; for a gzip
file it is not known before the split ends, so 0 is used and the caller shifts the rank's
times afterwards if the real base differs (`Overlapped.corrections`). The last part of each
file (it may still be rewritten when the file turns out to be truncated) is parsed once its
split has ended. Everything is left to the caller when an early parse failed: see `Overlapped`.
"""

from __future__ import annotations

import os
import queue
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from traceanalyze.load import split
from traceanalyze.load.discover import TraceFile
from traceanalyze.load.kineto import base_time_ns
from traceanalyze.load.split import SplitTrace, peek_metadata, split_trace

PartRow = tuple[int, str, int]  # (rank, part path, base_ns): what kineto.insert_events reads
BATCH_PARTS = max(2, min(os.cpu_count() or 2, 8))  # parts per parse: one per DuckDB thread


@dataclass
class Overlapped:
    """The splits of all files, and the parts parsed: every one, unless early parsing failed."""

    splits: list[SplitTrace]
    parsed: list[PartRow]  # every part of every file (empty when `failed`)
    failed: BaseException | None  # the error that stopped early parsing: undo what was parsed

    def corrections(self, files: list[TraceFile]) -> list[tuple[int, int]]:
        """(rank, ns to add to its times) where the early parse used a time base that turned
        out wrong (a gzip file's real baseTimeNanoseconds, known only once it is split)."""
        used = {rank: base for rank, _, base in self.parsed}
        real = {tf.rank: base_time_ns(sp.metadata) for tf, sp in zip(files, self.splits)}
        return [(rank, real[rank] - base) for rank, base in sorted(used.items()) if real[rank] != base]


def _wait_and_drain(ready: queue.Queue) -> list:
    """The next item of `ready` (waiting for it) and every item already behind it."""
    items = [ready.get()]
    while True:
        try:
            items.append(ready.get_nowait())
        except queue.Empty:
            return items


def split_while_parsing(files: list[TraceFile], work: Path, parse: Callable[[list[PartRow]], None],
                        parse_errors: tuple[type[BaseException], ...]) -> Overlapped:
    """Split every file under `work`; `parse(rows)` the parts it can as they are written.

    A `parse` that raises one of `parse_errors` stops early parsing (the error is returned
    in Overlapped.failed); any other error, and every split error, propagates once all
    split threads have ended.
    """
    bases = [base_time_ns(peek_metadata(tf.path) or {}) for tf in files]  # (0: unknown yet)
    ready: queue.Queue[tuple[int, Path | None]] = queue.Queue()

    def split_one(i: int, tf: TraceFile) -> SplitTrace:
        told: list[Path] = []

        def on_part(part: Path) -> None:
            told.append(part)
            ready.put((i, part))

        try:
            out = work / f"r{i}"
            out.mkdir()
            result = split_trace(tf.path, out, target_bytes=split.PART_TARGET_BYTES, on_part=on_part)
            for part in result.parts[len(told):]:  # the last part(s): final now that the split is done
                ready.put((i, part))
            return result
        finally:
            ready.put((i, None))  # this file is done (or failed)

    parsed: list[PartRow] = []
    batch: list[PartRow] = []
    failed: BaseException | None = None
    workers = max(1, min(len(files), os.cpu_count() or 1, 8))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(split_one, i, tf) for i, tf in enumerate(files)]
        running = len(files)
        try:
            while running:
                # every part written meanwhile joins the batch: one parse spreads them over
                # DuckDB's threads (one file per thread)
                for i, part in _wait_and_drain(ready):
                    if part is None:
                        running -= 1
                    else:
                        batch.append((files[i].rank, str(part), bases[i]))
                if batch and failed is None and (len(batch) >= BATCH_PARTS or not running):
                    try:
                        parse(batch)
                        parsed += batch
                    except parse_errors as exc:
                        failed = exc
                    batch = []
        finally:
            splits = [f.result() for f in futures]  # (re-raises a split's error)
    return Overlapped(splits, [] if failed else parsed, failed)
