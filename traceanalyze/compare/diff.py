"""Two summary.json dicts -> a structured diff: job metrics, per phase, per rank, findings.

Everything here reads only the summary contract (see ARCHITECTURE.md). A metric that is
`null` in either summary (e.g. GPU idle on a CPU-only trace) is kept with `None` deltas,
never guessed. The gate (`gate.py`) applies its thresholds to `SummaryDiff.job`.

Two step times: the wall-clock step (`ranks[].metrics.step_time_ms`, equal on every rank of
a synchronous job) and a rank's *own* step time (`steps.per_step[].ms_by_rank`: the step
minus the time it waited at collectives for the last rank), which names the rank that holds
the job back; `steps.median_rank_step_ms` / `worst_rank_step_ms` are the latter.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from traceanalyze.findings import sort_finding_dicts
from traceanalyze.analysis.metrics import PHASE_LONG_LABELS as PHASE_LABELS
from traceanalyze.analysis.metrics import PHASES, median, own_step_medians, rank_skew_pct

UNITS = ("ms", "pct", "bytes")  # pct values are already shares of a step (0-100)


@dataclass(frozen=True)
class Delta:
    """One metric in the old and the new summary."""

    key: str    # stable id, e.g. "step_ms.median_rank", "phase_ms.backward.median"
    label: str  # what a user reads, e.g. "backward ms/step (median over ranks)"
    unit: str   # one of UNITS
    old: float | None
    new: float | None

    @property
    def change(self) -> float | None:
        """new - old, in `unit` (percentage points for pct metrics)."""
        if self.old is None or self.new is None:
            return None
        return self.new - self.old

    @property
    def change_pct(self) -> float | None:
        """Relative change in % of the old value; None when old is 0 or missing."""
        if self.change is None or not self.old:
            return None
        return 100.0 * self.change / self.old

    def to_dict(self) -> dict:
        return {**asdict(self), "change": self.change, "change_pct": self.change_pct}


@dataclass(frozen=True)
class RankDiff:
    """One rank's metrics in both summaries (a rank may exist in only one)."""

    rank: int
    in_old: bool
    in_new: bool
    metrics: list[Delta]

    def to_dict(self) -> dict:
        return {"rank": self.rank, "in_old": self.in_old, "in_new": self.in_new,
                "metrics": [m.to_dict() for m in self.metrics]}


@dataclass(frozen=True)
class SummaryDiff:
    """What moved between two runs; `old`/`new` name the runs (their trace_dir)."""

    old: str
    new: str
    job: list[Delta]
    ranks: list[RankDiff]
    findings_added: list[dict] = field(default_factory=list)
    findings_removed: list[dict] = field(default_factory=list)
    findings_unchanged: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "schema": "traceanalyze.diff/1", "old": self.old, "new": self.new,
            "job": [d.to_dict() for d in self.job],
            "ranks": [r.to_dict() for r in self.ranks],
            "findings": {"added": self.findings_added, "removed": self.findings_removed,
                         "unchanged": self.findings_unchanged},
            "notes": self.notes,
        }


def finding_key(finding: dict) -> tuple[str, tuple[int, ...]]:
    """Identity of a finding across runs: its rule and the exact set of ranks it names."""
    return finding["rule"], tuple(sorted(finding.get("ranks") or []))


def _metrics(rank_entry: dict) -> dict:
    return rank_entry.get("metrics") or {}


def _values(summary: dict, pick) -> list[float]:
    out = [pick(_metrics(r)) for r in summary.get("ranks") or []]
    return [float(v) for v in out if v is not None]


def _median(values: list[float]) -> float | None:
    return median(values) if values else None


def _max(values: list[float]) -> float | None:
    return max(values) if values else None


def _phase(name: str):
    return lambda m: (m.get("phases_ms") or {}).get(name)


def _skew_pct(summary: dict) -> float | None:
    return rank_skew_pct(summary)


def job_metrics(summary: dict) -> list[tuple[str, str, str, float | None]]:
    """The job-level numbers of one summary as (key, label, unit, value)."""
    steps = summary.get("steps") or {}
    wall = _values(summary, lambda m: (m.get("step_time_ms") or {}).get("median"))
    out = [
        ("step_ms.wall", "step time, wall clock (median over ranks)", "ms", _median(wall)),
        ("step_ms.median_rank", "own step time, median rank", "ms", steps.get("median_rank_step_ms")),
        ("step_ms.worst_rank", "own step time, worst rank", "ms", steps.get("worst_rank_step_ms")),
        ("rank_skew_pct", "rank skew (worst vs median rank own step time, % of median)", "pct",
         _skew_pct(summary)),
    ]
    for phase in PHASES:
        label = f"{PHASE_LABELS[phase]} ms/step"
        values = _values(summary, _phase(phase))
        out.append((f"phase_ms.{phase}.median", f"{label} (median over ranks)", "ms", _median(values)))
        out.append((f"phase_ms.{phase}.worst", f"{label} (max over ranks)", "ms", _max(values)))
    idle = _values(summary, lambda m: m.get("gpu_idle_pct"))
    out.append(("gpu_idle_pct.median", "GPU idle % (median over ranks)", "pct", _median(idle)))
    out.append(("gpu_idle_pct.worst", "GPU idle % (max over ranks)", "pct", _max(idle)))
    peak = _values(summary, lambda m: m.get("peak_memory_bytes"))
    out.append(("peak_memory_bytes.worst", "peak memory (max over ranks)", "bytes", _max(peak)))
    return out


def _own_step_ms(summary: dict, rank: int) -> float | None:
    """Median over aligned steps of the rank's own step time (steps.per_step[].ms_by_rank)."""
    return own_step_medians((summary.get("steps") or {}).get("per_step") or []).get(str(rank))


def rank_metrics(summary: dict, rank: int) -> list[tuple[str, str, str, float | None]]:
    """One rank's numbers as (key, label, unit, value); all None for a rank the summary lacks."""
    entry = _ranks_by_id(summary).get(rank)
    m = _metrics(entry or {})
    out = [("step_ms.median", "step time, wall clock (median)", "ms",
            (m.get("step_time_ms") or {}).get("median")),
           ("step_ms.own", "own step time (median)", "ms", _own_step_ms(summary, rank) if entry else None)]
    for phase in PHASES:
        out.append((f"phase_ms.{phase}", f"{PHASE_LABELS[phase]} ms/step", "ms", _phase(phase)(m)))
    out.append(("comm_ms_per_step", "communication ms/step (total)", "ms", m.get("comm_ms_per_step")))
    out.append(("gpu_idle_pct", "GPU idle %", "pct", m.get("gpu_idle_pct")))
    out.append(("peak_memory_bytes", "peak memory", "bytes", m.get("peak_memory_bytes")))
    return out


def _pair(old: list[tuple], new: list[tuple]) -> list[Delta]:
    new_by_key = {key: value for key, _label, _unit, value in new}
    return [Delta(key, label, unit, _num(value), _num(new_by_key.get(key)))
            for key, label, unit, value in old]


def _num(value) -> float | None:
    return None if value is None else float(value)


def _ranks_by_id(summary: dict) -> dict[int, dict]:
    return {int(r["rank"]): r for r in summary.get("ranks") or []}


def diff_ranks(old: dict, new: dict) -> list[RankDiff]:
    """Per-rank deltas over the union of ranks, ordered by rank."""
    old_ranks, new_ranks = _ranks_by_id(old), _ranks_by_id(new)
    return [RankDiff(rank, rank in old_ranks, rank in new_ranks,
                     _pair(rank_metrics(old, rank), rank_metrics(new, rank)))
            for rank in sorted(old_ranks.keys() | new_ranks.keys())]


def diff_findings(old: dict, new: dict) -> tuple[list[dict], list[dict], list[dict]]:
    """(added, removed, unchanged) findings, matched by `finding_key`, each in the finding order."""
    old_findings, new_findings = sort_finding_dicts(old.get("findings")), sort_finding_dicts(new.get("findings"))
    old_keys = {finding_key(f) for f in old_findings}
    new_keys = {finding_key(f) for f in new_findings}
    added = [f for f in new_findings if finding_key(f) not in old_keys]
    removed = [f for f in old_findings if finding_key(f) not in new_keys]
    unchanged = [f for f in new_findings if finding_key(f) in old_keys]
    return added, removed, unchanged


def _notes(old: dict, new: dict) -> list[str]:
    notes = []
    if old.get("world_size") != new.get("world_size"):
        notes.append(f"world size differs: {old.get('world_size')} -> {new.get('world_size')}; "
                     "job metrics are compared, per-rank rows only where a rank exists in both")
    old_steps = len((old.get("steps") or {}).get("aligned") or [])
    new_steps = len((new.get("steps") or {}).get("aligned") or [])
    if old_steps != new_steps:
        notes.append(f"number of aligned steps differs: {old_steps} -> {new_steps}")
    return notes


def diff_summaries(old: dict, new: dict) -> SummaryDiff:
    """Compare two summary.json dicts (old = baseline, new = candidate)."""
    added, removed, unchanged = diff_findings(old, new)
    return SummaryDiff(
        old=str(old.get("trace_dir") or "old"), new=str(new.get("trace_dir") or "new"),
        job=_pair(job_metrics(old), job_metrics(new)),
        ranks=diff_ranks(old, new),
        findings_added=added, findings_removed=removed, findings_unchanged=unchanged,
        notes=_notes(old, new),
    )
