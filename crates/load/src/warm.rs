//! Warm start: begin a run as if it had already been running, so the server carries its
//! steady-state concurrency from the first second instead of after the longest session.
//!
//! A cold run at `λ` sessions/s reaches its steady concurrency (`λ` × mean session length)
//! only after the longest session has had time to play out; with 40 s titles and 60 s
//! points, two thirds of a point were spent below the load it was supposed to measure, and
//! measured capacities came out above what the disk could deliver. A warm start shifts the
//! arrival schedule `horizon` seconds into the past: sessions whose arrival falls before
//! zero have already been playing, so they start at the first of their requests that is
//! due at or after zero (the earlier ones were "sent before the run") and continue with
//! their normal pacing. Sessions arriving at or after zero are unchanged. These *prefilled*
//! sessions put their real load on the server (their requests count in throughput and
//! latency) but are not judged as sessions: they never started up in front of the
//! measurement.
//!
//! Request `j` of a session arriving at `a` is due at `a + Σ pacing(1..=j)` (the first
//! request is due at arrival; see [`vodkit_workload::model::Request::pacing_s`]). This is
//! the nominal schedule of a player that keeps up; one that fell behind would be later.

use vodkit_workload::model::Session;

/// How far back the schedule is shifted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WarmStart {
    /// A cold start: every session starts from its first request.
    Off,
    /// The longest nominal session length among the scheduled sessions.
    Auto,
    Seconds(f64),
}

impl WarmStart {
    /// Parse `off`, `auto` or a duration (`40`, `40s`, `1m30s`).
    pub fn parse(text: &str) -> Result<WarmStart, String> {
        match text.trim() {
            "off" | "0" => Ok(WarmStart::Off),
            "auto" => Ok(WarmStart::Auto),
            t => match vodkit_units::parse_seconds(t) {
                Ok(s) => Ok(if s == 0.0 {
                    WarmStart::Off
                } else {
                    WarmStart::Seconds(s)
                }),
                _ => Err(format!(
                    "warm start `{text}`: expected off, auto or a number of seconds (40, 40s)"
                )),
            },
        }
    }

    /// The horizon in seconds for these scheduled sessions.
    pub fn horizon(self, sessions: &[Session]) -> f64 {
        match self {
            WarmStart::Off => 0.0,
            WarmStart::Seconds(s) => s,
            WarmStart::Auto => sessions.iter().map(nominal_length).fold(0.0, f64::max),
        }
    }
}

/// Share of a warm-started run during which arriving sessions are not judged (at least
/// until every prefilled session has asked again): see [`settle_s`].
pub const SETTLE_FRACTION: f64 = 0.25;

/// When a warm-started run has settled, in seconds from its start (0 without prefilled
/// sessions): the latest first request of the prefilled sessions (`prefilled_first`), and
/// at least [`SETTLE_FRACTION`] of the run's `run_s` seconds. Sessions arriving earlier are
/// not judged, and probes start then.
///
/// A warm start gives the server its steady concurrency at once, but not its steady
/// memory: no prefilled session has read-ahead in memory, so all of them miss within one
/// request period, and the disk's backlog takes a while to drain (the longer the busier
/// the disk). On the `memory` scenario's 256 MiB cell at 8 sessions/s every request that
/// waited more than half a second did so in the first 15 s of a 63 s point (docs/load.md,
/// "Warm start"); sessions arriving then were judged on a restart, not on the rate.
pub fn settle_s(prefilled_first: impl IntoIterator<Item = f64>, run_s: f64) -> f64 {
    prefilled_first
        .into_iter()
        .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.max(t))))
        .map_or(0.0, |latest| latest.max(SETTLE_FRACTION * run_s))
}

/// When each request of a session arriving at `arrival` is due: arrival plus the pacing of
/// the requests after the first, up to it (the schedule of a player that keeps up).
pub fn nominal_times(session: &Session, arrival: f64) -> impl Iterator<Item = f64> + '_ {
    session
        .requests
        .iter()
        .enumerate()
        .scan(arrival, |t, (j, r)| {
            if j > 0 {
                *t += r.pacing_s;
            }
            Some(*t)
        })
}

/// Seconds from a session's arrival to the nominal start of its last request (a live
/// viewer: its watch time).
pub fn nominal_length(session: &Session) -> f64 {
    if let Some(view) = &session.live {
        return view.watch_s;
    }
    nominal_times(session, 0.0).last().unwrap_or(0.0)
}

/// Where a scheduled session begins in a warm-started run.
#[derive(Clone, Debug, PartialEq)]
pub enum Start {
    /// Arrives at or after zero: unchanged, at this time.
    Whole(f64),
    /// Was already playing: starts at `arrival` with its requests from index `from` on.
    Tail { arrival: f64, from: usize },
    /// A live viewer already watching: joins the live edge at zero and watches for the
    /// `remaining_s` seconds it had left.
    Joined { remaining_s: f64 },
    /// Finished before the run started.
    Gone,
}

/// Place a session scheduled at `arrival` in a run that starts `horizon` seconds into the
/// schedule.
pub fn place(session: &Session, arrival: f64, horizon: f64) -> Start {
    let shifted = arrival - horizon;
    if shifted >= 0.0 {
        return Start::Whole(shifted);
    }
    if let Some(view) = &session.live {
        let remaining_s = shifted + view.watch_s;
        return if remaining_s > 0.0 {
            Start::Joined { remaining_s }
        } else {
            Start::Gone
        };
    }
    // The first request was due at `shifted`, before zero, so a tail starts at j > 0.
    nominal_times(session, shifted)
        .enumerate()
        .find(|&(_, due)| due >= 0.0)
        .map_or(Start::Gone, |(from, arrival)| Start::Tail { arrival, from })
}

/// The part of `session` a [`Start::Tail`] plays: its requests from `from` on.
/// A live viewer who joins with `remaining_s` of its watch time left.
pub fn joined(session: &Session, remaining_s: f64) -> Session {
    let mut s = session.clone();
    if let Some(view) = s.live.as_mut() {
        view.watch_s = remaining_s;
    }
    s
}

pub fn tail(session: &Session, from: usize) -> Session {
    Session {
        requests: session.requests[from.min(session.requests.len())..].to_vec(),
        ..session.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vodkit_workload::model::Request;

    fn session(pacing: &[f64]) -> Session {
        Session {
            id: 7,
            gap: 1.0,
            start_s: None,
            class: "c".into(),
            title: None,
            bitrate_kbps: None,
            requests: pacing
                .iter()
                .enumerate()
                .map(|(i, &p)| Request {
                    path: format!("/f#{i}"),
                    range: None,
                    pacing_s: p,
                    timeout_s: 10.0,
                    conn: 0,
                    media_s: 4.0,
                })
                .collect(),
            live: None,
            play: None,
        }
    }

    #[test]
    fn parses_off_auto_and_seconds() {
        assert_eq!(WarmStart::parse("off"), Ok(WarmStart::Off));
        assert_eq!(WarmStart::parse("0"), Ok(WarmStart::Off));
        assert_eq!(WarmStart::parse("auto"), Ok(WarmStart::Auto));
        assert_eq!(WarmStart::parse("40s"), Ok(WarmStart::Seconds(40.0)));
        assert_eq!(WarmStart::parse("2.5"), Ok(WarmStart::Seconds(2.5)));
        for bad in ["", "-1", "soon", "nan", "inf"] {
            let e = WarmStart::parse(bad).unwrap_err();
            assert!(e.contains("expected off, auto"), "{bad}: {e}");
        }
    }

    #[test]
    fn auto_horizon_is_the_longest_nominal_session() {
        // Pacing of the first request is ignored: it is due at arrival.
        let s = [
            session(&[9.0, 4.0, 4.0]),
            session(&[0.0, 0.0, 4.0, 4.0, 4.0]),
        ];
        assert_eq!(nominal_length(&s[0]), 8.0);
        assert_eq!(WarmStart::Auto.horizon(&s), 12.0);
        assert_eq!(WarmStart::Off.horizon(&s), 0.0);
        assert_eq!(WarmStart::Seconds(3.0).horizon(&s), 3.0);
    }

    #[test]
    fn sessions_are_placed_by_their_nominal_request_times() {
        // Requests due at a, a, a+4, a+8, a+12 (two prebuffer requests, then paced).
        let s = session(&[0.0, 0.0, 4.0, 4.0, 4.0]);
        // Arrives after the horizon: unchanged, shifted.
        assert_eq!(place(&s, 25.0, 20.0), Start::Whole(5.0));
        assert_eq!(place(&s, 20.0, 20.0), Start::Whole(0.0));
        // Arrived 6 s before the run: requests at -6, -6, -2 were sent; +2 is the first.
        assert_eq!(
            place(&s, 14.0, 20.0),
            Start::Tail {
                arrival: 2.0,
                from: 3
            }
        );
        // Arrived exactly 8 s before: request 3 is due at zero.
        assert_eq!(
            place(&s, 12.0, 20.0),
            Start::Tail {
                arrival: 0.0,
                from: 3
            }
        );
        // Arrived 12.5 s before: its last request was due at -0.5; nothing left.
        assert_eq!(place(&s, 7.5, 20.0), Start::Gone);
        let t = tail(&s, 3);
        assert_eq!(t.requests.len(), 2);
        assert_eq!(t.requests[0].path, "/f#3");
        assert_eq!(t.id, 7);
    }

    #[test]
    fn a_warm_run_settles_after_its_prefilled_sessions_asked_again() {
        // No prefilled session: a cold run is judged from the start.
        assert_eq!(settle_s([], 60.0), 0.0);
        // Their next requests all come within 2.5 s: a quarter of a 60 s run.
        assert_eq!(settle_s([0.4, 2.5, 1.0], 60.0), 15.0);
        // Players that ask every 20 s: not before the last of them has asked.
        assert_eq!(settle_s([3.0, 20.0], 60.0), 20.0);
    }

    #[test]
    fn a_warm_run_starts_near_steady_concurrency() {
        // Sessions of 10 requests every 4 s (36 s long) arriving once a second for 200 s:
        // steady concurrency is about 37. A cold start has 1 at t=0; a warm one ~37.
        let s = session(&[0.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0]);
        let horizon = WarmStart::Auto.horizon(std::slice::from_ref(&s));
        assert_eq!(horizon, 36.0);
        // A prefilled session is playing from zero (waiting for its next request).
        let active_at = |t: f64, h: f64| {
            (0..200)
                .filter(|&i| match place(&s, i as f64, h) {
                    Start::Whole(a) => a <= t && t <= a + nominal_length(&s),
                    Start::Tail { arrival, from } => t <= arrival + nominal_length(&tail(&s, from)),
                    Start::Joined { .. } | Start::Gone => false,
                })
                .count()
        };
        assert!(active_at(0.5, 0.0) <= 2);
        let warm = active_at(0.5, horizon);
        assert!((35..=38).contains(&warm), "{warm}");
        assert_eq!(active_at(60.0, horizon), active_at(96.0, 0.0));
    }

    #[test]
    fn a_live_viewer_already_watching_joins_with_the_time_it_had_left() {
        let mut s = session(&[]);
        s.live = Some(vodkit_workload::model::LiveView {
            stream: 3,
            watch_s: 60.0,
        });
        assert_eq!(nominal_length(&s), 60.0);
        assert_eq!(WarmStart::Auto.horizon(std::slice::from_ref(&s)), 60.0);
        assert_eq!(place(&s, 70.0, 60.0), Start::Whole(10.0));
        assert_eq!(place(&s, 20.0, 60.0), Start::Joined { remaining_s: 20.0 });
        assert_eq!(place(&s, 0.0, 60.0), Start::Gone);
        let j = joined(&s, 20.0);
        assert_eq!(j.live.map(|v| (v.stream, v.watch_s)), Some((3, 20.0)));
    }
}
