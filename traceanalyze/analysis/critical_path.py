"""The critical path of each aligned step: the chain of work that sets the step's length.

Built in the reduce stage (after align) into the documented table `critical_path`
(db/tables/cross_rank/98_critical_path.sql creates it empty; its comments are the docs).

The walk, backwards from the end of the step on the rank with the longest step:

* GPU side at time t: the GPU work (kernel, copy, collective) on the rank that ends last at or
  before t is on the path. A gap between its end and t is time the GPU waited for the host
  (`host` segment up to t, found on the host side). A kernel that started within
  2 µs (LAUNCH_SLACK_NS) of its launch call's end waited for the launch: the path goes to the host at
  the launch; otherwise it waited for earlier GPU work and the walk goes on at its start.
* Host side at time t: the host's work back to the latest synchronization call ending before
  t (where the host waited for the GPU: the walk returns to the GPU side at that call's end), or
  back to the step start. Named after the host op covering most of it.
* A collective: the rank that arrived last (collective_arrivals) sets its start. On that rank
  the walk goes on at its arrival; on another rank the segment is the part after the last
  arrival, and the walk jumps to the last-arriving rank at its arrival (step-relative times).

Times are on each segment's own rank's clock (`on_rank`).

What the walk reads of the aligned steps is gathered by one statement into a Parquet file in
the caller's scratch folder (gather_inputs); the walk itself is the native crate's
(native/src/critical_walk.rs: it puts the rows in one order, walks each step and writes the
segments beside it) and needs no database; insert_segments fills the table. The reduce
(load/trace_dir.py) runs the three with a connection of its own each, closed between them.
"""

from __future__ import annotations

from pathlib import Path

from traceanalyze.db import sql_string
from traceanalyze.errors import TraceanalyzeError
from traceanalyze.extension import native as _native
from traceanalyze.lazy_import import duckdb

MAX_KERNELS = 4_000_000      # GPU events of the aligned steps, all ranks: above, no walk (memory)
# Rows of each row group of the gathered file: DuckDB's writer holds a row group in memory
# (its default, 122,880 rows, held a 200 MB trace's whole gathering: 54 MB above the connection,
# the load's peak; 16,384 rows 38 MB). The walk reads the groups in turn either way.
GATHER_ROW_GROUP_ROWS = 16_384

# Every row the walk reads of the aligned steps, one file: src 0 a rank's step bounds, 1 GPU
# work (with its launch call's end and, for a collective's kernel, its instance), 2 host
# synchronization calls, 3 host-side collectives (gloo, record_param_comms), 4 the top-level
# host ops of the training-loop thread (top_host_ops, built by the reader per rank: a window over
# every host op here cost a 200 MB load 0.06 s), 5 the ranks'
# arrivals at the collectives (arrival_rel_ns as k1); k1, k2 the keys each list is sorted by.
INPUTS_SQL = """
    WITH aligned AS (SELECT step FROM aligned_steps),
    gpu AS (
        SELECT k.step, k.rank, k.ts_ns, k.end_ns, k.name, k.kind, k.launch_end_ns,
               a.process_group, a.op, a.op_index, k.stream, k.correlation
        FROM kernels AS k
        LEFT JOIN collective_arrivals AS a ON a.rank = k.rank AND a.step = k.step AND a.ts_ns = k.ts_ns
          AND a.source = 'nccl_kernel'
        WHERE k.step IN (SELECT step FROM aligned)
    ),
    rows AS (
        SELECT step, 0 AS src, rank, ts_ns AS k1, end_ns AS k2, NULL AS name, NULL AS kind,
               NULL::BIGINT AS launch_end_ns, NULL AS process_group, NULL AS op, NULL::BIGINT AS op_index,
               NULL::BIGINT AS stream, NULL::BIGINT AS correlation
        FROM steps WHERE step IN (SELECT step FROM aligned)
        UNION ALL
        SELECT step, 1, rank, end_ns, ts_ns, name, kind, launch_end_ns, process_group, op, op_index, stream,
               correlation FROM gpu
        UNION ALL
        SELECT step, 2, rank, end_ns, ts_ns, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM runtime
        WHERE is_sync AND step IN (SELECT step FROM aligned)
        UNION ALL
        SELECT step, 3, rank, ts_ns + dur_ns, ts_ns, op, NULL, NULL, process_group, op, op_index, NULL, NULL
        FROM collective_arrivals WHERE source <> 'nccl_kernel' AND step IN (SELECT step FROM aligned)
        UNION ALL
        SELECT step, 4, rank, ts_ns, end_ns, name, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM top_host_ops
        WHERE step IN (SELECT step FROM aligned)
        UNION ALL
        SELECT step, 5, rank, arrival_rel_ns, 0, NULL, NULL, NULL, process_group, op, op_index, NULL, NULL
        FROM collective_arrivals WHERE step IN (SELECT step FROM aligned)
    )
    SELECT step::BIGINT AS step, src::INTEGER AS src, rank::INTEGER AS rank, k1::BIGINT AS k1,
           k2::BIGINT AS k2, name::VARCHAR AS name, kind::VARCHAR AS kind, launch_end_ns::BIGINT AS launch_end_ns,
           process_group::VARCHAR AS process_group, op::VARCHAR AS op, op_index::BIGINT AS op_index,
           stream::BIGINT AS stream, correlation::BIGINT AS correlation
    FROM rows"""  # (the walk leaves out a row without step, rank, k1 or k2)


def gather_inputs(con: duckdb.DuckDBPyConnection, inputs: Path) -> bool:
    """Write what the walk reads of the aligned steps to the Parquet file `inputs`; False (and
    nothing written) when there is no aligned step or too many GPU events to walk (noted in
    load_issues)."""
    if con.execute("SELECT 1 FROM aligned_steps LIMIT 1").fetchone() is None:
        return False
    (n_kernels,) = con.execute("SELECT count(*) FROM kernels JOIN aligned_steps USING (step)").fetchone()
    if n_kernels > MAX_KERNELS:  # the walk holds a step's GPU work of every rank in memory
        con.execute("INSERT INTO load_issues VALUES (NULL, NULL, 'critical-path-skipped', 'info', ?, ?)",
                    [f"the critical path was not computed: {n_kernels:,} GPU events in the aligned steps, over "
                     f"the {MAX_KERNELS:,} it walks (load fewer ranks with --ranks)", n_kernels])
        return False
    con.execute(f"COPY ({INPUTS_SQL}) TO {sql_string(inputs)} (FORMAT parquet, ROW_GROUP_SIZE {GATHER_ROW_GROUP_ROWS})")
    return True


def walk(inputs: Path, segments: Path) -> int:
    """The walk over the gathered `inputs` -> the Parquet file `segments` (critical_path's
    columns); the segments' count. Needs no database: the caller may close its connection."""
    try:
        return _native.walk_critical_path(str(inputs), str(segments))
    except ValueError as exc:
        raise TraceanalyzeError(f"cannot walk the critical path ({exc})", str(inputs.parent)) from None


def insert_segments(con: duckdb.DuckDBPyConnection, segments: Path) -> None:
    con.execute("INSERT INTO critical_path SELECT rank, step, seq, kind, name, ts_ns, dur_ns, on_rank "
                f"FROM read_parquet({sql_string(segments)})")
