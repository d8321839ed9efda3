//! Stage 4: Arrow builders for the `raw_events` columns (db/schema.sql), minus `rank`
//! (added by the loader), plus `other_args`.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_buffer::{Buffer, NullBufferBuilder, OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};

/// The prefix of the step marks torch.profiler records (`ProfilerStep#N`, N the step).
pub const STEP_MARK_PREFIX: &str = "ProfilerStep#";

/// Is `name` a step mark's (it starts with STEP_MARK_PREFIX)?
pub fn is_step_mark(name: &str) -> bool {
    name.starts_with(STEP_MARK_PREFIX)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Ty {
    Str,
    I64,
    I32,
}

/// (column name, type), in the order of the batches.
pub const COLUMNS: &[(&str, Ty)] = &[
    ("ph", Ty::Str),
    ("cat", Ty::Str),
    ("name", Ty::Str),
    ("pid", Ty::Str),
    ("tid", Ty::Str),
    ("ts_ns", Ty::I64),
    ("dur_ns", Ty::I64),
    ("flow_id", Ty::Str),
    ("external_id", Ty::I64),
    ("correlation", Ty::I64),
    ("device", Ty::I32),
    ("stream", Ty::I64),
    ("bytes", Ty::I64),
    ("input_dims", Ty::Str),
    ("input_type", Ty::Str),
    ("seq_number", Ty::I64),
    ("fwd_thread_id", Ty::I64),
    ("collective_name", Ty::Str),
    ("in_msg_nelems", Ty::I64),
    ("out_msg_nelems", Ty::I64),
    ("dtype", Ty::Str),
    ("group_size", Ty::I32),
    ("pg_name", Ty::Str),
    ("pg_desc", Ty::Str),
    ("pg_ranks", Ty::Str),
    ("collective_seq", Ty::I64),
    ("total_allocated_bytes", Ty::I64),
    ("total_reserved_bytes", Ty::I64),
    ("device_type", Ty::I32),
    ("device_id", Ty::I32),
    ("addr", Ty::Str),
    ("label", Ty::Str),
    ("labels", Ty::Str),
    ("sync_kind", Ty::Str),
    ("other_args", Ty::Str),
];

pub const PH: usize = 0;
pub const TS_NS: usize = 5;
pub const DUR_NS: usize = 6;
pub const FLOW_ID: usize = 7;
pub const FIRST_ARG: usize = 8;
pub const OTHER_ARGS: usize = COLUMNS.len() - 1;

/// The column `name` of `batch` (any batch of ours, found by name) as an array of type `T`.
pub fn by_name<'a, T: 'static>(batch: &'a RecordBatch, name: &str) -> Result<&'a T, ArrowError> {
    batch
        .column(batch.schema().index_of(name)?)
        .as_any()
        .downcast_ref::<T>()
        .ok_or_else(|| ArrowError::SchemaError(format!("column {name} of an unexpected type")))
}

/// Row `i` of a text column (None: NULL).
pub fn text_at(a: &StringArray, i: usize) -> Option<&str> {
    a.is_valid(i).then(|| a.value(i))
}

/// Row `i` of a BIGINT column (None: NULL).
pub fn int_at(a: &Int64Array, i: usize) -> Option<i64> {
    a.is_valid(i).then(|| a.value(i))
}

pub fn schema() -> SchemaRef {
    let fields: Vec<Field> = COLUMNS
        .iter()
        .map(|(name, ty)| {
            let dt = match ty {
                Ty::Str => DataType::Utf8,
                Ty::I64 => DataType::Int64,
                Ty::I32 => DataType::Int32,
            };
            Field::new(*name, dt, true)
        })
        .collect();
    Arc::new(Schema::new(fields))
}

/// One column being built. Rows a column has no value for are NULL: a column is only
/// touched when a row has a value for it, and padded with NULLs up to the row (most args
/// columns are NULL in most rows, so this saves appending ~25 NULLs per event).
enum Col {
    Str {
        offsets: Vec<i32>,
        values: Vec<u8>,
        nulls: NullBufferBuilder,
    },
    I64 {
        values: Vec<i64>,
        nulls: NullBufferBuilder,
    },
    I32 {
        values: Vec<i32>,
        nulls: NullBufferBuilder,
    },
}

impl Col {
    fn len(&self) -> usize {
        match self {
            Col::Str { offsets, .. } => offsets.len() - 1,
            Col::I64 { values, .. } => values.len(),
            Col::I32 { values, .. } => values.len(),
        }
    }

    /// NULLs up to `rows` rows.
    fn pad(&mut self, rows: usize) {
        let n = rows.saturating_sub(self.len());
        if n == 0 {
            return;
        }
        match self {
            Col::Str { offsets, nulls, .. } => {
                let last = *offsets.last().expect("offsets start with 0");
                offsets.resize(offsets.len() + n, last);
                nulls.append_n_nulls(n);
            }
            Col::I64 { values, nulls } => {
                values.resize(values.len() + n, 0);
                nulls.append_n_nulls(n);
            }
            Col::I32 { values, nulls } => {
                values.resize(values.len() + n, 0);
                nulls.append_n_nulls(n);
            }
        }
    }
}

/// One batch being built: `str`/`int` set a value of the current row, `end_row` closes it.
pub struct Columns {
    cols: Vec<Col>,
    pub rows: usize,
    /// a text column passed i32 offsets (2 GiB in one batch): the batch is refused
    overflow: bool,
}

impl Columns {
    pub fn new(rows: usize, text_bytes: usize) -> Columns {
        let per_text = text_bytes / 8;
        let cols = COLUMNS
            .iter()
            .map(|(_, ty)| match ty {
                Ty::Str => {
                    let mut offsets = Vec::with_capacity(rows + 1);
                    offsets.push(0);
                    Col::Str {
                        offsets,
                        values: Vec::with_capacity(per_text),
                        nulls: NullBufferBuilder::new(rows),
                    }
                }
                Ty::I64 => Col::I64 {
                    values: Vec::with_capacity(rows),
                    nulls: NullBufferBuilder::new(rows),
                },
                Ty::I32 => Col::I32 {
                    values: Vec::with_capacity(rows),
                    nulls: NullBufferBuilder::new(rows),
                },
            })
            .collect();
        Columns {
            cols,
            rows: 0,
            overflow: false,
        }
    }

    /// The text value of column `col` in the current row (None: NULL). A column is set at
    /// most once per row.
    pub fn str(&mut self, col: usize, value: Option<&str>) {
        let Some(value) = value else { return };
        let rows = self.rows;
        let c = &mut self.cols[col];
        c.pad(rows);
        if let Col::Str {
            offsets,
            values,
            nulls,
        } = c
        {
            values.extend_from_slice(value.as_bytes());
            // (a batch's events are one block's, far less than 2 GiB; if not, it is refused)
            let end = i32::try_from(values.len()).unwrap_or_else(|_| {
                self.overflow = true;
                i32::MAX
            });
            offsets.push(end);
            nulls.append_non_null();
        }
    }

    /// The integer value of column `col` in the current row (None: NULL).
    pub fn int(&mut self, col: usize, value: Option<i64>) {
        let Some(value) = value else { return };
        let rows = self.rows;
        let c = &mut self.cols[col];
        c.pad(rows);
        match c {
            Col::I64 { values, nulls } => {
                values.push(value);
                nulls.append_non_null();
            }
            Col::I32 { values, nulls } => {
                values.push(value as i32);
                nulls.append_non_null();
            }
            Col::Str { .. } => unreachable!("an integer column"),
        }
    }

    /// The current row is complete (a row with nothing set is all NULLs: an element that is
    /// not an event object).
    pub fn end_row(&mut self) {
        self.rows += 1;
    }

    pub fn finish(mut self, schema: &SchemaRef) -> Result<RecordBatch, ArrowError> {
        if self.overflow {
            return Err(ArrowError::ComputeError(
                "more than 2 GiB of text in one batch of events".into(),
            ));
        }
        let rows = self.rows;
        let arrays: Vec<ArrayRef> = self
            .cols
            .iter_mut()
            .map(|c| -> ArrayRef {
                c.pad(rows);
                match c {
                    Col::Str {
                        offsets,
                        values,
                        nulls,
                    } => {
                        let offsets =
                            OffsetBuffer::new(ScalarBuffer::from(std::mem::take(offsets)));
                        let values = Buffer::from_vec(std::mem::take(values));
                        // SAFETY: `values` only ever receives whole `&str`s and the offsets
                        // are their boundaries, so every slice is valid UTF-8.
                        Arc::new(unsafe {
                            StringArray::new_unchecked(offsets, values, nulls.finish())
                        })
                    }
                    Col::I64 { values, nulls } => Arc::new(Int64Array::new(
                        ScalarBuffer::from(std::mem::take(values)),
                        nulls.finish(),
                    )),
                    Col::I32 { values, nulls } => Arc::new(Int32Array::new(
                        ScalarBuffer::from(std::mem::take(values)),
                        nulls.finish(),
                    )),
                }
            })
            .collect();
        RecordBatch::try_new(schema.clone(), arrays)
    }
}
