//! A cluster of origins behind a real load balancer: the one place that knows how a
//! balancer routes a request to an origin. [`haproxy`] and [`nginx`] render complete
//! balancer configurations from one [`BalancerSpec`] (the files `vodkit cluster
//! haproxy-config` and `nginx-config` print, the bench starts, and `deploy/k8s/origin`
//! ships), [`agent`] is the health probe HAProxy's `agent-check` asks, and [`launch`] starts
//! a balancer as a supervised child process.
//!
//! Title routing (seed 004's rule: send a stream's viewers to a server already serving
//! that stream) hashes the *title key* of a request's path, never the segment or the byte
//! range, with a consistent hash, so every request of a title lands on one origin and an
//! origin leaving the pool moves only its own titles. The key is the first path component
//! after an optional collection directory (`full`, `chunk-*`, `nf`, `live`), without a
//! chunk index and `.dat`; [`TITLE_PATTERN`] is the rule, used verbatim by both balancers
//! and by [`title_key`].

pub mod agent;
pub mod haproxy;
pub mod launch;
pub mod nginx;

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;
use strum::{Display, EnumString, IntoStaticStr, VariantNames};

/// The title-key rule as a regular expression over a path (without its query): group 1
/// (named `title`) is the key. `/t3/v800/seg-7.m4s`, `/t3/manifest.mpd` → `t3`;
/// `/chunk-512k/sd-000042-0003.dat`, `/full/sd-000042.dat` → `sd-000042`;
/// `/nf/t00042/a800.mp4` → `t00042`; `/live/s1/v800/seg-9.m4s` → `s1`; `/t3.mp4` → `t3.mp4`.
/// A path it does not match is its own key.
pub const TITLE_PATTERN: &str =
    r"^/(?:(?:full|chunk-[^/]+|nf|live)/)?(?<title>[^/]+?)(?:(?:-[0-9]{4})?\.dat)?(?:/.*)?$";

/// The title key of a request target (its query is ignored): what title routing hashes.
pub fn title_key(target: &str) -> String {
    static RE: OnceLock<Option<regex::Regex>> = OnceLock::new();
    let path = target.split('?').next().unwrap_or_default();
    let re = RE.get_or_init(|| regex::Regex::new(TITLE_PATTERN).ok());
    re.as_ref()
        .and_then(|re| re.captures(path))
        .and_then(|c| c.get(1))
        .map_or_else(|| path.to_string(), |m| m.as_str().to_string())
}

/// How the balancer picks an origin for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Display, EnumString, IntoStaticStr, VariantNames)]
#[strum(serialize_all = "lowercase", parse_err_ty = String, parse_err_fn = unknown_route)]
pub enum Route {
    /// Consistent hash of the title key ([`TITLE_PATTERN`]).
    Title,
    /// Consistent hash of the whole path (a title's segments spread over the origins).
    Uri,
    /// Each request to the next origin in turn.
    RoundRobin,
    /// Each request to the origin with the fewest open connections.
    LeastConn,
}

impl Route {
    pub const ALL: [Route; 4] = [
        Route::Title,
        Route::Uri,
        Route::RoundRobin,
        Route::LeastConn,
    ];

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

fn unknown_route(s: &str) -> String {
    vodkit_units::unknown_choice("route", s, Route::VARIANTS)
}

/// One origin as the balancer reaches it: `HOST:PORT`, HOST an IPv4 address, a bracketed
/// IPv6 address or a DNS name (a StatefulSet pod's stable name, for one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub host: String,
    pub port: u16,
}

impl Origin {
    /// Whether the host is a name the balancer must resolve (not an address).
    pub fn is_name(&self) -> bool {
        !self.host.starts_with('[') && self.host.parse::<std::net::Ipv4Addr>().is_err()
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl FromStr for Origin {
    type Err = String;
    fn from_str(s: &str) -> Result<Origin, String> {
        let bad = || format!("origin `{s}`: expected HOST:PORT (an address or a DNS name)");
        let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
        let port: u16 = port.parse().ok().filter(|&p| p > 0).ok_or_else(bad)?;
        let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
            None => {
                !host.is_empty()
                    && host.len() <= 253
                    && host
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
                    && !host.starts_with(['-', '.'])
            }
        };
        if !host_ok {
            return Err(bad());
        }
        Ok(Origin {
            host: host.to_string(),
            port,
        })
    }
}

/// A comma-separated `HOST:PORT,…` list with at least one origin, none twice.
pub fn parse_origins(list: &str) -> Result<Vec<Origin>, String> {
    let origins = list
        .split(',')
        .map(str::trim)
        .filter(|o| !o.is_empty())
        .map(str::parse)
        .collect::<Result<Vec<Origin>, String>>()?;
    if origins.is_empty() {
        return Err("no origins; expected HOST:PORT,… with at least one origin".into());
    }
    for (i, o) in origins.iter().enumerate() {
        if origins[..i].contains(o) {
            return Err(format!("origin `{o}` is listed twice"));
        }
    }
    Ok(origins)
}

/// The address the balancer listens on for viewers: `IP:PORT` (IPv6 bracketed).
pub fn parse_listen(s: &str) -> Result<std::net::SocketAddr, String> {
    s.parse()
        .map_err(|_| format!("listen address `{s}`: expected IP:PORT such as 127.0.0.1:8080"))
}

/// Everything a balancer configuration says.
#[derive(Debug, Clone, PartialEq)]
pub struct BalancerSpec {
    pub origins: Vec<Origin>,
    pub route: Route,
    pub listen: std::net::SocketAddr,
    /// The port each origin's health agent (`vodkit cluster agent`) listens on, on the
    /// origin's host; HAProxy asks it every [`BalancerSpec::check_interval_s`]. nginx has no
    /// active checks: its recipe marks an origin failed after errors (passive checks).
    pub agent_port: Option<u16>,
    /// Seconds between health checks (HAProxy's `inter` and `agent-inter`), and nginx's
    /// `fail_timeout`.
    pub check_interval_s: f64,
    /// Worker threads (HAProxy `nbthread`) or processes (nginx `worker_processes`); None:
    /// one per core.
    pub workers: Option<usize>,
    /// When the bench starts the balancer itself: the directory for its pid, logs and
    /// temporary files. None: a configuration for a system or a container (logs to
    /// stderr, the program's default paths).
    pub run_dir: Option<std::path::PathBuf>,
    /// Live and on-demand apart (seed 004's third rule): paths under this prefix go to
    /// these origins only, routed the same way; every other path to [`BalancerSpec::origins`].
    pub live: Option<LiveSplit>,
    /// Consistent hashing with bounded loads (HAProxy's `hash-balance-factor`, percent of
    /// the mean load, ≥ 100): a request whose origin already has more requests in flight
    /// than this share of the mean goes to the next origin on the ring. Only for the hash
    /// routes (`title`, `uri`) and HAProxy; nginx's `hash … consistent` has no such bound.
    pub balance_factor: Option<u32>,
}

/// The origins that serve live streams, apart from the on-demand ones.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveSplit {
    /// The live path prefix, with a trailing `/` (`/live/`).
    pub prefix: String,
    pub origins: Vec<Origin>,
}

impl LiveSplit {
    /// `origins` for paths under `prefix`; refuses a bad prefix and an origin also in
    /// `on_demand`.
    fn new(prefix: &str, origins: Vec<Origin>, on_demand: &[Origin]) -> Result<LiveSplit, String> {
        let prefix = crate::live_prefix(prefix)?;
        if let Some(o) = origins.iter().find(|o| on_demand.contains(o)) {
            return Err(format!(
                "origin `{o}` is both a live and an on-demand origin; the point is to keep them apart"
            ));
        }
        Ok(LiveSplit { prefix, origins })
    }
}

impl BalancerSpec {
    /// `origins` behind `listen` routed by `route`, checked every 2 s, no agent.
    pub fn new(origins: Vec<Origin>, route: Route, listen: std::net::SocketAddr) -> BalancerSpec {
        BalancerSpec {
            origins,
            route,
            listen,
            agent_port: None,
            check_interval_s: 2.0,
            workers: None,
            run_dir: None,
            live: None,
            balance_factor: None,
        }
    }

    /// Send the paths under `prefix` to `origins` only, routed the same way; refuses a bad
    /// prefix and an origin that is also one of the on-demand origins.
    pub fn split_live(&mut self, prefix: &str, origins: Vec<Origin>) -> Result<(), String> {
        self.live = Some(LiveSplit::new(prefix, origins, &self.origins)?);
        Ok(())
    }

    /// The interval in milliseconds, as both configurations write it.
    pub(crate) fn check_ms(&self) -> u64 {
        (self.check_interval_s * 1000.0).round().max(100.0) as u64
    }
}

/// Origin `k`'s name in the configurations (`o1`, `o2`, …), as logs and statistics show it.
pub fn origin_name(k: usize) -> String {
    format!("o{}", k + 1)
}

/// Live origin `k`'s name in the configurations (`l1`, `l2`, …).
pub fn live_origin_name(k: usize) -> String {
    format!("l{}", k + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn title_keys_stop_at_the_title() {
        for (path, key) in [
            ("/t3/v800/seg-7.m4s", "t3"),
            ("/t3/manifest.mpd", "t3"),
            ("/t3/master.m3u8", "t3"),
            ("/t3/v800.m3u8", "t3"),
            ("/full/sd-000042.dat", "sd-000042"),
            ("/chunk-512k/sd-000042-0003.dat", "sd-000042"),
            ("/chunk-2m/sd-000042-0000.dat", "sd-000042"),
            ("/nf/t00042/a800.mp4", "t00042"),
            ("/live/s1/v800/seg-9.m4s", "s1"),
            ("/t3.mp4", "t3.mp4"),
            ("/t12/v800/seg-1.m4s?md5=x&expires=9", "t12"),
            ("/", "/"),
        ] {
            assert_eq!(title_key(path), key, "{path}");
        }
        // Different titles, different keys.
        assert_ne!(
            title_key("/t1/v800/seg-1.m4s"),
            title_key("/t10/v800/seg-1.m4s")
        );
    }

    #[test]
    fn routes_parse_by_name_only() {
        for r in Route::ALL {
            assert_eq!(r.as_str().parse::<Route>().unwrap(), r);
        }
        let e = "random".parse::<Route>().unwrap_err();
        assert_eq!(
            e,
            "route `random`: expected title, uri, roundrobin or leastconn"
        );
    }

    #[test]
    fn origins_are_host_port_lists() {
        let o = parse_origins("10.0.0.1:8080, origin-1.origin.vodkit.svc:8080,[::1]:81").unwrap();
        assert_eq!(o.len(), 3);
        assert_eq!(o[1].host, "origin-1.origin.vodkit.svc");
        assert!(!o[0].is_name() && o[1].is_name() && !o[2].is_name());
        assert_eq!(o[2].to_string(), "[::1]:81");
        for (list, needle) in [
            ("", "no origins"),
            (" , ", "no origins"),
            ("10.0.0.1", "expected HOST:PORT"),
            ("10.0.0.1:0", "expected HOST:PORT"),
            ("10.0.0.1:http", "expected HOST:PORT"),
            ("a b:80", "expected HOST:PORT"),
            ("[nothex]:80", "expected HOST:PORT"),
            ("a:80,a:80", "listed twice"),
        ] {
            let e = parse_origins(list).unwrap_err();
            assert!(e.contains(needle), "{list}: {e}");
            assert!(!e.contains('\n'));
        }
        assert!(parse_listen("0.0.0.0:8080").is_ok());
        assert!(parse_listen("localhost:8080")
            .unwrap_err()
            .contains("IP:PORT"));
    }
}
