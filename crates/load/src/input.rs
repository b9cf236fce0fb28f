//! Reading what a run replays: a session log in any dialect the workload crate knows, the
//! `workload.json` beside it (client classes, ramps) and the `warmup.jsonl` warm-up list.

use crate::config::InputError;
use std::path::{Path, PathBuf};
use vodkit_workload::logfmt::{self, LogFormat};
use vodkit_workload::model::{Request, Session, WorkloadMeta};

/// Read a session log. `format` `None` detects the dialect from the content.
pub fn read_sessions(
    path: &Path,
    format: Option<LogFormat>,
) -> Result<(Vec<Session>, LogFormat), InputError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| InputError(format!("{origin}: {e}")))?;
    let format = format.unwrap_or_else(|| LogFormat::detect(&text));
    let sessions = logfmt::parse(&text, format, &origin).map_err(|e| InputError(e.to_string()))?;
    if sessions.is_empty() {
        return Err(InputError(format!("{origin}: no sessions in the log")));
    }
    Ok((sessions, format))
}

/// `workload.json` beside the session log, if there is one.
pub fn sibling(sessions: &Path, name: &str) -> Option<PathBuf> {
    let p = sessions.parent().unwrap_or(Path::new(".")).join(name);
    p.is_file().then_some(p)
}

/// Read a `workload.json`.
pub fn read_meta(path: &Path) -> Result<WorkloadMeta, InputError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| InputError(format!("{origin}: {e}")))?;
    let meta: WorkloadMeta = serde_json::from_str(&text)
        .map_err(|e| InputError(format!("{origin}:{}: {e}", e.line())))?;
    for (i, c) in meta.client_classes.iter().enumerate() {
        if !(c.one_way_delay_s.is_finite() && (0.0..=60.0).contains(&c.one_way_delay_s)) {
            return Err(InputError(format!(
                "{origin}: client_classes[{i}] ({}): one_way_delay_s {} is not a number of seconds in 0..=60",
                c.name, c.one_way_delay_s
            )));
        }
    }
    Ok(meta)
}

/// Read up to `limit` warm-up requests (one JSON request per line, most popular first).
pub fn read_warmup(path: &Path, limit: Option<u64>) -> Result<Vec<Request>, InputError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| InputError(format!("{origin}: {e}")))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if limit.is_some_and(|l| out.len() as u64 >= l) {
            break;
        }
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let req: Request = serde_json::from_str(line)
            .map_err(|e| InputError(format!("{origin}:{}: {e}", i + 1)))?;
        if !req.path.starts_with('/') {
            return Err(InputError(format!(
                "{origin}:{}: path {:?} must start with '/'",
                i + 1,
                req.path
            )));
        }
        out.push(req);
    }
    Ok(out)
}

/// Every client class named by a session must be defined in `meta`.
pub fn check_classes(
    sessions: &[Session],
    meta: &WorkloadMeta,
    origin: &str,
) -> Result<(), InputError> {
    for s in sessions {
        if !meta.client_classes.iter().any(|c| c.name == s.class) {
            let known: Vec<&str> = meta
                .client_classes
                .iter()
                .map(|c| c.name.as_str())
                .collect();
            return Err(InputError(format!(
                "session {}: client class {:?} is not defined in {origin} (defined: {})",
                s.id,
                s.class,
                known.join(", ")
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use vodkit_workload::model::{ClientClass, Measurement};

    #[test]
    fn warmup_lists_are_limited_and_located() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("warmup.jsonl");
        let line = r#"{"path":"/v/a.dat","timeout_s":10}"#;
        std::fs::write(&p, format!("{line}\n\n{line}\n{line}\n")).unwrap();
        assert_eq!(read_warmup(&p, Some(2)).unwrap().len(), 2);
        assert_eq!(read_warmup(&p, None).unwrap().len(), 3);
        std::fs::write(&p, format!("{line}\n{{\"path\":\"x\",\"timeout_s\":1}}\n")).unwrap();
        let e = read_warmup(&p, None).unwrap_err().to_string();
        assert!(e.contains("warmup.jsonl:2"), "{e}");
        let sessions = dir.path().join("sessions.jsonl");
        assert_eq!(sibling(&sessions, "warmup.jsonl"), Some(p));
        assert_eq!(sibling(&sessions, "workload.json"), None);
    }

    #[test]
    fn undefined_client_classes_are_named() {
        let meta = WorkloadMeta {
            spec: "t".into(),
            seed: 1,
            client_classes: vec![ClientClass {
                name: "dsl".into(),
                bandwidth_bps: 1_000_000,
                one_way_delay_s: 0.05,
                share: 1.0,
            }],
            measurement: Measurement::default(),
        };
        let s = Session {
            id: 4,
            gap: 1.0,
            start_s: None,
            class: "fibre".into(),
            title: None,
            bitrate_kbps: None,
            requests: vec![],
        };
        let e = check_classes(&[s], &meta, "workload.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("session 4") && e.contains("\"fibre\"") && e.contains("dsl"),
            "{e}"
        );
    }
}
