//! The rows of one of `rank_tables`' event tables, gathered while the reader parses: in memory
//! up to a bound, then spilled to an Arrow IPC file (no encoding: written and read back at
//! disk speed) in the table's folder, removed when the rows have been read back (or on any
//! error, or a panic: the file is owned by a guard). A map's memory then holds at most the
//! bound per table, whatever the trace's size.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_ipc::reader::FileReader;
use arrow_ipc::writer::FileWriter;
use arrow_schema::ArrowError;

/// In-memory bytes of one table's gathered rows before they go to a file (the map puts the file
/// on disk, load/memory.py spill_folder: its page cache is memory the system can reclaim). 64 MB
/// held up to 256 MB of four tables' rows, the map's peak at 200 MB; 16 MB 153 MiB; 8 MB 142
/// (10 alternated runs, wall 0.99x); 4 MB 141, no lower (and it read cpu_ops back twice, for
/// the nesting and for the table).
pub const SPILL_BYTES: usize = 8 << 20;

/// A file removed when its guard is dropped.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub struct Gathered {
    parts: Vec<RecordBatch>,
    bytes: usize,
    /// where a spill file goes (None: never spilled) and the bound
    spill_to: Option<(PathBuf, usize)>,
    /// the spill file and its writer (None once the file is complete)
    spilled: Option<(Removed, Option<FileWriter<BufWriter<File>>>)>,
}

fn io(e: std::io::Error) -> ArrowError {
    ArrowError::IoError(e.to_string(), e)
}

impl Gathered {
    /// Rows kept in memory, or spilled to `path` past `bound` bytes.
    pub fn new(spill_to: Option<(PathBuf, usize)>) -> Gathered {
        Gathered {
            parts: Vec::new(),
            bytes: 0,
            spill_to,
            spilled: None,
        }
    }

    pub fn push(&mut self, rows: RecordBatch) -> Result<(), ArrowError> {
        if let Some((_, writer)) = self.spilled.as_mut() {
            return match writer {
                Some(writer) => writer.write(&rows),
                None => Err(ArrowError::InvalidArgumentError(
                    "rows gathered after they were read".into(),
                )),
            };
        }
        self.bytes += rows.get_array_memory_size();
        self.parts.push(rows);
        match &self.spill_to {
            Some((path, bound)) if self.bytes > *bound => {
                let guard = Removed(path.clone());
                let file = File::create(path).map_err(io)?;
                let mut writer = FileWriter::try_new(
                    BufWriter::with_capacity(1 << 20, file),
                    &self.parts[0].schema(),
                )?;
                for part in self.parts.drain(..) {
                    writer.write(&part)?;
                }
                self.bytes = 0;
                self.spilled = Some((guard, Some(writer)));
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Whether the rows went to a file.
    pub fn spilled(&self) -> bool {
        self.spilled.is_some()
    }

    /// `parts`, of the columns `columns` (names; others may come too): rows in a file are
    /// decoded for those alone (a first pass over cpu_ops' rows reads 7 of its 18 columns).
    pub fn parts_of(
        &mut self,
        columns: &[&str],
    ) -> Result<Box<dyn Iterator<Item = Result<RecordBatch, ArrowError>> + '_>, ArrowError> {
        let Some((guard, writer)) = self.spilled.as_mut() else {
            return self.parts();
        };
        if let Some(mut writer) = writer.take() {
            writer.finish()?;
        }
        let open = || File::open(&guard.0).map(BufReader::new).map_err(io);
        let schema = FileReader::try_new(open()?, None)?.schema();
        let mut projection: Vec<usize> = columns
            .iter()
            .filter_map(|c| schema.index_of(c).ok())
            .collect();
        projection.sort_unstable();
        projection.dedup();
        Ok(Box::new(FileReader::try_new(open()?, Some(projection))?))
    }

    /// The gathered rows, in the order they came, one part at a time; they stay gathered (no
    /// row may be added after).
    pub fn parts(
        &mut self,
    ) -> Result<Box<dyn Iterator<Item = Result<RecordBatch, ArrowError>> + '_>, ArrowError> {
        match &mut self.spilled {
            None => Ok(Box::new(self.parts.iter().cloned().map(Ok))),
            Some((guard, writer)) => {
                if let Some(mut writer) = writer.take() {
                    writer.finish()?;
                }
                let file = File::open(&guard.0).map_err(io)?;
                Ok(Box::new(FileReader::try_new(BufReader::new(file), None)?))
            }
        }
    }

    /// The gathered rows, in the order they came, one part at a time.
    pub fn into_parts(
        mut self,
    ) -> Result<Box<dyn Iterator<Item = Result<RecordBatch, ArrowError>>>, ArrowError> {
        let Some((guard, writer)) = self.spilled.take() else {
            return Ok(Box::new(
                std::mem::take(&mut self.parts).into_iter().map(Ok),
            ));
        };
        if let Some(mut writer) = writer {
            writer.finish()?;
        }
        let reader = FileReader::try_new(BufReader::new(File::open(&guard.0).map_err(io)?), None)?;
        // (the guard lives as long as the iterator: the file goes once the rows are read)
        Ok(Box::new(reader.inspect(move |_| {
            let _ = &guard;
        })))
    }
}

/// The spill file of `table` in `dir`.
pub fn spill_path(dir: &Path, table: &str) -> PathBuf {
    dir.join(format!(".{table}.gathered.arrow"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int64Array;
    use std::sync::Arc;

    fn part(lo: i64) -> RecordBatch {
        RecordBatch::try_from_iter([(
            "v",
            Arc::new(Int64Array::from_iter_values(lo..lo + 100)) as _,
        )])
        .unwrap()
    }

    /// Past the bound the rows go to the file and come back in order; the file is then gone.
    #[test]
    fn spills_and_reads_back_in_order() {
        let path =
            std::env::temp_dir().join(format!("traceanalyze-gathered-{}", std::process::id()));
        let mut g = Gathered::new(Some((path.clone(), 1)));
        for i in 0..5 {
            g.push(part(i * 100)).unwrap();
        }
        assert!(g.spilled() && path.exists());
        let got: Vec<i64> = g
            .into_parts()
            .unwrap()
            .flat_map(|b| {
                let b = b.unwrap();
                let v = b
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .clone();
                v.values().to_vec()
            })
            .collect();
        assert_eq!(got, (0..500).collect::<Vec<_>>());
        assert!(!path.exists());
        let mut kept = Gathered::new(None);
        kept.push(part(0)).unwrap();
        assert!(!kept.spilled());
        assert_eq!(kept.into_parts().unwrap().count(), 1);
    }

    /// Rows dropped before they are read back leave no file.
    #[test]
    fn a_dropped_spill_leaves_no_file() {
        let path =
            std::env::temp_dir().join(format!("traceanalyze-gathered-drop-{}", std::process::id()));
        let mut g = Gathered::new(Some((path.clone(), 1)));
        g.push(part(0)).unwrap();
        assert!(path.exists());
        drop(g);
        assert!(!path.exists());
    }
}
