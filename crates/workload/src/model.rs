//! The files exchanged between stages: `catalog.json`, `sessions.jsonl`, `workload.json`.
//!
//! These types are the contract between the generator, the load tool, the bench runner and
//! the trace tools; `docs/workload.md` documents them field by field. Units: bytes as
//! integers, times in seconds, bit rates in kbit/s.

use serde::{Deserialize, Serialize};

/// Every title of a workload (`catalog.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Catalog {
    /// Name of the spec the catalog was generated from (`youtube-2011`, a file path, ...).
    pub spec: String,
    pub seed: u64,
    pub titles: Vec<Title>,
}

impl Catalog {
    /// A catalog of one title per `(path, size)` (sessions built by hand: tests, examples):
    /// ids from 0 and popularity ranks from 1 in the order given, each title one unchunked
    /// file of combined media at `bitrate_kbps`, `duration_s` long; spec `test`, seed 1.
    pub fn of_files(
        files: impl IntoIterator<Item = (String, u64)>,
        duration_s: f64,
        bitrate_kbps: u32,
    ) -> Catalog {
        let titles = files
            .into_iter()
            .enumerate()
            .map(|(i, (path, size))| Title {
                id: i as u32,
                rank: i as u32 + 1,
                duration_s,
                renditions: vec![Rendition::one_file(
                    bitrate_kbps,
                    Media::Combined,
                    path,
                    size,
                )],
            })
            .collect();
        Catalog {
            spec: "test".into(),
            seed: 1,
            titles,
        }
    }
}

/// One title (a video) in one or more renditions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Title {
    pub id: u32,
    /// Popularity rank, 1 = most popular. Independent of `id` and of disk placement.
    pub rank: u32,
    pub duration_s: f64,
    pub renditions: Vec<Rendition>,
}

/// One encoding of a title, stored as one file or as a sequence of chunk files.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rendition {
    pub bitrate_kbps: u32,
    #[serde(default)]
    pub media: Media,
    /// Content bytes of the rendition (before any chunk padding).
    pub size_bytes: u64,
    pub layout: Layout,
    /// The files holding the rendition, in playback order (one for `unchunked`).
    pub files: Vec<FileRef>,
}

impl Rendition {
    /// A rendition stored as one unchunked file of `size_bytes` at `path`.
    pub fn one_file(bitrate_kbps: u32, media: Media, path: String, size_bytes: u64) -> Rendition {
        Rendition {
            bitrate_kbps,
            media,
            size_bytes,
            layout: Layout::Unchunked,
            files: vec![FileRef { path, size_bytes }],
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Media {
    #[default]
    Combined,
    Video,
    Audio,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Layout {
    Unchunked,
    Chunked { chunk_bytes: u64 },
}

/// A file of the file set: path relative to the served root (no leading slash).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRef {
    pub path: String,
    /// Size of the file on disk (chunk files may be padded, thesis 3.5.2).
    pub size_bytes: u64,
}

/// One viewing session (a line of `sessions.jsonl`).
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Session {
    pub id: u64,
    /// Gap before this session's arrival, drawn from Exp(1): a load tool running at `r`
    /// sessions/s starts session i at (sum of gaps up to i) / r.
    pub gap: f64,
    /// Explicit start time in seconds, overriding the gap schedule when present.
    pub start_s: Option<f64>,
    /// Client class name (see [`WorkloadMeta::client_classes`]).
    pub class: String,
    pub title: Option<u32>,
    /// Nominal bit rate the session plays at (for the playout-buffer QoS model).
    pub bitrate_kbps: Option<u32>,
    pub requests: Vec<Request>,
    /// A live viewer (no `requests`): which live stream it joins and for how long.
    pub live: Option<LiveView>,
    /// How an adaptive player (`vodkit load --player`) plays the title, when it does more than
    /// watch from the start for the requests' media time: where it starts, how long it
    /// watches, where it jumps.
    pub play: Option<PlaySpec>,
}

/// An adaptive player's viewing of its title (`play` in `sessions.jsonl`).
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlaySpec {
    /// Media position (seconds into the title) playback starts at.
    #[serde(default)]
    pub start_s: f64,
    /// Seconds of media watched in all, seeks included (absent: the requests' media time).
    pub watch_s: Option<f64>,
    /// Jumps, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seeks: Vec<Seek>,
    /// The viewer's player profile, overriding the run's player settings for this session:
    /// connections a byte-range segment download is spread over (thesis Table 5.3: 1–6).
    pub connections: Option<u32>,
    /// Seconds of media the player keeps buffered before it waits.
    pub buffer_target_s: Option<f64>,
}

/// Most connections one player spreads a download over (browsers allow six per host).
pub const MAX_PLAYER_CONNECTIONS: u32 = 16;

/// A jump: after watching `after_s` seconds of media since playback (re)started, the viewer
/// continues from position `to_s`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Seek {
    pub after_s: f64,
    pub to_s: f64,
}

impl PlaySpec {
    /// Every number finite and in range; the error names the field.
    pub fn check(&self) -> Result<(), String> {
        non_negative("play.start_s", self.start_s)?;
        if let Some(w) = self.watch_s {
            positive("play.watch_s", w)?;
        }
        if let Some(c) = self.connections {
            if !(1..=MAX_PLAYER_CONNECTIONS).contains(&c) {
                return Err(format!(
                    "play.connections must be 1 to {MAX_PLAYER_CONNECTIONS}, got {c}"
                ));
            }
        }
        if let Some(b) = self.buffer_target_s {
            positive("play.buffer_target_s", b)?;
        }
        for (k, j) in self.seeks.iter().enumerate() {
            positive(&format!("play.seeks[{k}].after_s"), j.after_s)?;
            non_negative(&format!("play.seeks[{k}].to_s"), j.to_s)?;
        }
        Ok(())
    }
}

/// `v`, the value of `field`, must be a finite number above 0.
pub(crate) fn positive(field: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(format!("{field} must be a positive number, got {v}"))
    }
}

/// `v`, the value of `field`, must be a finite number, 0 or above.
pub(crate) fn non_negative(field: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(format!("{field} must be a non-negative number, got {v}"))
    }
}

/// What a live viewer watches: stream `stream` of the run's live sources (published under
/// `PREFIX/stream-K/`, K = `stream` modulo the streams the run publishes) for `watch_s`
/// seconds from when it joins at the live edge.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LiveView {
    pub stream: u32,
    pub watch_s: f64,
}

/// One HTTP request of a session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// URL path, starting with `/`.
    pub path: String,
    /// Absent: the whole file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<ByteRange>,
    /// Start-to-start interval: this request is not sent before `pacing_s` seconds after
    /// the previous request of the session started (0 = unpaced, e.g. prebuffer requests).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pacing_s: f64,
    /// The whole response must arrive within this many seconds of sending the request.
    pub timeout_s: f64,
    /// Index of the session's connection this request is sent on (0 = first).
    #[serde(default, skip_serializing_if = "is_first")]
    pub conn: u32,
    /// Seconds of content the response carries (for the playout-buffer QoS model).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub media_s: f64,
}

/// Zero fields of a request are left out of `sessions.jsonl` (they are the defaults on
/// reading): a large log's session list is a third smaller without them.
fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

fn is_first(conn: &u32) -> bool {
    *conn == 0
}

impl Session {
    /// Whether the session can be placed by the gap schedule (rate × cumulative gaps), as the
    /// capacity bound and the memory replay place sessions: no explicit `start_s`, and a
    /// finite, non-negative gap. The error names the session.
    pub fn check_gap_schedule(&self) -> Result<(), String> {
        if self.start_s.is_some() {
            return Err(format!(
                "session id {} has an explicit start_s; a rate schedule needs its gap instead",
                self.id
            ));
        }
        if !(self.gap >= 0.0 && self.gap.is_finite()) {
            return Err(format!(
                "session id {}: gap {} is not a non-negative number",
                self.id, self.gap
            ));
        }
        Ok(())
    }

    /// A session of `class` with no title, bit rate or start time (sessions built by hand:
    /// tests, importers).
    pub fn new(id: u64, gap: f64, class: &str, requests: Vec<Request>) -> Session {
        Session {
            id,
            gap,
            start_s: None,
            class: class.into(),
            title: None,
            bitrate_kbps: None,
            requests,
            live: None,
            play: None,
        }
    }
}

impl Request {
    /// The `[start, end)` bytes this request asks for in a file of `size` bytes (its range
    /// clipped to the file; the whole file without a range).
    pub fn span(&self, size: u64) -> (u64, u64) {
        let (a, b) = match self.range {
            None => (0, size),
            Some(ByteRange::Closed { first, last }) => (first, last.saturating_add(1)),
            Some(ByteRange::OpenEnded { first, read }) => (first, first.saturating_add(read)),
        };
        (a.min(size), b.min(size))
    }

    /// A request for `range` of `path` (`None`: the whole file), unpaced, on the session's
    /// first connection, carrying no media time.
    pub fn new(path: impl Into<String>, range: Option<ByteRange>, timeout_s: f64) -> Request {
        Request {
            path: path.into(),
            range,
            pacing_s: 0.0,
            timeout_s,
            conn: 0,
            media_s: 0.0,
        }
    }

    /// `n` requests for consecutive `bytes`-long ranges of `path` from its start, each
    /// `pacing_s` after the previous one (0 = unpaced) and with a 10 s timeout (sessions
    /// built by hand: tests, examples).
    pub fn consecutive(path: &str, n: u64, bytes: u64, pacing_s: f64) -> Vec<Request> {
        (0..n)
            .map(|i| Request {
                pacing_s,
                ..Request::new(path, Some(ByteRange::closed(i * bytes, bytes)), 10.0)
            })
            .collect()
    }
}

/// A requested byte range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ByteRange {
    /// `Range: bytes=first-last` (inclusive).
    Closed { first: u64, last: u64 },
    /// `Range: bytes=first-`; the client reads `read` bytes and then closes the connection.
    OpenEnded { first: u64, read: u64 },
}

impl ByteRange {
    /// `len` (> 0) bytes from `first`, as a closed range.
    pub fn closed(first: u64, len: u64) -> ByteRange {
        ByteRange::Closed {
            first,
            last: first + len.max(1) - 1,
        }
    }

    /// Bytes the client expects to receive.
    pub fn len(&self) -> u64 {
        match *self {
            ByteRange::Closed { first, last } => last.saturating_sub(first) + 1,
            ByteRange::OpenEnded { read, .. } => read,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn first(&self) -> u64 {
        match *self {
            ByteRange::Closed { first, .. } | ByteRange::OpenEnded { first, .. } => first,
        }
    }

    /// The `Range` header value, e.g. `bytes=0-524287` or `bytes=1048576-`.
    pub fn header_value(&self) -> String {
        match *self {
            ByteRange::Closed { first, last } => format!("bytes={first}-{last}"),
            ByteRange::OpenEnded { first, .. } => format!("bytes={first}-"),
        }
    }
}

/// Workload-wide settings the load tool needs beside the sessions (`workload.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkloadMeta {
    pub spec: String,
    pub seed: u64,
    pub client_classes: Vec<ClientClass>,
    pub measurement: Measurement,
}

/// A population of viewers sharing a link: receive bandwidth and one-way delay.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClientClass {
    pub name: String,
    /// Receive bandwidth in bits per second (0 = unlimited).
    pub bandwidth_bps: u64,
    pub one_way_delay_s: f64,
    /// Fraction of sessions in this class.
    pub share: f64,
}

/// Warm-up and ramp exclusion (thesis 3.6.1).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// Number of most popular chunks fetched before measuring (listed in `warmup.jsonl`).
    pub warmup_chunks: u64,
    pub ramp_up_sessions: u64,
    pub ramp_down_sessions: u64,
    pub ramp_up_requests: u64,
    pub ramp_down_requests: u64,
    /// Seconds of content the load tool's player model buffers before playback starts
    /// (absent: the load tool's default, 2 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_buffer_s: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_line_round_trips() {
        let s = Session {
            id: 7,
            gap: 0.25,
            start_s: None,
            class: "bband".into(),
            title: Some(3),
            bitrate_kbps: Some(419),
            requests: vec![
                Request {
                    path: "/v/t3.dat".into(),
                    range: Some(ByteRange::Closed {
                        first: 0,
                        last: 524_287,
                    }),
                    pacing_s: 0.0,
                    timeout_s: 10.0,
                    conn: 0,
                    media_s: 10.0,
                },
                Request {
                    path: "/v/t3.dat".into(),
                    range: Some(ByteRange::OpenEnded {
                        first: 524_288,
                        read: 1000,
                    }),
                    pacing_s: 10.0,
                    timeout_s: 10.0,
                    conn: 1,
                    media_s: 0.02,
                },
            ],
            live: None,
            play: None,
        };
        let line = serde_json::to_string(&s).unwrap();
        assert!(!line.contains('\n'));
        let back: Session = serde_json::from_str(&line).unwrap();
        assert_eq!(back, s);
        assert_eq!(s.requests[0].range.unwrap().len(), 524_288);
        assert_eq!(s.requests[1].range.unwrap().header_value(), "bytes=524288-");
    }
}
