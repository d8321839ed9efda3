"""Stage 1: per-rank traces -> shards (map, one rank at a time) -> a DuckDB trace database (reduce).

    trace_dir.py     the orchestration: load_trace_dir (a folder) and load_shards (a shard set)
    discover.py      a folder (or bucket prefix) -> one TraceFile per rank
    map.py           one rank -> read.py's raw_events -> per-rank tables -> <shards>/rank=N/*.parquet
    executors.py     the maps on a local process pool (default) or Ray (ray_executor.py), by name
                     (executor_registry.py)
    reduce.py        the shard set -> trace.duckdb: per-rank tables (views or copies), cross-rank tables

An unchanged rank keeps its shard (its manifest names the exact source bytes) when its files
are intact (verify.py); a damaged one is mapped again from its trace, or, when the trace is
gone, left out and reported. A rank whose map fails is reported in load_issues and the others
are analyzed.
"""

from traceanalyze.load.trace_dir import (
    LoadResult,
    default_shards,
    load_shards,
    load_trace_dir,
    read_load_issues,
)

__all__ = ["LoadResult", "default_shards", "load_shards", "load_trace_dir", "read_load_issues"]
