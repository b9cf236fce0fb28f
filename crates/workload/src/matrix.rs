//! The workload matrix of seed 004 (its Table 1) as twelve built-in specs, `matrix-VPH` to
//! `matrix-MUL`: stream type (V on-demand, L live, M mixed half and half), popularity (P
//! every viewer on one title or stream, U each viewer on its own) and encoding rate (H high,
//! L low).
//!
//! The seed streamed 300 and 78 kbit/s clips over RTP; the cells keep its ratio (3.85) on a
//! ladder players use today: 3,000 kbit/s (720p) and 730 kbit/s (432p) from Apple's HLS
//! authoring ladder (ratio 4.1). Every session watches 60 s — the length of the seed's
//! probes — of a 60 s title or of a live stream it joins at the live edge, fetching 2 s
//! segments (the first three unpaced, as a player joining three segments behind the live
//! edge would), so a cell's concurrency is its session rate × 60 s.
//!
//! Unpopular on-demand viewers are assigned titles round-robin over 400 titles: while
//! fewer than 400 watch at once, each has a title of its own, as the seed's clients each
//! requested their own clip. Unpopular live viewers get streams the same way
//! (`streams = "per-viewer"`); the run publishes as many streams as it expects viewers at
//! once (`vodkit bench --scenario matrix`).

use std::fmt::Write as _;

/// The twelve cell names in the seed's table order.
pub const CELLS: [&str; 12] = [
    "VPH", "VPL", "VUH", "VUL", "LPH", "LPL", "LUH", "LUL", "MPH", "MPL", "MUH", "MUL",
];
/// Prefix of the built-in spec names.
pub const PREFIX: &str = "matrix-";
/// High encoding rate, kbit/s (the seed's 300 kbit/s).
pub const HIGH_KBPS: u32 = 3000;
/// Low encoding rate, kbit/s (the seed's 78 kbit/s).
pub const LOW_KBPS: u32 = 730;
/// Seconds every session watches.
pub const WATCH_S: f64 = 60.0;
/// Content seconds per request and per live segment.
pub const SEGMENT_S: f64 = 2.0;
/// Titles of an unpopular on-demand cell.
pub const UNPOPULAR_TITLES: u64 = 400;
/// Sessions in a cell's list.
pub const SESSIONS: u64 = 20_000;

/// Stream type of a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    OnDemand,
    Live,
    Mixed,
}

/// One cell of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cell {
    pub kind: Kind,
    pub popular: bool,
    pub high: bool,
}

impl Cell {
    /// A cell from its three letters (`VPH`) or its spec name (`matrix-VPH`).
    pub fn parse(name: &str) -> Option<Cell> {
        let code = name.strip_prefix(PREFIX).unwrap_or(name);
        let b = code.as_bytes();
        if b.len() != 3 {
            return None;
        }
        let kind = match b[0] {
            b'V' => Kind::OnDemand,
            b'L' => Kind::Live,
            b'M' => Kind::Mixed,
            _ => return None,
        };
        let popular = match b[1] {
            b'P' => true,
            b'U' => false,
            _ => return None,
        };
        let high = match b[2] {
            b'H' => true,
            b'L' => false,
            _ => return None,
        };
        Some(Cell {
            kind,
            popular,
            high,
        })
    }

    /// The three letters.
    pub fn code(&self) -> String {
        let k = match self.kind {
            Kind::OnDemand => 'V',
            Kind::Live => 'L',
            Kind::Mixed => 'M',
        };
        format!(
            "{k}{}{}",
            if self.popular { 'P' } else { 'U' },
            if self.high { 'H' } else { 'L' }
        )
    }

    pub fn bitrate_kbps(&self) -> u32 {
        if self.high {
            HIGH_KBPS
        } else {
            LOW_KBPS
        }
    }

    /// Fraction of sessions that are live viewers.
    pub fn live_share(&self) -> f64 {
        match self.kind {
            Kind::OnDemand => 0.0,
            Kind::Live => 1.0,
            Kind::Mixed => 0.5,
        }
    }

    /// Whether the cell reads titles from disk.
    pub fn has_on_demand(&self) -> bool {
        self.kind != Kind::Live
    }

    /// The spec's TOML text.
    pub fn spec_text(&self) -> String {
        let code = self.code();
        let kind = match self.kind {
            Kind::OnDemand => "on-demand",
            Kind::Live => "live",
            Kind::Mixed => "mixed (half on-demand, half live)",
        };
        // Live-only cells read no title: one keeps the file set small.
        let titles = if self.popular || self.kind == Kind::Live {
            1
        } else {
            UNPOPULAR_TITLES
        };
        let mut t = String::new();
        let _ = writeln!(
            t,
            "# matrix-{code}: seed 004's workload matrix, {kind}, {}, {} bit rate ({} kbit/s).",
            if self.popular { "popular" } else { "unpopular" },
            if self.high { "high" } else { "low" },
            self.bitrate_kbps()
        );
        let _ = writeln!(
            t,
            "# Every session watches {WATCH_S:.0} s in {SEGMENT_S:.0} s requests; see docs/workload.md."
        );
        let _ = write!(
            t,
            r#"name = "matrix-{code}"
seed = 1

[catalog]
zipf_alpha = 0.0
duration_cdf = [1e-9, 1.0]
duration_s = [{WATCH_S}, {WATCH_S}]
min_duration = "{WATCH_S}s"
max_duration = "{WATCH_S}s"
segment = "{SEGMENT_S}s"
layout = "unchunked"
assignment = "round-robin"

[[catalog.collections]]
name = "{rate}"
titles = {titles}
sessions = {SESSIONS}
bitrate_kbps = {kbps}

[sessions]
request = "{SEGMENT_S}s"
prebuffer_requests = 3
timeout = "10s"
watch_cdf = [1e-9, 1.0]
watch_fraction = [1.0, 1.0]

[[clients]]
name = "lan"
bandwidth = "1Gbit/s"
share = 1.0
"#,
            rate = if self.high { "high" } else { "low" },
            kbps = self.bitrate_kbps(),
        );
        if self.kind != Kind::OnDemand {
            let _ = write!(
                t,
                r#"
[live]
share = {share}
streams = "{streams}"
watch = "{WATCH_S}s"
"#,
                share = self.live_share(),
                streams = if self.popular { "one" } else { "per-viewer" },
            );
        }
        t
    }
}

/// Every cell's spec name.
pub fn names() -> Vec<String> {
    CELLS.iter().map(|c| format!("{PREFIX}{c}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::Plan;

    #[test]
    fn every_cell_parses_and_round_trips_its_code() {
        for code in CELLS {
            let cell = Cell::parse(code).unwrap();
            assert_eq!(cell.code(), code);
            assert_eq!(Cell::parse(&format!("matrix-{code}")), Some(cell));
        }
        for bad in ["", "VP", "XPH", "VXH", "VPX", "VPHH", "matrix-"] {
            assert_eq!(Cell::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn cells_generate_the_mix_they_name() {
        for code in CELLS {
            let cell = Cell::parse(code).unwrap();
            let checked = crate::spec::load(&format!("matrix-{code}"), &[], 0.05).unwrap();
            let plan = Plan::new(checked, 1);
            let sessions: Vec<_> = plan.sessions().map(|g| g.session).collect();
            assert_eq!(sessions.len() as u64, SESSIONS / 20);
            let live = sessions.iter().filter(|s| s.live.is_some()).count() as f64;
            let share = live / sessions.len() as f64;
            assert!(
                (share - cell.live_share()).abs() < 0.06,
                "{code}: live share {share}"
            );
            for s in &sessions {
                assert_eq!(s.bitrate_kbps, Some(cell.bitrate_kbps()));
                match &s.live {
                    Some(l) => {
                        assert!(s.requests.is_empty());
                        assert_eq!(l.watch_s, WATCH_S);
                    }
                    None => {
                        let media: f64 = s.requests.iter().map(|r| r.media_s).sum();
                        assert!((media - WATCH_S).abs() < 0.01, "{code}: {media}");
                    }
                }
            }
            // Popular: one title and one stream; unpopular: consecutive viewers differ.
            let streams: Vec<u32> = sessions
                .iter()
                .filter_map(|s| s.live.map(|l| l.stream))
                .collect();
            let titles: Vec<u32> = sessions.iter().filter_map(|s| s.title).collect();
            if cell.popular {
                assert!(streams.iter().all(|&k| k == 0));
                assert!(titles.iter().all(|&t| t == titles[0]));
            } else {
                assert!(streams.windows(2).all(|w| w[1] == w[0] + 1));
                let n = titles.len().min(20);
                let mut first: Vec<u32> = titles[..n].to_vec();
                first.sort_unstable();
                first.dedup();
                assert_eq!(
                    first.len(),
                    n,
                    "{code}: titles repeat among {n} consecutive"
                );
            }
        }
    }
}
