//! Probe sessions (`vodkit load --probe N,LEN`, seed 004 §3.1): besides the load, N separate
//! viewers each watch LEN seconds while the run is in steady state, and their quality is
//! reported apart (`results.json` → `probes`), as the seed read a cell's client-side figures
//! from 20 probes × 60 s rather than from the loading clients.
//!
//! Probe k is a copy of one of the log's sessions (spread evenly over the log, so the
//! probes mix on-demand and live viewers as the workload does), cut to LEN seconds of media
//! (a live viewer: LEN seconds of watch time). Probes start evenly spaced between the start
//! of steady state (at once after a warm start, else after the longest session could have
//! played) and the last moment a probe can still finish before the run ends.

use std::str::FromStr;
use vodkit_workload::model::Session;

/// Probe sessions get ids from here up, apart from any log's.
pub const PROBE_ID_BASE: u64 = 1 << 62;

/// `--probe N,LEN`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probes {
    pub count: u32,
    pub length_s: f64,
}

impl FromStr for Probes {
    type Err = String;
    fn from_str(text: &str) -> Result<Probes, String> {
        let bad = || format!("probe `{text}`: expected COUNT,LENGTH such as 20,60s");
        let (n, len) = text.split_once(',').ok_or_else(bad)?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        let len = len.trim();
        let length_s = vodkit_units::parse_seconds(len).map_err(|_| bad())?;
        if count == 0 || !(length_s.is_finite() && length_s > 0.0) {
            return Err(bad());
        }
        Ok(Probes { count, length_s })
    }
}

/// `session` cut to `length_s` seconds of media: requests up to the one that reaches it
/// (by their `media_s`, else by their nominal send times), or a live viewer's watch time.
pub fn cut(session: &Session, length_s: f64) -> Session {
    let mut s = session.clone();
    if let Some(view) = s.live.as_mut() {
        view.watch_s = length_s;
        return s;
    }
    // A player's own watch time, when its `play` spec gives one.
    if let Some(w) = s.play.as_mut().and_then(|p| p.watch_s.as_mut()) {
        *w = w.min(length_s);
    }
    let has_media = s.requests.iter().any(|r| r.media_s > 0.0);
    let mut keep = 0;
    let mut media = 0.0;
    for (r, due) in s
        .requests
        .iter()
        .zip(crate::warm::nominal_times(session, 0.0))
    {
        let reached = if has_media {
            media >= length_s
        } else {
            due >= length_s
        };
        if reached {
            break;
        }
        media += r.media_s;
        keep += 1;
    }
    s.requests.truncate(keep.max(1));
    s
}

/// The probe sessions and their arrivals, for a run of `span_s` seconds whose steady state
/// begins at `steady_from_s`.
pub fn plan(log: &[Session], p: &Probes, steady_from_s: f64, span_s: f64) -> Vec<(Session, f64)> {
    if log.is_empty() {
        return Vec::new();
    }
    let n = p.count as usize;
    let last = (span_s - p.length_s).max(steady_from_s);
    (0..n)
        .map(|k| {
            let template = &log[k * log.len() / n];
            let mut s = cut(template, p.length_s);
            s.id = PROBE_ID_BASE + k as u64;
            s.start_s = None;
            let at = if n == 1 {
                steady_from_s
            } else {
                steady_from_s + (last - steady_from_s) * k as f64 / (n - 1) as f64
            };
            (s, at)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use vodkit_workload::model::{LiveView, Request};

    fn vod(media: &[f64]) -> Session {
        let reqs = media
            .iter()
            .map(|&m| {
                let mut r = Request::new("/f", None, 10.0);
                r.media_s = m;
                r.pacing_s = m;
                r
            })
            .collect();
        Session::new(1, 1.0, "c", reqs)
    }

    #[test]
    fn parses_count_and_length() {
        assert_eq!(
            "20,60s".parse::<Probes>(),
            Ok(Probes {
                count: 20,
                length_s: 60.0
            })
        );
        assert_eq!("3, 1m".parse::<Probes>().unwrap().length_s, 60.0);
        assert_eq!("2,30".parse::<Probes>().unwrap().length_s, 30.0);
        for bad in ["", "20", "0,60s", "x,60s", "20,", "20,-1", "20,soon"] {
            assert!(bad.parse::<Probes>().is_err(), "{bad}");
        }
    }

    #[test]
    fn on_demand_probes_are_cut_by_media_time_and_live_ones_by_watch_time() {
        let s = vod(&[10.0; 12]);
        assert_eq!(cut(&s, 60.0).requests.len(), 6);
        assert_eq!(cut(&s, 55.0).requests.len(), 6);
        assert_eq!(cut(&s, 1.0).requests.len(), 1);
        assert_eq!(cut(&s, 500.0).requests.len(), 12);
        let mut l = Session::new(2, 1.0, "c", Vec::new());
        l.live = Some(LiveView {
            stream: 4,
            watch_s: 600.0,
        });
        assert_eq!(cut(&l, 60.0).live.unwrap().watch_s, 60.0);
    }

    #[test]
    fn probes_spread_over_the_log_and_the_steady_window() {
        let log: Vec<Session> = (0..100)
            .map(|i| {
                let mut s = vod(&[10.0; 12]);
                s.id = i;
                s
            })
            .collect();
        let p = Probes {
            count: 5,
            length_s: 60.0,
        };
        let probes = plan(&log, &p, 40.0, 300.0);
        assert_eq!(probes.len(), 5);
        let at: Vec<f64> = probes.iter().map(|x| x.1).collect();
        assert_eq!(at, vec![40.0, 90.0, 140.0, 190.0, 240.0]);
        assert!(probes.iter().all(|(s, _)| s.id >= PROBE_ID_BASE));
        assert_eq!(probes[1].0.id, PROBE_ID_BASE + 1);
        // A run too short for the probes to finish still starts them at steady state.
        let late = plan(&log, &p, 40.0, 60.0);
        assert!(late.iter().all(|x| x.1 == 40.0));
        assert!(plan(&[], &p, 0.0, 100.0).is_empty());
    }
}
