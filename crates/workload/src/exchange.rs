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
        path.join(crate::dir::SESSIONS)
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
    let path = out.join(crate::dir::SESSIONS);
    write_log(&sessions, LogFormat::Jsonl, &path)?;
    let meta_path = out.join(crate::dir::META);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ByteRange, Request};

    fn sessions(n: u64) -> Vec<Session> {
        (0..n)
            .map(|i| {
                let class = if i % 2 == 0 { "a" } else { "b" };
                let range = Some(ByteRange::closed(0, 100));
                let req = Request::new("/full/sd-000001.dat", range, 10.0);
                Session {
                    title: Some(1),
                    bitrate_kbps: Some(419),
                    ..Session::new(i, 0.5, class, vec![req])
                }
            })
            .collect()
    }

    #[test]
    fn clients_split_round_robin_and_import_back() {
        let dir = tempfile::tempdir().unwrap();
        let all = sessions(7);
        let files = export(&all, LogFormat::Thesis, 3, &dir.path().join("logs")).unwrap();
        assert_eq!(files.len(), 3);
        assert!(files[0].ends_with("client-00.log"));
        let first = read_sessions(&files[0], None).unwrap();
        assert_eq!(
            first.iter().map(|s| s.id).collect::<Vec<_>>(),
            vec![0, 3, 6]
        );
        assert_eq!(first[1], all[3]);

        let out = dir.path().join("imported");
        assert_eq!(import(&files[1], None, &out).unwrap(), 2);
        let back = read_sessions(&out, None).unwrap();
        assert_eq!(back, vec![all[1].clone(), all[4].clone()]);
        let meta: WorkloadMeta =
            serde_json::from_str(&std::fs::read_to_string(out.join("workload.json")).unwrap())
                .unwrap();
        assert_eq!(meta.client_classes.len(), 2);
        assert!((meta.client_classes.iter().map(|c| c.share).sum::<f64>() - 1.0).abs() < 1e-12);

        assert!(matches!(
            export(&all, LogFormat::Httperf, 1, &dir.path().join("h")),
            Err(ExchangeError::Unsupported { .. })
        ));
        assert!(matches!(
            export(&all, LogFormat::Thesis, 0, &dir.path().join("z")),
            Err(ExchangeError::Input(_))
        ));
        std::fs::write(dir.path().join("bad.log"), "/a range=9-1\n").unwrap();
        let e = read_sessions(&dir.path().join("bad.log"), None).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("bad.log:1: range: `9-1` ends before it starts"),
            "{e}"
        );
    }
}
