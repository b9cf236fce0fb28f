//! Failover in a cluster point (`cluster:…:failover`): one origin killed at the middle of
//! the point, and what became of the sessions that were on it and of everyone else's.

use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// How one session of the point's run ended, and when it was active (seconds of the run's
/// clock), as the failover count reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionFate {
    /// The session's id, as the origins log it (`X-Session-Id`).
    pub id: String,
    pub arrival_s: f64,
    /// When its last request ended (or was given up).
    pub last_s: f64,
    pub end: Fate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Completed,
    Failed,
    /// Turned away with `503`.
    Refused,
    /// Cut off by the end of the run.
    Cancelled,
}

/// What failover cost at one point (bench.json `metrics.failover`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FailoverFigures {
    /// The origin killed (`o1`).
    pub origin: String,
    /// When it was killed, seconds of the run's clock (`None`: the run ended first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub killed_at_s: Option<f64>,
    /// Sessions under way on the killed origin when it died (in its access log, arrived
    /// before and still playing at the kill).
    pub sessions_on_origin: u64,
    /// Of those, the ones that played to the end anyway (their next requests went to
    /// another origin, or a retry did).
    pub recovered: u64,
    /// Of those, the ones that failed or were turned away.
    pub lost: u64,
    /// Sessions under way at or after the kill that never touched the killed origin.
    pub others: u64,
    /// Of those, the ones that failed or were turned away (target 0).
    pub others_failed: u64,
    /// Requests retried on a fresh connection during the run, and those the retry completed.
    pub retried_requests: u64,
    pub recovered_requests: u64,
}

/// Count what the kill at `killed_at_s` (`None`: it never happened) did to `sessions`,
/// given the ids in the killed origin's access log. Sessions cut off by the end of the run
/// count in neither group.
pub fn tally(
    origin: &str,
    killed_at_s: Option<f64>,
    on_origin: &HashSet<String>,
    sessions: &[SessionFate],
) -> FailoverFigures {
    let mut f = FailoverFigures {
        origin: origin.to_string(),
        killed_at_s,
        ..Default::default()
    };
    let Some(at) = killed_at_s else {
        return f;
    };
    let unserved = |s: &SessionFate| matches!(s.end, Fate::Failed | Fate::Refused);
    for s in sessions.iter().filter(|s| s.end != Fate::Cancelled) {
        if on_origin.contains(&s.id) {
            if s.arrival_s <= at && s.last_s >= at {
                f.sessions_on_origin += 1;
                if unserved(s) {
                    f.lost += 1;
                } else {
                    f.recovered += 1;
                }
            }
        } else if s.last_s >= at {
            f.others += 1;
            f.others_failed += u64::from(unserved(s));
        }
    }
    f
}

/// How a session of `vodkit load` ended, for [`tally`].
pub fn fate_of(r: &vodkit_load::record::SessionRecord) -> SessionFate {
    use vodkit_load::record::SessionEnd;
    let last_s = r
        .requests
        .iter()
        .map(|q| q.started + q.elapsed)
        .fold(r.arrival, f64::max);
    SessionFate {
        id: r.session.id.to_string(),
        arrival_s: r.arrival,
        last_s,
        end: match r.end {
            SessionEnd::Completed => Fate::Completed,
            SessionEnd::Failed(_) => Fate::Failed,
            SessionEnd::Refused => Fate::Refused,
            SessionEnd::Cancelled => Fate::Cancelled,
        },
    }
}

/// The point's note on failover.
pub fn note(f: &FailoverFigures) -> String {
    let Some(at) = f.killed_at_s else {
        return format!(
            "failover: origin {} was not killed (the run ended before its middle, or this load driver cannot kill)",
            f.origin
        );
    };
    format!(
        "failover: origin {} killed at {at:.0} s; {} sessions were on it: {} recovered, {} lost; {} sessions elsewhere, {} failed; {} requests retried on a fresh connection, {} of them completed",
        f.origin,
        f.sessions_on_origin,
        f.recovered,
        f.lost,
        f.others,
        f.others_failed,
        f.retried_requests,
        f.recovered_requests
    )
}

/// When to kill: the middle of the part of the run that is judged, from when it settles
/// (`settle_s`) to its end (`end_s`), seconds of the run's clock.
pub fn kill_at_s(settle_s: f64, end_s: f64) -> f64 {
    (settle_s + end_s.max(settle_s)) / 2.0
}

/// The session ids in an access log (any format `vodkit trace` reads).
pub fn sessions_in_log(path: &Path) -> Result<HashSet<String>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let mut ids = HashSet::new();
    vodkit_trace::read::read_log(
        std::io::BufReader::new(file),
        vodkit_trace::LogFormat::Auto,
        |r| {
            ids.insert(r.session.to_string());
        },
    )
    .map_err(|e| format!("reading {}: {e}", path.display()))?;
    Ok(ids)
}

/// A cluster's origin to kill during a point: how to kill it, its access log, and when the
/// kill happened.
#[derive(Clone)]
pub struct Kill {
    /// The origin's name (`o1`).
    pub origin: String,
    pub access_log: PathBuf,
    killer: Arc<dyn Fn() + Send + Sync>,
    done: Arc<Mutex<Option<SystemTime>>>,
}

impl Kill {
    /// `killer` kills the origin's processes (the launcher knows them).
    pub fn new(origin: String, killer: Arc<dyn Fn() + Send + Sync>, access_log: PathBuf) -> Kill {
        Kill {
            origin,
            access_log,
            killer,
            done: Arc::default(),
        }
    }

    /// Kill the origin now (once) and note when.
    pub fn fire(&self) {
        let mut done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        if done.is_none() {
            (self.killer)();
            *done = Some(SystemTime::now());
        }
    }

    /// The action to hand the load generator.
    pub fn action(&self) -> Arc<dyn Fn() + Send + Sync> {
        let me = self.clone();
        Arc::new(move || me.fire())
    }

    /// When the origin was killed (`None`: not yet).
    pub fn killed_at(&self) -> Option<SystemTime> {
        *self.done.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(id: u32, arrival_s: f64, last_s: f64, end: Fate) -> SessionFate {
        SessionFate {
            id: id.to_string(),
            arrival_s,
            last_s,
            end,
        }
    }

    #[test]
    fn sessions_on_the_killed_origin_are_told_from_the_rest() {
        let on: HashSet<String> = ["1", "2", "3", "4", "9"].map(String::from).into();
        let sessions = [
            // On the origin when it died at 50 s: two recover, one fails, one is refused.
            s(1, 10.0, 80.0, Fate::Completed),
            s(2, 40.0, 90.0, Fate::Completed),
            s(3, 45.0, 52.0, Fate::Failed),
            s(4, 48.0, 51.0, Fate::Refused),
            // Was on it but had finished before: not counted.
            s(9, 5.0, 30.0, Fate::Completed),
            // Elsewhere: under way at or after the kill, one failed; one ended before.
            s(5, 20.0, 70.0, Fate::Completed),
            s(6, 60.0, 95.0, Fate::Failed),
            s(7, 1.0, 20.0, Fate::Failed),
            // Cut off by the end of the run: in neither group.
            s(8, 55.0, 100.0, Fate::Cancelled),
        ];
        let f = tally("o1", Some(50.0), &on, &sessions);
        assert_eq!(f.origin, "o1");
        assert_eq!(
            (f.sessions_on_origin, f.recovered, f.lost),
            (4, 2, 2),
            "{f:?}"
        );
        assert_eq!((f.others, f.others_failed), (2, 1), "{f:?}");
        // No kill, nothing to count.
        let none = tally("o1", None, &on, &sessions);
        assert_eq!((none.sessions_on_origin, none.others), (0, 0));
    }

    #[test]
    fn the_kill_falls_in_the_middle_of_the_judged_part() {
        assert_eq!(kill_at_s(0.0, 60.0), 30.0);
        assert_eq!(kill_at_s(20.0, 60.0), 40.0);
        assert_eq!(kill_at_s(20.0, 10.0), 20.0);
    }

    #[test]
    fn an_access_log_gives_its_session_ids() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("access.log");
        std::fs::write(
            &log,
            "#vodkit-access-log v1\n\
             1.0\t0.001\t10.0.0.1\t1\t1\t7\tGET\t/t1/v800/seg-1.m4s\t-\t200\t1000\t0\n\
             2.0\t0.001\t10.0.0.1\t2\t1\t8\tGET\t/t2/v800/seg-1.m4s\t-\t200\t1000\t0\n",
        )
        .unwrap();
        let ids = sessions_in_log(&log).unwrap();
        assert!(ids.contains("7") && ids.contains("8"), "{ids:?}");
        let e = sessions_in_log(&dir.path().join("none.log")).unwrap_err();
        assert!(e.contains("none.log") && !e.contains('\n'), "{e}");
    }
}
