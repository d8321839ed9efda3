"""The summary.json contract (`traceanalyze.summary/1`) as typed dataclasses.

`Summary.from_dict(d).to_dict() == d` for every summary this version writes; keys it does
not know (added by a later version: the contract only grows) are kept in `extra` and written
back. `Summary.load(path)` reads a file and validates it against
`traceanalyze/summary/summary.schema.json` first (unknown keys allowed, see above).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from traceanalyze.analysis.metrics import PHASES
from traceanalyze.atomic import write_text_atomic
from traceanalyze.errors import TraceError
from traceanalyze.findings import Finding

SCHEMA_ID = "traceanalyze.summary/1"
SCHEMA_PATH = Path(__file__).resolve().parent / "summary.schema.json"


R = TypeVar("R", bound="_Record")


@dataclass
class _Record:
    """A JSON object with known keys as fields; unknown keys stay in `extra`."""

    # field name -> (from JSON, to JSON) for values that are not plain JSON
    _convert: ClassVar[dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]]] = {}

    @classmethod
    def from_dict(cls: type[R], data: Mapping[str, Any]) -> R:
        known = [f.name for f in fields(cls) if f.name != "extra"]
        values = {}
        for name in known:
            value = data.get(name)
            if name in cls._convert and value is not None:
                value = cls._convert[name][0](value)
            values[name] = value
        extra = {k: v for k, v in data.items() if k not in known}
        return cls(**values, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if f.name in self._convert and value is not None:
                value = self._convert[f.name][1](value)
            out[f.name] = value
        out.update(self.extra)
        return out


def _list_of(cls: type[_Record]) -> tuple[Callable, Callable]:
    return (lambda rows: [cls.from_dict(r) for r in rows], lambda items: [i.to_dict() for i in items])


def _one(cls: type[_Record]) -> tuple[Callable, Callable]:
    return (cls.from_dict, lambda item: item.to_dict())


_INT_KEYS = (lambda d: {int(k): v for k, v in d.items()}, lambda d: {str(k): v for k, v in d.items()})


@dataclass
class StepTime(_Record):
    median: float | None = None
    p95: float | None = None
    max: float | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class RankMetrics(_Record):
    """Per-rank numbers over the aligned steps (phases_ms are means per step)."""

    steps: int = 0
    step_time_ms: StepTime = field(default_factory=StepTime)
    phases_ms: dict[str, float | None] = field(default_factory=dict)
    phases_pct: dict[str, float | None] = field(default_factory=dict)
    gpu_busy_pct: float | None = None
    gpu_idle_pct: float | None = None
    comm_overlap_pct: float | None = None
    comm_ms_per_step: float | None = None
    peak_memory_bytes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    _convert: ClassVar = {"step_time_ms": _one(StepTime)}


@dataclass
class Rank(_Record):
    rank: int = 0
    file: str | None = None
    clock_offset_ns: int | None = None
    metrics: RankMetrics | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    _convert: ClassVar = {"metrics": _one(RankMetrics)}


@dataclass
class StepRow(_Record):
    """One aligned step: each rank's own step time (ms_by_rank, keyed by rank number)."""

    step: int = 0
    ms_by_rank: dict[int, float | None] = field(default_factory=dict)
    median_ms: float | None = None
    worst_ms: float | None = None
    worst_rank: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    _convert: ClassVar = {"ms_by_rank": _INT_KEYS}


@dataclass
class Lateness(_Record):
    step: int = 0
    rank: int = 0
    late_ms: float | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Steps(_Record):
    aligned: list[int] = field(default_factory=list)
    median_rank_step_ms: float | None = None
    worst_rank: int | None = None
    worst_rank_step_ms: float | None = None
    per_step: list[StepRow] = field(default_factory=list)
    lateness_ms: list[Lateness] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    _convert: ClassVar = {"per_step": _list_of(StepRow), "lateness_ms": _list_of(Lateness)}


@dataclass
class PhaseSpan(_Record):
    phase: str = ""
    start_ms: float = 0.0
    dur_ms: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class TimelineRow(_Record):
    rank: int = 0
    step: int = 0
    dur_ms: float = 0.0
    phases: list[PhaseSpan] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    _convert: ClassVar = {"phases": _list_of(PhaseSpan)}


@dataclass
class MemoryRow(_Record):
    rank: int = 0
    step: int = 0
    peak_allocated_bytes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class LoadIssue(_Record):
    rank: int | None = None
    file: str | None = None
    kind: str = ""
    severity: str = "info"
    message: str = ""
    count: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)


def _findings_from(rows: list[dict]) -> list[Finding]:
    return [Finding.from_dict(r) for r in rows]


@dataclass
class Summary(_Record):
    """The whole analysis as data: what every renderer (terminal, HTML, CI, diff) reads."""

    schema: str = SCHEMA_ID
    tool_version: str = ""
    trace_dir: str = ""
    world_size: int = 0
    ranks: list[Rank] = field(default_factory=list)
    steps: Steps = field(default_factory=Steps)
    timeline: list[TimelineRow] = field(default_factory=list)
    memory: list[MemoryRow] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    load_issues: list[LoadIssue] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    # keys of a findings[] item that Finding does not know, by position (kept for to_dict)
    finding_extra: list[dict[str, Any]] = field(default_factory=list, repr=False)
    _convert: ClassVar = {"ranks": _list_of(Rank), "steps": _one(Steps),
                          "timeline": _list_of(TimelineRow), "memory": _list_of(MemoryRow),
                          "findings": (_findings_from, lambda items: [f.to_dict() for f in items]),
                          "load_issues": _list_of(LoadIssue)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Summary:
        summary = super().from_dict(data)
        summary.extra.pop("finding_extra", None)
        known = {f.name for f in fields(Finding)}
        summary.finding_extra = [{k: v for k, v in row.items() if k not in known}
                                 for row in data.get("findings") or []]
        return summary

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out.pop("finding_extra")
        for row, extra in zip(out["findings"], self.finding_extra):
            row.update(extra)
        return out

    @classmethod
    def load(cls, path: str | Path) -> Summary:
        """Read a summary.json, validated against the JSON Schema; TraceError names what is wrong."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise TraceError(f"cannot read the summary: {exc.strerror}", str(path)) from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise TraceError(f"not a valid summary.json ({exc})", str(path)) from None
        problem = schema_problem(data)
        if problem:
            raise TraceError(f"not a valid {SCHEMA_ID} summary: {problem}", str(path))
        return cls.from_dict(data)

    def save(self, path: str | Path) -> Path:
        """Write summary.json (what `traceanalyze DIR` writes)."""
        return write_summary_json(self.to_dict(), Path(path))

    def rank(self, number: int) -> Rank:
        """The ranks[] entry of rank `number` (KeyError when it was not analysed)."""
        for r in self.ranks:
            if r.rank == number:
                return r
        raise KeyError(number)


def _open_ended(schema: Any) -> Any:
    """The schema without `additionalProperties: false`: later versions may add keys."""
    if isinstance(schema, dict):
        return {k: _open_ended(v) for k, v in schema.items()
                if not (k == "additionalProperties" and v is False)}
    if isinstance(schema, list):
        return [_open_ended(v) for v in schema]
    return schema


@cache
def _validator():
    import jsonschema

    schema = _open_ended(json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))
    return jsonschema.Draft202012Validator(schema)


def schema_problem(data: Any) -> str | None:
    """The first place where `data` breaks the summary schema (None when it is valid)."""
    error = next(iter(sorted(_validator().iter_errors(data), key=lambda e: list(e.absolute_path))), None)
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
    return f"{where}: {error.message[:200]}"


__all__ = ["Summary", "Rank", "RankMetrics", "StepTime", "Steps", "StepRow", "Lateness",
           "TimelineRow", "PhaseSpan", "MemoryRow", "LoadIssue", "Finding", "PHASES", "schema_problem"]


def _json_safe(value):
    """NaN and infinities are not JSON; the contract says null for what cannot be computed."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def write_summary_json(summary: dict, path: Path) -> Path:
    """Write a summary dict as summary.json (atomically; NaN and infinities as null)."""
    write_text_atomic(path, json.dumps(_json_safe(summary), indent=2, default=str) + "\n")
    return path
