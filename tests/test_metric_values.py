"""The per-rank metrics of summary.json, checked against answers computed by hand.

A synthetic GPU trace whose kernels are placed so that every metric has an obvious value, and a
real GPU trace whose busy time is recomputed here from the JSON with HolisticTraceAnalysis's
definition (the time any kernel, memcpy or memset runs on the GPU, kernels merged across streams,
within each profiler step).
"""

from __future__ import annotations

import statistics

import pytest
import tracejson as tj
from conftest import REAL_TRACES

from tests.tracegen import write_trace_dir
from traceanalyze.pipeline import run_analysis

STEP_MS = [100, 100, 100, 200]
CUDA_PEAKS = [1000, 5000, 3000, 2000]   # Total Allocated on the GPU, one [memory] event per step
CPU_PEAK = 9_000_000                    # host memory is bigger, but the GPU's is the one reported
SPEC = {
    "ranks": 1, "steps": 4, "gpu": True, "step_ms": STEP_MS,
    "timeline": [
        ["kernel", 10, 30],                       # compute 10-40 ms on stream 7
        ["nccl", 30, 20],                         # all-reduce 30-50 ms on stream 20: 10 ms under compute
        ["kernel", 60, 10, {"name": "elementwise_kernel"}],   # compute 60-70 ms
        ["memory", 5, 0, {"device_type": 1, "total_allocated_bytes": CUDA_PEAKS}],
        ["memory", 6, 0, {"device_type": 0, "total_allocated_bytes": CPU_PEAK}],
    ],
}


@pytest.fixture(scope="module")
def metrics(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("gpu-metrics")
    traces = write_trace_dir(SPEC, base / "trace")
    summary = run_analysis(traces, base / "out", html=False).summary
    (rank,) = summary["ranks"]
    return rank["metrics"]


def test_gpu_busy_and_idle_share_of_the_steps(metrics):
    # busy per step: 10-50 (the compute and the all-reduce merged) + 60-70 = 50 ms, in every step
    busy_ms, steps_ms = 50 * len(STEP_MS), sum(STEP_MS)
    assert metrics["gpu_busy_pct"] == pytest.approx(100 * busy_ms / steps_ms)   # 40 %
    assert metrics["gpu_idle_pct"] == pytest.approx(100 - 100 * busy_ms / steps_ms)


def test_comm_overlap_is_the_share_of_communication_under_compute(metrics):
    # the all-reduce runs 30-50 ms; compute runs until 40 ms: 10 of its 20 ms overlap
    assert metrics["comm_overlap_pct"] == pytest.approx(50.0)


def test_comm_time_per_step(metrics):
    assert metrics["comm_ms_per_step"] == pytest.approx(20.0)


def test_step_time_median_p95_max_mean(metrics):
    ordered = sorted(STEP_MS)
    # p95 by linear interpolation between the closest ranks (numpy's and DuckDB's default)
    position = 0.95 * (len(ordered) - 1)
    low = int(position)
    p95 = ordered[low] + (position - low) * (ordered[low + 1] - ordered[low])
    assert metrics["step_time_ms"] == pytest.approx(
        {"median": statistics.median(STEP_MS), "p95": p95, "max": max(STEP_MS), "mean": 125.0})
    assert p95 == pytest.approx(185.0) and statistics.mean(STEP_MS) == 125.0
    # the phases split the step: their means add up to the mean step
    assert sum(metrics["phases_ms"].values()) == pytest.approx(125.0, abs=0.01)


def test_peak_memory_is_the_gpu_allocators(metrics):
    assert metrics["peak_memory_bytes"] == max(CUDA_PEAKS)


# ---- a real GPU trace: busy time as HolisticTraceAnalysis defines it, recomputed from the JSON

def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for lo, hi in sorted(intervals):
        if end is None or lo > end:
            total += hi - lo
            end = hi
        elif hi > end:
            total += hi - end
            end = hi
    return total


def test_real_trace_gpu_busy_matches_the_json(tmp_path):
    folder = REAL_TRACES / "hta-ns-resolution-trace"
    (path,) = folder.glob("*.json.gz")
    top, events = tj.read_trace(path)
    base = tj.base_ns(top)
    windows = tj.steps(events, base)
    durations = {s: hi - lo for s, (lo, hi) in windows.items()}
    shortest_other = min(d for s, d in durations.items() if s != max(windows))
    kept = {s: w for s, w in windows.items() if not (s == max(windows) and durations[s] < 0.1 * shortest_other)}
    busy = 0
    devices = {tj.arg(e, "device") for e in tj.gpu_events(events)}
    for lo, hi in kept.values():
        for device in devices:
            busy += _union_ns([(max(lo, tj.to_ns(e["ts"], base)), min(hi, tj.to_ns(e["ts"], base) + tj.to_ns(e["dur"])))
                               for e in tj.gpu_events(events) if tj.arg(e, "device") == device
                               and tj.to_ns(e["ts"], base) < hi and tj.to_ns(e["ts"], base) + tj.to_ns(e["dur"]) > lo])
    expected_pct = 100 * busy / len(devices) / sum(hi - lo for lo, hi in kept.values())
    summary = run_analysis(folder, tmp_path / "out", html=False).summary
    (rank,) = summary["ranks"]
    assert rank["metrics"]["gpu_busy_pct"] == pytest.approx(expected_pct, abs=0.01)
    assert 0 < expected_pct < 100
