"""Stage 4, before the rules: can this window support a verdict at all?

A rule's `judge:` block in rule.yaml says what it needs (`min_steps_count` ProfilerSteps,
`min_window_ms` of trace, `needs_profiler_steps`); below that the rule abstains: it reports
nothing, and the summary says why ("too little to judge") instead of a warning built on one
step, a 0.2 ms window or a start-up window without ProfilerStep.

`window_facts(con)` reads what the trace database holds: the aligned ProfilerSteps, the window
length, whether the steps are real or one synthetic whole-trace window, the loaded ranks
against the declared world size, and, for a trace without ProfilerStep, the training
iterations recognisable from repeating markers (Optimizer.step, DataLoader __next__).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Markers that run once per training iteration, in the order they are tried.
ITERATION_MARKERS = (("Optimizer.step", "Optimizer.step#%"),
                     ("DataLoader __next__", "enumerate(DataLoader)#%"),
                     ("DDP forward", "DistributedDataParallel.forward"))


@dataclass(frozen=True)
class Judge:
    """What a rule needs to judge: steps, window length, real ProfilerSteps."""

    min_steps_count: int = 2
    min_window_ms: float = 1.0
    needs_profiler_steps: bool = True
    needs_window: bool = True  # False: the rule reads no profiled window (Flight Recorder dumps)

    def describe(self) -> str:
        """One line for docs: what the rule needs before it judges."""
        if not self.needs_window:
            return "no profiled window (it reads the Flight Recorder dumps)"
        needs = [f"at least {self.min_steps_count} aligned step{'' if self.min_steps_count == 1 else 's'}"
                 if self.needs_profiler_steps else "any window (no ProfilerStep needed)",
                 f"a window of at least {self.min_window_ms:g} ms"]
        return "; ".join(needs)

    @classmethod
    def parse(cls, raw: Any, where: str, error) -> Judge:
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping) or not set(raw) <= {"min_steps_count", "min_window_ms",
                                                            "needs_profiler_steps", "needs_window"}:
            raise error("judge must be a mapping of min_steps_count / min_window_ms / "
                        "needs_profiler_steps / needs_window", where)
        return cls(int(raw.get("min_steps_count", cls.min_steps_count)),
                   float(raw.get("min_window_ms", cls.min_window_ms)),
                   bool(raw.get("needs_profiler_steps", cls.needs_profiler_steps)),
                   bool(raw.get("needs_window", cls.needs_window)))


@dataclass(frozen=True)
class Window:
    """What the loaded window can support."""

    steps_count: int            # aligned ProfilerSteps (0 when the trace has none)
    window_ms: float            # the analysed window: sum of the aligned steps (or the whole trace)
    profiler_steps: bool        # the trace has ProfilerStep#N (else one synthetic window)
    loaded_ranks: int
    world_size: int
    iterations: dict | None     # without ProfilerStep: {"marker", "count", "mean_ms"} when recognisable

    @property
    def too_little(self) -> bool:
        """Under two aligned ProfilerSteps, or under 1 ms: nothing here deserves a warning."""
        return not self.profiler_steps or self.steps_count < 2 or self.window_ms < 1.0

    def screen(self, judge: Judge, severity: str | None) -> tuple[str | None, str | None]:
        """(why the rule abstains or None, the severity its findings get): a rule that judges
        from one step reports what it sees at info on a window too small for any verdict; a
        rule that reads no window (`needs_window: false`) judges whatever the window."""
        if not judge.needs_window:
            return None, severity
        return self.abstain_reason(judge), "info" if self.too_little else severity

    def abstain_reason(self, judge: Judge) -> str | None:
        """Why a rule with these needs cannot judge this window, or None."""
        if judge.needs_profiler_steps and not self.profiler_steps:
            found = (f"; {self.iterations['count']} iterations are recognisable by "
                     f"{self.iterations['marker']} (about {self.iterations['mean_ms']:.0f} ms apart)"
                     if self.iterations else "; no repeating iteration marker either")
            return ("the trace has no ProfilerStep (recorded without a schedule), so the window "
                    "includes start-up and cannot support per-step verdicts" + found)
        if judge.needs_profiler_steps and self.steps_count < judge.min_steps_count:
            return (f"{self.steps_count} aligned step{'' if self.steps_count == 1 else 's'}; "
                    f"this rule needs at least {judge.min_steps_count}")
        if self.window_ms < judge.min_window_ms:
            return f"a {self.window_ms:.2g} ms window; this rule needs at least {judge.min_window_ms:g} ms"
        return None


def _iterations(con) -> dict | None:
    """Without ProfilerStep: the first marker that repeats on every rank, its count and spacing."""
    for label, pattern in ITERATION_MARKERS:
        rows = con.execute("""
            WITH host AS (
                SELECT rank, tid, name, ts_ns FROM cpu_ops
                UNION ALL
                SELECT rank, tid, name, ts_ns FROM annotations WHERE NOT on_gpu
            ),
            marks AS (
                SELECT c.rank, c.ts_ns, lag(c.ts_ns) OVER (PARTITION BY c.rank ORDER BY c.ts_ns) AS prev_ns
                FROM host AS c JOIN main_threads AS m ON m.rank = c.rank AND m.tid = c.tid
                WHERE c.name LIKE $pattern)
            SELECT rank, count(*), avg(ts_ns - prev_ns) FROM marks GROUP BY rank""",
                           {"pattern": pattern}).fetchall()
        if rows and len(rows) == con.execute("SELECT count(*) FROM ranks").fetchone()[0]:
            count = min(r[1] for r in rows)
            if count >= 2:
                return {"marker": label, "count": int(count),
                        "mean_ms": round(sum(r[2] for r in rows) / len(rows) / 1e6, 3)}
    return None


def window_facts(con) -> Window:
    steps_count, window_ns = con.execute(
        "SELECT count(*), coalesce(sum(median_dur_ns), 0) FROM aligned_steps").fetchone()
    synthetic = bool(con.execute("SELECT coalesce(bool_or(synthetic), false) FROM steps").fetchone()[0])
    declared, loaded = con.execute("SELECT max(world_size), count(*) FROM ranks").fetchone()
    return Window(
        steps_count=0 if synthetic else int(steps_count), window_ms=window_ns / 1e6,
        profiler_steps=not synthetic, loaded_ranks=int(loaded),
        world_size=int(declared or loaded), iterations=_iterations(con) if synthetic else None)


def judgement(window: Window, abstained: list[tuple[str, str]]) -> dict:
    """The summary's `judgement`: what the window supports, and the rules that abstained."""
    if not window.profiler_steps:
        status = "no-steps"
        statement = ("No ProfilerStep in the trace: per-step verdicts are not possible"
                     + (f"; {window.iterations['count']} iterations were recognised by "
                        f"{window.iterations['marker']} (about {window.iterations['mean_ms']:.0f} ms "
                        "apart). Record with torch.profiler.schedule(...) and prof.step() for a verdict."
                        if window.iterations else "; no repeating iteration marker was found either."))
    elif window.steps_count < 2 or window.window_ms < 1.0:
        status = "too-little"
        statement = (f"Too little to judge: {window.steps_count} aligned step"
                     f"{'' if window.steps_count == 1 else 's'} in a {window.window_ms:.3g} ms window. "
                     "Profile at least a few steps (schedule active >= 4) for a verdict.")
    elif abstained:
        status = "partial"
        statement = (f"Some rules need more than these {window.steps_count} steps and did not judge: "
                     + ", ".join(sorted({r for r, _ in abstained})) + ".")
    else:
        status, statement = "ok", ""
    if window.world_size > window.loaded_ranks:
        statement = (statement + " " if statement else "") + (
            f"Only {window.loaded_ranks} of {window.world_size} ranks "
            f"{'is' if window.loaded_ranks == 1 else 'are'} loaded: a rank that is not "
            "loaded can hold the loaded ones back without being named.")
    return {"status": status, "statement": statement, "steps_count": window.steps_count,
            "window_ms": round(window.window_ms, 3), "profiler_steps": window.profiler_steps,
            "loaded_ranks": window.loaded_ranks, "world_size": window.world_size,
            "iterations": window.iterations,
            "abstained": [{"rule": r, "reason": why} for r, why in abstained]}
