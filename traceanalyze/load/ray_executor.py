"""The maps as Ray tasks on the user's cluster; the reduce stays on the driver.

`ray.init(address=...)` joins the cluster named by --ray-address or RAY_ADDRESS (a local one is
started when neither is set). Each pack of ranks (executors.packs: small ranks together) is one
task (1 CPU) writing their shards to the shard folder, which every node must reach: object
storage (s3://...) or a shared filesystem. A task whose worker dies is retried once by Ray, then
reported as the failure of its ranks.
"""

from __future__ import annotations

from collections.abc import Callable

from traceanalyze.errors import TraceanalyzeError
from traceanalyze.load.discover import TraceFile
from traceanalyze.load.executors import MapOutcome, map_pack, packs

Progress = Callable[[str], None]


def run_on_ray(files: list[TraceFile], shards_root: str, address: str | None, say: Progress) -> list[MapOutcome]:
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
    try:
        task = ray.remote(num_cpus=1, max_retries=1)(map_pack)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        refs = {task.remote(pack, shards_root, 1): pack for pack in packs(files, cpus)}
        say(f"mapping {len(files)} rank(s) as {len(refs)} Ray task(s)")
        outcomes: dict[int, MapOutcome] = {}
        waiting = list(refs)
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=min(len(waiting), 64))
            for ref in ready:
                try:
                    outcomes.update((o.rank, o) for o in ray.get(ref))
                except ray.exceptions.RayError as exc:  # the worker died, the node was lost, ...
                    message = " ".join(str(exc).split())[:300]
                    outcomes.update((tf.rank, MapOutcome(tf.rank, tf.url or str(tf.path), None,
                                                         f"the Ray task failed ({message})")) for tf in refs[ref])
        return [outcomes[tf.rank] for tf in files]
    finally:
        if started_here:
            ray.shutdown()
