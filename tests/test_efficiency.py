"""FLOPs, MFU and collective bandwidth of real traces, checked against figures derived here from
the JSON itself with hand-written formulas."""

from __future__ import annotations

import gzip
import itertools
import json
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from traceanalyze.load import load_trace_dir
from traceanalyze.extension import native as _native

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "real"


def _events(folder: str) -> list[list[dict]]:
    return [json.loads(gzip.open(f).read())["traceEvents"] for f in sorted((REAL / folder).glob("*.json.gz"))]


@pytest.fixture(scope="module")
def loaded(fixture_db):
    def load(folder: str) -> duckdb.DuckDBPyConnection:
        return duckdb.connect(str(fixture_db(REAL / folder)), read_only=True)

    return load


def _matmul_flops(name: str, dims: list) -> int | None:
    """Hand-written: 2*M*K*N per matrix product (batched: times the batch)."""
    if name == "aten::mm":
        (m, k), (_, n) = dims[0], dims[1]
        return 2 * m * k * n
    if name == "aten::addmm":
        (m, k), (_, n) = dims[1], dims[2]
        return 2 * m * k * n
    if name == "aten::bmm":
        (b, m, k), (_, _, n) = dims[0], dims[1]
        return 2 * b * m * k * n
    if name == "aten::linear":
        x, w = dims[0], dims[1]
        if len(w) != 2 or not x or x[-1] != w[1]:
            return None  # not a weight matrix of the input's width: no formula applies
        rows = 1
        for d in x[:-1]:
            rows *= d
        return 2 * rows * x[-1] * w[0]
    return None


def test_matmul_flops_match_the_shapes_in_the_json(loaded):
    """Every aten::mm / addmm / bmm / linear row of op_flops has 2*M*K*N of its own Input Dims."""
    con = loaded("hta-trace-filter")
    by_id = {}
    for rank, events in enumerate(_events("hta-trace-filter")):
        for e in events:
            args = e.get("args", {})
            if e.get("cat") == "cpu_op" and "Input Dims" in args and "External id" in args:
                by_id[(rank, args["External id"])] = (e["name"], args["Input Dims"])
    rows = con.execute("SELECT rank, external_id, name, flops FROM op_flops "
                       "WHERE name IN ('aten::mm', 'aten::addmm', 'aten::bmm', 'aten::linear')").fetchall()
    assert len(rows) > 100
    assert sum(f is not None for *_, f in rows) > 100
    for rank, ext, name, flops in rows:
        json_name, dims = by_id[(rank, ext)]
        assert json_name == name
        assert flops == _matmul_flops(name, dims), (rank, ext, name, dims)


def test_an_op_carries_the_kernels_launched_while_it_ran(loaded):
    """aten::linear of the MI250 trace: the GPU time of the kernels whose launch call falls inside
    it on its thread, summed straight from the JSON."""
    con = loaded("hta-amd-trace")
    (events,) = _events("hta-amd-trace")
    linear = next(e for e in events if e.get("name") == "aten::linear" and e.get("cat") == "cpu_op")
    lo, hi = linear["ts"], linear["ts"] + linear["dur"]
    launches = {e["args"]["correlation"] for e in events
                if e.get("cat") == "cuda_runtime" and e.get("tid") == linear["tid"] and lo <= e["ts"] <= hi
                and "correlation" in e.get("args", {})}
    expected_ns = sum(round(e["dur"] * 1000) for e in events
                      if e.get("cat") == "kernel" and e.get("args", {}).get("correlation") in launches)
    assert expected_ns > 0
    (kernel_ns, flops, tflops), = con.execute(
        "SELECT kernel_ns, flops, tflops FROM op_flops WHERE name = 'aten::linear'").fetchall()
    assert abs(kernel_ns - expected_ns) <= len(launches)  # rounding of µs floats, at most 1 ns a kernel
    assert flops == 2 * 5 * 128 * 128  # [[5, 128], [128, 128], [128]]
    assert tflops == pytest.approx(flops / kernel_ns / 1000)


def test_mfu_is_the_step_flops_at_the_v100_fp32_peak(loaded):
    """ResNet-50 in fp32 on a V100-DGXS: the peak is 15.7 TFLOP/s, MFU = FLOPs / (peak x step)."""
    con = loaded("kineto-resnet50-nw0")
    rows = con.execute("SELECT s.step, s.dur_ns, e.flops, e.achieved_tflops, e.peak_tflops, e.mfu_pct, "
                       "e.dtype_mix, e.gpu, e.note, (SELECT sum(flops) FROM op_flops AS o WHERE o.step = s.step "
                       "AND o.dtype IS NOT NULL AND o.flops > 0) FROM steps AS s JOIN step_efficiency AS e "
                       "USING (rank, step)").fetchall()
    assert rows
    for step, dur_ns, flops, achieved, peak, mfu, mix, gpu, note, op_sum in rows:
        assert flops == op_sum and flops > 0
        assert gpu == "V100 SXM" and mix == "fp32 100%" and note is None
        assert peak == pytest.approx(15.7)
        assert achieved == pytest.approx(flops / dur_ns / 1000)
        assert mfu == pytest.approx(100 * flops / (15.7e12 * dur_ns / 1e9))


def test_an_unknown_device_gets_tflops_but_no_mfu(loaded):
    con = loaded("hta-amd-trace")  # deviceProperties name 'AMD Radeon Graphics'
    achieved, peak, mfu, note = con.execute(
        "SELECT achieved_tflops, peak_tflops, mfu_pct, note FROM step_efficiency WHERE flops > 0").fetchone()
    assert achieved > 0 and peak is None and mfu is None
    assert "AMD Radeon Graphics" in note


@pytest.mark.parametrize("folder, reason", [
    ("hta-cpu-only", "no GPU kernels"),
    ("hta-nccl-parser-config", "record_shapes=True"),
])
def test_cpu_only_and_shapeless_traces_give_nulls_with_a_note(loaded, folder, reason):
    con = loaded(folder)
    rows = con.execute("SELECT flops, achieved_tflops, mfu_pct, note FROM step_efficiency").fetchall()
    assert rows
    for flops, achieved, mfu, note in rows:
        assert achieved is None and mfu is None
        assert reason in note


def test_bus_bandwidth_of_nccl_all_reduces_from_the_kernel_args(loaded):
    """A100 NCCL all-reduce kernels of a 2-rank group: busbw = nelems x 4 bytes / kernel time x 2(n-1)/n."""
    con = loaded("hta-nccl-parser-config")
    (events,) = _events("hta-nccl-parser-config")
    expected = []
    for e in events:
        args = e.get("args", {})
        if e.get("cat") == "kernel" and args.get("Collective name") == "allreduce":
            n = args["Group size"]
            assert args["dtype"] == "Float"
            size = args["In msg nelems"] * 4
            dur_ns = round(e["dur"] * 1000)
            expected.append((e["ts"], size, size / dur_ns * 2 * (n - 1) / n))
    expected.sort()
    rows = con.execute("SELECT bytes, busbw_gb_per_s, group_size FROM collective_bandwidth "
                       "WHERE op = 'all_reduce' ORDER BY ts_ns").fetchall()
    assert len(rows) == len(expected) > 0
    for (size, busbw, group_size), (_, want_size, want_busbw) in zip(rows, expected):
        assert group_size == 2 and size == want_size
        assert busbw == pytest.approx(want_busbw, rel=1e-3)


def test_the_api_gives_the_tables_and_a_peak_override_rescales_mfu(fixture_db):
    import traceanalyze

    with traceanalyze.analyze(REAL / "kineto-resnet50-nw0", db=fixture_db(REAL / "kineto-resnet50-nw0"), progress=False) as a:
        default = a.efficiency()
        given = a.efficiency(peak_tflops=31.4)
        steps = a.sql("SELECT step, flops, dur_ns FROM step_efficiency ORDER BY step")
        with pytest.raises(traceanalyze.TraceError):
            a.efficiency(peak_tflops=-1)
    assert set(default) == {"steps", "top_ops", "bandwidth", "critical_path"}
    for row, d, g in zip(steps.iter_rows(), default["steps"]["mfu_pct"], given["steps"]["mfu_pct"]):
        _, flops, dur_ns = row
        assert d == pytest.approx(100 * flops / (15.7e3 * dur_ns))
        assert g == pytest.approx(100 * flops / (31.4e3 * dur_ns))
    top = default["top_ops"]
    assert top.height > 0
    for row in top.iter_rows(named=True):
        assert row["lost_ms"] == pytest.approx(row["kernel_ms"] - row["roofline_ms"])
        # the roofline is at least the op's FLOPs at the V100's 15.7 TFLOP/s fp32 peak
        assert row["roofline_ms"] >= row["tflops"] * row["kernel_ms"] / 15.7 * (1 - 1e-9)


DDP = REAL.parent / "ddp"


def _dataloader_ns_by_rank(folder: Path, step: int) -> dict[int, int]:
    """Each rank's DataLoader wait in ProfilerStep#step, straight from its JSON."""
    out = {}
    for f in sorted(folder.glob("*.pt.trace.json.gz")):
        doc = json.loads(gzip.open(f).read())
        events = doc["traceEvents"]
        rank = doc["distributedInfo"]["rank"]
        (lo, hi), = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == f"ProfilerStep#{step}"
                     and e.get("cat") != "gpu_user_annotation"]
        out[rank] = sum(round(e["dur"] * 1000) for e in events
                        if e.get("name", "").startswith("enumerate(DataLoader)") and lo <= e["ts"] < hi)
    return out


def test_a_critical_path_over_its_limit_is_left_out_with_a_note(fixture_db, tmp_path, monkeypatch):
    """Past MAX_KERNELS GPU events in the aligned steps the walk is not run: critical_path stays
    empty, load_issues says why with the count the walk would have read, and the reduce leaves
    no work file behind (its connections are closed and reopened around the walk)."""
    from traceanalyze.analysis import critical_path

    folder = REAL.parent / "cuda" / "ddp_gloo2_input_straggler"
    con = duckdb.connect(str(fixture_db(folder)), read_only=True)
    try:
        (walked,) = con.execute("SELECT count(*) FROM critical_path").fetchone()
        (gpu,) = con.execute("SELECT count(*) FROM kernels JOIN aligned_steps USING (step)").fetchone()
    finally:
        con.close()
    assert walked > 0 and gpu > 0  # (the fixture's path is walked under the real limit)
    staging = tmp_path / "staging"
    staging.mkdir()
    monkeypatch.setenv("TRACEANALYZE_TMPDIR", str(staging))
    monkeypatch.setattr(critical_path, "MAX_KERNELS", gpu - 1)
    db = load_trace_dir(folder, tmp_path / "trace.duckdb", reuse=False).db_path
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM critical_path").fetchone() == (0,)
        notes = con.execute("SELECT severity, message, count FROM load_issues "
                            "WHERE kind = 'critical-path-skipped'").fetchall()
        assert len(notes) == 1 and notes[0][0] == "info" and notes[0][2] == gpu, notes
        assert f"{gpu:,} GPU events" in notes[0][1]
    finally:
        con.close()
    assert list(staging.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["staging", "trace.duckdb", "trace.shards"]


def test_the_critical_path_runs_through_the_rank_that_waits_for_its_data(fixture_db):
    """input_straggler: the rank with the longest DataLoader wait (from the JSON) holds every
    step, so each step's path holds that rank's DataLoader wait and crosses to it at a collective."""
    con = duckdb.connect(str(fixture_db(DDP / "input_straggler")), read_only=True)
    try:
        steps = [s for (s,) in con.execute("SELECT step FROM aligned_steps ORDER BY step").fetchall()]
        assert steps
        for step in steps:
            waits = _dataloader_ns_by_rank(DDP / "input_straggler", step)
            slow = max(waits, key=waits.get)
            segs = con.execute("SELECT rank, seq, kind, name, ts_ns, dur_ns, on_rank FROM critical_path "
                               "WHERE step = ? ORDER BY seq", [step]).fetchall()
            assert segs
            on_slow = [s for s in segs if s[6] == slow and s[2] == "host" and s[3].startswith("enumerate(DataLoader)")]
            assert on_slow, (step, slow, segs)
            assert on_slow[0][5] >= waits[slow]  # the host stretch holding the whole wait
            step_ns = con.execute("SELECT dur_ns FROM steps WHERE rank = ? AND step = ?", [segs[0][0], step]).fetchone()[0]
            assert sum(s[5] for s in segs) <= step_ns * 1.01  # a chain, never more than the step
            for a, b in zip(segs, segs[1:]):  # segments in time order on each rank
                if a[6] == b[6]:
                    assert a[4] + a[5] <= b[4]
    finally:
        con.close()


def test_the_summary_and_report_carry_the_efficiency(tmp_path, fixture_db):
    """ResNet-50 (V100, fp32): the summary's MFU over the aligned steps is their FLOPs at 15.7
    TFLOP/s over their time, the summary matches the JSON Schema, and report.html shows it."""
    import traceanalyze
    from traceanalyze.output.units import fmt_pct
    from traceanalyze.summary.model import schema_problem

    with traceanalyze.analyze(REAL / "kineto-resnet50-nw0", db=fixture_db(REAL / "kineto-resnet50-nw0"), progress=False) as a:
        flops, dur_ns = a.sql("SELECT sum(e.flops), sum(e.dur_ns) FROM step_efficiency AS e "
                              "JOIN aligned_steps USING (step)").row(0)
        paths = a.write_report(tmp_path / "out")
        summary = a.summary_dict
    assert schema_problem(summary) is None
    (rank,) = summary["efficiency"]["ranks"]
    # (polars gives the sums of DuckDB's HUGEINT as Decimal)
    expected = 100 * float(flops) / (15.7e3 * float(dur_ns))
    assert rank["mfu_pct"] == pytest.approx(expected, abs=0.001)
    html = paths.report_html.read_text(encoding="utf-8")
    section = html.split('id="efficiency"', 1)[1].split("</section>", 1)[0]
    assert fmt_pct(rank["mfu_pct"]) in section and "V100 SXM" in section
    assert "aten::cudnn_convolution_backward" in section  # the op losing the most time to its roofline


def test_odd_shapes_give_null_flops_never_an_error_or_a_guess(tmp_path):
    """Shapes that no formula fits (dims past int64, text, negatives, a TensorList, mismatched
    inner dims) load, count as unknown ops, and leave the step's FLOPs NULL with a note."""
    odd = ['[[9000000000000000000000, 2], [2, 3]]', '"not a list"', '[[4, -1], [-1, 4]]',
           '[[[2, 3], [3, 4]], [3, 4]]', '[[4, 5], [6, 7]]', '[]']
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000}]
    for i, dims in enumerate(odd):
        t = 10 + i * 100
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t, "dur": 50,
                       "args": {"External id": i + 1, "Input Dims": json.loads(dims), "Input type": ["float", "float"]}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 5,
                       "dur": 5, "args": {"correlation": i + 1, "External id": i + 1}})
        events.append({"ph": "X", "cat": "kernel", "name": "volta_sgemm", "pid": 0, "tid": 7, "ts": t + 20, "dur": 30,
                       "args": {"correlation": i + 1, "External id": i + 1, "device": 0, "stream": 7}})
    trace = {"deviceProperties": [{"name": "NVIDIA A100-SXM4-80GB"}], "traceEvents": events}
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "rank0.json").write_text(json.dumps(trace))
    db = tmp_path / "trace.duckdb"
    load_trace_dir(tmp_path / "t", db)
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT external_id, family, flops, kernel_ns FROM op_flops ORDER BY external_id").fetchall()
        assert [r[0] for r in rows] == list(range(1, len(odd) + 1))
        assert all(family == "mm" and flops is None and kernel_ns == 30_000 for _, family, flops, kernel_ns in rows)
        flops, unknown, mfu, note = con.execute(
            "SELECT flops, unknown_ops, mfu_pct, note FROM step_efficiency").fetchone()
        assert flops is None and unknown == len(odd) and mfu is None
        assert "record_shapes" in note
    finally:
        con.close()


def test_the_peak_given_on_the_command_line_rates_the_summary_and_the_rule(cli, tmp_path, loaded):
    """--peak-tflops 31.4 on ResNet-50: the summary's MFU is the FLOPs at 31.4 TFLOP/s (half of
    what the V100's 15.7 gives), and low-mfu judges against that peak too (MFU under 15%)."""
    con = loaded("kineto-resnet50-nw0")
    flops, dur_ns = con.execute("SELECT sum(e.flops), sum(e.dur_ns) FROM step_efficiency AS e "
                                "JOIN aligned_steps USING (step)").fetchone()
    result = cli(REAL / "kineto-resnet50-nw0", "--peak-tflops", "31.4", "--format", "json",
                 "--out", tmp_path / "out", "--no-html", "-q")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    (rank,) = summary["efficiency"]["ranks"]
    assert rank["peak_tflops"] == pytest.approx(31.4)
    assert rank["mfu_pct"] == pytest.approx(100 * flops / (31.4e3 * dur_ns), abs=0.001)
    low = [f for f in summary["findings"] if f["rule"] == "low-mfu"]
    assert len(low) == 1 and low[0]["evidence"]["mfu_pct"] == pytest.approx(rank["mfu_pct"], abs=0.01)
    bad = cli(REAL / "kineto-resnet50-nw0", "--peak-tflops", "-1", "--out", tmp_path / "bad")
    assert bad.returncode == 2 and "peak-tflops" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("folder", ["hta-trace-filter", "kineto-resnet50-nw0"])
def test_only_the_outermost_op_with_a_formula_carries_flops(loaded, folder):
    """op_flops has one formula row per op with a FLOP formula that no other such op of its thread
    holds (aten::linear, not the aten::addmm inside it; conv2d, not the cudnn_convolution under it),
    derived here pair by pair from the JSON; which names have a formula is the reader's list."""
    con = loaded(folder)
    expected: Counter = Counter()
    for rank, events in enumerate(_events(folder)):
        ops = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "Operator")
               and isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0]
        names = sorted({e["name"] for e in ops})
        family = {n: _native.reading("flop_family", n) for n in names}
        formula = [e for e in ops if family[e["name"]] is not None]
        by_thread: dict = {}
        for e in formula:
            by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
        for same in by_thread.values():
            def order(e):  # op_id's order within a thread: start, longer first, then External id and name
                return (e["ts"], -(e["ts"] + e["dur"]), e.get("args", {}).get("External id"), e["name"])

            # e is held when an op before it (in that order) starts no later and ends no earlier:
            # every op before it starts no later (the order is by start first), so when the
            # latest end among them reaches e's end
            # (ops equal in that order do not hold each other: the latest end is of those before)
            latest_end = None
            for _, equal in itertools.groupby(sorted(same, key=order), key=order):
                equal = list(equal)
                for e in equal:
                    if latest_end is None or latest_end < e["ts"] + e["dur"]:
                        expected[(rank, e.get("args", {}).get("External id"), e["name"])] += 1
                ends = [e["ts"] + e["dur"] for e in equal]
                latest_end = max(ends if latest_end is None else [latest_end, *ends])
    got = Counter(con.execute("SELECT rank, external_id, name FROM op_flops WHERE family IS NOT NULL").fetchall())
    assert sum(expected.values()) > 50
    assert got == expected
