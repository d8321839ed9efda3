"""The DDP-configuration rules on real recorded CPU gloo jobs: each fires on its recorded mistake
and stays quiet on the corrected run and on the balanced run.

Ground truth comes from what the recordings ran (fixtures/ddp/<scenario>/expected.json `params`:
the model's layer sizes, micro-batches, sequence lengths) and from the trace JSON itself, read
with the stdlib (tests/tracejson.py), never from numbers produced by the code under test.
dataparallel-used has no recording (no multi-GPU machine): its cases.yaml holds synthetic
traces; here it is only checked to stay quiet on every real DDP recording.
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import median

import duckdb
import pytest

from tests.tracejson import base_ns, complete, read_trace, steps, to_ns
from traceanalyze.diagnosis.ruleset import load_rules, run_rule

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "ddp"
MY_RULES = ("grad-accumulation-sync", "find-unused-parameters", "too-many-collectives",
            "sync-batchnorm-cost", "token-skew", "dataparallel-used")
# rule -> (recorded mistake, recorded corrected run)
PAIRS = {
    "grad-accumulation-sync": ("grad_accum_no_nosync", "grad_accum_nosync"),
    "find-unused-parameters": ("find_unused_true", "find_unused_false"),
    "too-many-collectives": ("small_buckets", "small_buckets_default"),
    "sync-batchnorm-cost": ("syncbn_cpu", "syncbn_off"),
    "token-skew": ("token_skew", "token_budget"),
}
# FSDP2 recordings: none of these DDP rules may fire on them either
RECORDED = sorted({s for pair in PAIRS.values() for s in pair} | {"balanced", "fsdp_balanced", "fsdp_compute_straggler"})


def params_of(scenario: str) -> dict:
    return json.loads((FIXTURES / scenario / "expected.json").read_text())["params"]


def rank_traces(scenario: str):
    """(rank, base_ns, events) of every rank file of a scenario."""
    for path in sorted((FIXTURES / scenario).glob("*.pt.trace.json.gz")):
        top, events = read_trace(path)
        yield top["distributedInfo"]["rank"], base_ns(top), events


def per_step_counts(scenario: str, name: str) -> list[int]:
    """How many complete events called `name` start inside each ProfilerStep, over all ranks."""
    counts = []
    for _, base, events in rank_traces(scenario):
        for start, end in steps(events, base).values():
            counts.append(sum(1 for e in events if complete(e) and e.get("name") == name
                              and start <= to_ns(e["ts"], base) < end))
    return counts


def mlp_param_shapes(mlp: dict) -> list[int]:
    """Element count of every parameter tensor of fixtures/record_ddp.py's MLP (weights and biases)."""
    sizes, d = [], mlp["in_dim"]
    for _ in range(mlp["layers"]):
        sizes += [d * mlp["hidden"], mlp["hidden"]]
        d = mlp["hidden"]
    return sizes + [d * mlp["classes"], mlp["classes"]]


@pytest.fixture(scope="module")
def findings(fixture_db):
    """findings(scenario, rule) -> that rule's findings on the recorded scenario (each folder
    loaded once per session: the shared fixture databases)."""
    rules = {r.id: r for r in load_rules()}

    def run(scenario: str, rule: str):
        folder = FIXTURES / scenario
        assert any(folder.glob("*.pt.trace.json.gz")), f"{scenario} is not recorded (fixtures/record_ddp.py)"
        con = duckdb.connect(str(fixture_db(folder)), read_only=True)
        try:
            return run_rule(con, rules[rule])
        finally:
            con.close()

    return run


def the_finding(findings, scenario: str, rule: str):
    got = findings(scenario, rule)
    assert len(got) == 1, f"{rule} on {scenario}: {[f.title for f in got]}"
    return got[0]


@pytest.mark.parametrize("rule", sorted(PAIRS))
def test_quiet_on_the_corrected_run(findings, rule):
    corrected = PAIRS[rule][1]
    assert findings(corrected, rule) == []


# every (rule, recording) pair but a rule's own recorded mistake (checked by the tests below)
OTHER_RECORDINGS = [(rule, scenario) for rule in MY_RULES for scenario in RECORDED
                    if PAIRS.get(rule, (None,))[0] != scenario]


@pytest.mark.parametrize(("rule", "scenario"), OTHER_RECORDINGS)
def test_no_false_alarm_on_other_recordings(findings, rule, scenario):
    """Each rule reports nothing on recordings of other mistakes and on the balanced job."""
    assert findings(scenario, rule) == []


def test_grad_accumulation_without_no_sync(findings):
    p = params_of("grad_accum_no_nosync")
    f = the_finding(findings, "grad_accum_no_nosync", "grad-accumulation-sync")
    grad_bytes = 4 * sum(mlp_param_shapes(p["mlp"]))  # float32 gradients of the whole MLP
    assert f.severity == "warning"
    assert sorted(f.ranks) == list(range(p["world_size"]))
    assert f.evidence["micro_batches_count"] == p["accum_steps"] == 4
    assert f.evidence["sync_rounds_count"] == p["accum_steps"]
    assert f.evidence["needed_bytes_per_step"] == grad_bytes
    assert f.evidence["extra_bytes_per_step"] == (p["accum_steps"] - 1) * grad_bytes
    # the extra rounds' time is a part of the time the JSON shows inside gloo all-reduces
    gloo_ms = median(ms for ms in _gloo_ms_per_step("grad_accum_no_nosync"))
    assert 0.5 * gloo_ms * 3 / 4 < f.cost.ms_per_step < gloo_ms
    # the corrected run has one gradient round per step: the JSON shows 2 buckets instead of 8
    assert set(per_step_counts("grad_accum_nosync", "gloo:all_reduce")) == {2}
    assert set(per_step_counts("grad_accum_no_nosync", "gloo:all_reduce")) == {8}


def _gloo_ms_per_step(scenario: str) -> list[float]:
    out = []
    for _, base, events in rank_traces(scenario):
        for start, end in steps(events, base).values():
            out.append(sum(to_ns(e["dur"]) for e in events if complete(e) and e.get("name") == "gloo:all_reduce"
                           and start <= to_ns(e["ts"], base) < end) / 1e6)
    return out


def test_find_unused_parameters_true_with_every_parameter_used(findings):
    p = params_of("find_unused_true")
    f = the_finding(findings, "find_unused_true", "find-unused-parameters")
    n_params = len(mlp_param_shapes(p["mlp"]))
    assert f.severity == "warning" and f.evidence["cause"] == "all_used"
    assert sorted(f.ranks) == list(range(p["world_size"]))
    assert f.evidence["parameters_count"] == n_params == 10
    assert f.evidence["parameters_with_grad_count"] == n_params
    # the signature in the JSON: one search per step, one more all-reduce than without the flag
    assert set(per_step_counts("find_unused_true", "torch.distributed.ddp.reducer::search_unused_parameters")) == {1}
    assert set(per_step_counts("find_unused_false", "torch.distributed.ddp.reducer::search_unused_parameters")) == {0}
    assert (median(per_step_counts("find_unused_true", "gloo:all_reduce"))
            == median(per_step_counts("find_unused_false", "gloo:all_reduce")) + 1)


def test_too_many_small_buckets(findings):
    p = params_of("small_buckets")
    f = the_finding(findings, "small_buckets", "too-many-collectives")
    width, n = p["small_width"], p["n_small_layers"]
    model_floats = (512 * width + width) + (n - 2) * (width * width + width) + (width * 10 + 10)
    per_step = per_step_counts("small_buckets", "gloo:all_reduce")
    assert f.severity == "warning"
    assert f.evidence["small_collectives_per_step_count"] == median(per_step) >= 16
    assert f.evidence["small_bytes_per_step"] == 4 * model_floats  # every gradient, in tiny pieces
    assert f.evidence["median_collective_bytes"] < p["bucket_cap_mb"] * 1024 * 1024 * 2
    assert set(per_step_counts("small_buckets_default", "gloo:all_reduce")) == {1}


def _embedding_ids(scenario: str) -> dict[int, list[list[int]]]:
    """Per rank, the [batch, seq_len] int64 ids of every aten::embedding inside a ProfilerStep."""
    out: dict[int, list[list[int]]] = {}
    for rank, base, events in rank_traces(scenario):
        windows = list(steps(events, base).values())
        out[rank] = [e["args"]["Input Dims"][1] for e in events
                     if complete(e) and e.get("name") == "aten::embedding"
                     and any(a <= to_ns(e["ts"], base) < b for a, b in windows)]
    return out


def test_token_skew_names_the_rank_with_the_long_sequences(findings):
    p = params_of("token_skew")
    f = the_finding(findings, "token_skew", "token-skew")
    long_rank = next(int(r) for r in p["seq_len_range"] if r != "default")
    lo, hi = p["seq_len_range"][str(long_rank)]
    ids = _embedding_ids("token_skew")
    assert f.severity == "warning"
    assert f.ranks == (long_rank,) and f.evidence["rank"] == long_rank
    assert lo <= f.evidence["max_seq_len"] <= hi
    assert f.evidence["others_max_seq_len"] <= p["seq_len_range"]["default"][1]
    assert f.evidence["tokens_per_step"] == median(b * t for b, t in ids[long_rank])
    others = [median(b * t for b, t in v) for r, v in ids.items() if r != long_rank]
    assert f.evidence["others_tokens_per_step"] == median(others)
    assert f.evidence["skewed_steps_count"] >= 0.6 * f.evidence["aligned_steps_count"]
    padding = dict(item.split(": ") for item in f.evidence["padding_pct_by_rank"].split(", "))
    assert set(map(int, padding)) == set(ids)
    assert all(0 <= float(v) < 100 for v in padding.values())  # the collate copies are visible


def test_token_budget_gives_every_rank_the_same_tokens():
    """The corrected run really is balanced in tokens (checked in the JSON), so token-skew has nothing to say."""
    ids = _embedding_ids("token_budget")
    budget = params_of("token_budget")["token_budget"]
    for rank, batches in ids.items():
        assert all(b * t <= budget for b, t in batches), rank


def test_sync_batchnorm_cost(findings):
    f = the_finding(findings, "syncbn_cpu", "sync-batchnorm-cost")
    bn_layers = 3  # ConvBN in fixtures/record_ddp.py
    assert f.severity == "info"
    assert f.evidence["forward_collectives_per_step_count"] == bn_layers
    assert f.evidence["backward_collectives_per_step_count"] == bn_layers
    assert set(per_step_counts("syncbn_cpu", "gloo:all_gather")) == {bn_layers}
    assert 0 < f.cost.pct_of_step < 100


def test_rules_never_warn_on_balanced(findings):
    loud = [f for rule in MY_RULES for f in findings("balanced", rule) if f.at_least("warning")]
    assert loud == []
