"""The critical path's walk as it was in Python (traceanalyze/analysis/critical_path.py before
the native crate walked it), kept as the oracle of tests/test_critical_path_walk.py: the same
rows (the walk's input file, as traceanalyze/analysis/critical_path.py's INPUTS_SQL writes it)
must give the same segments. One change: a collective whose last arrival is a rank without the
step's bounds is not jumped to (the Python walk raised KeyError there, failing the whole load).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple


LAUNCH_SLACK_NS = 2_000      # a kernel starting this soon after its launch returns waited for the launch
MAX_SEGMENTS_PER_STEP = 5_000


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


def _nulls_last(v):
    return (v is None, "" if v is None else v)


def _order(row: tuple) -> tuple:
    """The order the walk reads its rows in: step, src, rank, k1, k2, name, stream, correlation,
    process_group, op_index, then kind, launch_end_ns, op (a null after every value)."""
    step, src, rank, k1, k2, name, kind, launch_end, pg, op, idx, stream, corr = row
    return (step, src, rank, k1, k2, *map(_nulls_last, (name, stream, corr, pg, idx, kind, launch_end, op)))


def critical_path_rows(rows: list[tuple]) -> list[tuple]:
    """The walk's input rows (step, src, rank, k1, k2, name, kind, launch_end_ns, process_group,
    op, op_index, stream, correlation) -> critical_path's rows (rank, step, seq, kind, name,
    ts_ns, dur_ns, on_rank)."""
    rows = sorted(rows, key=_order)
    arrivals: dict[int, dict[tuple, dict[int, int]]] = {}
    for step, src, rank, k1, _k2, _n, _k, _l, pg, op, idx, _s, _c in rows:
        if src == 5:
            arrivals.setdefault(step, {}).setdefault((pg, op, idx), {})[rank] = k1
    out: list[tuple] = []
    for step, ranks in _load_steps([r for r in rows if r[1] != 5]):
        start_rank = max(ranks, key=lambda r: (ranks[r].end - ranks[r].start, -r))
        out += [(start_rank, step, *seg) for seg in _walk(ranks, start_rank, arrivals.get(step, {}))]
    return out


def _load_steps(rows: list[tuple]) -> Iterator[tuple[int, dict[int, _Rank]]]:
    """(step, rank -> _Rank) of each aligned step with bounds, in step order."""
    for step, group in itertools.groupby(rows, key=lambda row: row[0]):
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
    if last == rank or last not in ranks:  # (the one change: it raised KeyError at a rank without the step)
        segs.append(("collective", name, ts, end, rank))
        return None
    r = ranks[rank]
    from_ts = min(max(ts, r.start + seen[last]), end)
    segs.append(("collective", name, from_ts, end, rank))
    other = ranks[last]
    return last, other.start + seen[last]
