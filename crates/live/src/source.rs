//! The publishing loop of the pseudo-encoder: a thread per stream publishes segment n when
//! it would have finished encoding, at `t0 + (n + 1) × D` — the segment, then
//! `index.m3u8`, then `manifest.mpd` — and `DELETE`s the segment that left the window two
//! segments ago (a disk-backed origin such as nginx's WebDAV stays bounded; a 404 or 405
//! answer to it is not a failure). With `backfill`, the stream starts `window` segments in
//! the past so viewers can join at once. A failed `PUT` is retried twice within the
//! segment's duration; what still fails, and what is published more than D/2 late, is
//! counted. The end (duration reached or stop) publishes the final playlist with
//! `#EXT-X-ENDLIST`.
//!
//! Segment bytes are synthetic and deterministic in (seed, stream, number): a minimal
//! `styp` box, then pseudo-random payload, `bitrate × D / 8` bytes in all — or, with a
//! [`LiveTitle`], a real rendition's fragments in a loop, which players can decode.
//!
//! Low-latency mode ([`LowLatency`]) cuts every segment into k parts of p = D / k: part P
//! of segment n is `PUT` whole at `t0 + n × D + (P + 1) × p`, appended as one chunk to the
//! chunked `PUT` of `seg-n.m4s` that began at the segment's start (on a second keep-alive
//! connection), and followed by the LL-HLS playlist; the MPD is published once per segment,
//! as its upload begins.

use crate::http::{Client, Origin};
use crate::playlist::{self, Window};
use crate::title::LiveTitle;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// What to publish, where.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceConfig {
    /// `http://HOST:PORT`.
    pub target: String,
    pub streams: u32,
    pub bitrate_kbps: u32,
    pub segment_s: f64,
    /// Segments in the playlists.
    pub window: u32,
    /// `/live/`: stream k goes to `PREFIX/stream-k/`.
    pub prefix: String,
    pub token: Option<String>,
    /// Stop after this long (`None`: until stopped).
    pub duration: Option<Duration>,
    pub seed: u64,
    /// Start `window` segments in the past so the first playlist is full.
    pub backfill: bool,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Publish this rendition's fragments instead of synthetic bytes (its bit rate and
    /// segment duration are the stream's: see [`SourceConfig::with_title`]).
    pub title: Option<Arc<LiveTitle>>,
    /// Publish segments part by part (LL-HLS, LL-DASH); `None`: whole segments.
    pub low_latency: Option<LowLatency>,
    /// How an `https://` target is reached (its trust); required for one.
    pub tls: Option<crate::http::Tls>,
}

/// Low-latency publishing (`--low-latency`).
#[derive(Debug, Clone, PartialEq)]
pub struct LowLatency {
    /// Part duration asked for, seconds; rounded so a segment holds a whole number of parts
    /// ([`SourceConfig::parts`]).
    pub part_s: f64,
    /// The MPD's `UTCTiming` clock URL (`None`: no `UTCTiming`).
    pub clock_url: Option<String>,
}

/// Shortest part accepted, seconds.
pub const MIN_PART_S: f64 = 0.05;

impl LowLatency {
    /// Parts of 0.333 s and the clock of `vodkit serve` at `target` (`/.vodkit/clock`).
    pub fn new(target: &str) -> LowLatency {
        LowLatency {
            part_s: 0.333,
            clock_url: Some(default_clock_url(target)),
        }
    }
}

/// The clock `vodkit serve` answers at the origin `target`: `http://HOST:PORT/.vodkit/clock`.
pub fn default_clock_url(target: &str) -> String {
    let host = target
        .strip_prefix("http://")
        .unwrap_or(target)
        .split('/')
        .next()
        .unwrap_or("");
    format!("http://{host}/.vodkit/clock")
}

/// Codec string the MPD advertises for synthetic segments.
pub const SYNTHETIC_CODEC: &str = "avc1.64001f";

impl SourceConfig {
    /// One stream at `bitrate_kbps` in 2 s segments, a window of 6, to `target` under
    /// `/live/`, until stopped.
    pub fn new(target: &str, streams: u32, bitrate_kbps: u32) -> SourceConfig {
        SourceConfig {
            target: target.to_string(),
            streams,
            bitrate_kbps,
            segment_s: 2.0,
            window: 6,
            prefix: "/live/".into(),
            token: None,
            duration: None,
            seed: 1,
            backfill: false,
            timeout: Duration::from_secs(10),
            title: None,
            low_latency: None,
            tls: None,
        }
    }

    /// Publish `title`'s fragments: the bit rate and segment duration become its own (in
    /// low-latency mode, with [`LiveTitle::in_parts`], its fragment duration is the part
    /// duration).
    pub fn with_title(mut self, title: LiveTitle) -> SourceConfig {
        self.bitrate_kbps = title.bitrate_kbps();
        self.segment_s = title.segment_s();
        if let Some(ll) = &mut self.low_latency {
            ll.part_s = title.fragment_s();
        }
        self.title = Some(Arc::new(title));
        self
    }

    /// Parts per segment in low-latency mode: `round(D / p)` (`None`: whole segments).
    pub fn parts(&self) -> Option<u32> {
        let ll = self.low_latency.as_ref()?;
        Some(((self.segment_s / ll.part_s).round() as u32).max(1))
    }

    /// The part duration in low-latency mode, seconds: D / [`SourceConfig::parts`].
    pub fn part_s(&self) -> Option<f64> {
        self.parts().map(|k| self.segment_s / f64::from(k))
    }

    /// Bytes of one synthetic part.
    pub fn part_bytes(&self) -> usize {
        let p = self.part_s().unwrap_or(self.segment_s);
        ((f64::from(self.bitrate_kbps) * 125.0 * p).round() as usize).max(64)
    }

    /// Check the numbers; the error names the setting.
    pub fn validate(&self) -> Result<(), String> {
        if self.streams == 0 {
            return Err("--streams: expected at least 1".into());
        }
        if self.bitrate_kbps == 0 {
            return Err("--bitrate: expected a positive bit rate".into());
        }
        if !(self.segment_s.is_finite() && self.segment_s >= 0.1 && self.segment_s <= 60.0) {
            return Err(format!(
                "--segment: expected 0.1 s to 60 s, got {} s",
                self.segment_s
            ));
        }
        if let Some(t) = &self.title {
            if (self.segment_s - t.segment_s()).abs() > 1e-6 {
                return Err(format!(
                    "--segment: the title's fragments last {:.3} s, the stream's segments {:.3} s",
                    t.segment_s(),
                    self.segment_s
                ));
            }
            let parts = self.parts().unwrap_or(1);
            if t.parts() != parts {
                return Err(format!(
                    "--title: its segments are cut in {} parts, the stream's in {parts}",
                    t.parts()
                ));
            }
        }
        if let Some(ll) = &self.low_latency {
            let (p, d) = (ll.part_s, self.segment_s);
            if !(p.is_finite() && p >= MIN_PART_S) {
                return Err(format!(
                    "--part: expected at least {MIN_PART_S} s, got {p} s"
                ));
            }
            if p > d / 2.0 + 1e-9 {
                return Err(format!(
                    "--part: expected at most half the segment ({:.3} s), got {p} s",
                    d / 2.0
                ));
            }
            let rounded = self.part_s().unwrap_or(p);
            if rounded < MIN_PART_S - 1e-9 {
                return Err(format!(
                    "--part: {p} s makes {} parts of {rounded:.4} s per {d} s segment; expected parts of at least {MIN_PART_S} s",
                    self.parts().unwrap_or(0)
                ));
            }
        }
        if self.window == 0 {
            return Err("--window: expected at least 1 segment".into());
        }
        if !self.prefix.starts_with('/') {
            return Err(format!(
                "--prefix `{}`: expected a path starting with /",
                self.prefix
            ));
        }
        let origin = Origin::parse(&self.target)?;
        if origin.https && self.tls.is_none() {
            return Err(format!(
                "--target {}: an https:// target needs --ca FILE or --insecure",
                self.target
            ));
        }
        Ok(())
    }

    /// Bytes of one segment.
    pub fn segment_bytes(&self) -> usize {
        ((f64::from(self.bitrate_kbps) * 125.0 * self.segment_s).round() as usize).max(64)
    }

    fn dir(&self, k: u32) -> String {
        format!("{}/stream-{k}/", self.prefix.trim_end_matches('/'))
    }
}

/// What was published: a stream's counts, and in the source's report their sums.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Published {
    pub segments: u64,
    pub puts: u64,
    /// PUTs that failed after their retries (status or I/O).
    pub failed_puts: u64,
    /// Segments published more than half a segment after they were due.
    pub late_segments: u64,
    /// Low-latency mode: parts published, their `PUT`s (retries included), and parts
    /// published more than half a part after they were due.
    #[serde(default)]
    pub parts: u64,
    #[serde(default)]
    pub part_puts: u64,
    #[serde(default)]
    pub late_parts: u64,
}

impl std::iter::Sum for Published {
    fn sum<I: Iterator<Item = Published>>(iter: I) -> Published {
        iter.fold(Published::default(), |a, b| Published {
            segments: a.segments + b.segments,
            puts: a.puts + b.puts,
            failed_puts: a.failed_puts + b.failed_puts,
            late_segments: a.late_segments + b.late_segments,
            parts: a.parts + b.parts,
            part_puts: a.part_puts + b.part_puts,
            late_parts: a.late_parts + b.late_parts,
        })
    }
}

/// What one stream's publishing saw.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamReport {
    pub stream: u32,
    #[serde(flatten)]
    pub published: Published,
    pub retries: u64,
    /// The first few failures, for the reader.
    pub errors: Vec<String>,
}

/// The source's report (`--out FILE`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub target: String,
    pub streams: u32,
    pub bitrate_kbps: u32,
    pub segment_s: f64,
    pub elapsed_s: f64,
    /// The streams' counts summed.
    #[serde(flatten)]
    pub published: Published,
    pub put_ms_p50: f64,
    pub put_ms_p99: f64,
    pub put_ms_max: f64,
    /// Low-latency mode: the part duration (0: whole segments) and the part `PUT`s'
    /// latency (they are in `put_ms_*` too).
    #[serde(default)]
    pub part_s: f64,
    #[serde(default)]
    pub part_put_ms_p50: f64,
    #[serde(default)]
    pub part_put_ms_p99: f64,
    #[serde(default)]
    pub part_put_ms_max: f64,
    pub per_stream: Vec<StreamReport>,
}

impl Report {
    /// One screen for the terminal.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "live source: {} streams × {} kbit/s, {} s segments to {} for {:.1} s\n  segments {}  PUTs {}  failed {}  late {}\n  PUT latency p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms\n",
            self.streams,
            self.bitrate_kbps,
            self.segment_s,
            self.target,
            self.elapsed_s,
            self.published.segments,
            self.published.puts,
            self.published.failed_puts,
            self.published.late_segments,
            self.put_ms_p50,
            self.put_ms_p99,
            self.put_ms_max
        );
        if self.part_s > 0.0 {
            s += &format!(
                "  low latency: {:.3} s parts {}  part PUTs {}  late {}  part PUT p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms\n",
                self.part_s,
                self.published.parts,
                self.published.part_puts,
                self.published.late_parts,
                self.part_put_ms_p50,
                self.part_put_ms_p99,
                self.part_put_ms_max
            );
        }
        for r in self
            .per_stream
            .iter()
            .filter(|r| !r.errors.is_empty())
            .take(5)
        {
            s += &format!("  stream {}: {}\n", r.stream, r.errors.join("; "));
        }
        s
    }
}

/// A running source.
pub struct Source {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<StreamReport>>,
    latency: Arc<Mutex<Histogram<u64>>>,
    /// Part `PUT`s' latency (low-latency mode), µs.
    part_latency: Arc<Mutex<Histogram<u64>>>,
    config: SourceConfig,
    started: Instant,
    /// Every stream has published its first full window (or ended).
    ready: Arc<(Mutex<u32>, std::sync::Condvar)>,
}

/// Deterministic bytes of segment `n` of stream `k`.
pub fn segment_bytes(seed: u64, k: u32, n: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    // A `styp` box so the bytes start like a CMAF segment.
    out.extend_from_slice(&24u32.to_be_bytes());
    out.extend_from_slice(b"stypmsdh\0\0\0\0msdhmsix");
    let mut x = seed ^ (u64::from(k) << 40) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    while out.len() < len {
        // splitmix64
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        out.extend_from_slice(&z.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Deterministic bytes of part `p` of segment `n` of stream `k`: a box sequence, so the
/// concatenated segment reads like a CMAF segment — part 0 opens with a `styp` box — and
/// each part holds one `moof`-named box of pseudo-random payload.
pub fn part_bytes(seed: u64, k: u32, n: u64, p: u32, len: usize) -> Vec<u8> {
    let len = len.max(64);
    let mut out = segment_bytes(
        seed ^ (u64::from(p) + 1).wrapping_mul(0xD6E8_FEB8_6659_FD93),
        k,
        n,
        len,
    );
    let at = if p == 0 { 24 } else { 0 };
    if p != 0 {
        out[..24].fill(0);
    }
    let size = u32::try_from(len - at).unwrap_or(0);
    out[at..at + 4].copy_from_slice(&size.to_be_bytes());
    out[at + 4..at + 8].copy_from_slice(b"moof");
    out
}

/// Bytes of every stream's init segment.
fn init_segment(k: u32) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&32u32.to_be_bytes());
    v.extend_from_slice(b"ftypiso6\0\0\0\0iso6cmfcdashmsix");
    v.extend_from_slice(&16u32.to_be_bytes());
    v.extend_from_slice(b"free");
    v.extend_from_slice(&u64::from(k).to_be_bytes());
    v
}

impl Source {
    /// Start publishing (threads of their own); returns at once.
    pub fn start(config: SourceConfig) -> Result<Source, String> {
        config.validate()?;
        let origin = Origin::parse(&config.target)?;
        let stop = Arc::new(AtomicBool::new(false));
        let histogram = || {
            Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)
                .map(|h| Arc::new(Mutex::new(h)))
                .map_err(|e| e.to_string())
        };
        let (latency, part_latency) = (histogram()?, histogram()?);
        let ready = Arc::new((Mutex::new(0u32), std::sync::Condvar::new()));
        let wall = SystemTime::now();
        let now = Instant::now();
        let back = if config.backfill {
            Duration::from_secs_f64(f64::from(config.window) * config.segment_s)
        } else {
            Duration::ZERO
        };
        let t0 = now.checked_sub(back).unwrap_or(now);
        let wall0 = wall - back;
        let mut threads = Vec::new();
        for k in 0..config.streams {
            let c = config.clone();
            let (stop, latency, ready) = (stop.clone(), latency.clone(), ready.clone());
            let part_latency = part_latency.clone();
            let client = Client::new(origin.clone(), c.token.clone(), c.timeout, c.tls.clone());
            let long = Client::new(origin.clone(), c.token.clone(), c.timeout, c.tls.clone());
            let t = std::thread::Builder::new()
                .name(format!("live-{k}"))
                .spawn(move || {
                    let mut p = Publisher {
                        c,
                        k,
                        client,
                        long,
                        latency,
                        part_latency,
                        report: StreamReport {
                            stream: k,
                            ..StreamReport::default()
                        },
                    };
                    p.run(t0, wall0, &stop, &ready);
                    p.report
                })
                .map_err(|e| format!("starting stream {k}: {e}"))?;
            threads.push(t);
        }
        Ok(Source {
            stop,
            threads,
            latency,
            part_latency,
            config,
            started: now,
            ready,
        })
    }

    /// Wait until every stream has a full window published (or `timeout` passes); `false`
    /// on timeout.
    pub fn wait_ready(&self, timeout: Duration) -> bool {
        let (m, cv) = &*self.ready;
        let g = m.lock().unwrap_or_else(|p| p.into_inner());
        let (g, r) = cv
            .wait_timeout_while(g, timeout, |n| *n < self.config.streams)
            .unwrap_or_else(|p| p.into_inner());
        drop(g);
        !r.timed_out()
    }

    /// Whether every stream has ended by itself (its duration).
    pub fn finished(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    /// Stop (publishing the final playlists) and report.
    pub fn stop(self) -> Report {
        self.stop.store(true, Ordering::Relaxed);
        let mut per_stream: Vec<StreamReport> = self
            .threads
            .into_iter()
            .map(|t| t.join().unwrap_or_default())
            .collect();
        per_stream.sort_by_key(|r| r.stream);
        let h = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        let hp = self.part_latency.lock().unwrap_or_else(|p| p.into_inner());
        let ms = |h: &Histogram<u64>, q: f64| {
            if h.is_empty() {
                0.0
            } else {
                h.value_at_quantile(q) as f64 / 1000.0
            }
        };
        let max = |h: &Histogram<u64>| {
            if h.is_empty() {
                0.0
            } else {
                h.max() as f64 / 1000.0
            }
        };
        let c = &self.config;
        Report {
            target: c.target.clone(),
            streams: c.streams,
            bitrate_kbps: c.bitrate_kbps,
            segment_s: c.segment_s,
            elapsed_s: self.started.elapsed().as_secs_f64(),
            published: per_stream.iter().map(|r| r.published).sum(),
            put_ms_p50: ms(&h, 0.5),
            put_ms_p99: ms(&h, 0.99),
            put_ms_max: max(&h),
            part_s: c.part_s().unwrap_or(0.0),
            part_put_ms_p50: ms(&hp, 0.5),
            part_put_ms_p99: ms(&hp, 0.99),
            part_put_ms_max: max(&hp),
            per_stream,
        }
    }
}

/// One stream's publishing state.
struct Publisher {
    c: SourceConfig,
    k: u32,
    client: Client,
    /// The second connection, for the long chunked `PUT`s of low-latency segments.
    long: Client,
    latency: Arc<Mutex<Histogram<u64>>>,
    part_latency: Arc<Mutex<Histogram<u64>>>,
    report: StreamReport,
}

/// A low-latency segment's chunked `PUT` in progress on the second connection.
struct Upload {
    path: String,
    /// Every byte handed to it so far (resent whole when the request is retried).
    sent: Vec<u8>,
    /// The request is open on the connection.
    open: bool,
    /// Requests begun for it.
    attempts: u32,
    /// Given up (counted as a failed `PUT`).
    failed: bool,
}

/// Requests a chunked segment upload may take (the first and two retries).
const UPLOAD_ATTEMPTS: u32 = 3;

impl Publisher {
    /// Record one `PUT`'s latency (and count it) since `t`; `part` when it published a part.
    fn record(&mut self, t: Instant, part: bool) {
        let us = t.elapsed().as_micros().max(1) as u64;
        if let Ok(mut h) = self.latency.lock() {
            let _ = h.record(us);
        }
        self.report.published.puts += 1;
        if part {
            if let Ok(mut h) = self.part_latency.lock() {
                let _ = h.record(us);
            }
            self.report.published.part_puts += 1;
        }
    }

    /// PUT with up to two retries before `deadline`; whether it succeeded.
    fn put(&mut self, path: &str, body: &[u8], deadline: Instant) -> bool {
        self.put_as(path, body, deadline, false)
    }

    /// [`Publisher::put`], counted as a part's when `part`.
    fn put_as(&mut self, path: &str, body: &[u8], deadline: Instant, part: bool) -> bool {
        for attempt in 0..3 {
            let t = Instant::now();
            let r = self.client.send("PUT", path, body);
            self.record(t, part);
            match r {
                Ok(200..=299) => return true,
                Ok(409) if attempt == 0 => {
                    // A WebDAV origin (Apache's mod_dav) does not create the collections
                    // a PUT names (RFC 4918 9.7.1): make them and try again.
                    self.make_collections(path);
                    continue;
                }
                Ok(s) if s == 401 || s == 403 || s == 413 => {
                    // Retrying cannot help.
                    self.fail(format!("PUT {path}: {s}"));
                    return false;
                }
                Ok(s) => self.note(format!("PUT {path}: {s}")),
                Err(e) => self.note(e),
            }
            if attempt < 2 && Instant::now() < deadline {
                self.report.retries += 1;
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            break;
        }
        self.report.published.failed_puts += 1;
        false
    }

    /// `MKCOL` every collection above `path` (`/live/`, `/live/stream-3/`, ...); one that
    /// exists already answers 405, which is fine.
    fn make_collections(&mut self, path: &str) {
        let mut at = 0;
        while let Some(i) = path[at + 1..].find('/') {
            at += i + 1;
            match self.client.send("MKCOL", &path[..=at], b"") {
                Ok(201 | 405) => {}
                Ok(s) => self.note(format!("MKCOL {}: {s}", &path[..=at])),
                Err(e) => self.note(e),
            }
        }
    }

    fn note(&mut self, e: String) {
        if self.report.errors.len() < 5 {
            self.report.errors.push(e);
        }
    }

    fn fail(&mut self, e: String) {
        self.report.published.failed_puts += 1;
        self.note(e);
    }

    fn window(&self, wall0: SystemTime, end: u64, ended: bool) -> Window {
        Window {
            first: end.saturating_sub(u64::from(self.c.window)),
            end,
            segment_s: self.c.segment_s,
            start: wall0,
            bandwidth_bps: u64::from(self.c.bitrate_kbps) * 1000,
            ended,
            codecs: self
                .c
                .title
                .as_ref()
                .map_or(SYNTHETIC_CODEC, |t| t.codec())
                .to_string(),
            parts: self.c.low_latency.as_ref().map(|ll| playlist::Parts {
                per_segment: self.c.parts().unwrap_or(1),
                done: 0,
                clock_url: ll.clock_url.clone(),
            }),
        }
    }

    /// The playlist (no part of the next segment done yet) and the MPD of `w`.
    fn publish_lists(&mut self, w: &Window, deadline: Instant) {
        self.publish_playlist(w.clone(), 0, deadline);
        self.publish_mpd(w, deadline);
    }

    /// Segment `n` (of `parts` parts) is out: the old one it pushes out of the window is
    /// deleted, and the stream is ready for viewers once a few segments are out.
    fn segment_out(
        &mut self,
        n: u64,
        parts: u32,
        told: &mut bool,
        ready: &(Mutex<u32>, std::sync::Condvar),
    ) {
        self.retire(n, parts);
        if n + 1 >= u64::from(self.c.window).min(4) {
            Self::tell_ready(told, ready);
        }
    }

    /// The stream ended after `end` segments: the final playlists say so (published within
    /// a segment `d`), and it is ready (if it never was).
    fn end_stream(
        &mut self,
        wall0: SystemTime,
        end: u64,
        d: Duration,
        told: &mut bool,
        ready: &(Mutex<u32>, std::sync::Condvar),
    ) {
        let w = self.window(wall0, end, true);
        self.publish_lists(&w, Instant::now() + d);
        Self::tell_ready(told, ready);
    }

    /// Once segment `n` is out: the segment that left the window two segments before it,
    /// and its `parts` parts, deleted (two segments of grace beyond the window).
    fn retire(&mut self, n: u64, parts: u32) {
        let grace = u64::from(self.c.window) + 2;
        let Some(old) = n.checked_sub(grace) else {
            return;
        };
        let dir = self.c.dir(self.k);
        let names = std::iter::once(playlist::segment_name(old))
            .chain((0..parts).map(|i| playlist::part_name(old, i)));
        for name in names.collect::<Vec<_>>() {
            if let Err(e) = self.client.send("DELETE", &format!("{dir}{name}"), &[]) {
                self.note(e);
            }
        }
    }

    /// Segment `n` (`bytes`, one `PUT` with a length), then the lists that end with it.
    fn publish_segment(&mut self, wall0: SystemTime, n: u64, bytes: &[u8], deadline: Instant) {
        let dir = self.c.dir(self.k);
        self.put(
            &format!("{dir}{}", playlist::segment_name(n)),
            bytes,
            deadline,
        );
        self.report.published.segments += 1;
        let w = self.window(wall0, n + 1, false);
        self.publish_lists(&w, deadline);
    }

    /// What both publishing loops begin with: the stream's directory, the segments
    /// backfilled, when to stop, and the init segment published.
    fn start_stream(&mut self, d: Duration) -> (String, u64, Option<Instant>) {
        let dir = self.c.dir(self.k);
        let backfilled = if self.c.backfill {
            u64::from(self.c.window)
        } else {
            0
        };
        let end_at = self.c.duration.map(|x| Instant::now() + x);
        let init = match &self.c.title {
            Some(t) => t.init(self.k),
            None => init_segment(self.k),
        };
        self.put(&format!("{dir}init.mp4"), &init, Instant::now() + d);
        (dir, backfilled, end_at)
    }

    fn run(
        &mut self,
        t0: Instant,
        wall0: SystemTime,
        stop: &AtomicBool,
        ready: &(Mutex<u32>, std::sync::Condvar),
    ) {
        if self.c.low_latency.is_some() {
            return self.run_parts(t0, wall0, stop, ready);
        }
        let d = Duration::from_secs_f64(self.c.segment_s);
        let len = self.c.segment_bytes();
        let (_, backfilled, end_at) = self.start_stream(d);
        let mut told_ready = false;
        let mut n = 0u64;
        loop {
            let due = t0 + d.mul_f64((n + 1) as f64);
            // Sleep in short steps so a stop is seen promptly.
            loop {
                let now = Instant::now();
                if stop.load(Ordering::Relaxed) || end_at.is_some_and(|e| now >= e) || now >= due {
                    break;
                }
                std::thread::sleep((due - now).min(Duration::from_millis(100)));
            }
            if stop.load(Ordering::Relaxed) || end_at.is_some_and(|e| Instant::now() >= e) {
                break;
            }
            let deadline = due + d;
            let bytes = match &self.c.title {
                None => segment_bytes(self.c.seed, self.k, n, len),
                Some(t) => match t.segment(n) {
                    Ok(b) => b,
                    Err(e) => {
                        // The title cannot be numbered further: end the stream cleanly.
                        self.fail(e);
                        break;
                    }
                },
            };
            self.publish_segment(wall0, n, &bytes, deadline);
            if n >= backfilled && Instant::now() > due + d / 2 {
                self.report.published.late_segments += 1;
            }
            self.segment_out(n, 0, &mut told_ready, ready);
            n += 1;
        }
        self.end_stream(wall0, n, d, &mut told_ready, ready);
    }

    /// Sleep until `t`; `false` when the source was stopped first.
    fn wait_until(t: Instant, stop: &AtomicBool) -> bool {
        loop {
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            let now = Instant::now();
            if now >= t {
                return true;
            }
            // Short steps, so a stop is seen promptly.
            std::thread::sleep((t - now).min(Duration::from_millis(100)));
        }
    }

    /// Bytes of part `p` of segment `n`.
    fn part(&self, n: u64, p: u32) -> Result<Vec<u8>, String> {
        match &self.c.title {
            Some(t) => t.part(n, p),
            None => Ok(part_bytes(self.c.seed, self.k, n, p, self.c.part_bytes())),
        }
    }

    /// `PUT` the HLS playlist of `w` with `done` parts of segment `w.end` published.
    fn publish_playlist(&mut self, mut w: Window, done: u32, deadline: Instant) {
        if let Some(parts) = &mut w.parts {
            parts.done = done;
        }
        let dir = self.c.dir(self.k);
        let text = playlist::hls(&w);
        self.put(&format!("{dir}index.m3u8"), text.as_bytes(), deadline);
    }

    fn publish_mpd(&mut self, w: &Window, deadline: Instant) {
        let dir = self.c.dir(self.k);
        let mpd = playlist::dash(w, SystemTime::now());
        self.put(&format!("{dir}manifest.mpd"), mpd.as_bytes(), deadline);
    }

    /// Begin the chunked `PUT` of `up` (or begin it again, resending what it holds); a
    /// failure is noted and left for the next chunk to retry.
    fn upload_open(&mut self, up: &mut Upload) {
        while !up.open && !up.failed {
            if up.attempts >= UPLOAD_ATTEMPTS {
                up.failed = true;
                self.report.published.failed_puts += 1;
                return;
            }
            if up.attempts > 0 {
                self.report.retries += 1;
            }
            up.attempts += 1;
            let t = Instant::now();
            if let Err(e) = self.long.begin_chunked(&up.path) {
                self.record(t, false);
                self.note(e);
                continue;
            }
            up.open = true;
            if !up.sent.is_empty() {
                let all = up.sent.clone();
                self.upload_send(up, &all, t);
            }
        }
    }

    /// Send `data` as one chunk of the open request; an answer or error ends the request.
    fn upload_send(&mut self, up: &mut Upload, data: &[u8], t: Instant) {
        match self.long.chunk(&up.path, data) {
            Ok(None) => {}
            Ok(Some(status)) => {
                // The origin answered before the body ended: it refused the upload.
                self.record(t, false);
                up.open = false;
                if matches!(status, 401 | 403 | 413) {
                    up.failed = true;
                    self.fail(format!("PUT {}: {status}", up.path));
                } else {
                    self.note(format!("PUT {}: {status} before the body ended", up.path));
                }
            }
            Err(e) => {
                self.record(t, false);
                up.open = false;
                self.note(e);
            }
        }
    }

    /// Append `data` (a part) to the upload as one chunk.
    fn upload_chunk(&mut self, up: &mut Upload, data: &[u8]) {
        up.sent.extend_from_slice(data);
        if up.failed {
            return;
        }
        if up.open {
            self.upload_send(up, data, Instant::now());
        }
        // Not open (never begun, or the origin dropped it): begin again with every byte.
        self.upload_open(up);
    }

    /// End the upload and read the origin's answer; whether the segment was stored.
    fn upload_finish(&mut self, up: &mut Upload) -> bool {
        loop {
            self.upload_open(up);
            if up.failed {
                return false;
            }
            let t = Instant::now();
            let r = self.long.end_chunked(&up.path);
            self.record(t, false);
            up.open = false;
            match r {
                Ok(200..=299) => return true,
                Ok(s) if matches!(s, 401 | 403 | 413) => {
                    up.failed = true;
                    self.fail(format!("PUT {}: {s}", up.path));
                    return false;
                }
                Ok(s) => self.note(format!("PUT {}: {s}", up.path)),
                Err(e) => self.note(e),
            }
        }
    }

    fn tell_ready(told: &mut bool, ready: &(Mutex<u32>, std::sync::Condvar)) {
        if !*told {
            *told = true;
            let (m, cv) = ready;
            *m.lock().unwrap_or_else(|p| p.into_inner()) += 1;
            cv.notify_all();
        }
    }

    /// A backfilled segment of the low-latency stream, published at once: its parts, the
    /// whole segment (one `PUT` with a length), the playlist and the MPD.
    fn backfill_parts(&mut self, wall0: SystemTime, n: u64, deadline: Instant) -> bool {
        let dir = self.c.dir(self.k);
        let k = self.c.parts().unwrap_or(1);
        let mut whole = Vec::new();
        for p in 0..k {
            let bytes = match self.part(n, p) {
                Ok(b) => b,
                Err(e) => {
                    self.fail(e);
                    return false;
                }
            };
            self.put_as(
                &format!("{dir}{}", playlist::part_name(n, p)),
                &bytes,
                deadline,
                true,
            );
            self.report.published.parts += 1;
            whole.extend_from_slice(&bytes);
        }
        self.publish_segment(wall0, n, &whole, deadline);
        true
    }

    /// The low-latency publishing loop: for each segment, at its start the chunked `PUT` of
    /// `seg-n.m4s` begins on the second connection and the MPD follows; at the end of each
    /// part, the part's `PUT`, its chunk, and the playlist listing it. The stream ends at a
    /// segment boundary when its duration is reached; a stop mid-segment aborts the
    /// segment's upload and leaves the segment out of the final playlist.
    fn run_parts(
        &mut self,
        t0: Instant,
        wall0: SystemTime,
        stop: &AtomicBool,
        ready: &(Mutex<u32>, std::sync::Condvar),
    ) {
        let d = Duration::from_secs_f64(self.c.segment_s);
        let k = self.c.parts().unwrap_or(1);
        let p = d / k;
        let (dir, backfilled, end_at) = self.start_stream(d);
        let mut told_ready = false;
        let mut n = 0u64;
        'segments: loop {
            let start = t0 + d.mul_f64(n as f64);
            if stop.load(Ordering::Relaxed) || end_at.is_some_and(|e| start + d > e) {
                break;
            }
            if n < backfilled {
                if !self.backfill_parts(wall0, n, start + 2 * d) {
                    break;
                }
            } else {
                if !Self::wait_until(start, stop) {
                    break;
                }
                let mut up = Upload {
                    path: format!("{dir}{}", playlist::segment_name(n)),
                    sent: Vec::new(),
                    open: false,
                    attempts: 0,
                    failed: false,
                };
                self.upload_open(&mut up);
                self.publish_mpd(&self.window(wall0, n, false), start + d);
                for i in 0..k {
                    let due = start + p * (i + 1);
                    if !Self::wait_until(due, stop) {
                        // Stopped mid-segment: the origin must not keep a partial segment.
                        self.long.abort();
                        break 'segments;
                    }
                    let bytes = match self.part(n, i) {
                        Ok(b) => b,
                        Err(e) => {
                            // The title cannot be numbered further: end the stream.
                            self.fail(e);
                            self.long.abort();
                            break 'segments;
                        }
                    };
                    self.put_as(
                        &format!("{dir}{}", playlist::part_name(n, i)),
                        &bytes,
                        due + p,
                        true,
                    );
                    self.upload_chunk(&mut up, &bytes);
                    let last = i + 1 == k;
                    if last {
                        self.upload_finish(&mut up);
                    }
                    let end = if last { n + 1 } else { n };
                    self.publish_playlist(self.window(wall0, end, false), (i + 1) % k, due + p);
                    self.report.published.parts += 1;
                    if Instant::now() > due + p / 2 {
                        self.report.published.late_parts += 1;
                    }
                }
                self.report.published.segments += 1;
                if Instant::now() > start + d + d / 2 {
                    self.report.published.late_segments += 1;
                }
            }
            self.segment_out(n, k, &mut told_ready, ready);
            n += 1;
        }
        self.end_stream(wall0, n, d, &mut told_ready, ready);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_deterministic_and_sized() {
        let a = segment_bytes(1, 0, 5, 1000);
        assert_eq!(a.len(), 1000);
        assert_eq!(&a[4..8], b"styp");
        assert_eq!(a, segment_bytes(1, 0, 5, 1000));
        assert_ne!(a, segment_bytes(1, 1, 5, 1000));
        assert_ne!(a, segment_bytes(2, 0, 5, 1000));
        let c = SourceConfig::new("http://127.0.0.1:1", 1, 3000);
        assert_eq!(c.segment_bytes(), 750_000);
    }

    #[test]
    fn bad_settings_are_named() {
        let ok = SourceConfig::new("http://127.0.0.1:9", 2, 730);
        assert!(ok.validate().is_ok());
        let mut c = ok.clone();
        c.streams = 0;
        assert!(c.validate().unwrap_err().contains("--streams"));
        let mut c = ok.clone();
        c.segment_s = 0.0;
        assert!(c.validate().unwrap_err().contains("--segment"));
        let mut c = ok.clone();
        c.prefix = "live".into();
        assert!(c.validate().unwrap_err().contains("--prefix"));
        let mut c = ok;
        c.target = "https://x".into();
        assert!(c.validate().is_err());
    }

    #[test]
    fn parts_round_to_a_whole_number_per_segment() {
        let mut c = SourceConfig::new("http://127.0.0.1:9", 1, 3000);
        assert_eq!((c.parts(), c.part_s()), (None, None));
        c.low_latency = Some(LowLatency::new(&c.target));
        assert_eq!(c.parts(), Some(6));
        assert!((c.part_s().unwrap() - 2.0 / 6.0).abs() < 1e-12);
        assert!(c.validate().is_ok());
        // 3000 kbit/s for a third of a second.
        assert_eq!(c.part_bytes(), 125_000);
        c.low_latency.as_mut().unwrap().part_s = 0.3;
        assert_eq!(c.parts(), Some(7));
        assert_eq!(
            c.low_latency.as_ref().unwrap().clock_url.as_deref(),
            Some("http://127.0.0.1:9/.vodkit/clock")
        );
        assert_eq!(
            default_clock_url("http://origin.example:8080/x/"),
            "http://origin.example:8080/.vodkit/clock"
        );
    }

    #[test]
    fn parts_too_long_or_too_short_are_refused() {
        let mut c = SourceConfig::new("http://127.0.0.1:9", 1, 3000);
        let mut part = |p: f64, d: f64| {
            c.segment_s = d;
            c.low_latency = Some(LowLatency {
                part_s: p,
                clock_url: None,
            });
            c.validate()
        };
        assert!(part(1.0, 2.0).is_ok());
        let e = part(1.2, 2.0).unwrap_err();
        assert_eq!(
            e,
            "--part: expected at most half the segment (1.000 s), got 1.2 s"
        );
        let e = part(0.04, 2.0).unwrap_err();
        assert_eq!(e, "--part: expected at least 0.05 s, got 0.04 s");
        // 0.05 s asked, but 0.33 s segments hold 7 parts of 0.047 s.
        let e = part(0.05, 0.33).unwrap_err();
        assert!(
            e.starts_with("--part: 0.05 s makes 7 parts of 0.0471 s"),
            "{e}"
        );
        assert!(!e.contains('\n'));
    }

    #[test]
    fn parts_concatenate_into_a_box_sequence() {
        let parts: Vec<Vec<u8>> = (0..4).map(|p| part_bytes(7, 1, 3, p, 1000)).collect();
        assert!(parts.iter().all(|p| p.len() == 1000));
        assert_eq!(parts[0], part_bytes(7, 1, 3, 0, 1000), "deterministic");
        assert_ne!(parts[1], parts[2]);
        assert_ne!(parts[0], part_bytes(7, 1, 4, 0, 1000));
        let whole = parts.concat();
        let boxes = vodkit_media::bmff::children(&whole, 0, whole.len()).unwrap();
        let kinds: Vec<&[u8]> = boxes.iter().map(|b| &b.kind[..]).collect();
        assert_eq!(kinds, [&b"styp"[..], b"moof", b"moof", b"moof", b"moof"]);
    }
}
