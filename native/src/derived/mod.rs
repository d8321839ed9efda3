//! Stage 5b (the map's shard, after `rank_tables`): the per-rank tables that join the one-pass
//! tables (collectives, phases, GPU activity, code regions, FLOPs, ...), built from the files
//! the reader wrote into the shard folder and written beside them. What needs no other rank
//! is built here; the reduce's SQL joins the ranks.
//!
//! Each module states its table's rules; db/schema.sql documents the columns.

mod collectives;
mod flops;
mod gpu;
pub(crate) mod input;
pub(crate) mod out;
mod phases;
mod regions;
pub mod sqlfn;
mod tables;

use std::path::Path;
use std::time::Instant;

use std::collections::HashMap;

use arrow_array::{Array, BooleanArray, Int32Array, Int64Array, RecordBatch};
use arrow_schema::ArrowError;

pub use flops::{dtype_class, flop_family};
pub use input::Steps;
use input::{at, flag_at, text_at, BatchTexts, Few, FewValues, Kind, Pick, Shared, Table};

/// The tables this stage writes, in order.
pub const DERIVED: &[&str] = &[
    "memcpy",
    "collectives",
    "step_comm",
    "main_threads",
    "memory",
    "all_to_all_calls",
    "step_batches",
    "phase_intervals",
    "step_phases",
    "gpu_busy_intervals",
    "gpu_idle_gaps",
    "step_gpu",
    "step_regions",
    "op_flops",
    "top_host_ops",
];

/// One of the rank's process groups (its distributedInfo.pg_config, as `pg_configs` holds it).
#[derive(Clone, Debug)]
pub struct PgConfig {
    pub name: String,
    pub desc: Option<String>,
    pub ranks: Vec<i32>,
    pub size: i64,
    pub index: i64,
}

/// The named thresholds the tables use (db/tables/00_parameters.sql).
#[derive(Clone, Copy, Debug)]
pub struct Params {
    pub phase_merge_tolerance_ns: i64,
    pub gap_data_wait_min_share_pct: f64,
    pub gap_comm_wait_min_share_pct: f64,
}

pub struct CpuOps {
    pub step: Int64Array,
    pub name: Shared,
    pub pid: Shared,
    pub tid: Shared,
    pub ts_ns: Int64Array,
    pub end_ns: Int64Array,
    pub dur_ns: Int64Array,
    pub self_ns: Int64Array,
    pub external_id: Int64Array,
    /// (kept for the ops with a FLOP formula and those step_batches reads: embedding lookups,
    /// copies, ops in a DDP forward)
    pub input_dims: Few,
    pub input_type: Few,
    pub collective_name: Few,
    pub in_msg_nelems: FewValues<i64>,
    pub dtype: Few,
    pub pg_name: Few,
    pub pg_desc: Few,
    pub pg_ranks: Few,
    pub collective_seq: FewValues<i64>,
    pub peer_group_rank: FewValues<i32>,
}

pub struct Annotations {
    pub step: Int64Array,
    pub name: Shared,
    pub on_gpu: BooleanArray,
    pub tid: Shared,
    pub ts_ns: Int64Array,
    pub end_ns: Int64Array,
    pub dur_ns: Int64Array,
    pub self_ns: Int64Array,
    pub input_dims: Few,
    pub input_type: Few,
}

pub struct Runtime {
    pub step: Int64Array,
    pub name: Shared,
    pub tid: Shared,
    pub ts_ns: Int64Array,
    pub end_ns: Int64Array,
    pub correlation: Int64Array,
    pub is_sync: BooleanArray,
}

pub struct Kernels {
    pub step: Int64Array,
    pub kind: Shared,
    pub name: Shared,
    pub device: Int32Array,
    pub stream: Int64Array,
    pub ts_ns: Int64Array,
    pub dur_ns: Int64Array,
    pub end_ns: Int64Array,
    pub correlation: Int64Array,
    pub external_id: Int64Array,
    pub launch_ts_ns: Int64Array,
    pub copy_bytes: FewValues<i64>,
    pub collective_name: Few,
    pub in_msg_nelems: FewValues<i64>,
    pub dtype: Few,
    pub pg_name: Few,
    pub pg_desc: Few,
    pub pg_ranks: Few,
    pub collective_seq: FewValues<i64>,
    pub peer_group_rank: FewValues<i32>,
    pub counters: Few,
}

/// The raw events no one-pass table holds: allocator events ('[memory]'), step marks
/// (ProfilerStep#N) and the host ops whose other args a FLOP formula or a split size reads
/// (convolutions, all-to-all calls, record_param_comms), in file order.
pub struct RawEvents {
    pub ph: Shared,
    pub cat: Shared,
    pub name: Shared,
    pub pid: Shared,
    pub tid: Shared,
    pub ts_ns: Int64Array,
    pub dur_ns: Int64Array,
    pub external_id: Int64Array,
    pub input_dims: Few,
    pub input_type: Few,
    pub other_args: Few,
    pub collective_name: Few,
    pub in_msg_nelems: FewValues<i64>,
    pub out_msg_nelems: FewValues<i64>,
    pub dtype: Few,
    pub addr: Few,
    pub device_type: FewValues<i32>,
    pub device_id: FewValues<i32>,
    pub bytes: FewValues<i64>,
    pub total_allocated_bytes: FewValues<i64>,
    pub total_reserved_bytes: FewValues<i64>,
}

/// Everything a rank's derived tables are built from.
pub struct Inputs {
    pub rank: i32,
    pub steps: Steps,
    pub cpu_ops: CpuOps,
    pub annotations: Annotations,
    pub runtime: Runtime,
    pub kernels: Kernels,
    pub raw: RawEvents,
    pub configs: Vec<PgConfig>,
    pub params: Params,
}

/// An event of the host: (step, name, ts, end, on the loop thread, an op, its row: a cpu op's
/// index, or an annotation's after every cpu op, for `Inputs::host_name`).
pub struct HostEvent<'a> {
    pub step: i64,
    pub name: Option<&'a str>,
    pub ts: i64,
    pub end: i64,
    pub on_main: bool,
    pub is_op: bool,
    pub row: u32,
}

impl Inputs {
    /// The host's events with a step and both times: the cpu ops, then the host-side
    /// annotations; `on_main` when the thread is `main`. Made afresh for each pass over them,
    /// never held: a CPU trace's 900k ops as a list were 44 MB, the derived stage's peak.
    pub fn host_events<'a>(
        &'a self,
        main: Option<&'a str>,
    ) -> impl Iterator<Item = HostEvent<'a>> + 'a {
        let (c, a) = (&self.cpu_ops, &self.annotations);
        let ops = (0..c.name.len()).filter_map(move |i| {
            let (Some(step), Some(ts), Some(end)) =
                (at(&c.step, i), at(&c.ts_ns, i), at(&c.end_ns, i))
            else {
                return None;
            };
            let tid = text_at(&c.tid, i);
            Some(HostEvent {
                step,
                name: text_at(&c.name, i),
                ts,
                end,
                on_main: tid.is_some() && tid == main,
                is_op: true,
                row: i as u32,
            })
        });
        let annotations = (0..a.name.len()).filter_map(move |i| {
            if flag_at(&a.on_gpu, i) != Some(false) {
                return None;
            }
            let (Some(step), Some(ts), Some(end)) =
                (at(&a.step, i), at(&a.ts_ns, i), at(&a.end_ns, i))
            else {
                return None;
            };
            let tid = text_at(&a.tid, i);
            Some(HostEvent {
                step,
                name: text_at(&a.name, i),
                ts,
                end,
                on_main: tid.is_some() && tid == main,
                is_op: false,
                row: (c.name.len() + i) as u32,
            })
        });
        ops.chain(annotations)
    }

    /// The name of a host event's `row` (HostEvent::row).
    pub fn host_name(&self, row: u32) -> Option<&str> {
        let (row, ops) = (row as usize, self.cpu_ops.name.len());
        if row < ops {
            text_at(&self.cpu_ops.name, row)
        } else {
            text_at(&self.annotations.name, row - ops)
        }
    }
}

/// Is this raw event one `RawEvents` keeps (by its name)?
fn kept_raw_name(name: &str) -> bool {
    name == "[memory]" || crate::columns::is_step_mark(name) || reads_args(name)
}

/// Does a raw event's formula or split size read its other args (Concrete Inputs, split sizes)?
fn reads_args(name: &str) -> bool {
    name == "record_param_comms"
        || tables::ALL_TO_ALL_CALLS.contains(&name)
        || matches!(tables::flop_family(name), Some("conv" | "conv_backward"))
}

/// Rows of a batch picked by its `name` column.
fn by_name(batch: &RecordBatch, pick: impl Fn(&str) -> bool) -> Result<Vec<bool>, ArrowError> {
    Ok(BatchTexts::of(batch, "name")?.picked(batch.num_rows(), pick))
}

/// The DDP forward passes of the loop threads, by thread: (start, end), sorted.
fn forward_ranges(a: &Annotations) -> HashMap<String, Vec<(i64, i64)>> {
    let mut out: HashMap<String, Vec<(i64, i64)>> = HashMap::new();
    for i in 0..a.name.len() {
        if text_at(&a.name, i) != Some("DistributedDataParallel.forward")
            || flag_at(&a.on_gpu, i) != Some(false)
            || !a.step.is_valid(i)
        {
            continue;
        }
        if let (Some(tid), Some(ts), Some(end)) =
            (text_at(&a.tid, i), at(&a.ts_ns, i), at(&a.end_ns, i))
        {
            out.entry(tid.to_owned()).or_default().push((ts, end));
        }
    }
    for spans in out.values_mut() {
        spans.sort_unstable();
    }
    out
}

impl Inputs {
    /// The inputs of the rank whose shard files are in `dir`.
    /// `parallel`: the files of the host's ops (annotations, cpu_ops) read beside the others.
    pub fn read(
        dir: &Path,
        rank: i32,
        configs: Vec<PgConfig>,
        params: Params,
        parallel: bool,
    ) -> Result<Inputs, String> {
        let (host, rest) = if parallel {
            std::thread::scope(|scope| {
                let rest = scope.spawn(|| read_devices_and_raw(dir));
                let host = read_host_ops(dir);
                let rest = rest.join().unwrap_or_else(|p| {
                    let text = crate::panic_text(&*p);
                    Err(format!("reading {} panicked ({text})", dir.display()))
                });
                (host, rest)
            })
        } else {
            (read_host_ops(dir), read_devices_and_raw(dir))
        };
        let ((annotations, cpu_ops), (runtime, kernels, raw)) = (host?, rest?);
        Ok(Inputs {
            rank,
            steps: Steps::read(dir)?,
            cpu_ops,
            annotations,
            runtime,
            kernels,
            raw,
            configs,
            params,
        })
    }
}

/// The annotations and the CPU ops of the shard folder `dir` (the ops inside a DDP forward
/// pass keep their shapes).
fn read_host_ops(dir: &Path) -> Result<(Annotations, CpuOps), String> {
    use Kind::*;
    let file = |t: &str| dir.join(format!("{t}.parquet"));
    let mut a = Table::read(
        &file("annotations"),
        &[
            ("step", I64),
            ("name", Shared),
            ("on_gpu", Flag),
            ("tid", Shared),
            ("ts_ns", I64),
            ("end_ns", I64),
            ("dur_ns", I64),
            ("self_ns", I64),
            ("input_dims", Few),
            ("input_type", Few),
        ],
        None,
        None,
    )?;
    let annotations = Annotations {
        step: a.i64("step")?,
        name: a.shared("name")?,
        on_gpu: a.flag("on_gpu")?,
        tid: a.shared("tid")?,
        ts_ns: a.i64("ts_ns")?,
        end_ns: a.i64("end_ns")?,
        dur_ns: a.i64("dur_ns")?,
        self_ns: a.i64("self_ns")?,
        input_dims: a.few("input_dims")?,
        input_type: a.few("input_type")?,
    };
    // (the ops the FLOP formulas and step_batches read keep their shapes)
    let forwards = forward_ranges(&annotations);
    let pick: Pick = Box::new(move |b: &RecordBatch| {
        let (Ok(names), Ok(tids)) = (BatchTexts::of(b, "name"), BatchTexts::of(b, "tid")) else {
            return vec![true; b.num_rows()];
        };
        let mut picked = names.picked(b.num_rows(), |n| {
            matches!(n, "aten::embedding" | "aten::copy_") || tables::flop_family(n).is_some()
        });
        if !forwards.is_empty() {
            let ts = crate::columns::by_name::<Int64Array>(b, "ts_ns").ok();
            for (i, p) in picked.iter_mut().enumerate() {
                *p = *p
                    || tids
                        .get(i)
                        .and_then(|t| forwards.get(t))
                        .is_some_and(|spans| {
                            let Some(t) = ts.and_then(|ts| at(ts, i)) else {
                                return false;
                            };
                            let k = spans.partition_point(|s| s.0 <= t);
                            spans[..k].iter().any(|s| t < s.1)
                        });
            }
        }
        picked
    });
    let mut c = Table::read(
        &file("cpu_ops"),
        &[
            ("step", I64),
            ("name", Shared),
            ("pid", Shared),
            ("tid", Shared),
            ("ts_ns", I64),
            ("end_ns", I64),
            ("dur_ns", I64),
            ("self_ns", I64),
            ("external_id", I64),
            ("input_dims", FewPicked),
            ("input_type", FewPicked),
            ("collective_name", Few),
            ("in_msg_nelems", FewI64),
            ("dtype", Few),
            ("pg_name", Few),
            ("pg_desc", Few),
            ("pg_ranks", Few),
            ("collective_seq", FewI64),
            ("peer_group_rank", FewI32),
        ],
        None,
        Some(pick),
    )?;
    let cpu_ops = CpuOps {
        step: c.i64("step")?,
        name: c.shared("name")?,
        pid: c.shared("pid")?,
        tid: c.shared("tid")?,
        ts_ns: c.i64("ts_ns")?,
        end_ns: c.i64("end_ns")?,
        dur_ns: c.i64("dur_ns")?,
        self_ns: c.i64("self_ns")?,
        external_id: c.i64("external_id")?,
        input_dims: c.few("input_dims")?,
        input_type: c.few("input_type")?,
        collective_name: c.few("collective_name")?,
        in_msg_nelems: c.few_i64("in_msg_nelems")?,
        dtype: c.few("dtype")?,
        pg_name: c.few("pg_name")?,
        pg_desc: c.few("pg_desc")?,
        pg_ranks: c.few("pg_ranks")?,
        collective_seq: c.few_i64("collective_seq")?,
        peer_group_rank: c.few_i32("peer_group_rank")?,
    };
    Ok((annotations, cpu_ops))
}

/// The runtime calls, the kernels and the raw events only they hold (allocator events, step
/// marks, the args the formulas read) of the shard folder `dir`.
fn read_devices_and_raw(dir: &Path) -> Result<(Runtime, Kernels, RawEvents), String> {
    use Kind::*;
    let file = |t: &str| dir.join(format!("{t}.parquet"));
    let mut r = Table::read(
        &file("runtime"),
        &[
            ("step", I64),
            ("name", Shared),
            ("tid", Shared),
            ("ts_ns", I64),
            ("end_ns", I64),
            ("correlation", I64),
            ("is_sync", Flag),
        ],
        None,
        None,
    )?;
    let runtime = Runtime {
        step: r.i64("step")?,
        name: r.shared("name")?,
        tid: r.shared("tid")?,
        ts_ns: r.i64("ts_ns")?,
        end_ns: r.i64("end_ns")?,
        correlation: r.i64("correlation")?,
        is_sync: r.flag("is_sync")?,
    };
    let mut k = Table::read(
        &file("kernels"),
        &[
            ("step", I64),
            ("kind", Shared),
            ("name", Shared),
            ("device", I32),
            ("stream", I64),
            ("ts_ns", I64),
            ("dur_ns", I64),
            ("end_ns", I64),
            ("correlation", I64),
            ("external_id", I64),
            ("launch_ts_ns", I64),
            ("copy_bytes", FewI64),
            ("collective_name", Few),
            ("in_msg_nelems", FewI64),
            ("dtype", Few),
            ("pg_name", Few),
            ("pg_desc", Few),
            ("pg_ranks", Few),
            ("collective_seq", FewI64),
            ("peer_group_rank", FewI32),
            ("counters", Few),
        ],
        None,
        None,
    )?;
    let kernels = Kernels {
        step: k.i64("step")?,
        kind: k.shared("kind")?,
        name: k.shared("name")?,
        device: k.i32("device")?,
        stream: k.i64("stream")?,
        ts_ns: k.i64("ts_ns")?,
        dur_ns: k.i64("dur_ns")?,
        end_ns: k.i64("end_ns")?,
        correlation: k.i64("correlation")?,
        external_id: k.i64("external_id")?,
        launch_ts_ns: k.i64("launch_ts_ns")?,
        copy_bytes: k.few_i64("copy_bytes")?,
        collective_name: k.few("collective_name")?,
        in_msg_nelems: k.few_i64("in_msg_nelems")?,
        dtype: k.few("dtype")?,
        pg_name: k.few("pg_name")?,
        pg_desc: k.few("pg_desc")?,
        pg_ranks: k.few("pg_ranks")?,
        collective_seq: k.few_i64("collective_seq")?,
        peer_group_rank: k.few_i32("peer_group_rank")?,
        counters: k.few("counters")?,
    };
    let keep: input::Keep = Box::new(|b| Ok(BooleanArray::from(by_name(b, kept_raw_name)?)));
    let args: Pick = Box::new(|b: &RecordBatch| {
        by_name(b, reads_args).unwrap_or_else(|_| vec![true; b.num_rows()])
    });
    let mut e = Table::read(
        &file("raw_events"),
        &[
            ("ph", Shared),
            ("cat", Shared),
            ("name", Shared),
            ("pid", Shared),
            ("tid", Shared),
            ("ts_ns", I64),
            ("dur_ns", I64),
            ("external_id", I64),
            ("input_dims", Few),
            ("input_type", Few),
            ("other_args", FewPicked),
            ("collective_name", Few),
            ("in_msg_nelems", FewI64),
            ("out_msg_nelems", FewI64),
            ("dtype", Few),
            ("addr", Few),
            ("device_type", FewI32),
            ("device_id", FewI32),
            ("bytes", FewI64),
            ("total_allocated_bytes", FewI64),
            ("total_reserved_bytes", FewI64),
        ],
        Some((&["name"], keep)),
        Some(args),
    )?;
    let raw = RawEvents {
        ph: e.shared("ph")?,
        cat: e.shared("cat")?,
        name: e.shared("name")?,
        pid: e.shared("pid")?,
        tid: e.shared("tid")?,
        ts_ns: e.i64("ts_ns")?,
        dur_ns: e.i64("dur_ns")?,
        external_id: e.i64("external_id")?,
        input_dims: e.few("input_dims")?,
        input_type: e.few("input_type")?,
        other_args: e.few("other_args")?,
        collective_name: e.few("collective_name")?,
        in_msg_nelems: e.few_i64("in_msg_nelems")?,
        out_msg_nelems: e.few_i64("out_msg_nelems")?,
        dtype: e.few("dtype")?,
        addr: e.few("addr")?,
        device_type: e.few_i32("device_type")?,
        device_id: e.few_i32("device_id")?,
        bytes: e.few_i64("bytes")?,
        total_allocated_bytes: e.few_i64("total_allocated_bytes")?,
        total_reserved_bytes: e.few_i64("total_reserved_bytes")?,
    };
    Ok((runtime, kernels, raw))
}

/// What building one table cost: (table, rows, seconds of this thread).
pub type Built = (&'static str, usize, f64);

/// Each table's build and write, timed one after the other on one thread.
struct Laps<'a> {
    out: &'a Path,
    clock: Instant,
    built: Vec<Built>,
}

impl Laps<'_> {
    fn lap(&mut self, table: &'static str, rows: usize) {
        self.built
            .push((table, rows, self.clock.elapsed().as_secs_f64()));
        self.clock = Instant::now();
    }

    fn write(&mut self, columns: out::Columns, table: &'static str) -> Result<(), String> {
        let (_, rows) = columns.write(self.out, table)?;
        self.lap(table, rows);
        Ok(())
    }
}

/// Build and write every derived table of the rank whose shard files are in `dir` into `out`
/// (the same folder in a map); returns each table's rows and seconds ("inputs": reading the
/// one-pass tables back, its rows those read). With `parallel`, the tables that need no
/// collective's row (FLOPs, memory, ...) are built on a second thread beside the others; the
/// files are the same.
pub fn derive_tables(
    dir: &Path,
    out: &Path,
    rank: i32,
    configs: Vec<PgConfig>,
    params: Params,
    parallel: bool,
) -> Result<Vec<Built>, String> {
    let mut laps = Laps {
        out,
        clock: Instant::now(),
        built: Vec::new(),
    };
    let x = Inputs::read(dir, rank, configs, params, parallel)?;
    // ("inputs": the host ops', annotations', runtime calls' and kernels' rows read back)
    let input_rows = x.cpu_ops.name.len()
        + x.annotations.name.len()
        + x.runtime.name.len()
        + x.kernels.name.len();
    laps.lap("inputs", input_rows);
    let apart = |laps: &mut Laps| -> Result<(), String> {
        laps.write(tables::memcpy(&x), "memcpy")?;
        laps.write(tables::memory(&x), "memory")?;
        laps.write(tables::all_to_all_calls(&x), "all_to_all_calls")?;
        laps.write(tables::step_batches(&x), "step_batches")?;
        laps.write(flops::op_flops(&x), "op_flops")
    };
    let joined = |laps: &mut Laps| -> Result<(), String> {
        let collectives = collectives::collectives(&x);
        laps.write(collectives::table(rank, &collectives), "collectives")?;
        laps.write(
            collectives::step_comm(rank, &x.steps, &collectives),
            "step_comm",
        )?;
        let main = tables::main_thread(&x);
        laps.write(tables::main_threads(rank, main.as_deref()), "main_threads")?;
        laps.write(tables::top_host_ops(&x, main.as_deref()), "top_host_ops")?;
        let phases = phases::intervals(&x, main.as_deref(), &collectives);
        laps.write(phases::intervals_table(&x, &phases), "phase_intervals")?;
        laps.write(phases::step_phases(&x, &phases), "step_phases")?;
        let busy = gpu::busy_intervals(&x);
        laps.write(gpu::busy_table(rank, &busy), "gpu_busy_intervals")?;
        laps.write(
            gpu::idle_gaps(&x, &busy, &phases, &collectives),
            "gpu_idle_gaps",
        )?;
        laps.write(gpu::step_gpu(&x, &busy), "step_gpu")?;
        laps.write(
            regions::step_regions(&x, main.as_deref(), &collectives, &busy),
            "step_regions",
        )
    };
    if !parallel {
        apart(&mut laps)?;
        joined(&mut laps)?;
        return Ok(laps.built);
    }
    let mut second = Laps {
        out,
        clock: Instant::now(),
        built: Vec::new(),
    };
    let (first, other) = std::thread::scope(|scope| {
        let handle = scope.spawn(|| apart(&mut second));
        let first = joined(&mut laps);
        let other = handle.join().unwrap_or_else(|p| {
            let text = crate::panic_text(&*p);
            Err(format!("a derived table's builder panicked ({text})"))
        });
        (first, other)
    });
    first?;
    other?;
    laps.built.extend(second.built);
    Ok(laps.built)
}
