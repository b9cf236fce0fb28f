//! The watcher of a run's judged sessions ([`crate::watch`]): which sessions and requests
//! count is decided from the schedule alone, as the results decide it ([`crate::steady`]):
//! judged sessions are inside the session ramps, neither prefilled nor probes, and arrive
//! once the run has settled; a timed-out request counts when it is steady (runs whose
//! sessions choose their requests have no planned steady requests, so their timeouts are
//! not counted here).

use crate::link::Link;
use crate::record::{FailureReason, SessionEnd, SessionRecord};
use crate::watch::{Tally, Watch};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Slack on the run's end (seconds): a session whose paced requests start later than the
/// end plus this cannot complete (the run cancels it first).
const END_SLACK_S: f64 = 2.0;

/// Slack on a playing session's lag (seconds) before it counts as behind: covers the
/// moment between its last response and the session's end being recorded.
const BEHIND_SLACK_S: f64 = 0.5;

/// Not started yet, or no upper bound on the session's pace.
const NEVER: u64 = u64::MAX;

/// A judged session as the watcher follows it.
struct Judged {
    /// Its paced requests start before the run ends.
    can_complete: bool,
    /// Its nominal length at most (seconds; `None`: unknown, it is never counted behind
    /// while playing).
    nominal_max_s: Option<f64>,
    /// Run time (µs) from which it is behind while still playing; [`NEVER`] until its
    /// first request is sent.
    behind_from_us: AtomicU64,
    ended: AtomicBool,
}

/// A run's watcher, shared by the sessions and the once-a-second sampler.
pub struct Watcher {
    watch: Watch,
    links: HashMap<String, Link>,
    /// By session number: `None` for sessions that are not judged.
    judged: Vec<Option<Judged>>,
    /// Steady requests by session number and request number (`None`: not planned).
    steady_requests: Option<Vec<Vec<bool>>>,
    completed: AtomicU64,
    failed: AtomicU64,
    refused: AtomicU64,
    behind: AtomicU64,
    timed_out: AtomicU64,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Watcher {{ {:?} }}", self.tally(0.0))
    }
}

impl Watcher {
    /// The watcher of `config`'s run (`None` when it has no [`Watch`]).
    pub fn of(config: &crate::config::LoadConfig) -> Option<Watcher> {
        let watch = config.watch.clone()?;
        let run = crate::steady::schedule(config);
        let steady = crate::steady::steady(config, &run);
        let settle = config.settle_s();
        let end = config
            .duration
            .map_or(f64::INFINITY, |d| d.as_secs_f64() + END_SLACK_S);
        let judged = run
            .iter()
            .enumerate()
            .map(|(i, s)| {
                if !crate::steady::judged(&steady, i, s.prefilled, s.probe, s.arrival, settle) {
                    return None;
                }
                let paced = config.player.is_none() && s.session.live.is_none();
                let link = config.links.get(s.session.class.as_str());
                Some(Judged {
                    can_complete: s.arrival + crate::warm::nominal_length(&s.session) < end,
                    nominal_max_s: paced
                        .then(|| nominal_max_s(&s.session.requests, link))
                        .flatten(),
                    behind_from_us: AtomicU64::new(NEVER),
                    ended: AtomicBool::new(false),
                })
            })
            .collect();
        Some(Watcher {
            watch,
            links: config.links.clone(),
            judged,
            steady_requests: steady.requests,
            completed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            behind: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
        })
    }

    /// Session number `index` sent its first request at `at_s` seconds of the run.
    pub fn started(&self, index: usize, at_s: f64) {
        let Some(Some(j)) = self.judged.get(index) else {
            return;
        };
        if let (Some(limit), Some(nominal)) = (self.watch.lag_limit_s, j.nominal_max_s) {
            let from = (at_s + nominal + limit + BEHIND_SLACK_S) * 1e6;
            if from.is_finite() && from >= 0.0 {
                j.behind_from_us.store(from as u64, Ordering::SeqCst);
            }
        }
    }

    /// A session ended: count it (judged sessions) and its steady timed-out requests. The
    /// counts are raised before the session is marked ended, and [`Watcher::tally`] reads
    /// the marks first, so a session ending meanwhile is counted twice at worst, never
    /// missed.
    pub fn ended(&self, s: &SessionRecord) {
        let timed_out = s
            .requests
            .iter()
            .filter(|r| {
                r.failure
                    .as_ref()
                    .is_some_and(|f| f.reason == FailureReason::Timeout)
                    && self
                        .steady_requests
                        .as_ref()
                        .and_then(|m| m.get(s.index)?.get(r.index as usize).copied())
                        .unwrap_or(false)
            })
            .count() as u64;
        self.timed_out.fetch_add(timed_out, Ordering::SeqCst);
        let Some(Some(j)) = self.judged.get(s.index) else {
            return;
        };
        match s.end {
            SessionEnd::Completed => {
                self.completed.fetch_add(1, Ordering::SeqCst);
                let link = self.links.get(s.session.class.as_str());
                let lag = crate::results::session_lag(s, link);
                if let (Some(limit), Some(lag)) = (self.watch.lag_limit_s, lag) {
                    if lag > limit + LAG_MARGIN_S {
                        self.behind.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
            SessionEnd::Failed(_) => {
                self.failed.fetch_add(1, Ordering::SeqCst);
            }
            SessionEnd::Refused => {
                self.refused.fetch_add(1, Ordering::SeqCst);
            }
            SessionEnd::Cancelled => {}
        }
        j.ended.store(true, Ordering::SeqCst);
    }

    /// The tally at `t_s` seconds of the run.
    pub fn tally(&self, t_s: f64) -> Tally {
        let now_us = (t_s.max(0.0) * 1e6) as u64;
        let (mut open, mut open_behind) = (0, 0);
        for j in self.judged.iter().flatten() {
            if !j.can_complete || j.ended.load(Ordering::SeqCst) {
                continue;
            }
            if now_us >= j.behind_from_us.load(Ordering::SeqCst) {
                open_behind += 1;
            } else {
                open += 1;
            }
        }
        Tally {
            t_s,
            completed: self.completed.load(Ordering::SeqCst),
            failed: self.failed.load(Ordering::SeqCst),
            refused: self.refused.load(Ordering::SeqCst),
            behind: self.behind.load(Ordering::SeqCst),
            timed_out_requests: self.timed_out.load(Ordering::SeqCst),
            open,
            open_behind,
        }
    }

    /// Ask the caller whether the run should end, given the tally at `t_s`.
    pub fn decide(&self, t_s: f64) -> bool {
        (self.watch.decide)(&self.tally(t_s))
    }
}

/// A completed session counts as behind only when its lag exceeds the limit by this much
/// (seconds): the results record lags in whole microseconds, so a lag a hair above the
/// limit may be reported at it.
const LAG_MARGIN_S: f64 = 1e-3;

/// The longest a session's nominal length can be (seconds): its pacing, or the transfer of
/// each response at most as large as its range over the client's link when that is longer
/// (as [`crate::results::nominal_s`] computes it from what arrived). `None` when a request
/// has no range and the link limits bandwidth (no bound on its transfer).
fn nominal_max_s(requests: &[vodkit_workload::model::Request], link: Option<&Link>) -> Option<f64> {
    let limited = link.is_some_and(|l| l.bandwidth_bps > 0);
    let sizes: Option<Vec<(f64, u64)>> = requests
        .iter()
        .map(|r| match r.range {
            Some(range) => Some((r.pacing_s, range.len())),
            None if !limited => Some((r.pacing_s, 0)),
            None => None,
        })
        .collect();
    Some(crate::results::nominal_s(&sizes?, link))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LoadConfig, Target};
    use crate::record::{Failure, RequestRecord};
    use std::sync::Arc;
    use std::time::Duration;
    use vodkit_workload::model::{ByteRange, Request, Session};

    /// Sessions of three 1 s paced requests of 1,000 bytes each, one a second.
    fn config(n: usize, duration_s: u64) -> LoadConfig {
        let sessions = (0..n)
            .map(|i| {
                let requests = (0..3)
                    .map(|k| Request {
                        pacing_s: if k == 0 { 0.0 } else { 1.0 },
                        ..Request::new("/a", Some(ByteRange::closed(0, 1000)), 5.0)
                    })
                    .collect();
                Session::new(i as u64, 1.0, "c", requests)
            })
            .collect();
        let target = Target::parse("http://127.0.0.1:1", false).unwrap();
        let mut c = LoadConfig::new(target, sessions, 1.0);
        c.duration = Some(Duration::from_secs(duration_s));
        c.watch = Some(Watch {
            lag_limit_s: Some(2.0),
            decide: Arc::new(|_| false),
        });
        c
    }

    fn record(
        c: &LoadConfig,
        index: usize,
        end: SessionEnd,
        spans: &[(f64, f64)],
    ) -> SessionRecord {
        let session = Arc::new(c.sessions[index].clone());
        let requests = spans
            .iter()
            .enumerate()
            .map(|(k, &(started, took))| RequestRecord {
                index: k as u32,
                conn: 0,
                started,
                ttfb: Some(took),
                ttlb: Some(took),
                elapsed: took,
                bytes: 1000,
                status: 206,
                failure: None,
                media_s: 0.0,
                pacing_s: session.requests[k].pacing_s,
            })
            .collect();
        SessionRecord {
            index,
            arrival: index as f64,
            ..SessionRecord::alone(session, requests, end)
        }
    }

    #[test]
    fn sessions_that_end_are_counted_by_how_they_ended() {
        // Ten sessions of 2 s of pacing, one a second, in a 20 s run: all can complete.
        let c = config(10, 20);
        let w = Watcher::of(&c).unwrap();
        let t = w.tally(0.0);
        assert_eq!((t.open, t.open_behind, t.completed), (10, 0, 0));
        // On pace: 0 s lag.
        w.ended(&record(
            &c,
            0,
            SessionEnd::Completed,
            &[(0.0, 0.1), (1.0, 0.1), (2.0, 0.1)],
        ));
        // 5 s behind.
        w.ended(&record(
            &c,
            1,
            SessionEnd::Completed,
            &[(1.0, 0.1), (2.0, 0.1), (3.0, 5.1)],
        ));
        let mut failed = record(
            &c,
            2,
            SessionEnd::Failed(FailureReason::Timeout),
            &[(2.0, 5.0)],
        );
        failed.requests[0].failure = Some(Failure {
            reason: FailureReason::Timeout,
            detail: String::new(),
        });
        w.ended(&failed);
        w.ended(&record(&c, 3, SessionEnd::Refused, &[(3.0, 0.0)]));
        let t = w.tally(5.0);
        assert_eq!(
            (
                t.completed,
                t.behind,
                t.failed,
                t.refused,
                t.timed_out_requests
            ),
            (2, 1, 1, 1, 1)
        );
        assert_eq!((t.open, t.open_behind), (6, 0));
    }

    #[test]
    fn a_playing_session_counts_behind_once_its_pace_is_past_the_limit() {
        let c = config(3, 10);
        let w = Watcher::of(&c).unwrap();
        // The first session started at 0 s: 2 s of pacing, a 2 s limit and the slack: behind from
        // 4.5 s on while still playing.
        w.started(0, 0.0);
        assert_eq!((w.tally(4.4).open, w.tally(4.4).open_behind), (3, 0));
        assert_eq!((w.tally(4.6).open, w.tally(4.6).open_behind), (2, 1));
        // Once it ends it is no longer open.
        w.ended(&record(&c, 0, SessionEnd::Cancelled, &[(0.0, 0.1)]));
        assert_eq!((w.tally(5.0).open, w.tally(5.0).open_behind), (2, 0));
    }

    #[test]
    fn sessions_whose_pacing_outlasts_the_run_cannot_complete() {
        // A 10 s run of sessions with 6 s of pacing: the last request of those arriving at
        // 6 s and later starts at 12 s or later, past the end and its 2 s of slack.
        let mut c = config(10, 10);
        for s in &mut c.sessions {
            for r in &mut s.requests[1..] {
                r.pacing_s = 3.0;
            }
        }
        let w = Watcher::of(&c).unwrap();
        let arrivals = c.schedule();
        let can = arrivals.iter().filter(|&&a| a + 6.0 < 12.0).count() as u64;
        assert!(can > 0 && can < 10, "{arrivals:?}");
        assert_eq!(w.tally(0.0).open, can);
    }

    #[test]
    fn the_nominal_bound_covers_the_transfer_over_a_slow_link() {
        let slow = Link {
            bandwidth_bps: 8000,
            one_way_delay: Duration::ZERO,
        };
        let r = |pacing_s: f64, range: Option<ByteRange>| Request {
            pacing_s,
            ..Request::new("/a", range, 5.0)
        };
        let requests = [
            r(0.0, Some(ByteRange::closed(0, 3000))),
            r(1.0, Some(ByteRange::closed(0, 1000))),
        ];
        // 3 s for the first response (longer than the 1 s pacing), 1 s for the second.
        assert_eq!(nominal_max_s(&requests, Some(&slow)), Some(4.0));
        assert_eq!(nominal_max_s(&requests, None), Some(1.0));
        let whole = [r(0.0, None)];
        assert_eq!(nominal_max_s(&whole, Some(&slow)), None);
        assert_eq!(nominal_max_s(&whole, None), Some(0.0));
    }
}
