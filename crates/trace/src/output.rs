//! Writing results into an output directory: the row tables (`chains`, `phases`,
//! `sessions`, `requests`, as CSV or Parquet) stream out as sessions close and requests are
//! read; the JSON summaries and the HTML report are written at the end.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use serde::Serialize;
use strum::{EnumString, VariantNames};

use crate::analyze::{Analysis, ClosedSession, SessionSink};
use crate::chain::{kind_name, ms, write_row, CSV_HEADER};
use crate::columnar::{
    SplitTable, Value, CHAINS_SCHEMA, PHASES_SCHEMA, REQUESTS_SCHEMA, SESSIONS_SCHEMA,
};
use crate::files::media_name;
use crate::parse::ReadSummary;
use crate::phase::PhaseKind;
use crate::record::LogRequest;

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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, EnumString, VariantNames)]
#[strum(serialize_all = "lowercase", parse_err_ty = String, parse_err_fn = unknown_format)]
pub enum OutputFormat {
    #[default]
    Csv,
    Parquet,
}

fn unknown_format(s: &str) -> String {
    vodkit_units::unknown_choice("output format", s, OutputFormat::VARIANTS)
}

/// One row output, as CSV or Parquet.
enum Rows {
    Csv(csv::Writer<File>),
    Parquet(SplitTable),
}

impl Rows {
    fn finish(self) -> std::io::Result<()> {
        match self {
            Rows::Csv(mut w) => w.flush(),
            Rows::Parquet(t) => t.finish(),
        }
    }
}

/// Columns of `sessions.csv`.
pub const SESSIONS_HEADER: &str =
    "session,t_start,t_end,chains,requests,bytes,files,transient_s,stable_s,inactive_s";

/// Columns of `requests.csv`.
pub const REQUESTS_HEADER: &str = "t_end,service_s,session,file,offset,length,kind,bytes_sent";

/// Which row tables a pass writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tables {
    /// `chains.csv|parquet`: one row per chain.
    pub chains: bool,
    /// `phases.csv|parquet`: one row per phase.
    pub phases: bool,
    /// `sessions.csv|parquet`: one row per session.
    pub sessions: bool,
    /// `requests.csv|parquet`: every analyzed request, in the order the analysis read them.
    pub requests: bool,
}

/// Streams the row tables to CSV files (RFC 4180 quoting) or Parquet files: chains,
/// phases and sessions as sessions close, requests as they are read.
pub struct DirSink {
    chains: Option<Rows>,
    phases: Option<Rows>,
    sessions: Option<Rows>,
    requests: Option<Rows>,
}

fn int(v: u64) -> Option<i64> {
    Some(i64::try_from(v).unwrap_or(i64::MAX))
}

/// A CSV writer for `path` whose first line is `header`.
fn csv_with_header(path: &Path, header: &str) -> std::io::Result<csv::Writer<File>> {
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .buffer_capacity(1 << 20)
        .from_writer(create_file(path)?);
    w.write_record(header.split(','))?;
    Ok(w)
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
        let tables = Tables {
            chains,
            phases,
            ..Tables::default()
        };
        DirSink::create_tables(out, tables, format, None)
    }

    /// The `tables` in `format`; Parquet tables split past `rows_per_file` rows.
    pub fn create_tables(
        out: &Path,
        tables: Tables,
        format: OutputFormat,
        rows_per_file: Option<u64>,
    ) -> std::io::Result<DirSink> {
        std::fs::create_dir_all(out)?;
        let open = |on: bool, stem: &'static str, header: &str, schema: &'static str| {
            if !on {
                return Ok(None);
            }
            Ok::<_, std::io::Error>(Some(match format {
                OutputFormat::Csv => {
                    Rows::Csv(csv_with_header(&out.join(format!("{stem}.csv")), header)?)
                }
                OutputFormat::Parquet => {
                    Rows::Parquet(SplitTable::create(out, stem, schema, rows_per_file)?)
                }
            }))
        };
        Ok(DirSink {
            chains: open(tables.chains, "chains", CSV_HEADER, CHAINS_SCHEMA)?,
            phases: open(tables.phases, "phases", PHASES_HEADER, PHASES_SCHEMA)?,
            sessions: open(
                tables.sessions,
                "sessions",
                SESSIONS_HEADER,
                SESSIONS_SCHEMA,
            )?,
            requests: open(
                tables.requests,
                "requests",
                REQUESTS_HEADER,
                REQUESTS_SCHEMA,
            )?,
        })
    }

    pub fn finish(self) -> std::io::Result<()> {
        for w in [self.chains, self.phases, self.sessions, self.requests]
            .into_iter()
            .flatten()
        {
            w.finish()?;
        }
        Ok(())
    }
}

/// One `sessions.csv` row.
#[derive(Serialize)]
struct SessionRow<'a> {
    session: &'a str,
    t_start: f64,
    t_end: f64,
    chains: usize,
    requests: u64,
    bytes: u64,
    files: usize,
    transient_s: f64,
    stable_s: f64,
    inactive_s: f64,
}

impl<'a> SessionRow<'a> {
    fn of(s: &ClosedSession<'a>) -> SessionRow<'a> {
        let mut files: Vec<u32> = s.chains.iter().map(|c| c.file).collect();
        files.sort_unstable();
        files.dedup();
        let time_in = |k: PhaseKind| {
            ms(s.phases
                .iter()
                .filter(|p| p.kind == k)
                .map(|p| p.duration_s())
                .sum::<f64>())
        };
        SessionRow {
            session: s.name,
            t_start: ms(s.chains.iter().map(|c| c.t0).fold(f64::INFINITY, f64::min)),
            t_end: ms(s
                .chains
                .iter()
                .map(|c| c.t1)
                .fold(f64::NEG_INFINITY, f64::max)),
            chains: s.chains.len(),
            requests: s.chains.iter().map(|c| u64::from(c.requests)).sum(),
            bytes: s.chains.iter().map(|c| c.bytes).sum(),
            files: files.len(),
            transient_s: time_in(PhaseKind::Transient),
            stable_s: time_in(PhaseKind::Stable),
            inactive_s: time_in(PhaseKind::Inactive),
        }
    }
}

/// One `requests.csv` row.
#[derive(Serialize)]
struct RequestRow<'a> {
    t_end: f64,
    service_s: f64,
    session: &'a str,
    file: &'a str,
    offset: u64,
    length: u64,
    kind: &'static str,
    bytes_sent: u64,
}

impl SessionSink for DirSink {
    fn request(&mut self, r: &LogRequest<'_>) -> std::io::Result<()> {
        let row = RequestRow {
            t_end: ms(r.done_s),
            service_s: ms(r.service_s),
            session: &r.session,
            file: r.file,
            offset: r.offset,
            length: r.extent,
            kind: kind_name(r.kind),
            bytes_sent: r.bytes_sent,
        };
        match self.requests.as_mut() {
            Some(Rows::Csv(w)) => w.serialize(row)?,
            Some(Rows::Parquet(t)) => t.row(&[
                Value::Real(row.t_end),
                Value::Real(row.service_s),
                Value::Text(Some(row.session)),
                Value::Text(Some(row.file)),
                Value::Int(int(row.offset)),
                Value::Int(int(row.length)),
                Value::Text(Some(row.kind)),
                Value::Int(int(row.bytes_sent)),
            ])?,
            None => {}
        }
        Ok(())
    }

    fn wants_requests(&self) -> bool {
        self.requests.is_some()
    }

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
                        Value::Text(Some(&files.name(c.file))),
                        Value::Int(int(c.start)),
                        Value::Int(int(c.bytes)),
                        Value::Int(int(u64::from(c.requests))),
                        Value::Real(ms(c.t0)),
                        Value::Real(ms(c.t1)),
                        Value::Text(Some(kind_name(c.kind))),
                        Value::Text(f.media.map(|_| media_name(f.media))),
                        Value::Int(f.bitrate_kbps.map(i64::from)),
                        Value::Text(files.drive(c.file)),
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
        if let Some(rows) = self.sessions.as_mut() {
            if !s.chains.is_empty() {
                let row = SessionRow::of(s);
                match rows {
                    Rows::Csv(w) => w.serialize(&row)?,
                    Rows::Parquet(t) => t.row(&[
                        Value::Text(Some(row.session)),
                        Value::Real(row.t_start),
                        Value::Real(row.t_end),
                        Value::Int(int(row.chains as u64)),
                        Value::Int(int(row.requests)),
                        Value::Int(int(row.bytes)),
                        Value::Int(int(row.files as u64)),
                        Value::Real(row.transient_s),
                        Value::Real(row.stable_s),
                        Value::Real(row.inactive_s),
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
    /// Open sessions spilled to disk to stay within `--memory`, bytes and run files
    /// written, and sessions read back.
    pub spilled_sessions: u64,
    pub spilled_bytes: u64,
    pub spill_runs: u64,
    pub sessions_reloaded: u64,
    pub files: usize,
    /// Bytes the file table and the per-file state held at the end (an estimate).
    pub file_table_bytes: u64,
    /// Bytes the chain and session statistics held at the end (an estimate), and the bytes
    /// of chain lengths written to disk past their budget.
    pub statistics_bytes: u64,
    pub statistics_spilled_bytes: u64,
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
            spilled_sessions: a.spill.sessions,
            spilled_bytes: a.spill.bytes,
            spill_runs: a.spill.runs,
            sessions_reloaded: a.spill.reloaded,
            files: a.files.len(),
            file_table_bytes: a.file_table_bytes,
            statistics_bytes: a.statistics_bytes,
            statistics_spilled_bytes: a.statistics_spilled_bytes,
        }
    }
}
