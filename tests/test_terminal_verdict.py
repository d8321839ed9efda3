"""The terminal verdict: readable in 80 columns at any world size, colour only on a terminal."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

from processes import stop_popen
from report_helpers import FIXTURES
from summary_builder import finding, load_issue, make_summary

from traceanalyze.output.terminal import render_verdict


def _big_job() -> dict:
    step_ms = {r: 100.0 + (r % 5) for r in range(64)}
    step_ms[17] = 180.0
    return make_summary(step_ms, findings=[
        finding("collective-straggler", "error", ranks=[17], title="rank 17 arrives 80 ms late", ms_per_step=80.0),
        finding("step-jitter", "info", ranks=list(range(64)), title="steps vary", ms_per_step=None),
        finding("dataloader-stall", "warning", ranks=[3], title="rank 3 waits for data", ms_per_step=120.0),
    ], load_issues=[load_issue("warning", rank=5)])


def test_64_ranks_fit_in_80_columns_and_a_screen():
    text = render_verdict(_big_job())
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert len(lines) < 40
    assert "rank 17 *" in text and "median rank" in text
    assert "more ranks in report.html" in text
    # the median rank row: per phase, the median over all 64 ranks (the mean of the middle two)
    forward_ms = sorted(0.25 * (180.0 if r == 17 else 100.0 + r % 5) for r in range(64))
    row = next(line for line in lines if line.startswith("  median rank")).split()[2:]
    assert float(row[2]) == (forward_ms[31] + forward_ms[32]) / 2 == 25.5
    step_ms = sorted(180.0 if r == 17 else 100.0 + r % 5 for r in range(64))
    assert float(row[-1]) == (step_ms[31] + step_ms[32]) / 2 == 102.0  # the median rank's mean step


def test_the_step_column_is_the_summary_mean_step():
    """The renderer reads the rank's mean step (metrics.step_time_ms.mean), it does not add phases up."""
    summary = make_summary({0: 100.0, 1: 100.0})
    summary["ranks"][1]["metrics"]["step_time_ms"]["mean"] = 123.0
    lines = render_verdict(summary).splitlines()
    assert next(line for line in lines if line.startswith("  rank 0")).split()[-1] == "100"
    assert next(line for line in lines if line.startswith("  rank 1")).split()[-1] == "123"


def test_findings_are_listed_by_severity_with_rank_cost_and_advice():
    text = render_verdict(_big_job())
    part = text[text.index("Findings"):]
    order = [part.index(rule) for rule in ("collective-straggler", "dataloader-stall", "step-jitter")]
    assert order == sorted(order)  # error, then warning, then info
    assert "collective-straggler | rank 17 | costs 80.0 ms/step" in part
    assert "step-jitter | all ranks" in part
    assert "try: do less" in part


def test_load_issues_are_mentioned():
    text = render_verdict(_big_job())
    assert "Load issues: 1 warning" in text
    assert "rank 5: the file ends inside an event" in text


def test_colour_only_when_asked():
    assert "\x1b[" in render_verdict(_big_job(), color=True)
    assert "\x1b[" not in render_verdict(_big_job(), color=False)


def test_colour_on_a_real_terminal(tmp_path):
    """stdout on a pseudo-terminal: the CLI colours the severities."""
    main, child = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    proc = subprocess.Popen([sys.executable, "-m", "traceanalyze", str(FIXTURES / "balanced"), "-q", "--no-html",
                             "--out", str(tmp_path / "o")], stdout=child, stderr=subprocess.PIPE, env=env)
    os.close(child)
    chunks = []
    try:
        while True:
            try:
                data = os.read(main, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait() == 0, proc.stderr.read()
    finally:
        stop_popen(proc)  # (whatever went wrong above: the command and what it started)
        os.close(main)
    out = b"".join(chunks).decode()
    assert "\x1b[1m" in out  # at least the bold scenario name
