"""Options shared by the commands that map ranks: where (--executor) and into which shards."""

from __future__ import annotations

import click

from traceanalyze.errors import TraceanalyzeError


def executor_options(f):
    f = click.option("--ray-address", default=None, metavar="ADDRESS",
                     help="Ray cluster to join with --executor ray [default: $RAY_ADDRESS, else a local one].")(f)
    f = click.option("--workers", type=click.IntRange(min=1), default=None,
                     help="Maps at once with the local executor [default: all cores].")(f)
    f = click.option("--shards", default=None, metavar="DIR_OR_URL",
                     help="Shard folder (path or s3://, gs://, file:// URL) [default: <out>/trace.shards]. "
                          "Without TRACE_DIR: analyze the shards found there.")(f)
    f = click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                     help="Where each rank is parsed: a local process pool, or Ray tasks on a cluster.")(f)
    return f


def load_options(trace_dir: str | None, scale: dict) -> dict:
    """Keyword arguments for load_trace_dir (or the shard set alone when there is no trace_dir)."""
    if trace_dir is None:
        if not scale.get("shards"):
            raise TraceanalyzeError("give a trace folder, or --shards DIR to analyze an ingested shard set")
        return {"shards": scale["shards"]}
    return {k: v for k, v in scale.items() if v is not None}
