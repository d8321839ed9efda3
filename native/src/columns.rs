//! Stage 4: Arrow builders for the `raw_events` columns (db/schema.sql), minus `rank`
//! (added by the loader), plus `other_args`.

use std::sync::Arc;

use arrow_array::builder::{Int32Builder, Int64Builder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};

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

enum Builder {
    Str(StringBuilder),
    I64(Int64Builder),
    I32(Int32Builder),
}

/// One batch being built.
pub struct Columns {
    builders: Vec<Builder>,
    pub rows: usize,
}

impl Columns {
    pub fn new(rows: usize, text_bytes: usize) -> Columns {
        let per_text = text_bytes / 8;
        let builders = COLUMNS
            .iter()
            .map(|(_, ty)| match ty {
                Ty::Str => Builder::Str(StringBuilder::with_capacity(rows, per_text)),
                Ty::I64 => Builder::I64(Int64Builder::with_capacity(rows)),
                Ty::I32 => Builder::I32(Int32Builder::with_capacity(rows)),
            })
            .collect();
        Columns { builders, rows: 0 }
    }

    pub fn str(&mut self, col: usize, value: Option<&str>) {
        if let Builder::Str(b) = &mut self.builders[col] {
            b.append_option(value);
        }
    }

    pub fn int(&mut self, col: usize, value: Option<i64>) {
        match &mut self.builders[col] {
            Builder::I64(b) => b.append_option(value),
            Builder::I32(b) => b.append_option(value.map(|v| v as i32)),
            Builder::Str(_) => unreachable!("an integer column"),
        }
    }

    /// A row of NULLs (an element that is not an event object).
    pub fn null_row(&mut self) {
        for b in &mut self.builders {
            match b {
                Builder::Str(b) => b.append_null(),
                Builder::I64(b) => b.append_null(),
                Builder::I32(b) => b.append_null(),
            }
        }
        self.rows += 1;
    }

    pub fn finish(mut self, schema: &SchemaRef) -> Result<RecordBatch, ArrowError> {
        let arrays: Vec<ArrayRef> = self
            .builders
            .iter_mut()
            .map(|b| -> ArrayRef {
                match b {
                    Builder::Str(b) => Arc::new(b.finish()),
                    Builder::I64(b) => Arc::new(b.finish()),
                    Builder::I32(b) => Arc::new(b.finish()),
                }
            })
            .collect();
        RecordBatch::try_new(schema.clone(), arrays)
    }
}
