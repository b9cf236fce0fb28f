//! Parquet output (`--output-format parquet`): `chains.parquet` and `phases.parquet` with
//! the columns of `chains.csv` and `phases.csv` (docs/trace.md has the schemas), written
//! as sessions close in row groups of [`ROW_GROUP_ROWS`] rows, uncompressed.

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
