"""The executors by name (`--executor NAME`, `analyze(executor=...)`): each one an `Executor`
(executors.py). A new executor is one module and one entry here; the executors know nothing
of each other.
"""

from __future__ import annotations

from traceanalyze.errors import TraceanalyzeError
from traceanalyze.load.discover import TraceFile
from traceanalyze.load.executors import Executor, Progress, run_local
from traceanalyze.load.map_outcome import MapOutcome
from traceanalyze.load.ray_executor import run_on_ray

EXECUTORS: dict[str, Executor] = {"local": run_local, "ray": run_on_ray}


def run_maps(files: list[TraceFile], shards_root: str, executor: str = "local", workers: int | None = None,
             ray_address: str | None = None, progress: Progress | None = None) -> list[MapOutcome]:
    """Map `files` with the executor named `executor`; one `MapOutcome` per file, in their order."""
    say = progress or (lambda _msg: None)
    if not files:
        return []
    run = EXECUTORS.get(executor)
    if run is None:
        raise TraceanalyzeError(f"unknown executor {executor!r}; use one of {', '.join(EXECUTORS)}")
    return run(files, shards_root, say, workers=workers, address=ray_address)
