//! Adaptive players: `vodkit load --player dash|hls` plays each session's title from a real
//! media set (`vodkit fileset create --media`) the way dash.js, hls.js and Shaka do —
//! manifest parsing ([`manifest`]), rendition choice ([`abr`]) and the session loop with its
//! playout buffer ([`play`]). Live viewers (sessions with `live` set) follow a live HLS
//! playlist or, with `--player dash`, a dynamic DASH MPD from its edge, the low-latency
//! way when the stream offers it ([`live`]).

pub mod abr;
pub mod live;
pub mod manifest;
pub mod play;

use serde::{Deserialize, Serialize};
use strum::{EnumString, VariantNames};
use vodkit_workload::model::LiveView;

/// Which manifest a player opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, EnumString, VariantNames)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase", parse_err_ty = String, parse_err_fn = unknown_player)]
pub enum Protocol {
    /// `/tID/manifest.mpd`.
    Dash,
    /// `/tID/master.m3u8`.
    Hls,
}

fn unknown_player(s: &str) -> String {
    vodkit_units::unknown_choice("player", s, Protocol::VARIANTS)
}

/// How the players of a run behave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlayerConfig {
    pub protocol: Protocol,
    pub rule: abr::Rule,
    pub abr: abr::AbrSettings,
    /// Segments buffered before playback starts (dash.js and hls.js start after about two).
    pub startup_segments: u32,
    /// Seconds buffered before playback resumes after a stall.
    pub resume_s: f64,
    /// The player stops fetching while this many seconds are buffered.
    pub buffer_target_s: f64,
    /// A segment (or init segment) must arrive within this many seconds.
    pub segment_timeout_s: f64,
    /// A manifest, playlist or index must arrive within this many seconds.
    pub manifest_timeout_s: f64,
    /// Watch at least this long when the log's requests carry no media time.
    pub min_watch_s: f64,
    /// Give up a slow segment download for a lower rendition (`None`: never).
    pub abandon: Option<abr::Abandon>,
    /// Connections a byte-range segment download is spread over, in parts fetched at the
    /// same time (1: one download at a time on one connection, as dash.js and hls.js do).
    #[serde(default = "one")]
    pub connections: u32,
}

fn one() -> u32 {
    1
}

impl PlayerConfig {
    /// Defaults close to dash.js: the hybrid ("dynamic") rule, start after two segments,
    /// resume after one second, a 30 s buffer target, slow downloads abandoned
    /// ([`abr::Abandon`]'s dash.js defaults); before the first download the
    /// players assume the bit rate dash.js (1,000 kbit/s) or hls.js (500 kbit/s) assumes.
    pub fn new(protocol: Protocol) -> PlayerConfig {
        let abr = abr::AbrSettings {
            initial_bps: match protocol {
                Protocol::Dash => 1_000_000,
                Protocol::Hls => 500_000,
            },
            ..abr::AbrSettings::default()
        };
        PlayerConfig {
            protocol,
            rule: abr::Rule::Hybrid,
            abr,
            startup_segments: 2,
            resume_s: 1.0,
            buffer_target_s: 30.0,
            segment_timeout_s: 30.0,
            manifest_timeout_s: 10.0,
            min_watch_s: 0.0,
            abandon: Some(abr::Abandon::default()),
            connections: 1,
        }
    }

    /// These settings with a viewer's own player profile (`play.connections`,
    /// `play.buffer_target_s` of its session) in place of the run's.
    pub fn for_viewer(&self, play: &vodkit_workload::model::PlaySpec) -> PlayerConfig {
        PlayerConfig {
            connections: play.connections.unwrap_or(self.connections).max(1),
            buffer_target_s: play.buffer_target_s.unwrap_or(self.buffer_target_s),
            ..self.clone()
        }
    }
}

/// Where live streams are and how live viewers behave (`vodkit load --live-*`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveSettings {
    /// Path prefix stream K is published under: `PREFIX/stream-K/index.m3u8`.
    pub prefix: String,
    /// Streams the run publishes: a viewer of stream k watches stream k mod this (`None`: k).
    pub streams: Option<u32>,
    /// Join this many segments behind the newest one (hls.js: 3).
    pub sync_segments: u32,
    /// Segments buffered before playback starts.
    pub startup_segments: u32,
    /// Seconds buffered before playback resumes after a stall.
    pub resume_s: f64,
    pub segment_timeout_s: f64,
    pub playlist_timeout_s: f64,
    /// Give up when the playlist has not advanced for this many target durations.
    pub stale_targets: f64,
    /// Follow a stream the low-latency way when it offers it (`--low-latency auto`):
    /// LL-HLS parts and blocking reloads, LL-DASH segments read while being written.
    #[serde(default = "yes")]
    pub low_latency: bool,
}

fn yes() -> bool {
    true
}

impl Default for LiveSettings {
    fn default() -> Self {
        LiveSettings {
            prefix: "/live/".into(),
            streams: None,
            sync_segments: 3,
            startup_segments: 1,
            resume_s: 1.0,
            segment_timeout_s: 10.0,
            playlist_timeout_s: 10.0,
            stale_targets: 5.0,
            low_latency: true,
        }
    }
}

impl LiveSettings {
    /// The stream a viewer of `view` watches.
    pub fn stream_of(&self, view: &LiveView) -> u32 {
        match self.streams {
            Some(n) if n > 0 => view.stream % n,
            _ => view.stream,
        }
    }

    /// Path of stream `k`'s media playlist.
    pub fn playlist_path(&self, k: u32) -> String {
        let p = self.prefix.trim_end_matches('/');
        format!("{p}/stream-{k}/index.m3u8")
    }

    /// Path of stream `k`'s DASH MPD (live viewers of a `--player dash` run).
    pub fn mpd_path(&self, k: u32) -> String {
        let p = self.prefix.trim_end_matches('/');
        format!("{p}/stream-{k}/manifest.mpd")
    }
}
