//! The PyO3 boundary: `TraceReader(path, ...)` is an Arrow C stream (`__arrow_c_stream__`,
//! scanned by DuckDB) of the file's events; `result()` then gives the metadata, counts and
//! notes. A panic is caught here and becomes an error message, never a Python crash.

use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Arc, Mutex};

use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::RecordBatch;
use arrow_schema::ArrowError;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict, PyList, PyTuple};

use crate::columns::{schema, Ty, COLUMNS, FIRST_ARG};
use crate::derived::{derive_tables, Params, PgConfig, DERIVED};
use crate::events::{ALIASES, ARG_KEYS, TYPED_ARGS};
use crate::kernels::{classes_of, KernelClass};
use crate::parquet_out::{write_raw_events, TablesOut};
use crate::parquet_props::{write_batches, Codec};
use crate::pftrace::open_events;
use crate::rank_tables::{tables_of_raw_parquet, CutShort, EventIssues};
use crate::trace::{BatchIter, EventSource, Limits, Outcome, TraceError};

struct Shared {
    parser: Option<Box<dyn EventSource>>,
    outcome: Option<Outcome>,
    error: Option<TraceError>,
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    let text = crate::panic_text(&*p);
    format!("internal error in the trace reader (a bug, please report it): {text}")
}

impl Shared {
    fn next(&mut self) -> Result<Option<RecordBatch>, ArrowError> {
        if let Some(e) = &self.error {
            return Err(ArrowError::ExternalError(e.message.clone().into()));
        }
        let Some(parser) = self.parser.as_mut() else {
            return Ok(None);
        };
        let got = catch_unwind(AssertUnwindSafe(|| parser.next_batch())).unwrap_or_else(|p| {
            Err(TraceError {
                message: panic_message(p),
                offset: None,
            })
        });
        match got {
            Ok(Some(b)) => Ok(Some(b)),
            Ok(None) => {
                self.outcome = self.parser.take().map(|p| p.into_outcome());
                Ok(None)
            }
            Err(e) => {
                self.parser = None;
                let message = e.message.clone();
                self.error = Some(e);
                Err(ArrowError::ExternalError(message.into()))
            }
        }
    }
}

/// A trace file's events as an Arrow C stream (read once, as it is consumed): Kineto / Chrome
/// JSON, or Perfetto protobuf with `protobuf=True`.
#[pyclass(module = "traceanalyze._native")]
struct TraceReader {
    shared: Arc<Mutex<Shared>>,
}

#[pymethods]
impl TraceReader {
    #[new]
    #[pyo3(signature = (path, threads = 0, block_bytes = 8 << 20, max_expansion = 400,
                        min_allowance_bytes = 512 << 20, max_metadata_value_bytes = 64 << 20,
                        max_item_bytes = 1 << 30, protobuf = false))]
    fn new(
        path: &str,
        threads: usize,
        block_bytes: usize,
        max_expansion: u64,
        min_allowance_bytes: u64,
        max_metadata_value_bytes: usize,
        max_item_bytes: usize,
        protobuf: bool,
    ) -> PyResult<Self> {
        let limits = limits_of(
            threads,
            block_bytes,
            max_expansion,
            min_allowance_bytes,
            max_metadata_value_bytes,
            max_item_bytes,
        );
        let opened = catch_unwind(|| open_events(Path::new(path), limits, protobuf))
            .unwrap_or_else(|p| {
                Err(TraceError {
                    message: panic_message(p),
                    offset: None,
                })
            });
        let parser = opened.map_err(|e| PyValueError::new_err(e.message))?;
        Ok(TraceReader {
            shared: Arc::new(Mutex::new(Shared {
                parser: Some(parser),
                outcome: None,
                error: None,
            })),
        })
    }

    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<PyObject>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        let shared = self.shared.clone();
        let iter = BatchIter {
            schema: schema(),
            next: move || {
                shared
                    .lock()
                    .map_err(|_| ArrowError::ExternalError("poisoned".into()))?
                    .next()
            },
        };
        let stream = FFI_ArrowArrayStream::new(Box::new(iter));
        PyCapsule::new(
            py,
            stream,
            Some(CString::new("arrow_array_stream").expect("no NUL")),
        )
    }

    /// Read the rest (if a consumer stopped early) and return what the file held besides its
    /// events; raises ValueError with the one-line problem if the file could not be read.
    fn result<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let mut shared = self
            .shared
            .lock()
            .map_err(|_| PyValueError::new_err("poisoned"))?;
        while shared.parser.is_some() {
            let _ = shared.next();
        }
        if let Some(e) = &shared.error {
            let err = PyValueError::new_err(e.message.clone());
            err.value(py).setattr("offset", e.offset)?;
            return Err(err);
        }
        let o = shared.outcome.clone().unwrap_or_default();
        outcome_dict(py, &o)
    }
}

/// What the file held besides its events, as the dict `TraceReader.result()` gives.
/// The reader's limits from the keyword arguments both entry points take (a block of at least 4 KiB).
fn limits_of(
    threads: usize,
    block_bytes: usize,
    max_expansion: u64,
    min_allowance_bytes: u64,
    max_metadata_value_bytes: usize,
    max_item_bytes: usize,
) -> Limits {
    Limits {
        block_bytes: block_bytes.max(1 << 12),
        max_expansion,
        min_allowance_bytes,
        max_metadata_value_bytes,
        threads,
        max_item_bytes,
        ..Limits::default()
    }
}

fn outcome_dict<'py>(py: Python<'py>, o: &Outcome) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item(
        "metadata",
        PyList::new(py, o.metadata.iter().map(|(k, v)| (k.clone(), v.clone())))?,
    )?;
    d.set_item("events", o.events)?;
    d.set_item("events_bytes", o.events_bytes)?;
    d.set_item("truncated_at_byte", o.truncated_at_byte)?;
    d.set_item("lost_bytes", o.lost_bytes)?;
    d.set_item("base_ns", o.base_ns)?;
    d.set_item("gzip", o.gzip)?;
    d.set_item(
        "notes",
        PyList::new(
            py,
            o.notes.iter().map(|(k, m, n)| (k.clone(), m.clone(), *n)),
        )?,
    )?;
    let t = &o.tally;
    let tally = PyDict::new(py);
    for (k, v) in [
        ("non_objects", t.non_objects),
        ("args_not_object", t.args_not_object),
        ("duplicate_keys", t.duplicate_keys),
        ("non_finite", t.non_finite),
        ("too_deep", t.too_deep),
        ("invalid_utf8", t.invalid_utf8),
        ("bad_step_numbers", t.bad_step_numbers),
    ] {
        tally.set_item(k, v)?;
    }
    let bad_args = PyDict::new(py);
    for (i, n) in t.bad_args.iter().enumerate() {
        if *n > 0 {
            bad_args.set_item(ARG_KEYS[i], *n)?;
        }
    }
    tally.set_item("bad_args", bad_args)?;
    d.set_item("tally", tally)?;
    Ok(d)
}

fn value_error(py: Python<'_>, e: &TraceError) -> PyErr {
    let err = PyValueError::new_err(e.message.clone());
    let _ = err.value(py).setattr("offset", e.offset);
    err
}

/// Read the trace `path` and write its events to the Parquet file `out` (replaced), with a
/// first column `rank`: the rows `TraceReader` gives, in file order. Returns the outcome
/// dict of `TraceReader.result()` plus `rows`, `row_groups`, `begin_end_rows`,
/// `parquet_bytes` and stage seconds (`parse_s`, `write_s`, `base_scan_s`, `tables_s`). With
/// `tables_dir`, the one-pass tables (threads, steps, cpu_ops, annotations, runtime) are
/// written there too, their steps cut short below `cut_short` = (numerator, denominator):
/// `tables` is then {table: rows}, empty when the rows hold B/E pairs (the map fixes those
/// first and calls `rank_tables_of_parquet`); rows past 64 MB per table wait in `scratch_dir`
/// (default `tables_dir`), removed when done. Raises ValueError (with `.offset`) for a file
/// that is not a readable trace; no file is left then.
#[pyfunction]
#[pyo3(signature = (path, out, rank, threads = 0, block_bytes = 8 << 20, max_expansion = 400,
                    min_allowance_bytes = 512 << 20, max_metadata_value_bytes = 64 << 20,
                    max_item_bytes = 1 << 30, compression = "zstd", tables_dir = None,
                    cut_short = (1, 10), scratch_dir = None, kernel_classes = None))]
#[allow(clippy::too_many_arguments)]
fn write_raw_events_parquet<'py>(
    py: Python<'py>,
    path: &str,
    out: &str,
    rank: i32,
    threads: usize,
    block_bytes: usize,
    max_expansion: u64,
    min_allowance_bytes: u64,
    max_metadata_value_bytes: usize,
    max_item_bytes: usize,
    compression: &str,
    tables_dir: Option<&str>,
    cut_short: (i64, i64),
    scratch_dir: Option<&str>,
    kernel_classes: Option<Vec<(i64, String, String, String)>>,
) -> PyResult<Bound<'py, PyDict>> {
    let cut = cut_of(cut_short)?;
    let classes = classes_of_arg(tables_dir.is_some(), kernel_classes)?;
    let scratch = scratch_dir
        .or(tables_dir)
        .map(|d| Path::new(d).to_path_buf());
    let codec = Codec::parse(compression)
        .ok_or_else(|| PyValueError::new_err(format!("unknown compression {compression:?}")))?;
    let limits = limits_of(
        threads,
        block_bytes,
        max_expansion,
        min_allowance_bytes,
        max_metadata_value_bytes,
        max_item_bytes,
    );
    let (input, output) = (Path::new(path).to_path_buf(), Path::new(out).to_path_buf());
    let dir = tables_dir.map(|d| Path::new(d).to_path_buf());
    let got = py.allow_threads(|| {
        catch_unwind(AssertUnwindSafe(|| {
            let tables = dir
                .as_deref()
                .zip(scratch.as_deref())
                .map(|(dir, scratch)| TablesOut {
                    dir,
                    scratch,
                    cut,
                    classes: &classes,
                });
            write_raw_events(&input, &output, rank, limits, codec, tables)
        }))
        .unwrap_or_else(|p| {
            let _ = std::fs::remove_file(&output);
            Err(TraceError {
                message: panic_message(p),
                offset: None,
            })
        })
    });
    let (outcome, stats) = got.map_err(|e| value_error(py, &e))?;
    let d = outcome_dict(py, &outcome)?;
    d.set_item("rows", stats.rows)?;
    d.set_item("row_groups", stats.row_groups)?;
    d.set_item("begin_end_rows", stats.begin_end_rows)?;
    d.set_item("parquet_bytes", stats.parquet_bytes)?;
    d.set_item("parse_s", stats.parse_s)?;
    d.set_item("write_s", stats.write_s)?;
    d.set_item("base_scan_s", stats.base_scan_s)?;
    d.set_item("tables_s", stats.tables_s)?;
    d.set_item("gather_s", stats.gather_s)?;
    d.set_item(
        "table_s",
        PyDict::from_sequence(&PyList::new(py, stats.table_s)?.into_any())?,
    )?;
    d.set_item(
        "tables",
        PyDict::from_sequence(&PyList::new(py, stats.tables)?.into_any())?,
    )?;
    d.set_item("issues", issues_dict(py, &stats.issues)?)?;
    Ok(d)
}

/// The events' issues the one-pass tables counted, for the map's load_issues.
fn issues_dict<'py>(py: Python<'py>, i: &EventIssues) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("bad_ts", i.bad_ts)?;
    d.set_item("bad_dur", i.bad_dur)?;
    d.set_item("no_ph", i.no_ph)?;
    let repeated: Vec<&str> = i
        .step_names
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(name, _)| name.as_str())
        .collect();
    d.set_item("repeated_steps", repeated)?;
    d.set_item("synthetic_steps", i.synthetic_steps)?;
    d.set_item("range_kernels", i.range_kernels)?;
    d.set_item("range_kernels_paired", i.range_kernels_paired)?;
    Ok(d)
}

/// The kernel classes (db/kernel_classes.csv's rows: priority, category expression, name
/// expression, kind), required with the tables: without them every kernel's kind would be NULL.
fn classes_of_arg(
    tables: bool,
    rows: Option<Vec<(i64, String, String, String)>>,
) -> PyResult<Vec<KernelClass>> {
    match rows {
        Some(rows) => classes_of(&rows).map_err(PyValueError::new_err),
        None if tables => Err(PyValueError::new_err(
            "the one-pass tables need kernel_classes (db/kernel_classes.csv's rows)",
        )),
        None => Ok(Vec::new()),
    }
}

fn cut_of((numerator, denominator): (i64, i64)) -> PyResult<CutShort> {
    if denominator <= 0 || numerator < 0 {
        return Err(PyValueError::new_err(format!(
            "cut_short {numerator}/{denominator} is not a ratio"
        )));
    }
    Ok(CutShort {
        numerator,
        denominator,
    })
}

/// The one-pass tables of a rank's raw_events.parquet `raw` (the map's rows after it fixed
/// them: B/E pairs, a late time base, a Perfetto trace) written into `tables_dir`; returns
/// ({table: rows}, the events' issues, {table: seconds}). Raises ValueError with a one-line message when a file
/// cannot be read or written.
#[pyfunction]
#[pyo3(signature = (raw, tables_dir, rank, cut_short = (1, 10), scratch_dir = None, kernel_classes = None))]
fn rank_tables_of_parquet<'py>(
    py: Python<'py>,
    raw: &str,
    tables_dir: &str,
    rank: i32,
    cut_short: (i64, i64),
    scratch_dir: Option<&str>,
    kernel_classes: Option<Vec<(i64, String, String, String)>>,
) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>, Bound<'py, PyDict>)> {
    let cut = cut_of(cut_short)?;
    let classes = classes_of_arg(true, kernel_classes)?;
    let (raw, dir) = (
        Path::new(raw).to_path_buf(),
        Path::new(tables_dir).to_path_buf(),
    );
    let scratch = Path::new(scratch_dir.unwrap_or(tables_dir)).to_path_buf();
    let got = py.allow_threads(|| {
        catch_unwind(AssertUnwindSafe(|| {
            let finished = tables_of_raw_parquet(&raw, &dir, &scratch, rank, cut, &classes);
            if let Ok(f) = &finished {
                crate::release_freed_memory(f.rows.iter().map(|(_, n)| *n as u64).sum());
            }
            finished
        }))
        .unwrap_or_else(|p| Err(panic_message(p)))
    });
    let finished = got.map_err(PyValueError::new_err)?;
    let rows = PyDict::from_sequence(&PyList::new(py, finished.rows)?.into_any())?;
    let seconds = PyDict::from_sequence(&PyList::new(py, finished.seconds)?.into_any())?;
    Ok((rows, issues_dict(py, &finished.issues)?, seconds))
}

/// Rows (tuples) of a small table written as the Parquet file `path`: `columns` are its
/// (name, type) pairs as db/schema.sql declares them (INTEGER, BIGINT, VARCHAR, BOOLEAN,
/// INTEGER[]). For the map's own rows of `ranks`, `pg_configs` and `load_issues`. Raises
/// ValueError when a value is not of its column's type or the file cannot be written.
#[pyfunction]
fn write_rows<'py>(
    py: Python<'py>,
    path: &str,
    columns: Vec<(String, String)>,
    rows: Vec<Bound<'py, PyTuple>>,
) -> PyResult<usize> {
    use arrow_array::builder::{
        BooleanBuilder, Int32Builder, Int64Builder, ListBuilder, StringBuilder,
    };
    use arrow_array::ArrayRef;
    use arrow_schema::{DataType, Field, Schema};
    let mut fields = Vec::with_capacity(columns.len());
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(columns.len());
    for (j, (name, ty)) in columns.iter().enumerate() {
        let value = |row: &Bound<'py, PyTuple>| row.get_item(j);
        let bad = |e: PyErr| PyValueError::new_err(format!("column {name} ({ty}) of {path}: {e}"));
        let array: ArrayRef = match ty.as_str() {
            "INTEGER" => {
                let mut b = Int32Builder::new();
                for r in &rows {
                    b.append_option(value(r)?.extract::<Option<i32>>().map_err(bad)?);
                }
                Arc::new(b.finish())
            }
            "BIGINT" => {
                let mut b = Int64Builder::new();
                for r in &rows {
                    b.append_option(value(r)?.extract::<Option<i64>>().map_err(bad)?);
                }
                Arc::new(b.finish())
            }
            "VARCHAR" => {
                let mut b = StringBuilder::new();
                for r in &rows {
                    b.append_option(value(r)?.extract::<Option<String>>().map_err(bad)?);
                }
                Arc::new(b.finish())
            }
            "BOOLEAN" => {
                let mut b = BooleanBuilder::new();
                for r in &rows {
                    b.append_option(value(r)?.extract::<Option<bool>>().map_err(bad)?);
                }
                Arc::new(b.finish())
            }
            "INTEGER[]" => {
                let mut b = ListBuilder::new(Int32Builder::new());
                for r in &rows {
                    match value(r)?.extract::<Option<Vec<i32>>>().map_err(bad)? {
                        Some(xs) => {
                            b.values().append_slice(&xs);
                            b.append(true);
                        }
                        None => b.append(false),
                    }
                }
                Arc::new(b.finish())
            }
            other => return Err(PyValueError::new_err(format!("no column type {other:?}"))),
        };
        let dt: DataType = array.data_type().clone();
        fields.push(Field::new(name, dt, true));
        arrays.push(array);
    }
    let schema = Arc::new(Schema::new(fields));
    let target = Path::new(path).to_path_buf();
    py.allow_threads(|| {
        let batch = RecordBatch::try_new(schema.clone(), arrays)
            .map_err(|e| format!("cannot write {} ({e})", target.display()))?;
        write_batches(&target, schema, std::iter::once(Ok(batch)), &[])
    })
    .map_err(PyValueError::new_err)
}

/// The derived tables (native/src/derived: collectives, phases, GPU activity, ...) of the rank
/// whose shard files are in `shard_dir`, written into `out_dir`; `pg_configs` is the rank's
/// (pg_name, pg_desc, ranks, pg_size, config_index) rows, `params` the named thresholds
/// (phase_merge_tolerance_ns, gap_data_wait_min_share_pct, gap_comm_wait_min_share_pct);
/// `threads` 1 builds them on this thread alone (0: two threads).
/// Returns ({table: rows}, {table: seconds}, with "inputs": reading the files back); raises
/// ValueError with a one-line message when a file cannot be read or written.
#[pyfunction]
#[pyo3(signature = (shard_dir, out_dir, rank, pg_configs, params, threads = 0))]
fn derive_rank_tables<'py>(
    py: Python<'py>,
    shard_dir: &str,
    out_dir: &str,
    rank: i32,
    pg_configs: Vec<(String, Option<String>, Vec<i32>, i64, i64)>,
    params: (i64, f64, f64),
    threads: usize,
) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
    let configs = pg_configs
        .into_iter()
        .map(|(name, desc, ranks, size, index)| PgConfig {
            name,
            desc,
            ranks,
            size,
            index,
        })
        .collect();
    let params = Params {
        phase_merge_tolerance_ns: params.0,
        gap_data_wait_min_share_pct: params.1,
        gap_comm_wait_min_share_pct: params.2,
    };
    let (dir, out) = (
        Path::new(shard_dir).to_path_buf(),
        Path::new(out_dir).to_path_buf(),
    );
    let got = py.allow_threads(|| {
        catch_unwind(AssertUnwindSafe(|| {
            let built = derive_tables(&dir, &out, rank, configs, params, threads != 1);
            if let Ok(built) = &built {
                // (the inputs, dropped: "inputs" counts their rows)
                let inputs = built.iter().find(|b| b.0 == "inputs").map_or(0, |b| b.1);
                crate::release_freed_memory(inputs as u64);
            }
            built
        }))
        .unwrap_or_else(|p| Err(panic_message(p)))
    });
    let built = got.map_err(PyValueError::new_err)?;
    let (rows, seconds) = (PyDict::new(py), PyDict::new(py));
    for (table, n, s) in built {
        if table != "inputs" {
            rows.set_item(table, n)?;
        }
        seconds.set_item(table, s)?;
    }
    Ok((rows, seconds))
}

/// The critical path's walk: its inputs (the Parquet file traceanalyze/analysis/critical_path.py
/// writes) at `input`, its segments written to `output`; returns their count. Raises ValueError
/// with a one-line message when a file cannot be read or written.
#[pyfunction]
fn walk_critical_path(py: Python<'_>, input: &str, output: &str) -> PyResult<usize> {
    let (input, output) = (
        Path::new(input).to_path_buf(),
        Path::new(output).to_path_buf(),
    );
    py.allow_threads(|| {
        catch_unwind(AssertUnwindSafe(|| {
            crate::critical_walk::walk_file(&input, &output)
        }))
        .unwrap_or_else(|p| Err(panic_message(p)))
    })
    .map_err(PyValueError::new_err)
}

/// The readings the derived tables share, for the tests that hold them against the SQL
/// macros of the same names (collective_op, dtype_bytes, is_data_range) and the JSON: `what` is
/// one of those or flop_family, dtype_class; `text` the name.
#[pyfunction]
#[pyo3(signature = (what, text, is_annotation = false))]
fn reading(what: &str, text: Option<&str>, is_annotation: bool) -> PyResult<Option<PyObjectish>> {
    use crate::derived::sqlfn;
    Ok(match what {
        "collective_op" => sqlfn::collective_op(text).map(PyObjectish::Text),
        "dtype_bytes" => sqlfn::dtype_bytes(text).map(PyObjectish::Int),
        "is_data_range" => text.map(|t| PyObjectish::Bool(sqlfn::is_data_range(t, is_annotation))),
        "flop_family" => text
            .and_then(crate::derived::flop_family)
            .map(|f| PyObjectish::Text(f.into())),
        "dtype_class" => crate::derived::dtype_class(text).map(|f| PyObjectish::Text(f.into())),
        other => return Err(PyValueError::new_err(format!("no reading {other:?}"))),
    })
}

#[derive(IntoPyObject)]
enum PyObjectish {
    Text(String),
    Int(i64),
    Bool(bool),
}

/// The derived tables this version builds, in order.
#[pyfunction]
fn derived_tables() -> Vec<&'static str> {
    DERIVED.to_vec()
}

/// The other end of a send / recv as a rank of its process group (cpu_ops.peer_group_rank),
/// from an event's name and other args: the reading the SQL macro p2p_peer_arg must agree with.
#[pyfunction]
#[pyo3(signature = (name, other_args))]
fn p2p_peer_arg(name: Option<&str>, other_args: Option<&str>) -> Option<i32> {
    crate::rank_tables::p2p_peer_arg(name, other_args)
}

/// The metadata value `raw` (JSON text) if it decodes within serde_json's depth limit (128),
/// else None: deep values are skipped with a note instead of costing the file.
#[pyfunction]
fn checked_metadata(raw: &str) -> Option<String> {
    serde_json::from_str::<serde_json::Value>(raw)
        .ok()
        .map(|_| raw.to_string())
}

/// The args keys read into typed columns, as (key, column, SQL type), in column order: the
/// one list other readers (the Perfetto one) follow.
#[pyfunction]
fn arg_fields() -> Vec<(&'static str, &'static str, &'static str)> {
    (0..TYPED_ARGS)
        .map(|i| {
            let (column, ty) = COLUMNS[FIRST_ARG + i];
            let sql = match ty {
                Ty::Str => "VARCHAR",
                Ty::I64 => "BIGINT",
                Ty::I32 => "INTEGER",
            };
            (ARG_KEYS[i], column, sql)
        })
        .collect()
}

/// The other spellings read for a typed key when it is absent or NULL: {key: [spelling]}.
#[pyfunction]
fn arg_aliases() -> Vec<(&'static str, Vec<&'static str>)> {
    (0..TYPED_ARGS)
        .filter_map(|i| {
            let spellings: Vec<&str> = ALIASES
                .iter()
                .filter(|(_, of)| *of == i)
                .map(|(a, _)| ARG_KEYS[*a])
                .collect();
            (!spellings.is_empty()).then(|| (ARG_KEYS[i], spellings))
        })
        .collect()
}

/// The trace metadata ((key, JSON text)) in the first packets of a Perfetto protobuf file's
/// first bytes (decompressed), or None.
#[pyfunction]
fn pftrace_head_metadata(head: &[u8]) -> Option<Vec<(String, String)>> {
    catch_unwind(|| crate::pftrace::head_metadata(head)).unwrap_or(None)
}

/// Column names of the batches, in order.
#[pyfunction]
fn columns() -> Vec<&'static str> {
    let _ = FIRST_ARG;
    COLUMNS.iter().map(|(n, _)| *n).collect()
}

/// Fix glibc malloc's thresholds for this process (lib.rs tune_allocator), unless the user set
/// their own; once, whatever the calls.
#[pyfunction]
fn tune_allocator() {
    crate::tune_allocator();
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<TraceReader>()?;
    m.add_function(wrap_pyfunction!(checked_metadata, m)?)?;
    m.add_function(wrap_pyfunction!(write_raw_events_parquet, m)?)?;
    m.add_function(wrap_pyfunction!(rank_tables_of_parquet, m)?)?;
    m.add_function(wrap_pyfunction!(derive_rank_tables, m)?)?;
    m.add_function(wrap_pyfunction!(derived_tables, m)?)?;
    m.add_function(wrap_pyfunction!(walk_critical_path, m)?)?;
    m.add_function(wrap_pyfunction!(tune_allocator, m)?)?;
    m.add_function(wrap_pyfunction!(reading, m)?)?;
    m.add_function(wrap_pyfunction!(write_rows, m)?)?;
    m.add_function(wrap_pyfunction!(p2p_peer_arg, m)?)?;
    m.add_function(wrap_pyfunction!(columns, m)?)?;
    m.add_function(wrap_pyfunction!(arg_fields, m)?)?;
    m.add_function(wrap_pyfunction!(arg_aliases, m)?)?;
    m.add_function(wrap_pyfunction!(pftrace_head_metadata, m)?)?;
    Ok(())
}
