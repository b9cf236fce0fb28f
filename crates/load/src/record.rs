//! What the engine remembers about every request and session it ran: the raw material
//! for results.json, the QoS model and the per-request CSV export.

use serde::{Deserialize, Serialize};
use std::fmt;
use strum::{Display, IntoStaticStr};

/// Why a request (and with it its session) failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(Display, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum FailureReason {
    /// The whole response did not arrive within the request's timeout.
    Timeout,
    /// The TCP connection could not be opened.
    Connect,
    /// The server reset or closed the connection before the response was complete
    /// headers.
    Reset,
    /// The status code was not the one the request calls for (200, or 206 for a range).
    Status,
    /// The connection ended before the announced or required body length.
    ShortBody,
    /// The server announced or sent more than the request asked for.
    OversizedBody,
    /// A received byte differs from the deterministic file content (`--verify`).
    Mismatch,
    /// The response was not valid HTTP/1.1 (garbage, unsupported framing).
    Protocol,
    /// The server refused the request with `503 Service Unavailable` (admission control,
    /// a connection limit): the viewer is told to go elsewhere, not left to stall.
    Refused,
}

impl FailureReason {
    pub const ALL: [FailureReason; 9] = [
        FailureReason::Timeout,
        FailureReason::Connect,
        FailureReason::Reset,
        FailureReason::Status,
        FailureReason::ShortBody,
        FailureReason::OversizedBody,
        FailureReason::Mismatch,
        FailureReason::Protocol,
        FailureReason::Refused,
    ];

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A failed request: the class and a human-readable detail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub reason: FailureReason,
    pub detail: String,
}

impl Failure {
    pub fn new(reason: FailureReason, detail: impl Into<String>) -> Failure {
        Failure {
            reason,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason, self.detail)
    }
}

/// One request as it happened. Times are seconds since the start of the run.
#[derive(Clone, Debug)]
pub struct RequestRecord {
    /// Index of the request within its session.
    pub index: u32,
    pub conn: u32,
    /// When the request was issued (pacing counts from here).
    pub started: f64,
    /// Time to first byte of the response, seconds after `started`.
    pub ttfb: Option<f64>,
    /// Time to last byte, seconds after `started`; `None` unless completed.
    pub ttlb: Option<f64>,
    /// Seconds from `started` until the request ended: completed, failed or timed out.
    pub elapsed: f64,
    /// Body bytes received.
    pub bytes: u64,
    pub status: u16,
    pub failure: Option<Failure>,
    /// Seconds of content the response carries (playout model).
    pub media_s: f64,
    /// Pacing interval the log asked for (0 = unpaced).
    pub pacing_s: f64,
}

impl RequestRecord {
    pub fn completed(&self) -> bool {
        self.failure.is_none() && self.ttlb.is_some()
    }

    pub fn finished_at(&self) -> Option<f64> {
        self.ttlb.map(|d| self.started + d)
    }
}

/// How a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionEnd {
    Completed,
    Failed(FailureReason),
    /// A request was answered `503`: the server turned the viewer away (counted apart
    /// from failures, which are viewers the server admitted and then failed).
    Refused,
    /// Stopped by `--duration` or cancellation before it could finish.
    Cancelled,
}

impl SessionEnd {
    /// How a failed request ends its session: a `503` turns the viewer away, anything else
    /// fails it.
    pub fn after(f: &Failure) -> SessionEnd {
        match f.reason {
            FailureReason::Refused => SessionEnd::Refused,
            r => SessionEnd::Failed(r),
        }
    }

    /// The session's end as a word for files (`completed`, the failure's reason,
    /// `refused`, `cancelled`).
    pub fn as_str(self) -> &'static str {
        match self {
            SessionEnd::Completed => "completed",
            SessionEnd::Failed(r) => r.as_str(),
            SessionEnd::Refused => "refused",
            SessionEnd::Cancelled => "cancelled",
        }
    }
}

/// One session as it happened.
#[derive(Clone, Debug)]
pub struct SessionRecord {
    /// Position in arrival order (0 = first session started).
    pub index: usize,
    /// The session as the log gave it (id, class, bit rate, requests).
    pub session: std::sync::Arc<vodkit_workload::model::Session>,
    /// Scheduled arrival, seconds since the start of the run.
    pub arrival: f64,
    pub end: SessionEnd,
    pub requests: Vec<RequestRecord>,
    /// Requests never sent because the session failed or was cancelled.
    pub skipped: u32,
    /// Connections opened, and how many of those replaced one the server had closed.
    pub connections_opened: u32,
    pub reconnects: u32,
    /// What the adaptive player experienced (`--player` sessions only).
    pub player: Option<PlayerOutcome>,
    /// Started mid-session by a warm start ([`crate::warm`]); not judged as a session.
    pub prefilled: bool,
    /// A probe session (`--probe`): judged apart from the run's own sessions.
    pub probe: bool,
}

impl SessionRecord {
    /// The record of `session` alone in a run: the first to arrive, at the start, on one
    /// connection it kept; it made `requests`, skipped none and ended as `end`; no player,
    /// neither prefilled nor a probe. Models and tests set what differs from it.
    pub fn alone(
        session: std::sync::Arc<vodkit_workload::model::Session>,
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
            player: None,
            prefilled: false,
            probe: false,
        }
    }
}

/// A stretch of media fetched at one bit rate (one segment).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stretch {
    /// Media time where it starts (seconds into what the session watched).
    pub media_s: f64,
    pub duration_s: f64,
    /// The rendition's advertised bit rate.
    pub kbps: u32,
}

/// What an adaptive player session saw: the renditions it chose and its own start-up and
/// stalls (its buffer drains in real time once playing).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlayerOutcome {
    pub timeline: Vec<Stretch>,
    pub switches: u32,
    /// Seconds from the session's start to the start of playback.
    pub startup_s: Option<f64>,
    pub stalls: u32,
    pub stall_s: f64,
    /// Seconds of media fetched.
    pub media_s: f64,
    /// Segment downloads the player gave up for a lower rendition, and the bytes they had
    /// brought.
    pub aborted: u32,
    pub aborted_bytes: u64,
    /// Seeks made (the session's `play.seeks`), and the seconds from each until playback
    /// resumed, summed.
    pub seeks: u32,
    pub seek_wait_s: f64,
    /// Mean bit rate the same player would have fetched over its link from an idle server
    /// (kbit/s; [`crate::player::abr::unloaded_mean_bps`]); 0 when not known (live viewers).
    pub reference_kbps: f64,
    /// Set for live viewers.
    pub live: Option<LiveOutcome>,
}

/// What a live viewer saw besides start-up and stalls.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiveOutcome {
    /// The stream it watched (after `--live-streams`).
    pub stream: u32,
    pub segments: u32,
    /// Segments that left the playlist's window before the viewer fetched them (it fell
    /// behind and jumped ahead: the HTTP form of seed 004's thinning).
    pub skipped_segments: u32,
    /// Playlist loads after the first.
    pub reloads: u32,
    /// Latency behind the live edge, sampled at each segment arrival while playing:
    /// wall-clock time minus the capture time (`#EXT-X-PROGRAM-DATE-TIME`) of the content
    /// at the playhead, seconds.
    pub latency_s: Vec<f64>,
    /// Length of each stall, seconds (content that arrived after it was due: late-only jitter).
    pub late_s: Vec<f64>,
    /// The stream ended (`#EXT-X-ENDLIST`) before the viewer had watched its time.
    pub stream_ended: bool,
    /// How it followed the stream.
    pub mode: LiveMode,
    /// Parts (`#EXT-X-PART`) fetched (low-latency HLS).
    pub parts: u32,
    /// Playlist reloads that asked the origin to hold them until a part (`_HLS_msn`).
    pub blocking_reloads: u32,
    /// Parts requested from a preload hint, before they existed.
    pub hinted_parts: u32,
    /// DASH segments whose first bytes arrived before the segment was complete (read as
    /// they were being written).
    pub early_segments: u32,
    /// The viewer's throughput estimate, kbit/s: bytes over the time they were arriving,
    /// idle gaps between a growing segment's chunks left out (dash.js's low-latency rule).
    pub throughput_kbps: Option<f64>,
    /// Playback-rate catch-up: seconds of media played beyond the wall-clock time they
    /// took (negative when it slowed down more than it sped up).
    pub catchup_s: f64,
}

/// How a live viewer followed its stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, IntoStaticStr)]
#[strum(serialize_all = "kebab-case")]
pub enum LiveMode {
    /// Whole segments from the HLS playlist's window.
    #[default]
    Hls,
    /// Low-latency HLS: parts, preload hints, blocking playlist reloads.
    LlHls,
    /// Whole segments of a dynamic DASH MPD, each requested once complete.
    Dash,
    /// Low-latency DASH: segments requested as they start, read as their chunks arrive.
    LlDash,
}

impl LiveMode {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// A low-latency mode.
    pub fn low_latency(self) -> bool {
        matches!(self, LiveMode::LlHls | LiveMode::LlDash)
    }
}

/// Share of its unloaded mean bit rate a player session must keep to count as played well
/// (the `quality:P` criterion's condition: at least 90%).
pub const KEPT_BITRATE_SHARE: f64 = 0.9;

impl PlayerOutcome {
    /// Playback started and never stalled.
    pub fn unstalled(&self) -> bool {
        self.stalls == 0 && self.startup_s.is_some()
    }

    /// The session kept at least [`KEPT_BITRATE_SHARE`] of its unloaded mean bit rate (or
    /// has no reference to be held to).
    pub fn kept_bitrate(&self) -> bool {
        self.reference_kbps <= 0.0
            || self.mean_kbps() + 1e-9 >= KEPT_BITRATE_SHARE * self.reference_kbps
    }

    /// Mean bit rate over the media fetched, weighted by duration (kbit/s).
    pub fn mean_kbps(&self) -> f64 {
        let d: f64 = self.timeline.iter().map(|s| s.duration_s).sum();
        if d <= 0.0 {
            return 0.0;
        }
        self.timeline
            .iter()
            .map(|s| s.kbps as f64 * s.duration_s)
            .sum::<f64>()
            / d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_reasons_read_the_same_in_csv_and_json() {
        for r in FailureReason::ALL {
            let json = serde_json::to_string(&r).unwrap();
            assert_eq!(json, format!("\"{}\"", r.as_str()));
            assert_eq!(r.to_string(), r.as_str());
        }
        assert_eq!(FailureReason::ShortBody.as_str(), "short_body");
        assert_eq!(LiveMode::LlHls.as_str(), "ll-hls");
        assert_eq!(LiveMode::LlDash.as_str(), "ll-dash");
    }
}
