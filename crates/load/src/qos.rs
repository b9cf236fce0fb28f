//! Client-side quality of a session from a playout-buffer model (seed 004, section 2.2).
//!
//! Each completed response adds its seconds of content to the buffer when its last byte
//! arrives. Playback starts once the prebuffer (the leading unpaced requests) has
//! arrived; from then on the buffer drains in real time. When it runs dry, playback stalls
//! (a rebuffer event) until the next response arrives; that response was late by the
//! length of the stall. A failure before playback starts is a startup failure, after it an
//! in-play failure.

use crate::record::{SessionEnd, SessionRecord};

/// Where in its life a session failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailurePhase {
    Startup,
    InPlay,
}

/// The modelled viewing experience of one session.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Playout {
    /// From the first request to the start of playback; `None` if it never started.
    pub startup_delay_s: Option<f64>,
    pub rebuffer_events: u32,
    pub rebuffer_s: f64,
    /// Seconds of content played.
    pub play_s: f64,
    /// Lateness of each response that arrived after its content was due.
    pub late_s: Vec<f64>,
    pub failure: Option<FailurePhase>,
}

impl Playout {
    /// Waiting (startup plus stalls) under 3% of play time and no failure.
    pub fn acceptable(&self) -> bool {
        self.failure.is_none()
            && self.play_s > 0.0
            && self.startup_delay_s.unwrap_or(f64::INFINITY) + self.rebuffer_s < 0.03 * self.play_s
    }
}

/// Seconds of content of request `i`: from the log, or from its bytes and the session's
/// bit rate.
fn media_of(rec: &SessionRecord, i: usize) -> f64 {
    let r = &rec.requests[i];
    if r.media_s > 0.0 {
        return r.media_s;
    }
    match rec.session.bitrate_kbps {
        Some(kbps) if kbps > 0 => r.bytes as f64 * 8.0 / (f64::from(kbps) * 1000.0),
        _ => 0.0,
    }
}

/// Model a session; `None` when the log gives no way to know seconds of content, or when
/// the session was cancelled by the end of the run.
pub fn playout(rec: &SessionRecord) -> Option<Playout> {
    if rec.end == SessionEnd::Cancelled || rec.requests.is_empty() {
        return None;
    }
    let planned = &rec.session.requests;
    let has_media =
        planned.iter().any(|r| r.media_s > 0.0) || rec.session.bitrate_kbps.is_some_and(|k| k > 0);
    if !has_media {
        return None;
    }
    let prebuffer = planned
        .iter()
        .skip(1)
        .position(|r| r.pacing_s > 0.0)
        .map_or(planned.len(), |p| p + 1);
    let failed = matches!(rec.end, SessionEnd::Failed(_));
    let start = rec.requests[0].started;
    let prebuffer_done =
        rec.requests.len() >= prebuffer && rec.requests[..prebuffer].iter().all(|r| r.completed());
    let mut out = Playout::default();
    if !prebuffer_done {
        out.failure = failed.then_some(FailurePhase::Startup);
        return Some(out);
    }
    let t_play = rec.requests[..prebuffer]
        .iter()
        .filter_map(|r| r.finished_at())
        .fold(start, f64::max);
    out.startup_delay_s = Some(t_play - start);
    let mut arrivals: Vec<(f64, f64)> = rec
        .requests
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.finished_at().map(|t| (t, media_of(rec, i))))
        .collect();
    arrivals.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut buffer = 0.0;
    let mut clock = t_play;
    for (t, media) in arrivals {
        if t > clock {
            let span = t - clock;
            if buffer >= span {
                buffer -= span;
                out.play_s += span;
            } else {
                out.play_s += buffer;
                let stall = span - buffer;
                // A stall shorter than a millisecond is float noise, not a rebuffer.
                if stall > 1e-3 {
                    out.rebuffer_events += 1;
                    out.rebuffer_s += stall;
                    out.late_s.push(stall);
                }
                buffer = 0.0;
            }
            clock = t;
        }
        buffer += media;
    }
    out.play_s += buffer;
    if failed {
        out.failure = Some(FailurePhase::InPlay);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{FailureReason, RequestRecord};
    use std::sync::Arc;
    use vodkit_workload::model::{Request, Session};

    fn session(pacing: &[f64]) -> Arc<Session> {
        Arc::new(Session {
            id: 1,
            gap: 1.0,
            start_s: None,
            class: "c".into(),
            title: None,
            bitrate_kbps: None,
            requests: pacing
                .iter()
                .map(|&p| Request {
                    path: "/a".into(),
                    range: None,
                    pacing_s: p,
                    timeout_s: 10.0,
                    conn: 0,
                    media_s: 10.0,
                })
                .collect(),
        })
    }

    fn done(index: u32, started: f64, took: f64) -> RequestRecord {
        RequestRecord {
            index,
            conn: 0,
            started,
            ttfb: Some(took / 2.0),
            ttlb: Some(took),
            elapsed: took,
            bytes: 100,
            status: 200,
            failure: None,
            media_s: 10.0,
            pacing_s: 0.0,
        }
    }

    fn record(
        session: Arc<Session>,
        requests: Vec<RequestRecord>,
        end: SessionEnd,
    ) -> SessionRecord {
        SessionRecord {
            index: 0,
            session,
            arrival: 0.0,
            end,
            requests,
            skipped: 0,
            connections_opened: 1,
            reconnects: 0,
        }
    }

    #[test]
    fn smooth_session_has_no_stalls() {
        // Three prebuffer chunks of 10 s, then one every 10 s, each taking 1 s.
        let s = session(&[0.0, 0.0, 0.0, 10.0, 10.0]);
        let reqs = vec![
            done(0, 0.0, 1.0),
            done(1, 1.0, 1.0),
            done(2, 2.0, 1.0),
            done(3, 12.0, 1.0),
            done(4, 22.0, 1.0),
        ];
        let p = playout(&record(s, reqs, SessionEnd::Completed)).unwrap();
        assert_eq!(p.startup_delay_s, Some(3.0));
        assert_eq!(p.rebuffer_events, 0);
        assert!((p.play_s - 50.0).abs() < 1e-9);
        assert!(
            !p.acceptable(),
            "3 s of startup for 50 s of play is above 3%"
        );
    }

    #[test]
    fn late_chunk_causes_one_stall_of_its_lateness() {
        // One 10 s prebuffer chunk, then a chunk that arrives 15 s after playback started.
        let s = session(&[0.0, 10.0]);
        let reqs = vec![done(0, 0.0, 0.5), done(1, 10.0, 5.5)];
        let p = playout(&record(s, reqs, SessionEnd::Completed)).unwrap();
        assert_eq!(p.rebuffer_events, 1);
        assert!((p.rebuffer_s - 5.0).abs() < 1e-9);
        assert_eq!(p.late_s.len(), 1);
        assert!((p.play_s - 20.0).abs() < 1e-9);
    }

    #[test]
    fn failures_are_split_by_phase() {
        let s = session(&[0.0, 0.0, 10.0]);
        let mut failed = done(1, 1.0, 1.0);
        failed.ttlb = None;
        failed.failure = Some(crate::record::Failure::new(FailureReason::Timeout, "t"));
        let p = playout(&record(
            s.clone(),
            vec![done(0, 0.0, 1.0), failed],
            SessionEnd::Failed(FailureReason::Timeout),
        ))
        .unwrap();
        assert_eq!(p.failure, Some(FailurePhase::Startup));
        assert_eq!(p.startup_delay_s, None);
        let mut late_fail = done(2, 12.0, 1.0);
        late_fail.ttlb = None;
        late_fail.failure = Some(crate::record::Failure::new(FailureReason::Reset, "r"));
        let p = playout(&record(
            s,
            vec![done(0, 0.0, 1.0), done(1, 1.0, 1.0), late_fail],
            SessionEnd::Failed(FailureReason::Reset),
        ))
        .unwrap();
        assert_eq!(p.failure, Some(FailurePhase::InPlay));
        assert!(!p.acceptable());
    }
}
