//! Writing results into an output directory: `chains.csv` and `phases.csv` stream out as
//! sessions close; the JSON summaries and the HTML report are written at the end.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use serde::Serialize;

use crate::analyze::{Analysis, ClosedSession, SessionSink};
use crate::chain::{chains_writer, ms, write_row};
use crate::phase::PhaseKind;
use crate::read::ReadSummary;

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

/// Streams chains and phases to CSV files (RFC 4180 quoting) as sessions close.
pub struct DirSink {
    chains: Option<csv::Writer<File>>,
    phases: Option<csv::Writer<File>>,
}

impl DirSink {
    pub fn create(out: &Path, chains: bool, phases: bool) -> std::io::Result<DirSink> {
        std::fs::create_dir_all(out)?;
        let mut sink = DirSink {
            chains: None,
            phases: None,
        };
        if chains {
            sink.chains = Some(chains_writer(create_file(&out.join("chains.csv"))?)?);
        }
        if phases {
            let mut w = csv::WriterBuilder::new()
                .has_headers(false)
                .buffer_capacity(1 << 20)
                .from_writer(create_file(&out.join("phases.csv"))?);
            w.write_record(PHASES_HEADER.split(','))?;
            sink.phases = Some(w);
        }
        Ok(sink)
    }

    pub fn finish(self) -> std::io::Result<()> {
        for mut w in [self.chains, self.phases].into_iter().flatten() {
            w.flush()?;
        }
        Ok(())
    }
}

impl SessionSink for DirSink {
    fn session(&mut self, s: &ClosedSession<'_>) -> std::io::Result<()> {
        let (name, chains, files) = (s.name, s.chains, s.files);
        if let Some(w) = self.chains.as_mut() {
            for c in chains {
                write_row(w, name, c, files)?;
            }
        }
        if let Some(w) = self.phases.as_mut() {
            for p in s.phases {
                let rate = match p.kind {
                    PhaseKind::Stable => files.get(chains[p.chains[0]].file).bitrate_kbps,
                    _ => None,
                };
                w.serialize(PhaseRow {
                    session: name,
                    phase: p.kind,
                    t_start: ms(p.t_start),
                    t_end: ms(p.t_end),
                    chains: p.chains.len(),
                    bytes: p.bytes,
                    bitrate_kbps: rate,
                })?;
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
            files: a.files.len(),
        }
    }
}
