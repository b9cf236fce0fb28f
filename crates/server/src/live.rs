//! Live origin (`vodkit serve --ingest PREFIX --ingest-token T`): a live source publishes
//! segments and playlists by `PUT` (and removes them by `DELETE`) under the prefix; the
//! server keeps each stream's live window in memory and serves it.
//!
//! A *stream* is an object's parent directory (`/live/stream-3/`). Playlists (`.m3u8`,
//! `.mpd`) are replaced in place, and so are initialization segments (a name with `init`
//! in it, e.g. `init.mp4`), which every viewer joining later still needs; every other
//! object is a media segment. Each stream keeps at
//! most `window` media segments (oldest evicted first), all streams together at most
//! `max_bytes` (globally oldest segments evicted first), and a stream that received no
//! `PUT` for `ttl` is dropped whole. A `GET` for a segment that is not there yet, in a
//! stream that exists, is *held* until the segment's `PUT` completes (as low-latency
//! origins do) or `hold` passes, then answered 404; playlists are never held, nor segments
//! numbered at or before the newest one written (they left the window or were skipped).
//!
//! The token is compared in constant time (`subtle`). This module is the store and the
//! rules; the connection code (`conn.rs`) reads bodies and writes answers.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Settings of the live origin.
#[derive(Debug, Clone, PartialEq)]
pub struct IngestConfig {
    /// Path prefix accepting `PUT`/`DELETE`, e.g. `/live/` (always ends with `/`).
    pub prefix: String,
    /// The bearer token a publisher must send.
    pub token: String,
    /// Segments kept per stream.
    pub window: usize,
    /// Bytes kept over all streams.
    pub max_bytes: u64,
    /// Largest object accepted (`413` above).
    pub max_object: u64,
    /// A stream without a `PUT` for this long is dropped.
    pub ttl: Duration,
    /// Longest a `GET` waits for a segment not published yet.
    pub hold: Duration,
}

impl IngestConfig {
    /// Defaults for `prefix` and `token`: 30 segments per stream, 512 MiB in all, objects
    /// up to 64 MiB, streams dropped after 60 s without a `PUT`, requests held up to 6 s.
    pub fn new(prefix: &str, token: &str) -> IngestConfig {
        let mut prefix = prefix.to_string();
        if !prefix.starts_with('/') {
            prefix.insert(0, '/');
        }
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        IngestConfig {
            prefix,
            token: token.to_string(),
            window: 30,
            max_bytes: 512 << 20,
            max_object: 64 << 20,
            ttl: Duration::from_secs(60),
            hold: Duration::from_secs(6),
        }
    }
}

/// One stored object.
#[derive(Debug, Clone)]
pub struct Object {
    pub bytes: Arc<Vec<u8>>,
    pub modified: SystemTime,
    /// Strong validator: the store's sequence number when it was written.
    pub etag: String,
}

/// Whether an object name is a playlist or manifest (replaced in place, short-lived in caches).
pub fn is_playlist(name: &str) -> bool {
    name.ends_with(".m3u8") || name.ends_with(".mpd")
}

/// Whether an object is a stream's initialization segment (`init.mp4`, `init-v1.m4s`,
/// `audio_init.mp4`): kept for the stream's life, never counted in the window.
pub fn is_init(name: &str) -> bool {
    let stem = name.rsplit_once('.').map_or(name, |(stem, _)| stem);
    stem.to_ascii_lowercase().contains("init")
}

/// `Content-Type` of a live object by its extension.
pub fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next().unwrap_or("") {
        "m3u8" => "application/vnd.apple.mpegurl",
        "mpd" => "application/dash+xml",
        "m4s" => "video/iso.segment",
        "mp4" => "video/mp4",
        "m4a" => "audio/mp4",
        "ts" => "video/mp2t",
        "vtt" => "text/vtt",
        _ => "application/octet-stream",
    }
}

/// `Cache-Control` of a live object: a playlist changes every segment (one second is
/// about a third of a 2 s segment: caches and players see a new one soon), a segment never
/// changes once written.
pub fn cache_control(name: &str) -> &'static str {
    if is_playlist(name) {
        "max-age=1"
    } else {
        "max-age=86400, immutable"
    }
}

/// Why a publisher was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthError {
    /// No `Authorization: Bearer …` header (401).
    Missing,
    /// A token that is not the one configured (403).
    Wrong,
}

impl AuthError {
    pub fn status(self) -> u16 {
        match self {
            AuthError::Missing => 401,
            AuthError::Wrong => 403,
        }
    }
}

/// What a `GET` finds.
#[derive(Debug, Clone)]
pub enum Lookup {
    Found(Object),
    /// Not there; `hold` when it is a segment of a stream that exists (it may come).
    Missing {
        hold: bool,
    },
}

/// The live origin in `/stats` (`ingest`).
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct IngestStats {
    pub puts: u64,
    pub put_bytes: u64,
    pub deletes: u64,
    pub rejected: u64,
    pub held: u64,
    pub hold_timeouts: u64,
    pub expired: u64,
    /// Streams, objects and bytes held now.
    pub streams: u64,
    pub objects: u64,
    pub bytes: u64,
}

/// Counters of the live origin (in `/stats`).
#[derive(Debug, Default)]
pub struct IngestCounters {
    pub puts: AtomicU64,
    pub put_bytes: AtomicU64,
    pub deletes: AtomicU64,
    /// PUT/DELETE refused: no or wrong token, object too large.
    pub rejected: AtomicU64,
    pub held: AtomicU64,
    pub hold_timeouts: AtomicU64,
    /// Segments evicted by the window or the byte cap, and objects of expired streams.
    pub expired: AtomicU64,
}

#[derive(Debug, Default)]
struct StreamState {
    objects: HashMap<String, Object>,
    /// Segment names in the order they were written.
    segments: VecDeque<String>,
    last_put: Option<Instant>,
}

impl StreamState {
    /// Whether segment `name` may still be published: it numbers after the newest segment
    /// written (`seg-41.m4s` after `seg-40.m4s`), or the names carry no numbers to compare.
    /// A segment that already left the window is not coming back, so a viewer that fell
    /// behind gets its 404 at once instead of after the hold.
    fn may_come(&self, name: &str) -> bool {
        match (
            segment_number(name),
            self.segments.back().and_then(|n| segment_number(n)),
        ) {
            (Some(wanted), Some(newest)) => wanted > newest,
            _ => true,
        }
    }
}

/// The number a segment name ends with before its extension (`seg-41.m4s` → 41).
fn segment_number(name: &str) -> Option<u64> {
    let stem = name.rsplit_once('.').map_or(name, |(stem, _)| stem);
    let digits = stem.len() - stem.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    stem[stem.len() - digits..].parse().ok()
}

#[derive(Debug, Default)]
struct Inner {
    streams: HashMap<String, StreamState>,
    /// Every segment written, oldest first, for the byte cap (entries of segments already
    /// gone are skipped).
    order: VecDeque<(String, String, String)>,
    bytes: u64,
    objects: u64,
    seq: u64,
}

/// The in-memory live windows of every stream.
#[derive(Debug)]
pub struct LiveStore {
    pub config: IngestConfig,
    inner: Mutex<Inner>,
    /// Woken whenever an object is written.
    written: tokio::sync::Notify,
    pub counters: IngestCounters,
}

/// `(stream directory, object name)` of a path, e.g. `("/live/s3/", "seg-4.m4s")`.
fn split(path: &str) -> Option<(&str, &str)> {
    let i = path.rfind('/')?;
    let (dir, name) = path.split_at(i + 1);
    (!name.is_empty()).then_some((dir, name))
}

impl LiveStore {
    pub fn new(config: IngestConfig) -> LiveStore {
        LiveStore {
            config,
            inner: Mutex::new(Inner::default()),
            written: tokio::sync::Notify::new(),
            counters: IngestCounters::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `path` (no query) is under the ingest prefix.
    pub fn covers(&self, path: &str) -> bool {
        path.starts_with(&self.config.prefix) && !path.contains("/../") && !path.ends_with("/..")
    }

    /// Check an `Authorization` header value against the token, in constant time.
    pub fn authorize(&self, header: Option<&str>) -> Result<(), AuthError> {
        use subtle::ConstantTimeEq;
        let given = header
            .and_then(|h| {
                let (scheme, token) = h.trim().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .ok_or(AuthError::Missing)?;
        let want = self.config.token.as_bytes();
        // Lengths differ: compare against the token itself so the time does not depend on
        // where the given one differs.
        let same: bool = if given.len() == want.len() {
            given.as_bytes().ct_eq(want).into()
        } else {
            let _ = want.ct_eq(want);
            false
        };
        if same {
            Ok(())
        } else {
            Err(AuthError::Wrong)
        }
    }

    /// Store `bytes` at `path`; 201 when new, 204 when replaced, 400 for a path without a
    /// file name.
    pub fn put(&self, path: &str, bytes: Vec<u8>, now: Instant) -> u16 {
        let Some((dir, name)) = split(path) else {
            return 400;
        };
        let len = bytes.len() as u64;
        let mut g = self.lock();
        self.expire_locked(&mut g, now);
        g.seq += 1;
        let obj = Object {
            bytes: Arc::new(bytes),
            modified: SystemTime::now(),
            etag: format!("\"live-{}\"", g.seq),
        };
        let inner = &mut *g;
        let stream = inner.streams.entry(dir.to_string()).or_default();
        stream.last_put = Some(now);
        let old = stream.objects.insert(name.to_string(), obj.clone());
        let status = match &old {
            Some(o) => {
                inner.bytes -= o.bytes.len() as u64;
                204
            }
            None => {
                inner.objects += 1;
                201
            }
        };
        inner.bytes += len;
        if !is_playlist(name) && !is_init(name) {
            if old.is_some() {
                stream.segments.retain(|n| n != name);
            }
            stream.segments.push_back(name.to_string());
            inner
                .order
                .push_back((dir.to_string(), name.to_string(), obj.etag.clone()));
            let mut evicted = 0u64;
            while stream.segments.len() > self.config.window {
                if let Some(gone) = stream.segments.pop_front() {
                    if let Some(o) = stream.objects.remove(&gone) {
                        inner.bytes -= o.bytes.len() as u64;
                        inner.objects -= 1;
                        evicted += 1;
                    }
                }
            }
            self.counters.expired.fetch_add(evicted, Ordering::Relaxed);
        }
        self.cap_bytes(inner);
        drop(g);
        self.counters.puts.fetch_add(1, Ordering::Relaxed);
        self.counters.put_bytes.fetch_add(len, Ordering::Relaxed);
        self.written.notify_waiters();
        status
    }

    /// Evict the globally oldest segments while the store holds more than `max_bytes`.
    fn cap_bytes(&self, inner: &mut Inner) {
        while inner.bytes > self.config.max_bytes {
            let Some((dir, name, etag)) = inner.order.pop_front() else {
                break;
            };
            let Some(stream) = inner.streams.get_mut(&dir) else {
                continue;
            };
            // Only the version this entry was written for (a newer one has its own entry).
            if stream.objects.get(&name).is_some_and(|o| o.etag == etag) {
                if let Some(o) = stream.objects.remove(&name) {
                    inner.bytes -= o.bytes.len() as u64;
                    inner.objects -= 1;
                    stream.segments.retain(|n| *n != name);
                    self.counters.expired.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if inner.order.len() > 4 * (inner.objects as usize + 16) {
            // Drop entries of segments that are gone so the list stays proportional.
            let streams = &inner.streams;
            inner.order.retain(|(d, n, e)| {
                streams
                    .get(d)
                    .and_then(|s| s.objects.get(n))
                    .is_some_and(|o| o.etag == *e)
            });
        }
    }

    /// Remove `path`; 204 when it was there, 404 when not.
    pub fn delete(&self, path: &str, now: Instant) -> u16 {
        let Some((dir, name)) = split(path) else {
            return 404;
        };
        let mut g = self.lock();
        self.expire_locked(&mut g, now);
        let inner = &mut *g;
        let Some(stream) = inner.streams.get_mut(dir) else {
            return 404;
        };
        match stream.objects.remove(name) {
            Some(o) => {
                inner.bytes -= o.bytes.len() as u64;
                inner.objects -= 1;
                stream.segments.retain(|n| n != name);
                self.counters.deletes.fetch_add(1, Ordering::Relaxed);
                204
            }
            None => 404,
        }
    }

    /// What a `GET` of `path` finds now.
    pub fn get(&self, path: &str, now: Instant) -> Lookup {
        let Some((dir, name)) = split(path) else {
            return Lookup::Missing { hold: false };
        };
        let mut g = self.lock();
        self.expire_locked(&mut g, now);
        match g.streams.get(dir) {
            None => Lookup::Missing { hold: false },
            Some(s) => match s.objects.get(name) {
                Some(o) => Lookup::Found(o.clone()),
                None => Lookup::Missing {
                    hold: !is_playlist(name) && s.may_come(name),
                },
            },
        }
    }

    /// Wait until `path` is written or `deadline` passes (`None`); no polling: woken by
    /// every `PUT`.
    pub async fn wait_for(&self, path: &str, deadline: Instant) -> Option<Object> {
        loop {
            let written = self.written.notified();
            tokio::pin!(written);
            // Registered before looking, so a PUT between the look and the wait wakes us.
            written.as_mut().enable();
            let now = Instant::now();
            match self.get(path, now) {
                Lookup::Found(o) => return Some(o),
                Lookup::Missing { hold: false } => return None,
                Lookup::Missing { hold: true } if now >= deadline => return None,
                Lookup::Missing { hold: true } => {}
            }
            tokio::select! {
                _ = &mut written => {}
                _ = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)) => {}
            }
        }
    }

    /// Drop streams without a `PUT` for the TTL.
    fn expire_locked(&self, inner: &mut Inner, now: Instant) {
        let ttl = self.config.ttl;
        let stale: Vec<String> = inner
            .streams
            .iter()
            .filter(|(_, s)| {
                s.last_put
                    .is_some_and(|t| now.saturating_duration_since(t) > ttl)
            })
            .map(|(d, _)| d.clone())
            .collect();
        for d in stale {
            if let Some(s) = inner.streams.remove(&d) {
                let n = s.objects.len() as u64;
                inner.objects -= n;
                inner.bytes -= s
                    .objects
                    .values()
                    .map(|o| o.bytes.len() as u64)
                    .sum::<u64>();
                self.counters.expired.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// Objects and bytes held now.
    pub fn level(&self) -> (u64, u64) {
        let g = self.lock();
        (g.objects, g.bytes)
    }

    /// Streams held now.
    pub fn streams(&self) -> usize {
        self.lock().streams.len()
    }

    /// Counters and levels for `/stats`.
    pub fn stats(&self) -> IngestStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (objects, bytes) = self.level();
        IngestStats {
            puts: get(&c.puts),
            put_bytes: get(&c.put_bytes),
            deletes: get(&c.deletes),
            rejected: get(&c.rejected),
            held: get(&c.held),
            hold_timeouts: get(&c.hold_timeouts),
            expired: get(&c.expired),
            streams: self.streams() as u64,
            objects,
            bytes,
        }
    }
}

/// The live origin's figures in `/metrics` (`vodkit_ingest_*`), read at every scrape.
#[derive(Debug)]
pub struct IngestCollector(pub Arc<LiveStore>);

impl prometheus_client::collector::Collector for IngestCollector {
    fn encode(
        &self,
        mut enc: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use vodkit_prefetch::metrics::{counter, gauge};
        let s = self.0.stats();
        let e = &mut enc;
        counter(e, "vodkit_ingest_puts", "Objects published by PUT", s.puts)?;
        counter(
            e,
            "vodkit_ingest_put_bytes",
            "Bytes published by PUT",
            s.put_bytes,
        )?;
        counter(
            e,
            "vodkit_ingest_deletes",
            "Objects removed by DELETE",
            s.deletes,
        )?;
        counter(
            e,
            "vodkit_ingest_rejected",
            "PUT or DELETE refused: no or wrong token, object too large",
            s.rejected,
        )?;
        counter(
            e,
            "vodkit_ingest_held",
            "GETs held for a segment not published yet",
            s.held,
        )?;
        counter(
            e,
            "vodkit_ingest_hold_timeouts",
            "Held GETs answered 404 when the hold passed",
            s.hold_timeouts,
        )?;
        counter(
            e,
            "vodkit_ingest_expired",
            "Segments evicted by the window or the byte cap, and objects of expired streams",
            s.expired,
        )?;
        gauge(
            e,
            "vodkit_ingest_streams",
            "Live streams held",
            s.streams as f64,
        )?;
        gauge(
            e,
            "vodkit_ingest_objects",
            "Live objects held",
            s.objects as f64,
        )?;
        gauge(
            e,
            "vodkit_ingest_bytes",
            "Bytes of live objects held",
            s.bytes as f64,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> LiveStore {
        let mut c = IngestConfig::new("live", "s3cret");
        c.window = 3;
        c.max_bytes = 1000;
        c.ttl = Duration::from_secs(10);
        LiveStore::new(c)
    }

    #[test]
    fn prefix_is_normalized_and_paths_are_covered() {
        let s = store();
        assert_eq!(s.config.prefix, "/live/");
        assert!(s.covers("/live/stream-0/seg-1.m4s"));
        assert!(!s.covers("/lives/x"));
        assert!(!s.covers("/live/../etc/passwd"));
    }

    #[test]
    fn tokens_are_checked() {
        let s = store();
        assert_eq!(s.authorize(None), Err(AuthError::Missing));
        assert_eq!(s.authorize(Some("Basic abc")), Err(AuthError::Missing));
        assert_eq!(s.authorize(Some("Bearer")), Err(AuthError::Missing));
        assert_eq!(s.authorize(Some("Bearer s3cre")), Err(AuthError::Wrong));
        assert_eq!(s.authorize(Some("Bearer s3cret!")), Err(AuthError::Wrong));
        assert_eq!(s.authorize(Some("bearer  s3cret ")), Ok(()));
        assert_eq!(AuthError::Missing.status(), 401);
        assert_eq!(AuthError::Wrong.status(), 403);
    }

    #[test]
    fn the_window_and_the_byte_cap_bound_the_store() {
        let s = store();
        let t = Instant::now();
        assert_eq!(s.put("/live/a/index.m3u8", vec![0; 10], t), 201);
        assert_eq!(s.put("/live/a/index.m3u8", vec![0; 20], t), 204);
        for n in 0..10 {
            assert_eq!(s.put(&format!("/live/a/seg-{n}.m4s"), vec![1; 50], t), 201);
        }
        // Three segments and the playlist.
        assert_eq!(s.level(), (4, 170));
        assert!(matches!(s.get("/live/a/seg-9.m4s", t), Lookup::Found(_)));
        // A segment that left the window is not coming back: not held. The next one is.
        assert!(matches!(
            s.get("/live/a/seg-6.m4s", t),
            Lookup::Missing { hold: false }
        ));
        assert!(matches!(
            s.get("/live/a/seg-10.m4s", t),
            Lookup::Missing { hold: true }
        ));
        assert_eq!(segment_number("seg-41.m4s"), Some(41));
        assert_eq!(segment_number("chunk7"), Some(7));
        assert_eq!(segment_number("init.mp4"), None);
        // The byte cap evicts the oldest segments of any stream.
        for n in 0..3 {
            s.put(&format!("/live/b/seg-{n}.m4s"), vec![2; 300], t);
        }
        let (_, bytes) = s.level();
        assert!(bytes <= 1000, "{bytes}");
        assert!(matches!(s.get("/live/b/seg-2.m4s", t), Lookup::Found(_)));
        assert!(matches!(
            s.get("/live/a/seg-7.m4s", t),
            Lookup::Missing { .. }
        ));
        assert_eq!(s.delete("/live/b/seg-2.m4s", t), 204);
        assert_eq!(s.delete("/live/b/seg-2.m4s", t), 404);
    }

    #[test]
    fn the_init_segment_outlives_the_window() {
        // A viewer joining a stream long after it started still needs its init segment
        // (session 18: without this, every viewer joining a live stream more than a window
        // after its start got 404 for `init.mp4` and failed).
        let s = store();
        let t = Instant::now();
        assert_eq!(s.put("/live/a/init.mp4", vec![9; 40], t), 201);
        for n in 0..20 {
            s.put(&format!("/live/a/seg-{n}.m4s"), vec![1; 50], t);
        }
        assert!(matches!(s.get("/live/a/init.mp4", t), Lookup::Found(_)));
        assert!(matches!(
            s.get("/live/a/seg-5.m4s", t),
            Lookup::Missing { hold: false }
        ));
        // Re-publishing it replaces it in place.
        assert_eq!(s.put("/live/a/init.mp4", vec![8; 40], t), 204);
        assert!(is_init("init-stream0.m4s") && is_init("audio_init.mp4"));
        assert!(!is_init("seg-41.m4s") && !is_init("index.m3u8"));
    }

    #[test]
    fn quiet_streams_expire_and_unknown_ones_are_not_held() {
        let s = store();
        let t = Instant::now();
        s.put("/live/a/seg-0.m4s", vec![0; 5], t);
        assert!(matches!(
            s.get("/live/zzz/seg-0.m4s", t),
            Lookup::Missing { hold: false }
        ));
        assert!(matches!(
            s.get("/live/a/index.m3u8", t),
            Lookup::Missing { hold: false }
        ));
        let later = t + Duration::from_secs(11);
        assert!(matches!(
            s.get("/live/a/seg-0.m4s", later),
            Lookup::Missing { hold: false }
        ));
        assert_eq!(s.level(), (0, 0));
        assert_eq!(s.streams(), 0);
    }

    #[tokio::test]
    async fn a_held_request_gets_the_segment_when_it_is_written() {
        let s = Arc::new(store());
        s.put("/live/a/seg-0.m4s", vec![0; 5], Instant::now());
        let s2 = s.clone();
        let waiter = tokio::spawn(async move {
            s2.wait_for("/live/a/seg-1.m4s", Instant::now() + Duration::from_secs(5))
                .await
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        s.put("/live/a/seg-1.m4s", vec![7; 9], Instant::now());
        let got = waiter.await.unwrap().expect("written while held");
        assert_eq!(got.bytes.len(), 9);
        // Nothing comes: None at the deadline.
        let none = s
            .wait_for(
                "/live/a/seg-9.m4s",
                Instant::now() + Duration::from_millis(100),
            )
            .await;
        assert!(none.is_none());
    }
}
