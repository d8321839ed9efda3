"""`traceanalyze ingest TRACE --shards DIR`: map one rank (a batch-scheduler job runs one per rank)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click

from traceanalyze.commands._options import force_option
from traceanalyze.errors import TraceanalyzeError
from traceanalyze.interrupts import interrupts_held


@click.command("ingest", short_help="Parse one rank's trace into a shard folder (one job per rank).")
@click.argument("trace")
@click.option("--shards", required=True, metavar="DIR_OR_URL",
              help="Shard folder shared by all ranks (path, or s3:// / gs:// / file:// URL).")
@force_option("Parse again even if the rank's shard is up to date.")
def command(trace: str, shards: str, force: bool) -> None:
    """Parse one rank's trace file TRACE (a path or URL) into SHARDS/rank=N/.

    Then `traceanalyze analyze --shards SHARDS` runs the cross-rank analysis. A rank whose
    shard is up to date (same trace, same traceanalyze, files intact) is not parsed again.
    A second ingest of a rank that is being written waits for the first, then finds it up to date.
    """
    from traceanalyze.load.discover import identify
    from traceanalyze.load.map import map_rank_locked
    from traceanalyze.load.shards import ShardStore, is_remote, local_path, rank_lock

    if not is_remote(trace) and Path(trace).is_file():
        from traceanalyze.load.flight_recorder import looks_like_dump

        if looks_like_dump(Path(trace)):
            return _ingest_dump(Path(trace), shards)
    if is_remote(trace):
        from traceanalyze.load.remote import identify_remote

        tf = identify_remote(trace, only_file=True)
    else:
        path = Path(local_path(trace))
        if not path.is_file():
            raise TraceanalyzeError("no such trace file (ingest takes one rank's file)", trace)
        tf = identify(path, only_file=True)
    store = ShardStore(shards)
    created = not store.remote and not Path(local_path(shards)).exists()

    def waiting(holder: str) -> None:
        click.echo(f"rank {tf.rank}: waiting for another ingest of this rank to finish ({holder})", err=True)

    try:
        if not store.remote:
            with interrupts_held():  # (a signal meanwhile is raised in this try, which removes it)
                _make_rank_dir(store, tf.rank, shards)
        with rank_lock(store, tf.rank, waiting):
            if not force and _up_to_date(store, tf):
                click.echo(f"rank {tf.rank}: shard up to date in {store.rank_dir(tf.rank)}")
                return
            manifest = map_rank_locked(tf, store)
    except BaseException:  # (interrupted, bad input): a shard folder made for nothing goes again
        if created:
            _remove_if_empty(Path(local_path(shards)), Path(store.rank_dir(tf.rank)))
        raise
    click.echo(f"rank {tf.rank}: wrote {store.rank_dir(tf.rank)} ({manifest['events']:,} events)")


def _ingest_dump(path: Path, shards: str) -> None:
    """A rank's Flight Recorder dump, checked (read without running anything), kept in
    SHARDS/flight_recorder/ under its name: the analysis of the shard set reads it."""
    from traceanalyze.atomic import write_bytes_atomic
    from traceanalyze.load.flight_recorder import identify_dump, read_dump
    from traceanalyze.load.shards import is_remote, local_path
    from traceanalyze.load.trace_dir import DUMPS_FOLDER

    if is_remote(shards):
        raise TraceanalyzeError("Flight Recorder dumps are ingested into a local shard folder", shards)
    dump = identify_dump(path)
    read_dump(path)
    folder = Path(local_path(shards)) / DUMPS_FOLDER
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for other in folder.iterdir():  # (a dump of this rank under another name is replaced)
            if other.name != path.name and identify_dump(other).rank == dump.rank:
                other.unlink()
        write_bytes_atomic(folder / path.name, path.read_bytes())
    except OSError as exc:
        raise TraceanalyzeError(f"cannot write the shard folder: {exc.strerror}", shards) from None
    click.echo(f"rank {dump.rank}: kept its Flight Recorder dump in {folder / path.name}")


def _up_to_date(store, tf) -> bool:
    """The rank's shard is of this trace and this version, and (in a local folder) its files are
    the ones its manifest describes (a shard in a bucket is checked when it is reduced)."""
    from traceanalyze.load.shards import is_current
    from traceanalyze.load.verify import verify_shard

    manifest = store.read_manifest(tf.rank)
    if not is_current(manifest, tf):
        return False
    return store.remote or verify_shard(store.rank_dir(tf.rank), manifest, tf.rank) is None


def _make_rank_dir(store: ShardStore, rank: int, shards: str) -> None:
    try:
        Path(store.rank_dir(rank)).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TraceanalyzeError(f"cannot create the shard folder: {exc.strerror}", shards) from None


def _remove_if_empty(root: Path, rank_dir: Path) -> None:
    """The shard folder this ingest created, when its rank's lock file is all it holds."""
    with contextlib.suppress(OSError):
        (rank_dir / ".lock").unlink()
    for folder in (rank_dir, root):
        with contextlib.suppress(OSError):
            folder.rmdir()
