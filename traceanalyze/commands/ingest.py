"""`traceanalyze ingest TRACE --shards DIR`: map one rank (a batch-scheduler job runs one per rank)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click

from traceanalyze.commands._options import force_option
from traceanalyze.errors import TraceanalyzeError


@click.command("ingest", short_help="Parse one rank's trace into a shard folder (one job per rank).")
@click.argument("trace")
@click.option("--shards", required=True, metavar="DIR_OR_URL",
              help="Shard folder shared by all ranks (path, or s3:// / gs:// / file:// URL).")
@force_option("Parse again even if the rank's shard is up to date.")
def command(trace: str, shards: str, force: bool) -> None:
    """Parse one rank's trace file TRACE (a path or URL) into SHARDS/rank=N/.

    Then `traceanalyze analyze --shards SHARDS` runs the cross-rank analysis. A rank whose
    shard is up to date (same trace, same traceanalyze) is not parsed again.
    """
    from traceanalyze.load.discover import identify
    from traceanalyze.load.map import map_rank
    from traceanalyze.load.shards import ShardStore, is_current, is_remote, local_path

    if is_remote(trace):
        from traceanalyze.load.remote import identify_remote

        tf = identify_remote(trace, only_file=True)
    else:
        path = Path(local_path(trace))
        if not path.is_file():
            raise TraceanalyzeError("no such trace file (ingest takes one rank's file)", trace)
        tf = identify(path, only_file=True)
    store = ShardStore(shards)
    if not force and is_current(store.read_manifest(tf.rank), tf):
        click.echo(f"rank {tf.rank}: shard up to date in {store.rank_dir(tf.rank)}")
        return
    created = not store.remote and not Path(local_path(shards)).exists()
    if not store.remote:
        try:
            Path(local_path(shards)).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TraceanalyzeError(f"cannot create the shard folder: {exc.strerror}", shards) from None
    try:
        manifest = map_rank(tf, shards)
    except BaseException:  # (interrupted, bad input): a shard folder made for nothing goes again
        if created:
            with contextlib.suppress(OSError):
                Path(local_path(shards)).rmdir()
        raise
    click.echo(f"rank {tf.rank}: wrote {store.rank_dir(tf.rank)} ({manifest['events']:,} events)")
