//! Export a workload's sessions as httperf-family logs (optionally one per load host) and
//! import such logs as a workload directory.

use crate::error::InputError;
use crate::logfmt::{self, LogFormat, WriteError};
use crate::model::{ClientClass, Measurement, Session, WorkloadMeta};
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The input is malformed (exit code 2).
    #[error("{0}")]
    Input(#[from] InputError),
    /// The sessions cannot be expressed in the requested dialect (exit code 2).
    #[error("{path}: {problem}")]
    Unsupported { path: String, problem: String },
    /// Reading or writing files failed (exit code 1).
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ExchangeError + '_ {
    move |source| ExchangeError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Read the sessions of a workload directory (`DIR/sessions.jsonl`) or of a log file in any
/// dialect (detected when `format` is `None`).
pub fn read_sessions(
    path: &Path,
    format: Option<LogFormat>,
) -> Result<Vec<Session>, ExchangeError> {
    let file = if path.is_dir() {
        path.join("sessions.jsonl")
    } else {
        path.to_path_buf()
    };
    let text = std::fs::read(&file).map_err(io_err(&file))?;
    let text = String::from_utf8(text).map_err(|e| {
        InputError::whole(
            &file.display().to_string(),
            format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
        )
    })?;
    let format = if path.is_dir() {
        LogFormat::Jsonl
    } else {
        format.unwrap_or_else(|| LogFormat::detect(&text))
    };
    Ok(logfmt::parse(&text, format, &file.display().to_string())?)
}

/// Write `sessions` in `format` to `out`; with `clients > 1`, split them round-robin into
/// `out/client-00.log`, `out/client-01.log`, ... (one per load host). Returns the files.
pub fn export(
    sessions: &[Session],
    format: LogFormat,
    clients: usize,
    out: &Path,
) -> Result<Vec<PathBuf>, ExchangeError> {
    if clients == 0 {
        return Err(InputError::whole("--clients", "expected at least 1").into());
    }
    let mut files = Vec::new();
    if clients == 1 {
        write_log(sessions, format, out)?;
        files.push(out.to_path_buf());
        return Ok(files);
    }
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    let width = (clients - 1).to_string().len().max(2);
    for c in 0..clients {
        let part: Vec<Session> = sessions.iter().skip(c).step_by(clients).cloned().collect();
        let path = out.join(format!("client-{c:0width$}.log"));
        write_log(&part, format, &path)?;
        files.push(path);
    }
    Ok(files)
}

fn write_log(sessions: &[Session], format: LogFormat, path: &Path) -> Result<(), ExchangeError> {
    let mut w = BufWriter::new(File::create(path).map_err(io_err(path))?);
    logfmt::write(sessions, format, &mut w).map_err(|e| match e {
        WriteError::Io(source) => ExchangeError::Io {
            path: path.display().to_string(),
            source,
        },
        WriteError::Unsupported { .. } => ExchangeError::Unsupported {
            path: path.display().to_string(),
            problem: format!("cannot write as {format}: {e}"),
        },
    })
}

/// Import a log into workload directory `out`: `sessions.jsonl`, and a `workload.json`
/// listing the sessions' client classes (unlimited bandwidth, no delay, shares from the
/// log) unless `out` already has one. Returns the number of sessions.
pub fn import(file: &Path, format: Option<LogFormat>, out: &Path) -> Result<usize, ExchangeError> {
    let sessions = read_sessions(file, format)?;
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    let path = out.join("sessions.jsonl");
    write_log(&sessions, LogFormat::Jsonl, &path)?;
    let meta_path = out.join("workload.json");
    if !meta_path.exists() {
        let meta = imported_meta(&sessions, &file.display().to_string());
        let text = serde_json::to_string_pretty(&meta).expect("plain data serializes") + "\n";
        std::fs::write(&meta_path, text).map_err(io_err(&meta_path))?;
    }
    Ok(sessions.len())
}

fn imported_meta(sessions: &[Session], origin: &str) -> WorkloadMeta {
    let mut classes: Vec<(String, u64)> = Vec::new();
    for s in sessions {
        match classes.iter_mut().find(|(n, _)| *n == s.class) {
            Some((_, c)) => *c += 1,
            None => classes.push((s.class.clone(), 1)),
        }
    }
    let n = sessions.len().max(1) as f64;
    WorkloadMeta {
        spec: format!("imported from {origin}"),
        seed: 0,
        client_classes: classes
            .into_iter()
            .map(|(name, c)| ClientClass {
                name,
                bandwidth_bps: 0,
                one_way_delay_s: 0.0,
                share: c as f64 / n,
            })
            .collect(),
        measurement: Measurement::default(),
    }
}
