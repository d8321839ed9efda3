"""token-skew: the rank that arrives late at the collectives is, step after step, the one with the most tokens.

The per-(rank, step) numbers come from `evidence.sql` next to this file (tokens from the
embedding ids, compute time, lateness); this hook only does the cross-rank statistics, which
read better in Python than in SQL.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from statistics import median

EVIDENCE_SQL = (Path(__file__).parent / "evidence.sql").read_text(encoding="utf-8")


def _rows_by_step(con) -> dict[int, list[dict]]:
    cur = con.execute(EVIDENCE_SQL)
    columns = [d[0] for d in cur.description]
    by_step: dict[int, list[dict]] = {}
    for values in cur.fetchall():
        row = dict(zip(columns, values))
        by_step.setdefault(row["step"], []).append(row)
    return by_step


def _late_row(rows: list[dict], params: dict, step_ms: float) -> dict | None:
    """The latest rank of the step, when it is late enough to make the others wait."""
    timed = [r for r in rows if r["late_ms"] is not None]
    if not timed:
        return None
    late = max(timed, key=lambda r: (r["late_ms"], -r["rank"]))
    floor_ms = max(params["min_late_ms"], params["min_late_pct"] / 100.0 * step_ms)
    return late if late["late_ms"] >= floor_ms else None


def _skewed(late: dict, rows: list[dict], params: dict) -> float | None:
    """Token excess of the late rank over the median other rank (%), when it has the most tokens."""
    others = [r["padded_tokens"] for r in rows if r["rank"] != late["rank"]]
    if not others or late["padded_tokens"] < max(others):
        return None
    excess_pct = 100.0 * (late["padded_tokens"] / max(median(others), 1) - 1)
    return excess_pct if excess_pct >= params["min_token_excess_pct"] else None


def _per_rank(by_step: dict[int, list[dict]]) -> list[dict]:
    """Median tokens, padding, sequence length and compute throughput of every rank."""
    ranks: dict[int, list[dict]] = {}
    for rows in by_step.values():
        for r in rows:
            ranks.setdefault(r["rank"], []).append(r)
    out = []
    for rank, rows in sorted(ranks.items()):
        padded = sum(r["padded_tokens"] for r in rows)
        real = [r["real_tokens"] for r in rows]
        compute_s = sum(r["compute_ms"] for r in rows) / 1e3
        out.append({
            "rank": rank,
            "tokens_per_step": median(r["padded_tokens"] for r in rows),
            "real_tokens_per_step": median(real) if None not in real else None,
            "padding_pct": 100.0 * (1 - sum(real) / padded) if None not in real and padded else None,
            "max_seq_len": max(r["max_seq_len"] for r in rows),
            "median_max_seq_len": median(r["max_seq_len"] for r in rows),
            "samples_per_step": median(r["samples"] for r in rows),
            "compute_tokens_per_s": padded / compute_s if compute_s > 0 else None,
            "step_tokens_per_s": padded / (sum(r["step_ms"] for r in rows) / 1e3),
        })
    return out


def detect(con, params: dict):
    by_step = _rows_by_step(con)
    n_ranks = con.execute("SELECT count(*) FROM ranks").fetchone()[0]
    complete = {s: rows for s, rows in by_step.items() if len(rows) == n_ranks and n_ranks > 1}
    if not complete:
        return []
    step_ms = median(r["step_ms"] for rows in complete.values() for r in rows)
    matched: dict[int, tuple[dict, float]] = {}
    for step, rows in complete.items():
        late = _late_row(rows, params, step_ms)
        excess = _skewed(late, rows, params) if late else None
        if excess is not None:
            matched[step] = (late, excess)
    if len(matched) < params["min_steps_pct"] / 100.0 * len(complete) or not matched:
        return []
    return [_finding(complete, matched, step_ms)]


def _finding(complete: dict, matched: dict, step_ms: float) -> dict:
    late_rank = Counter(late["rank"] for late, _ in matched.values()).most_common(1)[0][0]
    per_rank = _per_rank(complete)
    mine = next(r for r in per_rank if r["rank"] == late_rank)
    others = [r for r in per_rank if r["rank"] != late_rank]
    late_sum_ms = sum(late["late_ms"] for late, _ in matched.values())
    others_tps = median(r["compute_tokens_per_s"] or 0 for r in others)
    return {
        "ranks": sorted({late["rank"] for late, _ in matched.values()}),
        "steps": sorted(matched),
        "ms_per_step": late_sum_ms / len(complete),
        "pct_of_step": 100.0 * late_sum_ms / len(complete) / step_ms,
        "rank": late_rank,
        "skewed_steps_count": len(matched),
        "aligned_steps_count": len(complete),
        "late_ms": median(late["late_ms"] for late, _ in matched.values()),
        "late_at_op": Counter(late["late_at_op"] for late, _ in matched.values()).most_common(1)[0][0],
        "token_excess_pct": median(excess for _, excess in matched.values()),
        "tokens_per_step": mine["tokens_per_step"],
        "others_tokens_per_step": median(r["tokens_per_step"] for r in others),
        "max_seq_len": mine["max_seq_len"],
        "others_max_seq_len": max(r["max_seq_len"] for r in others),
        "padding_pct": mine["padding_pct"],
        "compute_tokens_per_s": mine["compute_tokens_per_s"],
        "others_compute_tokens_per_s": others_tps,
        "median_step_ms": step_ms,
        "tokens_per_step_by_rank": _by_rank(per_rank, "tokens_per_step", "{:.0f}"),
        "max_seq_len_by_rank": _by_rank(per_rank, "max_seq_len", "{:.0f}"),
        "padding_pct_by_rank": _by_rank(per_rank, "padding_pct", "{:.1f}"),
        "compute_tokens_per_s_by_rank": _by_rank(per_rank, "compute_tokens_per_s", "{:,.0f}"),
    }


def _by_rank(per_rank: list[dict], key: str, fmt: str) -> str:
    """'0: 1008, 1: 1016, 3: 8184' (n/a where unknown): one readable line for the report."""
    return ", ".join(f"{r['rank']}: " + ("n/a" if r[key] is None else fmt.format(r[key])) for r in per_rank)
