"""Reduce stage: the process group of every collective whose event does not name one.

NCCL events carry their group (`Process Group Name`); gloo's `gloo:*` annotations do not.
A rank that belongs to one group (its `distributedInfo.pg_config`) gets it in the map stage;
a rank of several groups (a device mesh: `mesh_tp`, `mesh_dp`, ...) leaves its gloo rows
`group_source = 'pending'`, and this module decides them with the other ranks' rows:

* gloo runs each group's collectives on that group's own `pt_gloo_runloop` threads, so the
  rows of one runloop thread (`run_tid`) belong to one group: the unit decided is a
  (rank, run_tid).
* the members of a group run the same collectives in the same order with the same message
  size, and leave each one together. For each candidate group of the unit (the rank's groups
  from pg_config), every other member must have rows of the same (op, bytes); the score is
  the median over the unit's rows of the largest gap, over the members, between the row's end
  and the nearest end of a same-(op, bytes) row on that member. The group with the smallest
  score wins (ties: the smaller group, then the earlier created).
* gloo starts two runloop threads per group (its default pool) when the group is created:
  where the units decided by time put more threads in one group (a world group's collectives
  end together with its subgroups' members too), the rank's threads are assigned again in
  thread id order to its groups in creation order, at most a pool per group
  (`_fit_thread_pools`). An all_to_all, gather or scatter is matched on its op alone: each
  member sends its own amount.
* the members of a group run as many collectives: where the units decided by time leave a
  group with more rows on one member than another (two groups' collectives that end together
  because both wait for one slow rank), a unit moves to another group that fits it while that
  makes the counts agree (`_balance_counts`).
* a send / recv names its peer as a rank of its group: its group is the one whose rank at
  that position has opposite transfers of the same size that name this rank (as a rank of
  the same group), ending nearest (the median over the rank's transfers to that peer).

Decided rows get `group_source = 'inferred'` and a `group-inferred` load issue per rank;
rows no candidate fits keep the rank's largest group with `group_source = 'unknown'` and a
`group-not-inferred` warning (send / recv without a peer: a `p2p-group-not-inferred` note). `collectives` is then rewritten with the groups, their
descriptions, members, peers and per-group order (`seq`).
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import defaultdict
from fractions import Fraction

from traceanalyze.lazy_import import duckdb

P2P_OPPOSITE = {"send": "recv", "recv": "send", "send_recv": "send_recv"}
NO_MATCH = float("inf")
GLOO_POOL_THREADS = 2  # runloop threads of a gloo process group (ProcessGroupGloo::Options' default)
UNEVEN_OPS = {"gather", "scatter"}  # (besides every all_to_all: see _matched_size)


def _groups_of_ranks(con) -> dict[int, list[tuple[str, list[int], int]]]:
    out: dict[int, list[tuple[str, list[int], int]]] = defaultdict(list)
    seen: dict[int, set[tuple[int, ...]]] = defaultdict(set)
    for rank, name, ranks, index in con.execute(
            "SELECT rank, pg_name, ranks, config_index FROM pg_configs ORDER BY rank, config_index").fetchall():
        # groups of the same members cannot be told apart by who takes part: the first created
        # holds them all (on every rank alike), so one collective is one instance in one group
        if tuple(ranks) in seen[rank]:
            continue
        seen[rank].add(tuple(ranks))
        out[rank].append((name, list(ranks), index))
    return out


def _matched_size(op: str, size: int | None) -> int | None:
    """The message size a row is matched on across members: its bytes, but none for the ops
    whose members send different amounts (an all_to_all's splits are each rank's own: the
    hot expert's rank sends back more than the others; a gather or scatter's root alone
    holds the whole buffer)."""
    return None if ("to_all" in op or "alltoall" in op or op in UNEVEN_OPS) else size


def _ends_by_signature(con) -> dict[tuple[int, str, int | None], list[int]]:
    """(rank, op, matched size) -> sorted ends of the rank's rows (every row, whatever its group)."""
    out: dict[tuple[int, str, int | None], list[int]] = defaultdict(list)
    for rank, op, size, end in con.execute(
            "SELECT rank, op, bytes, end_ns FROM collectives ORDER BY rank, op, bytes, end_ns").fetchall():
        out[(rank, op, _matched_size(op, size))].append(end)
    for ends in out.values():
        ends.sort()  # (rows of several sizes under one key: by end again)
    return out


def _p2p_ends(con) -> dict[tuple[int, str, int | None, int], list[int]]:
    """(rank, op, bytes, peer as a group rank) -> sorted ends of the rank's send / recv rows."""
    out: dict[tuple[int, str, int | None, int], list[int]] = defaultdict(list)
    for rank, op, size, peer, end in con.execute("""
            SELECT rank, op, bytes, peer_group_rank, end_ns FROM collectives
            WHERE kind = 'p2p' AND peer_group_rank IS NOT NULL ORDER BY rank, op, bytes, peer_group_rank, end_ns""").fetchall():
        out[(rank, op, size, peer)].append(end)
    return out


def _nearest_gap(ends: list[int] | None, t: int) -> float:
    if not ends:
        return NO_MATCH
    i = bisect.bisect_left(ends, t)
    return min(abs(ends[j] - t) for j in (i - 1, i) if 0 <= j < len(ends))


def _collective_score(rows, rank: int, members: list[int], ends) -> float:
    gaps = [max((_nearest_gap(ends.get((m, op, size)), end) for m in members if m != rank), default=0.0)
            for op, size, end in rows]
    return statistics.median(gaps) if gaps else NO_MATCH


def _pick(scored: list[tuple[float, int, int, str]]) -> str | None:
    finite = sorted(s for s in scored if s[0] != NO_MATCH)
    return finite[0][3] if finite else None


def _balance_counts(con, decided: dict[tuple[int, str], str], fitting: dict[tuple[int, str], list[str]],
                    sizes: dict[tuple[int, str], int], groups) -> None:
    """The members of a group run the same collectives, so as many of them: where the units
    decided by time leave a group with more rows on one member than on another (two groups'
    collectives that end together: both wait for the same slow rank), move a unit to another
    group that fits it while that makes the groups' counts agree better (their squared
    deviations from the mean fall). Changes `decided`."""
    members = {name: ranks for rank_groups in groups.values() for name, ranks, _ in rank_groups if len(ranks) > 1}
    count: dict[tuple[int, str], int] = defaultdict(int)
    for rank, name, n in con.execute("""
            SELECT rank, process_group, count(*) FROM collectives
            WHERE kind = 'collective' AND group_source <> 'pending' GROUP BY rank, process_group""").fetchall():
        count[(rank, name)] += n
    for unit, name in decided.items():
        count[(unit[0], name)] += sizes[unit]

    def disagreement(name: str) -> Fraction:
        # how far the members' counts are from agreeing: their squared deviations from the mean
        # (exact). Not the range: two members' units of one group decided alike by time (ranks
        # 2 and 3 of DP 3 x FSDP 2 both put a replicate all_reduce in their shard group, whose
        # counts then agree) need two moves, and the range gains nothing on the first one
        got = [count[(r, name)] for r in members.get(name, [])]
        return Fraction(len(got) * sum(x * x for x in got) - sum(got) ** 2, len(got)) if got else Fraction(0)

    for _ in range(2 * len(decided)):
        best = None
        # (a move between two groups whose counts agree cannot make the counts agree better)
        # (a unit's group is one of those that fit it: the best by time, or one it was moved to)
        uneven = {name for name in {n for names in fitting.values() for n in names} if disagreement(name)}
        for unit in sorted(decided):
            rank, now = unit[0], decided[unit]
            for other in fitting.get(unit, []):
                if other == now or (now not in uneven and other not in uneven):
                    continue
                before = disagreement(now) + disagreement(other)
                count[(rank, now)] -= sizes[unit]
                count[(rank, other)] += sizes[unit]
                gain = before - disagreement(now) - disagreement(other)
                count[(rank, now)] += sizes[unit]
                count[(rank, other)] -= sizes[unit]
                if gain > 0 and (best is None or gain > best[0]):
                    best = (gain, unit, other)
        if best is None:
            return
        _gain, unit, other = best
        count[(unit[0], decided[unit])] -= sizes[unit]
        count[(unit[0], other)] += sizes[unit]
        decided[unit] = other


def _fit_thread_pools(decided: dict[tuple[int, str], str], scores: dict[tuple[int, str], dict[str, float]],
                      groups) -> None:
    """Each gloo process group runs its collectives on a pool of its own runloop threads,
    GLOO_POOL_THREADS of them (ProcessGroupGloo's default `threads`), started when the group
    is created: a rank's groups' pools are disjoint, and their thread ids rise in the order
    the groups were created. Time alone cannot tell a collective of a large group from one of
    a subgroup that ends with it (every member of the subgroup has the same rows, ending
    together): a job that all-reduces over the whole world besides its DP and EP groups had
    the world's collectives put in the subgroups, three threads in one group. On a rank
    where the decisions by time put more threads in one group than its pool holds, the
    threads are assigned again in thread id order to the groups in creation order (each
    group a run of at most a pool's threads, each thread to a group whose members fit it),
    the run that departs least from the time scores (the sum over threads of the log of
    its group's score over the thread's best). Changes `decided`; a rank with more threads
    than its groups' pools, or thread ids that are not numbers, is left as decided by time."""
    by_rank: dict[int, list[str]] = defaultdict(list)
    for rank, tid in decided:
        by_rank[rank].append(tid)
    for rank, tids in sorted(by_rank.items()):
        held: dict[str, int] = defaultdict(int)
        for tid in tids:
            held[decided[(rank, tid)]] += 1
        order = [name for name, members, _ in sorted(groups.get(rank, []), key=lambda g: g[2]) if len(members) > 1]
        if (max(held.values()) <= GLOO_POOL_THREADS or len(tids) > GLOO_POOL_THREADS * len(order)
                or not all(t.isdigit() for t in tids)):
            continue
        tids = sorted(tids, key=int)

        def cost(tid: str, name: str) -> float:
            fit = scores[(rank, tid)]
            if name not in fit:
                return NO_MATCH
            return math.log((fit[name] + 1.0) / (min(fit.values()) + 1.0))  # (+1 ns: a score may be 0)

        # best[i][g]: the least cost of the first i threads in groups before order[g] (runs of <= a pool)
        n, k = len(tids), len(order)
        best = [[NO_MATCH] * (k + 1) for _ in range(n + 1)]
        back: dict[tuple[int, int], int] = {}
        for g in range(k + 1):
            best[0][g] = 0.0
        for g in range(1, k + 1):
            for i in range(1, n + 1):
                best[i][g], back[(i, g)] = best[i][g - 1], 0  # group g - 1 takes no thread
                run = 0.0
                for size in range(1, min(GLOO_POOL_THREADS, i) + 1):
                    run += cost(tids[i - size], order[g - 1])
                    if best[i - size][g - 1] + run < best[i][g]:
                        best[i][g], back[(i, g)] = best[i - size][g - 1] + run, size
        if best[n][k] == NO_MATCH:
            continue
        i, g = n, k
        while i > 0:
            size = back[(i, g)]
            for tid in tids[i - size:i]:
                decided[(rank, tid)] = order[g - 1]
            i, g = i - size, g - 1


def infer_groups(con: duckdb.DuckDBPyConnection) -> None:
    """Decide the pending groups, rewrite `collectives`, record what was done in load_issues."""
    (pending,) = con.execute("SELECT count(*) FROM collectives WHERE group_source = 'pending'").fetchone()
    if not pending:
        return
    groups = _groups_of_ranks(con)
    ends = _ends_by_signature(con)
    p2p_ends = _p2p_ends(con)
    units: dict[tuple[int, str], list[tuple[str, int | None, int]]] = defaultdict(list)
    p2p_rows = []
    for rank, tid, op, kind, size, ts, end, peer in con.execute("""
            SELECT rank, run_tid, op, kind, bytes, ts_ns, end_ns, peer_group_rank FROM collectives
            WHERE group_source = 'pending' ORDER BY rank, run_tid, ts_ns, end_ns""").fetchall():
        if kind == "p2p":
            p2p_rows.append((rank, tid, op, size, ts, end, peer))
        else:
            units[(rank, tid)].append((op, _matched_size(op, size), end))
    decided_units: dict[tuple[int, str], str] = {}
    taken: dict[tuple[int, str], set] = {}  # (rank, group) -> the (op, bytes) its decided units ran
    fitting: dict[tuple[int, str], list[str]] = {}  # (rank, run_tid) -> the groups whose members fit, best first
    scores: dict[tuple[int, str], dict[str, float]] = {}  # (rank, run_tid) -> {group whose members fit: score}
    for (rank, tid), rows in sorted(units.items()):
        signature = {(op, size) for op, size, _ in rows}
        scored = []
        for name, members, index in groups.get(rank, []):
            if len(members) > 1:
                score = _collective_score(rows, rank, members, ends)
                # on a tie, a group another thread of the rank runs different transfers in comes last
                clash = int((rank, name) in taken and taken[(rank, name)] != signature)
                scored.append((score, clash, len(members), index, name))
        finite = sorted(s for s in scored if s[0] != NO_MATCH)
        scores[(rank, tid)] = {s[-1]: s[0] for s in finite}
        if finite:
            decided_units[(rank, tid)] = finite[0][-1]
            taken.setdefault((rank, finite[0][-1]), set()).update(signature)
            fitting[(rank, tid)] = [s[-1] for s in finite]
    _fit_thread_pools(decided_units, scores, groups)
    _balance_counts(con, decided_units, fitting, {u: len(rows) for u, rows in units.items()}, groups)
    # send / recv: decided per (rank, thread, op, peer, size): the group where the peer's
    # opposite transfers of that size end nearest, over all of them (one transfer alone is noisy)
    p2p_units: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    for rank, tid, op, size, ts, end, peer in p2p_rows:
        p2p_units[(rank, tid, op, peer, size)].append((ts, end))
    decided_rows = []
    for (rank, tid, op, peer, size), rows in sorted(p2p_units.items(), key=lambda kv: tuple(map(str, kv[0]))):
        choice = decided_units.get((rank, tid))
        if choice is None and peer is not None:
            scored = []
            for name, members, index in groups.get(rank, []):
                if 0 <= peer < len(members) and members[peer] != rank:
                    # the peer's opposite transfers that name this rank, as a rank of the same group
                    theirs = p2p_ends.get((members[peer], P2P_OPPOSITE.get(op, op), size, members.index(rank)))
                    gap = statistics.median(_nearest_gap(theirs, end) for _, end in rows)
                    scored.append((gap, len(members), index, name))
            choice = _pick(scored)
        if choice is not None:
            decided_rows.extend((rank, tid, ts, end, choice) for ts, end in rows)
    con.execute("CREATE OR REPLACE TEMP TABLE _unit_groups (rank INTEGER, run_tid VARCHAR, pg_name VARCHAR)")
    con.execute("CREATE OR REPLACE TEMP TABLE _row_groups "
                "(rank INTEGER, run_tid VARCHAR, ts_ns BIGINT, end_ns BIGINT, pg_name VARCHAR)")
    if decided_units:
        con.executemany("INSERT INTO _unit_groups VALUES (?, ?, ?)",
                        [(r, t, g) for (r, t), g in sorted(decided_units.items())])
    if decided_rows:
        con.executemany("INSERT INTO _row_groups VALUES (?, ?, ?, ?, ?)", decided_rows)
    _rewrite_collectives(con)
    _record_issues(con)
    con.execute("DROP TABLE _unit_groups")
    con.execute("DROP TABLE _row_groups")


def _rewrite_collectives(con) -> None:
    # collectives may be a view over the shards' Parquet files: the new rows become a table
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _collectives_grouped AS
        WITH decided AS (
            SELECT c.*, coalesce(r.pg_name, u.pg_name) AS inferred
            FROM collectives AS c
            LEFT JOIN _unit_groups AS u ON c.group_source = 'pending' AND u.rank = c.rank AND u.run_tid = c.run_tid
                AND c.kind = 'collective'
            LEFT JOIN _row_groups AS r ON c.group_source = 'pending' AND r.rank = c.rank
                AND r.run_tid IS NOT DISTINCT FROM c.run_tid AND r.ts_ns = c.ts_ns AND r.end_ns = c.end_ns
        ),
        regrouped AS (
            SELECT d.* REPLACE (
                       coalesce(d.inferred, d.process_group) AS process_group,
                       CASE WHEN d.inferred IS NOT NULL THEN 'inferred'
                            WHEN d.group_source = 'pending' THEN 'unknown' ELSE d.group_source END AS group_source)
            FROM decided AS d
        )
        SELECT g.* EXCLUDE (inferred) REPLACE (
                   coalesce(p.pg_desc, g.pg_desc) AS pg_desc,
                   coalesce(p.ranks, g.group_ranks) AS group_ranks,
                   CASE WHEN g.peer_group_rank >= 0 AND g.peer_group_rank < len(coalesce(p.ranks, g.group_ranks))
                        THEN coalesce(p.ranks, g.group_ranks)[g.peer_group_rank + 1] END AS peer,
                   row_number() OVER (PARTITION BY g.rank, g.process_group ORDER BY g.ts_ns, g.end_ns) - 1 AS seq)
        FROM regrouped AS g
        LEFT JOIN pg_configs AS p ON g.group_source IN ('inferred', 'unknown') AND p.rank = g.rank
            AND p.pg_name = g.process_group
    """)
    kind = con.execute("SELECT table_type FROM information_schema.tables WHERE table_name = 'collectives'"
                       " AND table_schema = 'main'").fetchone()
    con.execute("DROP VIEW collectives" if kind and kind[0] == "VIEW" else "DROP TABLE collectives")
    con.execute("CREATE TABLE collectives AS SELECT * FROM _collectives_grouped ORDER BY rank, ts_ns, end_ns")
    con.execute("DROP TABLE _collectives_grouped")


def _record_issues(con) -> None:
    con.execute("""
        INSERT INTO load_issues
        SELECT c.rank, r.file, 'group-inferred', 'info',
               'gloo collectives and send / recv carry no process group; assigned to groups '
               || string_agg(DISTINCT c.labelled, ', ' ORDER BY c.labelled)
               || ' told apart by matching the call order, message sizes and ends of the ranks sharing each group',
               count(*)
        FROM (SELECT rank, process_group || group_label(pg_desc, group_ranks) AS labelled
              FROM collectives WHERE group_source = 'inferred') AS c
        JOIN ranks AS r USING (rank)
        GROUP BY c.rank, r.file
    """)
    con.execute("""
        INSERT INTO load_issues
        SELECT c.rank, r.file, 'group-not-inferred', 'warning',
               'collectives whose process group could not be told (no group of the rank has matching '
               || 'transfers on its other ranks) are compared in the rank''s largest group ' || any_value(c.process_group),
               count(*)
        FROM collectives AS c JOIN ranks AS r USING (rank)
        WHERE c.group_source = 'unknown' AND c.kind = 'collective' AND c.rank IN (SELECT rank FROM pg_configs)
        GROUP BY c.rank, r.file
    """)
    # (a send / recv without a peer is no comparison in a wrong group: send / recv are never compared
    # as group collectives, and the pipelines pair each recv with the send that fed it by time)
    con.execute("""
        INSERT INTO load_issues
        SELECT c.rank, r.file, 'p2p-group-not-inferred', 'info',
               'send / recv name no peer (gloo records peers with record_shapes only): their process group is not '
               || 'known, and the pipeline stages are found by pairing each recv with the send that fed it by time',
               count(*)
        FROM collectives AS c JOIN ranks AS r USING (rank)
        WHERE c.group_source = 'unknown' AND c.kind = 'p2p' AND c.rank IN (SELECT rank FROM pg_configs)
        GROUP BY c.rank, r.file
    """)
