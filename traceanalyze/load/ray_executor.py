"""The maps as Ray tasks on the user's cluster; the reduce stays on the driver.

`ray.init(address=...)` joins the cluster named by --ray-address or RAY_ADDRESS (a local one is
started when neither is set). Each pack of ranks (packing.py: small ranks together) is one
task (1 CPU) writing their shards to the shard folder, which every node must reach: object
storage (s3://...) or a shared filesystem. A task whose worker dies is retried once by Ray, then
reported as the failure of its ranks.

When the driver is interrupted (SIGINT, SIGTERM), its unfinished tasks are cancelled with
force (Ray kills their worker processes); the work folders those leave on this host are
swept before the interrupt goes on, and the partial tables of unfinished ranks in a local
shard folder removed. On other nodes a killed task's work folder stays until a later run on
that node sweeps it (load/stale.py).
"""

from __future__ import annotations

from collections.abc import Callable

from traceanalyze.errors import TraceanalyzeError
from traceanalyze.load.discover import TraceFile
from traceanalyze.load.map_outcome import MapOutcome, trace_name
from traceanalyze.load.packing import map_pack, packs

Progress = Callable[[str], None]


def run_on_ray(files: list[TraceFile], shards_root: str, say: Progress, *, workers: int | None = None,
               address: str | None = None) -> list[MapOutcome]:
    """An `Executor` (executors.py): each rank's map a Ray task; `workers` is Ray's to choose."""
    try:
        import ray
    except ImportError:
        raise TraceanalyzeError("--executor ray needs Ray: pip install 'traceanalyze[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        try:
            ray.init(address=address, log_to_driver=False, configure_logging=False,
                     include_dashboard=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise TraceanalyzeError(f"cannot join the Ray cluster ({' '.join(str(exc).split())[:200]})",
                                    address) from None
    refs: dict = {}
    outcomes: dict[int, MapOutcome] = {}
    try:
        task = ray.remote(num_cpus=1, max_retries=1)(map_pack)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        for pack in packs(files, cpus):
            refs[task.remote(pack, shards_root, 1)] = pack
        say(f"mapping {len(files)} rank(s) as {len(refs)} Ray task(s)")
        waiting = list(refs)
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=min(len(waiting), 64))
            for ref in ready:
                try:
                    outcomes.update((o.rank, o) for o in ray.get(ref))
                except ray.exceptions.RayError as exc:  # the worker died, the node was lost, ...
                    message = " ".join(str(exc).split())[:300]
                    outcomes.update((tf.rank, MapOutcome(tf.rank, trace_name(tf), None,
                                                         f"the Ray task failed ({message})"))
                                    for tf in refs[ref])
        return [outcomes[tf.rank] for tf in files]
    except BaseException:
        _cancel(ray, [ref for ref, pack in refs.items() if any(tf.rank not in outcomes for tf in pack)],
                files, shards_root, set(outcomes))
        raise
    finally:
        if started_here:
            ray.shutdown()


def _cancel(ray, refs: list, files: list[TraceFile], shards_root: str, done: set[int]) -> None:
    """Kill the unfinished tasks' workers, wait until Ray says they ended, then sweep."""
    import contextlib

    from traceanalyze.load.memory import RAM_STAGING_DIR, staging_dir
    from traceanalyze.load.shards import ShardStore
    from traceanalyze.load.stale import sweep_staging

    for ref in refs:
        with contextlib.suppress(Exception):
            ray.cancel(ref, force=True)
    with contextlib.suppress(Exception):
        ray.wait(refs, num_returns=len(refs), timeout=30)  # (a bound: a lost node never answers)
    sweep_staging({staging_dir(files), None, str(RAM_STAGING_DIR)})
    store = ShardStore(shards_root)
    for tf in files:
        if tf.rank not in done:
            store.drop_unfinished(tf.rank)
