//! Writing results into an output directory: `chains.csv` and `phases.csv` stream out as
//! sessions close; the JSON summaries and the HTML report are written at the end.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use serde::Serialize;

use crate::analyze::{Analysis, SessionSink};
use crate::chain::{write_row, ChainRec, CSV_HEADER};
use crate::files::FileTable;
use crate::phase::Phase;
use crate::read::ReadSummary;

/// Columns of `phases.csv`.
pub const PHASES_HEADER: &str = "session,phase,t_start,t_end,chains,bytes,bitrate_kbps";

fn create(path: &Path) -> std::io::Result<BufWriter<File>> {
    File::create(path)
        .map(|f| BufWriter::with_capacity(1 << 20, f))
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// Streams chains and phases to CSV files as sessions close.
pub struct DirSink {
    chains: Option<BufWriter<File>>,
    phases: Option<BufWriter<File>>,
}

impl DirSink {
    pub fn create(out: &Path, chains: bool, phases: bool) -> std::io::Result<DirSink> {
        std::fs::create_dir_all(out)?;
        let mut sink = DirSink {
            chains: None,
            phases: None,
        };
        if chains {
            let mut w = create(&out.join("chains.csv"))?;
            writeln!(w, "{CSV_HEADER}")?;
            sink.chains = Some(w);
        }
        if phases {
            let mut w = create(&out.join("phases.csv"))?;
            writeln!(w, "{PHASES_HEADER}")?;
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
    fn session(
        &mut self,
        name: &str,
        chains: &[ChainRec],
        phases: &[Phase],
        files: &FileTable,
    ) -> std::io::Result<()> {
        if let Some(w) = self.chains.as_mut() {
            for c in chains {
                write_row(w, name, c, files)?;
            }
        }
        if let Some(w) = self.phases.as_mut() {
            for p in phases {
                let rate = match p.kind {
                    crate::phase::PhaseKind::Stable => {
                        files.get(chains[p.chains[0]].file).bitrate_kbps
                    }
                    _ => None,
                };
                writeln!(
                    w,
                    "{name},{},{:.3},{:.3},{},{},{}",
                    p.kind,
                    p.t_start,
                    p.t_end,
                    p.chains.len(),
                    p.bytes,
                    rate.map(|r| r.to_string()).unwrap_or_default()
                )?;
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
