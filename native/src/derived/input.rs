//! The derived tables' inputs: the one-pass tables the reader wrote into the shard folder
//! (steps, cpu_ops, annotations, runtime, kernels), read back column by column, and the few
//! raw events no one-pass table holds (allocator events, step marks, the args of the ops the
//! FLOP formulas and the all-to-all calls read), read from raw_events.parquet through a filter
//! on their names.

use std::fs::File;
use std::path::Path;

use arrow_array::RecordBatchReader;
use arrow_array::{
    Array, ArrayRef, BooleanArray, Int32Array, Int64Array, RecordBatch, StringArray,
};
use arrow_schema::ArrowError;
use arrow_select::concat::concat_batches;
use parquet::arrow::arrow_reader::{ArrowPredicateFn, ParquetRecordBatchReaderBuilder, RowFilter};
use parquet::arrow::ProjectionMask;

/// A table's columns, read whole (one batch).
pub struct Frame {
    batch: RecordBatch,
    what: String,
}

type Keep = Box<dyn Fn(&RecordBatch) -> Result<BooleanArray, ArrowError> + Send>;

impl Frame {
    /// `columns` of the Parquet file `path` (all of its rows, or those `keep` picks by the
    /// columns `keep_columns`).
    pub fn read(
        path: &Path,
        columns: &[&str],
        keep: Option<(&[&str], Keep)>,
    ) -> Result<Frame, String> {
        let what = path.display().to_string();
        let fail = |e: &dyn std::fmt::Display| format!("cannot read {what} ({e})");
        let file = File::open(path).map_err(|e| fail(&e))?;
        let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| fail(&e))?;
        let descr = builder.metadata().file_metadata().schema_descr_ptr();
        for c in columns {
            if !descr.columns().iter().any(|d| d.name() == *c) {
                return Err(fail(&format!("no column {c}")));
            }
        }
        let mask = ProjectionMask::columns(&descr, columns.iter().copied());
        let mut builder = builder.with_projection(mask).with_batch_size(1 << 16);
        if let Some((keep_columns, keep)) = keep {
            let keep_mask = ProjectionMask::columns(&descr, keep_columns.iter().copied());
            let predicate = ArrowPredicateFn::new(keep_mask, move |b: RecordBatch| keep(&b));
            builder = builder.with_row_filter(RowFilter::new(vec![Box::new(predicate)]));
        }
        let reader = builder.build().map_err(|e| fail(&e))?;
        let schema = reader.schema();
        let batches = reader
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| fail(&e))?;
        let batch = concat_batches(&schema, &batches).map_err(|e| fail(&e))?;
        Ok(Frame { batch, what })
    }

    pub fn len(&self) -> usize {
        self.batch.num_rows()
    }

    fn column(&self, name: &str) -> Result<&ArrayRef, String> {
        self.batch
            .schema()
            .index_of(name)
            .map(|i| self.batch.column(i))
            .map_err(|_| format!("cannot read {} (no column {name})", self.what))
    }

    fn typed<T: Array + Clone + 'static>(&self, name: &str) -> Result<T, String> {
        self.column(name)?
            .as_any()
            .downcast_ref::<T>()
            .cloned()
            .ok_or_else(|| format!("cannot read {} (column {name} has another type)", self.what))
    }

    pub fn i64(&self, name: &str) -> Result<Int64Array, String> {
        self.typed(name)
    }

    pub fn i32(&self, name: &str) -> Result<Int32Array, String> {
        self.typed(name)
    }

    pub fn text(&self, name: &str) -> Result<StringArray, String> {
        self.typed(name)
    }

    pub fn flag(&self, name: &str) -> Result<BooleanArray, String> {
        self.typed(name)
    }
}

/// A nullable value of an array.
pub fn at<T: arrow_array::ArrowPrimitiveType>(
    a: &arrow_array::PrimitiveArray<T>,
    i: usize,
) -> Option<T::Native> {
    a.is_valid(i).then(|| a.value(i))
}

pub fn text_at(a: &StringArray, i: usize) -> Option<&str> {
    a.is_valid(i).then(|| a.value(i))
}

pub fn flag_at(a: &BooleanArray, i: usize) -> Option<bool> {
    a.is_valid(i).then(|| a.value(i))
}

/// A rank's steps by start (the order steps.parquet keeps: (ts_ns, step)).
pub struct Steps {
    pub step: Vec<i64>,
    pub ts_ns: Vec<i64>,
    pub end_ns: Vec<i64>,
}

impl Steps {
    pub fn read(dir: &Path) -> Result<Steps, String> {
        let f = Frame::read(
            &dir.join("steps.parquet"),
            &["step", "ts_ns", "end_ns"],
            None,
        )?;
        let (step, ts, end) = (f.i64("step")?, f.i64("ts_ns")?, f.i64("end_ns")?);
        let mut rows: Vec<(i64, i64, i64)> = (0..f.len())
            .filter_map(|i| Some((at(&ts, i)?, at(&step, i)?, at(&end, i)?)))
            .collect();
        rows.sort_unstable();
        Ok(Steps {
            step: rows.iter().map(|r| r.1).collect(),
            ts_ns: rows.iter().map(|r| r.0).collect(),
            end_ns: rows.iter().map(|r| r.2).collect(),
        })
    }

    pub fn len(&self) -> usize {
        self.step.len()
    }

    /// The last step starting at or before `ts` (an ASOF join on the start), as an index.
    pub fn starting_by(&self, ts: i64) -> Option<usize> {
        self.ts_ns.partition_point(|&s| s <= ts).checked_sub(1)
    }

    /// The step holding `ts`: the last one starting at or before it, when it has not ended
    /// (the rule of every table's `step`).
    pub fn holding(&self, ts: Option<i64>) -> Option<i64> {
        let k = self.starting_by(ts?)?;
        (ts? < self.end_ns[k]).then_some(self.step[k])
    }

    /// The index of step number `step` (steps are unique per rank).
    pub fn index_of(&self, step: i64) -> Option<usize> {
        self.step.iter().position(|&s| s == step)
    }
}
