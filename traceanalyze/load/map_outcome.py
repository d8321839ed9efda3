"""A rank's map as an outcome: its manifest, or why it failed (bad input, a worker that died,
an object that could not be read). Every executor returns one `MapOutcome` per rank, so a
failed rank never stops the others.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from traceanalyze.errors import TraceanalyzeError
from traceanalyze.lazy_import import duckdb
from traceanalyze.load.discover import TraceFile
from traceanalyze.load.map import map_rank


@dataclass(frozen=True)
class MapOutcome:
    rank: int
    file: str
    manifest: dict | None  # None when the map failed
    error: str | None = None


def trace_name(tf: TraceFile) -> str:
    """The file an outcome names: the trace's URL, else its path."""
    return tf.url or str(tf.path)


def map_guarded(tf: TraceFile, shards_root: str, threads: int | None) -> MapOutcome:
    """map_rank, with bad input turned into a failed outcome (other errors are bugs: raised)."""
    return outcome_of(tf, lambda: map_rank(tf, shards_root, threads))


def outcome_of(tf: TraceFile, mapping: Callable[[], dict]) -> MapOutcome:
    """The outcome of `mapping` (a map of `tf` returning its manifest): bad input, a DuckDB
    error or an OS error is a failed outcome naming the file; anything else is raised."""
    try:
        return MapOutcome(tf.rank, trace_name(tf), mapping())
    except TraceanalyzeError as exc:
        return failed(tf, exc)
    except (duckdb.Error, OSError) as exc:
        return MapOutcome(tf.rank, trace_name(tf), None,
                          f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}")


def failed(tf: TraceFile, exc: TraceanalyzeError) -> MapOutcome:
    return MapOutcome(tf.rank, exc.path or trace_name(tf), None, exc.problem)
