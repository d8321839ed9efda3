"""CUPTI range profiler traces: kernels recorded as `cuda_profiler_range` events with their
performance counters as args (no `kernel` events), launched by `cuda_runtime` calls whose
`ac2g` flows end nowhere.

HolisticTraceAnalysis's example of such a trace (tests/data/cupti_profiler) is a binary file the
test corpus could not hold, so the trace is built here in the layout Kineto writes (libkineto's
ChromeTraceLogger::handleActivity for a CUDA_PROFILER_RANGE activity: ph X, cat
"cuda_profiler_range", pid the device, tid 0, the counters as args; CuptiRangeProfilerSession
spreads the ranges evenly over the profiling window instead of timing them). Expected values are
read back from the trace's own events.
"""

from __future__ import annotations

import json

import duckdb
import pytest

PID = TID = 4242
COUNTERS = ("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", "sm__inst_executed_pipe_tensor.sum")


def cupti_trace(steps: int = 3, per_step: int = 2) -> dict:
    """One rank: ProfilerStep#N, an aten::mm per kernel launching it (cudaLaunchKernel with its
    ac2g flow start), a cudaDeviceSynchronize per step, and after them the profiler's ranges."""
    events, names, t, corr = [], [], 1000.0, 7000
    for s in range(1, steps + 1):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": PID, "tid": TID,
                       "ts": t, "dur": 1000.0, "args": {"External id": 100 * s}})
        for k in range(per_step):
            op_ts, ext = t + 100 + 400 * k, 100 * s + k + 1
            corr += 1
            events += [
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": PID, "tid": TID, "ts": op_ts, "dur": 300.0,
                 "args": {"External id": ext, "Sequence number": ext}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": PID, "tid": TID,
                 "ts": op_ts + 50, "dur": 20.0, "args": {"External id": ext, "cbid": 211, "correlation": corr}},
                {"ph": "s", "id": corr, "pid": PID, "tid": TID, "ts": op_ts + 50, "cat": "ac2g", "name": "ac2g"}]
            names.append(f"void gemm_kernel<float, {s}, {k}>(float const*, float*)")
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": PID, "tid": TID,
                       "ts": t + 900, "dur": 50.0, "args": {"External id": 0, "cbid": 165, "correlation": corr + 900}})
        t += 1000.0
    interval = (t - 1000.0) / len(names)
    for i, name in enumerate(names):
        events.append({"ph": "X", "cat": "cuda_profiler_range", "name": name, "pid": 0, "tid": 0,
                       "ts": 1000.0 + interval * i, "dur": interval,
                       "args": {COUNTERS[0]: 2048.0 * (i + 1), COUNTERS[1]: float(i % 2)}})
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-40GB"}],
            "traceEvents": events}


def _expected_kernels(trace: dict) -> list[tuple]:
    """(step, name, correlation, counters) of every range, from the JSON: the n-th range is the
    kernel of the n-th kernel launch, in the step whose ProfilerStep# holds that launch."""
    ev = trace["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1])) for e in ev
             if e.get("name", "").startswith("ProfilerStep#")]
    launches = sorted((e["ts"], e["args"]["correlation"]) for e in ev if e.get("name") == "cudaLaunchKernel")
    ranges = sorted((e["ts"], e["name"], e["args"]) for e in ev if e.get("cat") == "cuda_profiler_range")
    assert len(launches) == len(ranges) > 0
    return [(next(n for lo, hi, n in steps if lo <= ts < hi), name, corr, args)
            for (ts, corr), (_, name, args) in zip(launches, ranges)]


@pytest.fixture(scope="module")
def analysed(tmp_path_factory, cli):
    base = tmp_path_factory.mktemp("cupti")
    trace = cupti_trace()
    (base / "t").mkdir()
    (base / "t" / "rank0.pt.trace.json").write_text(json.dumps(trace))
    result = cli(base / "t", "--out", base / "out")
    assert result.returncode == 0, result.stderr
    return trace, base / "out", result


def test_the_ranges_are_kernels_with_their_counters_on_the_launching_step(analysed):
    trace, out, _ = analysed
    with duckdb.connect(str(out / "trace.duckdb"), read_only=True) as con:
        rows = con.execute("SELECT step, name, correlation, counters, kind FROM kernels ORDER BY ts_ns").fetchall()
    assert [(s, n, c, json.loads(j)) for s, n, c, j, _ in rows] == _expected_kernels(trace)
    assert {k for *_, k in rows} == {"compute"}


def test_a_trace_of_runtime_launches_is_a_gpu_trace_without_measured_gpu_time(analysed):
    trace, out, result = analysed
    summary = json.loads((out / "summary.json").read_text())
    (rank,) = summary["ranks"]
    calls = sum(e.get("cat") == "cuda_runtime" for e in trace["traceEvents"])
    assert rank["metrics"]["gpu_runtime_calls"] == calls > 0
    assert rank["metrics"]["gpu_busy_pct"] is None  # the ranges' times are not measured
    header = result.stdout.splitlines()[0]
    assert header.endswith(", GPU") and "CPU-only" not in result.stdout
    page = (out / "report.html").read_text()
    assert "GPU trace" in page and "CPU-only" not in page
    notes = [i for i in summary["load_issues"] if i["kind"] == "range-profiler-kernels"]
    ranges = sum(e.get("cat") == "cuda_profiler_range" for e in trace["traceEvents"])
    assert [(n["count"], "not matched" in n["message"]) for n in notes] == [(ranges, False)]


def test_ranges_that_do_not_match_the_launches_stay_unmatched_and_say_so(tmp_path, cli):
    trace = cupti_trace()
    launch = next(e for e in trace["traceEvents"] if e.get("name") == "cudaLaunchKernel")
    trace["traceEvents"].remove(launch)
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "rank0.pt.trace.json").write_text(json.dumps(trace))
    result = cli(tmp_path / "t", "--out", tmp_path / "out", "--no-html")
    assert result.returncode == 0, result.stderr
    with duckdb.connect(str(tmp_path / "out" / "trace.duckdb"), read_only=True) as con:
        rows = con.execute("SELECT correlation, counters FROM kernels").fetchall()
        (note,) = con.execute("SELECT message FROM load_issues WHERE kind = 'range-profiler-kernels'").fetchone()
    ranges = sum(e.get("cat") == "cuda_profiler_range" for e in trace["traceEvents"])
    assert len(rows) == ranges and all(c is None and j is not None for c, j in rows)
    assert "not matched" in note


def test_a_cpu_only_trace_stays_cpu_only(tmp_path, cli):
    """No runtime call, no kernel: still 'CPU-only' (the check is not simply always 'GPU')."""
    trace = cupti_trace()
    trace["traceEvents"] = [e for e in trace["traceEvents"]
                            if e.get("cat") not in ("cuda_runtime", "cuda_profiler_range", "ac2g")]
    del trace["deviceProperties"]
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "rank0.pt.trace.json").write_text(json.dumps(trace))
    result = cli(tmp_path / "t", "--out", tmp_path / "out", "--no-html")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].endswith(", CPU-only")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["ranks"][0]["metrics"]["gpu_runtime_calls"] == 0
