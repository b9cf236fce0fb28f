//! Live origin (`vodkit serve --ingest PREFIX --ingest-token T`): a live source publishes
//! segments and playlists by `PUT` (and removes them by `DELETE`) under the prefix; the
//! server keeps each stream's live window in memory and serves it. Segments are held in
//! anonymous memory files (`memfd`) so that every viewer's copy goes out with `sendfile`
//! (no copy from the heap per viewer); playlists and other small objects stay on the heap.
//!
//! A *stream* is an object's parent directory (`/live/stream-3/`). Playlists (`.m3u8`,
//! `.mpd`) are replaced in place, and so are initialization segments (a name with `init`
//! in it, e.g. `init.mp4`), which every viewer joining later still needs; every other
//! object is a media segment. Each stream keeps at
//! most `window` media segments (oldest evicted first) and `max_objects` names, the store at
//! most `max_streams` streams, and everything held in memory, bodies still being uploaded
//! included, at most `max_bytes` (globally oldest segments evicted first; a `PUT` that would
//! only fit by evicting playlists or init segments is refused with 507). A stream that
//! received no `PUT` for `ttl` is dropped whole. With a spill directory (`--ingest-spill DIR`), the
//! byte cap does not drop segments still in a window: the oldest are written to unlinked
//! files in `DIR` and served from there (through the page cache, as a disk-backed origin
//! serves its segments), up to `spill.max_bytes` on disk; only past that, or while the
//! disk lags more than `spill_slack` behind, are segments dropped. A `GET` for a segment that is not there yet, in a
//! stream that exists, is *held* until the segment's `PUT` completes (as low-latency
//! origins do) or `hold` passes, then answered 404; playlists are never held, nor segments
//! numbered at or before the newest one written (they left the window or were skipped).
//!
//!
//! Low latency (LL-HLS, low-latency DASH): *parts* (`seg-41.3.m4s`, part 3 of segment 41)
//! belong to their segment: they do not count against the window, leave with their segment
//! (or [`PART_AGE`] target durations after they were published), count in the byte cap as
//! segments do, and a `GET` of a part that may still come is held like one of a segment. A
//! segment `PUT` with chunked encoding is a [`Growing`] object from its first byte: viewers
//! read it as it arrives, and when the upload ends it becomes a stored object like any
//! other. A playlist request with `_HLS_msn`/`_HLS_part` is held until the stored playlist
//! holds that segment or part ([`PlaylistInfo`], [`BlockQuery`]); `_HLS_skip` answers a
//! delta update ([`skip_segments`]).
//!
//! The token is compared in constant time (`subtle`). This module is the store and the
//! rules; the live-ingest handler (`handler/ingest.rs`) reads bodies and writes answers.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
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
    /// Bytes kept in memory over all streams: every stored object and every body being
    /// uploaded.
    pub max_bytes: u64,
    /// Names (segments, playlists, init segments) one stream may hold.
    pub max_objects: usize,
    /// Streams held at once.
    pub max_streams: usize,
    /// Longest a `PUT`'s body may take to arrive, whole (408 past it).
    pub body_timeout: Duration,
    /// `max-age` of live playlists; `None`: half the target segment duration the playlist
    /// announces (`#EXT-X-TARGETDURATION`, or an MPD's `maxSegmentDuration`), 1 s if none.
    pub playlist_max_age: Option<Duration>,
    /// Largest object accepted (`413` above).
    pub max_object: u64,
    /// A stream without a `PUT` for this long is dropped.
    pub ttl: Duration,
    /// Longest a `GET` waits for a segment not published yet.
    pub hold: Duration,
    /// Where segments go when `max_bytes` is reached, instead of being dropped.
    pub spill: Option<SpillConfig>,
    /// Longest a blocking playlist reload (`_HLS_msn`) is held before `503`; `None`: three
    /// times the target duration the playlist announces ([`IngestConfig::hold`] if none).
    pub block_timeout: Option<Duration>,
}

/// The live window's overflow on disk (`--ingest-spill DIR`, `--ingest-spill-max SIZE`).
#[derive(Debug, Clone, PartialEq)]
pub struct SpillConfig {
    /// A writable directory; the files are unlinked as soon as they are written.
    pub dir: PathBuf,
    /// Bytes kept on disk over all streams (the oldest spilled segments go first).
    pub max_bytes: u64,
}

impl SpillConfig {
    /// Check that `dir` is a directory we can create files in (a one-line error if not).
    pub fn check(&self) -> Result<(), String> {
        let probe = self
            .dir
            .join(format!(".vodkit-spill-probe-{}", std::process::id()));
        std::fs::File::create(&probe)
            .and_then(|_| std::fs::remove_file(&probe))
            .map_err(|e| {
                format!(
                    "{}: cannot write live segments there ({e}); expected a writable directory",
                    self.dir.display()
                )
            })
    }
}

impl IngestConfig {
    /// Defaults for `prefix` and `token`: 30 segments and 256 names per stream, 1024
    /// streams, 512 MiB in all, objects up to 64 MiB arriving within 60 s, streams dropped
    /// after 60 s without a `PUT`, requests held up to 6 s.
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
            max_objects: 256,
            max_streams: 1024,
            body_timeout: Duration::from_secs(60),
            playlist_max_age: None,
            ttl: Duration::from_secs(60),
            hold: Duration::from_secs(6),
            spill: None,
            block_timeout: None,
        }
    }

    /// Live objects' share of a memory `limit` the server runs under, when the operator did
    /// not size them: at most a quarter of it (and never more than configured), so segments
    /// held for live viewers cannot push the process past its limit; past it they spill or
    /// go, as at any `max_bytes`.
    pub fn fit_to_limit(&mut self, limit: u64) {
        self.max_bytes = self.max_bytes.min(limit / 4);
    }

    /// Bytes of segments that may wait in memory to be written to the spill directory
    /// (beyond `max_bytes`): a quarter of the cap, at least 32 MiB. Past it the disk is not
    /// keeping up, and the oldest segments are dropped as without a spill directory.
    pub fn spill_slack(&self) -> u64 {
        (self.max_bytes / 4).max(32 << 20)
    }
}

/// A segment's bytes in a file, sent to viewers with `sendfile` (no copy per viewer): an
/// anonymous memory file (`memfd`, [`LiveBody::Mapped`]) or an unlinked file in the spill
/// directory ([`LiveBody::Spilled`]). Its blocks are freed when the last holder, the store or
/// a `GET` still sending it, drops it.
#[derive(Debug, Clone)]
pub struct BodyFile {
    pub file: Arc<std::fs::File>,
    pub len: u64,
}

/// Objects at least this large are kept in a memory file and sent with `sendfile`; smaller
/// ones (playlists, init segments) stay on the heap and go out in the same `send` as the
/// response head, which costs less than a second call.
pub const MAPPED_MIN: u64 = 16 << 10;

/// Where an object's bytes are.
#[derive(Debug, Clone)]
pub enum LiveBody {
    /// On the heap (objects under [`MAPPED_MIN`], or past the store's file budget).
    Memory(Arc<Vec<u8>>),
    /// In memory, in a `memfd`.
    Mapped(BodyFile),
    /// On disk, in the spill directory (through the page cache).
    Spilled(BodyFile),
}

impl LiveBody {
    pub fn len(&self) -> u64 {
        match self {
            LiveBody::Memory(b) => b.len() as u64,
            LiveBody::Mapped(f) | LiveBody::Spilled(f) => f.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the bytes count against the store's memory cap (not spilled).
    pub fn in_memory(&self) -> bool {
        !matches!(self, LiveBody::Spilled(_))
    }

    /// The bytes (read back from the file for a mapped or spilled object: blocking, call
    /// it off the async workers).
    pub fn read(&self) -> std::io::Result<Arc<Vec<u8>>> {
        use std::os::unix::fs::FileExt;
        match self {
            LiveBody::Memory(b) => Ok(b.clone()),
            LiveBody::Mapped(f) | LiveBody::Spilled(f) => {
                let mut v = vec![0u8; f.len as usize];
                f.file.read_exact_at(&mut v, 0)?;
                Ok(Arc::new(v))
            }
        }
    }

    /// Write the bytes to `out` (blocking), in pieces for a file-backed object.
    fn copy_to(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        match self {
            LiveBody::Memory(b) => out.write_all(b),
            LiveBody::Mapped(f) | LiveBody::Spilled(f) => {
                let mut piece = vec![0u8; (f.len as usize).min(1 << 20)];
                let mut at = 0u64;
                while at < f.len {
                    let n = ((f.len - at) as usize).min(piece.len());
                    f.file.read_exact_at(&mut piece[..n], at)?;
                    out.write_all(&piece[..n])?;
                    at += n as u64;
                }
                Ok(())
            }
        }
    }
}

/// A new anonymous memory file (`memfd_create`) holding `pieces`, one after the other.
fn memory_file(pieces: &[&[u8]]) -> std::io::Result<std::fs::File> {
    use std::io::Write;
    use std::os::fd::FromRawFd;
    // SAFETY: the name is a NUL-terminated literal; the call has no other inputs.
    let fd = unsafe { libc::memfd_create(c"vodkit-live".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created above and is owned by nothing else.
    let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
    for piece in pieces {
        f.write_all(piece)?;
    }
    Ok(f)
}

/// How many objects the store keeps in memory files: a quarter of the descriptor limit
/// (the rest is for connections), at least 64; objects past it stay on the heap.
fn file_budget() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit.
    let cur = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        1024
    };
    (cur / 4).max(64)
}

/// One stored object.
#[derive(Debug, Clone)]
pub struct Object {
    pub body: LiveBody,
    pub modified: SystemTime,
    /// Strong validator: the store's sequence number when it was written.
    pub etag: String,
    /// A playlist or init segment: never evicted to make room, only replaced or deleted.
    pub kept: bool,
    /// Its `Cache-Control` value.
    pub cache_control: Arc<str>,
    /// What an HLS media playlist lists (`None` for every other object).
    pub info: Option<PlaylistInfo>,
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

/// `Cache-Control` of a live object: a segment never changes once written; a playlist
/// changes every segment, so caches keep it `max_age` (by default about half a segment:
/// [`playlist_max_age`]).
pub fn cache_control(name: &str, body: &[u8], max_age: Option<Duration>) -> String {
    if is_playlist(name) {
        let age = max_age.unwrap_or_else(|| playlist_max_age(body));
        format!("max-age={}", age.as_secs())
    } else {
        "max-age=86400, immutable".into()
    }
}

/// Half the target segment duration a playlist announces (`#EXT-X-TARGETDURATION:6` → 3 s;
/// an MPD's `maxSegmentDuration="PT2S"` → 1 s), in whole seconds, at least 1 (also when it
/// announces none): what low-latency origins give a live playlist, so a cache in front asks
/// again about twice a segment.
pub fn playlist_max_age(body: &[u8]) -> Duration {
    let text = String::from_utf8_lossy(&body[..body.len().min(64 << 10)]);
    let target = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("#EXT-X-TARGETDURATION:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .or_else(|| {
            let (_, rest) = text.split_once("maxSegmentDuration=\"")?;
            iso_seconds(rest.split('"').next()?)
        });
    let half = target
        .filter(|t| t.is_finite() && *t > 0.0)
        .map_or(0.0, |t| t / 2.0);
    Duration::from_secs((half as u64).max(1))
}

/// Whether a manifest describes a live stream: an HLS media playlist without
/// `#EXT-X-ENDLIST` (and not of type VOD), or an MPD of `type="dynamic"`.
pub fn is_live_manifest(text: &[u8]) -> bool {
    let has = |needle: &[u8]| text.windows(needle.len()).any(|w| w == needle);
    if has(b"<MPD") {
        return has(b"type=\"dynamic\"");
    }
    has(b"#EXT-X-TARGETDURATION") && !has(b"#EXT-X-ENDLIST") && !has(b"#EXT-X-PLAYLIST-TYPE:VOD")
}

/// Seconds of an ISO 8601 duration as MPDs write them (`PT2S`, `PT1M0.5S`, `PT1H`).
fn iso_seconds(text: &str) -> Option<f64> {
    let mut rest = text.strip_prefix("PT")?;
    let mut total = 0.0;
    while !rest.is_empty() {
        let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let n: f64 = rest[..end].parse().ok()?;
        total += n * match rest.as_bytes()[end] {
            b'H' => 3600.0,
            b'M' => 60.0,
            b'S' => 1.0,
            _ => return None,
        };
        rest = &rest[end + 1..];
    }
    Some(total)
}

/// Parts older than this many target durations (of their stream's playlist) leave the
/// store even while their segment stays: a part is listed in an LL-HLS playlist while its
/// segment starts within the last three target durations, at most about four after the
/// part was published.
pub const PART_AGE: u32 = 4;

/// `(segment name, segment number, part index)` of a part's name: `seg-41.3.m4s` is part 3
/// of `seg-41.m4s`. `None` for any other name.
pub fn part_of(name: &str) -> Option<(String, u64, u64)> {
    let (stem, ext) = name.rsplit_once('.')?;
    let (segment, part) = stem.rsplit_once('.')?;
    if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let number = segment_number(segment)?;
    Some((format!("{segment}.{ext}"), number, part.parse().ok()?))
}

/// What the origin needs to know of a stored HLS media playlist to answer blocking reloads:
/// which segments are complete and which parts of the next one are listed.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PlaylistInfo {
    /// `#EXT-X-MEDIA-SEQUENCE` (0 when absent).
    pub first: u64,
    /// Complete segments listed (each with its `#EXTINF` and URI), skipped ones included.
    pub segments: u64,
    /// `#EXT-X-PART` lines after the last complete segment: parts of segment
    /// `first + segments`, the one in progress.
    pub parts: u64,
    /// `#EXT-X-TARGETDURATION`, seconds.
    pub target: Option<f64>,
    /// `CAN-SKIP-UNTIL` of `#EXT-X-SERVER-CONTROL`, seconds.
    pub can_skip_until: Option<f64>,
    /// `#EXT-X-ENDLIST`: nothing more will come.
    pub ended: bool,
}

impl PlaylistInfo {
    /// Read a media playlist; `None` for anything else (no `#EXT-X-TARGETDURATION`: a
    /// multivariant playlist, an MPD, not text).
    pub fn parse(body: &[u8]) -> Option<PlaylistInfo> {
        let text = std::str::from_utf8(body).ok()?;
        let mut info = PlaylistInfo::default();
        let mut has_target = false;
        for line in text.lines().map(str::trim) {
            if let Some(v) = line.strip_prefix("#EXT-X-TARGETDURATION:") {
                has_target = true;
                info.target = v.trim().parse().ok();
            } else if let Some(v) = line.strip_prefix("#EXT-X-MEDIA-SEQUENCE:") {
                info.first = v.trim().parse().unwrap_or(0);
            } else if let Some(v) = line.strip_prefix("#EXT-X-SERVER-CONTROL:") {
                info.can_skip_until = attribute(v, "CAN-SKIP-UNTIL").and_then(|v| v.parse().ok());
            } else if let Some(v) = line.strip_prefix("#EXT-X-SKIP:") {
                info.segments += attribute(v, "SKIPPED-SEGMENTS")
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            } else if line.starts_with("#EXT-X-PART:") {
                info.parts += 1;
            } else if line == "#EXT-X-ENDLIST" {
                info.ended = true;
            } else if !line.is_empty() && !line.starts_with('#') {
                info.segments += 1;
                info.parts = 0;
            }
        }
        has_target.then_some(info)
    }

    /// The number of the newest complete segment listed (`None` when there is none).
    pub fn newest(&self) -> Option<u64> {
        (self.first + self.segments).checked_sub(1)
    }

    /// Whether the playlist holds segment `msn` complete, or with `part`, part `part` of
    /// segment `msn` (or anything later).
    pub fn contains(&self, msn: u64, part: Option<u64>) -> bool {
        if self.newest().is_some_and(|n| n >= msn) {
            return true;
        }
        let in_progress = self.first + self.segments;
        part.is_some_and(|p| in_progress == msn && self.parts > p)
    }

    /// `max-age` of an answer to a blocking reload (it never changes for its query): six
    /// target durations, 6 s when none is announced.
    pub fn blocking_max_age(&self) -> Duration {
        let target = self
            .target
            .filter(|t| t.is_finite() && *t > 0.0)
            .unwrap_or(1.0);
        Duration::from_secs_f64(6.0 * target)
    }
}

/// The value of attribute `name` in an HLS attribute list (`A=1,B="x"`), quotes removed.
fn attribute<'a>(list: &'a str, name: &str) -> Option<&'a str> {
    let mut rest = list;
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let (value, next) = match after.strip_prefix('"') {
            Some(quoted) => {
                let end = quoted.find('"')?;
                let next = quoted[end + 1..].trim_start_matches(',');
                (&quoted[..end], next)
            }
            None => after.split_once(',').unwrap_or((after, "")),
        };
        if key.trim() == name {
            return Some(value.trim());
        }
        rest = next;
    }
    None
}

/// The LL-HLS delivery directives of a playlist request's query (`_HLS_msn`, `_HLS_part`,
/// `_HLS_skip`); other parameters are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockQuery {
    pub msn: Option<u64>,
    pub part: Option<u64>,
    /// `_HLS_skip=YES` or `v2`: answer a delta update.
    pub skip: bool,
}

impl BlockQuery {
    /// The directives of `query` (what follows `?`): `Ok(None)` without any; a one-line
    /// error (answered `400`) for a value that is not a number, `YES` or `v2`, or
    /// `_HLS_part` without `_HLS_msn`.
    pub fn parse(query: &str) -> Result<Option<BlockQuery>, String> {
        let mut q = BlockQuery::default();
        let mut any = false;
        for pair in query.split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let number = |v: &str| {
                v.parse::<u64>()
                    .map_err(|_| format!("{key}={v}: expected a whole number"))
            };
            match key {
                "_HLS_msn" => q.msn = Some(number(value)?),
                "_HLS_part" => q.part = Some(number(value)?),
                "_HLS_skip" => match value {
                    "YES" | "v2" => q.skip = true,
                    v => return Err(format!("_HLS_skip={v}: expected YES or v2")),
                },
                _ => continue,
            }
            any = true;
        }
        if q.part.is_some() && q.msn.is_none() {
            return Err("_HLS_part without _HLS_msn".into());
        }
        Ok(any.then_some(q))
    }
}

/// What to do with a blocking playlist reload, given the stored playlist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Block {
    /// Answer with the playlist now.
    Now,
    /// Hold the request until a newer playlist holds what it asks for.
    Wait,
    /// Refuse it (`400`), with the reason.
    Refuse(String),
}

/// The decision for `q` against `info`: a request for a segment more than two past the
/// newest complete one is refused, one for what the playlist holds (or for a playlist that
/// ended) is answered now, any other is held.
pub fn block_decision(info: &PlaylistInfo, q: &BlockQuery) -> Block {
    let Some(msn) = q.msn else {
        return Block::Now;
    };
    let limit = info.first + info.segments + 1;
    if msn > limit {
        return Block::Refuse(format!(
            "_HLS_msn={msn}: the playlist's newest segment is {}; at most {limit} may be asked for",
            limit - 2
        ));
    }
    if info.ended || info.contains(msn, q.part) {
        Block::Now
    } else {
        Block::Wait
    }
}

/// Whether an HLS line is a media-segment tag or a URI: where the playlist's header ends.
fn is_segment_line(line: &str) -> bool {
    (!line.is_empty() && !line.starts_with('#'))
        || [
            "#EXTINF",
            "#EXT-X-PROGRAM-DATE-TIME",
            "#EXT-X-PART:",
            "#EXT-X-DISCONTINUITY",
            "#EXT-X-BYTERANGE",
            "#EXT-X-GAP",
            "#EXT-X-BITRATE",
            "#EXT-X-PRELOAD-HINT",
            "#EXT-X-RENDITION-REPORT",
            "#EXT-X-ENDLIST",
        ]
        .iter()
        .any(|t| line.starts_with(t))
}

/// The delta update of an LL-HLS media playlist (`_HLS_skip=YES`): the segments that start
/// more than its `CAN-SKIP-UNTIL` seconds before the playlist's end (the end of its last
/// complete segment plus the parts listed after it) are replaced by one
/// `#EXT-X-SKIP:SKIPPED-SEGMENTS=n` line, their tags (`#EXT-X-PROGRAM-DATE-TIME`,
/// `#EXTINF`, `#EXT-X-PART`, ...) dropped with them; `#EXT-X-MEDIA-SEQUENCE` and the
/// header are unchanged. `None` when there is nothing to skip or the playlist allows no
/// skipping.
pub fn skip_segments(text: &str) -> Option<String> {
    let info = PlaylistInfo::parse(text.as_bytes())?;
    let until = info.can_skip_until.filter(|u| u.is_finite() && *u > 0.0)?;
    let lines: Vec<&str> = text.lines().collect();
    let header = lines
        .iter()
        .position(|l| is_segment_line(l.trim()))
        .unwrap_or(lines.len());
    // Each complete segment: (its first line, its duration); the rest is the tail.
    let mut segments: Vec<(usize, f64)> = Vec::new();
    let mut start = header;
    let mut duration = 0.0;
    let mut tail = 0.0;
    for (i, line) in lines.iter().enumerate().skip(header) {
        let line = line.trim();
        if let Some(v) = line.strip_prefix("#EXTINF:") {
            duration = v
                .split(',')
                .next()
                .and_then(|d| d.trim().parse().ok())
                .unwrap_or(0.0);
        } else if let Some(v) = line.strip_prefix("#EXT-X-PART:") {
            tail += attribute(v, "DURATION")
                .and_then(|d| d.parse::<f64>().ok())
                .unwrap_or(0.0);
        } else if !line.is_empty() && !line.starts_with('#') {
            segments.push((start, duration));
            start = i + 1;
            duration = 0.0;
            tail = 0.0;
        }
    }
    let total: f64 = segments.iter().map(|s| s.1).sum::<f64>() + tail;
    let mut at = 0.0;
    let mut skipped = 0;
    for (_, d) in &segments {
        if total - at <= until {
            break;
        }
        at += d;
        skipped += 1;
    }
    if skipped == 0 {
        return None;
    }
    let resume = segments.get(skipped).map_or(start, |s| s.0);
    let mut out = String::with_capacity(text.len());
    for line in &lines[..header] {
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(&format!("#EXT-X-SKIP:SKIPPED-SEGMENTS={skipped}\n"));
    for line in &lines[resume..] {
        out.push_str(line);
        out.push('\n');
    }
    Some(out)
}

/// What a reader of a [`Growing`] object gets next.
#[derive(Debug)]
pub enum Grown {
    /// Bytes that arrived since the last call.
    Data(Vec<bytes::Bytes>),
    /// The upload ended whole: nothing more comes.
    Complete,
    /// The upload failed or was cut: the object is not whole.
    Failed,
}

/// A segment's bytes received so far, its end once known.
#[derive(Debug, Default)]
struct GrowState {
    chunks: Vec<bytes::Bytes>,
    len: u64,
    /// `Some(true)`: complete; `Some(false)`: cut.
    end: Option<bool>,
}

/// A segment being uploaded with chunked encoding, readable by viewers while it arrives
/// ([`Growing::reader`]). The uploader appends (every reader is woken), and ends it whole
/// once the store holds the complete object, or cut. Its bytes count in the memory cap as
/// the upload's body in flight; readers still sending them keep them until they are done.
#[derive(Debug)]
pub struct Growing {
    state: tokio::sync::watch::Sender<GrowState>,
}

impl Growing {
    fn new() -> Growing {
        Growing {
            state: tokio::sync::watch::Sender::new(GrowState::default()),
        }
    }

    /// A reader from the first byte.
    pub fn reader(&self) -> GrowReader {
        GrowReader {
            rx: self.state.subscribe(),
            next: 0,
        }
    }

    /// Bytes received so far.
    pub fn len(&self) -> u64 {
        self.state.borrow().len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn append(&self, bytes: bytes::Bytes) {
        if bytes.is_empty() {
            return;
        }
        self.state.send_modify(|s| {
            s.len += bytes.len() as u64;
            s.chunks.push(bytes);
        });
    }

    fn end(&self, whole: bool) {
        self.state.send_modify(|s| {
            s.end.get_or_insert(whole);
        });
    }
}

/// One viewer's place in a [`Growing`] object.
#[derive(Debug)]
pub struct GrowReader {
    rx: tokio::sync::watch::Receiver<GrowState>,
    /// The next chunk to hand out.
    next: usize,
}

impl GrowReader {
    /// Wait for bytes not handed out yet, or the end.
    pub async fn next(&mut self) -> Grown {
        loop {
            {
                let s = self.rx.borrow_and_update();
                if self.next < s.chunks.len() {
                    let data = s.chunks[self.next..].to_vec();
                    self.next = s.chunks.len();
                    return Grown::Data(data);
                }
                match s.end {
                    Some(true) => return Grown::Complete,
                    Some(false) => return Grown::Failed,
                    None => {}
                }
            }
            if self.rx.changed().await.is_err() {
                return Grown::Failed;
            }
        }
    }
}

/// The uploader's handle on a [`Growing`] object it is receiving: bytes are appended as
/// they are decoded; [`LiveStore::put_growing`] stores it complete. Dropped before that
/// (the body failed, the connection was cut), the object ends cut and leaves the store.
#[derive(Debug)]
pub struct GrowingUpload<'a> {
    store: &'a LiveStore,
    path: String,
    growing: Arc<Growing>,
    stored: bool,
}

impl GrowingUpload<'_> {
    /// Make `bytes` readable by the object's viewers.
    pub fn append(&self, bytes: bytes::Bytes) {
        self.growing.append(bytes);
    }
}

impl Drop for GrowingUpload<'_> {
    fn drop(&mut self) {
        if !self.stored {
            self.growing.end(false);
            self.store.forget_growing(&self.path, &self.growing);
        }
    }
}

/// Why a `PUT` was refused for room (`507 Insufficient Storage`), with the limit that
/// refused it, sent as the response's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: u16,
    pub reason: String,
}

impl Refused {
    fn full(reason: String) -> Refused {
        Refused {
            status: 507,
            reason,
        }
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
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
    /// Being uploaded with chunked encoding: readable as it arrives.
    Growing(Arc<Growing>),
    /// Not there; `hold` when it is a segment of a stream that exists (it may come).
    Missing {
        hold: bool,
    },
}

impl Lookup {
    /// The stored object found, if any.
    pub fn object(self) -> Option<Object> {
        match self {
            Lookup::Found(o) => Some(o),
            _ => None,
        }
    }
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
    /// Blocking playlist reloads held (`_HLS_msn`), and those answered `503` at their
    /// timeout.
    #[serde(default)]
    pub blocked: u64,
    #[serde(default)]
    pub block_timeouts: u64,
    /// `GET`s answered from a segment still being uploaded.
    #[serde(default)]
    pub growing_reads: u64,
    /// Segments evicted by the window or the byte cap, and objects of expired streams.
    pub expired: u64,
    /// Segments written to the spill directory, and writes that failed there.
    #[serde(default)]
    pub spilled: u64,
    #[serde(default)]
    pub spill_errors: u64,
    /// Streams, objects and bytes held now (`bytes` in memory, `spilled_bytes` on disk).
    pub streams: u64,
    pub objects: u64,
    pub bytes: u64,
    #[serde(default)]
    pub spilled_bytes: u64,
    /// Bytes of `PUT` bodies received and not stored yet (counted in the memory cap).
    #[serde(default)]
    pub in_flight_bytes: u64,
}

/// Counters of the live origin (in `/stats`).
#[derive(Debug, Default)]
pub struct IngestCounters {
    pub puts: AtomicU64,
    pub put_bytes: AtomicU64,
    pub deletes: AtomicU64,
    /// PUT/DELETE refused: no or wrong token, object too large, no room, bad path.
    pub rejected: AtomicU64,
    pub held: AtomicU64,
    pub hold_timeouts: AtomicU64,
    pub blocked: AtomicU64,
    pub block_timeouts: AtomicU64,
    pub growing_reads: AtomicU64,
    /// Segments evicted by the window or the byte cap, and objects of expired streams.
    pub expired: AtomicU64,
    /// Segments written to the spill directory.
    pub spilled: AtomicU64,
    /// Spill writes that failed (the segment was dropped instead).
    pub spill_errors: AtomicU64,
}

#[derive(Debug, Default)]
struct StreamState {
    objects: HashMap<String, Object>,
    /// Segment names in the order they were written (parts not included).
    segments: VecDeque<String>,
    /// Parts in the order they were written: (part name, its segment's name, when).
    parts: VecDeque<(String, String, Instant)>,
    /// The highest (segment, part) numbers of a part written.
    newest_part: Option<(u64, u64)>,
    /// Segments being uploaded with chunked encoding, by name.
    growing: HashMap<String, Arc<Growing>>,
    /// The target duration its HLS playlist announces (for the age of parts).
    target: Option<Duration>,
    last_put: Option<Instant>,
    /// `GET`s held for an object not written yet, by its name: the object's `PUT` wakes
    /// only them (thousands of viewers of other streams, or of the same stream's playlist,
    /// stay asleep).
    waiters: HashMap<String, Arc<tokio::sync::Notify>>,
}

impl StreamState {
    /// Whether segment `name` may still be published: it numbers after the newest segment
    /// written (`seg-41.m4s` after `seg-40.m4s`), or the names carry no numbers to compare.
    /// A segment that already left the window is not coming back, so a viewer that fell
    /// behind gets its 404 at once instead of after the hold.
    ///
    /// A part may come while its segment is not complete and it numbers after the newest
    /// part written.
    fn may_come(&self, name: &str) -> bool {
        let newest = self.segments.back().and_then(|n| segment_number(n));
        if let Some((_, segment, part)) = part_of(name) {
            return newest.is_none_or(|n| segment > n)
                && self.newest_part.is_none_or(|p| (segment, part) > p);
        }
        match (segment_number(name), newest) {
            (Some(wanted), Some(newest)) => wanted > newest,
            _ => true,
        }
    }

    /// Remove the parts of segment `segment` (by name), returning them.
    fn drop_parts_of(&mut self, segment: &str) -> Vec<Object> {
        let mut gone = Vec::new();
        let objects = &mut self.objects;
        self.parts.retain(|(part, of, _)| {
            if of != segment {
                return true;
            }
            gone.extend(objects.remove(part));
            false
        });
        gone
    }

    /// Remove the oldest segment (with its parts), or the oldest part when there is no
    /// segment; `false` when there is neither.
    fn drop_oldest(&mut self, gone: &mut Vec<Object>) -> bool {
        if let Some(oldest) = self.segments.pop_front() {
            gone.extend(self.objects.remove(&oldest));
            gone.extend(self.drop_parts_of(&oldest));
            return true;
        }
        match self.parts.pop_front() {
            Some((part, _, _)) => {
                gone.extend(self.objects.remove(&part));
                true
            }
            None => false,
        }
    }

    /// Remove `name` from the lists of segments and parts (its object already gone),
    /// returning the parts that leave with it when it is a segment.
    fn unlist(&mut self, name: &str) -> Vec<Object> {
        if part_of(name).is_some() {
            self.parts.retain(|(n, _, _)| n != name);
            return Vec::new();
        }
        self.segments.retain(|n| n != name);
        self.drop_parts_of(name)
    }
}

/// The number a segment name ends with before its extension (`seg-41.m4s` → 41).
fn segment_number(name: &str) -> Option<u64> {
    let stem = name.rsplit_once('.').map_or(name, |(stem, _)| stem);
    let digits = stem.len() - stem.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    stem[stem.len() - digits..].parse().ok()
}

/// `(stream directory, object name, etag)` of one segment version.
type Entry = (String, String, String);

#[derive(Debug, Default)]
struct Inner {
    streams: HashMap<String, StreamState>,
    /// Segments in memory and not picked for spilling, oldest first, for the byte cap
    /// (entries of segments already gone are skipped).
    order: VecDeque<Entry>,
    /// Segments spilled or picked for spilling, oldest first, for the spill cap.
    spilled_order: VecDeque<Entry>,
    /// Bytes of objects in memory (including those waiting to be spilled).
    bytes: u64,
    /// Bytes of those that are never evicted (playlists, init segments).
    kept_bytes: u64,
    /// Bytes of `PUT` bodies received and not stored yet ([`Upload`]).
    in_flight: u64,
    /// Bytes of objects on disk.
    spilled_bytes: u64,
    /// Objects picked for spilling and not written yet: etag → length.
    pending: HashMap<String, u64>,
    pending_bytes: u64,
    /// Spill writes to do (`spill_pending`).
    to_spill: Vec<(Entry, LiveBody)>,
    objects: u64,
    /// Objects held in memory files ([`LiveBody::Mapped`]).
    files: u64,
    seq: u64,
    /// When `expire_locked` looks at the streams next.
    next_expiry: Option<Instant>,
}

impl Inner {
    /// Account for an object leaving the store (evicted, deleted, replaced, expired).
    fn forget(&mut self, o: &Object) {
        self.objects -= 1;
        if let LiveBody::Mapped(_) = &o.body {
            self.files -= 1;
        }
        if o.body.in_memory() {
            self.bytes -= o.body.len();
            if o.kept {
                self.kept_bytes -= o.body.len();
            }
            if let Some(len) = self.pending.remove(&o.etag) {
                self.pending_bytes -= len;
            }
        } else {
            self.spilled_bytes -= o.body.len();
        }
    }

    /// Remove the segment of `entry` if it is still that version; whether it was.
    fn remove_entry(&mut self, (dir, name, etag): &Entry) -> bool {
        let Some(stream) = self.streams.get_mut(dir) else {
            return false;
        };
        if stream.objects.get(name).is_none_or(|o| o.etag != *etag) {
            return false;
        }
        let Some(o) = stream.objects.remove(name) else {
            return false;
        };
        let parts = stream.unlist(name);
        self.forget(&o);
        for p in &parts {
            self.forget(p);
        }
        true
    }
}

/// The object `entry` names, if it is still held in that version.
fn held<'a>(
    streams: &'a HashMap<String, StreamState>,
    (dir, name, etag): &Entry,
) -> Option<&'a Object> {
    streams
        .get(dir)
        .and_then(|s| s.objects.get(name))
        .filter(|o| o.etag == *etag)
}

/// The live windows of every stream, in memory (and on disk past the cap when spilling).
#[derive(Debug)]
pub struct LiveStore {
    pub config: IngestConfig,
    inner: Mutex<Inner>,
    pub counters: IngestCounters,
    /// Most objects kept in memory files ([`file_budget`]).
    max_files: u64,
}

/// Write `body` to a new file in `dir` and unlink it at once: the open handle keeps it.
fn write_spill_file(
    dir: &std::path::Path,
    etag: &str,
    body: &LiveBody,
) -> std::io::Result<std::fs::File> {
    let tag = etag.trim_matches('"');
    let path = dir.join(format!(".vodkit-{}-{tag}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    let written = body.copy_to(&mut f);
    std::fs::remove_file(&path)?;
    written?;
    Ok(f)
}

/// `(stream directory, object name)` of a path, e.g. `("/live/s3/", "seg-4.m4s")`.
fn split(path: &str) -> Option<(&str, &str)> {
    let i = path.rfind('/')?;
    let (dir, name) = path.split_at(i + 1);
    (!name.is_empty()).then_some((dir, name))
}

/// The bytes of one `PUT` body received so far, counted in the store's memory cap; they
/// stop counting when the body is stored ([`LiveStore::put_upload`]) or dropped.
#[derive(Debug)]
pub struct Upload<'a> {
    store: &'a LiveStore,
    bytes: u64,
    /// Bytes of the playlist or init segment it replaces (when it started).
    credit: u64,
}

impl Upload<'_> {
    /// Count `n` more bytes received. Segments are evicted (or spilled) to make room;
    /// refused when playlists, init segments and the bodies in flight leave none.
    pub fn grow(&mut self, n: u64) -> Result<(), Refused> {
        let store = self.store;
        let mut g = store.lock();
        let inner = &mut *g;
        let max = store.config.max_bytes;
        if inner.kept_bytes.saturating_sub(self.credit) + inner.in_flight + n > max {
            return Err(Refused::full(format!(
                "no room: playlists and init segments (never evicted) hold {} bytes and uploads in progress {} of the {max}-byte cap (--ingest-max-bytes)",
                inner.kept_bytes, inner.in_flight
            )));
        }
        inner.in_flight += n;
        self.bytes += n;
        store.cap_bytes(inner);
        Ok(())
    }

    /// Bytes counted so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Upload<'_> {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.store.lock().in_flight -= self.bytes;
        }
    }
}

impl LiveStore {
    pub fn new(config: IngestConfig) -> LiveStore {
        LiveStore {
            config,
            inner: Mutex::new(Inner::default()),
            counters: IngestCounters::default(),
            max_files: file_budget(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `path` (normalized: [`crate::target::normalized_path`]) is under the ingest
    /// prefix.
    pub fn covers(&self, path: &str) -> bool {
        path.starts_with(&self.config.prefix)
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
    /// file name; refused (507) when a limit leaves no room for it.
    pub fn put(&self, path: &str, bytes: Vec<u8>, now: Instant) -> Result<u16, Refused> {
        self.put_upload(path, bytes, self.upload(path), now)
    }

    /// [`LiveStore::put`] of a body received under `upload`: its bytes stop counting as in
    /// flight as they start counting as stored.
    pub fn put_upload(
        &self,
        path: &str,
        bytes: Vec<u8>,
        upload: Upload<'_>,
        now: Instant,
    ) -> Result<u16, Refused> {
        let Some((_, name)) = split(path) else {
            return Ok(400);
        };
        let cache = cache_control(name, &bytes, self.config.playlist_max_age);
        let info = name
            .ends_with(".m3u8")
            .then(|| PlaylistInfo::parse(&bytes))
            .flatten();
        let body = self.body_for(bytes);
        self.store(path, body, cache, info, upload, now)
    }

    /// A segment `PUT` with chunked encoding starts: from now on `GET`s of `path` read it
    /// as it arrives ([`Lookup::Growing`]), and requests held for it are woken. `None` for
    /// a playlist or init segment (stored when whole, as before), or when a new stream
    /// would pass `max_streams`.
    pub fn start_growing(&self, path: &str, now: Instant) -> Option<GrowingUpload<'_>> {
        let (dir, name) = split(path)?;
        if is_playlist(name) || is_init(name) {
            return None;
        }
        let growing = Arc::new(Growing::new());
        let waiting = {
            let mut g = self.lock();
            self.expire_locked(&mut g, now);
            if !g.streams.contains_key(dir) && g.streams.len() >= self.config.max_streams {
                return None;
            }
            let stream = g.streams.entry(dir.to_string()).or_default();
            stream.last_put = Some(now);
            stream.growing.insert(name.to_string(), growing.clone());
            stream.waiters.remove(name)
        };
        if let Some(n) = waiting {
            n.notify_waiters();
        }
        Some(GrowingUpload {
            store: self,
            path: path.to_string(),
            growing,
            stored: false,
        })
    }

    /// Store a growing object whose upload completed (its bytes counted under `upload`),
    /// then end it whole for its readers: they have every byte the store holds.
    pub fn put_growing(
        &self,
        path: &str,
        upload: Upload<'_>,
        mut growing: GrowingUpload<'_>,
        now: Instant,
    ) -> Result<u16, Refused> {
        let Some((_, name)) = split(path) else {
            return Ok(400);
        };
        let chunks = growing.growing.state.borrow().chunks.clone();
        let body = self.body_of_chunks(&chunks);
        drop(chunks);
        let cache = cache_control(name, &[], self.config.playlist_max_age);
        let stored = self.store(path, body, cache, None, upload, now);
        growing.stored = true;
        self.forget_growing(path, &growing.growing);
        growing.growing.end(true);
        stored
    }

    /// `growing` leaves the store's map of objects being uploaded (if it is still there).
    fn forget_growing(&self, path: &str, growing: &Arc<Growing>) {
        let Some((dir, name)) = split(path) else {
            return;
        };
        let mut g = self.lock();
        if let Some(s) = g.streams.get_mut(dir) {
            if s.growing.get(name).is_some_and(|x| Arc::ptr_eq(x, growing)) {
                s.growing.remove(name);
            }
        }
    }

    /// Store `body` at `path` (see [`LiveStore::put_upload`]).
    fn store(
        &self,
        path: &str,
        body: LiveBody,
        cache: String,
        info: Option<PlaylistInfo>,
        mut upload: Upload<'_>,
        now: Instant,
    ) -> Result<u16, Refused> {
        let Some((dir, name)) = split(path) else {
            return Ok(400);
        };
        let len = body.len();
        let evictable = !is_playlist(name) && !is_init(name);
        let part = part_of(name);
        let mut g = self.lock();
        self.expire_locked(&mut g, now);
        if let Err(e) = self.check_room(&g, dir, name, len, evictable, upload.bytes) {
            drop(g);
            self.counters.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(e);
        }
        g.seq += 1;
        if let LiveBody::Mapped(_) = &body {
            g.files += 1;
        }
        g.in_flight -= std::mem::take(&mut upload.bytes);
        let obj = Object {
            body,
            modified: SystemTime::now(),
            etag: format!("\"live-{}\"", g.seq),
            kept: !evictable,
            cache_control: cache.into(),
            info,
        };
        let inner = &mut *g;
        let stream = inner.streams.entry(dir.to_string()).or_default();
        stream.last_put = Some(now);
        if let Some(t) = info
            .and_then(|i| i.target)
            .filter(|t| t.is_finite() && *t > 0.0)
        {
            stream.target = Some(Duration::from_secs_f64(t));
        }
        let old = stream.objects.insert(name.to_string(), obj.clone());
        let waiting = stream.waiters.remove(name);
        // Names waited for by nobody now (their holds ended) leave the map.
        stream.waiters.retain(|_, n| Arc::strong_count(n) > 1);
        let mut gone = Vec::new();
        match (&part, evictable) {
            (Some((segment, number, index)), true) => {
                if old.is_some() {
                    stream.parts.retain(|(n, _, _)| n != name);
                }
                stream
                    .parts
                    .push_back((name.to_string(), segment.clone(), now));
                let this = (*number, *index);
                stream.newest_part = Some(stream.newest_part.map_or(this, |p| p.max(this)));
            }
            (None, true) => {
                if old.is_some() {
                    stream.segments.retain(|n| n != name);
                }
                stream.segments.push_back(name.to_string());
            }
            _ => {}
        }
        // The window, and the names a stream may hold: its oldest segments go first, with
        // their parts (room for a name that is not a segment was checked above).
        while stream.segments.len() > self.config.window
            || stream.objects.len() > self.config.max_objects
        {
            if !stream.drop_oldest(&mut gone) {
                break;
            }
        }
        // Parts past their age, even while their segment stays.
        if let Some(age) = stream.target.map(|t| t * PART_AGE) {
            while let Some((part, _, at)) = stream.parts.front() {
                if now.saturating_duration_since(*at) <= age {
                    break;
                }
                gone.extend(stream.objects.remove(part));
                stream.parts.pop_front();
            }
        }
        let status = match &old {
            Some(o) => {
                inner.forget(o);
                204
            }
            None => 201,
        };
        inner.objects += 1;
        inner.bytes += len;
        if !evictable {
            inner.kept_bytes += len;
        }
        self.counters
            .expired
            .fetch_add(gone.len() as u64, Ordering::Relaxed);
        for o in &gone {
            inner.forget(o);
        }
        if evictable {
            inner
                .order
                .push_back((dir.to_string(), name.to_string(), obj.etag.clone()));
        }
        self.cap_bytes(inner);
        drop(g);
        self.counters.puts.fetch_add(1, Ordering::Relaxed);
        self.counters.put_bytes.fetch_add(len, Ordering::Relaxed);
        if let Some(n) = waiting {
            n.notify_waiters();
        }
        Ok(status)
    }

    /// Whether an object of `len` bytes at `dir` + `name` fits the limits: the streams held,
    /// the names its stream holds (a segment makes room by evicting the stream's oldest),
    /// and the memory cap, where segments can be evicted but playlists and init segments
    /// cannot, and bodies other publishers are uploading count too (`own` of them are
    /// this object's).
    fn check_room(
        &self,
        g: &Inner,
        dir: &str,
        name: &str,
        len: u64,
        segment: bool,
        own: u64,
    ) -> Result<(), Refused> {
        let c = &self.config;
        let stream = g.streams.get(dir);
        let old = stream.and_then(|s| s.objects.get(name));
        match stream {
            None if g.streams.len() >= c.max_streams => {
                return Err(Refused::full(format!(
                    "{} live streams are held, the most allowed (--ingest-max-streams)",
                    g.streams.len()
                )));
            }
            // Segments make room by evicting the stream's oldest; the other names cannot.
            Some(s)
                if old.is_none()
                    && s.objects.len() - s.segments.len() - s.parts.len() >= c.max_objects =>
            {
                return Err(Refused::full(format!(
                    "stream {dir} holds {} names, the most allowed (--ingest-max-objects)",
                    s.objects.len()
                )));
            }
            _ => {}
        }
        let freed = old.filter(|o| o.kept).map_or(0, |o| o.body.len());
        let kept = g.kept_bytes - freed + if segment { 0 } else { len };
        let others = g.in_flight - own;
        let need = kept + if segment { len } else { 0 } + others;
        if need > c.max_bytes {
            return Err(Refused::full(format!(
                "no room for {len} bytes: playlists and init segments (never evicted) hold {kept} bytes and uploads in progress {others} of the {}-byte cap (--ingest-max-bytes)",
                c.max_bytes
            )));
        }
        Ok(())
    }

    /// A `PUT` body for `path` about to be received: its bytes count in the memory cap as
    /// they arrive ([`Upload::grow`]) until it is stored or dropped. A playlist or init
    /// segment it replaces is credited: its room is the new version's.
    pub fn upload(&self, path: &str) -> Upload<'_> {
        let credit = split(path).map_or(0, |(dir, name)| {
            let g = self.lock();
            g.streams
                .get(dir)
                .and_then(|s| s.objects.get(name))
                .filter(|o| o.kept)
                .map_or(0, |o| o.body.len())
        });
        Upload {
            store: self,
            bytes: 0,
            credit,
        }
    }

    /// Where a new object's bytes go: a memory file from [`MAPPED_MIN`] up while the store
    /// holds fewer than its budget of them, the heap otherwise (or when `memfd_create`
    /// fails, which is logged once).
    fn body_for(&self, bytes: Vec<u8>) -> LiveBody {
        match self.mapped(&[&bytes]) {
            Some(body) => body,
            None => LiveBody::Memory(Arc::new(bytes)),
        }
    }

    /// [`LiveStore::body_for`] of the pieces of a growing object, written in order.
    fn body_of_chunks(&self, chunks: &[bytes::Bytes]) -> LiveBody {
        let pieces: Vec<&[u8]> = chunks.iter().map(|c| &c[..]).collect();
        match self.mapped(&pieces) {
            Some(body) => body,
            None => LiveBody::Memory(Arc::new(pieces.concat())),
        }
    }

    /// A memory file holding `pieces` one after the other, when they are large enough and
    /// the budget allows.
    fn mapped(&self, pieces: &[&[u8]]) -> Option<LiveBody> {
        let len: u64 = pieces.iter().map(|p| p.len() as u64).sum();
        if len < MAPPED_MIN || self.lock().files >= self.max_files {
            return None;
        }
        match memory_file(pieces) {
            Ok(file) => Some(LiveBody::Mapped(BodyFile {
                file: Arc::new(file),
                len,
            })),
            Err(e) => {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    tracing::warn!("live segments stay on the heap: memfd_create failed ({e})")
                });
                None
            }
        }
    }

    /// Keep the memory under `max_bytes`: pick the globally oldest segments for the spill
    /// directory (dropping the oldest spilled ones when it is full), or drop them when
    /// there is none or the disk lags more than the slack behind.
    fn cap_bytes(&self, inner: &mut Inner) {
        let slack = self.config.spill_slack();
        while (inner.bytes + inner.in_flight).saturating_sub(inner.pending_bytes)
            > self.config.max_bytes
        {
            let Some(entry) = inner.order.pop_front() else {
                break;
            };
            let Some(body) = held(&inner.streams, &entry)
                .map(|o| o.body.clone())
                .filter(LiveBody::in_memory)
            else {
                continue;
            };
            let etag = &entry.2;
            let len = body.len();
            if let Some(spill) = &self.config.spill {
                if inner.pending_bytes + len <= slack && len <= spill.max_bytes {
                    while inner.spilled_bytes + inner.pending_bytes + len > spill.max_bytes {
                        let Some(old) = inner.spilled_order.pop_front() else {
                            break;
                        };
                        if inner.remove_entry(&old) {
                            self.counters.expired.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    if inner.spilled_bytes + inner.pending_bytes + len <= spill.max_bytes {
                        inner.pending.insert(etag.clone(), len);
                        inner.pending_bytes += len;
                        inner.spilled_order.push_back(entry.clone());
                        inner.to_spill.push((entry, body));
                        continue;
                    }
                }
            }
            if inner.remove_entry(&entry) {
                self.counters.expired.fetch_add(1, Ordering::Relaxed);
            }
        }
        for list in [&mut inner.order, &mut inner.spilled_order] {
            if list.len() > 4 * (inner.objects as usize + 16) {
                // Drop entries of segments that are gone so the lists stay proportional.
                let streams = &inner.streams;
                list.retain(|entry| held(streams, entry).is_some());
            }
        }
    }

    /// Whether segments wait to be written to the spill directory.
    pub fn spill_waiting(&self) -> bool {
        !self.lock().to_spill.is_empty()
    }

    /// Write the segments picked for spilling to the spill directory and serve them from
    /// there; blocking file I/O, so call it off the async workers. A segment removed
    /// meanwhile is skipped; one whose write fails is dropped (counted in `spill_errors`).
    /// Returns how many were spilled.
    pub fn spill_pending(&self) -> usize {
        let Some(spill) = &self.config.spill else {
            return 0;
        };
        let jobs = std::mem::take(&mut self.lock().to_spill);
        let mut done = 0;
        for (entry, body) in jobs {
            if !self.lock().pending.contains_key(&entry.2) {
                continue;
            }
            let written = write_spill_file(&spill.dir, &entry.2, &body);
            let mut g = self.lock();
            let inner = &mut *g;
            let Some(len) = inner.pending.remove(&entry.2) else {
                continue; // removed while being written; the file goes with `written`
            };
            inner.pending_bytes -= len;
            match written {
                Ok(file) => {
                    let (dir, name, _) = &entry;
                    if let Some(o) = inner
                        .streams
                        .get_mut(dir)
                        .and_then(|s| s.objects.get_mut(name))
                    {
                        let file = Arc::new(file);
                        let was = std::mem::replace(
                            &mut o.body,
                            LiveBody::Spilled(BodyFile { file, len }),
                        );
                        if let LiveBody::Mapped(_) = was {
                            inner.files -= 1;
                        }
                        inner.bytes -= len;
                        inner.spilled_bytes += len;
                        done += 1;
                        self.counters.spilled.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(e) => {
                    let first = self.counters.spill_errors.fetch_add(1, Ordering::Relaxed) == 0;
                    if first {
                        tracing::warn!(
                            "live spill to {} failed ({e}); dropping the segment instead",
                            spill.dir.display()
                        );
                    }
                    if inner.remove_entry(&entry) {
                        self.counters.expired.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        done
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
                let parts = stream.unlist(name);
                inner.forget(&o);
                for p in &parts {
                    inner.forget(p);
                }
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
            Some(s) => match (s.objects.get(name), s.growing.get(name)) {
                (Some(o), _) => Lookup::Found(o.clone()),
                (None, Some(growing)) => Lookup::Growing(growing.clone()),
                (None, None) => Lookup::Missing {
                    hold: !is_playlist(name) && s.may_come(name),
                },
            },
        }
    }

    /// Wait until `path` is written (or starts arriving with chunked encoding) or
    /// `deadline` passes (`Missing`); no polling: woken by the `PUT` of that object (or the
    /// end of its stream).
    pub async fn wait_for(&self, path: &str, deadline: Instant) -> Lookup {
        let gone = Lookup::Missing { hold: false };
        let Some((dir, name)) = split(path) else {
            return gone;
        };
        loop {
            let notify = {
                let mut g = self.lock();
                let now = Instant::now();
                self.expire_locked(&mut g, now);
                let Some(stream) = g.streams.get_mut(dir) else {
                    return gone;
                };
                if let Some(o) = stream.objects.get(name) {
                    return Lookup::Found(o.clone());
                }
                if let Some(growing) = stream.growing.get(name) {
                    return Lookup::Growing(growing.clone());
                }
                if is_playlist(name) || !stream.may_come(name) || now >= deadline {
                    return gone;
                }
                stream.waiters.entry(name.to_string()).or_default().clone()
            };
            let look = || match self.get(path, Instant::now()) {
                Lookup::Missing { hold: true } => None,
                found => Some(found),
            };
            if let Some(found) = until_written(&notify, deadline, look).await {
                return found;
            }
        }
    }

    /// A blocking playlist reload: wait until the playlist at `path` holds what `q` asks
    /// for (or ends) and return it; `None` when `deadline` passes first or the playlist is
    /// gone. Woken by the playlist's `PUT`s only.
    pub async fn wait_playlist(
        &self,
        path: &str,
        q: &BlockQuery,
        deadline: Instant,
    ) -> Option<Object> {
        let (dir, name) = split(path)?;
        let ready = |o: &Object| o.info.is_none_or(|i| block_decision(&i, q) != Block::Wait);
        loop {
            let notify = {
                let mut g = self.lock();
                let now = Instant::now();
                self.expire_locked(&mut g, now);
                let stream = g.streams.get_mut(dir)?;
                let o = stream.objects.get(name)?;
                if ready(o) {
                    return Some(o.clone());
                }
                if now >= deadline {
                    return None;
                }
                stream.waiters.entry(name.to_string()).or_default().clone()
            };
            let look = || match self.get(path, Instant::now()) {
                Lookup::Found(o) if ready(&o) => Some(Some(o)),
                Lookup::Found(_) => None,
                _ => Some(None),
            };
            if let Some(answer) = until_written(&notify, deadline, look).await {
                return answer;
            }
        }
    }

    /// Drop streams without a `PUT` for the TTL (looked at most ten times a TTL, at most
    /// once a second: not a walk over every stream on every request). Requests held in a
    /// dropped stream are woken to find it gone.
    fn expire_locked(&self, inner: &mut Inner, now: Instant) {
        let ttl = self.config.ttl;
        if inner.next_expiry.is_some_and(|t| now < t) {
            return;
        }
        inner.next_expiry = Some(now + (ttl / 10).min(Duration::from_secs(1)));
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
                for o in s.objects.values() {
                    inner.forget(o);
                }
                for n in s.waiters.values() {
                    n.notify_waiters();
                }
                self.counters
                    .expired
                    .fetch_add(s.objects.len() as u64, Ordering::Relaxed);
            }
        }
    }

    /// Objects held now, and their bytes in memory.
    pub fn level(&self) -> (u64, u64) {
        let g = self.lock();
        (g.objects, g.bytes)
    }

    /// Bytes the live origin holds in memory now: stored objects and bodies in flight.
    pub fn memory(&self) -> u64 {
        let g = self.lock();
        g.bytes + g.in_flight
    }

    /// Bytes of `PUT` bodies received and not stored yet.
    pub fn in_flight(&self) -> u64 {
        self.lock().in_flight
    }

    /// Bytes of segments in the spill directory now.
    pub fn spilled_bytes(&self) -> u64 {
        self.lock().spilled_bytes
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
            blocked: get(&c.blocked),
            block_timeouts: get(&c.block_timeouts),
            growing_reads: get(&c.growing_reads),
            expired: get(&c.expired),
            spilled: get(&c.spilled),
            spill_errors: get(&c.spill_errors),
            streams: self.streams() as u64,
            objects,
            bytes,
            spilled_bytes: self.spilled_bytes(),
            in_flight_bytes: self.in_flight(),
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
            "PUT or DELETE refused: no or wrong token, object too large, no room, bad path",
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
            "vodkit_ingest_blocked",
            "Blocking playlist reloads (_HLS_msn) held",
            s.blocked,
        )?;
        counter(
            e,
            "vodkit_ingest_block_timeouts",
            "Blocking playlist reloads answered 503 at their timeout",
            s.block_timeouts,
        )?;
        counter(
            e,
            "vodkit_ingest_growing_reads",
            "GETs answered from a segment still being uploaded",
            s.growing_reads,
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
        counter(
            e,
            "vodkit_ingest_spilled",
            "Segments written to the spill directory past the memory cap",
            s.spilled,
        )?;
        counter(
            e,
            "vodkit_ingest_spill_errors",
            "Spill writes that failed (the segment was dropped)",
            s.spill_errors,
        )?;
        gauge(
            e,
            "vodkit_ingest_bytes",
            "Bytes of live objects held in memory",
            s.bytes as f64,
        )?;
        gauge(
            e,
            "vodkit_ingest_in_flight_bytes",
            "Bytes of PUT bodies received and not stored yet",
            s.in_flight_bytes as f64,
        )?;
        gauge(
            e,
            "vodkit_ingest_spilled_bytes",
            "Bytes of live segments held in the spill directory",
            s.spilled_bytes as f64,
        )
    }
}

/// Wait for a write that `notify` tells of, or for `deadline`; `None` then (the caller
/// looks again). Unless `look`, asked once the wait is armed, already has the answer: a
/// `PUT` between the caller's own look and the arming woke nobody, and is seen this way.
async fn until_written<T>(
    notify: &tokio::sync::Notify,
    deadline: Instant,
    look: impl FnOnce() -> Option<T>,
) -> Option<T> {
    let written = notify.notified();
    tokio::pin!(written);
    written.as_mut().enable();
    if let Some(answer) = look() {
        return Some(answer);
    }
    tokio::select! {
        _ = &mut written => {}
        _ = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)) => {}
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Some(hold)` when a GET of `path` at `now` finds nothing (`hold`: it may still come),
    /// `None` when it finds an object.
    fn missing(s: &LiveStore, path: &str, now: Instant) -> Option<bool> {
        match s.get(path, now) {
            Lookup::Missing { hold } => Some(hold),
            _ => None,
        }
    }

    fn store() -> LiveStore {
        let mut c = IngestConfig::new("live", "s3cret");
        c.window = 3;
        c.max_bytes = 1000;
        c.ttl = Duration::from_secs(10);
        LiveStore::new(c)
    }

    #[test]
    fn segments_go_to_memory_files_within_the_budget_and_small_objects_to_the_heap() {
        let mut c = IngestConfig::new("live", "s3cret");
        c.window = 3;
        let mut s = LiveStore::new(c);
        assert!(s.max_files >= 64);
        s.max_files = 2;
        let t = Instant::now();
        let big = |n: u8| vec![n; MAPPED_MIN as usize + 5];
        s.put("/live/a/index.m3u8", b"#EXTM3U\n".to_vec(), t)
            .unwrap();
        for n in 0..3u8 {
            s.put(&format!("/live/a/seg-{n}.m4s"), big(n), t).unwrap();
        }
        let body = |path: &str| match s.get(path, t) {
            Lookup::Found(o) => o.body,
            _ => panic!("{path} is held"),
        };
        assert!(matches!(body("/live/a/index.m3u8"), LiveBody::Memory(_)));
        assert!(matches!(body("/live/a/seg-0.m4s"), LiveBody::Mapped(_)));
        assert!(matches!(body("/live/a/seg-1.m4s"), LiveBody::Mapped(_)));
        // The budget of two files is used up: the third segment stays on the heap.
        assert!(matches!(body("/live/a/seg-2.m4s"), LiveBody::Memory(_)));
        for n in 0..3u8 {
            assert_eq!(
                *body(&format!("/live/a/seg-{n}.m4s")).read().unwrap(),
                big(n)
            );
        }
        // seg-3 is placed before the window slides seg-0 out (heap); that frees a file,
        // which seg-4 gets. Memory counts every segment, wherever it is.
        s.put("/live/a/seg-3.m4s", big(3), t).unwrap();
        assert!(matches!(body("/live/a/seg-3.m4s"), LiveBody::Memory(_)));
        assert_eq!(s.lock().files, 1);
        s.put("/live/a/seg-4.m4s", big(4), t).unwrap();
        assert!(matches!(body("/live/a/seg-4.m4s"), LiveBody::Mapped(_)));
        assert_eq!(s.lock().files, 1, "seg-1 left the window");
        assert_eq!(s.level(), (4, 3 * big(0).len() as u64 + 8));
        assert_eq!(s.delete("/live/a/seg-4.m4s", t), 204);
        assert_eq!(s.lock().files, 0);
    }

    #[test]
    fn live_objects_take_at_most_a_quarter_of_a_memory_limit() {
        let mut c = IngestConfig::new("/live/", "t");
        c.fit_to_limit(256 << 20);
        assert_eq!(c.max_bytes, 64 << 20);
        // A large limit leaves the configured size alone.
        let mut c = IngestConfig::new("/live/", "t");
        c.fit_to_limit(16 << 30);
        assert_eq!(c.max_bytes, 512 << 20);
    }

    #[test]
    fn prefix_is_normalized_and_paths_are_covered() {
        let s = store();
        assert_eq!(s.config.prefix, "/live/");
        assert!(s.covers("/live/stream-0/seg-1.m4s"));
        assert!(!s.covers("/lives/x"));
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
        assert_eq!(s.put("/live/a/index.m3u8", vec![0; 10], t), Ok(201));
        assert_eq!(s.put("/live/a/index.m3u8", vec![0; 20], t), Ok(204));
        for n in 0..10 {
            assert_eq!(
                s.put(&format!("/live/a/seg-{n}.m4s"), vec![1; 50], t),
                Ok(201)
            );
        }
        // Three segments and the playlist.
        assert_eq!(s.level(), (4, 170));
        assert!(matches!(s.get("/live/a/seg-9.m4s", t), Lookup::Found(_)));
        // A segment that left the window is not coming back: not held. The next one is.
        assert_eq!(missing(&s, "/live/a/seg-6.m4s", t), Some(false));
        assert_eq!(missing(&s, "/live/a/seg-10.m4s", t), Some(true));
        assert_eq!(segment_number("seg-41.m4s"), Some(41));
        assert_eq!(segment_number("chunk7"), Some(7));
        assert_eq!(segment_number("init.mp4"), None);
        // The byte cap evicts the oldest segments of any stream.
        for n in 0..3 {
            s.put(&format!("/live/b/seg-{n}.m4s"), vec![2; 300], t)
                .unwrap();
        }
        let (_, bytes) = s.level();
        assert!(bytes <= 1000, "{bytes}");
        assert!(matches!(s.get("/live/b/seg-2.m4s", t), Lookup::Found(_)));
        assert!(missing(&s, "/live/a/seg-7.m4s", t).is_some());
        assert_eq!(s.delete("/live/b/seg-2.m4s", t), 204);
        assert_eq!(s.delete("/live/b/seg-2.m4s", t), 404);
    }

    #[test]
    fn playlists_and_init_segments_count_in_the_cap_and_are_refused_past_it() {
        let s = store();
        let t = Instant::now();
        s.put("/live/a/seg-0.m4s", vec![1; 300], t).unwrap();
        assert_eq!(s.put("/live/a/index.m3u8", vec![0; 400], t), Ok(201));
        assert_eq!(s.put("/live/a/init.mp4", vec![0; 500], t), Ok(201));
        // The segment made room for them; now only objects that are never evicted remain.
        assert_eq!(s.level(), (2, 900));
        let e = s.put("/live/b/index.m3u8", vec![0; 200], t).unwrap_err();
        assert_eq!(e.status, 507);
        assert!(e.reason.contains("--ingest-max-bytes"), "{e}");
        let e = s.put("/live/a/seg-1.m4s", vec![1; 200], t).unwrap_err();
        assert_eq!(e.status, 507);
        // Replacing one in place frees what it held.
        assert_eq!(s.put("/live/a/init.mp4", vec![0; 550], t), Ok(204));
        assert_eq!(s.put("/live/a/seg-1.m4s", vec![1; 50], t), Ok(201));
        assert_eq!(s.level(), (3, 1000));
        assert_eq!(s.stats().rejected, 2);
    }

    #[test]
    fn streams_and_names_per_stream_are_bounded() {
        let mut c = IngestConfig::new("live", "s3cret");
        c.max_streams = 2;
        c.max_objects = 3;
        let s = LiveStore::new(c);
        let t = Instant::now();
        s.put("/live/a/index.m3u8", vec![0; 5], t).unwrap();
        s.put("/live/b/index.m3u8", vec![0; 5], t).unwrap();
        let e = s.put("/live/c/index.m3u8", vec![0; 5], t).unwrap_err();
        assert!(e.reason.contains("--ingest-max-streams"), "{e}");
        // Segments make room for each other: the stream keeps its newest.
        for n in 0..5 {
            assert_eq!(
                s.put(&format!("/live/a/seg-{n}.m4s"), vec![1; 5], t),
                Ok(201)
            );
        }
        assert!(missing(&s, "/live/a/seg-2.m4s", t).is_some());
        assert!(matches!(s.get("/live/a/seg-4.m4s", t), Lookup::Found(_)));
        // Names that are not segments cannot be evicted: past the limit they are refused.
        s.put("/live/a/v2.m3u8", vec![0; 5], t).unwrap();
        s.put("/live/a/init.mp4", vec![0; 5], t).unwrap();
        let e = s.put("/live/a/v3.m3u8", vec![0; 5], t).unwrap_err();
        assert!(e.reason.contains("--ingest-max-objects"), "{e}");
        let e = s.put("/live/a/seg-5.m4s", vec![0; 5], t).unwrap_err();
        assert!(e.reason.contains("--ingest-max-objects"), "{e}");
        assert_eq!(s.put("/live/a/v2.m3u8", vec![0; 6], t), Ok(204));
    }

    #[test]
    fn bodies_in_flight_count_in_the_cap_until_stored_or_dropped() {
        let s = store();
        let t = Instant::now();
        s.put("/live/a/index.m3u8", vec![0; 100], t).unwrap();
        for n in 0..3 {
            s.put(&format!("/live/a/seg-{n}.m4s"), vec![1; 200], t)
                .unwrap();
        }
        let mut up = s.upload("/live/a/seg-3.m4s");
        up.grow(400).unwrap();
        assert_eq!(s.in_flight(), 400);
        // The oldest segment made room for the body arriving.
        assert!(missing(&s, "/live/a/seg-0.m4s", t).is_some());
        assert!(s.memory() <= 1000, "{}", s.memory());
        let mut other = s.upload("/live/b/seg-0.m4s");
        assert_eq!(other.grow(501).unwrap_err().status, 507);
        other.grow(500).unwrap();
        drop(other);
        assert_eq!(s.in_flight(), 400);
        assert_eq!(
            s.put_upload("/live/a/seg-3.m4s", vec![2; 400], up, t),
            Ok(201)
        );
        assert_eq!(s.in_flight(), 0);
        assert!(s.memory() <= 1000, "{}", s.memory());
    }

    #[test]
    fn live_playlists_are_cached_half_a_target_duration() {
        let hls = b"#EXTM3U\n#EXT-X-TARGETDURATION:6\n#EXTINF:6,\nseg-0.ts\n";
        assert_eq!(playlist_max_age(hls), Duration::from_secs(3));
        let mpd = br#"<MPD type="dynamic" maxSegmentDuration="PT4.0S">"#;
        assert_eq!(playlist_max_age(mpd), Duration::from_secs(2));
        assert_eq!(iso_seconds("PT1M0.5S"), Some(60.5));
        assert_eq!(playlist_max_age(b"#EXTM3U\n"), Duration::from_secs(1));
        assert_eq!(cache_control("index.m3u8", hls, None), "max-age=3");
        let fixed = Some(Duration::from_secs(5));
        assert_eq!(cache_control("index.m3u8", hls, fixed), "max-age=5");
        assert_eq!(cache_control("s.ts", hls, None), "max-age=86400, immutable");
    }

    #[test]
    fn the_init_segment_outlives_the_window() {
        // A viewer joining a stream long after it started still needs its init segment
        // (without this, every viewer joining a live stream more than a window
        // after its start got 404 for `init.mp4` and failed).
        let s = store();
        let t = Instant::now();
        assert_eq!(s.put("/live/a/init.mp4", vec![9; 40], t), Ok(201));
        for n in 0..20 {
            s.put(&format!("/live/a/seg-{n}.m4s"), vec![1; 50], t)
                .unwrap();
        }
        assert!(matches!(s.get("/live/a/init.mp4", t), Lookup::Found(_)));
        assert_eq!(missing(&s, "/live/a/seg-5.m4s", t), Some(false));
        // Re-publishing it replaces it in place.
        assert_eq!(s.put("/live/a/init.mp4", vec![8; 40], t), Ok(204));
        assert!(is_init("init-stream0.m4s") && is_init("audio_init.mp4"));
        assert!(!is_init("seg-41.m4s") && !is_init("index.m3u8"));
    }

    #[test]
    fn quiet_streams_expire_and_unknown_ones_are_not_held() {
        let s = store();
        let t = Instant::now();
        s.put("/live/a/seg-0.m4s", vec![0; 5], t).unwrap();
        assert_eq!(missing(&s, "/live/zzz/seg-0.m4s", t), Some(false));
        assert_eq!(missing(&s, "/live/a/index.m3u8", t), Some(false));
        let later = t + Duration::from_secs(11);
        assert_eq!(missing(&s, "/live/a/seg-0.m4s", later), Some(false));
        assert_eq!(s.level(), (0, 0));
        assert_eq!(s.streams(), 0);
    }

    fn spilling_store(dir: &std::path::Path, disk: u64) -> LiveStore {
        let mut c = IngestConfig::new("live", "s3cret");
        c.window = 4;
        c.max_bytes = 1000;
        c.spill = Some(SpillConfig {
            dir: dir.to_path_buf(),
            max_bytes: disk,
        });
        LiveStore::new(c)
    }

    /// A [`spilling_store`] with `disk` bytes of spill space in a new directory, after
    /// [`publish`] of `streams` streams; the directory and the time of the puts.
    fn published(
        disk: u64,
        streams: usize,
        spill_each: bool,
    ) -> (tempfile::TempDir, LiveStore, Instant) {
        let d = tempfile::tempdir().unwrap();
        let s = spilling_store(d.path(), disk);
        let t = Instant::now();
        publish(&s, streams, t, spill_each);
        (d, s, t)
    }

    fn files_in(dir: &std::path::Path) -> usize {
        std::fs::read_dir(dir).unwrap().count()
    }

    /// Four 100-byte segments in each of `streams` streams `/live/s0/` … at `t`, segment by
    /// segment across the streams; stream `st`'s segment `n` is the byte 10·st + n
    /// repeated. Every put is accepted; with `spill_each` what waits is spilled after each.
    fn publish(s: &LiveStore, streams: usize, t: Instant, spill_each: bool) {
        for n in 0..4 {
            for st in 0..streams {
                let body = vec![(st * 10 + n) as u8; 100];
                assert_eq!(s.put(&format!("/live/s{st}/seg-{n}.m4s"), body, t), Ok(201));
                if spill_each {
                    s.spill_pending();
                }
            }
        }
    }

    #[test]
    fn past_the_cap_segments_go_to_disk_and_are_served_from_there() {
        // Five streams × 4 segments × 100 bytes = 2,000 bytes: twice the memory cap.
        let (d, s, t) = published(10_000, 5, false);
        // Picked, not written yet: still in memory, still served.
        assert!(s.spill_waiting());
        assert_eq!(s.spilled_bytes(), 0);
        let Lookup::Found(o) = s.get("/live/s0/seg-0.m4s", t) else {
            panic!("a segment waiting to be spilled is still served");
        };
        assert!(matches!(o.body, LiveBody::Memory(_)));
        let spilled = s.spill_pending();
        assert_eq!(spilled, 10);
        assert!(!s.spill_waiting());
        // Memory back under the cap, nothing dropped, nothing left named in the directory.
        let (objects, mem) = s.level();
        assert_eq!((objects, mem), (20, 1000));
        assert_eq!(s.spilled_bytes(), 1000);
        assert_eq!(s.stats().expired, 0);
        assert_eq!(files_in(d.path()), 0, "spill files are unlinked");
        // The oldest went to disk and read back intact; the newest stayed in memory.
        let Lookup::Found(o) = s.get("/live/s1/seg-0.m4s", t) else {
            panic!("a spilled segment is served");
        };
        assert!(matches!(o.body, LiveBody::Spilled(_)));
        assert_eq!(*o.body.read().unwrap(), vec![10u8; 100]);
        let Lookup::Found(o) = s.get("/live/s4/seg-3.m4s", t) else {
            panic!("the newest segment is held");
        };
        assert!(matches!(o.body, LiveBody::Memory(_)));
        // The window slides over spilled segments and frees them; so does DELETE.
        s.put("/live/s0/seg-4.m4s", vec![0; 100], t).unwrap();
        assert_eq!(missing(&s, "/live/s0/seg-0.m4s", t), Some(false));
        assert_eq!(s.delete("/live/s1/seg-0.m4s", t), 204);
        s.spill_pending();
        let (objects, mem) = s.level();
        assert_eq!(objects, 19);
        assert!(mem <= 1000, "{mem}");
        assert_eq!(mem + s.spilled_bytes(), 1900);
        assert_eq!(s.stats().spill_errors, 0);
    }

    #[test]
    fn a_full_spill_directory_drops_its_oldest_segments() {
        let (_d, s, t) = published(300, 4, true);
        // 1,600 bytes: 1,000 in memory, 300 on disk, the 300 oldest dropped.
        assert_eq!(s.level().1, 1000);
        assert_eq!(s.spilled_bytes(), 300);
        assert_eq!(s.stats().expired, 3);
        assert!(missing(&s, "/live/s0/seg-0.m4s", t).is_some());
        assert!(matches!(s.get("/live/s3/seg-0.m4s", t), Lookup::Found(_)));
    }

    #[test]
    fn a_failing_spill_directory_drops_segments_and_counts_the_errors() {
        let d = tempfile::tempdir().unwrap();
        let s = spilling_store(&d.path().join("gone"), 10_000);
        let t = Instant::now();
        publish(&s, 4, t, false);
        assert_eq!(s.spill_pending(), 0);
        let st = s.stats();
        assert_eq!(st.spill_errors, 6);
        assert_eq!(st.expired, 6);
        assert_eq!(st.objects, 10);
        assert!(st.bytes <= 1000, "{}", st.bytes);
        assert_eq!(st.spilled_bytes, 0);
        assert!(SpillConfig {
            dir: d.path().join("gone"),
            max_bytes: 1
        }
        .check()
        .unwrap_err()
        .contains("expected a writable directory"));
    }

    #[test]
    fn segments_removed_while_waiting_to_spill_are_not_written() {
        let d = tempfile::tempdir().unwrap();
        let s = spilling_store(d.path(), 10_000);
        let t = Instant::now();
        for n in 0..12 {
            s.put(&format!("/live/a/seg-{n}.m4s"), vec![1; 100], t)
                .unwrap();
        }
        // The window of 4 keeps 400 bytes, under the cap: nothing to spill.
        assert!(!s.spill_waiting());
        for st in 0..3 {
            for n in 0..4 {
                s.put(&format!("/live/s{st}/seg-{n}.m4s"), vec![1; 100], t)
                    .unwrap();
            }
        }
        assert!(s.spill_waiting());
        // The stream's publisher deletes its oldest segments before the spill runs.
        for n in 8..10 {
            assert_eq!(s.delete(&format!("/live/a/seg-{n}.m4s"), t), 204);
        }
        let done = s.spill_pending();
        let (objects, mem) = s.level();
        assert_eq!(objects, 14);
        assert_eq!(mem + s.spilled_bytes(), 1400);
        assert_eq!(done as u64 * 100, s.spilled_bytes());
        assert!(mem <= 1000);
    }

    #[tokio::test]
    async fn held_requests_wake_for_their_own_object_or_the_end_of_their_stream() {
        let mut c = IngestConfig::new("live", "s3cret");
        c.ttl = Duration::from_millis(300);
        let s = Arc::new(LiveStore::new(c));
        s.put("/live/a/seg-0.m4s", vec![0; 5], Instant::now())
            .unwrap();
        s.put("/live/b/seg-0.m4s", vec![0; 5], Instant::now())
            .unwrap();
        let far = Instant::now() + Duration::from_secs(30);
        let (s1, s2) = (s.clone(), s.clone());
        let a = tokio::spawn(async move { s1.wait_for("/live/a/seg-1.m4s", far).await });
        let b = tokio::spawn(async move { s2.wait_for("/live/b/seg-1.m4s", far).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Other objects of the stream do not end the hold; its own object does.
        s.put("/live/a/index.m3u8", b"#EXTM3U\n".to_vec(), Instant::now())
            .unwrap();
        s.put("/live/a/seg-9.m4s", vec![9; 3], Instant::now())
            .unwrap();
        assert!(!a.is_finished());
        let started = Instant::now();
        // Stream b falls quiet: a later PUT elsewhere expires it and wakes its viewer,
        // long before its 30 s hold.
        for _ in 0..8 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            s.put("/live/a/index.m3u8", b"#EXTM3U\n".to_vec(), Instant::now())
                .unwrap();
        }
        s.put("/live/a/seg-10.m4s", vec![1; 4], Instant::now())
            .unwrap();
        assert!(b.await.unwrap().object().is_none());
        assert!(started.elapsed() < Duration::from_secs(5));
        // seg-1 of stream a now numbers before the newest (10): it is not coming, but the
        // held viewer is only woken by its own object or the stream's end; end it.
        s.put("/live/a/seg-1.m4s", vec![7; 6], Instant::now())
            .unwrap();
        assert_eq!(
            a.await
                .unwrap()
                .object()
                .expect("its own object")
                .body
                .len(),
            6
        );
        // Nobody waits any more: the names left the map.
        assert!(s.lock().streams["/live/a/"].waiters.is_empty());
    }

    #[tokio::test]
    async fn a_held_request_gets_the_segment_when_it_is_written() {
        let s = Arc::new(store());
        s.put("/live/a/seg-0.m4s", vec![0; 5], Instant::now())
            .unwrap();
        let s2 = s.clone();
        let waiter = tokio::spawn(async move {
            s2.wait_for("/live/a/seg-1.m4s", Instant::now() + Duration::from_secs(5))
                .await
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        s.put("/live/a/seg-1.m4s", vec![7; 9], Instant::now())
            .unwrap();
        let got = waiter.await.unwrap().object().expect("written while held");
        assert_eq!(got.body.len(), 9);
        // Nothing comes: None at the deadline.
        let none = s
            .wait_for(
                "/live/a/seg-9.m4s",
                Instant::now() + Duration::from_millis(100),
            )
            .await;
        assert!(none.object().is_none());
    }

    /// An LL-HLS playlist as the source writes it: `done` complete segments from `first`
    /// (two seconds each, parts listed for the last two), then `parts` parts of the next.
    fn ll_playlist(first: u64, done: u64, parts: u64) -> String {
        let mut p = String::from(
            "#EXTM3U\n#EXT-X-VERSION:9\n#EXT-X-TARGETDURATION:2\n\
             #EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=1.000,CAN-SKIP-UNTIL=12.000\n\
             #EXT-X-PART-INF:PART-TARGET=0.333\n",
        );
        p += &format!("#EXT-X-MEDIA-SEQUENCE:{first}\n#EXT-X-MAP:URI=\"init.mp4\"\n");
        let part_lines = |n: u64, k: u64| {
            (0..k)
                .map(|i| {
                    let ind = if i == 0 { ",INDEPENDENT=YES" } else { "" };
                    format!("#EXT-X-PART:DURATION=0.33333,URI=\"seg-{n}.{i}.m4s\"{ind}\n")
                })
                .collect::<String>()
        };
        for n in first..first + done {
            p += &format!(
                "#EXT-X-PROGRAM-DATE-TIME:2026-11-28T23:00:{:02}.000Z\n",
                n * 2 % 60
            );
            if n + 2 >= first + done {
                p += &part_lines(n, 6);
            }
            p += &format!("#EXTINF:2.00000,\nseg-{n}.m4s\n");
        }
        let next = first + done;
        if parts > 0 {
            p += "#EXT-X-PROGRAM-DATE-TIME:2026-11-28T23:59:00.000Z\n";
            p += &part_lines(next, parts);
        }
        p += &format!("#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"seg-{next}.{parts}.m4s\"\n");
        p
    }

    #[test]
    fn parts_belong_to_their_segment_and_not_to_the_window() {
        let s = store();
        let t = Instant::now();
        assert_eq!(
            part_of("seg-41.3.m4s"),
            Some(("seg-41.m4s".to_string(), 41, 3))
        );
        assert_eq!(part_of("seg-41.m4s"), None);
        assert_eq!(part_of("init.mp4"), None);
        for n in 0..4u64 {
            for p in 0..6u64 {
                let part = format!("/live/a/seg-{n}.{p}.m4s");
                assert_eq!(s.put(&part, vec![1; 5], t), Ok(201));
            }
            s.put(&format!("/live/a/seg-{n}.m4s"), vec![1; 30], t)
                .unwrap();
        }
        // The window holds three segments: segment 0 left with its six parts, and the
        // parts did not push any segment out.
        assert_eq!(s.level(), (3 * 7, 3 * 60));
        assert_eq!(missing(&s, "/live/a/seg-0.2.m4s", t), Some(false));
        assert!(matches!(s.get("/live/a/seg-1.5.m4s", t), Lookup::Found(_)));
        // The next part is held; a part of a complete segment, or one numbered before
        // the newest part, is not coming.
        assert_eq!(missing(&s, "/live/a/seg-4.0.m4s", t), Some(true));
        s.put("/live/a/seg-4.0.m4s", vec![1; 5], t).unwrap();
        s.put("/live/a/seg-4.1.m4s", vec![1; 5], t).unwrap();
        assert_eq!(missing(&s, "/live/a/seg-4.2.m4s", t), Some(true));
        assert_eq!(missing(&s, "/live/a/seg-5.0.m4s", t), Some(true));
        assert_eq!(missing(&s, "/live/a/seg-3.9.m4s", t), Some(false));
        // DELETE of a segment takes its parts; the parts' own DELETEs then find nothing.
        assert_eq!(s.delete("/live/a/seg-1.m4s", t), 204);
        assert_eq!(s.delete("/live/a/seg-1.0.m4s", t), 404);
        assert_eq!(s.level(), (2 * 7 + 2, 2 * 60 + 10));
        // Parts count in the byte cap and are evicted oldest first like segments.
        let big = store();
        for p in 0..6u64 {
            big.put(&format!("/live/b/seg-0.{p}.m4s"), vec![1; 300], t)
                .unwrap();
        }
        let (_, bytes) = big.level();
        assert!(bytes <= 1000, "{bytes}");
        assert!(matches!(
            big.get("/live/b/seg-0.5.m4s", t),
            Lookup::Found(_)
        ));
        assert!(missing(&big, "/live/b/seg-0.0.m4s", t).is_some());
    }

    #[test]
    fn parts_leave_after_four_target_durations() {
        let s = store();
        let t = Instant::now();
        s.put("/live/a/index.m3u8", ll_playlist(0, 1, 0).into_bytes(), t)
            .unwrap();
        s.put("/live/a/seg-1.0.m4s", vec![1; 5], t).unwrap();
        let later = t + Duration::from_secs(7);
        s.put("/live/a/seg-1.1.m4s", vec![1; 5], later).unwrap();
        assert!(matches!(
            s.get("/live/a/seg-1.0.m4s", later),
            Lookup::Found(_)
        ));
        // Eight seconds (four target durations of 2 s) after part 0 was published.
        let past = t + Duration::from_millis(8100);
        s.put("/live/a/seg-1.2.m4s", vec![1; 5], past).unwrap();
        assert_eq!(missing(&s, "/live/a/seg-1.0.m4s", past), Some(false));
        assert!(matches!(
            s.get("/live/a/seg-1.1.m4s", past),
            Lookup::Found(_)
        ));
    }

    #[test]
    fn a_playlist_says_which_segments_and_parts_it_holds() {
        let i = PlaylistInfo::parse(ll_playlist(40, 3, 2).as_bytes()).unwrap();
        assert_eq!(i.first, 40);
        assert_eq!(i.segments, 3);
        assert_eq!(i.parts, 2);
        assert_eq!(i.target, Some(2.0));
        assert_eq!(i.can_skip_until, Some(12.0));
        assert!(!i.ended);
        assert_eq!(i.newest(), Some(42));
        assert!(i.contains(42, None) && i.contains(30, None));
        assert!(!i.contains(43, None));
        assert!(i.contains(43, Some(0)) && i.contains(43, Some(1)));
        assert!(!i.contains(43, Some(2)));
        assert!(!i.contains(44, Some(0)));
        assert!(
            i.contains(42, Some(9)),
            "a complete segment holds all its parts"
        );
        let none = PlaylistInfo::parse(ll_playlist(0, 0, 0).as_bytes()).unwrap();
        assert_eq!(none.newest(), None);
        assert!(!none.contains(0, None));
        // Not a media playlist.
        assert!(PlaylistInfo::parse(b"#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=1\nv.m3u8\n").is_none());
        assert!(PlaylistInfo::parse(b"<MPD/>").is_none());
        let ended = format!("{}#EXT-X-ENDLIST\n", ll_playlist(0, 2, 0));
        assert!(PlaylistInfo::parse(ended.as_bytes()).unwrap().ended);
        assert_eq!(attribute("A=1,URI=\"x,y\",B=2", "B"), Some("2"));
        assert_eq!(attribute("A=1,URI=\"x,y\",B=2", "URI"), Some("x,y"));
        assert_eq!(attribute("A=1", "C"), None);
    }

    #[test]
    fn blocking_reloads_wait_for_what_they_ask_and_refuse_the_far_future() {
        let q = |s: &str| BlockQuery::parse(s).unwrap().unwrap();
        assert_eq!(BlockQuery::parse("x=1").unwrap(), None);
        assert_eq!(BlockQuery::parse("").unwrap(), None);
        assert_eq!(
            q("_HLS_msn=43&_HLS_part=2"),
            BlockQuery {
                msn: Some(43),
                part: Some(2),
                skip: false
            }
        );
        assert!(q("_HLS_skip=YES").skip && q("_HLS_msn=1&_HLS_skip=v2").skip);
        for bad in ["_HLS_part=1", "_HLS_msn=x", "_HLS_msn=-1", "_HLS_skip=NO"] {
            assert!(BlockQuery::parse(bad).is_err(), "{bad}");
        }
        let i = PlaylistInfo::parse(ll_playlist(40, 3, 2).as_bytes()).unwrap();
        assert_eq!(block_decision(&i, &q("_HLS_msn=42")), Block::Now);
        assert_eq!(
            block_decision(&i, &q("_HLS_msn=43&_HLS_part=1")),
            Block::Now
        );
        assert_eq!(
            block_decision(&i, &q("_HLS_msn=43&_HLS_part=2")),
            Block::Wait
        );
        assert_eq!(block_decision(&i, &q("_HLS_msn=43")), Block::Wait);
        assert_eq!(block_decision(&i, &q("_HLS_msn=44")), Block::Wait);
        assert!(matches!(
            block_decision(&i, &q("_HLS_msn=45")),
            Block::Refuse(r) if r.contains("_HLS_msn=45")
        ));
        assert_eq!(block_decision(&i, &q("_HLS_skip=YES")), Block::Now);
        let ended = format!("{}#EXT-X-ENDLIST\n", ll_playlist(40, 3, 0));
        let e = PlaylistInfo::parse(ended.as_bytes()).unwrap();
        assert_eq!(block_decision(&e, &q("_HLS_msn=44")), Block::Now);
        assert_eq!(i.blocking_max_age(), Duration::from_secs(12));
    }

    #[test]
    fn a_delta_update_skips_the_segments_older_than_can_skip_until() {
        // Ten complete 2-s segments and two parts (0.67 s) end 20.67 s after the first
        // starts. CAN-SKIP-UNTIL=12: those starting more than 12 s before the end (40..44,
        // at 0, 2, ... 8 s) are skipped; 45 starts 10.67 s before the end and stays.
        let text = ll_playlist(40, 10, 2);
        let delta = skip_segments(&text).unwrap();
        assert!(
            delta.contains("#EXT-X-SKIP:SKIPPED-SEGMENTS=5\n"),
            "{delta}"
        );
        assert!(delta.contains("#EXT-X-MEDIA-SEQUENCE:40\n"));
        assert!(delta.contains("#EXT-X-MAP:URI=\"init.mp4\"\n"));
        for gone in 40..45 {
            assert!(
                !delta.contains(&format!("seg-{gone}.m4s")),
                "{gone}: {delta}"
            );
        }
        assert!(delta.contains("seg-45.m4s\n"));
        // The first kept segment keeps its date; the tail (parts, hint) is unchanged.
        let kept = delta
            .split("#EXT-X-SKIP:SKIPPED-SEGMENTS=5\n")
            .nth(1)
            .unwrap();
        assert!(kept.starts_with("#EXT-X-PROGRAM-DATE-TIME:"), "{kept}");
        assert!(delta.ends_with(text.split("seg-49.m4s\n").nth(1).unwrap()));
        // The delta is the same playlist to a reader: it holds the same segments and parts.
        let (full, short) = (
            PlaylistInfo::parse(text.as_bytes()).unwrap(),
            PlaylistInfo::parse(delta.as_bytes()).unwrap(),
        );
        assert_eq!(full, short);
        // Nothing to skip, or no CAN-SKIP-UNTIL: no delta.
        assert_eq!(skip_segments(&ll_playlist(40, 6, 0)), None);
        let plain = "#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2,\na.m4s\n#EXTINF:2,\nb.m4s\n";
        assert_eq!(skip_segments(plain), None);
    }

    #[tokio::test]
    async fn a_growing_segment_is_read_as_it_arrives_and_stored_when_whole() {
        let s = Arc::new(store());
        let t = Instant::now();
        s.put("/live/a/seg-0.m4s", vec![0; 5], t).unwrap();
        // A viewer held for segment 1 is woken by its first byte.
        let s2 = s.clone();
        let held = tokio::spawn(async move {
            s2.wait_for("/live/a/seg-1.m4s", Instant::now() + Duration::from_secs(5))
                .await
        });
        tokio::time::sleep(Duration::from_millis(30)).await;
        let mut upload = s.upload("/live/a/seg-1.m4s");
        let g = s.start_growing("/live/a/seg-1.m4s", t).unwrap();
        let Lookup::Growing(growing) = held.await.unwrap() else {
            panic!("the held viewer gets the growing segment");
        };
        let mut r = growing.reader();
        upload.grow(3).unwrap();
        g.append(bytes::Bytes::from_static(b"abc"));
        assert!(matches!(r.next().await, Grown::Data(d) if d.concat() == b"abc"));
        assert_eq!(s.in_flight(), 3);
        upload.grow(2).unwrap();
        g.append(bytes::Bytes::from_static(b"de"));
        assert!(s.put_growing("/live/a/seg-1.m4s", upload, g, t).is_ok());
        assert!(matches!(r.next().await, Grown::Data(d) if d.concat() == b"de"));
        assert!(matches!(r.next().await, Grown::Complete));
        // A late reader of the same growing object gets every byte, then the end.
        let mut late = growing.reader();
        assert!(matches!(late.next().await, Grown::Data(d) if d.concat() == b"abcde"));
        assert!(matches!(late.next().await, Grown::Complete));
        let o = s.get("/live/a/seg-1.m4s", t).object().unwrap();
        assert_eq!(*o.body.read().unwrap(), b"abcde".to_vec());
        assert_eq!(s.in_flight(), 0);
        // An upload cut in the middle: readers see it fail, and nothing is stored.
        let g = s.start_growing("/live/a/seg-2.m4s", t).unwrap();
        g.append(bytes::Bytes::from_static(b"xy"));
        let Lookup::Growing(growing) = s.get("/live/a/seg-2.m4s", t) else {
            panic!("readable while it arrives");
        };
        let mut r = growing.reader();
        drop(g);
        assert!(matches!(r.next().await, Grown::Data(_)));
        assert!(matches!(r.next().await, Grown::Failed));
        assert_eq!(missing(&s, "/live/a/seg-2.m4s", t), Some(true));
        // Playlists and init segments are never growing.
        assert!(s.start_growing("/live/a/index.m3u8", t).is_none());
        assert!(s.start_growing("/live/a/init.mp4", t).is_none());
    }

    #[tokio::test]
    async fn a_blocking_reload_is_woken_by_the_playlist_that_holds_its_part() {
        let s = Arc::new(LiveStore::new(IngestConfig::new("live", "s3cret")));
        let t = Instant::now();
        s.put("/live/a/index.m3u8", ll_playlist(0, 2, 1).into_bytes(), t)
            .unwrap();
        let s2 = s.clone();
        let want = BlockQuery {
            msn: Some(2),
            part: Some(2),
            skip: false,
        };
        let waiter = tokio::spawn(async move {
            s2.wait_playlist(
                "/live/a/index.m3u8",
                &want,
                Instant::now() + Duration::from_secs(5),
            )
            .await
        });
        tokio::time::sleep(Duration::from_millis(30)).await;
        s.put("/live/a/index.m3u8", ll_playlist(0, 2, 2).into_bytes(), t)
            .unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!waiter.is_finished(), "part 1 is not part 2");
        s.put("/live/a/index.m3u8", ll_playlist(0, 2, 3).into_bytes(), t)
            .unwrap();
        let got = waiter.await.unwrap().expect("the playlist with part 2");
        assert_eq!(got.info.unwrap().parts, 3);
        // Nothing comes: None at the deadline.
        let far = BlockQuery {
            msn: Some(3),
            part: None,
            skip: false,
        };
        let deadline = Instant::now() + Duration::from_millis(100);
        assert!(s
            .wait_playlist("/live/a/index.m3u8", &far, deadline)
            .await
            .is_none());
    }
}
