"""`traceanalyze check` run once per recorded fixture (real command line, real pipeline), cached."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "ddp"


@dataclass(frozen=True)
class CheckRun:
    """One `traceanalyze check <fixture dir> --format sarif --output ...` run."""

    scenario: str
    proc: subprocess.CompletedProcess
    out_dir: Path

    @property
    def summary_path(self) -> Path:
        return self.out_dir / "summary.json"

    @property
    def summary(self) -> dict:
        return json.loads(self.summary_path.read_text())

    @property
    def sarif(self) -> dict:
        return json.loads((self.out_dir / "check.sarif").read_text())

    @property
    def reasons(self) -> list[str]:
        """stdout minus the verdict and note lines: one line per reason."""
        return [line for line in self.proc.stdout.splitlines()
                if not line.startswith(("traceanalyze check:", "note:"))]


_RUNS: dict[str, CheckRun] = {}


def check_fixture(scenario: str, base: Path, *extra: str) -> CheckRun:
    """Analyze fixtures/ddp/<scenario> via `traceanalyze check` (once per scenario and options)."""
    key = "|".join([scenario, *extra])
    if key not in _RUNS:
        out_dir = base / key.replace("|", "_").replace("-", "")
        cmd = [sys.executable, "-m", "traceanalyze", "check", str(FIXTURES / scenario),
               "--out", str(out_dir), "--format", "sarif", "--output", str(out_dir / "check.sarif"), *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
        _RUNS[key] = CheckRun(scenario, proc, out_dir)
    return _RUNS[key]


def expected(scenario: str) -> list[dict]:
    """What a fixture must be diagnosed with, from its expected.json, as a list: the injected
    problem(s), and any that is inherent to the job as recorded ("inherent")."""
    data = json.loads((FIXTURES / scenario / "expected.json").read_text())
    out = []
    for key in ("injected", "inherent"):
        value = data.get(key)
        out += [] if value is None else value if isinstance(value, list) else [value]
    return out
