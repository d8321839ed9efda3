"""The Python API (for notebooks and scripts); the command line is a thin layer over it.

    a = traceanalyze.analyze("runs/job42", ranks="all")   # writes nothing unless asked
    a.verdict                 # the answer the terminal prints, plain text
    a.findings                # [Finding(rule, severity, ranks, steps, title, cost, ...)]
    a.sql("SELECT * FROM steps")          # polars DataFrame (.to_pandas() with pandas installed)
    a.evidence(a.findings[0])             # the rows that reproduce a finding
    a.write_report("out/")                # report.html + summary.json (+ Perfetto)

Bad input raises `traceanalyze.TraceError` (`.path`, `.problem`).
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import traceanalyze.db as tracedb
from traceanalyze.analysis.align import require_a_step
from traceanalyze.diagnosis.config import Config, config_from_file, load_config
from traceanalyze.errors import TraceError
from traceanalyze.findings import Finding
from traceanalyze.interrupts import interrupts_held
from traceanalyze.lazy_import import duckdb
from traceanalyze.load import load_shards, load_trace_dir
from traceanalyze.load.discover import parse_rank_selection
from traceanalyze.progress import ProgressChoice, progress_reporter
from traceanalyze.summary.file import summary_from_source
from traceanalyze.summary.model import Summary

if TYPE_CHECKING:
    import polars

    from traceanalyze.compare.diff import SummaryDiff
    from traceanalyze.compare.scaling import ScalingReport
    from traceanalyze.report_folder import AnalysisPaths

PathLike = Union[str, Path]
Ranks = Union[str, int, Iterable[int], None]
Params = Union[Mapping[str, Any], Iterable[str], None]
ConfigChoice = Union[Config, PathLike, None]


def rank_set(ranks: Ranks) -> set[int] | None:
    """"all" / None -> None (every rank); "0,3" / "0-7" / 2 / [0, 3] -> a set of rank numbers."""
    if ranks is None:
        return None
    if isinstance(ranks, str):
        return parse_rank_selection(ranks)
    if isinstance(ranks, int):
        return {ranks}
    return {int(r) for r in ranks}


def param_args(params: Params) -> list[str]:
    """{"rule.name": v} / {"rule": {"name": v}} / ["rule.name=v"] -> ["rule.name=v", ...]."""
    if params is None:
        return []
    if isinstance(params, str):
        return [params]
    if isinstance(params, Mapping):
        out = []
        for key, value in params.items():
            if isinstance(value, Mapping):
                out += [f"{key}.{name}={v}" for name, v in value.items()]
            else:
                out.append(f"{key}={value}")
        return out
    return [str(p) for p in params]


def resolve_config(config: ConfigChoice, params: Params) -> Config:
    """None: the defaults (no file is searched for); a file: that file; a folder: the nearest
    traceanalyze.toml / pyproject.toml at or above it (what the command line does from the
    working folder); a Config: as it is (params must then be None)."""
    if isinstance(config, Config):
        if params:
            raise TraceError("give params inside the Config, or a config file path with params")
        return config
    args = param_args(params)
    if config is None:
        return config_from_file(None, args)
    path = Path(config)
    if path.is_dir():
        return load_config(path, args)
    return config_from_file(path, args)


def analyze(trace_dir: PathLike, ranks: Ranks = "all", db: PathLike | None = None,
            params: Params = None, config: ConfigChoice = None,
            progress: ProgressChoice = "auto", force: bool = False, *, executor: str = "local",
            shards: str | None = None, workers: int | None = None,
            ray_address: str | None = None) -> Analysis:
    """Analyze the per-rank traces under `trace_dir` (a folder, or one trace file).

    ranks: "all", "0,3", "0-7", or rank numbers. db: where to keep the trace database (reused
    when the traces did not change, unless `force`); without it a temporary database is used and
    removed when the Analysis is closed or garbage-collected. params: rule thresholds,
    {"collective-straggler.min_late_ms": 20}. config: a traceanalyze.toml / pyproject.toml
    file, a folder to search upwards from, or a Config (None: built-in defaults).
    progress: "auto" (a bar in notebooks and terminals), True, False, or a function of a message.
    executor: "local" (a process pool over all cores, `workers` at once) or "ray" (Ray tasks on
    the cluster at `ray_address` / $RAY_ADDRESS). shards: the shard folder (a path or an fsspec
    URL; default `<db>.shards`); trace_dir may be an fsspec URL too (s3://bucket/traces), or None
    to analyze the shards written by `traceanalyze ingest`.
    """
    from traceanalyze.diagnosis.diagnose import diagnose
    from traceanalyze.summary.build import build_summary

    if trace_dir is None and not shards:
        raise TraceError("give a trace folder, or the shards folder of an ingested shard set")
    source = shards if trace_dir is None else trace_dir
    if "://" not in str(source):
        source = Path(source)
    settings = resolve_config(config, params)  # a typo fails before the long load
    scratch = None
    say, done = progress_reporter(progress)
    try:
        if db is None:
            with interrupts_held():  # (made and `scratch` set at once: the except below removes it)
                scratch = Path(tempfile.mkdtemp(prefix="traceanalyze-"))
        db_path = scratch / "trace.duckdb" if db is None else Path(db)
        if trace_dir is None:
            load_shards(str(source), db_path, rank_set(ranks), progress=say)
        else:
            load_trace_dir(source, db_path, rank_set(ranks), reuse=not force, progress=say, executor=executor,
                           shards=shards, workers=workers, ray_address=ray_address)
        con = tracedb.connect(db_path, read_only=True)
        try:
            tracedb.fit_threads(con)
            require_a_step(con)
            say("running rules")
            diagnosis = diagnose(con, settings)
            summary = build_summary(con, str(source), diagnosis)
        finally:
            con.close()
    except BaseException:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        raise
    finally:
        done()
    return Analysis(source, db_path, summary, scratch)


def _close(con_box: list, scratch: Path | None) -> None:
    for con in con_box:
        con.close()
    con_box.clear()
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


class Analysis:
    """One analysed run: findings, verdict, typed summary, SQL on the trace database, reports."""

    def __init__(self, trace_dir: Path, db_path: Path, summary: dict[str, Any],
                 scratch: Path | None = None) -> None:
        self.trace_dir = Path(trace_dir)
        self.db_path = Path(db_path)            # the DuckDB trace database (documented schema)
        self.summary_dict = summary             # summary.json as a dict (what the renderers read)
        self.summary = Summary.from_dict(summary)
        self._cons: list[duckdb.DuckDBPyConnection] = []
        self._closer = weakref.finalize(self, _close, self._cons, scratch)

    # -- what was found --------------------------------------------------------------------
    @property
    def findings(self) -> list[Finding]:
        """The findings, worst first (the order of summary.json and the terminal)."""
        return list(self.summary.findings)

    @property
    def verdict(self) -> str:
        """The answer `traceanalyze DIR` prints, as plain text (no colour)."""
        from traceanalyze.output.terminal import render_verdict

        return render_verdict(self.summary_dict, [], color=False)

    # -- SQL on the trace database ---------------------------------------------------------
    def connection(self) -> duckdb.DuckDBPyConnection:
        """A read-only DuckDB connection to the trace database (closed with the Analysis)."""
        if not self._closer.alive:
            raise TraceError("this Analysis is closed", str(self.db_path))
        if not self._cons:
            self._cons.append(tracedb.connect(self.db_path, read_only=True,
                                              config={"enable_external_access": False}))
        return self._cons[0]

    def sql(self, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> polars.DataFrame:
        """Run a query (parameters bound with `?` or `$name`) -> a polars DataFrame."""
        from traceanalyze.db.frames import to_polars
        from traceanalyze.db.sandbox import ALLOWED, refusal

        reason = refusal(self.connection(), query)
        if reason:
            raise TraceError(f"query refused: {reason}; .sql() runs {ALLOWED}")
        try:
            cur = self.connection().execute(query, params) if params is not None \
                else self.connection().execute(query)
            return to_polars(cur)
        except duckdb.Error as exc:
            raise TraceError(f"query failed: {' '.join(str(exc).split())}") from None

    def table(self, name: str) -> polars.DataFrame:
        """A whole table or view of the database (`traceanalyze sql DB --schema` lists them)."""
        names = set(self.tables())
        if name not in names:
            raise TraceError(f"no table {name!r} (tables: {', '.join(sorted(names))})", str(self.db_path))
        return self.sql(f'SELECT * FROM "{name}"')  # name checked against the catalog above

    def tables(self) -> list[str]:
        """The tables and views of the trace database."""
        rows = self.connection().execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
            "ORDER BY table_name").fetchall()
        return [r[0] for r in rows]

    def efficiency(self, peak_tflops: float | None = None) -> dict[str, polars.DataFrame]:
        """How fast, not only how long: {"steps": step_efficiency (FLOPs, TFLOP/s, MFU per rank
        and step), "top_ops": the ops that lose the most GPU time against the rank's best rate of
        the same formula family, "bandwidth": collective_bandwidth, "critical_path": the largest
        parts of the steps' critical paths (table critical_path) by kind, rank and name}. `peak_tflops` replaces the
        device's peak (gpu_specs) in peak_tflops and mfu_pct, e.g. for a device not in the table
        or TF32 matmuls."""
        from traceanalyze.analysis.efficiency import CRITICAL_PATH_SQL, STEPS_SQL, TOP_OPS_SQL

        if peak_tflops is not None and not (isinstance(peak_tflops, (int, float)) and peak_tflops > 0):
            raise TraceError(f"peak_tflops must be a positive number, not {peak_tflops!r}")
        steps = self.sql(STEPS_SQL + " ORDER BY rank, step", {"peak_tflops": float(peak_tflops or 0)})
        top_ops = self.sql(TOP_OPS_SQL, {"peak_tflops": float(peak_tflops or 0), "limit_count": 20})
        bandwidth = self.sql("SELECT * FROM collective_bandwidth ORDER BY step, process_group, op, op_index, rank")
        path = self.sql(CRITICAL_PATH_SQL, {"limit_count": 20})
        return {"steps": steps, "top_ops": top_ops, "bandwidth": bandwidth, "critical_path": path}

    def evidence(self, finding: Finding | int | str) -> polars.DataFrame:
        """The rows that reproduce a finding (its bound SQL run on the database).

        `finding`: a Finding, its index in `.findings`, or a rule id (its first finding)."""
        f = self._finding(finding)
        if not f.sql:
            raise TraceError(f"the finding of rule {f.rule} has no SQL to run")
        return self.sql(f.sql)

    def _finding(self, finding: Finding | int | str) -> Finding:
        found = self.findings
        if isinstance(finding, Finding):
            return finding
        if isinstance(finding, int):
            return found[finding]
        for f in found:
            if f.rule == finding:
                return f
        raise KeyError(f"no finding of rule {finding!r}")

    # -- outputs ---------------------------------------------------------------------------
    def write_report(self, out_dir: PathLike, html: bool = True, perfetto: bool = False,
                     progress: ProgressChoice = False) -> AnalysisPaths:
        """Write summary.json, report.html (unless html=False) and the merged Perfetto trace
        (perfetto=True) into `out_dir`; returns the paths written."""
        from traceanalyze.report_folder import write_outputs

        say, done = progress_reporter(progress)
        try:
            return write_outputs(self.summary_dict, Path(out_dir), self.db_path, html, perfetto, say)
        finally:
            done()

    def _repr_html_(self) -> str:
        from traceanalyze.output.notebook import render_analysis_html

        return render_analysis_html(self.summary_dict)

    def __repr__(self) -> str:
        counts = {}
        for f in self.findings:
            counts[f.severity] = counts.get(f.severity, 0) + 1
        found = ", ".join(f"{n} {s}" for s, n in counts.items()) or "no findings"
        return f"<Analysis {str(self.trace_dir)!r}: {len(self.summary.ranks)} rank(s), {found}>"

    def close(self) -> None:
        """Close the database connection; remove the temporary database if one was made."""
        self._closer()

    def __enter__(self) -> Analysis:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


SummarySource = Union[Analysis, Summary, Mapping[str, Any], PathLike]


def summary_dict_of(source: SummarySource, db_for: Callable[[Path], Path] | None = None,
                    progress: ProgressChoice = False) -> dict[str, Any]:
    """An Analysis, a Summary, a summary dict, a summary.json path, or a trace folder: analyzed,
    its database at `db_for(folder)` (else a temporary one)."""
    if isinstance(source, Analysis):
        return source.summary_dict
    if isinstance(source, Summary):
        return source.to_dict()
    if isinstance(source, Mapping):
        return dict(source)

    def analyze_source(path: Path) -> dict[str, Any]:
        with analyze(path, db=db_for(path) if db_for else None, progress=progress) as a:
            return a.summary_dict

    return summary_from_source(Path(source), analyze_source)


def diff(old: SummarySource, new: SummarySource) -> SummaryDiff:
    """What moved between two runs, per phase and rank (what `traceanalyze diff` prints)."""
    from traceanalyze.compare.diff import diff_summaries

    return diff_summaries(summary_dict_of(old), summary_dict_of(new))


def scaling(runs: Sequence[Analysis | PathLike], batch_size: float | None = None,
            global_batch_size: float | None = None, db_for: Callable[[Path], Path] | None = None,
            progress: ProgressChoice = False) -> ScalingReport:
    """The same job at several world sizes -> throughput, efficiency, where the time went.

    runs: Analysis objects or trace folders (a summary is not enough: scaling reads the trace
    database). A folder's database goes to `db_for(folder)`, else a temporary one."""
    from traceanalyze.compare.scaling import build_report, measure_run, measure_trace_dir

    say, done = progress_reporter(progress)
    stats = []
    try:
        for run in runs:
            if isinstance(run, Analysis):
                stats.append(measure_run(run.connection(), str(run.trace_dir)))
            elif isinstance(run, (Summary, Mapping)):
                raise TypeError("scaling needs Analysis objects or trace folders (it reads the database)")
            elif db_for is not None:
                stats.append(measure_trace_dir(Path(run), db_for(Path(run)), say))
            else:
                with interrupts_held():  # (made and its removal registered at once)
                    temporary = tempfile.TemporaryDirectory(prefix="traceanalyze-")
                with temporary as scratch:
                    stats.append(measure_trace_dir(Path(run), Path(scratch) / "trace.duckdb", say))
    finally:
        done()
    return build_report(stats, batch_size, global_batch_size)
