//! Parquet output (`--output-format parquet`): `chains`, `phases`, `sessions` and
//! `requests` tables with the columns of their CSV files (docs/trace.md has the schemas),
//! written as sessions close in row groups of [`ROW_GROUP_ROWS`] rows, uncompressed, and
//! split into numbered files past a row limit (`--rows-per-file`).

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use parquet::column::writer::ColumnWriter;
use parquet::data_type::ByteArray;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

/// Rows buffered before a row group is written.
pub const ROW_GROUP_ROWS: usize = 1 << 17;

/// The schema of `chains.parquet`: `chains.csv`'s columns in order.
pub const CHAINS_SCHEMA: &str = "message chains {
  required binary session (STRING);
  required binary file (STRING);
  required int64 start_offset;
  required int64 bytes;
  required int64 requests;
  required double t_start;
  required double t_end;
  required binary kind (STRING);
  optional binary media (STRING);
  optional int64 bitrate_kbps;
  optional binary drive (STRING);
}";

/// The schema of `phases.parquet`: `phases.csv`'s columns in order.
pub const PHASES_SCHEMA: &str = "message phases {
  required binary session (STRING);
  required binary phase (STRING);
  required double t_start;
  required double t_end;
  required int64 chains;
  required int64 bytes;
  optional int64 bitrate_kbps;
}";

/// The schema of `sessions.parquet`: `sessions.csv`'s columns in order.
pub const SESSIONS_SCHEMA: &str = "message sessions {
  required binary session (STRING);
  required double t_start;
  required double t_end;
  required int64 chains;
  required int64 requests;
  required int64 bytes;
  required int64 files;
  required double transient_s;
  required double stable_s;
  required double inactive_s;
}";

/// The schema of `requests.parquet`: `requests.csv`'s columns in order.
pub const REQUESTS_SCHEMA: &str = "message requests {
  required double t_end;
  required double service_s;
  required binary session (STRING);
  required binary file (STRING);
  required int64 offset;
  required int64 length;
  required binary kind (STRING);
  required int64 bytes_sent;
}";

/// One column's values of the row group being gathered; `None` is a null.
enum Col {
    Text(Vec<Option<ByteArray>>),
    Int(Vec<Option<i64>>),
    Real(Vec<f64>),
}

/// A value of one row.
pub enum Value<'a> {
    Text(Option<&'a str>),
    Int(Option<i64>),
    Real(f64),
}

fn err(e: parquet::errors::ParquetError) -> std::io::Error {
    std::io::Error::other(e)
}

/// A table written as `STEM.parquet`, or, with a row limit, as `STEM-00000.parquet`,
/// `STEM-00001.parquet`, … of at most that many rows each (a reader globs `STEM-*.parquet`).
pub struct SplitTable {
    dir: std::path::PathBuf,
    stem: &'static str,
    schema: &'static str,
    max_rows: Option<u64>,
    current: Option<Table>,
    in_current: u64,
    files: u32,
}

impl SplitTable {
    /// The first file is created at once (so a table without rows is still a file).
    pub fn create(
        dir: &Path,
        stem: &'static str,
        schema: &'static str,
        max_rows: Option<u64>,
    ) -> std::io::Result<SplitTable> {
        let mut t = SplitTable {
            dir: dir.to_path_buf(),
            stem,
            schema,
            max_rows: max_rows.map(|m| m.max(1)),
            current: None,
            in_current: 0,
            files: 0,
        };
        t.next_file()?;
        Ok(t)
    }

    /// The name of file number `n`.
    pub fn file_name(stem: &str, max_rows: Option<u64>, n: u32) -> String {
        match max_rows {
            None => format!("{stem}.parquet"),
            Some(_) => format!("{stem}-{n:05}.parquet"),
        }
    }

    fn next_file(&mut self) -> std::io::Result<()> {
        if let Some(t) = self.current.take() {
            t.finish()?;
        }
        let name = SplitTable::file_name(self.stem, self.max_rows, self.files);
        self.current = Some(Table::create(&self.dir.join(name), self.schema)?);
        self.files += 1;
        self.in_current = 0;
        Ok(())
    }

    /// Append one row, its values in schema order.
    pub fn row(&mut self, values: &[Value<'_>]) -> std::io::Result<()> {
        if self.max_rows.is_some_and(|m| self.in_current >= m) {
            self.next_file()?;
        }
        self.in_current += 1;
        match self.current.as_mut() {
            Some(t) => t.row(values),
            None => Err(std::io::Error::other("the table is finished")),
        }
    }

    /// Write what is left and the last file's footer.
    pub fn finish(mut self) -> std::io::Result<()> {
        match self.current.take() {
            Some(t) => t.finish(),
            None => Ok(()),
        }
    }
}

/// A Parquet file written a row group at a time.
pub struct Table {
    writer: Option<SerializedFileWriter<File>>,
    cols: Vec<Col>,
    rows: usize,
}

impl Table {
    pub fn create(path: &Path, schema: &str) -> std::io::Result<Table> {
        let schema = Arc::new(parse_message_type(schema).map_err(err)?);
        let cols = schema
            .get_fields()
            .iter()
            .map(|f| match f.get_physical_type() {
                parquet::basic::Type::BYTE_ARRAY => Col::Text(Vec::new()),
                parquet::basic::Type::DOUBLE => Col::Real(Vec::new()),
                _ => Col::Int(Vec::new()),
            })
            .collect();
        let file = File::create(path)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let props = Arc::new(WriterProperties::builder().build());
        let writer = SerializedFileWriter::new(file, schema, props).map_err(err)?;
        Ok(Table {
            writer: Some(writer),
            cols,
            rows: 0,
        })
    }

    /// Append one row, its values in schema order.
    pub fn row(&mut self, values: &[Value<'_>]) -> std::io::Result<()> {
        if values.len() != self.cols.len() {
            return Err(std::io::Error::other(format!(
                "a row of {} values for {} columns",
                values.len(),
                self.cols.len()
            )));
        }
        for (c, v) in self.cols.iter_mut().zip(values) {
            match (c, v) {
                (Col::Text(c), Value::Text(t)) => {
                    c.push(t.map(|t| ByteArray::from(t.as_bytes().to_vec())))
                }
                (Col::Int(c), Value::Int(i)) => c.push(*i),
                (Col::Real(c), Value::Real(x)) => c.push(*x),
                _ => {
                    return Err(std::io::Error::other(
                        "a value of the wrong type for its column",
                    ))
                }
            }
        }
        self.rows += 1;
        if self.rows >= ROW_GROUP_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let Some(writer) = self.writer.as_mut() else {
            return Ok(());
        };
        let mut group = writer.next_row_group().map_err(err)?;
        for c in &mut self.cols {
            let Some(mut w) = group.next_column().map_err(err)? else {
                break;
            };
            // Definition levels: 1 for a value, 0 for a null (required columns have none).
            let levels =
                |present: Vec<bool>| -> Vec<i16> { present.into_iter().map(i16::from).collect() };
            let written = match (w.untyped(), c) {
                (ColumnWriter::ByteArrayColumnWriter(w), Col::Text(v)) => {
                    let def = levels(v.iter().map(Option::is_some).collect());
                    let values: Vec<ByteArray> = v.drain(..).flatten().collect();
                    let nullable = w.get_descriptor().max_def_level() > 0;
                    w.write_batch(&values, nullable.then_some(&def[..]), None)
                }
                (ColumnWriter::Int64ColumnWriter(w), Col::Int(v)) => {
                    let def = levels(v.iter().map(Option::is_some).collect());
                    let values: Vec<i64> = v.drain(..).flatten().collect();
                    let nullable = w.get_descriptor().max_def_level() > 0;
                    w.write_batch(&values, nullable.then_some(&def[..]), None)
                }
                (ColumnWriter::DoubleColumnWriter(w), Col::Real(v)) => {
                    let values = std::mem::take(v);
                    w.write_batch(&values, None, None)
                }
                _ => return Err(std::io::Error::other("a column of an unexpected type")),
            };
            written.map_err(err)?;
            w.close().map_err(err)?;
        }
        group.close().map_err(err)?;
        self.rows = 0;
        Ok(())
    }

    /// Write what is left and the footer.
    pub fn finish(mut self) -> std::io::Result<()> {
        self.flush()?;
        if let Some(w) = self.writer.take() {
            w.close().map_err(err)?;
        }
        Ok(())
    }
}
