"""Real CUDA traces recorded on an H100 (fixtures/cuda/, see fixtures/README.md): FLOPs and MFU
of a GPT-style model, NCCL process-group arguments, and a 2-rank straggler whose GPU idles.

Expected values come from each scenario's expected.json (the model's shape, the injected
delay, by construction) and from the trace JSON itself; nothing is copied from the analysis.
"""

from __future__ import annotations

import gzip
import json
import re

import pytest

from tests.conftest import ROOT

CUDA = ROOT / "fixtures" / "cuda"


def _expected(scenario: str) -> dict:
    return json.loads((CUDA / scenario / "expected.json").read_text(encoding="utf-8"))


def _traces(scenario: str) -> dict[int, dict]:
    out = {}
    for path in sorted((CUDA / scenario).glob("*.json.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            data = json.load(f)
        out[data["distributedInfo"]["rank"]] = data
    return out


def _steps(events: list[dict]) -> dict[int, tuple[float, float]]:
    """ProfilerStep#N on the CPU: {N: (ts_us, dur_us)}."""
    return {int(e["name"].split("#")[1]): (e["ts"], e["dur"]) for e in events
            if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep#")}


@pytest.fixture(scope="module")
def analysed(fixture_db):
    from traceanalyze import analyze

    cache: dict[str, tuple] = {}

    def get(scenario: str):
        if scenario not in cache:
            with analyze(CUDA / scenario, db=fixture_db(CUDA / scenario)) as a:
                con = a.connection()
                eff = con.execute("""
                    SELECT step, flops, achieved_tflops, peak_tflops, mfu_pct, gpu
                    FROM step_efficiency ORDER BY step""").fetchall()
                colls = con.execute("""
                    SELECT step, op, process_group, pg_desc, group_ranks, bytes
                    FROM collectives ORDER BY ts_ns""").fetchall()
                cache[scenario] = (a.summary_dict, eff, colls)
        return cache[scenario]

    return get


def test_recorded_on_a_real_gpu():
    for scenario in ("fsdp2_gpt_nccl_ws1", "ddp_host_sync_nccl_ws1", "ddp_gloo2_input_straggler"):
        exp = _expected(scenario)
        assert exp["ok"] and not exp["errors"]
        for data in _traces(scenario).values():
            assert data["deviceProperties"][0]["name"] == exp["recorded_with"]["gpu"]
            assert any(e.get("cat") == "kernel" for e in data["traceEvents"])


def test_gpt_flops_per_step_match_the_model_shape(analysed):
    """The FLOPs counted per step are those of the model's matmuls and attention, computed by
    hand from its shape: 2 x tokens x (linear weights) forward, twice that backward, and
    4 x batch x seq^2 x d_model per layer for attention forward (twice that backward)."""
    m = _expected("fsdp2_gpt_nccl_ws1")["model"]
    tokens = m["batch_per_rank"] * m["seq"]
    linear_weights = (m["layers"] * (4 * m["d_model"] ** 2 + 2 * m["d_model"] * m["ffn"])
                      + m["d_model"] * m["vocab"])
    attention_fwd = m["layers"] * 4 * m["batch_per_rank"] * m["seq"] ** 2 * m["d_model"]
    by_hand = 3 * (2 * tokens * linear_weights + attention_fwd)
    _, eff, _ = analysed("fsdp2_gpt_nccl_ws1")
    steps = _steps(next(iter(_traces("fsdp2_gpt_nccl_ws1").values()))["traceEvents"])
    assert [r[0] for r in eff] == sorted(steps)
    for step, flops, achieved_tflops, peak_tflops, mfu_pct, gpu in eff:
        # elementwise ops (layer norms, GELU, softmax) add well under 1 % to the matmuls
        assert by_hand <= flops <= by_hand * 1.01, (step, flops, by_hand)
        # achieved = FLOPs over the step's own duration in the trace
        dur_s = steps[step][1] / 1e6
        assert achieved_tflops == pytest.approx(flops / dur_s / 1e12, rel=1e-3)
        assert mfu_pct == pytest.approx(100 * achieved_tflops / peak_tflops, rel=1e-6)
        assert gpu == "H100 SXM"   # 'NVIDIA H100 80GB HBM3' is the SXM part
        # bf16 matmuls: the peak is the H100 SXM's dense bf16 figure (989.4 TFLOP/s), give or
        # take the few fp32 ops counted at the fp32 peak
        assert 900 < peak_tflops <= 989.4


def test_nccl_group_arguments_reach_the_collectives(analysed):
    """DDP on NCCL writes record_param_comms with the group's name, description and ranks:
    every all-reduce row carries them, with the message size of the trace."""
    data = _traces("ddp_host_sync_nccl_ws1")[0]
    steps = _steps(data["traceEvents"])
    comms = [e for e in data["traceEvents"] if e.get("name") == "record_param_comms"
             and any(ts <= e["ts"] < ts + dur for ts, dur in steps.values())]
    assert comms
    _, _, colls = analysed("ddp_host_sync_nccl_ws1")
    assert len(colls) == len(comms)
    dtype_bytes = {"Float": 4, "BFloat16": 2, "Half": 2}
    want = sorted(e["args"]["In msg nelems"] * dtype_bytes[e["args"]["dtype"]] for e in comms)
    assert sorted(r[5] for r in colls) == want
    pg = data["distributedInfo"]["pg_config"][0]
    for _, op, name, desc, ranks, _ in colls:
        assert (op, name, desc, list(ranks)) == ("all_reduce", pg["pg_name"], pg["pg_desc"],
                                                 pg["ranks"])


def test_item_in_the_step_is_a_host_sync(analysed):
    """loss.item() in every step: host-sync names rank 0 and counts the synchronizing runtime
    calls of the trace's aligned steps."""
    data = _traces("ddp_host_sync_nccl_ws1")[0]
    summary, _, _ = analysed("ddp_host_sync_nccl_ws1")
    [f] = [f for f in summary["findings"] if f["rule"] == "host-sync"]
    steps = {s: v for s, v in _steps(data["traceEvents"]).items() if s in f["steps"]}
    sync = re.compile(r"(?i)(DeviceSynchronize|StreamSynchronize|EventSynchronize)$")
    calls = [e for e in data["traceEvents"] if e.get("cat") == "cuda_runtime"
             and (sync.search(e["name"]) or e["name"] in ("cudaMemcpy", "cudaMemset"))
             and any(ts <= e["ts"] < ts + dur for ts, dur in steps.values())]
    assert f["ranks"] == [0]
    assert f["evidence"]["syncs_per_step"] == len(calls) // len(steps)
    items = [e for e in data["traceEvents"] if e.get("name") == "aten::_local_scalar_dense"
             and any(ts <= e["ts"] < ts + dur for ts, dur in steps.values())]
    assert len(items) >= len(steps)   # at least the one loss.item() per step


def test_gloo_on_cuda_straggler_is_named_with_its_full_cost(analysed):
    """Rank 1 sleeps 60 ms per step in data.fetch_batch. Rank 0's GPU idles while its loop is
    blocked in the gloo all-reduce: that is waiting for rank 1 (comm_wait), neither a host-sync
    nor a launch problem of rank 0. One root cause: rank 1, cause input (the range is named for
    data: its time is the rank's data wait, docs/parallelism.md), the annotation named,
    its GPU idling behind its own host folded in, and the cost the lateness itself."""
    exp = _expected("ddp_gloo2_input_straggler")
    traces = _traces("ddp_gloo2_input_straggler")
    summary, _, _ = analysed("ddp_gloo2_input_straggler")
    findings = summary["findings"]
    top = findings[0]
    assert top["rule"] == "collective-straggler"
    assert top["ranks"] == [exp["injected"]["rank"]]
    assert top["evidence"]["cause"] == "input"   # a sleep inside a range named for data is its data wait
    assert exp["injected"]["region"] in top["evidence"]["region_note"]
    # its GPU idling behind its own data wait is no finding of its own (folded in, or a gap whose
    # cause is the data wait), and rank 0's is comm_wait
    assert not [f for f in findings if f["rule"] in ("host-sync", "gpu-idle-gaps")]

    def fetch_ms(rank: int) -> dict[int, float]:
        events = traces[rank]["traceEvents"]
        steps = _steps(events)
        return {s: sum(e["dur"] for e in events if e.get("name") == exp["injected"]["region"]
                       and ts <= e["ts"] < ts + dur) / 1e3
                for s, (ts, dur) in steps.items() if s in top["steps"]}

    late, other = fetch_ms(1), fetch_ms(0)
    excess_ms = sum(late[s] - other[s] for s in late) / len(late)
    assert excess_ms == pytest.approx(exp["injected"]["delay_ms"], rel=0.15)
    assert top["evidence"]["late_ms"] == pytest.approx(excess_ms, rel=0.1)
    assert top["cost"]["ms_per_step"] == pytest.approx(excess_ms, rel=0.1)


def test_pageable_copy_is_named_with_its_size_and_time(analysed):
    """A 64 MiB side input copied from pageable memory every step: pageable-memcpy reports the
    bytes and the GPU copy time of the trace's 'Memcpy HtoD (Pageable -> Device)' events; the
    pinned token batches are not counted."""
    exp = _expected("ddp_pageable_copy_nccl_ws1")
    data = _traces("ddp_pageable_copy_nccl_ws1")[0]
    summary, _, _ = analysed("ddp_pageable_copy_nccl_ws1")
    [f] = [f for f in summary["findings"] if f["rule"] == "pageable-memcpy"]
    steps = {s: v for s, v in _steps(data["traceEvents"]).items() if s in f["steps"]}
    copies = [e for e in data["traceEvents"] if e.get("cat") == "gpu_memcpy"
              and e["name"] == "Memcpy HtoD (Pageable -> Device)"]
    assert len(copies) == len(steps)
    assert {e["args"]["bytes"] for e in copies} == {exp["pageable_mb"] << 20}
    assert f["ranks"] == [0]
    assert f["evidence"]["bytes_per_step"] == exp["pageable_mb"] << 20
    assert f["evidence"]["copy_ms"] == pytest.approx(
        sum(e["dur"] for e in copies) / len(copies) / 1e3, rel=1e-3)


def test_gloo_moving_gpu_tensors_is_told_to_use_nccl(analysed):
    """The job's backend is gloo (distributedInfo) and its ranks run CUDA kernels: the
    communication finding's advice is the NCCL backend, not the interconnect."""
    traces = _traces("ddp_gloo2_input_straggler")
    assert {t["distributedInfo"]["backend"] for t in traces.values()} == {"gloo"}
    summary, _, _ = analysed("ddp_gloo2_input_straggler")
    [f] = [f for f in summary["findings"] if f["rule"] == "comm-dominated"]
    assert f["evidence"]["cause"] == "gloo_on_gpu"
    assert "NCCL backend" in f["advice"]
