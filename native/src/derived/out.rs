//! Output columns of the derived tables, built from plain vectors, and the tables' files.

use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{Int32Builder, Int64Builder, ListBuilder, PrimitiveBuilder};
use arrow_array::Array;
use arrow_array::ArrowPrimitiveType;
use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use crate::parquet_props::write_batches;

/// Columns with nearly one value per row: no dictionary (as the reader's own tables).
const NO_DICTIONARY: &[&str] = &["ts_ns", "end_ns", "dur_ns", "start_rel_ns"];

/// A table being built: its columns in order.
#[derive(Default)]
pub struct Columns {
    fields: Vec<Field>,
    arrays: Vec<ArrayRef>,
}

impl Columns {
    pub fn i32(mut self, name: &str, values: impl IntoIterator<Item = Option<i32>>) -> Self {
        self.push(
            name,
            DataType::Int32,
            Arc::new(Int32Array::from_iter(values)),
        );
        self
    }

    pub fn i64(mut self, name: &str, values: impl IntoIterator<Item = Option<i64>>) -> Self {
        self.push(
            name,
            DataType::Int64,
            Arc::new(Int64Array::from_iter(values)),
        );
        self
    }

    pub fn f64(mut self, name: &str, values: impl IntoIterator<Item = Option<f64>>) -> Self {
        self.push(
            name,
            DataType::Float64,
            Arc::new(Float64Array::from_iter(values)),
        );
        self
    }

    pub fn text<S: AsRef<str>>(
        mut self,
        name: &str,
        values: impl IntoIterator<Item = Option<S>>,
    ) -> Self {
        self.push(
            name,
            DataType::Utf8,
            Arc::new(StringArray::from_iter(values)),
        );
        self
    }

    pub fn flag(mut self, name: &str, values: impl IntoIterator<Item = Option<bool>>) -> Self {
        self.push(
            name,
            DataType::Boolean,
            Arc::new(BooleanArray::from_iter(values)),
        );
        self
    }

    pub fn i32_lists<'a>(
        self,
        name: &str,
        values: impl IntoIterator<Item = Option<&'a [i32]>>,
    ) -> Self {
        self.lists(name, Int32Builder::new(), values)
    }

    pub fn i64_lists<'a>(
        self,
        name: &str,
        values: impl IntoIterator<Item = Option<&'a [i64]>>,
    ) -> Self {
        self.lists(name, Int64Builder::new(), values)
    }

    fn lists<'a, T: ArrowPrimitiveType>(
        mut self,
        name: &str,
        items: PrimitiveBuilder<T>,
        values: impl IntoIterator<Item = Option<&'a [T::Native]>>,
    ) -> Self {
        let mut b = ListBuilder::new(items);
        for v in values {
            match v {
                Some(xs) => {
                    b.values().append_slice(xs);
                    b.append(true);
                }
                None => b.append(false),
            }
        }
        let array = b.finish();
        let dt = array.data_type().clone();
        self.push(name, dt, Arc::new(array));
        self
    }

    fn push(&mut self, name: &str, dt: DataType, array: ArrayRef) {
        self.fields.push(Field::new(name, dt, true));
        self.arrays.push(array);
    }

    pub fn schema(&self) -> SchemaRef {
        Arc::new(Schema::new(self.fields.clone()))
    }

    /// `<dir>/<table>.parquet`; returns (table, rows).
    pub fn write(self, dir: &Path, table: &'static str) -> Result<(&'static str, usize), String> {
        let rows = self.write_file(&dir.join(format!("{table}.parquet")))?;
        Ok((table, rows))
    }

    /// The file `path`; returns its rows.
    pub fn write_file(self, path: &Path) -> Result<usize, String> {
        let schema = self.schema();
        let batch = RecordBatch::try_new(schema.clone(), self.arrays)
            .map_err(|e| format!("cannot write {} ({e})", path.display()))?;
        write_batches(path, schema, std::iter::once(Ok(batch)), NO_DICTIONARY)
    }
}
