"""Reduce stage: the pipelines of the job, from who sends to whom.

Pipeline stages are not positions in the group that carried the send / recv (a job may pass
activations over the default group, its own group or a device mesh's): they come from the
traffic. Each send / recv row is a transfer between two global ranks:

* its peer, when the event names it (NCCL args, `c10d::send` with shapes recorded), or
* else, for each recv, the send that fed it (`_matched_by_time`): posted before the data arrived
  and still open then, of the same size when both sizes are known; a blocking send ends with it
  (gloo's ranges end when the data has arrived), an isend stays open until waited on and was
  posted just before. The pairs of a step are taken cheapest first, one send per recv.

Two ranks are linked when they transfer in at least half the steps and at least half as often
as the strongest link of one of them (every micro-batch crosses each link of a stage alike; a
rank at a pipeline's end has one neighbour, whose other link may carry more matches). Within a step, the first
transfer between two linked ranks runs forward (stage k hands its activations to stage k + 1
before any gradient comes back); the majority over steps gives each link its direction. Where
the recvs were matched by time (no peer named), one match may be wrong (an isend stays open
until it is waited on, many at once), so the direction is instead which of the two ranks sends
first in the step: a later stage sends nothing before it has received. The
linked ranks fall into pipelines (connected sets); a pipeline's head is the rank nothing flows
into (with an interleaved schedule the last stage also hands chunks back to the first: then
the rank whose first send in the step comes earliest); a rank's stage is its distance from
the head along forward links. A stage hands on to one next stage, so each rank keeps its
strongest link out and its strongest link in (a stray match that links two pipelines is the
weaker one); a set that is still not a chain (or a ring) is no pipeline.

A ring of three ranks or more whose transfers all run one way round it is no pipeline but a
ring exchange (`_ring_exchange`: context parallelism's ring attention passes K / V chunks to
the next rank each round; a pipeline's links carry the gradients back).

The results are `_pipeline_order` (rank, pipeline, stage, stages, pipeline_ranks) and
`_context_rings` (rank, ring, position, ring_ranks), from which
`db/tables/cross_rank/87_process_groups.sql` builds the documented `pipeline_stages` and
`context_rings`.
"""

from __future__ import annotations

import bisect
import itertools
import statistics
from collections import defaultdict, deque

from traceanalyze.lazy_import import duckdb

# the clocks of two processes on one host may differ by this much (each converts its own clock):
# a send that ended, or was posted, this much after the data it fed arrived may still be its
CLOCK_SKEW_NS = 3_000_000
# how many sends posted (last) before a recv's data arrived are looked at for the one that fed it
OPEN_SENDS_LOOKED_AT = 16


def _transfers(con: duckdb.DuckDBPyConnection) -> tuple[list[tuple[int, int, int, int]], bool]:
    """(src, dst, step, ts_ns) for every send / recv whose other end is known or matched, and
    whether the sends named their peers (else the recvs were matched by time): a send
    naming its peer, else each recv with the send that fed it (`_matched_by_time`)."""
    rows = con.execute("""
        SELECT rank, op, peer, bytes, step, ts_ns, end_ns FROM collectives
        WHERE kind = 'p2p' AND op IN ('send', 'recv') AND step IS NOT NULL
        ORDER BY ts_ns, end_ns, rank, op""").fetchall()
    named = [(rank, peer, step, ts) for rank, op, peer, _size, step, ts, _end in rows
             if op == "send" and peer is not None and peer != rank]
    if named:
        return sorted(set(named)), True
    return _matched_by_time(rows), False


def _matched_by_time(rows: list[tuple]) -> list[tuple[int, int, int, int]]:
    """Each recv of `rows` (rank, op, peer, bytes, step, ts_ns, end_ns) with the send that fed it.
    A recv ends when its data has arrived. The send that fed it is another rank's (the recv's
    peer and size where known), posted by then and still open: a blocking send ends with the
    data's arrival, an isend's range stays open until it is waited on and was posted just before.
    So a pair's cost is how close the send's end or its start is to the recv's end, and the pairs
    are taken cheapest first, one send per recv and one recv per send, among the
    OPEN_SENDS_LOOKED_AT sends posted last before each recv's end (CLOCK_SKEW_NS either way).
    Taking the pairs of a step in one order, not each recv's nearest send on its own, keeps a
    send from feeding two recvs: with isends of two neighbours open at once the nearest is often
    the other neighbour's, whose own recv then lacks it."""
    def known(v):   # (a NULL peer or size sorts first: every field in the keys, so row order never decides)
        return (v is not None, v or 0)

    sends = sorted(((ts, end, rank, size) for rank, op, _peer, size, _step, ts, end in rows if op == "send"),
                   key=lambda s: (*s[:3], known(s[3])))
    starts = [s[0] for s in sends]
    recvs = sorted(((end, ts, rank, peer, size, step) for rank, op, peer, size, step, ts, end in rows if op == "recv"),
                   key=lambda r: (r[5], r[0], r[1], r[2], known(r[3]), known(r[4])))
    used: set[int] = set()
    out = []
    for _step, of_step in itertools.groupby(range(len(recvs)), key=lambda i: recvs[i][5]):
        pairs = []
        for i in of_step:
            end, _ts, rank, peer, size, _ = recvs[i]
            looked = 0
            for k in range(bisect.bisect_right(starts, end + CLOCK_SKEW_NS) - 1, -1, -1):
                s_ts, s_end, s_rank, s_size = sends[k]
                if (s_rank == rank or (peer is not None and peer != s_rank)
                        or (size is not None and s_size is not None and size != s_size)):
                    continue
                looked += 1
                if s_end >= end - CLOCK_SKEW_NS:   # (one that ended before the data arrived fed another)
                    pairs.append((min(abs(end - s_end), abs(end - s_ts)), i, k))
                if looked >= OPEN_SENDS_LOOKED_AT:
                    break
        pairs.sort()
        taken: set[int] = set()
        for _cost, i, k in pairs:
            if i not in taken and k not in used:
                taken.add(i)
                used.add(k)
                out.append((sends[k][2], recvs[i][2], recvs[i][5], sends[k][0]))
    return sorted(set(out))


def _links(transfers, steps_total: int,
           first_sends: dict[tuple[int, int], int] | None = None) -> dict[tuple[int, int], int]:
    """(src, dst) forward links with the number of transfers they carry. With
    `first_sends` ({(rank, step): its first send's start}, given when the transfers were matched
    by time and may be wrong one by one) the direction is which of the two sends first in a step
    (a later stage sends nothing before it has received), by majority over the steps."""
    steps_of_pair: dict[tuple[int, int], set[int]] = defaultdict(set)
    for src, dst, step, _ts in transfers:
        steps_of_pair[(min(src, dst), max(src, dst))].add(step)
    votes: dict[tuple[int, int], int] = defaultdict(int)
    if first_sends is None:   # the first transfer of each pair in each step runs forward
        first: dict[tuple[int, int, int], tuple[int, int, int]] = {}
        for src, dst, step, ts in transfers:
            key = (min(src, dst), max(src, dst), step)
            if key not in first or (ts, src) < first[key][:2]:
                first[key] = (ts, src, dst)
        for _ts, src, dst in first.values():
            votes[(src, dst)] += 1
    else:
        for (a, b), steps in steps_of_pair.items():
            for step in steps:
                ta, tb = first_sends.get((a, step)), first_sends.get((b, step))
                if ta is not None and tb is not None and ta != tb:
                    votes[(a, b) if ta < tb else (b, a)] += 1
    transfers_of_pair: dict[tuple[int, int], int] = defaultdict(int)
    for src, dst, _step, _ts in transfers:
        transfers_of_pair[(min(src, dst), max(src, dst))] += 1
    strongest: dict[int, int] = defaultdict(int)
    for (a, b), n in transfers_of_pair.items():
        strongest[a], strongest[b] = max(strongest[a], n), max(strongest[b], n)
    candidates = []
    for pair, steps in steps_of_pair.items():
        # a stage's links carry alike (every micro-batch crosses each); a stray match is weaker
        # than the strongest link of both its ranks
        if 2 * len(steps) < steps_total or 2 * transfers_of_pair[pair] < min(strongest[pair[0]], strongest[pair[1]]):
            continue
        a, b = pair
        forward = (a, b) if votes.get((a, b), 0) >= votes.get((b, a), 0) else (b, a)
        candidates.append((-transfers_of_pair[pair], forward))
    # a stage hands on to one next stage: each rank keeps its strongest link out and in (a stray
    # match between two pipelines that survived the thresholds is the weaker one)
    links: dict[tuple[int, int], int] = {}
    has_out: set[int] = set()
    has_in: set[int] = set()
    for weight, (src, dst) in sorted(candidates):
        if src not in has_out and dst not in has_in:
            links[(src, dst)] = -weight
            has_out.add(src)
            has_in.add(dst)
    return links


def _first_sends(con: duckdb.DuckDBPyConnection) -> dict[tuple[int, int], tuple[int, int | None]]:
    """{(rank, step): (the start of the rank's first send in the step, that start after the
    step's own start)}, ns (the offset None where the rank's step has no row in `steps`)."""
    return {(rank, step): (ts, offset) for rank, step, ts, offset in con.execute("""
        SELECT c.rank, c.step, min(c.ts_ns), min(c.ts_ns) - any_value(s.ts_ns)
        FROM collectives AS c LEFT JOIN steps AS s USING (rank, step)
        WHERE c.kind = 'p2p' AND c.op = 'send' AND c.step IS NOT NULL GROUP BY c.rank, c.step""").fetchall()}


def _first_send_offsets(first_sends: dict[tuple[int, int], tuple[int, int | None]]) -> dict[int, float]:
    """Each rank's median (over steps) of its first send's start after the step's start, ns."""
    out: dict[int, list[int]] = defaultdict(list)
    for (rank, _step), (_ts, offset) in first_sends.items():
        if offset is not None:
            out[rank].append(offset)
    return {rank: statistics.median(v) for rank, v in out.items()}


def _order(members: set[int], links: dict[tuple[int, int], int], first_send: dict[int, float]) -> list[int] | None:
    """The members in stage order, or None when they do not form a chain (or a ring)."""
    succ: dict[int, list[int]] = defaultdict(list)
    indeg: dict[int, int] = defaultdict(int)
    for (src, dst) in links:
        if src in members:
            succ[src].append(dst)
            indeg[dst] += 1
    heads = sorted(r for r in members if indeg[r] == 0)
    candidates = heads if len(heads) == 1 else sorted(members)
    head = min(candidates, key=lambda r: (first_send.get(r, float("inf")), r))
    distance = {head: 0}
    queue = deque([head])
    while queue:
        r = queue.popleft()
        for nxt in sorted(succ[r]):
            if nxt not in distance:
                distance[nxt] = distance[r] + 1
                queue.append(nxt)
    if len(distance) != len(members) or sorted(distance.values()) != list(range(len(members))):
        return None
    return sorted(members, key=lambda r: distance[r])


def _ring_exchange(members: set[int], links: dict[tuple[int, int], int],
                   directed: dict[tuple[int, int], int]) -> list[int] | None:
    """The members in ring order (from the smallest rank) when their traffic is a ring exchange,
    else None: three ranks or more, each sending to the next round one ring and nothing coming
    back (under a quarter as many transfers the other way). Context parallelism passes K / V
    chunks round the ring this way (ring attention); a pipeline's links carry the gradients
    back, and an interleaved schedule's ring does too."""
    succ = {src: dst for (src, dst) in links if src in members}
    if len(members) < 3 or len(succ) != len(members) or set(succ.values()) != members:
        return None
    order = [min(members)]
    while succ[order[-1]] != order[0]:
        order.append(succ[order[-1]])
        if len(order) > len(members):
            return None
    if len(order) != len(members):
        return None
    if any(4 * directed.get((b, a), 0) >= directed.get((a, b), 0) for a, b in succ.items()):
        return None
    return order


def infer_pipelines(con: duckdb.DuckDBPyConnection) -> None:
    """Create `_pipeline_order` and `_context_rings` (empty when the p2p traffic shows no
    pipeline, no ring exchange)."""
    con.execute("""CREATE OR REPLACE TABLE _pipeline_order (
        rank INTEGER, pipeline INTEGER, stage INTEGER, stages INTEGER, pipeline_ranks INTEGER[])""")
    con.execute("""CREATE OR REPLACE TABLE _context_rings (
        rank INTEGER, ring INTEGER, position INTEGER, ring_ranks INTEGER[])""")
    steps_total = con.execute(
        "SELECT count(DISTINCT step) FROM collectives WHERE kind = 'p2p' AND step IS NOT NULL").fetchone()[0]
    if not steps_total:
        return
    transfers, named = _transfers(con)
    first_sends = _first_sends(con)
    links = _links(transfers, steps_total, None if named else {key: ts for key, (ts, _) in first_sends.items()})
    if not links:
        return
    neighbours: dict[int, set[int]] = defaultdict(set)
    for src, dst in links:
        neighbours[src].add(dst)
        neighbours[dst].add(src)
    first_send = _first_send_offsets(first_sends)
    directed: dict[tuple[int, int], int] = defaultdict(int)
    for src, dst, _step, _ts in transfers:
        directed[(src, dst)] += 1
    seen: set[int] = set()
    chains: list[list[int]] = []
    rings: list[list[int]] = []
    for start in sorted(neighbours):
        if start in seen:
            continue
        component, queue = {start}, deque([start])
        while queue:
            for nxt in neighbours[queue.popleft()]:
                if nxt not in component:
                    component.add(nxt)
                    queue.append(nxt)
        seen |= component
        ring = _ring_exchange(component, links, directed)
        if ring is not None:
            rings.append(ring)
            continue
        order = _order(component, links, first_send)
        if order is not None and len(order) >= 2:
            chains.append(order)
    chains.sort(key=lambda c: (c[0], c))
    rows = [(rank, pipeline, stage, len(chain), chain)
            for pipeline, chain in enumerate(chains) for stage, rank in enumerate(chain)]
    if rows:
        con.executemany("INSERT INTO _pipeline_order VALUES (?, ?, ?, ?, ?)", rows)
    rings.sort()
    rows = [(rank, n, position, ring) for n, ring in enumerate(rings) for position, rank in enumerate(ring)]
    if rows:
        con.executemany("INSERT INTO _context_rings VALUES (?, ?, ?, ?)", rows)
