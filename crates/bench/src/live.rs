//! Live streams in the bench (seed 004's live and mixed workloads): every point of a
//! workload with live viewers runs a live source against the server under test, which
//! ingests it like a live origin, and this module decides how many streams the source
//! publishes and names the resource that saturated first at a server's capacity.
//!
//! The source itself is [`PushFeed`] (the `vodkit live push` pseudo-encoder, in this
//! process), so the load driver only knows "start N streams at this URL, stop them, tell me
//! what went wrong".

use crate::point::PointMetrics;
use vodkit_workload::model::Session;

/// What every live origin of a run accepts: `PUT` under `prefix` with `Authorization:
/// Bearer token`.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveOrigin {
    pub prefix: String,
    pub token: String,
}

impl LiveOrigin {
    /// The bench's origin: `/live/` and a token fixed per run directory (loopback only).
    pub fn bench() -> LiveOrigin {
        LiveOrigin {
            prefix: "/live/".into(),
            token: "vodkit-bench-ingest".into(),
        }
    }
}

/// The live source of a data point: `vodkit live push`'s source in this process, starting
/// with a full window already published (so viewers can join at once), segments of
/// `segment_s`.
pub struct PushFeed {
    pub segment_s: f64,
    pub window: u32,
}

impl Default for PushFeed {
    /// 2 s segments (the matrix's), a window of 6.
    fn default() -> Self {
        PushFeed {
            segment_s: vodkit_workload::matrix::SEGMENT_S,
            window: 6,
        }
    }
}

/// A running [`PushFeed`].
pub struct PushRun(vodkit_live::Source);

impl PushFeed {
    /// Start publishing `streams` streams of `bitrate_kbps` to `base_url` under `origin`;
    /// returns once every stream's playlist holds enough segments for a viewer to join.
    pub fn start(
        &self,
        base_url: &str,
        origin: &LiveOrigin,
        streams: u32,
        bitrate_kbps: u32,
    ) -> Result<PushRun, String> {
        let mut c = vodkit_live::SourceConfig::new(base_url, streams, bitrate_kbps.max(1));
        c.segment_s = self.segment_s;
        c.window = self.window;
        c.prefix = origin.prefix.clone();
        c.token = Some(origin.token.clone());
        c.backfill = true;
        let src = vodkit_live::Source::start(c)?;
        // Backfilled windows go out at once; give a slow origin a few segments' time.
        let wait = std::time::Duration::from_secs_f64(10.0 + 3.0 * self.segment_s);
        if !src.wait_ready(wait) {
            let r = src.stop();
            return Err(format!(
                "the origin did not take the first windows within {:.0} s: {}",
                wait.as_secs_f64(),
                r.summary().trim()
            ));
        }
        Ok(PushRun(src))
    }
}

impl PushRun {
    /// Stop publishing; returns what a reader of the point should know (failed or late
    /// publishes), empty when ingest went cleanly.
    pub fn stop(self) -> Vec<String> {
        let r = self.0.stop();
        let mut notes = Vec::new();
        if r.published.failed_puts > 0 || r.published.late_segments > 0 {
            notes.push(format!(
                "live source: {} of {} PUTs failed, {} of {} segments published late (PUT p99 {:.0} ms)",
                r.published.failed_puts, r.published.puts, r.published.late_segments, r.published.segments, r.put_ms_p99
            ));
        }
        notes
    }
}

/// Free space a workload's image needs for a disk-based live origin (nginx, Apache write
/// each segment `PUT` to a file under the root). Only live-only workloads get it: their
/// file set is one title nobody requests, so the image (the file set plus a quarter and
/// 256 MiB) filled up within the first point of the unpopular live cells, and nginx
/// answered every `PUT` with 500 (matrix LUL). The image is sparse, so unused room
/// costs nothing; a workload with on-demand viewers keeps its image (the drive model maps
/// the image onto the whole surface, so a larger one would shorten its seeks), and its
/// slack of a quarter of the file set holds the window of its live half.
pub fn image_room(sessions: &[Session]) -> u64 {
    let live_only = !sessions.is_empty() && sessions.iter().all(|s| s.live.is_some());
    if live_only {
        LIVE_ONLY_IMAGE_ROOM
    } else {
        0
    }
}

/// [`image_room`] of a live-only workload: 8 GiB, the 7 segments (a window of 6 and the
/// one being written) of 1,500 streams at 3,000 kbit/s in 2 s segments.
pub const LIVE_ONLY_IMAGE_ROOM: u64 = 8 << 30;

/// What a session list asks of the live source: how many viewers are live, whether they
/// share one stream, how long they watch and at which bit rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LiveDemand {
    /// Fraction of sessions that are live viewers.
    pub share: f64,
    /// Every live viewer watches stream 0.
    pub one_stream: bool,
    /// Mean watch time of a live viewer, seconds.
    pub watch_s: f64,
    pub bitrate_kbps: u32,
}

impl LiveDemand {
    /// `None` when the sessions have no live viewer.
    pub fn of(sessions: &[Session]) -> Option<LiveDemand> {
        let live: Vec<&Session> = sessions.iter().filter(|s| s.live.is_some()).collect();
        if live.is_empty() {
            return None;
        }
        let n = live.len() as f64;
        let watch_s = live
            .iter()
            .filter_map(|s| s.live.map(|v| v.watch_s))
            .sum::<f64>()
            / n;
        let bitrate_kbps = live
            .iter()
            .filter_map(|s| s.bitrate_kbps)
            .max()
            .unwrap_or(0);
        Some(LiveDemand {
            share: n / sessions.len() as f64,
            one_stream: live.iter().all(|s| s.live.is_some_and(|v| v.stream == 0)),
            watch_s,
            bitrate_kbps,
        })
    }

    /// Streams to publish at `rate` sessions/s: one for a shared stream, else as many as
    /// live viewers watch at once (rate × share × watch time, rounded up), as seed 004
    /// matched its encoders to its clients. Viewer k watches stream k mod this.
    pub fn streams(&self, rate: f64) -> u32 {
        if self.one_stream {
            return 1;
        }
        let n = (rate * self.share * self.watch_s).ceil();
        if n.is_finite() && n >= 1.0 {
            n.min(f64::from(u32::MAX)) as u32
        } else {
            1
        }
    }
}

/// Utilization at which a resource counts as saturated.
pub const SATURATED: f64 = 0.9;

/// The resource that saturated first at a failing point: `CPU` (machine-wide busy, iowait
/// not counted, or the server's cores against its CPU quota when it had one), `disk`
/// (device busy), `memory` (the server's own memory — its cgroup less the page cache, which
/// fills any budget by design — near the budget), or `none` — seed 004's finding that
/// viewers suffer while every resource is below saturation. Several at once: the most
/// utilized.
pub fn saturated(
    m: &PointMetrics,
    budget_bytes: Option<u64>,
    cpu_quota: Option<f64>,
) -> &'static str {
    let mut found: Vec<(f64, &'static str)> = Vec::new();
    if let Some(c) = m.cpu_busy {
        found.push((c, "CPU"));
    }
    if let (Some(q), Some(used)) = (cpu_quota, m.cores.server) {
        if q > 0.0 {
            found.push((used / q, "CPU"));
        }
    }
    if let Some(d) = m.disk {
        found.push((d.utilization, "disk"));
    }
    if let (Some(mem), Some(b)) = (m.server_memory, budget_bytes) {
        if b > 0 {
            found.push((mem.peak_other_bytes as f64 / b as f64, "memory"));
        }
    }
    found
        .into_iter()
        .filter(|(u, _)| *u >= SATURATED)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map_or("none", |(_, name)| name)
}

/// What a matrix server's search found, in seed 004's terms: concurrent viewers at its
/// capacity (capacity × watch time) and the resource saturated at its first failing point.
#[derive(Debug, Clone, PartialEq)]
pub struct Saturation {
    pub viewers: Option<f64>,
    /// `None` when no point failed (the search stopped at its ceiling).
    pub resource: Option<&'static str>,
}

/// Saturation of server `s` whose sessions each watch `watch_s` seconds.
pub fn saturation(
    s: &crate::report::ServerReport,
    watch_s: f64,
    budget_bytes: Option<u64>,
) -> Saturation {
    let first_failure = s
        .points
        .iter()
        .filter(|p| !p.passed)
        .min_by(|a, b| a.rate.total_cmp(&b.rate));
    Saturation {
        viewers: s.max_failure_free_rate.map(|r| r * watch_s),
        resource: first_failure.map(|p| saturated(&p.metrics, budget_bytes, s.cpu_quota)),
    }
}

/// One line per matrix cell that ran: each server's concurrent viewers at capacity and what
/// saturated, then vodkit / nginx.
pub fn matrix_lines(rep: &crate::report::BenchReport) -> Vec<String> {
    let watch = vodkit_workload::matrix::WATCH_S;
    vodkit_workload::matrix::CELLS
        .iter()
        .filter_map(|code| {
            let parts: Vec<(String, Saturation)> = rep
                .servers
                .iter()
                .filter_map(|s| {
                    let name = s.sut.strip_prefix(code)?.strip_prefix(' ')?;
                    Some((name.to_string(), saturation(s, watch, rep.memory_bytes)))
                })
                .collect();
            let each: Vec<String> = parts
                .iter()
                .map(|(name, sat)| {
                    format!(
                        "{name} {} viewers (saturated: {})",
                        sat.viewers.map_or("-".into(), |v| format!("{v:.0}")),
                        sat.resource.unwrap_or("not reached")
                    )
                })
                .collect();
            (!each.is_empty()).then(|| format!("matrix {code}: {}", each.join(", ")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::point::{DiskMetrics, ServerMemory};
    use vodkit_workload::model::LiveView;

    fn sessions(live: &[(u32, f64)], vod: usize) -> Vec<Session> {
        let mut out: Vec<Session> = live
            .iter()
            .enumerate()
            .map(|(i, &(stream, watch_s))| {
                let mut s = Session::new(i as u64, 1.0, "c", Vec::new());
                s.bitrate_kbps = Some(730);
                s.live = Some(LiveView { stream, watch_s });
                s
            })
            .collect();
        out.extend((0..vod).map(|i| Session::new(100 + i as u64, 1.0, "c", Vec::new())));
        out
    }

    #[test]
    fn demand_follows_the_sessions() {
        assert_eq!(LiveDemand::of(&sessions(&[], 5)), None);
        let shared = LiveDemand::of(&sessions(&[(0, 60.0), (0, 60.0)], 2)).unwrap();
        assert!(shared.one_stream);
        assert_eq!(shared.share, 0.5);
        assert_eq!(shared.bitrate_kbps, 730);
        assert_eq!(shared.streams(10.0), 1);
        let own = LiveDemand::of(&sessions(&[(0, 60.0), (1, 60.0), (2, 60.0)], 3)).unwrap();
        assert!(!own.one_stream);
        // 2 sessions/s × half live × 60 s = 60 viewers at once.
        assert_eq!(own.streams(2.0), 60);
        assert_eq!(own.streams(0.001), 1);
    }

    #[test]
    fn only_live_only_workloads_get_room_for_a_disk_based_window() {
        assert_eq!(
            image_room(&sessions(&[(0, 60.0), (1, 60.0)], 0)),
            LIVE_ONLY_IMAGE_ROOM
        );
        assert_eq!(image_room(&sessions(&[(0, 60.0)], 1)), 0, "mixed");
        assert_eq!(image_room(&sessions(&[], 3)), 0, "on-demand");
        assert_eq!(image_room(&[]), 0);
    }

    #[test]
    fn the_most_utilized_saturated_resource_is_named() {
        let mut m = PointMetrics {
            cpu_busy: Some(0.5),
            ..PointMetrics::default()
        };
        assert_eq!(saturated(&m, None, None), "none");
        m.cpu_busy = Some(0.95);
        assert_eq!(saturated(&m, None, None), "CPU");
        m.disk = Some(DiskMetrics {
            utilization: 0.97,
            ..DiskMetrics::default()
        });
        assert_eq!(saturated(&m, None, None), "disk");
        // A budget full of page cache is not a saturated memory.
        m.server_memory = Some(ServerMemory {
            peak_bytes: 1000,
            peak_cache_bytes: 990,
            peak_other_bytes: 10,
        });
        assert_eq!(saturated(&m, Some(1000), None), "disk");
        m.server_memory = Some(ServerMemory {
            peak_bytes: 1000,
            peak_cache_bytes: 10,
            peak_other_bytes: 990,
        });
        assert_eq!(saturated(&m, Some(1000), None), "memory");
        assert_eq!(saturated(&m, None, None), "disk");
    }

    #[test]
    fn a_server_at_its_cpu_quota_saturates_the_cpu_with_the_machine_half_idle() {
        let mut m = PointMetrics {
            cpu_busy: Some(0.4),
            ..PointMetrics::default()
        };
        m.cores.server = Some(0.24);
        assert_eq!(
            saturated(&m, None, None),
            "none",
            "no quota: the machine decides"
        );
        assert_eq!(saturated(&m, None, Some(0.25)), "CPU");
        assert_eq!(saturated(&m, None, Some(1.0)), "none");
    }

    #[test]
    fn matrix_lines_cover_only_the_cells_that_ran() {
        let plan = crate::search::SearchPlan::failure_free_around(1.0);
        let mut rep = crate::report::new_report("w", "plain", None, "strict", &plan, 1);
        for name in ["VUL vodkit:asap:auto", "VUL nginx"] {
            let sut = crate::sut::parse_one("nginx").unwrap();
            let mut r = crate::report::ServerReport::not_measured(&sut, "measured", String::new());
            r.sut = name.into();
            r.max_failure_free_rate = Some(2.0);
            rep.servers.push(r);
        }
        let lines = matrix_lines(&rep);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("matrix VUL: vodkit:asap:auto 120 viewers"),
            "{lines:?}"
        );
    }
}
