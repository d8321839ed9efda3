//! The derived tables' inputs: the one-pass tables the reader wrote into the shard folder
//! (steps, cpu_ops, annotations, runtime, kernels), read back column by column, and the few
//! raw events no one-pass table holds (allocator events, step marks, the ops the FLOP formulas
//! and the all-to-all calls read), read from raw_events.parquet through a filter on their
//! names.
//!
//! Memory: a column is kept in the form its use needs, batch by batch as it is read (the
//! file's batches are dropped at once): numbers as Arrow arrays (8 bytes and a bit a row), the
//! texts many rows share (names, threads, kinds) as an id a row into their distinct values
//! (read as Parquet dictionaries, never as one string a row), and the texts and numbers only a
//! few rows have (a collective's group, a shape, the args) as those rows' values alone.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{
    ArrayBuilder, BooleanBuilder, Int32Builder, Int64Builder, PrimitiveBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{
    Array, ArrayRef, ArrowPrimitiveType, BooleanArray, Int32Array, Int64Array, PrimitiveArray,
    RecordBatch, StringArray,
};
use arrow_schema::{ArrowError, DataType, Field, Schema};
use parquet::arrow::arrow_reader::{
    ArrowPredicateFn, ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
    RowFilter,
};
use parquet::arrow::ProjectionMask;

/// A nullable value of a column, by row.
pub trait Values<T> {
    fn value_at(&self, i: usize) -> Option<T>;
}

impl<T: arrow_array::ArrowPrimitiveType> Values<T::Native> for arrow_array::PrimitiveArray<T> {
    fn value_at(&self, i: usize) -> Option<T::Native> {
        self.is_valid(i).then(|| self.value(i))
    }
}

/// A nullable text of a column, by row.
pub trait Texts {
    fn text_of(&self, i: usize) -> Option<&str>;
}

impl Texts for StringArray {
    fn text_of(&self, i: usize) -> Option<&str> {
        self.is_valid(i).then(|| self.value(i))
    }
}

pub fn at<T, C: Values<T> + ?Sized>(column: &C, i: usize) -> Option<T> {
    column.value_at(i)
}

pub fn text_at<C: Texts + ?Sized>(column: &C, i: usize) -> Option<&str> {
    column.text_of(i)
}

pub fn flag_at(a: &BooleanArray, i: usize) -> Option<bool> {
    a.is_valid(i).then(|| a.value(i))
}

const NONE: u32 = u32::MAX;

/// Texts many rows share: an id per row into their distinct values.
#[derive(Default)]
pub struct Shared {
    ids: Vec<u32>,
    texts: Vec<Box<str>>,
    index: HashMap<Box<str>, u32>,
}

impl Shared {
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_valid(&self, i: usize) -> bool {
        self.ids[i] != NONE
    }

    /// Row `i`'s id into `distinct()`, none for a null.
    pub fn id(&self, i: usize) -> Option<u32> {
        let id = self.ids[i];
        (id != NONE).then_some(id)
    }

    /// The distinct texts, by id.
    pub fn distinct(&self) -> &[Box<str>] {
        &self.texts
    }

    /// The texts of `column` (VARCHAR, plain or a dictionary) appended as rows after the ones
    /// before: a file read a batch at a time.
    pub fn extend(&mut self, column: &ArrayRef) -> Result<(), String> {
        text_column(column)?;
        self.push(column).map_err(|e| e.to_string())
    }

    /// The rows forgotten, their distinct texts (and so every id given) kept.
    pub fn forget_rows(&mut self) {
        self.ids.clear();
    }

    fn intern(&mut self, text: &str) -> u32 {
        if let Some(&id) = self.index.get(text) {
            return id;
        }
        let id = self.texts.len() as u32;
        self.texts.push(text.into());
        self.index.insert(text.into(), id);
        id
    }

    fn push(&mut self, column: &ArrayRef) -> Result<(), ArrowError> {
        match column.data_type() {
            DataType::Dictionary(_, _) => {
                let dict = column.as_dictionary::<Int32Type>();
                let values = dict.values().as_string::<i32>();
                let ids: Vec<u32> = (0..values.len())
                    .map(|v| {
                        if values.is_valid(v) {
                            self.intern(values.value(v))
                        } else {
                            NONE
                        }
                    })
                    .collect();
                let keys = dict.keys();
                self.ids.extend((0..keys.len()).map(|i| {
                    if keys.is_valid(i) {
                        ids[keys.value(i) as usize]
                    } else {
                        NONE
                    }
                }));
            }
            _ => {
                let texts = column.as_string::<i32>();
                for i in 0..texts.len() {
                    let id = if texts.is_valid(i) {
                        self.intern(texts.value(i))
                    } else {
                        NONE
                    };
                    self.ids.push(id);
                }
            }
        }
        Ok(())
    }
}

impl Texts for Shared {
    fn text_of(&self, i: usize) -> Option<&str> {
        let id = self.ids[i];
        (id != NONE).then(|| &*self.texts[id as usize])
    }
}

/// Texts few rows have: those rows' texts alone, in one buffer.
#[derive(Default)]
pub struct Few {
    len: usize,
    rows: Vec<u32>,
    ends: Vec<u32>,
    data: String,
}

impl Few {
    pub fn is_valid(&self, i: usize) -> bool {
        self.rows.binary_search(&(i as u32)).is_ok()
    }

    /// The texts of `column`'s rows (all, or those `keep` picks).
    fn push(&mut self, column: &ArrayRef, keep: Option<&[bool]>) {
        let base = self.len;
        let mut add = |i: usize, text: &str| {
            self.rows.push((base + i) as u32);
            self.data.push_str(text);
            self.ends.push(self.data.len() as u32);
        };
        let kept = |i: usize| keep.is_none_or(|k| k[i]);
        match column.data_type() {
            DataType::Dictionary(_, _) => {
                let dict = column.as_dictionary::<Int32Type>();
                let values = dict.values().as_string::<i32>();
                let keys = dict.keys();
                for i in 0..keys.len() {
                    if keys.is_valid(i) && kept(i) {
                        let k = keys.value(i) as usize;
                        if values.is_valid(k) {
                            add(i, values.value(k));
                        }
                    }
                }
            }
            _ => {
                let texts = column.as_string::<i32>();
                for i in 0..texts.len() {
                    if texts.is_valid(i) && kept(i) {
                        add(i, texts.value(i));
                    }
                }
            }
        }
        self.len += column.len();
    }
}

impl Texts for Few {
    fn text_of(&self, i: usize) -> Option<&str> {
        let k = self.rows.binary_search(&(i as u32)).ok()?;
        let start = if k == 0 { 0 } else { self.ends[k - 1] as usize };
        Some(&self.data[start..self.ends[k] as usize])
    }
}

/// Numbers few rows have: those rows' values alone.
pub struct FewValues<T> {
    rows: Vec<(u32, T)>,
    len: usize,
}

impl<T> Default for FewValues<T> {
    fn default() -> Self {
        FewValues {
            rows: Vec::new(),
            len: 0,
        }
    }
}

impl<T: Copy> Values<T> for FewValues<T> {
    fn value_at(&self, i: usize) -> Option<T> {
        let k = self.rows.binary_search_by_key(&(i as u32), |r| r.0).ok()?;
        Some(self.rows[k].1)
    }
}

impl<T: Copy + Send + Sync> FewValues<T> {
    fn push<A: arrow_array::ArrowPrimitiveType<Native = T>>(&mut self, column: &ArrayRef) {
        let values = column.as_primitive::<A>();
        for i in 0..values.len() {
            if values.is_valid(i) {
                self.rows.push(((self.len + i) as u32, values.value(i)));
            }
        }
        self.len += values.len();
    }
}

/// How a column is kept.
pub enum Kind {
    I64,
    I32,
    Flag,
    Shared,
    Few,
    /// a text kept only for the rows the table's `keep_args` picks
    FewPicked,
    FewI64,
    FewI32,
}

enum Kept {
    I64(Int64Builder),
    I32(Int32Builder),
    Flag(BooleanBuilder),
    Shared(Shared),
    Few(Few),
    FewI64(FewValues<i64>),
    FewI32(FewValues<i32>),
}

/// A table's columns as they were kept.
pub struct Table {
    columns: HashMap<&'static str, Kept>,
    what: String,
}

/// Decides, from a batch, which rows keep their `FewPicked` texts.
pub type Pick = Box<dyn Fn(&RecordBatch) -> Vec<bool>>;
pub type Keep = Box<dyn Fn(&RecordBatch) -> Result<BooleanArray, ArrowError> + Send>;

impl Table {
    /// The `columns` of the Parquet file `path` (all its rows, or those `keep` picks by the
    /// columns `keep_columns`), each kept as its Kind says.
    pub fn read(
        path: &Path,
        columns: &[(&'static str, Kind)],
        keep: Option<(&[&str], Keep)>,
        pick: Option<Pick>,
    ) -> Result<Table, String> {
        let what = path.display().to_string();
        let fail = |e: &dyn std::fmt::Display| format!("cannot read {what} ({e})");
        let file = File::open(path).map_err(|e| fail(&e))?;
        let plain =
            ArrowReaderMetadata::load(&file, ArrowReaderOptions::new()).map_err(|e| fail(&e))?;
        // (the texts kept as ids are read as dictionaries, no string a row, where every row group
        // stored the column as one with no more nulls than values; the texts few rows have, and
        // the rest, as plain texts: a column of nulls read as a dictionary cost 0.1 µs a row, 28
        // ms for each of four empty columns of a 200 MB trace's cpu_ops, against under 3 plain)
        let meta = plain.metadata();
        let dictionary = |name: &str| {
            if !columns
                .iter()
                .any(|(c, k)| *c == name && matches!(k, Kind::Shared))
            {
                return false;
            }
            let leaves = meta.file_metadata().schema_descr().columns();
            let Some(at) = leaves.iter().position(|d| d.path().string() == name) else {
                return false;
            };
            meta.row_groups().iter().all(|g| {
                let chunk = g.column(at);
                chunk.dictionary_page_offset().is_some()
                    && chunk
                        .statistics()
                        .and_then(|s| s.null_count_opt())
                        .is_none_or(|nulls| nulls.saturating_mul(2) <= g.num_rows() as u64)
            })
        };
        let fields: Vec<Field> = plain
            .schema()
            .fields()
            .iter()
            .map(|f| {
                if f.data_type() == &DataType::Utf8 && dictionary(f.name()) {
                    f.as_ref().clone().with_data_type(DataType::Dictionary(
                        Box::new(DataType::Int32),
                        Box::new(DataType::Utf8),
                    ))
                } else {
                    f.as_ref().clone()
                }
            })
            .collect();
        let hinted = ArrowReaderMetadata::try_new(
            plain.metadata().clone(),
            ArrowReaderOptions::new().with_schema(Arc::new(Schema::new(fields))),
        )
        .map_err(|e| fail(&e))?;
        let builder = ParquetRecordBatchReaderBuilder::new_with_metadata(file, hinted);
        let descr = builder.metadata().file_metadata().schema_descr_ptr();
        for (c, _) in columns {
            if !descr.columns().iter().any(|d| d.name() == *c) {
                return Err(fail(&format!("no column {c}")));
            }
        }
        let mut names: Vec<&str> = columns.iter().map(|(c, _)| *c).collect();
        if let Some((keep_columns, _)) = &keep {
            names.extend(keep_columns.iter().copied());
        }
        let mask = ProjectionMask::columns(&descr, names.iter().copied());
        let mut builder = builder.with_projection(mask).with_batch_size(1 << 12);
        // (every row is kept unless a filter picks them: the numbers' arrays sized at once,
        // not doubled as they grow, which held up to twice a column and its copy)
        let rows = match keep {
            None => usize::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0),
            Some(_) => 0,
        };
        if let Some((keep_columns, keep)) = keep {
            let keep_mask = ProjectionMask::columns(&descr, keep_columns.iter().copied());
            let predicate = ArrowPredicateFn::new(keep_mask, move |b: RecordBatch| keep(&b));
            builder = builder.with_row_filter(RowFilter::new(vec![Box::new(predicate)]));
        }
        let reader = builder.build().map_err(|e| fail(&e))?;
        let mut kept: HashMap<&'static str, Kept> = columns
            .iter()
            .map(|(c, k)| {
                (
                    *c,
                    match k {
                        Kind::I64 => Kept::I64(Int64Builder::with_capacity(rows)),
                        Kind::I32 => Kept::I32(Int32Builder::with_capacity(rows)),
                        Kind::Flag => Kept::Flag(BooleanBuilder::with_capacity(rows)),
                        Kind::Shared => Kept::Shared(Shared {
                            ids: Vec::with_capacity(rows),
                            ..Shared::default()
                        }),
                        Kind::Few | Kind::FewPicked => Kept::Few(Few::default()),
                        Kind::FewI64 => Kept::FewI64(FewValues::default()),
                        Kind::FewI32 => Kept::FewI32(FewValues::default()),
                    },
                )
            })
            .collect();
        for batch in reader {
            let batch = batch.map_err(|e| fail(&e))?;
            let picked = pick.as_ref().map(|p| p(&batch));
            for (c, k) in columns {
                let column = batch.column(batch.schema().index_of(c).map_err(|e| fail(&e))?);
                let slot = kept.get_mut(c).expect("a kept column");
                let typed = |e: &str| fail(&format!("column {c} is not {e}"));
                match slot {
                    Kept::I64(b) => {
                        let a = column
                            .as_primitive_opt::<Int64Type>()
                            .ok_or_else(|| typed("BIGINT"))?;
                        b.extend(a.iter());
                    }
                    Kept::I32(b) => {
                        let a = column
                            .as_primitive_opt::<Int32Type>()
                            .ok_or_else(|| typed("INTEGER"))?;
                        b.extend(a.iter());
                    }
                    Kept::Flag(b) => {
                        let a = column.as_boolean_opt().ok_or_else(|| typed("BOOLEAN"))?;
                        b.extend(a.iter());
                    }
                    Kept::Shared(s) => {
                        text_column(column).map_err(|e| typed(&e))?;
                        s.push(column).map_err(|e| fail(&e))?;
                    }
                    Kept::Few(f) => {
                        text_column(column).map_err(|e| typed(&e))?;
                        let only = matches!(k, Kind::FewPicked)
                            .then_some(picked.as_deref())
                            .flatten();
                        f.push(column, only);
                    }
                    Kept::FewI64(f) => {
                        column
                            .as_primitive_opt::<Int64Type>()
                            .ok_or_else(|| typed("BIGINT"))?;
                        f.push::<Int64Type>(column);
                    }
                    Kept::FewI32(f) => {
                        column
                            .as_primitive_opt::<Int32Type>()
                            .ok_or_else(|| typed("INTEGER"))?;
                        f.push::<Int32Type>(column);
                    }
                }
            }
        }
        Ok(Table {
            columns: kept,
            what,
        })
    }

    fn take(&mut self, name: &str) -> Result<Kept, String> {
        self.columns
            .remove(name)
            .ok_or_else(|| format!("cannot read {} (no column {name})", self.what))
    }

    pub fn i64(&mut self, name: &str) -> Result<Int64Array, String> {
        match self.take(name)? {
            Kept::I64(mut b) => Ok(finish_tight(&mut b)),
            _ => Err(format!("{name}: not kept as BIGINT")),
        }
    }

    pub fn i32(&mut self, name: &str) -> Result<Int32Array, String> {
        match self.take(name)? {
            Kept::I32(mut b) => Ok(finish_tight(&mut b)),
            _ => Err(format!("{name}: not kept as INTEGER")),
        }
    }

    pub fn flag(&mut self, name: &str) -> Result<BooleanArray, String> {
        match self.take(name)? {
            Kept::Flag(mut b) => Ok(b.finish()),
            _ => Err(format!("{name}: not kept as BOOLEAN")),
        }
    }

    pub fn shared(&mut self, name: &str) -> Result<Shared, String> {
        match self.take(name)? {
            Kept::Shared(mut s) => {
                s.index = HashMap::new(); // (no more texts come)
                s.ids.shrink_to_fit();
                s.texts.shrink_to_fit();
                Ok(s)
            }
            _ => Err(format!("{name}: not kept as shared texts")),
        }
    }

    pub fn few(&mut self, name: &str) -> Result<Few, String> {
        match self.take(name)? {
            Kept::Few(mut f) => {
                f.rows.shrink_to_fit();
                f.ends.shrink_to_fit();
                f.data.shrink_to_fit();
                Ok(f)
            }
            _ => Err(format!("{name}: not kept as few texts")),
        }
    }

    pub fn few_i64(&mut self, name: &str) -> Result<FewValues<i64>, String> {
        match self.take(name)? {
            Kept::FewI64(mut f) => {
                f.rows.shrink_to_fit();
                Ok(f)
            }
            _ => Err(format!("{name}: not kept as few numbers")),
        }
    }

    pub fn few_i32(&mut self, name: &str) -> Result<FewValues<i32>, String> {
        match self.take(name)? {
            Kept::FewI32(mut f) => {
                f.rows.shrink_to_fit();
                Ok(f)
            }
            _ => Err(format!("{name}: not kept as few numbers")),
        }
    }
}

/// A kept column's array: when its buffer, grown as a filtered file's rows came, holds a quarter
/// more than its rows, they are copied into one of their size (the derived tables are built
/// while every input is held, and doubling left up to half of each unused).
fn finish_tight<T: ArrowPrimitiveType>(b: &mut PrimitiveBuilder<T>) -> PrimitiveArray<T> {
    if b.capacity() > b.len() + b.len() / 4 + 1024 {
        b.finish_cloned()
    } else {
        b.finish()
    }
}

fn text_column(column: &ArrayRef) -> Result<(), String> {
    match column.data_type() {
        DataType::Utf8 => Ok(()),
        DataType::Dictionary(k, v) if **k == DataType::Int32 && **v == DataType::Utf8 => Ok(()),
        _ => Err("VARCHAR".into()),
    }
}

/// A batch's text column as it was read (a dictionary or plain texts), by row, borrowed.
pub struct BatchTexts<'a> {
    keys: Option<&'a Int32Array>,
    values: &'a StringArray,
}

impl<'a> BatchTexts<'a> {
    pub fn of(batch: &'a RecordBatch, name: &str) -> Result<BatchTexts<'a>, ArrowError> {
        let column = batch.column(batch.schema().index_of(name)?);
        Ok(match column.data_type() {
            DataType::Dictionary(_, _) => {
                let dict = column.as_dictionary::<Int32Type>();
                BatchTexts {
                    keys: Some(dict.keys()),
                    values: dict.values().as_string::<i32>(),
                }
            }
            _ => BatchTexts {
                keys: None,
                values: column.as_string::<i32>(),
            },
        })
    }

    pub fn get(&self, i: usize) -> Option<&'a str> {
        let k = match self.keys {
            Some(keys) => keys.is_valid(i).then(|| keys.value(i) as usize)?,
            None => i,
        };
        self.values.is_valid(k).then(|| self.values.value(k))
    }

    /// Which rows' texts `pick` picks (asked once per distinct text of a dictionary).
    pub fn picked(&self, rows: usize, pick: impl Fn(&str) -> bool) -> Vec<bool> {
        match self.keys {
            Some(keys) => {
                let values: Vec<bool> = (0..self.values.len())
                    .map(|v| self.values.is_valid(v) && pick(self.values.value(v)))
                    .collect();
                (0..rows)
                    .map(|i| keys.is_valid(i) && values[keys.value(i) as usize])
                    .collect()
            }
            None => (0..rows).map(|i| self.get(i).is_some_and(&pick)).collect(),
        }
    }
}

/// A rank's steps by start (the order steps.parquet keeps: (ts_ns, step)).
pub struct Steps {
    pub step: Vec<i64>,
    pub ts_ns: Vec<i64>,
    pub end_ns: Vec<i64>,
}

impl Steps {
    pub fn read(dir: &Path) -> Result<Steps, String> {
        let mut f = Table::read(
            &dir.join("steps.parquet"),
            &[
                ("step", Kind::I64),
                ("ts_ns", Kind::I64),
                ("end_ns", Kind::I64),
            ],
            None,
            None,
        )?;
        let (step, ts, end) = (f.i64("step")?, f.i64("ts_ns")?, f.i64("end_ns")?);
        let mut rows: Vec<(i64, i64, i64)> = (0..step.len())
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

    pub fn is_empty(&self) -> bool {
        self.step.is_empty()
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
