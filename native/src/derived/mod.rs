//! Stage 5b (the map's shard, after `rank_tables`): the per-rank tables that join the one-pass
//! tables (collectives, phases, GPU activity, code regions, FLOPs, ...), built from the files
//! the reader wrote into the shard folder and written beside them. What needs no other rank
//! is built here; the reduce's SQL joins the ranks.
//!
//! Each module states its table's rules; db/schema.sql documents the columns.

mod collectives;
mod flops;
mod gpu;
mod input;
mod out;
mod phases;
mod regions;
pub mod sqlfn;
mod tables;

use std::path::Path;
use std::time::Instant;

use arrow_array::{Array, BooleanArray, Int32Array, Int64Array, StringArray};

pub use flops::{dtype_class, flop_family};
use input::Frame;
pub use input::Steps;

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
    pub name: StringArray,
    pub tid: StringArray,
    pub ts_ns: Int64Array,
    pub end_ns: Int64Array,
    pub dur_ns: Int64Array,
    pub self_ns: Int64Array,
    pub external_id: Int64Array,
    pub input_dims: StringArray,
    pub input_type: StringArray,
    pub collective_name: StringArray,
    pub in_msg_nelems: Int64Array,
    pub dtype: StringArray,
    pub pg_name: StringArray,
    pub pg_desc: StringArray,
    pub pg_ranks: StringArray,
    pub collective_seq: Int64Array,
    pub peer_group_rank: Int32Array,
}

pub struct Annotations {
    pub step: Int64Array,
    pub name: StringArray,
    pub on_gpu: BooleanArray,
    pub tid: StringArray,
    pub ts_ns: Int64Array,
    pub end_ns: Int64Array,
    pub dur_ns: Int64Array,
    pub self_ns: Int64Array,
    pub input_dims: StringArray,
    pub input_type: StringArray,
}

pub struct Runtime {
    pub step: Int64Array,
    pub name: StringArray,
    pub tid: StringArray,
    pub ts_ns: Int64Array,
    pub end_ns: Int64Array,
    pub correlation: Int64Array,
    pub is_sync: BooleanArray,
}

pub struct Kernels {
    pub step: Int64Array,
    pub kind: StringArray,
    pub name: StringArray,
    pub device: Int32Array,
    pub stream: Int64Array,
    pub ts_ns: Int64Array,
    pub dur_ns: Int64Array,
    pub end_ns: Int64Array,
    pub correlation: Int64Array,
    pub external_id: Int64Array,
    pub launch_ts_ns: Int64Array,
    pub copy_bytes: Int64Array,
    pub collective_name: StringArray,
    pub in_msg_nelems: Int64Array,
    pub dtype: StringArray,
    pub pg_name: StringArray,
    pub pg_desc: StringArray,
    pub pg_ranks: StringArray,
    pub collective_seq: Int64Array,
    pub peer_group_rank: Int32Array,
    pub counters: StringArray,
}

/// The raw events no one-pass table holds: allocator events ('[memory]'), step marks
/// (ProfilerStep#N) and the host ops whose args the FLOP formulas and the all-to-all calls
/// read, in file order.
pub struct RawEvents {
    pub ph: StringArray,
    pub cat: StringArray,
    pub name: StringArray,
    pub pid: StringArray,
    pub tid: StringArray,
    pub ts_ns: Int64Array,
    pub dur_ns: Int64Array,
    pub external_id: Int64Array,
    pub input_dims: StringArray,
    pub input_type: StringArray,
    pub other_args: StringArray,
    pub collective_name: StringArray,
    pub in_msg_nelems: Int64Array,
    pub out_msg_nelems: Int64Array,
    pub dtype: StringArray,
    pub addr: StringArray,
    pub device_type: Int32Array,
    pub device_id: Int32Array,
    pub bytes: Int64Array,
    pub total_allocated_bytes: Int64Array,
    pub total_reserved_bytes: Int64Array,
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

/// Is this raw event one `RawEvents` keeps (by its name)?
fn kept_raw_name(name: &str) -> bool {
    name == "[memory]"
        || name.starts_with("ProfilerStep#")
        || name == "record_param_comms"
        || tables::ALL_TO_ALL_CALLS.contains(&name)
        || tables::flop_family(name).is_some()
}

impl Inputs {
    /// The inputs of the rank whose shard files are in `dir`.
    pub fn read(
        dir: &Path,
        rank: i32,
        configs: Vec<PgConfig>,
        params: Params,
    ) -> Result<Inputs, String> {
        let file = |t: &str| dir.join(format!("{t}.parquet"));
        let c = Frame::read(
            &file("cpu_ops"),
            &[
                "step",
                "name",
                "tid",
                "ts_ns",
                "end_ns",
                "dur_ns",
                "self_ns",
                "external_id",
                "input_dims",
                "input_type",
                "collective_name",
                "in_msg_nelems",
                "dtype",
                "pg_name",
                "pg_desc",
                "pg_ranks",
                "collective_seq",
                "peer_group_rank",
            ],
            None,
        )?;
        let cpu_ops = CpuOps {
            step: c.i64("step")?,
            name: c.text("name")?,
            tid: c.text("tid")?,
            ts_ns: c.i64("ts_ns")?,
            end_ns: c.i64("end_ns")?,
            dur_ns: c.i64("dur_ns")?,
            self_ns: c.i64("self_ns")?,
            external_id: c.i64("external_id")?,
            input_dims: c.text("input_dims")?,
            input_type: c.text("input_type")?,
            collective_name: c.text("collective_name")?,
            in_msg_nelems: c.i64("in_msg_nelems")?,
            dtype: c.text("dtype")?,
            pg_name: c.text("pg_name")?,
            pg_desc: c.text("pg_desc")?,
            pg_ranks: c.text("pg_ranks")?,
            collective_seq: c.i64("collective_seq")?,
            peer_group_rank: c.i32("peer_group_rank")?,
        };
        let a = Frame::read(
            &file("annotations"),
            &[
                "step",
                "name",
                "on_gpu",
                "tid",
                "ts_ns",
                "end_ns",
                "dur_ns",
                "self_ns",
                "input_dims",
                "input_type",
            ],
            None,
        )?;
        let annotations = Annotations {
            step: a.i64("step")?,
            name: a.text("name")?,
            on_gpu: a.flag("on_gpu")?,
            tid: a.text("tid")?,
            ts_ns: a.i64("ts_ns")?,
            end_ns: a.i64("end_ns")?,
            dur_ns: a.i64("dur_ns")?,
            self_ns: a.i64("self_ns")?,
            input_dims: a.text("input_dims")?,
            input_type: a.text("input_type")?,
        };
        let r = Frame::read(
            &file("runtime"),
            &[
                "step",
                "name",
                "tid",
                "ts_ns",
                "end_ns",
                "correlation",
                "is_sync",
            ],
            None,
        )?;
        let runtime = Runtime {
            step: r.i64("step")?,
            name: r.text("name")?,
            tid: r.text("tid")?,
            ts_ns: r.i64("ts_ns")?,
            end_ns: r.i64("end_ns")?,
            correlation: r.i64("correlation")?,
            is_sync: r.flag("is_sync")?,
        };
        let k = Frame::read(
            &file("kernels"),
            &[
                "step",
                "kind",
                "name",
                "device",
                "stream",
                "ts_ns",
                "dur_ns",
                "end_ns",
                "correlation",
                "external_id",
                "launch_ts_ns",
                "copy_bytes",
                "collective_name",
                "in_msg_nelems",
                "dtype",
                "pg_name",
                "pg_desc",
                "pg_ranks",
                "collective_seq",
                "peer_group_rank",
                "counters",
            ],
            None,
        )?;
        let kernels = Kernels {
            step: k.i64("step")?,
            kind: k.text("kind")?,
            name: k.text("name")?,
            device: k.i32("device")?,
            stream: k.i64("stream")?,
            ts_ns: k.i64("ts_ns")?,
            dur_ns: k.i64("dur_ns")?,
            end_ns: k.i64("end_ns")?,
            correlation: k.i64("correlation")?,
            external_id: k.i64("external_id")?,
            launch_ts_ns: k.i64("launch_ts_ns")?,
            copy_bytes: k.i64("copy_bytes")?,
            collective_name: k.text("collective_name")?,
            in_msg_nelems: k.i64("in_msg_nelems")?,
            dtype: k.text("dtype")?,
            pg_name: k.text("pg_name")?,
            pg_desc: k.text("pg_desc")?,
            pg_ranks: k.text("pg_ranks")?,
            collective_seq: k.i64("collective_seq")?,
            peer_group_rank: k.i32("peer_group_rank")?,
            counters: k.text("counters")?,
        };
        let keep: Box<
            dyn Fn(&arrow_array::RecordBatch) -> Result<BooleanArray, arrow_schema::ArrowError>
                + Send,
        > = Box::new(|b| {
            let names = crate::columns::by_name::<StringArray>(b, "name")?;
            Ok(BooleanArray::from_iter((0..b.num_rows()).map(|i| {
                Some(names.is_valid(i) && kept_raw_name(names.value(i)))
            })))
        });
        let e = Frame::read(
            &file("raw_events"),
            &[
                "ph",
                "cat",
                "name",
                "pid",
                "tid",
                "ts_ns",
                "dur_ns",
                "external_id",
                "input_dims",
                "input_type",
                "other_args",
                "collective_name",
                "in_msg_nelems",
                "out_msg_nelems",
                "dtype",
                "addr",
                "device_type",
                "device_id",
                "bytes",
                "total_allocated_bytes",
                "total_reserved_bytes",
            ],
            Some((&["name"], keep)),
        )?;
        let raw = RawEvents {
            ph: e.text("ph")?,
            cat: e.text("cat")?,
            name: e.text("name")?,
            pid: e.text("pid")?,
            tid: e.text("tid")?,
            ts_ns: e.i64("ts_ns")?,
            dur_ns: e.i64("dur_ns")?,
            external_id: e.i64("external_id")?,
            input_dims: e.text("input_dims")?,
            input_type: e.text("input_type")?,
            other_args: e.text("other_args")?,
            collective_name: e.text("collective_name")?,
            in_msg_nelems: e.i64("in_msg_nelems")?,
            out_msg_nelems: e.i64("out_msg_nelems")?,
            dtype: e.text("dtype")?,
            addr: e.text("addr")?,
            device_type: e.i32("device_type")?,
            device_id: e.i32("device_id")?,
            bytes: e.i64("bytes")?,
            total_allocated_bytes: e.i64("total_allocated_bytes")?,
            total_reserved_bytes: e.i64("total_reserved_bytes")?,
        };
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

/// What building one table cost: (table, rows, seconds of this thread).
pub type Built = (&'static str, usize, f64);

/// Build and write every derived table of the rank whose shard files are in `dir` into `out`
/// (the same folder in a map); returns each table's rows and seconds ("inputs": reading the
/// one-pass tables back).
pub fn derive_tables(
    dir: &Path,
    out: &Path,
    rank: i32,
    configs: Vec<PgConfig>,
    params: Params,
) -> Result<Vec<Built>, String> {
    let mut clock = Instant::now();
    let mut built: Vec<Built> = Vec::new();
    let mut lap = |table: &'static str, rows: usize, built: &mut Vec<Built>| {
        built.push((table, rows, clock.elapsed().as_secs_f64()));
        clock = Instant::now();
    };
    let x = Inputs::read(dir, rank, configs, params)?;
    lap("inputs", 0, &mut built);
    let mut write = |columns: out::Columns,
                     table: &'static str,
                     built: &mut Vec<Built>|
     -> Result<(), String> {
        let (_, rows) = columns.write(out, table)?;
        lap(table, rows, built);
        Ok(())
    };
    write(tables::memcpy(&x), "memcpy", &mut built)?;
    let collectives = collectives::collectives(&x);
    write(
        collectives::table(rank, &collectives),
        "collectives",
        &mut built,
    )?;
    write(
        collectives::step_comm(rank, &x.steps, &collectives),
        "step_comm",
        &mut built,
    )?;
    let main = tables::main_thread(&x);
    write(
        tables::main_threads(rank, main.as_deref()),
        "main_threads",
        &mut built,
    )?;
    write(tables::memory(&x), "memory", &mut built)?;
    write(tables::all_to_all_calls(&x), "all_to_all_calls", &mut built)?;
    write(tables::step_batches(&x), "step_batches", &mut built)?;
    let phases = phases::intervals(&x, main.as_deref(), &collectives);
    write(
        phases::intervals_table(&x, &phases),
        "phase_intervals",
        &mut built,
    )?;
    write(phases::step_phases(&x, &phases), "step_phases", &mut built)?;
    let busy = gpu::busy_intervals(&x);
    write(
        gpu::busy_table(rank, &busy),
        "gpu_busy_intervals",
        &mut built,
    )?;
    write(
        gpu::idle_gaps(&x, &busy, &phases, &collectives),
        "gpu_idle_gaps",
        &mut built,
    )?;
    write(gpu::step_gpu(&x, &busy), "step_gpu", &mut built)?;
    write(
        regions::step_regions(&x, main.as_deref(), &collectives, &busy),
        "step_regions",
        &mut built,
    )?;
    write(flops::op_flops(&x), "op_flops", &mut built)?;
    Ok(built)
}
