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
        }
    }

    /// Publish `title`'s fragments: the bit rate and segment duration become its own.
    pub fn with_title(mut self, title: LiveTitle) -> SourceConfig {
        self.bitrate_kbps = title.bitrate_kbps();
        self.segment_s = title.segment_s();
        self.title = Some(Arc::new(title));
        self
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
        Origin::parse(&self.target).map(|_| ())
    }

    /// Bytes of one segment.
    pub fn segment_bytes(&self) -> usize {
        ((f64::from(self.bitrate_kbps) * 125.0 * self.segment_s).round() as usize).max(64)
    }

    fn dir(&self, k: u32) -> String {
        format!("{}/stream-{k}/", self.prefix.trim_end_matches('/'))
    }
}

/// What one stream's publishing saw.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamReport {
    pub stream: u32,
    pub segments: u64,
    pub puts: u64,
    /// PUTs that failed after their retries (status or I/O).
    pub failed_puts: u64,
    pub retries: u64,
    /// Segments published more than half a segment after they were due.
    pub late_segments: u64,
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
    pub segments: u64,
    pub puts: u64,
    pub failed_puts: u64,
    pub late_segments: u64,
    pub put_ms_p50: f64,
    pub put_ms_p99: f64,
    pub put_ms_max: f64,
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
            self.segments,
            self.puts,
            self.failed_puts,
            self.late_segments,
            self.put_ms_p50,
            self.put_ms_p99,
            self.put_ms_max
        );
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
        let latency = Arc::new(Mutex::new(
            Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).map_err(|e| e.to_string())?,
        ));
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
            let client = Client::new(origin.clone(), c.token.clone(), c.timeout);
            let t = std::thread::Builder::new()
                .name(format!("live-{k}"))
                .spawn(move || {
                    let mut p = Publisher {
                        c,
                        k,
                        client,
                        latency,
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
        let ms = |q: f64| {
            if h.is_empty() {
                0.0
            } else {
                h.value_at_quantile(q) as f64 / 1000.0
            }
        };
        let c = &self.config;
        Report {
            target: c.target.clone(),
            streams: c.streams,
            bitrate_kbps: c.bitrate_kbps,
            segment_s: c.segment_s,
            elapsed_s: self.started.elapsed().as_secs_f64(),
            segments: per_stream.iter().map(|r| r.segments).sum(),
            puts: per_stream.iter().map(|r| r.puts).sum(),
            failed_puts: per_stream.iter().map(|r| r.failed_puts).sum(),
            late_segments: per_stream.iter().map(|r| r.late_segments).sum(),
            put_ms_p50: ms(0.5),
            put_ms_p99: ms(0.99),
            put_ms_max: if h.is_empty() {
                0.0
            } else {
                h.max() as f64 / 1000.0
            },
            per_stream,
        }
    }
}

/// One stream's publishing state.
struct Publisher {
    c: SourceConfig,
    k: u32,
    client: Client,
    latency: Arc<Mutex<Histogram<u64>>>,
    report: StreamReport,
}

impl Publisher {
    /// PUT with up to two retries before `deadline`; whether it succeeded.
    fn put(&mut self, path: &str, body: &[u8], deadline: Instant) -> bool {
        for attempt in 0..3 {
            let t = Instant::now();
            let r = self.client.send("PUT", path, body);
            let us = t.elapsed().as_micros().max(1) as u64;
            if let Ok(mut h) = self.latency.lock() {
                let _ = h.record(us);
            }
            self.report.puts += 1;
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
        self.report.failed_puts += 1;
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
        self.report.failed_puts += 1;
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
        }
    }

    fn publish_lists(&mut self, w: &Window, deadline: Instant) {
        let dir = self.c.dir(self.k);
        let hls = playlist::hls(w);
        self.put(&format!("{dir}index.m3u8"), hls.as_bytes(), deadline);
        let mpd = playlist::dash(w, SystemTime::now());
        self.put(&format!("{dir}manifest.mpd"), mpd.as_bytes(), deadline);
    }

    fn run(
        &mut self,
        t0: Instant,
        wall0: SystemTime,
        stop: &AtomicBool,
        ready: &(Mutex<u32>, std::sync::Condvar),
    ) {
        let d = Duration::from_secs_f64(self.c.segment_s);
        let dir = self.c.dir(self.k);
        let len = self.c.segment_bytes();
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
            self.put(
                &format!("{dir}{}", playlist::segment_name(n)),
                &bytes,
                deadline,
            );
            self.report.segments += 1;
            let w = self.window(wall0, n + 1, false);
            self.publish_lists(&w, deadline);
            if n >= backfilled && Instant::now() > due + d / 2 {
                self.report.late_segments += 1;
            }
            // Two segments of grace beyond the window before the old one goes.
            let grace = u64::from(self.c.window) + 2;
            if n >= grace {
                let old = format!("{dir}{}", playlist::segment_name(n - grace));
                match self.client.send("DELETE", &old, &[]) {
                    Ok(_) => {}
                    Err(e) => self.note(e),
                }
            }
            n += 1;
            if !told_ready && n >= u64::from(self.c.window).min(4) {
                told_ready = true;
                let (m, cv) = ready;
                *m.lock().unwrap_or_else(|p| p.into_inner()) += 1;
                cv.notify_all();
            }
        }
        // The final playlists say the stream ended.
        let w = self.window(wall0, n, true);
        self.publish_lists(&w, Instant::now() + d);
        if !told_ready {
            let (m, cv) = ready;
            *m.lock().unwrap_or_else(|p| p.into_inner()) += 1;
            cv.notify_all();
        }
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
}
