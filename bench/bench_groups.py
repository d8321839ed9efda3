"""Group and pipeline inference at scale: their share of the reduce.

The reduce (`traceanalyze analyze --shards`: the shards -> trace.duckdb with every cross-rank
table) starts with two inferences over the collective rows of all ranks: the process groups
(`load/groups.py`, who meets whom at which collective) and the pipelines (`load/pipelines.py`,
who sends to whom). Both grow with the ranks; this measures their CPU and wall time against the
whole reduce, on the synthetic worlds of bench_scale.py (copies of a real 4-rank gloo DDP run,
each rank with its own clock offset, one straggler).

    python bench/bench_groups.py [--sizes 256,1024] [--seed 7] [--repeat 3]

Per size: the map once (`traceanalyze load`, not timed here: bench_scale.py measures it), then
the reduce `--repeat` times in this process, each a fresh database from the same shards; the
median of each figure is printed as a Markdown row.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import traceanalyze.load.reduce as reduce  # noqa: E402
from bench_scale import make_world  # noqa: E402
from traceanalyze.load.trace_dir import load_shards  # noqa: E402


class Clock:
    """Wall and CPU seconds spent inside a wrapped function."""

    def __init__(self, fn):
        self.fn, self.wall, self.cpu = fn, 0.0, 0.0

    def __call__(self, *args, **kwargs):
        w, c = time.perf_counter(), time.process_time()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.wall += time.perf_counter() - w
            self.cpu += time.process_time() - c


def reduce_once(shards: Path, db: Path) -> dict:
    groups, pipelines = Clock(reduce.infer_groups), Clock(reduce.infer_pipelines)
    saved = reduce.infer_groups, reduce.infer_pipelines
    reduce.infer_groups, reduce.infer_pipelines = groups, pipelines
    try:
        w, c = time.perf_counter(), time.process_time()
        load_shards(str(shards), db)
        wall, cpu = time.perf_counter() - w, time.process_time() - c
    finally:
        reduce.infer_groups, reduce.infer_pipelines = saved
        db.unlink(missing_ok=True)
    return {"wall": wall, "cpu": cpu, "groups_wall": groups.wall, "groups_cpu": groups.cpu,
            "pipelines_wall": pipelines.wall, "pipelines_cpu": pipelines.cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="256,1024")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("| ranks | reduce wall s / CPU s | group inference wall s / CPU s (share of the reduce's CPU) "
          "| pipeline inference wall s / CPU s |")
    print("|---|---|---|---|")
    for n in [int(x) for x in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory(prefix="bench-groups-") as tmp:
            world = Path(tmp) / "world"
            make_world(n, args.seed, world)
            db = Path(tmp) / "map.duckdb"
            subprocess.run([sys.executable, "-m", "traceanalyze", "load", str(world), "--db", str(db), "-q"],
                           check=True, cwd=ROOT)
            shards = db.with_suffix(".shards")   # (where `load` writes them: beside the database)
            runs = [reduce_once(shards, Path(tmp) / f"reduce{i}.duckdb") for i in range(args.repeat)]
            m = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            print(f"| {n:,} | {m['wall']:.1f} / {m['cpu']:.1f} | {m['groups_wall']:.2f} / {m['groups_cpu']:.2f} "
                  f"({100 * m['groups_cpu'] / m['cpu']:.1f} %) | {m['pipelines_wall']:.2f} / {m['pipelines_cpu']:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
