"""The critical path of each aligned step: the chain of work that sets the step's length.

Built in the reduce stage (after align) into the documented table `critical_path`
(db/tables/cross_rank/98_critical_path.sql creates it empty; its comments are the docs).

The walk, backwards from the end of the step on the rank with the longest step:

* GPU side at time t: the GPU work (kernel, copy, collective) on the rank that ends last at or
  before t is on the path. A gap between its end and t is time the GPU waited for the host
  (`host` segment up to t, found on the host side). A kernel that started within
  LAUNCH_SLACK_NS of its launch call's end waited for the launch: the path goes to the host at
  the launch; otherwise it waited for earlier GPU work and the walk goes on at its start.
* Host side at time t: the host's work back to the latest synchronization call ending before
  t (where the host waited for the GPU: the walk returns to the GPU side at that call's end), or
  back to the step start. Named after the host op covering most of it.
* A collective: the rank that arrived last (collective_arrivals) sets its start. On that rank
  the walk goes on at its arrival; on another rank the segment is the part after the last
  arrival, and the walk jumps to the last-arriving rank at its arrival (step-relative times).

Times are on each segment's own rank's clock (`on_rank`).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import duckdb

from traceanalyze.db.insert_rows import insert_rows

LAUNCH_SLACK_NS = 2_000      # a kernel starting this soon after its launch returns waited for the launch
MAX_SEGMENTS_PER_STEP = 5_000
MAX_KERNELS = 4_000_000      # GPU events of the aligned steps, all ranks: above, no walk (memory)  # a guard: a walk never loops, but a pathological trace cannot run away


class _Gpu(NamedTuple):  # (a tuple: the walk builds one per GPU event)
    ts: int
    end: int
    name: str
    kind: str
    launch_end: int | None
    collective: tuple | None  # (process_group, op, op_index) when it is a collective instance


@dataclass(frozen=True)
class _Rank:
    start: int
    end: int
    gpu: list[_Gpu]          # sorted by end
    gpu_ends: list[int]
    syncs: list[tuple[int, int]]   # (end, start) of host synchronization calls, sorted by end
    host_colls: list[tuple[int, int, str, tuple]]  # (end, ts, name, key) of host-side collectives (gloo, record_param_comms)
    ops: list[tuple[int, int, str]]  # top-level host ops (ts, end, name), sorted by ts


def build_critical_path(con: duckdb.DuckDBPyConnection) -> None:
    """Fill `critical_path` for every aligned step (the table exists, empty)."""
    if con.execute("SELECT 1 FROM aligned_steps LIMIT 1").fetchone() is None:
        return
    (n_kernels,) = con.execute("SELECT count(*) FROM kernels JOIN aligned_steps USING (step)").fetchone()
    if n_kernels > MAX_KERNELS:  # the walk holds a step's GPU work of every rank in memory
        con.execute("INSERT INTO load_issues VALUES (NULL, NULL, 'critical-path-skipped', 'info', ?, ?)",
                    [f"the critical path was not computed: {n_kernels:,} GPU events in the aligned steps, over "
                     f"the {MAX_KERNELS:,} it walks (load fewer ranks with --ranks)", n_kernels])
        return
    arrivals = _arrivals(con)
    rows: list[tuple] = []
    _stage_inputs(con)
    try:
        for step, ranks in _load_steps(con):
            start_rank = max(ranks, key=lambda r: (ranks[r].end - ranks[r].start, -r))
            rows += [(start_rank, step, *seg) for seg in _walk(ranks, start_rank, arrivals.get(step, {}))]
    finally:
        for table in STAGED:
            con.execute(f"DROP TABLE IF EXISTS {table}")
    if rows:
        # one statement for all rows (executemany runs one INSERT per row: 100 s for the 114k
        # segments of a 515 MB trace's 165 steps), through Arrow when it can
        insert_rows(con, "critical_path", rows)


def _arrivals(con) -> dict[int, dict[tuple, dict[int, int]]]:
    """step -> (process_group, op, op_index) -> {rank: arrival relative to the rank's step start}."""
    out: dict[int, dict[tuple, dict[int, int]]] = {}
    for step, pg, op, idx, rank, rel in con.execute(
            "SELECT step, process_group, op, op_index, rank, arrival_rel_ns FROM collective_arrivals").fetchall():
        out.setdefault(step, {}).setdefault((pg, op, idx), {})[rank] = rel
    return out


# what the walk reads of the aligned steps, gathered once (temp tables sorted by step, so each
# step's lookups read only its rows): per-step queries over the per-rank tables (often views
# over Parquet) would read and group every rank's runtime calls again for each step
STAGED = ("_cp_gpu", "_cp_syncs", "_cp_host_colls", "_cp_ops")


def _stage_inputs(con) -> None:
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _cp_gpu AS
        SELECT k.step, k.rank, k.ts_ns, k.end_ns, k.name, k.kind, r.end_ns AS launch_end_ns,
               a.process_group, a.op, a.op_index, k.stream, k.correlation
        FROM kernels AS k
        LEFT JOIN (SELECT rank, correlation, min(end_ns) AS end_ns FROM runtime
                   WHERE correlation IS NOT NULL GROUP BY rank, correlation) AS r
          ON r.rank = k.rank AND r.correlation = k.correlation
        LEFT JOIN collective_arrivals AS a ON a.rank = k.rank AND a.step = k.step AND a.ts_ns = k.ts_ns
          AND a.source = 'nccl_kernel'
        WHERE k.step IN (SELECT step FROM aligned_steps)
        ORDER BY k.step""")
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _cp_syncs AS
        SELECT step, rank, end_ns, ts_ns FROM runtime
        WHERE is_sync AND step IN (SELECT step FROM aligned_steps) ORDER BY step""")
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _cp_host_colls AS
        SELECT c.step, c.rank, c.ts_ns + c.dur_ns AS end_ns, c.ts_ns, c.op, c.process_group, c.op_index
        FROM collective_arrivals AS c
        WHERE c.source <> 'nccl_kernel' AND c.step IN (SELECT step FROM aligned_steps) ORDER BY c.step""")
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _cp_ops AS
        WITH host AS (   -- the training-loop thread's ops and annotations
            SELECT o.step, o.rank, o.ts_ns, o.end_ns, o.name FROM cpu_ops AS o
            JOIN main_threads AS m ON m.rank = o.rank AND m.tid = o.tid
            WHERE o.name NOT LIKE 'ProfilerStep#%'
            UNION ALL
            SELECT a.step, a.rank, a.ts_ns, a.end_ns, a.name FROM annotations AS a
            JOIN main_threads AS m ON m.rank = a.rank AND m.tid = a.tid WHERE NOT a.on_gpu
        ),
        nested AS (      -- per rank and step: the latest end among the earlier ones (top-level: none covers it)
            SELECT *, max(end_ns) OVER (PARTITION BY rank, step ORDER BY ts_ns, end_ns DESC, name
                                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
            FROM host WHERE step IN (SELECT step FROM aligned_steps)
        )
        SELECT step, rank, ts_ns, end_ns, name FROM nested WHERE prev_end_ns IS NULL OR ts_ns >= prev_end_ns
        ORDER BY step""")


# every staged row of the aligned steps in one ordered stream (a query per step and table cost
# more than the walk): src 0 the rank's step bounds, 1 GPU work, 2 synchronizations, 3 host-side
# collectives, 4 top-level host ops; k1, k2 the sort keys each list is kept in
STREAM_SQL = """
    SELECT step, 0 AS src, rank, ts_ns AS k1, end_ns AS k2, NULL AS name, NULL AS kind, NULL::BIGINT AS launch_end_ns,
           NULL AS process_group, NULL AS op, NULL::BIGINT AS op_index, NULL::BIGINT AS stream, NULL::BIGINT AS correlation
    FROM steps WHERE step IN (SELECT step FROM aligned_steps)
    UNION ALL
    SELECT step, 1, rank, end_ns, ts_ns, name, kind, launch_end_ns, process_group, op, op_index, stream, correlation
    FROM _cp_gpu
    UNION ALL
    SELECT step, 2, rank, end_ns, ts_ns, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM _cp_syncs
    UNION ALL
    SELECT step, 3, rank, end_ns, ts_ns, op, NULL, NULL, process_group, op, op_index, NULL, NULL FROM _cp_host_colls
    UNION ALL
    SELECT step, 4, rank, ts_ns, end_ns, name, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM _cp_ops
    ORDER BY step, src, rank, k1, k2, name, stream, correlation, process_group, op_index"""
FETCH_ROWS = 65_536


def _load_steps(con) -> Iterator[tuple[int, dict[int, _Rank]]]:
    """(step, rank -> _Rank) of each aligned step with bounds, in step order; one step in memory at a time."""
    cur = con.execute(STREAM_SQL)

    def rows():
        while chunk := cur.fetchmany(FETCH_ROWS):
            yield from chunk

    for step, group in itertools.groupby(rows(), key=lambda row: row[0]):
        bounds: dict[int, tuple[int, int]] = {}
        gpu: dict[int, list[_Gpu]] = {}
        syncs: dict[int, list] = {}
        host_colls: dict[int, list] = {}
        ops: dict[int, list] = {}
        for _, src, rank, k1, k2, name, kind, launch_end, pg, op, idx, _stream, _corr in group:
            if src == 0:
                bounds[rank] = (k1, k2)
                gpu[rank], syncs[rank], host_colls[rank], ops[rank] = [], [], [], []
            elif rank not in bounds:
                continue  # (no step bounds on that rank: nothing of it is walked)
            elif src == 1:
                gpu[rank].append(_Gpu(k2, k1, name, kind, launch_end, (pg, op, idx) if op is not None else None))
            elif src == 2:
                syncs[rank].append((k1, k2))
            elif src == 3:
                host_colls[rank].append((k1, k2, name, (pg, op, idx)))
            else:
                ops[rank].append((k1, k2, name))
        if bounds:
            yield step, {r: _Rank(b[0], b[1], gpu[r], [g.end for g in gpu[r]], syncs[r], host_colls[r], ops[r])
                         for r, b in bounds.items()}


def _host_name(rank: _Rank, lo: int, hi: int) -> str:
    """The host op covering most of [lo, hi] (ties: the earliest, then by name), else 'host'."""
    best, best_ns = "host", 0
    for ts, end, name in rank.ops:
        if ts >= hi:
            break
        ns = min(end, hi) - max(ts, lo)
        if ns > best_ns:
            best, best_ns = name, ns
    return best


def _walk(ranks: dict[int, _Rank], rank: int, arrivals: dict[tuple, dict[int, int]]) -> list[tuple]:
    """Segments (seq, kind, name, ts_ns, dur_ns, on_rank), in time order."""
    segs: list[tuple[str, str, int, int, int]] = []  # (kind, name, ts, end, rank), backwards
    t, side, queued = ranks[rank].end, "gpu", False
    for _ in range(MAX_SEGMENTS_PER_STEP):
        r = ranks[rank]
        if t <= r.start:
            break
        if side == "gpu":
            i = bisect.bisect_right(r.gpu_ends, t) - 1
            if i < 0 or r.gpu[i].end <= r.start or (not queued and r.gpu[i].end < t - LAUNCH_SLACK_NS):
                side = "host"  # the GPU had finished: the host held the step until t
                continue
            k = r.gpu[i]
            ts = max(k.ts, r.start)
            if k.collective is not None:
                jump = _collective(segs, ranks, rank, k.collective, k.name, ts, k.end, arrivals)
                if jump is not None:
                    (rank, t), queued = jump, True
                    continue
            else:
                segs.append(("kernel" if k.kind == "compute" else k.kind, k.name, ts, k.end, rank))
            if k.launch_end is not None and k.ts - k.launch_end <= LAUNCH_SLACK_NS and r.start < k.launch_end:
                t, side = min(k.launch_end, ts), "host"  # it waited for its launch
            else:
                t, queued = (ts if ts < t else t - 1), True  # it waited for earlier GPU work
        else:
            # the host's own work back to where it last waited: a synchronization or a host-side collective
            sync_i = bisect.bisect_left(r.syncs, (t, -1)) - 1
            sync_end = r.syncs[sync_i][0] if sync_i >= 0 and r.syncs[sync_i][0] > r.start else None
            coll_i = bisect.bisect_left(r.host_colls, (t, -1)) - 1
            coll = r.host_colls[coll_i] if coll_i >= 0 and r.host_colls[coll_i][0] > r.start else None
            lo = max(x for x in (sync_end, coll[0] if coll else None, r.start) if x is not None)
            segs.append(("host", _host_name(r, lo, t), lo, t, rank))
            if coll is not None and coll[0] == lo:
                jump = _collective(segs, ranks, rank, coll[3], coll[2], max(coll[1], r.start), coll[0], arrivals)
                rank, t = jump if jump is not None else (rank, max(coll[1], r.start))
            elif sync_end is not None and sync_end == lo:
                t, side, queued = lo, "gpu", True
            else:
                break
    segs.reverse()
    return [(seq, kind, name, ts, end - ts, on) for seq, (kind, name, ts, end, on) in enumerate(segs)]


def _collective(segs: list, ranks: dict[int, _Rank], rank: int, key: tuple, name: str, ts: int, end: int,
                arrivals: dict[tuple, dict[int, int]]) -> tuple[int, int] | None:
    """Add the collective's segment; (rank, t) to go on from when the last arrival is another rank."""
    seen = arrivals.get(key, {})
    if len(seen) < 2 or rank not in seen:
        segs.append(("collective", name, ts, end, rank))
        return None
    last = max(seen, key=lambda q: (seen[q], -q))
    if last == rank:
        segs.append(("collective", name, ts, end, rank))
        return None
    r = ranks[rank]
    from_ts = min(max(ts, r.start + seen[last]), end)
    segs.append(("collective", name, from_ts, end, rank))
    other = ranks[last]
    return last, other.start + seen[last]
