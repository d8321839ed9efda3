"""Typed stub of the native trace reader (native/, Rust). Use traceanalyze.load.read instead."""

from typing import Any

class TraceReader:
    """One trace file's events as an Arrow C stream (read once, as it is consumed)."""

    def __init__(
        self,
        path: str,
        threads: int = 0,
        block_bytes: int = 8 << 20,
        max_expansion: int = 400,
        min_allowance_bytes: int = 512 << 20,
        max_metadata_value_bytes: int = 64 << 20,
        max_item_bytes: int = 1 << 30,
    ) -> None: ...
    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object: ...
    def result(self) -> dict[str, Any]:
        """metadata [(key, JSON text)], events, events_bytes, truncated_at_byte, lost_bytes,
        base_ns, gzip, notes [(kind, message, count)], tally {...}; raises ValueError (with
        .offset) when the file could not be read."""

def checked_metadata(raw: str) -> str | None: ...
def columns() -> list[str]: ...
def write_raw_events_parquet(
    path: str,
    out: str,
    rank: int,
    threads: int = 0,
    block_bytes: int = 8 << 20,
    max_expansion: int = 400,
    min_allowance_bytes: int = 512 << 20,
    max_metadata_value_bytes: int = 64 << 20,
    max_item_bytes: int = 1 << 30,
    compression: str = "zstd",
    tables_dir: str | None = None,
    cut_short: tuple[int, int] = (1, 10),
    scratch_dir: str | None = None,
    kernel_classes: list[tuple[int, str, str, str]] | None = None,
) -> dict[str, Any]:
    """The trace's events as the Parquet file `out` (and, with `tables_dir`, its one-pass tables
    there, classifying kernels by `kernel_classes`, db/kernel_classes.csv's rows: required with
    `tables_dir`); result() keys plus rows, row_groups, begin_end_rows, parquet_bytes, parse_s,
    write_s, base_scan_s, tables_s (of which gather_s), table_s {table: seconds}, tables {table: rows}."""

def rank_tables_of_parquet(raw: str, tables_dir: str, rank: int, cut_short: tuple[int, int] = (1, 10),
                           scratch_dir: str | None = None,
                           kernel_classes: list[tuple[int, str, str, str]] | None = None
                           ) -> tuple[dict[str, int], dict[str, Any], dict[str, float]]:
    """The one-pass tables of a rank's raw_events.parquet, written into `tables_dir`: their
    rows, the events' issues, each table's seconds."""

def p2p_peer_arg(name: str | None, other_args: str | None) -> int | None: ...
def arg_fields() -> list[tuple[str, str, str]]: ...
def arg_aliases() -> list[tuple[str, list[str]]]: ...
def pftrace_head_metadata(head: bytes) -> list[tuple[str, str]] | None: ...
def write_rows(path: str, columns: list[tuple[str, str]], rows: list[tuple]) -> int: ...
def derived_tables() -> list[str]: ...
def derive_rank_tables(shard_dir: str, out_dir: str, rank: int,
                       pg_configs: list[tuple[str, str | None, list[int], int, int]],
                       params: tuple[int, float, float], threads: int = 0,
                       ) -> tuple[dict[str, int], dict[str, float]]: ...
def reading(what: str, text: str | None, is_annotation: bool = False) -> str | int | bool | None: ...
def walk_critical_path(input: str, output: str) -> int: ...
def tune_allocator() -> None: ...
