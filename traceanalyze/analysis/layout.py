"""The parallelism layout of the job (summary.json `layout`) from the `process_groups` table.

Each group carries a dimension (db/tables/cross_rank/87_process_groups.sql); the groups of
one dimension partition the ranks, and a rank's coordinate on it is its position in its
group. The pipeline dimension is the set of pipelines found from the send / recv traffic
(`pipeline_stages`, source 'traffic'), whatever group carried them: a rank's PP coordinate
is its stage; likewise the context dimension is the set of ring exchanges (`context_rings`), a
rank's CP coordinate its place round the ring. Groups of the whole job count only when no smaller group carries a dimension
(a DDP or FSDP job over every rank), and a group that ran nothing counts only when no group
ran anything (traces with pg_config alone): a second group of the same ranks that the job
created and never used does not add a dimension. See docs/parallelism.md.
"""

from __future__ import annotations

from typing import Any

from traceanalyze.lazy_import import duckdb

# outermost first: the order a layout reads, e.g. "PP 2 x DP 2 x TP 2"
DIMENSIONS = ("pipeline", "data", "fsdp", "expert", "context", "tensor")
ABBREVIATIONS = {"pipeline": "PP", "data": "DP", "fsdp": "FSDP", "expert": "EP", "context": "CP", "tensor": "TP"}


def _groups(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    return con.execute("""
        SELECT process_group, pg_desc, ranks, size, dimension, dimension_source
        FROM process_groups
        WHERE dimension IN ('pipeline', 'data', 'fsdp', 'expert', 'context', 'tensor')
          AND ranks IS NOT NULL AND size >= 2
          AND (collectives > 0 OR p2p > 0 OR group_source IS NULL AND NOT EXISTS (
                  SELECT 1 FROM process_groups AS busy WHERE busy.collectives > 0 OR busy.p2p > 0))
        ORDER BY process_group""").fetchall()


def _pipelines(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    """Pipelines as group-like rows (name, desc, ranks in stage order, size, 'pipeline', source)."""
    rows = con.execute("""
        SELECT pipeline, any_value(pipeline_ranks), any_value(stages), any_value(source), any_value(process_group)
        FROM pipeline_stages GROUP BY pipeline ORDER BY pipeline""").fetchall()
    return [(f"pipeline {p}" if source == "traffic" else group, None, list(ranks), stages, "pipeline",
             source if source == "traffic" else "operations")
            for p, ranks, stages, source, group in rows]


def _rings(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    """Ring exchanges (context_rings) as group-like rows (name, desc, ranks in ring order, size,
    'context', 'traffic')."""
    rows = con.execute("""
        SELECT any_value(name), any_value(ring_ranks) FROM context_rings GROUP BY ring ORDER BY ring""").fetchall()
    return [(name, None, list(ranks), len(ranks), "context", "traffic") for name, ranks in rows]


def parallel_layout(con: duckdb.DuckDBPyConnection, world_size: int) -> dict[str, Any] | None:
    """{"text", "dimensions": [{name, abbrev, size, groups, source}], "ranks": {rank: {abbrev: index}},
    "complete"}; None when no group tells a dimension (no pg_config and no group args)."""
    pipelines = _pipelines(con)
    rings = _rings(con)
    groups = _groups(con)
    if pipelines:
        groups = [g for g in groups if g[4] != "pipeline"]
    if rings:   # (the rings are the context dimension; a group that carried a ring is no pipeline)
        in_rings = {r for ring in rings for r in ring[2]}
        groups = [g for g in groups if g[4] != "context" and not (g[4] == "pipeline" and set(g[2]) <= in_rings)]
    smaller = [g for g in groups if g[3] < world_size] + pipelines + rings
    chosen = smaller or groups
    if not chosen:
        return None
    dims: dict[str, list[tuple]] = {}
    for g in chosen:
        dims.setdefault(g[4], []).append(g)
    dimensions, coords = [], {}
    for name in DIMENSIONS:
        if name not in dims:
            continue
        members = dims[name]
        size = max(g[3] for g in members)
        abbrev = ABBREVIATIONS[name]
        dimensions.append({
            "name": name, "abbrev": abbrev, "size": size,
            "source": min(g[5] for g in members),
            "groups": [{"name": g[0], "desc": g[1], "ranks": list(g[2])} for g in members]})
        for g in members:
            for index, rank in enumerate(g[2]):
                coords.setdefault(str(rank), {})[abbrev] = index
    product = 1
    for d in dimensions:
        product *= d["size"]
    complete = product == world_size
    text = f"{world_size} rank{'s' if world_size != 1 else ''} = " + " x ".join(
        f"{d['abbrev']} {d['size']}" for d in dimensions)
    if not complete:
        text += f" (the groups found cover {product} of {world_size} ranks)"
    return {"text": text, "dimensions": dimensions, "complete": complete,
            "ranks": {r: coords[r] for r in sorted(coords, key=int)}}
