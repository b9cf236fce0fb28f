//! Reading what a run replays: a session log in any dialect the workload crate knows, and
//! checking its client classes against a `workload.json` (which, like `warmup.jsonl`, is
//! read by `vodkit_workload::WorkloadDir`).

use crate::config::InputError;
use std::path::Path;
use vodkit_workload::logfmt::{self, LogFormat};
use vodkit_workload::model::{Session, WorkloadMeta};

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
                "session id {}: client class {:?} is not defined in {origin} (defined: {})",
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
            live: None,
            play: None,
        };
        let e = check_classes(&[s], &meta, "workload.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("session id 4") && e.contains("\"fibre\"") && e.contains("dsl"),
            "{e}"
        );
    }
}
