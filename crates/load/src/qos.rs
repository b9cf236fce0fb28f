//! Client-side quality of a session from a player model (seed 004, sections 2.2 and 3):
//! start-up delay, stalls, failures by phase, and whether the session was acceptable.
//!
//! The player adds each response's seconds of content to its buffer as the bytes arrive
//! (evenly from the response's first to its last body byte, as over a shaped link).
//! Playback starts once `startup_buffer_s` seconds are buffered (or everything the session
//! fetches, if that is less), while the remaining requests keep filling the buffer; the
//! start-up delay runs from the first request being sent to that moment. Playback drains
//! the buffer in real time; when the playhead catches the buffered content, playback
//! stalls (a rebuffer event) until `startup_buffer_s` seconds are buffered again. A quiet
//! spell in the log (no request outstanding) longer than the content buffered when it
//! began is the viewer pausing, not waiting: playback stops for it and nothing in it
//! counts. A failure before playback starts is a start-up failure, after it an in-play
//! failure. The model is a pure function of the session's record (the caller's clock).

use crate::record::{SessionEnd, SessionRecord};

/// Start-up buffer of current players (dash.js and hls.js start after about 2 s).
pub const DEFAULT_STARTUP_BUFFER_S: f64 = 2.0;
/// Seed 004 section 3: waiting (start-up, initial buffering, rebuffering) under 3% of
/// play time.
pub const WAIT_SHARE: f64 = 0.03;
/// Seed 004 section 3.1: client statistics come from probes that each play 60 s. A
/// shorter session is held to the waiting one probe may have (3% of 60 s = 1.8 s).
pub const PROBE_S: f64 = 60.0;

/// Stalls shorter than this are float noise, not rebuffers.
const MIN_STALL_S: f64 = 1e-3;
const EPS: f64 = 1e-9;

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
    /// Length of each stall: how late the content the player was waiting for arrived.
    pub late_s: Vec<f64>,
    pub failure: Option<FailurePhase>,
}

impl Playout {
    /// Start-up delay plus stall time the session may have and still be acceptable:
    /// 3% of its play time, or of one 60 s probe if it played less.
    pub fn allowed_wait_s(&self) -> f64 {
        WAIT_SHARE * self.play_s.max(PROBE_S)
    }

    /// Played less than one probe, so judged against the probe's allowance.
    pub fn short(&self) -> bool {
        self.play_s < PROBE_S
    }

    /// Seed 004's rule: no failure, and start-up plus stalls under the allowance.
    pub fn acceptable(&self) -> bool {
        self.failure.is_none()
            && self.play_s > 0.0
            && self.startup_delay_s.unwrap_or(f64::INFINITY) + self.rebuffer_s
                < self.allowed_wait_s()
    }
}

/// Seconds of content of request `i` as planned: its `media_s`, else its byte count at
/// the session's bit rate (the planned range, or the bytes received).
fn planned_media(rec: &SessionRecord, i: usize) -> f64 {
    let planned = &rec.session.requests[i];
    if planned.media_s > 0.0 {
        return planned.media_s;
    }
    let bytes = planned
        .range
        .map(|r| r.len())
        .or_else(|| rec.requests.get(i).map(|r| r.bytes))
        .unwrap_or(0);
    match rec.session.bitrate_kbps {
        Some(kbps) if kbps > 0 => bytes as f64 * 8.0 / (f64::from(kbps) * 1000.0),
        _ => 0.0,
    }
}

/// Seconds of content of a completed request: from the record, else as planned.
fn received_media(rec: &SessionRecord, i: usize) -> f64 {
    let r = &rec.requests[i];
    if r.media_s > 0.0 {
        return r.media_s;
    }
    match rec.session.bitrate_kbps {
        Some(kbps) if kbps > 0 => r.bytes as f64 * 8.0 / (f64::from(kbps) * 1000.0),
        _ => 0.0,
    }
}

/// Something that changes the player's inputs at an instant.
#[derive(Clone, Copy, Debug)]
enum Change {
    /// Content starts arriving at this many content seconds per second.
    Start(f64),
    /// ...and stops.
    Stop(f64),
    /// Content arrives at once.
    Jump(f64),
    /// A request is sent (+1) or ends (-1).
    Outstanding(i32),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Starting,
    Playing,
    Stalled { since: f64, waited: f64 },
}

/// The player's state while the model steps through the session.
struct Player {
    startup_buffer_s: f64,
    /// Content seconds the session fetches in all.
    total: f64,
    t_first: f64,
    /// Content seconds arrived and played so far.
    arrived: f64,
    played: f64,
    mode: Mode,
    out: Playout,
}

impl Player {
    /// Buffered content needed to start or resume.
    fn need(&self) -> f64 {
        self.startup_buffer_s.min(self.total - self.played).max(0.0)
    }

    fn buffer(&self) -> f64 {
        (self.arrived - self.played).max(0.0)
    }

    fn start_playing(&mut self, t: f64) {
        match self.mode {
            Mode::Starting => self.out.startup_delay_s = Some(t - self.t_first),
            Mode::Stalled { since, waited } => {
                let stall = waited + (t - since);
                if stall > MIN_STALL_S {
                    self.out.rebuffer_events += 1;
                    self.out.rebuffer_s += stall;
                    self.out.late_s.push(stall);
                }
            }
            Mode::Playing => {}
        }
        self.mode = Mode::Playing;
    }

    /// Let `[t0, t1)` pass with content arriving at `rate`; `outstanding` requests are in
    /// flight throughout.
    fn advance(&mut self, t0: f64, t1: f64, rate: f64, outstanding: i32) {
        if t1 <= t0 {
            return;
        }
        let mut t = t0;
        if self.mode != Mode::Playing && self.need() - self.buffer() <= EPS {
            // Enough arrived at once at `t0`.
            self.start_playing(t0);
        }
        let quiet = outstanding <= 0;
        if quiet && self.mode != Mode::Starting {
            // Nothing asked for: a pause when the buffer cannot last the spell.
            let paused = match self.mode {
                Mode::Playing => self.buffer() + EPS < t1 - t0,
                _ => true,
            };
            if paused {
                if let Mode::Stalled { since, waited } = self.mode {
                    self.mode = Mode::Stalled {
                        since: t1,
                        waited: waited + (t0 - since),
                    };
                }
                return;
            }
        }
        while t < t1 {
            match self.mode {
                Mode::Starting | Mode::Stalled { .. } => {
                    let short = self.need() - self.buffer();
                    if short <= EPS {
                        self.start_playing(t);
                        continue;
                    }
                    if rate <= 0.0 {
                        break;
                    }
                    let ready = t + short / rate;
                    if ready >= t1 {
                        break;
                    }
                    self.arrived += rate * (ready - t);
                    t = ready;
                    self.start_playing(t);
                }
                Mode::Playing => {
                    let left = self.total - self.played;
                    if left <= EPS {
                        // Everything played; later arrivals add nothing.
                        self.arrived += rate * (t1 - t);
                        return;
                    }
                    let buffer = self.buffer();
                    // Time until the playhead catches the buffer (or the content ends).
                    let dry = if rate >= 1.0 {
                        f64::INFINITY
                    } else {
                        buffer / (1.0 - rate)
                    };
                    let step = (t1 - t).min(dry).min(left);
                    self.arrived += rate * step;
                    self.played += step;
                    t += step;
                    if t < t1 && step >= dry - EPS && self.total - self.played > EPS {
                        self.mode = Mode::Stalled {
                            since: t,
                            waited: 0.0,
                        };
                    }
                }
            }
        }
        if t < t1 {
            self.arrived += rate * (t1 - t);
        }
    }
}

/// Model a session with playback starting at `startup_buffer_s` seconds buffered; `None`
/// when the log gives no way to know seconds of content, or when the session was
/// cancelled by the end of the run.
pub fn playout(rec: &SessionRecord, startup_buffer_s: f64) -> Option<Playout> {
    if rec.end == SessionEnd::Cancelled || rec.requests.is_empty() {
        return None;
    }
    let total: f64 = (0..rec.session.requests.len())
        .map(|i| planned_media(rec, i))
        .sum();
    if total <= 0.0 {
        return None;
    }
    let mut changes: Vec<(f64, Change)> = Vec::with_capacity(rec.requests.len() * 4);
    for (i, r) in rec.requests.iter().enumerate() {
        let end = r.started + r.elapsed.max(0.0);
        changes.push((r.started, Change::Outstanding(1)));
        changes.push((end, Change::Outstanding(-1)));
        let Some(last) = r.finished_at().filter(|_| r.completed()) else {
            continue;
        };
        let media = received_media(rec, i);
        if media <= 0.0 {
            continue;
        }
        let first = r.ttfb.map_or(last, |f| (r.started + f).min(last));
        if last - first > EPS {
            let rate = media / (last - first);
            changes.push((first, Change::Start(rate)));
            changes.push((last, Change::Stop(rate)));
        } else {
            changes.push((last, Change::Jump(media)));
        }
    }
    changes.sort_by(|a, b| a.0.total_cmp(&b.0));
    let t_first = rec.requests[0].started;
    let mut player = Player {
        startup_buffer_s: startup_buffer_s.max(0.0),
        total,
        t_first,
        arrived: 0.0,
        played: 0.0,
        mode: Mode::Starting,
        out: Playout::default(),
    };
    let (mut rate, mut arriving, mut outstanding, mut t) = (0.0f64, 0u32, 0i32, t_first);
    let mut i = 0;
    while i < changes.len() {
        let at = changes[i].0;
        player.advance(t, at, rate.max(0.0), outstanding);
        t = t.max(at);
        while i < changes.len() && changes[i].0 <= at {
            match changes[i].1 {
                Change::Start(r) => {
                    rate += r;
                    arriving += 1;
                }
                Change::Stop(r) => {
                    rate -= r;
                    arriving = arriving.saturating_sub(1);
                }
                Change::Jump(m) => player.arrived += m,
                Change::Outstanding(n) => outstanding += n,
            }
            i += 1;
        }
        if arriving == 0 {
            // No float residue from adding and removing rates.
            rate = 0.0;
        }
    }
    // Nothing arrives any more: start or resume if enough came, then play the buffer out.
    if player.mode != Mode::Playing && player.need() - player.buffer() <= EPS {
        player.start_playing(t);
    }
    if player.mode == Mode::Playing {
        player.played += player.buffer().min(player.total - player.played).max(0.0);
    }
    let mut out = player.out;
    out.play_s = player.played;
    if matches!(rec.end, SessionEnd::Failed(_)) {
        out.failure = Some(if out.startup_delay_s.is_some() {
            FailurePhase::InPlay
        } else {
            FailurePhase::Startup
        });
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
        let requests = pacing
            .iter()
            .map(|&p| Request {
                pacing_s: p,
                media_s: 10.0,
                ..Request::new("/a", None, 10.0)
            })
            .collect();
        Arc::new(Session::new(1, 1.0, "c", requests))
    }

    /// A completed request sent at `started` whose body arrives over `[first, took]`
    /// seconds after it.
    fn done_over(index: u32, started: f64, first: f64, took: f64) -> RequestRecord {
        RequestRecord {
            index,
            conn: 0,
            started,
            ttfb: Some(first),
            ttlb: Some(took),
            elapsed: took,
            bytes: 100,
            status: 200,
            failure: None,
            media_s: 10.0,
            pacing_s: 0.0,
        }
    }

    fn done(index: u32, started: f64, took: f64) -> RequestRecord {
        done_over(index, started, took / 2.0, took)
    }

    /// A request sent at `started` that failed for `reason` after 1 s.
    fn failed(index: u32, started: f64, reason: FailureReason) -> RequestRecord {
        RequestRecord {
            ttlb: None,
            failure: Some(crate::record::Failure::new(reason, reason.as_str())),
            ..done(index, started, 1.0)
        }
    }

    /// The modelled playout of `session`, which made `requests` and ended as `end`, with a
    /// start-up buffer of `buffer_s` seconds.
    fn played(
        session: Arc<Session>,
        requests: Vec<RequestRecord>,
        end: SessionEnd,
        buffer_s: f64,
    ) -> Playout {
        playout(&SessionRecord::alone(session, requests, end), buffer_s).unwrap()
    }

    /// [`played`] for a session paced by `pacing` that completed.
    fn completed(pacing: &[f64], requests: Vec<RequestRecord>, buffer_s: f64) -> Playout {
        played(session(pacing), requests, SessionEnd::Completed, buffer_s)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn startup_waits_for_the_startup_buffer_not_the_prebuffer() {
        // Three unpaced 10 s chunks, each taking 4 s with its bytes arriving over the
        // last 3.9 s (a slow link): 2 s of content is buffered 0.1 + 0.78 s after the
        // first request, long before the prebuffer's 12 s.
        let s = session(&[0.0, 0.0, 0.0]);
        let reqs = vec![
            done_over(0, 0.0, 0.1, 4.0),
            done_over(1, 4.0, 0.1, 4.0),
            done_over(2, 8.0, 0.1, 4.0),
        ];
        let p = played(s.clone(), reqs.clone(), SessionEnd::Completed, 2.0);
        let d = p.startup_delay_s.unwrap();
        assert!(close(d, 0.1 + 3.9 * 0.2), "startup {d}");
        assert_eq!(p.rebuffer_events, 0, "{p:?}");
        assert!(close(p.play_s, 30.0));
        assert!(p.acceptable(), "{p:?}");
        // A bigger buffer waits longer: 15 s of content is there 0.1 + 3.9 * 0.5 s into
        // the second response.
        let p = played(s, reqs, SessionEnd::Completed, 15.0);
        assert!(
            close(p.startup_delay_s.unwrap(), 4.0 + 0.1 + 3.9 * 0.5),
            "{p:?}"
        );
    }

    #[test]
    fn startup_buffer_longer_than_the_session_waits_for_all_of_it() {
        let p = completed(&[0.0], vec![done_over(0, 0.0, 0.5, 2.5)], 30.0);
        assert!(close(p.startup_delay_s.unwrap(), 2.5), "{p:?}");
        assert!(close(p.play_s, 10.0));
    }

    #[test]
    fn smooth_paced_session_has_no_stalls() {
        // Three prebuffer chunks of 10 s, then one every 10 s, each taking 1 s.
        let reqs = vec![
            done(0, 0.0, 1.0),
            done(1, 1.0, 1.0),
            done(2, 2.0, 1.0),
            done(3, 12.0, 1.0),
            done(4, 22.0, 1.0),
        ];
        let p = completed(&[0.0, 0.0, 0.0, 10.0, 10.0], reqs, 2.0);
        // 2 s of the first 10 s chunk arrive 0.1 s into its 0.5 s body.
        assert!(close(p.startup_delay_s.unwrap(), 0.6), "{p:?}");
        assert_eq!(p.rebuffer_events, 0);
        assert!(close(p.play_s, 50.0));
        assert!(p.short() && p.acceptable(), "{p:?}");
    }

    #[test]
    fn late_chunk_stalls_until_the_buffer_refills() {
        // One 10 s chunk arriving instantly at 0.5 s, then one sent at 10 s whose body
        // arrives from 15 s to 15.5 s: playback runs dry at 10.5 s and resumes once 2 s
        // are buffered again, at 15.1 s.
        let reqs = vec![done_over(0, 0.0, 0.5, 0.5), done_over(1, 10.0, 5.0, 5.5)];
        let p = completed(&[0.0, 10.0], reqs, 2.0);
        assert_eq!(p.startup_delay_s, Some(0.5));
        assert_eq!(p.rebuffer_events, 1);
        assert!(close(p.rebuffer_s, 4.6), "{p:?}");
        assert_eq!(p.late_s.len(), 1);
        assert!(close(p.play_s, 20.0));
        assert!(!p.acceptable(), "5.1 s of waiting is above 1.8 s");
    }

    #[test]
    fn link_slower_than_the_bit_rate_stalls_repeatedly() {
        // One 10 s chunk whose body takes 20 s: content arrives at half speed.
        let p = completed(&[0.0], vec![done_over(0, 0.0, 0.0, 20.0)], 2.0);
        // Start at 4 s; dry at 8 s (4 s played); 2 s more buffered at 12 s; dry again at
        // 16 s; the last 2 s are all there at 20 s.
        assert!(close(p.startup_delay_s.unwrap(), 4.0));
        assert_eq!(p.rebuffer_events, 2, "{p:?}");
        assert!(close(p.rebuffer_s, 8.0));
        assert!(close(p.play_s, 10.0));
        // Everything arrives at 20 s and the last content plays right after.
        assert!(p.startup_delay_s.unwrap() + p.rebuffer_s + 10.0 <= 20.0 + 2.0 + 1e-6);
        assert!(!p.acceptable());
    }

    #[test]
    fn stall_ends_when_a_late_chunk_lands_even_before_a_quiet_spell() {
        // 10 s landing at 0.5 s; a chunk sent at 10 s landing at once at 14 s (a 3.5 s
        // stall); then nothing outstanding until 20 s, which the 10 s buffered at 14 s
        // outlast, so playback resumes at 14 s and goes on through the spell; the chunk
        // sent at 20 s lands at 26 s, 2 s after the buffer ran dry at 24 s.
        let reqs = vec![
            done_over(0, 0.0, 0.5, 0.5),
            done_over(1, 10.0, 4.0, 4.0),
            done_over(2, 20.0, 6.0, 6.0),
        ];
        let p = completed(&[0.0, 10.0, 10.0], reqs, 2.0);
        assert_eq!(p.rebuffer_events, 2, "{p:?}");
        assert!(close(p.late_s[0], 3.5) && close(p.late_s[1], 2.0), "{p:?}");
        assert!(close(p.play_s, 30.0));
    }

    #[test]
    fn quiet_spell_longer_than_the_buffer_is_a_pause() {
        // 10 s of content, then nothing asked for 100 s (the viewer paused), then 10 s
        // more that arrives promptly: no stall, and all 20 s are played.
        let reqs = vec![done_over(0, 0.0, 0.1, 0.2), done_over(1, 100.0, 0.1, 0.2)];
        let p = completed(&[0.0, 100.0], reqs, 2.0);
        assert_eq!(p.rebuffer_events, 0, "{p:?}");
        assert!(close(p.play_s, 20.0));
        assert!(p.acceptable());
    }

    #[test]
    fn judged_against_three_percent_or_one_probe() {
        let p = |startup: f64, play: f64| Playout {
            startup_delay_s: Some(startup),
            play_s: play,
            ..Playout::default()
        };
        assert!(p(1.7, 10.0).acceptable(), "short sessions get 1.8 s");
        assert!(!p(1.9, 10.0).acceptable());
        assert!(p(5.9, 200.0).acceptable(), "3% of 200 s is 6 s");
        assert!(!p(6.1, 200.0).acceptable());
        assert!(!p(0.0, 0.0).acceptable(), "nothing played");
        assert!(p(1.0, 59.0).short() && !p(1.0, 60.0).short());
    }

    #[test]
    fn failures_are_split_by_phase() {
        let s = session(&[0.0, 0.0, 10.0]);
        let p = played(
            s.clone(),
            vec![failed(0, 0.0, FailureReason::Timeout)],
            SessionEnd::Failed(FailureReason::Timeout),
            2.0,
        );
        assert_eq!(p.failure, Some(FailurePhase::Startup));
        assert_eq!(p.startup_delay_s, None);
        let p = played(
            s,
            vec![
                done(0, 0.0, 1.0),
                done(1, 1.0, 1.0),
                failed(2, 12.0, FailureReason::Reset),
            ],
            SessionEnd::Failed(FailureReason::Reset),
            2.0,
        );
        assert_eq!(p.failure, Some(FailurePhase::InPlay));
        assert!(!p.acceptable());
    }

    #[test]
    fn sessions_without_content_seconds_are_not_modelled() {
        let mut s = (*session(&[0.0])).clone();
        s.requests[0].media_s = 0.0;
        let mut r = done(0, 0.0, 1.0);
        r.media_s = 0.0;
        assert!(playout(
            &SessionRecord::alone(Arc::new(s), vec![r], SessionEnd::Completed),
            2.0
        )
        .is_none());
    }
}
