//! What a load run needs: the target, the sessions and their schedule, client links,
//! warm-up requests and the steady-state window.

pub use crate::common::{secs, InputError, MAX_INTERVAL_S};
use crate::link::Link;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;
use strum::{Display, EnumString, VariantNames};
use vodkit_workload::model::{Measurement, Request, Session, WorkloadMeta};

/// Largest start-up buffer accepted (seconds of content).
pub const MAX_STARTUP_BUFFER_S: f64 = 600.0;

/// The server under test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub addr: SocketAddr,
    /// `Host` header value (host and port as given).
    pub host: String,
    /// `https://`: connections are TLS (see [`crate::tls`]).
    pub tls: bool,
    /// The host alone (no port, no brackets): the TLS server name.
    pub name: String,
}

impl Target {
    /// Parse `http://HOST:PORT[/]` or `https://HOST:PORT[/]`. Only loopback addresses are accepted unless
    /// `allow_remote` is set: a load generator must not hit someone else's server by a typo.
    pub fn parse(url: &str, allow_remote: bool) -> Result<Target, InputError> {
        let bad = |why: &str| InputError(format!("--target {url:?}: {why}"));
        let (rest, tls) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (rest, false),
            (_, Some(rest)) => (rest, true),
            _ => return Err(bad("expected http://HOST:PORT or https://HOST:PORT")),
        };
        let default_port = if tls { 443 } else { 80 };
        let authority = rest.trim_end_matches('/');
        if authority.is_empty() || authority.contains('/') {
            return Err(bad("expected http(s)://HOST:PORT with no path"));
        }
        let with_port = if authority.rsplit_once(':').is_some_and(|(h, p)| {
            !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && !h.ends_with(':')
        }) {
            authority.to_string()
        } else {
            format!("{authority}:{default_port}")
        };
        let name = match with_port.rsplit_once(':') {
            Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']').to_string(),
            None => authority.to_string(),
        };
        let addr = with_port
            .to_socket_addrs()
            .map_err(|e| bad(&format!("cannot resolve: {e}")))?
            .next()
            .ok_or_else(|| bad("host resolves to no address"))?;
        if !allow_remote && !is_loopback(addr.ip()) {
            return Err(bad(
                "not a loopback address; pass --allow-remote to load a server you operate",
            ));
        }
        Ok(Target {
            addr,
            host: authority.to_string(),
            tls,
            name,
        })
    }
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Which sessions and requests count as steady state (thesis 3.6.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ramp {
    pub up_sessions: u64,
    pub down_sessions: u64,
    pub up_requests: u64,
    pub down_requests: u64,
}

impl From<&Measurement> for Ramp {
    fn from(m: &Measurement) -> Ramp {
        Ramp {
            up_sessions: m.ramp_up_sessions,
            down_sessions: m.ramp_down_sessions,
            up_requests: m.ramp_up_requests,
            down_requests: m.ramp_down_requests,
        }
    }
}

/// Everything a run needs.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    pub target: Target,
    pub sessions: Vec<Session>,
    /// Client links by class name; classes not listed are unlimited.
    pub links: HashMap<String, Link>,
    /// Sessions per second for sessions without an explicit `start_s`.
    pub rate: f64,
    pub max_sessions: Option<usize>,
    /// Stop the run (no new sessions, active ones cancelled) after this long.
    pub duration: Option<Duration>,
    /// Check every received byte against the deterministic file content.
    pub verify: bool,
    /// Fetched before the measured run starts (most popular chunks first).
    pub warmup: Vec<Request>,
    /// Connections used for warm-up.
    pub warmup_connections: usize,
    pub ramp: Ramp,
    /// Print a live status line on stderr even when it is not a terminal.
    pub progress: bool,
    /// Never print the live status line (wins over `progress`).
    pub quiet: bool,
    /// Runtime worker threads; `None` = one per core.
    pub workers: Option<usize>,
    /// Free-form description of the input, copied into results.json.
    pub source: String,
    /// Stop the run cleanly on Ctrl-C (SIGINT), keeping what was measured.
    pub stop_on_interrupt: bool,
    /// Where receive bandwidth is limited: in the load generator or by the kernel.
    pub link_mode: crate::netns::LinkMode,
    /// The TLS client for an `https://` target (`--ca` or `--insecure`).
    pub tls: Option<crate::tls::TlsClient>,
    /// The HTTP version viewers speak (`--http`).
    pub http: HttpVersion,
    /// Sign every requested URL (`--sign-key`); `None`: unsigned.
    pub sign: Option<vodkit_securelink::Signer>,
    /// Seconds of content the modelled player buffers before it starts (and after a
    /// stall, before it resumes).
    pub startup_buffer_s: f64,
    /// Play each session's title with an adaptive player (`--player`) instead of replaying
    /// its requests; the title's manifest comes from the media-set layout.
    pub player: Option<crate::player::PlayerConfig>,
    /// Start as if the run had been going for a while (see [`crate::warm`]).
    pub warm_start: crate::warm::WarmStart,
    /// Latency percentiles to report besides the standard ones (`--percentiles`).
    pub percentiles: Vec<f64>,
    /// Run only this shard's sessions, at the single-host run's times (`--shard I/N`).
    pub shard: Option<crate::shard::Shard>,
    /// Start the run's clock at this wall time (`--start-at`), so shards begin together.
    pub start_at: Option<std::time::SystemTime>,
    /// Where live viewers (sessions with `live`) find their streams (`--live-prefix`,
    /// `--live-streams`).
    pub live: crate::player::LiveSettings,
    /// Probe sessions run during steady state and reported apart (`--probe N,LEN`).
    pub probes: Option<crate::probe::Probes>,
    /// Retry a segment request that failed on its connection (no connection, a reset, a
    /// 5xx status) once, on a fresh connection, within what is left of its timeout, as a
    /// player does. Off by default: a failed request ends its session.
    pub retry: bool,
    /// Actions the caller wants done at moments of the run's clock (a fault to inject).
    pub timed: Vec<Timed>,
    /// Tell the caller how the judged sessions are going once a second, and end the run
    /// when it says so ([`crate::watch`]).
    pub watch: Option<crate::watch::Watch>,
}

/// An action done at `at_s` seconds of the run's clock (on a thread of its own, so it may
/// block), unless the run ends first.
#[derive(Clone)]
pub struct Timed {
    pub at_s: f64,
    pub action: std::sync::Arc<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for Timed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Timed {{ at_s: {} }}", self.at_s)
    }
}

/// The HTTP version of a run's viewers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Display, EnumString, VariantNames)]
#[strum(parse_err_ty = String, parse_err_fn = unknown_http_version)]
pub enum HttpVersion {
    /// HTTP/1.1: a viewer's requests go one at a time on each of its connections.
    #[default]
    #[strum(serialize = "1.1")]
    Http11,
    /// HTTP/2 ([`crate::h2`]): a viewer's requests are streams of one connection (TLS with
    /// ALPN `h2` for an `https://` target, prior knowledge for `http://`).
    #[strum(serialize = "2")]
    Http2,
}

fn unknown_http_version(s: &str) -> String {
    vodkit_units::unknown_choice("--http", s, HttpVersion::VARIANTS)
}

impl LoadConfig {
    /// Whether to draw the status line: always, never, or (`None`) when stderr is a
    /// terminal.
    pub fn status_line(&self) -> Option<bool> {
        if self.quiet {
            Some(false)
        } else if self.progress {
            Some(true)
        } else {
            None
        }
    }

    /// A configuration with defaults: no link emulation, no warm-up, no ramp exclusion.
    pub fn new(target: Target, sessions: Vec<Session>, rate: f64) -> LoadConfig {
        LoadConfig {
            target,
            sessions,
            links: HashMap::new(),
            rate,
            max_sessions: None,
            duration: None,
            verify: false,
            warmup: Vec::new(),
            warmup_connections: 8,
            ramp: Ramp::default(),
            progress: false,
            quiet: false,
            workers: None,
            source: String::new(),
            stop_on_interrupt: false,
            link_mode: crate::netns::LinkMode::User,
            startup_buffer_s: crate::qos::DEFAULT_STARTUP_BUFFER_S,
            tls: None,
            http: HttpVersion::Http11,
            sign: None,
            player: None,
            warm_start: crate::warm::WarmStart::Off,
            percentiles: Vec::new(),
            shard: None,
            start_at: None,
            live: crate::player::LiveSettings::default(),
            probes: None,
            retry: false,
            timed: Vec::new(),
            watch: None,
        }
    }

    /// Take client links, ramp settings and the start-up buffer from a workload's
    /// `workload.json`.
    pub fn apply_meta(&mut self, meta: &WorkloadMeta) {
        for class in &meta.client_classes {
            self.links.insert(
                class.name.clone(),
                Link {
                    bandwidth_bps: class.bandwidth_bps,
                    one_way_delay: secs(class.one_way_delay_s),
                },
            );
        }
        self.ramp = Ramp::from(&meta.measurement);
        if let Some(b) = meta.measurement.startup_buffer_s {
            self.startup_buffer_s = b;
        }
    }

    /// Check the configuration before anything is started.
    pub fn validate(&self) -> Result<(), InputError> {
        match (self.target.tls, &self.tls) {
            (true, None) => {
                return Err(InputError(
                    "--target https://…: give --ca FILE (the CA that signed the server's certificate) or --insecure".into(),
                ))
            }
            (false, Some(_)) => {
                return Err(InputError(
                    "--ca and --insecure are for an https:// --target".into(),
                ))
            }
            _ => {}
        }
        if !(self.rate.is_finite() && self.rate > 0.0) {
            return Err(InputError(format!(
                "--rate {}: expected a positive number of sessions per second",
                self.rate
            )));
        }
        if !(self.startup_buffer_s.is_finite()
            && (0.0..=MAX_STARTUP_BUFFER_S).contains(&self.startup_buffer_s))
        {
            return Err(InputError(format!(
                "--startup-buffer {} s: expected 0 to {MAX_STARTUP_BUFFER_S} seconds of content",
                self.startup_buffer_s
            )));
        }
        if self.player.is_some() && self.warm_start != crate::warm::WarmStart::Off {
            return Err(InputError(
                "--warm-start replays the middle of logged sessions; a --player session chooses its own requests and always starts at the beginning"
                    .into(),
            ));
        }
        if self.player.is_some() {
            if let Some((i, s)) = self
                .sessions
                .iter()
                .enumerate()
                .find(|(_, s)| s.title.is_none() && s.live.is_none())
            {
                return Err(InputError(format!(
                    "session id {} (#{} in the log) names no title: --player plays each on-demand session's title from a media set",
                    s.id,
                    i + 1
                )));
            }
        }
        for (i, s) in self.sessions.iter().enumerate() {
            let at = || format!("session id {} (#{} in the log)", s.id, i + 1);
            if !(s.gap.is_finite() && s.gap >= 0.0) {
                return Err(InputError(format!(
                    "{}: gap {} is not a non-negative number",
                    at(),
                    s.gap
                )));
            }
            if let Some(t) = s.start_s {
                if !(t.is_finite() && t >= 0.0) {
                    return Err(InputError(format!(
                        "{}: start_s {t} is not a non-negative number",
                        at()
                    )));
                }
            }
            for (j, r) in s.requests.iter().enumerate() {
                let what = |field: &str, v: f64| {
                    InputError(format!(
                        "{}, request {}: {field} {v} is not a number of seconds in 0..=1e6",
                        at(),
                        j + 1
                    ))
                };
                if !r.path.starts_with('/') {
                    return Err(InputError(format!(
                        "{}, request {}: path {:?} must start with '/'",
                        at(),
                        j + 1,
                        r.path
                    )));
                }
                if r.path
                    .bytes()
                    .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
                {
                    return Err(InputError(format!(
                        "{}, request {}: path {:?} contains whitespace or control characters",
                        at(),
                        j + 1,
                        r.path
                    )));
                }
                if !(r.pacing_s.is_finite() && (0.0..=MAX_INTERVAL_S).contains(&r.pacing_s)) {
                    return Err(what("pacing_s", r.pacing_s));
                }
                if !(r.timeout_s > 0.0 && r.timeout_s <= MAX_INTERVAL_S) {
                    return Err(InputError(format!(
                        "{}, request {}: timeout_s {} must be a positive number of seconds up to 1e6",
                        at(),
                        j + 1,
                        r.timeout_s
                    )));
                }
                if !(r.media_s.is_finite() && r.media_s >= 0.0) {
                    return Err(what("media_s", r.media_s));
                }
                if r.conn > 63 {
                    return Err(InputError(format!(
                        "{}, request {}: conn {} is above the limit of 63 parallel connections",
                        at(),
                        j + 1,
                        r.conn
                    )));
                }
                if let Some(vodkit_workload::model::ByteRange::Closed { first, last }) = r.range {
                    if last < first {
                        return Err(InputError(format!(
                            "{}, request {}: range {first}-{last} ends before it starts",
                            at(),
                            j + 1
                        )));
                    }
                }
            }
        }
        if let Some(last) = self.schedule().into_iter().reduce(f64::max) {
            if last > MAX_INTERVAL_S * 10.0 {
                return Err(InputError(format!(
                    "the last session would start after {last:.0} s; check --rate and the log's gaps or start_s"
                )));
            }
        }
        Ok(())
    }

    /// Whether the session at `position` in the log is this run's (its shard's).
    pub fn owns(&self, position: usize) -> bool {
        self.shard.is_none_or(|s| s.owns(position))
    }

    /// The warm start's horizon over the scheduled sessions (0 for a cold start).
    pub fn warm_horizon(&self) -> f64 {
        self.warm_start
            .horizon(&self.sessions[..self.schedule().len()])
    }

    /// How long the run lasts: `duration`, else the last scheduled arrival.
    pub fn span_s(&self) -> f64 {
        self.duration.map_or_else(
            || self.schedule().last().copied().unwrap_or(0.0),
            |d| d.as_secs_f64(),
        )
    }

    /// When a warm-started run has settled ([`crate::warm::settle_s`]); 0 for a cold start.
    /// The same for every shard: it follows from the schedule alone.
    pub fn settle_s(&self) -> f64 {
        let horizon = self.warm_horizon();
        if horizon <= 0.0 {
            return 0.0;
        }
        let schedule = self.schedule();
        let firsts = self.sessions.iter().zip(&schedule).filter_map(|(s, &a)| {
            match crate::warm::place(s, a, horizon) {
                crate::warm::Start::Tail { arrival, .. } => Some(arrival),
                _ => None,
            }
        });
        // The run lasts `duration`, else until the last arrival, which the warm start
        // moved `horizon` seconds earlier.
        let run_s = self.duration.map_or_else(
            || schedule.last().copied().unwrap_or(0.0) - horizon,
            |d| d.as_secs_f64(),
        );
        crate::warm::settle_s(firsts, run_s)
    }

    /// Arrival times (seconds after the start) of the sessions that will run, in the
    /// order of the log: explicit `start_s` where given, else cumulative gaps / rate.
    pub fn schedule(&self) -> Vec<f64> {
        let n = self
            .max_sessions
            .unwrap_or(usize::MAX)
            .min(self.sessions.len());
        let mut cumulative = 0.0;
        self.sessions[..n]
            .iter()
            .map(|s| {
                cumulative += s.gap;
                s.start_s.unwrap_or(cumulative / self.rate)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_and_remote_is_refused() {
        let t = Target::parse("http://127.0.0.1:8080/", false).unwrap();
        assert_eq!(t.addr, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(t.host, "127.0.0.1:8080");
        assert_eq!(
            Target::parse("http://127.0.0.2", false)
                .unwrap()
                .addr
                .port(),
            80
        );
        assert!(Target::parse("http://[::1]:81", false).is_ok());
        let t = Target::parse("https://localhost:8443/", false).unwrap();
        assert!(t.tls);
        assert_eq!((t.name.as_str(), t.addr.port()), ("localhost", 8443));
        let t = Target::parse("https://[::1]", false).unwrap();
        assert_eq!((t.name.as_str(), t.addr.port(), t.tls), ("::1", 443, true));
        assert!(!Target::parse("http://127.0.0.1:1", false).unwrap().tls);
        assert!(Target::parse("ftp://127.0.0.1:1", false).is_err());
        assert!(Target::parse("http://127.0.0.1:1/x", false).is_err());
        let remote = Target::parse("http://192.0.2.1:80", false).unwrap_err();
        assert!(remote.0.contains("loopback"), "{remote}");
        assert!(Target::parse("http://192.0.2.1:80", true).is_ok());
    }

    #[test]
    fn schedule_uses_gaps_over_rate_and_explicit_starts() {
        let t = Target::parse("http://127.0.0.1:1", false).unwrap();
        let mk = |gap: f64, start_s: Option<f64>| Session {
            id: 0,
            gap,
            start_s,
            class: "c".into(),
            title: None,
            bitrate_kbps: None,
            requests: vec![],
            live: None,
            play: None,
        };
        let mut cfg = LoadConfig::new(
            t,
            vec![mk(1.0, None), mk(3.0, None), mk(0.5, Some(9.0))],
            2.0,
        );
        assert_eq!(cfg.schedule(), vec![0.5, 2.0, 9.0]);
        cfg.max_sessions = Some(1);
        assert_eq!(cfg.schedule(), vec![0.5]);
        cfg.rate = 0.0;
        assert!(cfg.validate().is_err());
    }

    #[test]
    fn startup_buffer_comes_from_workload_json_and_is_checked() {
        let t = Target::parse("http://127.0.0.1:1", false).unwrap();
        let mut cfg = LoadConfig::new(t, vec![], 1.0);
        assert_eq!(cfg.startup_buffer_s, 2.0);
        let mut meta = WorkloadMeta {
            spec: "s".into(),
            seed: 1,
            client_classes: vec![],
            measurement: Measurement::default(),
        };
        cfg.apply_meta(&meta);
        assert_eq!(cfg.startup_buffer_s, 2.0, "absent: the default stays");
        meta.measurement.startup_buffer_s = Some(5.0);
        cfg.apply_meta(&meta);
        assert_eq!(cfg.startup_buffer_s, 5.0);
        assert!(cfg.validate().is_ok());
        for bad in [-1.0, f64::NAN, 601.0] {
            cfg.startup_buffer_s = bad;
            let e = cfg.validate().unwrap_err();
            assert!(e.0.starts_with("--startup-buffer"), "{e}");
        }
    }
}
