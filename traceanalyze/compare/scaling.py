"""Scaling across runs: the same job traced at several world sizes -> throughput, efficiency, lost time.

Each run is one trace folder, loaded by the real loader into its own trace database. From
each database this module reads the aligned steps, the step phases and the batch shapes, and
compares every run with the smallest one (the baseline, world size W0).

Definitions (also printed by `traceanalyze scaling --format json` under "definitions"):

- step time T(W): mean over the aligned steps of the slowest rank's ProfilerStep duration (the
  job advances at the pace of its slowest rank; the mean, not the median, is what throughput sees).
- throughput X(W) = samples per step per rank x W / T(W) (tokens/s likewise when token ids are
  visible). Samples and tokens per rank come from the input shapes (record_shapes=True): the
  int64 ids [batch, seq_len] of `aten::embedding`, else the first input of the first op of each
  `DistributedDataParallel.forward`; summed over the micro-batches of the step.
- scaling efficiency E(W) = (X(W) / W) / (X(W0) / W0): per-rank throughput relative to the baseline.
  1.0 (100%) is linear scaling.
- weak-scaling efficiency = T(W0) / T(W), defined when every run has the same per-rank batch
  (each rank does the same work, so ideally the step time stays constant). Equals E(W) then.
- strong-scaling efficiency = (T(W0) x W0) / (T(W) x W), defined when every run has the same
  global batch (the work is split W ways, so ideally the step time falls as 1/W). Equals E(W) then.
- expected phase time at W = the baseline's phase time x (per-rank samples at W / at W0): ideal
  scaling keeps every phase proportional to the work per rank. Lost time of a phase = actual -
  expected; the lost times add up to the mean rank's step time minus the ideal step time (phases
  are means over ranks, T(W) is the slowest rank's; in DDP they differ by little).
- phases: those of `step_phases` (data_wait, h2d, forward, backward, optimizer, other), with
  comm_exposed split into `wait` (waiting for the last rank to reach a collective, the largest
  `collective_arrivals.wait_for_last_ns` of the step, capped at comm_exposed) and
  `communication` (the rest of comm_exposed: blocked on transfers).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import traceanalyze.db as tracedb
from traceanalyze.errors import TraceanalyzeError
from traceanalyze.lazy_import import duckdb
from traceanalyze.load import load_trace_dir

SCHEMA = "traceanalyze.scaling/1"
PHASES = ("data_wait", "h2d", "forward", "backward", "optimizer", "communication", "wait", "other")
COMPUTE_PHASES = ("forward", "backward", "optimizer")
SAME_BATCH_TOLERANCE = 0.01  # batches within 1% are "the same" (weak / strong scaling mode)

DEFINITIONS = {
    "step_ms": "mean over aligned steps of the slowest rank's ProfilerStep duration",
    "samples_per_s": "samples per rank per step x world size / step time",
    "efficiency_pct": "(throughput / W) / (baseline throughput / W0) x 100; 100 = linear scaling",
    "weak_efficiency_pct": "T(W0) / T(W) x 100, only when every run has the same per-rank batch",
    "strong_efficiency_pct": "T(W0) x W0 / (T(W) x W) x 100, only when every run has the same global batch",
    "expected_phases_ms": "baseline phase time x (per-rank samples at W / per-rank samples at W0)",
    "lost_ms": "actual phase time - expected phase time; sums to the mean rank step time - ideal step time",
    "wait": "time blocked in collectives waiting for the last rank (largest wait_for_last of the step)",
    "communication": "exposed communication (comm_exposed and pipeline_wait) minus wait",
}

# Per (rank, step): samples and tokens of the step, summed over its forward passes (micro-batches).
BATCH_SQL = """
SELECT b.rank, b.step, b.samples::DOUBLE AS samples, b.tokens::DOUBLE AS tokens
FROM step_batches AS b JOIN aligned_steps USING (step)
"""

# Per (rank, aligned step): the step's duration and its phases, comm_exposed split into wait + communication.
PHASES_SQL = """
SELECT p.rank, p.step, p.dur_ns,
       p.data_wait_ns, p.h2d_ns, p.forward_ns, p.backward_ns, p.optimizer_ns,
       p.comm_exposed_ns + p.pipeline_wait_ns - w.exposed_wait_ns AS communication_ns,
       w.exposed_wait_ns AS wait_ns,
       p.other_ns
FROM step_phases AS p
JOIN aligned_steps USING (step)
JOIN step_waits AS w USING (rank, step)
ORDER BY p.step, p.rank
"""

WORLD_SQL = "SELECT count(*), max(world_size) FROM ranks"


@dataclass(frozen=True)
class RunStats:
    """One run (a trace folder of the job at one world size), measured on its own."""

    trace_dir: str
    world_size: int
    ranks_traced: int
    steps: tuple[int, ...]                    # aligned steps used
    step_ms: float                            # mean over aligned steps of the slowest rank's step
    samples_per_rank: float | None            # samples per rank per step (mean), None when not visible
    tokens_per_rank: float | None             # token ids per rank per step incl. padding, None when not visible
    batch_source: str                         # 'shapes' | 'option' | 'unknown'
    phases_ms: dict[str, float]               # mean per (rank, step), keys = PHASES

    @property
    def global_samples(self) -> float | None:
        return None if self.samples_per_rank is None else self.samples_per_rank * self.world_size

    @property
    def samples_per_s(self) -> float | None:
        return None if self.global_samples is None else self.global_samples / (self.step_ms / 1e3)

    @property
    def tokens_per_s(self) -> float | None:
        if self.tokens_per_rank is None:
            return None
        return self.tokens_per_rank * self.world_size / (self.step_ms / 1e3)


@dataclass(frozen=True)
class RunScaling:
    """A run compared with the baseline run."""

    run: RunStats
    speedup: float                            # throughput / baseline throughput
    efficiency_pct: float                     # speedup / (W / W0) x 100
    weak_efficiency_pct: float | None
    strong_efficiency_pct: float | None
    ideal_step_ms: float                      # baseline step time x work ratio
    expected_phases_ms: dict[str, float]
    lost_ms: dict[str, float]                 # actual - expected, per phase

    def to_dict(self) -> dict:
        run = self.run
        return {
            "trace_dir": run.trace_dir, "world_size": run.world_size, "ranks_traced": run.ranks_traced,
            "steps": list(run.steps), "step_ms": run.step_ms, "ideal_step_ms": self.ideal_step_ms,
            "samples_per_rank_per_step": run.samples_per_rank, "tokens_per_rank_per_step": run.tokens_per_rank,
            "global_batch_samples": run.global_samples, "batch_source": run.batch_source,
            "samples_per_s": run.samples_per_s, "tokens_per_s": run.tokens_per_s,
            "speedup": self.speedup, "efficiency_pct": self.efficiency_pct,
            "weak_efficiency_pct": self.weak_efficiency_pct,
            "strong_efficiency_pct": self.strong_efficiency_pct,
            "phases_ms": dict(run.phases_ms), "expected_phases_ms": dict(self.expected_phases_ms),
            "lost_ms": dict(self.lost_ms),
        }


@dataclass(frozen=True)
class ScalingReport:
    """All runs, the baseline, the scaling mode and a one-paragraph verdict."""

    mode: str                                 # weak | strong | mixed | assumed-weak
    baseline: RunStats
    runs: list[RunScaling]
    verdict: str
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA, "mode": self.mode,
            "baseline": {"trace_dir": self.baseline.trace_dir, "world_size": self.baseline.world_size},
            "definitions": dict(DEFINITIONS), "phases": list(PHASES),
            "runs": [r.to_dict() for r in self.runs], "verdict": self.verdict, "notes": list(self.notes),
        }


# ---- measuring one run ---------------------------------------------------------------------------

def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def measure_run(con: duckdb.DuckDBPyConnection, trace_dir: str) -> RunStats:
    """Step time, batch and phases of one loaded run (`batch_source` 'shapes' or 'unknown')."""
    ranks_traced, world = con.execute(WORLD_SQL).fetchone()
    phase_rows = con.execute(PHASES_SQL).fetchall()
    if not phase_rows:
        raise TraceanalyzeError("no aligned ProfilerSteps: cannot measure a step time", trace_dir)
    slowest: dict[int, int] = {}
    for row in phase_rows:
        slowest[row[1]] = max(slowest.get(row[1], 0), row[2])
    phases = {name: sum(r[3 + i] for r in phase_rows) / len(phase_rows) / 1e6
              for i, name in enumerate(PHASES)}
    batch = con.execute(BATCH_SQL).fetchall()
    samples = _mean([r[2] for r in batch if r[2] is not None]) if all(r[2] is not None for r in batch) else None
    tokens = _mean([r[3] for r in batch if r[3] is not None]) if all(r[3] is not None for r in batch) else None
    return RunStats(
        trace_dir=trace_dir, world_size=int(world or ranks_traced), ranks_traced=int(ranks_traced),
        steps=tuple(sorted(slowest)), step_ms=sum(slowest.values()) / len(slowest) / 1e6,
        samples_per_rank=samples if batch else None, tokens_per_rank=tokens if batch else None,
        batch_source="shapes" if samples is not None else "unknown", phases_ms=phases,
    )


def _with_batch(run: RunStats, per_rank: float) -> RunStats:
    return replace(run, samples_per_rank=float(per_rank), tokens_per_rank=None, batch_source="option")


# ---- comparing runs ------------------------------------------------------------------------------

def _same(a: float, b: float) -> bool:
    return abs(a - b) <= SAME_BATCH_TOLERANCE * max(abs(a), abs(b))


def scaling_mode(runs: Sequence[RunStats]) -> str:
    """weak (same per-rank batch), strong (same global batch), mixed, or assumed-weak (batch unknown)."""
    if any(r.samples_per_rank is None for r in runs):
        return "assumed-weak"
    base = runs[0]
    if all(_same(r.samples_per_rank, base.samples_per_rank) for r in runs):
        return "weak"
    if all(_same(r.global_samples, base.global_samples) for r in runs):
        return "strong"
    return "mixed"


def compare(base: RunStats, run: RunStats, mode: str) -> RunScaling:
    """`run` against the baseline: efficiencies and lost time per phase."""
    known = base.samples_per_rank is not None and run.samples_per_rank is not None
    work_ratio = run.samples_per_rank / base.samples_per_rank if known else 1.0
    per_rank_throughput = work_ratio / run.step_ms          # samples per rank per ms, in baseline batches
    base_per_rank_throughput = 1.0 / base.step_ms
    efficiency = per_rank_throughput / base_per_rank_throughput
    expected = {p: base.phases_ms[p] * work_ratio for p in PHASES}
    return RunScaling(
        run=run,
        speedup=efficiency * run.world_size / base.world_size,
        efficiency_pct=100.0 * efficiency,
        weak_efficiency_pct=100.0 * base.step_ms / run.step_ms if mode in ("weak", "assumed-weak") else None,
        strong_efficiency_pct=(100.0 * base.step_ms * base.world_size / (run.step_ms * run.world_size)
                               if mode == "strong" else None),
        ideal_step_ms=base.step_ms * work_ratio,
        expected_phases_ms=expected,
        lost_ms={p: run.phases_ms[p] - expected[p] for p in PHASES},
    )


_HINTS = {
    "compute": "forward/backward/optimizer got slower per rank although each rank does the same work: "
               "the ranks compete for shared CPU cores, memory bandwidth or GPUs (oversubscription), "
               "or devices throttle",
    "communication": "exposed communication grew: overlap it with backward (bucket order, "
                     "bucket_cap_mb), send less (bf16 gradients, compression hooks) or raise the "
                     "per-rank batch so compute covers it",
    "wait": "ranks wait for the slowest rank at collectives: look for stragglers "
            "(traceanalyze RUN_DIR on the largest run)",
    "data_wait": "the input pipeline slowed down: DataLoader workers compete for CPU or storage",
    "h2d": "host-to-device copies slowed down: pinned memory, PCIe contention",
    "other": "host work outside the model grew (logging, metrics, Python overhead)",
}


def _verdict(base: RunStats, runs: list[RunScaling]) -> str:
    largest = max(runs, key=lambda r: (r.run.world_size, -r.efficiency_pct))
    if largest.run.world_size == base.world_size:
        return "only one world size: nothing to compare"
    lost = largest.run.step_ms - largest.ideal_step_ms
    head = (f"at world size {largest.run.world_size} the scaling efficiency is "
            f"{largest.efficiency_pct:.0f}% of linear vs world size {base.world_size}")
    if lost <= 0:
        return head + "; no time is lost against the ideal step time."
    groups = {"compute": sum(largest.lost_ms[p] for p in COMPUTE_PHASES),
              **{p: largest.lost_ms[p] for p in PHASES if p not in COMPUTE_PHASES}}
    ordered = sorted(((v, k) for k, v in groups.items() if v > 0), reverse=True)
    parts = ", ".join(f"{k} +{v:.0f} ms" for v, k in ordered[:3])
    top = ordered[0][1]
    return (f"{head}; {lost:.0f} ms of the {largest.run.step_ms:.0f} ms step are lost against the ideal "
            f"{largest.ideal_step_ms:.0f} ms ({parts}). Most of it is {top}: {_HINTS[top]}.")


def _notes(mode: str, runs: Sequence[RunStats]) -> list[str]:
    notes = []
    if mode == "assumed-weak":
        notes.append("batch sizes are not visible in the traces (record_shapes=False or no "
                     "DistributedDataParallel.forward); assumed the same per-rank batch in every "
                     "run: pass --batch-size or --global-batch-size for throughput in samples/s")
    if mode == "mixed":
        notes.append("the runs have neither the same per-rank nor the same global batch: only the "
                     "throughput-based efficiency is defined")
    for r in runs:
        if r.ranks_traced != r.world_size:
            notes.append(f"{r.trace_dir}: {r.ranks_traced} of {r.world_size} ranks traced; "
                         "throughput assumes the untraced ranks match the traced ones")
    return notes


def build_report(stats: Sequence[RunStats], batch_size: float | None = None,
                 global_batch_size: float | None = None) -> ScalingReport:
    """Runs (any order) -> the scaling report against the smallest world size."""
    if len(stats) < 2:
        raise TraceanalyzeError("scaling needs at least two runs (trace folders at different world sizes)")
    if batch_size is not None and global_batch_size is not None:
        raise TraceanalyzeError("give --batch-size or --global-batch-size, not both")
    runs = sorted(stats, key=lambda r: r.world_size)
    if batch_size is not None:
        runs = [_with_batch(r, batch_size) for r in runs]
    elif global_batch_size is not None:
        runs = [_with_batch(r, global_batch_size / r.world_size) for r in runs]
    mode = scaling_mode(runs)
    base = runs[0]
    compared = [compare(base, r, mode) for r in runs]
    return ScalingReport(mode=mode, baseline=base, runs=compared, verdict=_verdict(base, compared),
                         notes=_notes(mode, runs))


def measure_trace_dir(run_dir: Path, db_path: Path, progress: Callable[[str], None] | None = None) -> RunStats:
    """Load one run with the real loader (reused when unchanged) and measure it."""
    result = load_trace_dir(run_dir, db_path, progress=progress)
    con = tracedb.connect(result.db_path, read_only=True)
    try:
        return measure_run(con, str(run_dir))
    finally:
        con.close()


def analyze_runs(run_dirs: Sequence[Path], db_path_for: Callable[[Path], Path],
                 batch_size: float | None = None, global_batch_size: float | None = None,
                 progress: Callable[[str], None] | None = None) -> ScalingReport:
    """Load every run (a database per run, reused when unchanged) and compare."""
    stats = [measure_trace_dir(run_dir, db_path_for(run_dir), progress) for run_dir in run_dirs]
    return build_report(stats, batch_size, global_batch_size)
