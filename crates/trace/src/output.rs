//! Writing results into an output directory: `chains.csv` and `phases.csv` stream out as
//! sessions close; the JSON summaries and the HTML report are written at the end.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use serde::Serialize;

use crate::analyze::{Analysis, ClosedSession, SessionSink};
use crate::chain::{chains_writer, kind_name, ms, write_row};
use crate::columnar::{Table, Value, CHAINS_SCHEMA, PHASES_SCHEMA};
use crate::files::media_name;
use crate::parse::ReadSummary;
use crate::phase::PhaseKind;

/// Columns of `phases.csv`.
pub const PHASES_HEADER: &str = "session,phase,t_start,t_end,chains,bytes,bitrate_kbps";

fn create_file(path: &Path) -> std::io::Result<File> {
    File::create(path)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

fn create(path: &Path) -> std::io::Result<BufWriter<File>> {
    File::create(path)
        .map(|f| BufWriter::with_capacity(1 << 20, f))
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// One `phases.csv` row.
#[derive(Serialize)]
struct PhaseRow<'a> {
    session: &'a str,
    phase: PhaseKind,
    t_start: f64,
    t_end: f64,
    chains: usize,
    bytes: u64,
    bitrate_kbps: Option<u32>,
}

/// The form of the row outputs (chains, phases).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutputFormat {
    #[default]
    Csv,
    Parquet,
}

impl std::str::FromStr for OutputFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "csv" => Ok(OutputFormat::Csv),
            "parquet" => Ok(OutputFormat::Parquet),
            _ => Err(format!(
                "unknown output format {s:?} (expected csv or parquet)"
            )),
        }
    }
}

/// One row output, as CSV or Parquet.
enum Rows {
    Csv(csv::Writer<File>),
    Parquet(Table),
}

impl Rows {
    fn finish(self) -> std::io::Result<()> {
        match self {
            Rows::Csv(mut w) => w.flush(),
            Rows::Parquet(t) => t.finish(),
        }
    }
}

/// Streams chains and phases to CSV files (RFC 4180 quoting) or Parquet files as sessions
/// close.
pub struct DirSink {
    chains: Option<Rows>,
    phases: Option<Rows>,
}

fn int(v: u64) -> Option<i64> {
    Some(i64::try_from(v).unwrap_or(i64::MAX))
}

impl DirSink {
    /// CSV outputs.
    pub fn create(out: &Path, chains: bool, phases: bool) -> std::io::Result<DirSink> {
        DirSink::create_as(out, chains, phases, OutputFormat::Csv)
    }

    pub fn create_as(
        out: &Path,
        chains: bool,
        phases: bool,
        format: OutputFormat,
    ) -> std::io::Result<DirSink> {
        std::fs::create_dir_all(out)?;
        let mut sink = DirSink {
            chains: None,
            phases: None,
        };
        if chains {
            sink.chains = Some(match format {
                OutputFormat::Csv => {
                    Rows::Csv(chains_writer(create_file(&out.join("chains.csv"))?)?)
                }
                OutputFormat::Parquet => {
                    Rows::Parquet(Table::create(&out.join("chains.parquet"), CHAINS_SCHEMA)?)
                }
            });
        }
        if phases {
            sink.phases = Some(match format {
                OutputFormat::Csv => {
                    let mut w = csv::WriterBuilder::new()
                        .has_headers(false)
                        .buffer_capacity(1 << 20)
                        .from_writer(create_file(&out.join("phases.csv"))?);
                    w.write_record(PHASES_HEADER.split(','))?;
                    Rows::Csv(w)
                }
                OutputFormat::Parquet => {
                    Rows::Parquet(Table::create(&out.join("phases.parquet"), PHASES_SCHEMA)?)
                }
            });
        }
        Ok(sink)
    }

    pub fn finish(self) -> std::io::Result<()> {
        for w in [self.chains, self.phases].into_iter().flatten() {
            w.finish()?;
        }
        Ok(())
    }
}

impl SessionSink for DirSink {
    fn session(&mut self, s: &ClosedSession<'_>) -> std::io::Result<()> {
        let (name, chains, files) = (s.name, s.chains, s.files);
        match self.chains.as_mut() {
            Some(Rows::Csv(w)) => {
                for c in chains {
                    write_row(w, name, c, files)?;
                }
            }
            Some(Rows::Parquet(t)) => {
                for c in chains {
                    let f = files.get(c.file);
                    t.row(&[
                        Value::Text(Some(name)),
                        Value::Text(Some(&f.name)),
                        Value::Int(int(c.start)),
                        Value::Int(int(c.bytes)),
                        Value::Int(int(u64::from(c.requests))),
                        Value::Real(ms(c.t0)),
                        Value::Real(ms(c.t1)),
                        Value::Text(Some(kind_name(c.kind))),
                        Value::Text(f.media.map(|_| media_name(f.media))),
                        Value::Int(f.bitrate_kbps.map(i64::from)),
                        Value::Text(f.drive.as_deref()),
                    ])?;
                }
            }
            None => {}
        }
        if let Some(rows) = self.phases.as_mut() {
            for p in s.phases {
                let rate = match p.kind {
                    PhaseKind::Stable => files.get(chains[p.chains[0]].file).bitrate_kbps,
                    _ => None,
                };
                match rows {
                    Rows::Csv(w) => w.serialize(PhaseRow {
                        session: name,
                        phase: p.kind,
                        t_start: ms(p.t_start),
                        t_end: ms(p.t_end),
                        chains: p.chains.len(),
                        bytes: p.bytes,
                        bitrate_kbps: rate,
                    })?,
                    Rows::Parquet(t) => t.row(&[
                        Value::Text(Some(name)),
                        Value::Text(Some(p.kind.name())),
                        Value::Real(ms(p.t_start)),
                        Value::Real(ms(p.t_end)),
                        Value::Int(int(p.chains.len() as u64)),
                        Value::Int(int(p.bytes)),
                        Value::Int(rate.map(i64::from)),
                    ])?,
                }
            }
        }
        Ok(())
    }
}

/// Write `value` as pretty JSON to `out/name`.
pub fn write_json<T: Serialize>(out: &Path, name: &str, value: &T) -> std::io::Result<()> {
    let path = out.join(name);
    let mut w = create(&path)?;
    serde_json::to_writer_pretty(&mut w, value).map_err(std::io::Error::other)?;
    writeln!(w)?;
    w.flush()
}

/// Facts about the pass itself (`summary.json`).
#[derive(Serialize)]
pub struct PassSummary<'a> {
    pub read: &'a ReadSummary,
    pub sessions_open_at_log_end: u64,
    pub sessions_reopened: u64,
    pub long_service_requests: u64,
    pub sessions_excluded_tail: u64,
    pub peak_open_sessions: usize,
    pub peak_open_bytes: u64,
    pub files: usize,
}

impl<'a> PassSummary<'a> {
    pub fn of(a: &'a Analysis) -> PassSummary<'a> {
        PassSummary {
            read: &a.read,
            sessions_open_at_log_end: a.open_at_end,
            sessions_reopened: a.reopened,
            long_service_requests: a.long_service,
            sessions_excluded_tail: a.excluded_tail,
            peak_open_sessions: a.peak_open_sessions,
            peak_open_bytes: a.peak_open_bytes,
            files: a.files.len(),
        }
    }
}
