//! results.json: what a run measured, restricted to steady state, in a form several load
//! hosts' files can be merged from. `docs/load.md` documents every key.

use crate::config::LoadConfig;
use crate::hist::{Hist, Percentiles};
use crate::qos::{self, FailurePhase};
use crate::record::{FailureReason, SessionEnd, SessionRecord};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `into.f += from.f` for each named field `f`: the counters that add up when sessions'
/// or load hosts' figures are combined.
macro_rules! add_fields {
    ($into:expr, $from:expr, [$($f:ident),+ $(,)?]) => {
        {
            $($into.$f += $from.$f;)+
        }
    };
}

/// The whole results file. Its top-level keys are a stable format (docs/load.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub run: RunInfo,
    pub requests: RequestStats,
    pub sessions: SessionStats,
    /// Steady-state client throughput in MB/s (10^6 bytes), completed requests only.
    pub throughput_mb_s: f64,
    /// Stalls: content that arrived after it was due (playout model).
    pub missed_deadlines: u64,
    pub latency_ms: LatencyStats,
    /// Whether the load generator kept its schedule.
    #[serde(default)]
    pub schedule: ScheduleStats,
    pub timeseries: Vec<Sample>,
    pub qos: Qos,
    /// The probe sessions' outcomes and quality (`--probe`), kept out of `sessions` and
    /// `qos`: seed 004 reads a cell's client-side figures from probes run in steady state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probes: Option<ProbeReport>,
    pub connections: ConnStats,
}

/// What the probe sessions saw.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeReport {
    pub sessions: SessionStats,
    pub qos: Qos,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Run parameters and totals over the whole run (ramps included).
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub target: String,
    pub source: String,
    pub rate: f64,
    pub verify: bool,
    /// The HTTP version the viewers spoke (`--http`): `1.1` or `2` (empty in files written
    /// before HTTP/2).
    #[serde(default)]
    pub http: String,
    /// `off` or `user` (token bucket and delay in the load generator).
    pub link_emulation: String,
    pub warmup_requests: u64,
    pub ramp_up_sessions: u64,
    pub ramp_down_sessions: u64,
    pub ramp_up_requests: u64,
    pub ramp_down_requests: u64,
    pub sessions_scheduled: u64,
    pub sessions_started: u64,
    pub requests_sent: u64,
    pub elapsed_s: f64,
    /// Start and end (seconds into the run) of the steady-state throughput window.
    pub steady_window_s: [f64; 2],
    pub fd_limit: u64,
    /// Number of load hosts merged into this file (1 for a single run).
    pub hosts: u64,
    /// How far into the past a warm start moved the schedule (0: a cold start).
    #[serde(default)]
    pub warm_start_s: f64,
    /// Sessions already playing when the run started (warm start); not judged.
    #[serde(default)]
    pub sessions_prefilled: u64,
    /// Sessions arriving before this (seconds into the run) are not judged either: the
    /// warm start's cold-memory transient ([`crate::warm::settle_s`]; 0 for a cold start).
    #[serde(default)]
    pub settle_s: f64,
    /// `I/N` when this is one shard of a sharded run (`--shard`).
    pub shard: Option<crate::shard::Shard>,
    /// The agreed wall-clock start (`--start-at`), Unix seconds.
    pub start_at_unix: Option<f64>,
    /// Requests that failed on their connection and were retried once on a fresh one
    /// (`LoadConfig::retry`), and those the retry completed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retried_requests: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub recovered_requests: u64,
    /// Percentiles asked for with `--percentiles` (latencies carry them in `chosen`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub percentiles: Vec<f64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestStats {
    pub completed: u64,
    pub timed_out: u64,
    /// Failed requests other than timeouts, by reason.
    pub errors: BTreeMap<String, u64>,
    /// Body bytes received by steady-state requests, completed or not.
    pub bytes: u64,
    /// Requests never sent because their session had already failed.
    pub skipped: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionStats {
    pub started: u64,
    pub completed: u64,
    pub failed: u64,
    /// Still running when the run was stopped; neither completed nor failed.
    pub cancelled: u64,
    /// Turned away with `503` (admission control, a connection limit): neither completed
    /// nor failed — the server told the viewer to go elsewhere.
    #[serde(default)]
    pub refused: u64,
    /// Completed without a stall (no rebuffering) and, for adaptive players, kept at least
    /// 90% of their unloaded mean bit rate: the sessions a viewer would call good.
    #[serde(default)]
    pub played_clean: u64,
    /// Cancelled by the end of the run with nothing against them yet: no stall so far and,
    /// for players, their bit rate kept. A capacity point judges these neither good nor
    /// bad (they would have played on); a cancelled session that had stalled counts as bad.
    #[serde(default)]
    pub cut_clean: u64,
    /// failed / (completed + failed); refused sessions count in neither.
    pub failure_fraction: f64,
    /// played_clean / started: goodput per session offered.
    #[serde(default)]
    pub goodput_fraction: f64,
    /// How far completed replayed sessions fell behind their own pace: seconds from the
    /// first request's start to the last response's end, less what the session takes on
    /// an idle server (its pacing, or the transfer of each response over its client's
    /// link when that is longer, plus a round trip per request). A server that keeps pace
    /// keeps this near zero; one that serves everyone slower stretches every session
    /// without failing any. Median and 95th percentile, seconds; sessions measured.
    #[serde(default)]
    pub lag_p50_s: f64,
    #[serde(default)]
    pub lag_p95_s: f64,
    #[serde(default)]
    pub lag_sessions: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyStats {
    /// Request start to first response byte.
    pub ttfb: Percentiles,
    /// Request start to last body byte.
    pub ttlb: Percentiles,
    /// Request start to the end of a `503` refusal.
    #[serde(default)]
    pub refusal: Percentiles,
    /// From the request's *intended* send time (its session's scheduled arrival plus the
    /// pacing before it) to the last body byte: a request held back by a slow earlier
    /// response, or by a load generator that fell behind, is charged for the wait
    /// (coordinated omission, as wrk2 corrects it). Adaptive-player requests have no
    /// schedule; theirs equals `ttlb`.
    #[serde(default)]
    pub ttlb_intended: Percentiles,
}

/// The percentile of completed sessions' lag that [`SessionStats::lag_p95_s`] reports.
pub const LAG_PERCENTILE: f64 = 95.0;

/// A request or session start more than this late counts as late (seconds).
pub const LATE_S: f64 = 0.05;

/// Did the load generator keep its schedule? (Tsung's "phase duration exceeded", wrk2's
/// coordinated omission.)
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ScheduleStats {
    /// Sessions whose first request went out more than [`LATE_S`] after their scheduled
    /// arrival: the generator could not start them on time (all sessions of the run).
    pub late_sessions: u64,
    /// First request's send time minus the session's scheduled arrival.
    pub session_lag_ms: Percentiles,
    /// Steady requests sent more than [`LATE_S`] after their intended time, for any
    /// reason (usually a slow earlier response on the same connection).
    pub late_requests: u64,
}

/// One second of the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub t_s: u64,
    pub active_sessions: u64,
    pub requests_per_s: f64,
    pub mb_per_s: f64,
    /// Sessions that failed during this second.
    pub failures: u64,
}

/// Client-side quality (seed 004 section 2.2) over steady-state sessions.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Qos {
    /// Seconds of content the modelled player buffers before it starts.
    #[serde(default)]
    pub startup_buffer_s: f64,
    /// Sessions the playout model could be applied to.
    pub sessions: u64,
    /// Of those, sessions that played less than one 60 s probe (judged against 1.8 s).
    #[serde(default)]
    pub short_sessions: u64,
    pub startup_delay_ms: Percentiles,
    pub rebuffer_events: u64,
    pub rebuffer_s: f64,
    pub play_s: f64,
    /// rebuffer_s / play_s.
    pub rebuffer_ratio: f64,
    pub startup_failures: u64,
    pub inplay_failures: u64,
    /// Lateness of content that arrived after it was due: the length of each stall.
    pub late_jitter_ms: Percentiles,
    pub acceptable_sessions: u64,
    pub acceptable_sessions_fraction: f64,
    /// Why `acceptable_sessions_fraction` needs reading with care (empty when it does not).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
    /// What the adaptive players saw (`--player` runs only).
    pub abr: Option<AbrSummary>,
    /// What the live viewers saw (runs with live sessions only).
    pub live: Option<LiveSummary>,
}

/// Live viewers' quality over steady-state live sessions: start-up, stalls, latency behind
/// the live edge, segments skipped and late-only jitter (see [`crate::player::live`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveSummary {
    pub sessions: u64,
    /// Sessions that started and never stalled.
    pub unstalled_sessions: u64,
    pub stalls: u64,
    pub stall_s: f64,
    pub startup_ms: Percentiles,
    /// Median and 95th percentile of the latency behind the live edge over every sample
    /// of every session, seconds.
    pub latency_to_edge_s_p50: f64,
    pub latency_to_edge_s_p95: f64,
    pub latency_to_edge_ms: Percentiles,
    pub segments: u64,
    /// Segments that left the window before the viewer fetched them.
    pub skipped_segments: u64,
    /// Length of each stall: content that arrived after it was due.
    pub late_jitter_ms: Percentiles,
    pub playlist_reloads: u64,
    /// Viewers whose stream ended (`#EXT-X-ENDLIST`) before their watch time.
    pub stream_ended: u64,
    /// Viewers that followed their stream as low-latency HLS, as DASH, as low-latency DASH
    /// (the rest: classic HLS).
    #[serde(default)]
    pub ll_hls_sessions: u64,
    #[serde(default)]
    pub dash_sessions: u64,
    #[serde(default)]
    pub ll_dash_sessions: u64,
    /// Low-latency HLS parts fetched, of them requested from a preload hint; blocking
    /// playlist reloads (`_HLS_msn`).
    #[serde(default)]
    pub parts: u64,
    #[serde(default)]
    pub hinted_parts: u64,
    #[serde(default)]
    pub blocking_reloads: u64,
    /// DASH segments read while the origin was still receiving them.
    #[serde(default)]
    pub early_segments: u64,
    /// Playback-rate catch-up: seconds of media played beyond the wall-clock time they
    /// took, summed over viewers.
    #[serde(default)]
    pub catchup_s: f64,
}

impl LiveSummary {
    /// One live viewer's summary (`clean`: it ran to its end); the percentiles come from
    /// the histograms ([`LiveSummary::set`]).
    fn one(
        o: &crate::record::PlayerOutcome,
        l: &crate::record::LiveOutcome,
        clean: bool,
    ) -> LiveSummary {
        LiveSummary {
            sessions: 1,
            unstalled_sessions: u64::from(clean && o.unstalled()),
            stalls: u64::from(o.stalls),
            stall_s: o.stall_s,
            segments: u64::from(l.segments),
            skipped_segments: u64::from(l.skipped_segments),
            playlist_reloads: u64::from(l.reloads),
            stream_ended: u64::from(l.stream_ended),
            ll_hls_sessions: u64::from(l.mode == crate::record::LiveMode::LlHls),
            dash_sessions: u64::from(l.mode == crate::record::LiveMode::Dash),
            ll_dash_sessions: u64::from(l.mode == crate::record::LiveMode::LlDash),
            parts: u64::from(l.parts),
            hinted_parts: u64::from(l.hinted_parts),
            blocking_reloads: u64::from(l.blocking_reloads),
            early_segments: u64::from(l.early_segments),
            catchup_s: l.catchup_s,
            ..LiveSummary::default()
        }
    }

    fn merge(&mut self, o: &LiveSummary) {
        add_fields!(
            self,
            o,
            [
                sessions,
                stalls,
                stall_s,
                unstalled_sessions,
                segments,
                skipped_segments,
                playlist_reloads,
                stream_ended,
                ll_hls_sessions,
                dash_sessions,
                ll_dash_sessions,
                parts,
                hinted_parts,
                blocking_reloads,
                early_segments,
                catchup_s,
            ]
        );
    }

    /// Fill the percentile fields from the three histograms.
    fn set(&mut self, startup: &Hist, latency: &Hist, late: &Hist) {
        self.startup_ms = startup.percentiles();
        self.latency_to_edge_ms = latency.percentiles();
        self.late_jitter_ms = late.percentiles();
        self.latency_to_edge_s_p50 = self.latency_to_edge_ms.p50 / 1000.0;
        self.latency_to_edge_s_p95 = latency.value_at_ms(95.0) / 1000.0;
    }
}

/// Adaptive-player quality over steady-state player sessions: the renditions chosen and the
/// players' own start-up and stalls (their buffers drain in real time).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AbrSummary {
    pub sessions: u64,
    /// Mean bit rate of the media fetched, weighted by media time (kbit/s).
    pub mean_bitrate_kbps: f64,
    /// Seconds of media fetched.
    pub media_s: f64,
    pub switches: u64,
    pub stalls: u64,
    pub stall_s: f64,
    /// Sessions that started and never stalled.
    pub unstalled_sessions: u64,
    /// Sessions that kept at least 90% of their unloaded mean bit rate.
    #[serde(default)]
    pub kept_bitrate_sessions: u64,
    /// Mean of the sessions' unloaded reference bit rates, weighted by media time (kbit/s).
    #[serde(default)]
    pub reference_kbps: f64,
    /// Segment downloads abandoned for a lower rendition, and the bytes they had brought.
    #[serde(default)]
    pub aborted_segments: u64,
    #[serde(default)]
    pub aborted_bytes: u64,
    /// Seeks made, and the seconds from each until playback resumed, summed.
    #[serde(default)]
    pub seeks: u64,
    #[serde(default)]
    pub seek_wait_s: f64,
    pub startup_ms: Percentiles,
}

impl AbrSummary {
    /// One player session's summary (`started_clean`: it ran to its end); the start-up
    /// percentiles come from the histogram.
    fn one(o: &crate::record::PlayerOutcome, started_clean: bool) -> AbrSummary {
        AbrSummary {
            sessions: 1,
            mean_bitrate_kbps: o.mean_kbps(),
            media_s: o.media_s,
            switches: u64::from(o.switches),
            stalls: u64::from(o.stalls),
            stall_s: o.stall_s,
            unstalled_sessions: u64::from(started_clean && o.unstalled()),
            kept_bitrate_sessions: u64::from(o.kept_bitrate()),
            reference_kbps: o.reference_kbps,
            aborted_segments: u64::from(o.aborted),
            aborted_bytes: o.aborted_bytes,
            seeks: u64::from(o.seeks),
            seek_wait_s: o.seek_wait_s,
            startup_ms: Percentiles::default(),
        }
    }

    /// Add `o`'s sessions; the mean bit rates are weighted by media time.
    fn merge(&mut self, o: &AbrSummary) {
        let kbps_s = self.mean_bitrate_kbps * self.media_s + o.mean_bitrate_kbps * o.media_s;
        let ref_s = self.reference_kbps * self.media_s + o.reference_kbps * o.media_s;
        self.media_s += o.media_s;
        self.mean_bitrate_kbps = ratio(kbps_s, self.media_s);
        self.reference_kbps = ratio(ref_s, self.media_s);
        add_fields!(
            self,
            o,
            [
                sessions,
                kept_bitrate_sessions,
                aborted_segments,
                aborted_bytes,
                seeks,
                seek_wait_s,
                switches,
                stalls,
                stall_s,
                unstalled_sessions,
            ]
        );
    }
}

impl Qos {
    /// The caveat for the acceptable fraction: sessions too short for the 3% rule, or no
    /// session the model applies to.
    fn caveat(&self) -> String {
        let allowance = qos::WAIT_SHARE * qos::PROBE_S;
        if self.sessions == 0 {
            return "no session could be modelled (the log gives neither media_s nor a bit rate, \
                    or every session was cancelled): acceptable_sessions_fraction means nothing"
                .into();
        }
        if self.short_sessions == self.sessions {
            return format!(
                "all {} sessions played less than {:.0} s, too short for the seed's 3%-of-play-time rule: \
                 acceptable here means at most {allowance:.1} s of start-up plus stalls (3% of the seed's \
                 {:.0} s probes)",
                self.sessions,
                qos::PROBE_S,
                qos::PROBE_S
            );
        }
        if self.short_sessions * 2 > self.sessions {
            return format!(
                "{} of {} sessions played less than {:.0} s: they are judged against {allowance:.1} s of \
                 start-up plus stalls (3% of the seed's {:.0} s probes), not 3% of their own play time",
                self.short_sessions,
                self.sessions,
                qos::PROBE_S,
                qos::PROBE_S
            );
        }
        String::new()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ConnStats {
    pub opened: u64,
    /// Connections reopened because the server had closed the previous one.
    pub reconnects: u64,
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// Session outcomes and client-side quality over the sessions `judged` marks.
fn quality(
    config: &LoadConfig,
    sessions: &[SessionRecord],
    judged: &[bool],
) -> (SessionStats, Qos) {
    let mut stats = SessionStats::default();
    let mut q = Qos::default();
    let mut startup = Hist::new();
    let mut late = Hist::new();
    let mut abr: Option<AbrSummary> = None;
    let mut abr_startup = Hist::new();
    let mut live: Option<LiveSummary> = None;
    let mut live_hists = [Hist::new(), Hist::new(), Hist::new()];
    let mut lag = Hist::new();
    for (si, s) in sessions.iter().enumerate() {
        if !judged[si] {
            continue;
        }
        if let Some(l) = session_lag(s, config.links.get(s.session.class.as_str())) {
            lag.record_s(l);
            stats.lag_sessions += 1;
        }
        stats.started += 1;
        match s.end {
            SessionEnd::Completed => stats.completed += 1,
            SessionEnd::Failed(_) => stats.failed += 1,
            SessionEnd::Refused => stats.refused += 1,
            SessionEnd::Cancelled => stats.cancelled += 1,
        }
        if s.end == SessionEnd::Refused {
            // Turned away: it never played.
            continue;
        }
        if let Some((o, l)) = s.player.as_ref().and_then(|o| Some((o, o.live.as_ref()?))) {
            let one = LiveSummary::one(o, l, s.end == SessionEnd::Completed);
            live.get_or_insert_with(LiveSummary::default).merge(&one);
            if let Some(t) = o.startup_s {
                live_hists[0].record_s(t);
            }
            for &x in &l.latency_s {
                live_hists[1].record_s(x.max(0.0));
            }
            for &x in &l.late_s {
                live_hists[2].record_s(x);
            }
        } else if let Some(o) = &s.player {
            let one = AbrSummary::one(o, s.end == SessionEnd::Completed);
            abr.get_or_insert_with(AbrSummary::default).merge(&one);
            if let Some(t) = o.startup_s {
                abr_startup.record_s(t);
            }
        }
        // Players (adaptive and live) count their own stalls; replayed sessions the model's.
        let own_stalls = s.player.as_ref().map(|o| o.stalls);
        let kept = s.player.as_ref().is_none_or(|o| o.kept_bitrate());
        let mut judge = |stalls: u32| {
            let clean = stalls == 0 && kept;
            match s.end {
                SessionEnd::Completed if clean => stats.played_clean += 1,
                SessionEnd::Cancelled if clean => stats.cut_clean += 1,
                _ => {}
            }
        };
        let Some(p) = qos::playout(s, config.startup_buffer_s) else {
            judge(own_stalls.unwrap_or(0));
            continue;
        };
        judge(own_stalls.unwrap_or(p.rebuffer_events));
        q.sessions += 1;
        q.short_sessions += u64::from(p.short());
        if let Some(d) = p.startup_delay_s {
            startup.record_s(d);
        }
        q.rebuffer_events += u64::from(p.rebuffer_events);
        q.rebuffer_s += p.rebuffer_s;
        q.play_s += p.play_s;
        for l in &p.late_s {
            late.record_s(*l);
        }
        match p.failure {
            Some(FailurePhase::Startup) => q.startup_failures += 1,
            Some(FailurePhase::InPlay) => q.inplay_failures += 1,
            None => {}
        }
        q.acceptable_sessions += u64::from(p.acceptable());
    }
    stats.lag_p50_s = lag.value_at_ms(50.0) / 1000.0;
    stats.lag_p95_s = lag.value_at_ms(LAG_PERCENTILE) / 1000.0;
    q.startup_delay_ms = startup.percentiles();
    q.late_jitter_ms = late.percentiles();
    q.startup_buffer_s = config.startup_buffer_s;
    q.abr = abr.map(|mut a| {
        a.startup_ms = abr_startup.percentiles();
        a
    });
    q.live = live.map(|mut v| {
        let [a, b, c] = &live_hists;
        v.set(a, b, c);
        v
    });
    (stats, q)
}

/// Seconds a completed replayed session fell behind its own pace (see
/// [`SessionStats::lag_p95_s`]); `None` for players (they pace themselves), and for
/// sessions that did not complete.
pub(crate) fn session_lag(s: &SessionRecord, link: Option<&crate::link::Link>) -> Option<f64> {
    if s.player.is_some() || s.end != SessionEnd::Completed {
        return None;
    }
    let (first, last) = (s.requests.first()?, s.requests.last()?);
    let sizes: Vec<(f64, u64)> = s.requests.iter().map(|r| (r.pacing_s, r.bytes)).collect();
    let actual = last.finished_at()? - first.started;
    Some((actual - nominal_s(&sizes, link)).max(0.0))
}

/// What a session of requests of `(pacing, bytes)` takes on an idle server (seconds): its
/// pacing, or the transfer of each response over the client's link when that is longer,
/// plus a round trip per request.
pub(crate) fn nominal_s(requests: &[(f64, u64)], link: Option<&crate::link::Link>) -> f64 {
    let transfer = |bytes: u64| {
        link.map_or(0.0, |l| {
            let wire = if l.bandwidth_bps > 0 {
                bytes as f64 * 8.0 / l.bandwidth_bps as f64
            } else {
                0.0
            };
            wire + 2.0 * l.one_way_delay.as_secs_f64()
        })
    };
    let Some(&(_, first)) = requests.first() else {
        return 0.0;
    };
    let mut nominal = 0.0;
    let mut prev = transfer(first);
    for &(pacing, bytes) in &requests[1..] {
        nominal += pacing.max(prev);
        prev = transfer(bytes);
    }
    nominal + prev
}

/// Each request's intended send time (seconds into the run): the session's scheduled
/// arrival plus the pacing of the requests before it. Players pick requests as they play,
/// so theirs are sent when intended.
fn intended_times(s: &SessionRecord) -> Vec<f64> {
    if s.player.is_some() {
        return s.requests.iter().map(|r| r.started).collect();
    }
    crate::warm::nominal_times(&s.session, s.arrival).collect()
}

/// Steady-state membership of every session and request of `sessions` (this run's records),
/// decided on the whole run's schedule ([`crate::steady`]), so a shard marks exactly its
/// part of what the single-process run marks.
fn steady_requests(config: &LoadConfig, sessions: &[SessionRecord]) -> (Vec<bool>, Vec<Vec<bool>>) {
    let plan = crate::steady::steady(config, &crate::steady::schedule(config));
    let steady = match &plan.requests {
        Some(marks) => sessions
            .iter()
            .map(|s| {
                let planned = marks.get(s.index);
                s.requests
                    .iter()
                    .map(|r| {
                        planned
                            .and_then(|m| m.get(r.index as usize))
                            .copied()
                            .unwrap_or(false)
                    })
                    .collect()
            })
            .collect(),
        None => crate::steady::rank_sent(config, &plan, sessions),
    };
    let settle = config.settle_s();
    let session_steady = sessions
        .iter()
        .map(|s| crate::steady::judged(&plan, s.index, s.prefilled, s.probe, s.arrival, settle))
        .collect();
    (session_steady, steady)
}

impl Results {
    /// Summarize a finished run.
    pub fn build(
        config: &LoadConfig,
        sessions: &[SessionRecord],
        timeseries: Vec<Sample>,
        elapsed_s: f64,
        warmup_requests: u64,
        fd_limit: u64,
    ) -> Results {
        let (session_steady, steady) = steady_requests(config, sessions);
        let mut requests = RequestStats::default();
        let mut ttfb = Hist::new();
        let mut ttlb = Hist::new();
        let mut intended = Hist::new();
        let mut schedule = ScheduleStats::default();
        let mut lag = Hist::new();
        let mut refusal = Hist::new();
        let (mut w0, mut w1, mut done_bytes) = (f64::INFINITY, f64::NEG_INFINITY, 0u64);
        let mut conns = ConnStats::default();
        let mut sent = 0u64;
        for (si, s) in sessions.iter().enumerate() {
            conns.opened += u64::from(s.connections_opened);
            conns.reconnects += u64::from(s.reconnects);
            sent += s.requests.len() as u64;
            if session_steady[si] {
                requests.skipped += u64::from(s.skipped);
            }
            let due = intended_times(s);
            if let Some(first) = s.requests.first() {
                let l = (first.started - s.arrival).max(0.0);
                lag.record_s(l);
                schedule.late_sessions += u64::from(l > LATE_S);
            }
            for (ri, r) in s.requests.iter().enumerate() {
                if !steady[si][ri] {
                    continue;
                }
                let due = due.get(r.index as usize).copied().unwrap_or(r.started);
                schedule.late_requests += u64::from(r.started - due > LATE_S);
                requests.bytes += r.bytes;
                match &r.failure {
                    Some(f) if f.reason == FailureReason::Timeout => requests.timed_out += 1,
                    Some(f) if f.reason == FailureReason::Refused => {
                        *requests.errors.entry(f.reason.to_string()).or_default() += 1;
                        refusal.record_s(r.elapsed);
                    }
                    Some(f) => *requests.errors.entry(f.reason.to_string()).or_default() += 1,
                    None => {}
                }
                if let (true, Some(d)) = (r.completed(), r.ttlb) {
                    requests.completed += 1;
                    done_bytes += r.bytes;
                    ttlb.record_s(d);
                    intended.record_s(r.started + d - due.min(r.started));
                    if let Some(f) = r.ttfb {
                        ttfb.record_s(f);
                    }
                    w0 = w0.min(r.started);
                    w1 = w1.max(r.started + d);
                }
            }
        }
        let window = if w1 > w0 { [w0, w1] } else { [0.0, 0.0] };
        let (stats, q) = quality(config, sessions, &session_steady);
        let probes = sessions.iter().any(|s| s.probe).then(|| {
            let judged: Vec<bool> = sessions.iter().map(|s| s.probe).collect();
            let (sessions, qos) = quality(config, sessions, &judged);
            ProbeReport { sessions, qos }
        });
        let mut results = Results {
            run: RunInfo {
                target: format!(
                    "{}://{}",
                    if config.target.tls { "https" } else { "http" },
                    config.target.host
                ),
                source: config.source.clone(),
                rate: config.rate,
                verify: config.verify,
                http: config.http.to_string(),
                link_emulation: link_emulation(config).into(),
                warmup_requests,
                ramp_up_sessions: config.ramp.up_sessions,
                ramp_down_sessions: config.ramp.down_sessions,
                ramp_up_requests: config.ramp.up_requests,
                ramp_down_requests: config.ramp.down_requests,
                sessions_scheduled: (0..config.schedule().len())
                    .filter(|&i| config.owns(i))
                    .count() as u64,
                sessions_started: sessions.len() as u64,
                requests_sent: sent,
                elapsed_s,
                steady_window_s: window,
                fd_limit,
                hosts: 1,
                warm_start_s: config.warm_horizon(),
                sessions_prefilled: sessions.iter().filter(|s| s.prefilled).count() as u64,
                settle_s: config.settle_s(),
                percentiles: config.percentiles.clone(),
                shard: config.shard,
                start_at_unix: config.start_at.map(crate::shard::unix_seconds),
                retried_requests: 0,
                recovered_requests: 0,
            },
            requests,
            sessions: stats,
            throughput_mb_s: ratio(done_bytes as f64 / 1e6, window[1] - window[0]),
            missed_deadlines: q.late_jitter_ms.count,
            latency_ms: LatencyStats {
                ttfb: ttfb.percentiles(),
                ttlb: ttlb.percentiles(),
                refusal: refusal.percentiles(),
                ttlb_intended: intended.percentiles(),
            },
            schedule: ScheduleStats {
                session_lag_ms: lag.percentiles(),
                ..schedule
            },
            timeseries,
            qos: q,
            probes,
            connections: conns,
        };
        results.refresh_fractions();
        results
    }

    /// Fill the `chosen` percentiles of the latency distributions from `run.percentiles`.
    fn choose_percentiles(&mut self) {
        let list = self.run.percentiles.clone();
        if list.is_empty() {
            return;
        }
        let l = &mut self.latency_ms;
        for p in [
            &mut l.ttfb,
            &mut l.ttlb,
            &mut l.ttlb_intended,
            &mut l.refusal,
            &mut self.schedule.session_lag_ms,
        ] {
            p.choose(&list);
        }
    }

    fn refresh_fractions(&mut self) {
        let fill = |s: &mut SessionStats, q: &mut Qos| {
            s.failure_fraction = ratio(s.failed as f64, (s.completed + s.failed) as f64);
            s.goodput_fraction = ratio(s.played_clean as f64, s.started as f64);
            q.rebuffer_ratio = ratio(q.rebuffer_s, q.play_s);
            q.acceptable_sessions_fraction = ratio(q.acceptable_sessions as f64, q.sessions as f64);
            q.note = q.caveat();
        };
        fill(&mut self.sessions, &mut self.qos);
        if let Some(p) = self.probes.as_mut() {
            fill(&mut p.sessions, &mut p.qos);
        }
        self.choose_percentiles();
    }

    /// Merge results of load hosts that ran at the same time against the same server:
    /// counts and histograms add, throughputs add, time series add second by second.
    pub fn merge(parts: &[Results]) -> Result<Results, String> {
        let Some(first) = parts.first() else {
            return Err("nothing to merge".into());
        };
        let identity = |r: &Results| {
            format!(
                "target {}, {}, {} sessions/s, start {}",
                r.run.target,
                r.run.source,
                r.run.rate,
                r.run
                    .start_at_unix
                    .map_or("unset".to_string(), |t| format!("{t}"))
            )
        };
        let shards: Vec<_> = parts.iter().map(|p| (p.run.shard, identity(p))).collect();
        crate::shard::check_complete(&shards)?;
        let sharded = first.run.shard.is_some();
        let mut out = first.clone();
        // The merged file is the whole run, not a shard.
        out.run.shard = None;
        // Histograms add over every input, the first included.
        let mut hists: [Hist; 7] = Default::default();
        let mut abr_startup = Hist::new();
        let mut live_hists: [Hist; 3] = Default::default();
        for (i, p) in parts.iter().enumerate() {
            let ctx = |e: String| format!("input {}: {e}", i + 1);
            let theirs = [
                &p.latency_ms.ttfb,
                &p.latency_ms.ttlb,
                &p.qos.startup_delay_ms,
                &p.qos.late_jitter_ms,
                &p.latency_ms.refusal,
                &p.latency_ms.ttlb_intended,
                &p.schedule.session_lag_ms,
            ];
            for (h, t) in hists.iter_mut().zip(theirs) {
                h.add(&t.hist().map_err(ctx)?);
            }
            if let Some(a) = &p.qos.abr {
                abr_startup.add(&a.startup_ms.hist().map_err(ctx)?);
            }
            if let Some(v) = &p.qos.live {
                let theirs = [&v.startup_ms, &v.latency_to_edge_ms, &v.late_jitter_ms];
                for (h, t) in live_hists.iter_mut().zip(theirs) {
                    h.add(&t.hist().map_err(ctx)?);
                }
            }
        }
        // Counts add over the inputs after the first (`out` starts as the first).
        for (i, p) in parts.iter().enumerate().skip(1) {
            add_fields!(
                out.run,
                p.run,
                [
                    hosts,
                    sessions_scheduled,
                    sessions_started,
                    requests_sent,
                    retried_requests,
                    recovered_requests,
                    warmup_requests,
                    sessions_prefilled,
                ]
            );
            add_fields!(out.schedule, p.schedule, [late_sessions, late_requests]);
            out.run.warm_start_s = out.run.warm_start_s.max(p.run.warm_start_s);
            out.run.settle_s = out.run.settle_s.max(p.run.settle_s);
            out.run.elapsed_s = out.run.elapsed_s.max(p.run.elapsed_s);
            // Shards each ran the whole schedule's rate; independent hosts add theirs.
            if !sharded {
                out.run.rate += p.run.rate;
            }
            out.run.steady_window_s = [
                out.run.steady_window_s[0].min(p.run.steady_window_s[0]),
                out.run.steady_window_s[1].max(p.run.steady_window_s[1]),
            ];
            let r = &mut out.requests;
            add_fields!(r, p.requests, [completed, timed_out, bytes, skipped]);
            for (k, v) in &p.requests.errors {
                *r.errors.entry(k.clone()).or_default() += v;
            }
            let s = &mut out.sessions;
            add_fields!(
                s,
                p.sessions,
                [
                    started,
                    completed,
                    failed,
                    cancelled,
                    refused,
                    played_clean,
                    cut_clean,
                    lag_sessions,
                ]
            );
            // Shards keep no lag histogram: the merged percentiles are the largest shard's
            // (an upper estimate; shards of one run see the same server).
            s.lag_p50_s = s.lag_p50_s.max(p.sessions.lag_p50_s);
            s.lag_p95_s = s.lag_p95_s.max(p.sessions.lag_p95_s);
            out.throughput_mb_s += p.throughput_mb_s;
            out.missed_deadlines += p.missed_deadlines;
            let q = &mut out.qos;
            if q.startup_buffer_s != p.qos.startup_buffer_s {
                return Err(format!(
                    "input {}: start-up buffer {} s differs from the first input's {} s; QoS would not add up",
                    i + 1,
                    p.qos.startup_buffer_s,
                    q.startup_buffer_s
                ));
            }
            add_fields!(
                q,
                p.qos,
                [
                    sessions,
                    short_sessions,
                    rebuffer_events,
                    rebuffer_s,
                    play_s,
                    startup_failures,
                    inplay_failures,
                    acceptable_sessions,
                ]
            );
            match (&mut q.abr, &p.qos.abr) {
                (Some(a), Some(b)) => a.merge(b),
                (None, Some(b)) => q.abr = Some(b.clone()),
                _ => {}
            }
            if let Some(b) = &p.qos.live {
                match &mut q.live {
                    Some(a) => a.merge(b),
                    None => q.live = Some(b.clone()),
                }
            }
            // Probes run on one shard (or host) only.
            if out.probes.is_none() {
                out.probes = p.probes.clone();
            }
            add_fields!(out.connections, p.connections, [opened, reconnects]);
            for (j, sample) in p.timeseries.iter().enumerate() {
                match out.timeseries.get_mut(j) {
                    Some(t) => add_fields!(
                        t,
                        sample,
                        [active_sessions, requests_per_s, mb_per_s, failures]
                    ),
                    None => out.timeseries.push(sample.clone()),
                }
            }
        }
        let [ttfb, ttlb, startup, late, refusal, intended, lag] = hists;
        out.latency_ms.ttlb_intended = intended.percentiles();
        out.schedule.session_lag_ms = lag.percentiles();
        out.latency_ms.refusal = refusal.percentiles();
        out.latency_ms.ttfb = ttfb.percentiles();
        out.latency_ms.ttlb = ttlb.percentiles();
        out.qos.startup_delay_ms = startup.percentiles();
        out.qos.late_jitter_ms = late.percentiles();
        if let Some(a) = out.qos.abr.as_mut() {
            a.startup_ms = abr_startup.percentiles();
        }
        if let Some(v) = out.qos.live.as_mut() {
            let [a, b, c] = &live_hists;
            v.set(a, b, c);
        }
        out.refresh_fractions();
        Ok(out)
    }

    /// A readable multi-line summary.
    pub fn summary(&self) -> String {
        let r = &self.requests;
        let s = &self.sessions;
        let q = &self.qos;
        let errors = if r.errors.is_empty() {
            "none".to_string()
        } else {
            r.errors
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let lat = |p: &Percentiles| {
            if p.chosen.is_empty() {
                format!(
                    "p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1} ms",
                    p.p50, p.p90, p.p99, p.p99_9, p.max
                )
            } else {
                let parts: Vec<String> = p
                    .chosen
                    .iter()
                    .map(|[q, ms]| format!("p{q} {ms:.1}"))
                    .collect();
                format!("{}  max {:.1} ms", parts.join("  "), p.max)
            }
        };
        let mut out = String::new();
        out += &format!(
            "target {}  ({} host{}, {:.1} s, link emulation {})\n",
            self.run.target,
            self.run.hosts,
            if self.run.hosts == 1 { "" } else { "s" },
            self.run.elapsed_s,
            self.run.link_emulation
        );
        out += &format!(
            "sessions   started {}  completed {}  failed {} ({:.2}%)  cancelled {}  refused {}  played without a stall {:.1}%\n",
            s.started,
            s.completed,
            s.failed,
            100.0 * s.failure_fraction,
            s.cancelled,
            s.refused,
            100.0 * s.goodput_fraction
        );
        if s.lag_sessions > 0 {
            out += &format!(
                "pace       {} sessions behind their own pace by p50 {:.2} s  p95 {:.2} s\n",
                s.lag_sessions, s.lag_p50_s, s.lag_p95_s
            );
        }
        if s.refused > 0 {
            out += &format!("refusals   {}\n", lat(&self.latency_ms.refusal));
        }
        if let Some(v) = &q.live {
            out += &format!(
                "live       {} viewers  to edge p50 {:.1} s p95 {:.1} s  stalls {} ({:.1} s)  skipped {} of {} segments  start-up p50 {:.0} ms  unstalled {}\n",
                v.sessions,
                v.latency_to_edge_s_p50,
                v.latency_to_edge_s_p95,
                v.stalls,
                v.stall_s,
                v.skipped_segments,
                v.segments + v.skipped_segments,
                v.startup_ms.p50,
                v.unstalled_sessions
            );
            let ll = v.ll_hls_sessions + v.ll_dash_sessions;
            if ll > 0 || v.dash_sessions > 0 {
                out += &format!(
                    "           low-latency {} (LL-HLS {}, LL-DASH {}), classic DASH {}  parts {} ({} hinted)  blocking reloads {}  segments read while written {}  catch-up {:+.1} s\n",
                    ll,
                    v.ll_hls_sessions,
                    v.ll_dash_sessions,
                    v.dash_sessions,
                    v.parts,
                    v.hinted_parts,
                    v.blocking_reloads,
                    v.early_segments,
                    v.catchup_s
                );
            }
        }
        if let Some(a) = &q.abr {
            out += &format!(
                "players    {} sessions  mean {:.0} kbit/s (unloaded {:.0}, kept 90% by {})  switches {}  abandoned {}  seeks {} ({:.1} s waited)  stalls {} ({:.1} s)  start-up p50 {:.0} p90 {:.0} ms  unstalled {}\n",
                a.sessions,
                a.mean_bitrate_kbps,
                a.reference_kbps,
                a.kept_bitrate_sessions,
                a.switches,
                a.aborted_segments,
                a.seeks,
                a.seek_wait_s,
                a.stalls,
                a.stall_s,
                a.startup_ms.p50,
                a.startup_ms.p90,
                a.unstalled_sessions
            );
        }
        out += &format!(
            "requests   completed {}  timed out {}  errors: {}  skipped {}\n",
            r.completed, r.timed_out, errors, r.skipped
        );
        out += &format!(
            "throughput {:.2} MB/s  ({} bytes received)  missed deadlines {}\n",
            self.throughput_mb_s, r.bytes, self.missed_deadlines
        );
        out += &format!("first byte {}\n", lat(&self.latency_ms.ttfb));
        out += &format!("last byte  {}\n", lat(&self.latency_ms.ttlb));
        out += &format!(
            "intended   {}  (from the intended send time; {} steady requests sent late)\n",
            lat(&self.latency_ms.ttlb_intended),
            self.schedule.late_requests
        );
        if self.schedule.late_sessions > 0 {
            let l = &self.schedule.session_lag_ms;
            out += &format!(
                "warning    the load generator started {} of {} sessions more than {:.0} ms late (p99 {:.0} ms, max {:.0} ms): it could not keep the schedule; judge latency by the `intended` line\n",
                self.schedule.late_sessions,
                l.count,
                LATE_S * 1000.0,
                l.p99,
                l.max
            );
        }
        out += &format!(
            "qos        startup ({:.1} s buffered) p50 {:.1} ms p90 {:.1} ms p99 {:.1} ms  rebuffers {} (ratio {:.4})  failures startup {} in-play {}  acceptable {:.1}% of {}\n",
            q.startup_buffer_s,
            q.startup_delay_ms.p50,
            q.startup_delay_ms.p90,
            q.startup_delay_ms.p99,
            q.rebuffer_events,
            q.rebuffer_ratio,
            q.startup_failures,
            q.inplay_failures,
            100.0 * q.acceptable_sessions_fraction,
            q.sessions
        );
        if !q.note.is_empty() {
            out += &format!("qos note   {}\n", q.note);
        }
        out += &format!(
            "connections opened {}  reconnects {}\n",
            self.connections.opened, self.connections.reconnects
        );
        if let Some(p) = &self.probes {
            let q = &p.qos;
            out += &format!(
                "probes     {} sessions  completed {}  start-up p50 {:.0} ms  stalls {} ({:.1} s)  acceptable {}/{}{}\n",
                p.sessions.started,
                p.sessions.completed,
                q.startup_delay_ms.p50,
                q.rebuffer_events,
                q.rebuffer_s,
                q.acceptable_sessions,
                q.sessions,
                q.live.as_ref().map_or(String::new(), |v| format!(
                    "  live to edge p50 {:.1} s  skipped {}",
                    v.latency_to_edge_s_p50, v.skipped_segments
                ))
            );
        }
        out
    }
}

/// Write one CSV row per request (for pandas and friends).
pub fn write_csv<W: std::io::Write>(out: W, sessions: &[SessionRecord]) -> std::io::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record([
        "session_index",
        "session_id",
        "class",
        "request",
        "conn",
        "path",
        "range",
        "started_s",
        "intended_s",
        "ttfb_ms",
        "ttlb_ms",
        "bytes",
        "status",
        "outcome",
        "detail",
    ])?;
    let ms = |v: Option<f64>| v.map(|s| format!("{:.3}", s * 1000.0)).unwrap_or_default();
    for s in sessions {
        let due = intended_times(s);
        for r in &s.requests {
            let planned = &s.session.requests[r.index as usize];
            let (outcome, detail) = match &r.failure {
                Some(f) => (f.reason.as_str(), f.detail.as_str()),
                None if r.completed() => ("ok", ""),
                None => ("unfinished", ""),
            };
            w.write_record([
                s.index.to_string(),
                s.session.id.to_string(),
                s.session.class.clone(),
                r.index.to_string(),
                r.conn.to_string(),
                planned.path.clone(),
                planned.range.map(|g| g.header_value()).unwrap_or_default(),
                format!("{:.6}", r.started),
                format!(
                    "{:.6}",
                    due.get(r.index as usize).copied().unwrap_or(r.started)
                ),
                ms(r.ttfb),
                ms(r.ttlb),
                r.bytes.to_string(),
                r.status.to_string(),
                outcome.to_string(),
                detail.to_string(),
            ])?;
        }
    }
    w.flush()
}

/// Write one CSV row per player session (`--players-csv`): what the player saw — start-up,
/// stalls, switches, the bit rate it kept against its unloaded reference, abandoned
/// downloads, seeks, live figures — and its bit-rate timeline as `kbps@media_s` steps (a
/// step where the rendition changed). Sessions without a player outcome are left out.
pub fn write_players_csv<W: std::io::Write>(
    out: W,
    sessions: &[SessionRecord],
) -> std::io::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record([
        "session_index",
        "session_id",
        "class",
        "title",
        "ended",
        "startup_ms",
        "stalls",
        "stall_s",
        "switches",
        "mean_kbps",
        "reference_kbps",
        "kept_bitrate",
        "media_s",
        "aborted",
        "aborted_bytes",
        "seeks",
        "seek_wait_s",
        "live_skipped_segments",
        "live_mode",
        "live_throughput_kbps",
        "timeline",
    ])?;
    for s in sessions {
        let Some(p) = &s.player else {
            continue;
        };
        let mut timeline = String::new();
        let mut last = None;
        for t in &p.timeline {
            if last != Some(t.kbps) {
                if !timeline.is_empty() {
                    timeline.push(' ');
                }
                timeline.push_str(&format!("{}@{}", t.kbps, t.media_s));
                last = Some(t.kbps);
            }
        }
        w.write_record([
            s.index.to_string(),
            s.session.id.to_string(),
            s.session.class.clone(),
            s.session.title.map(|t| t.to_string()).unwrap_or_default(),
            s.end.as_str().to_string(),
            p.startup_s
                .map(|v| format!("{:.1}", v * 1000.0))
                .unwrap_or_default(),
            p.stalls.to_string(),
            format!("{:.3}", p.stall_s),
            p.switches.to_string(),
            format!("{:.1}", p.mean_kbps()),
            format!("{:.1}", p.reference_kbps),
            p.kept_bitrate().to_string(),
            format!("{:.3}", p.media_s),
            p.aborted.to_string(),
            p.aborted_bytes.to_string(),
            p.seeks.to_string(),
            format!("{:.3}", p.seek_wait_s),
            p.live
                .as_ref()
                .map(|l| l.skipped_segments.to_string())
                .unwrap_or_default(),
            p.live
                .as_ref()
                .map(|l| l.mode.as_str().to_string())
                .unwrap_or_default(),
            p.live
                .as_ref()
                .and_then(|l| l.throughput_kbps)
                .map(|k| format!("{k:.0}"))
                .unwrap_or_default(),
            timeline,
        ])?;
    }
    w.flush()
}

/// `run.link_emulation`: `kernel` when some class's bandwidth is shaped in the kernel,
/// `user` when links are emulated only in the load generator, `off` when unlimited.
fn link_emulation(config: &LoadConfig) -> &'static str {
    if config.link_mode == crate::netns::LinkMode::Kernel
        && config.links.values().any(|l| l.bandwidth_bps > 0)
    {
        "kernel"
    } else if config.links.values().all(|l| l.is_unlimited()) {
        "off"
    } else {
        "user"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RequestRecord;
    use crate::{Ramp, Target};
    use std::collections::BTreeSet;
    use std::sync::Arc;
    use vodkit_workload::model::{Request, Session};

    /// A completed session of `chunks` 10 s requests, each body arriving over 0.5..1 s.
    fn watched(index: usize, chunks: usize) -> SessionRecord {
        let requests: Vec<Request> = (0..chunks)
            .map(|i| Request {
                pacing_s: if i < 3 { 0.0 } else { 10.0 },
                media_s: 10.0,
                ..Request::new("/a", None, 10.0)
            })
            .collect();
        let records = (0..chunks)
            .map(|i| RequestRecord {
                index: i as u32,
                conn: 0,
                started: if i < 3 { i as f64 } else { 10.0 * i as f64 },
                ttfb: Some(0.5),
                ttlb: Some(1.0),
                elapsed: 1.0,
                bytes: 1000,
                status: 200,
                failure: None,
                media_s: 10.0,
                pacing_s: 0.0,
            })
            .collect();
        let session = Arc::new(Session::new(index as u64, 1.0, "c", requests));
        SessionRecord {
            index,
            ..SessionRecord::alone(session, records, SessionEnd::Completed)
        }
    }

    #[test]
    fn session_lag_is_what_a_session_took_beyond_its_own_pace() {
        // Four requests paced 10 s apart, each answered in 1 s: 1 s behind (the last
        // response's own time).
        let mut s = watched(0, 4);
        for (i, r) in s.requests.iter_mut().enumerate() {
            r.started = 10.0 * i as f64;
            r.pacing_s = if i == 0 { 0.0 } else { 10.0 };
        }
        assert!((session_lag(&s, None).unwrap() - 1.0).abs() < 1e-9);
        // Each response takes 12 s: every request goes out late, and the session ends
        // 48 s after it began instead of 30 s.
        for (i, r) in s.requests.iter_mut().enumerate() {
            r.started = 12.0 * i as f64;
            r.ttlb = Some(12.0);
        }
        assert!((session_lag(&s, None).unwrap() - 18.0).abs() < 1e-9);
        // Over a link that needs 20 s per response, 12 s responses are on pace.
        let slow = crate::link::Link {
            bandwidth_bps: 400,
            one_way_delay: std::time::Duration::ZERO,
        };
        assert_eq!(session_lag(&s, Some(&slow)), Some(0.0));
        // Failed sessions and players are not measured.
        s.end = SessionEnd::Failed(FailureReason::Timeout);
        assert_eq!(session_lag(&s, None), None);
    }

    fn build(config: &LoadConfig, chunks: &[usize]) -> Results {
        let sessions: Vec<SessionRecord> = chunks
            .iter()
            .enumerate()
            .map(|(i, &c)| watched(i, c))
            .collect();
        Results::build(
            &logged(config, &sessions),
            &sessions,
            Vec::new(),
            1.0,
            0,
            1024,
        )
    }

    /// `config` with the records' sessions as its log (the schedule steady state is
    /// decided on).
    fn logged(config: &LoadConfig, records: &[SessionRecord]) -> LoadConfig {
        let mut c = config.clone();
        c.sessions = records.iter().map(|s| (*s.session).clone()).collect();
        c
    }

    #[test]
    fn the_players_csv_has_a_row_per_player_with_its_bit_rate_steps() {
        use crate::record::{PlayerOutcome, Stretch};
        let step = |media_s: f64, kbps: u32| Stretch {
            media_s,
            duration_s: 2.0,
            kbps,
        };
        let player = SessionRecord {
            player: Some(PlayerOutcome {
                timeline: vec![step(0.0, 300), step(2.0, 1200), step(4.0, 1200)],
                switches: 1,
                startup_s: Some(0.25),
                stalls: 1,
                stall_s: 0.5,
                media_s: 6.0,
                aborted: 1,
                aborted_bytes: 4096,
                seeks: 2,
                reference_kbps: 1200.0,
                ..PlayerOutcome::default()
            }),
            ..watched(0, 2)
        };
        // A replayed session (no player) gets no row.
        let mut out = Vec::new();
        write_players_csv(&mut out, &[player, watched(1, 2)]).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        let header: Vec<&str> = lines[0].split(',').collect();
        let row: Vec<&str> = lines[1].split(',').collect();
        let field = |name: &str| row[header.iter().position(|h| *h == name).unwrap()];
        assert_eq!(field("ended"), "completed");
        assert_eq!(field("startup_ms"), "250.0");
        assert_eq!((field("stalls"), field("switches")), ("1", "1"));
        // (300·2 + 1200·4) / 6 = 900 kbit/s: below 90% of 1,200.
        assert_eq!(
            (field("mean_kbps"), field("kept_bitrate")),
            ("900.0", "false")
        );
        assert_eq!((field("aborted"), field("seeks")), ("1", "2"));
        assert_eq!(field("timeline"), "300@0 1200@2");
    }

    #[test]
    fn a_player_that_lost_its_bit_rate_did_not_play_well() {
        use crate::record::{PlayerOutcome, Stretch};
        let target = Target::parse("http://127.0.0.1:1", false).unwrap();
        let config = LoadConfig::new(target, Vec::new(), 1.0);
        // Two unstalled players whose rule reaches 2,000 kbit/s over their link: one fetched
        // 1,900 (95%: kept), the other 1,000 (50%: lost its bit rate).
        let played = |kbps: u32| PlayerOutcome {
            timeline: vec![Stretch {
                media_s: 0.0,
                duration_s: 20.0,
                kbps,
            }],
            startup_s: Some(0.5),
            media_s: 20.0,
            reference_kbps: 2000.0,
            ..PlayerOutcome::default()
        };
        let sessions: Vec<SessionRecord> = [1900, 1000]
            .iter()
            .enumerate()
            .map(|(i, &k)| SessionRecord {
                player: Some(PlayerOutcome {
                    aborted: i as u32 * 2,
                    aborted_bytes: i as u64 * 1000,
                    ..played(k)
                }),
                ..watched(i, 2)
            })
            .collect();
        let r = Results::build(
            &logged(&config, &sessions),
            &sessions,
            Vec::new(),
            1.0,
            0,
            1024,
        );
        assert_eq!(r.sessions.completed, 2);
        assert_eq!(r.sessions.played_clean, 1, "{:?}", r.sessions);
        let abr = r.qos.abr.as_ref().unwrap();
        assert_eq!(
            (abr.sessions, abr.stalls, abr.unstalled_sessions),
            (2, 0, 2)
        );
        assert_eq!(abr.kept_bitrate_sessions, 1);
        assert_eq!((abr.aborted_segments, abr.aborted_bytes), (2, 1000));
        assert!((abr.reference_kbps - 2000.0).abs() < 1e-9);
        assert!((abr.mean_bitrate_kbps - 1450.0).abs() < 1e-9);
        // Without a reference (0) a session is not held to one.
        let unknown = SessionRecord {
            player: Some(PlayerOutcome {
                reference_kbps: 0.0,
                ..played(1000)
            }),
            ..watched(0, 2)
        };
        let r = Results::build(
            &logged(&config, &sessions),
            &[unknown],
            Vec::new(),
            1.0,
            0,
            1024,
        );
        assert_eq!(r.sessions.played_clean, 1);
        // Cut short by the end of the run: clean so far is neither good nor bad (cut_clean);
        // a stall or a lost bit rate before the cut is bad.
        let cut = |o: PlayerOutcome| SessionRecord {
            end: SessionEnd::Cancelled,
            player: Some(o),
            ..watched(0, 2)
        };
        let stalled = PlayerOutcome {
            stalls: 1,
            stall_s: 2.0,
            ..played(1900)
        };
        let r = Results::build(
            &logged(&config, &sessions),
            &[cut(played(1900)), cut(played(1000)), cut(stalled)],
            Vec::new(),
            1.0,
            0,
            1024,
        );
        assert_eq!((r.sessions.cancelled, r.sessions.played_clean), (3, 0));
        assert_eq!(r.sessions.cut_clean, 1, "{:?}", r.sessions);
    }

    #[test]
    fn sessions_arriving_before_a_warm_run_settled_are_not_judged() {
        use vodkit_workload::model::Request;
        // Sessions of five requests 4 s apart, one a second: a warm start prefills those
        // that began in the last 16 s, whose next requests come within 4 s.
        let req = |p: f64| Request {
            pacing_s: p,
            media_s: 4.0,
            ..Request::new("/f", None, 10.0)
        };
        let requests = vec![req(0.0), req(4.0), req(4.0), req(4.0), req(4.0)];
        let session = Session::new(0, 1.0, "c", requests);
        let target = Target::parse("http://127.0.0.1:1", false).unwrap();
        let mut config = LoadConfig::new(target, vec![session; 100], 1.0);
        config.duration = Some(std::time::Duration::from_secs(40));
        assert_eq!(config.settle_s(), 0.0, "a cold start settles at once");
        config.warm_start = crate::warm::WarmStart::Auto;
        assert_eq!(config.settle_s(), 10.0, "a quarter of the 40 s run");
        // Three completed sessions arriving at 2, 9 and 12 s: only the last is judged.
        let sessions: Vec<SessionRecord> = [2.0, 9.0, 12.0]
            .iter()
            .enumerate()
            .map(|(i, &a)| SessionRecord {
                arrival: a,
                ..watched(i, 2)
            })
            .collect();
        let r = Results::build(&config, &sessions, Vec::new(), 40.0, 0, 1024);
        assert_eq!(r.run.settle_s, 10.0);
        assert_eq!(r.sessions.completed, 1, "{:?}", r.sessions);
    }

    #[test]
    fn short_sessions_are_judged_against_one_probe_and_flagged() {
        let target = Target::parse("http://127.0.0.1:1", false).unwrap();
        let config = LoadConfig::new(target, Vec::new(), 1.0);
        // 2 s of a 10 s body arriving over 0.5 s: playback starts 0.6 s in, under the
        // 1.8 s a short session may wait.
        let r = build(&config, &[1, 2, 3]);
        assert_eq!(r.qos.startup_buffer_s, 2.0);
        assert_eq!((r.qos.sessions, r.qos.short_sessions), (3, 3));
        assert!(
            (r.qos.startup_delay_ms.p50 - 600.0).abs() < 1.0,
            "{:?}",
            r.qos
        );
        assert_eq!(r.qos.acceptable_sessions_fraction, 1.0);
        assert!(r
            .qos
            .note
            .starts_with("all 3 sessions played less than 60 s"));
        assert!(r.summary().contains("qos note   all 3 sessions"));
        let r = build(&config, &[1, 2, 12]);
        assert!(r.qos.note.starts_with("2 of 3 sessions"), "{}", r.qos.note);
        let r = build(&config, &[1, 12, 12]);
        assert_eq!(r.qos.short_sessions, 1);
        assert!(r.qos.note.is_empty(), "{}", r.qos.note);
        let json = serde_json::to_value(&r).unwrap();
        assert!(
            json["qos"].get("note").is_none(),
            "an empty note is left out"
        );

        // A 15 s start-up buffer waits for the first body and half of the second.
        let mut slow = config.clone();
        slow.startup_buffer_s = 15.0;
        let s = build(&slow, &[12]);
        assert!(
            (s.qos.startup_delay_ms.p50 - 1750.0).abs() < 2.0,
            "{:?}",
            s.qos
        );
        let merged = Results::merge(&[r.clone(), r.clone()]).unwrap();
        assert_eq!(merged.qos.short_sessions, 2);
        let err = Results::merge(&[r, s]).unwrap_err();
        assert!(err.contains("start-up buffer 15 s"), "{err}");
    }

    /// The records a run of `config` (its shard) makes when every request goes out at its
    /// intended time and completes in 0.1 s.
    fn ran(config: &LoadConfig) -> Vec<SessionRecord> {
        let end = config.duration.map_or(f64::INFINITY, |d| d.as_secs_f64());
        crate::steady::schedule(config)
            .into_iter()
            .enumerate()
            .filter(|(_, s)| s.owned_by(config) && s.arrival < end)
            .map(|(index, s)| {
                let requests = crate::warm::nominal_times(&s.session, s.arrival)
                    .take_while(|&t| t < end)
                    .enumerate()
                    .map(|(ri, t)| RequestRecord {
                        index: ri as u32,
                        conn: 0,
                        started: t,
                        ttfb: Some(0.05),
                        ttlb: Some(0.1),
                        elapsed: 0.1,
                        bytes: 1000,
                        status: 200,
                        failure: None,
                        media_s: 2.0,
                        pacing_s: 0.0,
                    })
                    .collect();
                SessionRecord {
                    index,
                    arrival: s.arrival,
                    prefilled: s.prefilled,
                    probe: s.probe,
                    ..SessionRecord::alone(s.session, requests, SessionEnd::Completed)
                }
            })
            .collect()
    }

    /// Steady sessions (log ids) and steady requests (log id, request number in the log).
    fn steady_sets(config: &LoadConfig) -> (BTreeSet<u64>, BTreeSet<(u64, usize)>) {
        let records = ran(config);
        let (sessions, requests) = steady_requests(config, &records);
        let mut ids = BTreeSet::new();
        let mut reqs = BTreeSet::new();
        for (k, s) in records.iter().enumerate() {
            if sessions[k] {
                ids.insert(s.session.id);
            }
            // A warm start's tail begins part-way: number its requests as the log does.
            let skipped = config
                .sessions
                .iter()
                .find(|l| l.id == s.session.id)
                .map_or(0, |l| l.requests.len() - s.session.requests.len());
            for (ri, r) in s.requests.iter().enumerate() {
                if requests[k][ri] {
                    reqs.insert((s.session.id, skipped + r.index as usize));
                }
            }
        }
        (ids, reqs)
    }

    #[test]
    fn shards_steady_sets_make_up_the_single_process_run_for_any_ramps() {
        // 40 sessions of 1 to 5 requests, some arriving together, one a second.
        let log: Vec<Session> = (0..40u64)
            .map(|k| {
                let requests = (0..=k % 5)
                    .map(|j| Request {
                        pacing_s: if j == 0 { 0.0 } else { 2.0 + (k % 3) as f64 },
                        media_s: 2.0,
                        ..Request::new("/a", None, 10.0)
                    })
                    .collect();
                Session::new(k, if k % 7 == 3 { 0.0 } else { 1.0 }, "c", requests)
            })
            .collect();
        let target = Target::parse("http://127.0.0.1:1", false).unwrap();
        let cold = LoadConfig::new(target, log, 1.0);
        let mut warm = cold.clone();
        warm.warm_start = crate::warm::WarmStart::Auto;
        warm.duration = Some(std::time::Duration::from_secs(30));
        let mut limited = cold.clone();
        limited.duration = Some(std::time::Duration::from_secs(25));
        limited.max_sessions = Some(33);
        let ramps = [
            (0, 0, 0, 0),
            (2, 1, 0, 0),
            (0, 0, 5, 3),
            (3, 2, 7, 4),
            (10, 10, 20, 20),
            (30, 30, 0, 0),
        ];
        for (name, base) in [("cold", &cold), ("warm", &warm), ("cut short", &limited)] {
            for (up_s, down_s, up_r, down_r) in ramps {
                let mut single = base.clone();
                single.ramp = Ramp {
                    up_sessions: up_s,
                    down_sessions: down_s,
                    up_requests: up_r,
                    down_requests: down_r,
                };
                let (want_sessions, want_requests) = steady_sets(&single);
                for count in 1..=4u32 {
                    let (mut sessions, mut requests) = (BTreeSet::new(), BTreeSet::new());
                    let mut parts = Vec::new();
                    for index in 0..count {
                        let mut shard = single.clone();
                        shard.shard = Some(crate::Shard { index, count });
                        let (s, r) = steady_sets(&shard);
                        assert!(sessions.is_disjoint(&s) && requests.is_disjoint(&r));
                        sessions.extend(s);
                        requests.extend(r);
                        let records = ran(&shard);
                        parts.push(Results::build(&shard, &records, Vec::new(), 40.0, 0, 1024));
                    }
                    let what =
                        format!("{name}, ramps {up_s}/{down_s}/{up_r}/{down_r}, {count} shards");
                    assert_eq!(sessions, want_sessions, "{what}: steady sessions");
                    assert_eq!(requests, want_requests, "{what}: steady requests");
                    // The merged results count what the single process counts.
                    let one = Results::build(&single, &ran(&single), Vec::new(), 40.0, 0, 1024);
                    let merged = Results::merge(&parts).unwrap();
                    assert_eq!(merged.sessions.completed, one.sessions.completed, "{what}");
                    assert_eq!(merged.requests.completed, one.requests.completed, "{what}");
                    assert_eq!(
                        merged.run.steady_window_s, one.run.steady_window_s,
                        "{what}"
                    );
                }
            }
        }
        // The ramps do cut something: the settings above are not all vacuous.
        let mut single = cold.clone();
        single.ramp = Ramp {
            up_sessions: 3,
            down_sessions: 2,
            up_requests: 7,
            down_requests: 4,
        };
        let (all_s, all_r) = steady_sets(&cold);
        let (cut_s, cut_r) = steady_sets(&single);
        assert_eq!((all_s.len(), cut_s.len()), (40, 35));
        assert!(
            cut_r.len() + 11 <= all_r.len(),
            "{} of {}",
            cut_r.len(),
            all_r.len()
        );
    }

    #[test]
    fn a_sharded_run_of_players_is_refused_request_ramps() {
        let target = Target::parse("http://127.0.0.1:1", false).unwrap();
        let mut s = Session::new(1, 1.0, "c", vec![Request::new("/a", None, 10.0)]);
        s.title = Some(1);
        let mut config = LoadConfig::new(target, vec![s], 1.0);
        config.player = Some(crate::player::PlayerConfig::new(
            crate::player::Protocol::Dash,
        ));
        config.shard = Some(crate::Shard { index: 0, count: 2 });
        config.ramp.up_requests = 1;
        let e = crate::steady::check(&config).unwrap_err().to_string();
        assert!(e.contains("--shard 0/2 with --ramp-up-requests"), "{e}");
        config.ramp.up_requests = 0;
        config.ramp.up_sessions = 1;
        assert!(config.validate().is_ok() && crate::steady::check(&config).is_ok());
        config.shard = None;
        config.ramp.up_requests = 1;
        assert!(
            crate::steady::check(&config).is_ok(),
            "one process ranks what it sent"
        );
    }
}
