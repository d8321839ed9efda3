"""Compact trace specs (the `trace:` of a rule's cases.yaml) -> real Kineto JSON files, one per rank.

A spec describes what the training loop does in each step, in ms from the step start::

    ranks: 4                 # world size (default 1)
    steps: 4                 # ProfilerStep#2 .. #5 (first_step: 2)
    step_ms: 100             # or a list, one per step
    rank_step_ms: {1: [100, 250]}    # replaces step_ms for these ranks
    gpu: false               # true adds deviceProperties (GPU kernels need no flag)
    device_name: NVIDIA Test GPU   # deviceProperties[0].name
    host_names: {0: node-a}  # the top-level host_name of these ranks' files
    clock_offset_ms: {3: 7000}   # rank 3's clock runs 7 s ahead
    world_size: 8            # distributedInfo world_size, when larger than the ranks written
    loaded_ranks: [0, 1]     # write only these ranks' files (a partial world)
    groups:                  # distributedInfo.pg_config: each rank lists the groups holding it
      - {name: '0', desc: default_pg, ranks: [0, 1, 2, 3]}
      - {name: '1', desc: mesh_tp, ranks: [0, 1]}
    ranks_as_text: true      # write pg_config ranks as a string ('[0, 1]'), as on-demand traces do
    profiler_steps: false    # no ProfilerStep#N events (recorded without a schedule)
    timeline:                # every rank, every step: [kind, start_ms, dur_ms, {options}]
      - [data, 0, 5]
      - [forward, 5, 25]
      - [backward, 30, 40]
      - [all_reduce, 60, 25, {call_ms: 69.9, bytes: 4194304}]
      - [optimizer, 90, 5]
    rank_timelines:          # replaces `timeline` for these ranks
      2: [...]

Kinds: data (DataLoader __next__; options: workers, true for _MultiProcessingDataLoaderIter), forward (DDP forward + an aten op spanning it; option op: false leaves the op out), backward (an autograd
node; options: nodes [1], that many back-to-back nodes instead), optimizer (Optimizer.step),
op (a CPU op, options: name), all_reduce / barrier / all_gather / broadcast / reduce_scatter
(a gloo:* annotation on a pt_gloo_runloop thread plus a 50 us c10d call on the training thread
at call_ms; options: call, the c10d op's name, e.g. _allgather_base_ as FSDP2 calls it; tid, the
runloop thread [200] (gloo gives every process group threads of its own); gloo
runs a reduce_scatter as a gloo:all_reduce of its input, the whole tensor, of `bytes`),
send / recv (a gloo:send / gloo:recv annotation on the training thread from the call to the
end of the transfer, inside a c10d::send / c10d::recv_ op whose third argument is `peer`, a
rank of the group), kernel / nccl (GPU kernels with their cudaLaunchKernel; options: name, stream, launch_ms,
launch_us, count, every_ms, args (the kernel's args, e.g. "In msg nelems")), memcpy (options: kind, bytes), sync (a cudaStreamSynchronize
call; options: name), memory (a [memory] event; options: total_allocated_bytes, device_type,
bytes [4096], addr [1]), all_to_all (all_to_all_single on gloo: a gloo:all_to_all annotation of the
input on the runloop thread and a c10d::alltoall_base_ call at call_ms with Input Dims [output,
input] and Concrete Inputs holding the split sizes; options: send_splits, recv_splits (rows to /
from each rank of the group), cols [128], splits [true]: false leaves the split sizes out), event (any complete event; options: name, cat [cpu_op], tid [the
training thread], args). Collectives take dtype [float] for their
Input type. Any number may be a list indexed by step.

    flight_recorder:         # Flight Recorder dumps, nccl_trace_rank_<R> (the keys of torch 2.13's
      2: [["0", default_pg, 1, all_reduce, [[4]], 50]]   # version 2.10 on gloo), per rank its
                             # collectives: [group name, description, collective_seq_id, op, sizes,
                             # the line of train.py that called it, {dtype: Float}]; ops
                             # 'send 0->1' / 'recv 1<-0' are p2p (NCCL's names); `ranks: 0`
                             # writes no profiler trace beside them
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

BASE_US = 5_000_000.0  # first step start on a rank's clock, us
MAIN_TID, GLOO_TID = 100, 200
COLLECTIVES = {"all_reduce": "allreduce_", "barrier": "barrier", "all_gather": "allgather_",
               "broadcast": "broadcast_", "reduce_scatter": "_reduce_scatter_base_"}
GLOO_RUNS = {"reduce_scatter": "all_reduce"}  # gloo runs reduce_scatter_tensor as an all-reduce of the whole tensor


def _at(value: Any, step_index: int) -> Any:
    return value[step_index % len(value)] if isinstance(value, list) else value


class _Rank:
    """Collects one rank's events."""

    def __init__(self, rank: int) -> None:
        self.rank, self.pid, self.events, self.correlation = rank, 1000 + rank, [], 0

    def x(self, name: str, cat: str, ts_us: float, dur_us: float, tid: int, pid: int | None = None,
          **args) -> None:
        event = {"ph": "X", "cat": cat, "name": name, "pid": self.pid if pid is None else pid, "tid": tid,
                 "ts": round(ts_us, 3), "dur": round(max(dur_us, 0.0), 3)}
        if args:
            event["args"] = args
        self.events.append(event)

    def launch(self, name: str, cat: str, start_us: float, dur_us: float, stream: int,
               launch_us: float, launch_dur_us: float, api: str, **args) -> None:
        self.correlation += 1
        self.x(api, "cuda_runtime", launch_us, launch_dur_us, MAIN_TID, correlation=self.correlation)
        self.x(name, cat, start_us, dur_us, stream, pid=0, device=0, stream=stream,
               correlation=self.correlation, **args)


def _cpu_event(r: _Rank, kind: str, t: float, d: float, opts: dict, si: int) -> None:
    if kind == "data":
        it = "_MultiProcessingDataLoaderIter" if opts.get("workers") else "_SingleProcessDataLoaderIter"
        r.x(f"enumerate(DataLoader)#{it}.__next__", "user_annotation", t, d, MAIN_TID)
    elif kind == "forward":
        r.x("DistributedDataParallel.forward", "user_annotation", t, d, MAIN_TID)
        if opts.get("op", True):   # the range is its ops: forward is time in ops (80_phases.sql); op: false when the case gives its own
            r.x("aten::linear", "cpu_op", t, d, MAIN_TID)
    elif kind == "backward":
        nodes = int(opts.get("nodes", 1))  # a real backward is many autograd nodes, one after another
        for i in range(nodes):
            r.x("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op", t + i * d / nodes, d / nodes, MAIN_TID)
    elif kind == "optimizer":
        r.x("Optimizer.step#SGD.step", "user_annotation", t, d, MAIN_TID)
    elif kind == "op":
        r.x(opts.get("name", "aten::mul"), "cpu_op", t, d, MAIN_TID)
    elif kind == "event":
        r.x(opts["name"], opts.get("cat", "cpu_op"), t, d, opts.get("tid", MAIN_TID), **opts.get("args", {}))
    elif kind == "sync":
        r.x(opts.get("name", "cudaStreamSynchronize"), "cuda_runtime", t, d, MAIN_TID)
    elif kind == "memory":
        r.events.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": r.pid,
                         "tid": MAIN_TID, "ts": round(t, 3),
                         "args": {"Device Type": opts.get("device_type", 0), "Device Id": -1,
                                  "Addr": _at(opts.get("addr", 1), si), "Bytes": _at(opts.get("bytes", 4096), si),
                                  "Total Allocated": _at(opts["total_allocated_bytes"], si),
                                  "Total Reserved": _at(opts["total_allocated_bytes"], si)}})
    elif kind in COLLECTIVES:
        numel = int(_at(opts.get("bytes", 4096), si)) // 4
        r.x(f"gloo:{GLOO_RUNS.get(kind, kind)}", "user_annotation", t, d, int(opts.get("tid", GLOO_TID)),
            **{"Input Dims": [[numel]], "Input type": [opts.get("dtype", "float")]})
        call = _at(opts["call_ms"], si) * 1000 + opts["_step_start_us"] if "call_ms" in opts else t
        r.x(f"c10d::{opts.get('call', COLLECTIVES[kind])}", "cpu_op", call, 50.0, MAIN_TID)
    elif kind == "all_to_all":   # all_to_all_single as torch 2.x records it on gloo (fixtures/README.md)
        cols, send, recv = int(opts.get("cols", 128)), opts["send_splits"], opts["recv_splits"]
        dims = [[sum(recv), cols], [sum(send), cols], [], [], [], [], []]
        r.x("gloo:all_to_all", "user_annotation", t, d, int(opts.get("tid", GLOO_TID)),
            **{"Input Dims": [[sum(send), cols]], "Input type": [opts.get("dtype", "float")]})
        call = _at(opts["call_ms"], si) * 1000 + opts["_step_start_us"] if "call_ms" in opts else t
        concrete = {} if opts.get("splits") is False else {
            "Concrete Inputs": ["", "", "", str(recv), str(send), "False", "-1"]}
        r.x("c10d::alltoall_base_", "cpu_op", call, 50.0, MAIN_TID,
            **{"Input Dims": dims, "Input type": [opts.get("dtype", "float")] * 2 + ["", "ScalarList", "ScalarList",
                                                                                   "Scalar", "Scalar"]}, **concrete)
    elif kind in ("send", "recv"):
        numel = int(_at(opts.get("bytes", 4096), si)) // 4
        r.x(f"c10d::{'send' if kind == 'send' else 'recv_'}", "cpu_op", t, d, MAIN_TID,
            **{"Concrete Inputs": ["", "", str(_at(opts["peer"], si)), "0"]})
        r.x(f"gloo:{kind}", "user_annotation", t + min(20.0, d / 4), d - min(20.0, d / 4), MAIN_TID,
            **{"Input Dims": [[numel]], "Input type": [opts.get("dtype", "float")]})
    else:
        raise ValueError(f"unknown event kind {kind!r}")


def _gpu_event(r: _Rank, kind: str, t: float, d: float, opts: dict, si: int) -> None:
    if kind == "memcpy":
        copy = opts.get("kind", "HtoD (Pageable -> Device)")
        launch = t - 10.0
        r.launch(f"Memcpy {copy}", "gpu_memcpy", t, d, opts.get("stream", 7), launch,
                 max(d + 10.0, 10.0) if "Pageable" in copy else 10.0, "cudaMemcpyAsync",
                 bytes=int(_at(opts.get("bytes", 1 << 20), si)))
        return
    name = opts.get("name", "ncclDevKernel_AllReduce_Sum_f32_RING_LL" if kind == "nccl"
                    else "volta_sgemm_128x64_nn")
    stream = opts.get("stream", 20 if kind == "nccl" else 7)
    every = opts.get("every_ms", 0) * 1000
    launch_dur = opts.get("launch_us", 5.0)
    for i in range(int(opts.get("count", 1))):
        start = t + i * every
        launch = (_at(opts["launch_ms"], si) * 1000 + opts["_step_start_us"] if "launch_ms" in opts
                  else start - launch_dur - 1.0) + i * every
        r.launch(name, "kernel", start, d, stream, launch, launch_dur, "cudaLaunchKernel", **opts.get("args", {}))


def _step_events(r: _Rank, timeline: list, start_us: float, si: int) -> None:
    for item in timeline:
        kind, start_ms, dur_ms = item[0], _at(item[1], si), _at(item[2], si)
        opts = dict(item[3]) if len(item) > 3 else {}
        opts["_step_start_us"] = start_us
        t, d = start_us + start_ms * 1000, dur_ms * 1000
        (_gpu_event if kind in ("kernel", "nccl", "memcpy") else _cpu_event)(r, kind, t, d, opts, si)


def rank_trace(spec: dict, rank: int) -> dict:
    """The Kineto JSON object of one rank."""
    ranks = int(spec.get("ranks", 1))
    steps = int(spec.get("steps", 4))
    first = int(spec.get("first_step", 2))
    timeline = (spec.get("rank_timelines") or {}).get(rank, spec.get("timeline", []))
    r = _Rank(rank)
    t = BASE_US + float((spec.get("clock_offset_ms") or {}).get(rank, 0)) * 1000
    for si in range(steps):
        step_ms = (spec.get("rank_step_ms") or {}).get(rank, spec.get("step_ms", 100))
        step_us = _at(step_ms, si) * 1000
        if spec.get("profiler_steps", True):
            r.x(f"ProfilerStep#{first + si}", "user_annotation", t, step_us, MAIN_TID)
        _step_events(r, timeline, t, si)
        t += step_us
    r.events += [
        {"ph": "M", "name": "process_name", "pid": r.pid, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "thread_name", "pid": r.pid, "tid": MAIN_TID, "args": {"name": "thread 100 (python3)"}},
        {"ph": "M", "name": "thread_name", "pid": r.pid, "tid": GLOO_TID,
         "args": {"name": "thread 200 (pt_gloo_runloop)"}},
    ]
    trace: dict[str, Any] = {"schemaVersion": 1,
                             "distributedInfo": {"backend": "nccl" if spec.get("gpu") else "gloo",
                                                 "rank": rank, "world_size": int(spec.get("world_size", ranks))}}
    if spec.get("groups"):
        mine = [g for g in spec["groups"] if rank in g["ranks"]]
        trace["distributedInfo"]["pg_count"] = len(spec["groups"])
        trace["distributedInfo"]["pg_config"] = [
            {"pg_name": str(g["name"]), "pg_desc": g.get("desc", "undefined"), "backend_config": "cpu:gloo",
             "pg_size": len(g["ranks"]), "ranks": str(g["ranks"]) if spec.get("ranks_as_text") else g["ranks"]}
            for g in mine]
    if spec.get("gpu"):  # Kineto writes deviceProperties before traceEvents
        trace["deviceProperties"] = [{"id": 0, "name": spec.get("device_name", "NVIDIA Test GPU")}]
    if (spec.get("host_names") or {}).get(rank):
        trace["host_name"] = spec["host_names"][rank]
    trace["traceEvents"] = r.events
    return trace


def write_trace_dir(spec: dict, folder: Path) -> Path:
    """Write rank<R>.json for every rank of the spec into `folder`; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank in spec.get("loaded_ranks") or range(int(spec.get("ranks", 1))):
        (folder / f"rank{rank}.json").write_text(json.dumps(rank_trace(spec, rank)), encoding="utf-8")
    for rank, calls in (spec.get("flight_recorder") or {}).items():
        (folder / f"nccl_trace_rank_{rank}").write_bytes(flight_recorder_dump(calls))
    return folder


TORCH_FRAME = {"filename": "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",
               "line": 3245, "name": "all_reduce"}


def flight_recorder_dump(calls: list) -> bytes:
    """A rank's Flight Recorder dump (a pickle of plain containers, as torch writes it)."""
    entries, status, pg_ids = [], {}, {}
    for record_id, call in enumerate(calls):
        pg_name, pg_desc, seq, op, sizes, line = call[:6]
        options = call[6] if len(call) > 6 else {}
        pg_id = pg_ids.setdefault(str(pg_name), len(pg_ids))
        dtype = options.get("dtype", "Float")
        p2p = op.startswith(("send ", "recv "))
        backend = "nccl" if p2p else "gloo"  # (gloo records no p2p)
        entries.append({
            "record_id": record_id, "pg_id": pg_id, "process_group": (str(pg_name), pg_desc),
            "collective_seq_id": 0 if p2p else seq, "p2p_seq_id": seq if p2p else 0, "op_id": seq,
            "profiling_name": f"{backend}:{op}",
            "time_created_ns": 1_700_000_000_000_000_000 + record_id * 1_000_000,
            "input_sizes": sizes, "input_dtypes": [dtype] * len(sizes),
            "output_sizes": sizes, "output_dtypes": [dtype] * len(sizes),
            "state": "scheduled", "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
            "retired": True, "timeout_ms": 1_800_000, "is_p2p": p2p, "thread_id": "1", "thread_name": "python",
            "frames": [TORCH_FRAME, {"filename": "/job/train.py", "line": line, "name": "step"}]})
        if p2p:
            continue
        status[str(pg_id)] = {"last_enqueued_collective": seq, "last_started_collective": -1,
                              "last_completed_collective": seq}
    return pickle.dumps({"version": "2.10", "entries": entries,
                         "pg_config": {"": {"name": "", "desc": "", "ranks": "[]"}},
                         "pg_status": status, "comm_lib_version": ""}, protocol=2)
