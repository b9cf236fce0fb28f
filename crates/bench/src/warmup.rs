//! Steady state before a point is judged: the fast-forward warm-up and the evidence that it
//! worked.
//!
//! Before each judged point the session list's preceding window is played `speed` times
//! faster: the emulated drive's clock runs `speed` times faster (`timing SCALE` on its
//! control file), the load arrives `speed` times faster with paced requests, media time and
//! client links scaled alike, and the server's prefetch engine clock is told the same rate
//! (`POST /clock?rate=R` on its admin listener, where it has one). Each server's own policy
//! then fills its memory as it would over the window at real speed, in `1/speed` of the
//! time. The window is the longer of two longest sessions (so the concurrency, which starts
//! from zero, reaches its steady level and has turned over) and `fill` memory budgets worth
//! of requested bytes (so the page cache has been filled and turned over). It ends with the
//! last viewers still playing, and the judged run resumes them mid-session at their offset
//! (the load generator's warm start at the window's length), so the judged window starts
//! with a warm memory and no empty-cache cliff.
//!
//! [`Steadiness`] is the evidence: the judged window's two halves compared (delivered and
//! disk MB/s, and the share of bytes served from memory); [`play_history`] is the procedure
//! over the experiment's traits.

use serde::{Deserialize, Serialize};
use std::time::Duration;
use vodkit_workload::model::Session;

/// How much faster the history is played by default.
pub const DEFAULT_SPEED: f64 = 8.0;
/// Memory budgets worth of requested bytes the history holds at least, by default.
pub const DEFAULT_FILL: f64 = 3.0;
/// Largest speed accepted (the drive's and the engine's clock scale limit).
pub const MAX_SPEED: f64 = 1000.0;

/// A fast-forward: the history's speed and length in memory budgets.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FastForward {
    pub speed: f64,
    pub fill: f64,
}

impl FastForward {
    pub const DEFAULT: FastForward = FastForward {
        speed: DEFAULT_SPEED,
        fill: DEFAULT_FILL,
    };
}

impl std::fmt::Display for FastForward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{},fill={}", self.speed, self.fill)
    }
}

/// `--fast-forward` as given: `auto` (on where it is the default), `off`, or
/// `SPEED[,fill=X]`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum FastForwardChoice {
    #[default]
    Auto,
    Off,
    On(FastForward),
}

impl std::str::FromStr for FastForwardChoice {
    type Err = String;
    fn from_str(text: &str) -> Result<FastForwardChoice, String> {
        let bad = |why: &str| format!("--fast-forward `{text}`: {why}");
        match text.trim() {
            "auto" => return Ok(FastForwardChoice::Auto),
            "off" => return Ok(FastForwardChoice::Off),
            _ => {}
        }
        let mut parts = text.trim().split(',');
        let speed: f64 = parts
            .next()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| bad("expected SPEED[,fill=X], auto or off (e.g. 8,fill=3)"))?;
        if !(1.0..=MAX_SPEED).contains(&speed) {
            return Err(bad(&format!("SPEED must lie in 1..={MAX_SPEED}")));
        }
        let mut ff = FastForward {
            speed,
            fill: DEFAULT_FILL,
        };
        for p in parts {
            match p.trim().split_once('=') {
                Some(("fill", v)) => {
                    ff.fill = v
                        .trim()
                        .parse()
                        .ok()
                        .filter(|x: &f64| x.is_finite() && *x >= 0.0)
                        .ok_or_else(|| bad("fill=X must be a non-negative number"))?;
                }
                _ => return Err(bad(&format!("unknown part `{p}` (expected fill=X)"))),
            }
        }
        Ok(FastForwardChoice::On(ff))
    }
}

impl std::fmt::Display for FastForwardChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FastForwardChoice::Auto => f.write_str("auto"),
            FastForwardChoice::Off => f.write_str("off"),
            FastForwardChoice::On(ff) => ff.fmt(f),
        }
    }
}

impl Serialize for FastForwardChoice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl FastForwardChoice {
    /// The fast-forward a run gets. `auto` is [`FastForward::DEFAULT`] where the history
    /// can be played faster and memory is what it fills: an emulated drive (whose clock the
    /// bench scales), a memory budget, and no CPU quota (a quota caps the sped-up server).
    pub fn resolve(
        self,
        emulated_drive: bool,
        memory: Option<u64>,
        server_cpus: Option<f64>,
    ) -> Option<FastForward> {
        match self {
            FastForwardChoice::Off => None,
            FastForwardChoice::On(ff) => Some(ff),
            FastForwardChoice::Auto => {
                (emulated_drive && memory.is_some() && server_cpus.is_none())
                    .then_some(FastForward::DEFAULT)
            }
        }
    }
}

/// The history before one judged point, in the session schedule's seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    pub speed: f64,
    /// Seconds of schedule the history covers (played in `window_s / speed`).
    pub window_s: f64,
    /// The longest session's nominal length.
    pub longest_s: f64,
    /// Bytes the sessions request per second of schedule at the point's rate.
    pub demand_bytes_per_s: f64,
}

/// Bytes a session of the list requests on average (a request without a range counts
/// 512 KiB; a live viewer receives its bit rate for its watch time).
pub fn mean_session_bytes(sessions: &[vodkit_workload::model::Session]) -> f64 {
    let n = sessions.len().max(1) as f64;
    let live: f64 = sessions
        .iter()
        .filter_map(|s| Some(s.live?.watch_s * f64::from(s.bitrate_kbps?) * 125.0))
        .sum();
    let bytes: f64 = live
        + sessions
            .iter()
            .flat_map(|s| &s.requests)
            .map(|r| r.range.map(|x| x.len()).unwrap_or(512 * 1024) as f64)
            .sum::<f64>();
    bytes / n
}

/// The history's length: the longer of two longest sessions and `fill` budgets of
/// requested bytes at `demand_bytes_per_s` (no budget: the sessions alone).
pub fn window_s(longest_s: f64, fill: f64, budget: Option<u64>, demand_bytes_per_s: f64) -> f64 {
    let by_sessions = 2.0 * longest_s.max(0.0);
    let by_memory = match budget {
        Some(b) if demand_bytes_per_s > 0.0 => fill * b as f64 / demand_bytes_per_s,
        _ => 0.0,
    };
    by_sessions.max(by_memory)
}

/// The history before a point at `rate` sessions/s over `sessions` with a `budget`.
pub fn plan(ff: FastForward, sessions: &[Session], rate: f64, budget: Option<u64>) -> Plan {
    let longest_s = sessions
        .iter()
        .map(vodkit_load::warm::nominal_length)
        .fold(0.0, f64::max);
    let demand_bytes_per_s = mean_session_bytes(sessions) * rate;
    Plan {
        speed: ff.speed,
        window_s: window_s(longest_s, ff.fill, budget, demand_bytes_per_s),
        longest_s,
        demand_bytes_per_s,
    }
}

/// Most times a session list is repeated to cover a history and its judged window.
pub const MAX_REPEATS: usize = 64;

/// `sessions`, repeated (ids renumbered past the list's) until their gap schedule at `rate`
/// lasts `span_s`; unchanged when it already does, when sessions carry explicit start times,
/// or after [`MAX_REPEATS`] copies.
pub fn cover(sessions: &[Session], rate: f64, span_s: f64) -> Vec<Session> {
    let gaps: f64 = sessions.iter().map(|s| s.gap).sum();
    let explicit = sessions.iter().any(|s| s.start_s.is_some());
    if explicit || gaps <= 0.0 || rate <= 0.0 || gaps / rate >= span_s {
        return sessions.to_vec();
    }
    let copies = ((span_s * rate / gaps).ceil() as usize).clamp(1, MAX_REPEATS);
    let stride = sessions.iter().map(|s| s.id).max().unwrap_or(0) + 1;
    (0..copies as u64)
        .flat_map(|k| {
            sessions.iter().map(move |s| Session {
                id: s.id + k * stride,
                ..s.clone()
            })
        })
        .collect()
}

/// `sessions` as they play `speed` times faster: request pacing, media time, live watch
/// time and explicit start times divided by `speed` (the arrival rate is multiplied by the
/// caller). Timeouts stay: the history is not judged, and a slow answer must not end a
/// session that would have gone on.
pub fn sped_up(sessions: &[Session], speed: f64) -> Vec<Session> {
    sessions
        .iter()
        .map(|s| {
            let mut s = s.clone();
            s.start_s = s.start_s.map(|t| t / speed);
            for r in &mut s.requests {
                r.pacing_s /= speed;
                r.media_s /= speed;
            }
            if let Some(v) = s.live.as_mut() {
                v.watch_s /= speed;
            }
            s
        })
        .collect()
}

/// A client link as it runs `speed` times faster: bandwidth times, delay divided by, speed
/// (unlimited stays unlimited).
pub fn sped_up_link(l: vodkit_load::link::Link, speed: f64) -> vodkit_load::link::Link {
    vodkit_load::link::Link {
        bandwidth_bps: (l.bandwidth_bps as f64 * speed).round() as u64,
        one_way_delay: l.one_way_delay.div_f64(speed),
    }
}

/// The sessions the judged run resumes after a history of `window_s` at `rate`: (index in
/// the list, first request it plays), in list order. These are the viewers still playing
/// when the history ends.
pub fn resumed(sessions: &[Session], rate: f64, window_s: f64) -> Vec<(usize, usize)> {
    let mut gaps = 0.0;
    sessions
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            gaps += s.gap;
            let arrival = s.start_s.unwrap_or(gaps / rate);
            match vodkit_load::warm::place(s, arrival, window_s) {
                vodkit_load::warm::Start::Tail { from, .. } => Some((i, from)),
                _ => None,
            }
        })
        .collect()
}

/// The note of a run whose session list ended before its `point_s` seconds: its last
/// session arrived `last_arrival_s` into the run at `rate` sessions/s (more than two mean
/// gaps early), so the rest of the point ran below the rate. `None` when it did not.
pub fn ran_out_note(last_arrival_s: f64, point_s: f64, rate: f64) -> Option<String> {
    let early = rate > 0.0 && last_arrival_s + 2.0 / rate < point_s;
    early.then(|| {
        format!(
            "the session list ran out: its last session arrived {last_arrival_s:.0} s into the {point_s:.0} s point, which had no arrivals after that and ran below its rate"
        )
    })
}

/// What a played history did.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct History {
    pub speed: f64,
    /// Seconds of schedule played.
    pub window_s: f64,
    /// Real seconds it took.
    pub wall_s: f64,
    /// Sessions started during it.
    pub sessions: u64,
    /// Bytes delivered to the clients (MB, 10^6).
    pub delivered_mb: f64,
    /// Delivered over what the window asks for at the steady demand. The history starts
    /// from no viewers, so its first longest session runs below the demand (about 0.75 with
    /// a window of two longest sessions); well below that, the sped-up load was not
    /// delivered and the memory is warmer than cold, not steady.
    pub delivered_fraction: Option<f64>,
    /// The server's prefetch clock ran at the same speed (`POST /clock`); false for a
    /// server without one (nginx, Apache), whose own timers ran at real time.
    pub server_clock: bool,
    /// Real seconds the emulated drive took, after the history's load ended and still at
    /// its speed, to finish what was queued (`None`: no emulated drive to wait for).
    #[serde(default)]
    pub drain_s: Option<f64>,
}

/// The note of a point whose server has no prefetch clock to speed up.
pub const NO_CLOCK_NOTE: &str = "fast-forward: the server has no prefetch clock (POST /clock); it served the sped-up history with its page cache and read-ahead as they are";

/// Largest relative difference of disk MB/s between the halves of a steady point.
pub const DISK_TOLERANCE: f64 = 0.10;
/// Largest difference of the memory share between the halves of a steady point.
pub const SHARE_TOLERANCE: f64 = 0.10;
/// Disk rates closer than this share of the delivered rate count as equal (a server that
/// reads almost nothing may read twice almost nothing).
pub const DISK_FLOOR: f64 = 0.01;

/// One half of a judged window.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Half {
    pub seconds: f64,
    /// Client throughput (MB/s, 10^6).
    pub delivered_mb_s: f64,
    /// Read from the disk (MB/s, 10^6).
    pub disk_mb_s: f64,
}

impl Half {
    /// The share of delivered bytes that did not come from the disk; `None` with nothing
    /// delivered.
    pub fn memory_share(&self) -> Option<f64> {
        (self.delivered_mb_s > 0.0).then(|| (1.0 - self.disk_mb_s / self.delivered_mb_s).max(0.0))
    }
}

/// Evidence that a point was judged at steady state: its window's two halves.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Steadiness {
    pub halves: [Half; 2],
    /// The page cache (the budget cgroup's `file`, else the machine's `Cached`) at the
    /// window's start and end.
    #[serde(default)]
    pub page_cache_bytes: [Option<u64>; 2],
    /// Disk MB/s within [`DISK_TOLERANCE`] and memory share within [`SHARE_TOLERANCE`],
    /// and no other process dropped the page cache during the point.
    pub steady: bool,
}

impl Steadiness {
    /// Judge two halves.
    pub fn judge(halves: [Half; 2], page_cache_bytes: [Option<u64>; 2]) -> Steadiness {
        let [a, b] = halves;
        let delivered = (a.delivered_mb_s + b.delivered_mb_s) / 2.0;
        let disk_gap = (a.disk_mb_s - b.disk_mb_s).abs();
        let disk_ok = disk_gap <= DISK_TOLERANCE * a.disk_mb_s.max(b.disk_mb_s)
            || disk_gap <= DISK_FLOOR * delivered;
        let share_ok = match (a.memory_share(), b.memory_share()) {
            (Some(x), Some(y)) => (x - y).abs() <= SHARE_TOLERANCE,
            _ => false,
        };
        Steadiness {
            halves,
            page_cache_bytes,
            steady: disk_ok && share_ok,
        }
    }

    /// `disk a→b MB/s, memory a→b%, cache a→b MiB` for tables and notes.
    pub fn describe(&self) -> String {
        let [a, b] = self.halves;
        let share = |h: Half| {
            h.memory_share()
                .map_or("–".into(), |s| format!("{:.0}%", s * 100.0))
        };
        let cache =
            |c: Option<u64>| c.map_or("–".into(), |c| format!("{:.0}", c as f64 / 1048576.0));
        format!(
            "disk {:.1}→{:.1} MB/s, memory {}→{}, cache {}→{} MiB",
            a.disk_mb_s,
            b.disk_mb_s,
            share(a),
            share(b),
            cache(self.page_cache_bytes[0]),
            cache(self.page_cache_bytes[1])
        )
    }
}

/// The two halves of a run's window `[start, end]` (seconds into the run): each half's
/// delivered MB/s from the load generator's per-second samples (`(t_s, MB in the second
/// ending at t_s)`).
pub fn delivered_halves(samples: &[(u64, f64)], start: f64, end: f64) -> Option<[f64; 2]> {
    if end - start < 2.0 {
        return None;
    }
    let mid = (start + end) / 2.0;
    let rate = |a: f64, b: f64| {
        let picked: Vec<f64> = samples
            .iter()
            .filter(|(t, _)| {
                let t = *t as f64;
                t - 1.0 >= a - 0.5 && t <= b + 0.5
            })
            .map(|(_, mb)| *mb)
            .collect();
        (!picked.is_empty()).then(|| picked.iter().sum::<f64>() / picked.len() as f64)
    };
    Some([rate(start, mid)?, rate(mid, end)?])
}

/// A duration that is at least one second (for the history's run cap).
pub fn run_cap(window_s: f64, speed: f64) -> Duration {
    Duration::from_secs_f64((window_s / speed).max(1.0))
}

#[cfg(test)]
mod tests;
