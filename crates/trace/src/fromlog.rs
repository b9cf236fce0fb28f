//! Production logs in, sessions out (`vodkit workload from-log`): rebuild viewing
//! sessions from an access log, in the form `vodkit load` replays and `vodkit fileset
//! create` builds a stand-in file set for.
//!
//! A viewing session is the requests of one client (address + user agent, as `vodkit
//! trace` keys them) for one file, split where the client was silent for longer than the
//! idle limit (the thesis's inactivity rule, 5.1). Each becomes a [`Session`]: its requests
//! in the order the server received them, with their byte ranges (the logged `Range`, or
//! the bytes sent for an open-ended read), `pacing_s` = the start-to-start gap the log shows,
//! and a timeout of the gap to the client's next request (it was evidently satisfied by
//! then), at least [`MIN_TIMEOUT_S`]. Sessions are ordered by arrival and their `gap`s are
//! inter-arrival times scaled to mean 1, so `vodkit load --rate R` replays them as a Poisson
//! process at any rate; the log's own rate is in the summary (replay at it to reproduce the
//! log's load).
//!
//! Every file becomes a title with one unchunked rendition whose size is the highest byte
//! any request reached; its duration is taken from a nominal bit rate (the log does not
//! say). Unless identities are kept, paths are replaced by a keyed hash (HMAC-SHA-256 via
//! `ring`), so a file set and session list built from a production log name no title;
//! client addresses never leave the reader.

use std::collections::HashMap;

use serde::Serialize;
use vodkit_workload::model::{ByteRange, Catalog, Media, Rendition, Request, Session, Title};

use crate::record::{LogRequest, RequestKind};
use crate::spill::Seen;

/// Shortest timeout given to a rebuilt request.
pub const MIN_TIMEOUT_S: f64 = 5.0;

/// How sessions are rebuilt.
#[derive(Clone, Debug)]
pub struct FromLogOptions {
    /// A client silent for longer than this on a file starts a new session there.
    pub idle_s: f64,
    /// Bit rate assumed for catalog durations.
    pub bitrate_kbps: u32,
    /// Keep paths as logged instead of hashing them.
    pub keep_identities: bool,
    /// Key of the path hash; `None`: a random key that is not kept.
    pub key: Option<Vec<u8>>,
    /// Client class name written into every session.
    pub class: String,
}

impl Default for FromLogOptions {
    fn default() -> Self {
        FromLogOptions {
            idle_s: 60.0,
            bitrate_kbps: 1000,
            keep_identities: false,
            key: None,
            class: "default".into(),
        }
    }
}

/// One session: a run of a viewer's requests, `lo..hi` of them, starting at `start`.
struct Piece {
    start: f64,
    viewer: u32,
    lo: u32,
    hi: u32,
}

impl Piece {
    fn new(start: f64, viewer: u32, lo: usize, hi: usize) -> Result<Piece, String> {
        let index = |i: usize| {
            u32::try_from(i)
                .map_err(|_| "more than 4,294,967,295 requests from one viewer".to_string())
        };
        Ok(Piece {
            start,
            viewer,
            lo: index(lo)?,
            hi: index(hi)?,
        })
    }
}

/// Seconds rounded to the microsecond: differences of logged times carry float noise
/// (`0.058000000000000052`) that would otherwise be written out digit by digit.
fn micros(s: f64) -> f64 {
    (s * 1e6).round() / 1e6
}

/// Collects a log's requests and rebuilds sessions from them.
#[derive(Default)]
pub struct SessionRebuilder {
    /// Requests by viewer, keyed by [`viewer_key`] (client and file in one allocation,
    /// made only for a viewer's first request; the hasher is a fast seeded one).
    by_viewer: HashMap<Box<[u8]>, Vec<Seen>, foldhash::fast::RandomState>,
    /// The key of the request being added, reused between requests.
    key: Vec<u8>,
}

/// A viewer's key: the client's length, the client, then the file (unambiguous for any
/// bytes in either).
fn viewer_key(key: &mut Vec<u8>, client: &str, file: &str) {
    key.clear();
    key.extend_from_slice(&(client.len() as u64).to_le_bytes());
    key.extend_from_slice(client.as_bytes());
    key.extend_from_slice(file.as_bytes());
}

/// The (client, file) of a [`viewer_key`].
fn viewer_parts(key: &[u8]) -> (&[u8], &[u8]) {
    let (len, rest) = key.split_at(8.min(key.len()));
    let len = u64::from_le_bytes(len.try_into().unwrap_or([0; 8]));
    rest.split_at(usize::try_from(len).unwrap_or(usize::MAX).min(rest.len()))
}

/// What came out, with the figures a user checks.
#[derive(Clone, Debug, Serialize)]
pub struct FromLogSummary {
    pub requests: u64,
    pub sessions: u64,
    pub files: u64,
    /// Sessions per second in the log (first to last arrival).
    pub log_session_rate: f64,
    pub log_span_s: f64,
    pub idle_s: f64,
    pub bitrate_kbps: u32,
    /// `kept`, `hashed (key given)` or `hashed (random key, not kept)`.
    pub identities: String,
    /// How the streaming rebuild kept within its memory limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamSummary>,
}

/// The rebuilt workload.
pub struct Rebuilt {
    /// The sessions in arrival order, made as they are consumed.
    pub sessions: SessionStream,
    pub catalog: Catalog,
    pub summary: FromLogSummary,
}

/// The rebuilt sessions in arrival order, each made when it is consumed: a large log's
/// session list is written out one line at a time instead of being held whole next to
/// the requests it is made from.
pub struct SessionStream {
    pieces: Pieces,
    out: Out,
    /// A spilled run that could not be read back: the stream ended early.
    error: Option<std::io::Error>,
}

/// What turns a piece into a [`Session`].
struct Out {
    /// File name → (title id, output path with its leading `/`), hashed once per file.
    files: HashMap<String, (u32, String)>,
    next_id: u64,
    prev: f64,
    mean_gap: f64,
    class: String,
    bitrate_kbps: u32,
}

/// Where the sessions come from.
enum Pieces {
    /// Each viewer's file and requests (in arrival order), which the pieces index into:
    /// a session is cut out of them when it is written, not copied beforehand.
    Memory {
        built: std::vec::IntoIter<Piece>,
        viewers: Vec<(String, Vec<Seen>)>,
    },
    /// Finished sessions merged back from memory and spilled runs.
    Sorted(crate::spill::Merged<crate::spill::Piece>),
}

impl SessionStream {
    /// Why the stream ended early, if it did (reading back a spilled run failed).
    pub fn error(&mut self) -> Option<std::io::Error> {
        self.error.take()
    }
}

impl Out {
    fn session(&mut self, start: f64, file: &str, seen: &[Seen]) -> Session {
        let i = self.next_id;
        self.next_id += 1;
        let gap = if i == 0 {
            1.0
        } else {
            (start - self.prev) / self.mean_gap
        };
        self.prev = start;
        let (title, path) = self.files.get(file).cloned().unwrap_or_default();
        let requests = seen
            .iter()
            .enumerate()
            .map(|(j, s)| {
                let range = match s.kind {
                    RequestKind::Chunk => ByteRange::closed(s.offset, s.extent.max(1)),
                    RequestKind::Open => ByteRange::OpenEnded {
                        first: s.offset,
                        read: s.bytes_sent.max(s.extent).max(1),
                    },
                };
                let pacing_s = if j == 0 {
                    0.0
                } else {
                    s.recv_s - seen[j - 1].recv_s
                };
                let next = seen.get(j + 1).map(|n| n.recv_s - s.recv_s);
                let timeout_s = next
                    .unwrap_or(2.0 * (s.done_s - s.recv_s))
                    .max(MIN_TIMEOUT_S);
                Request {
                    pacing_s: micros(pacing_s.max(0.0)),
                    ..Request::new(path.clone(), Some(range), micros(timeout_s))
                }
            })
            .collect();
        Session {
            id: i,
            gap: gap.max(0.0),
            start_s: None,
            class: self.class.clone(),
            title: Some(title),
            bitrate_kbps: Some(self.bitrate_kbps),
            requests,
            live: None,
            play: None,
        }
    }
}

impl Iterator for SessionStream {
    type Item = Session;

    fn next(&mut self) -> Option<Session> {
        match &mut self.pieces {
            Pieces::Memory { built, viewers } => {
                let piece = built.next()?;
                let (file, seen) = &viewers[piece.viewer as usize];
                let seen = &seen[piece.lo as usize..piece.hi as usize];
                Some(self.out.session(piece.start, file, seen))
            }
            Pieces::Sorted(m) => match m.next_record() {
                Ok(Some(p)) => Some(self.out.session(p.start, &p.file, &p.seen)),
                Ok(None) => None,
                Err(e) => {
                    self.error = Some(e);
                    None
                }
            },
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.pieces {
            Pieces::Memory { built, .. } => built.size_hint(),
            Pieces::Sorted(m) => (m.len_hint(), None),
        }
    }
}

impl SessionRebuilder {
    pub fn add(&mut self, r: &LogRequest<'_>) {
        let seen = Seen::of(r);
        viewer_key(&mut self.key, &r.session, r.file);
        match self.by_viewer.get_mut(self.key.as_slice()) {
            Some(list) => list.push(seen),
            None => {
                self.by_viewer
                    .insert(self.key.clone().into_boxed_slice(), vec![seen]);
            }
        }
    }

    /// Split, order and name everything (deterministic for a given log and key).
    pub fn finish(self, opt: &FromLogOptions) -> Result<Rebuilt, String> {
        let namer = Namer::new(opt)?;
        // Files: highest byte reached and request count, in name order.
        let mut files: HashMap<String, (u64, u64)> = HashMap::new();
        let mut by_viewer: Vec<(Box<[u8]>, Vec<Seen>)> = self.by_viewer.into_iter().collect();
        by_viewer.sort_by(|a, b| viewer_parts(&a.0).cmp(&viewer_parts(&b.0)));
        // Split each viewer's requests at idle gaps, in place: a piece is a range of them.
        let mut viewers: Vec<(String, Vec<Seen>)> = Vec::with_capacity(by_viewer.len());
        let mut built: Vec<Piece> = Vec::new();
        let mut requests = 0u64;
        for (key, mut seen) in by_viewer {
            let file = String::from_utf8_lossy(viewer_parts(&key).1).into_owned();
            seen.sort_by(|a, b| a.recv_s.total_cmp(&b.recv_s));
            let viewer = u32::try_from(viewers.len())
                .map_err(|_| "more than 4,294,967,295 viewers in one log".to_string())?;
            let mut lo = 0usize;
            let mut last_done = f64::NEG_INFINITY;
            // One lookup per viewer, not per request (the key is an owned name).
            let f = files.entry(file.clone()).or_default();
            for (i, s) in seen.iter().enumerate() {
                requests += 1;
                f.0 = f.0.max(s.offset + s.extent.max(s.bytes_sent));
                f.1 += 1;
                if i > lo && s.recv_s - last_done > opt.idle_s {
                    built.push(Piece::new(seen[lo].recv_s, viewer, lo, i)?);
                    lo = i;
                }
                last_done = last_done.max(s.done_s);
            }
            if lo < seen.len() {
                built.push(Piece::new(seen[lo].recv_s, viewer, lo, seen.len())?);
            }
            viewers.push((file, seen));
        }
        built.sort_by(|a, b| {
            a.start.total_cmp(&b.start).then_with(|| {
                viewers[a.viewer as usize]
                    .0
                    .cmp(&viewers[b.viewer as usize].0)
            })
        });
        let span = match (built.first(), built.last()) {
            (Some(a), Some(b)) => b.start - a.start,
            _ => 0.0,
        };
        let first = built.first().map_or(0.0, |b| b.start);
        let n = built.len() as u64;
        let (out, catalog, summary) = output(&files, requests, n, first, span, opt, &namer);
        Ok(Rebuilt {
            sessions: SessionStream {
                pieces: Pieces::Memory {
                    built: built.into_iter(),
                    viewers,
                },
                out,
                error: None,
            },
            catalog,
            summary,
        })
    }
}

/// The catalog, the summary and the session writer's state, from what every file saw
/// (highest byte reached, requests) and the sessions' count, first start and span.
fn output(
    files: &HashMap<String, (u64, u64)>,
    requests: u64,
    n: u64,
    first: f64,
    span: f64,
    opt: &FromLogOptions,
    namer: &Namer,
) -> (Out, Catalog, FromLogSummary) {
    // Mean inter-arrival over the log; gaps are scaled to mean 1.
    let mean_gap = if n > 1 { span / (n - 1) as f64 } else { 1.0 };
    let mean_gap = if mean_gap > 0.0 { mean_gap } else { 1.0 };
    // Titles: ranked by requests, ids in name order.
    let mut names: Vec<&String> = files.keys().collect();
    names.sort();
    let ids: HashMap<&String, u32> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (*n, i as u32))
        .collect();
    let mut by_count: Vec<&String> = names.clone();
    by_count.sort_by(|a, b| files[*b].1.cmp(&files[*a].1).then_with(|| a.cmp(b)));
    let ranks: HashMap<&String, u32> = by_count
        .iter()
        .enumerate()
        .map(|(i, n)| (*n, i as u32 + 1))
        .collect();
    let bytes_per_s = f64::from(opt.bitrate_kbps.max(1)) * 1000.0 / 8.0;
    let titles = names
        .iter()
        .map(|name| {
            let size = files[*name].0.max(1);
            Title {
                id: ids[name],
                rank: ranks[name],
                duration_s: size as f64 / bytes_per_s,
                renditions: vec![Rendition::one_file(
                    opt.bitrate_kbps,
                    Media::Combined,
                    namer.path(name),
                    size,
                )],
            }
        })
        .collect();
    let paths: HashMap<String, (u32, String)> = names
        .iter()
        .map(|n| ((*n).clone(), (ids[n], format!("/{}", namer.path(n)))))
        .collect();
    let summary = FromLogSummary {
        requests,
        sessions: n,
        files: files.len() as u64,
        log_session_rate: if span > 0.0 {
            (n.max(1) - 1) as f64 / span
        } else {
            0.0
        },
        log_span_s: span,
        idle_s: opt.idle_s,
        bitrate_kbps: opt.bitrate_kbps,
        identities: namer.describe(),
        stream: None,
    };
    let out = Out {
        files: paths,
        next_id: 0,
        prev: first,
        mean_gap,
        class: opt.class.clone(),
        bitrate_kbps: opt.bitrate_kbps,
    };
    let catalog = Catalog {
        spec: "from-log".into(),
        seed: 0,
        titles,
    };
    (out, catalog, summary)
}

/// Limits of the streaming rebuild.
#[derive(Clone, Debug)]
pub struct StreamOptions {
    /// Longest service time for which the result is guaranteed to be the in-memory one:
    /// a viewer's requests are held until no later line could arrive before them.
    pub max_service_s: f64,
    /// How far a log may be out of completion order (as the reader's tolerance).
    pub order_tolerance_s: f64,
    /// Memory for held requests and finished sessions waiting to be written in order;
    /// past it, finished sessions are spilled to sorted runs under `spill_dir`.
    pub memory_bytes: usize,
    pub spill_dir: std::path::PathBuf,
}

/// What the streaming rebuild held and spilled.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StreamSummary {
    pub memory_limit_bytes: u64,
    /// Most bytes held at once (open viewers' requests and unspilled sessions).
    pub peak_held_bytes: u64,
    pub spilled_bytes: u64,
    pub peak_open_viewers: u64,
    /// Requests that arrived after sessions they could belong to were finished (served for
    /// longer than the max service time, or out of order by more than the tolerance): the
    /// sessions around them may differ from an in-memory rebuild.
    pub late_requests: u64,
}

/// One viewer's requests not yet in a finished session.
struct Open {
    seen: Vec<Seen>,
    /// Whether `seen` is in arrival order (requests come in completion order, which is
    /// arrival order unless one took longer than the one before).
    sorted: bool,
    /// Latest completion of the viewer's finished requests.
    last_done: f64,
}

/// Rebuilds sessions while the log streams by: a viewer's requests are held only until
/// their session can no longer change, then the session is finished and queued (spilled
/// in sorted runs past the memory limit); the result is the one of [`SessionRebuilder`].
pub struct StreamRebuilder {
    opt: FromLogOptions,
    limits: StreamOptions,
    open: HashMap<Box<[u8]>, Open, foldhash::fast::RandomState>,
    key: Vec<u8>,
    files: HashMap<String, (u64, u64)>,
    runs: crate::spill::Runs<crate::spill::Piece>,
    held: usize,
    clock: f64,
    next_sweep: f64,
    /// Requests arriving before this cannot be placed exactly any more.
    finished_before: f64,
    requests: u64,
    pieces: u64,
    first: f64,
    last: f64,
    stats: StreamSummary,
    err: Option<std::io::Error>,
}

/// Clock seconds between two looks for finished sessions.
const SWEEP_S: f64 = 60.0;

impl StreamRebuilder {
    pub fn new(opt: &FromLogOptions, limits: &StreamOptions) -> StreamRebuilder {
        StreamRebuilder {
            opt: opt.clone(),
            limits: limits.clone(),
            open: HashMap::default(),
            key: Vec::new(),
            files: HashMap::new(),
            // Finished sessions get a quarter of the memory; held requests the rest.
            runs: crate::spill::Runs::new(&limits.spill_dir, limits.memory_bytes / 4),
            held: 0,
            clock: f64::NEG_INFINITY,
            next_sweep: f64::NEG_INFINITY,
            finished_before: f64::NEG_INFINITY,
            requests: 0,
            pieces: 0,
            first: f64::INFINITY,
            last: f64::NEG_INFINITY,
            stats: StreamSummary {
                memory_limit_bytes: limits.memory_bytes as u64,
                ..Default::default()
            },
            err: None,
        }
    }

    pub fn add(&mut self, r: &LogRequest<'_>) {
        let seen = Seen::of(r);
        if seen.recv_s < self.finished_before {
            self.stats.late_requests += 1;
        }
        self.clock = self.clock.max(r.done_s);
        viewer_key(&mut self.key, &r.session, r.file);
        let o = match self.open.get_mut(self.key.as_slice()) {
            Some(o) => o,
            None => {
                self.held += self.key.len() + std::mem::size_of::<Open>() + 32;
                self.open
                    .entry(self.key.clone().into_boxed_slice())
                    .or_insert(Open {
                        seen: Vec::new(),
                        sorted: true,
                        last_done: f64::NEG_INFINITY,
                    })
            }
        };
        if o.seen.last().is_some_and(|l| l.recv_s > seen.recv_s) {
            o.sorted = false;
        }
        o.seen.push(seen);
        self.held += std::mem::size_of::<Seen>();
        self.stats.peak_open_viewers = self.stats.peak_open_viewers.max(self.open.len() as u64);
        self.note_peak();
        if self.clock >= self.next_sweep {
            self.sweep(false);
            // Often enough that finished sessions wait little past the horizon, seldom
            // enough that the open ones are not looked at again and again.
            let horizon = self.limits.max_service_s + self.limits.order_tolerance_s;
            self.next_sweep = self.clock + SWEEP_S.max(horizon / 8.0);
        }
    }

    fn note_peak(&mut self) {
        let now = (self.held + self.runs.held()) as u64;
        self.stats.peak_held_bytes = self.stats.peak_held_bytes.max(now);
    }

    /// Finish the sessions no later request can change (all of them when `all`).
    fn sweep(&mut self, all: bool) {
        let w = if all {
            f64::INFINITY
        } else {
            self.clock - self.limits.max_service_s - self.limits.order_tolerance_s
        };
        self.finished_before = self.finished_before.max(w);
        let idle = self.opt.idle_s;
        let mut done_keys = Vec::new();
        for (key, o) in self.open.iter_mut() {
            if !o.sorted {
                o.seen.sort_by(|a, b| a.recv_s.total_cmp(&b.recv_s));
                o.sorted = true;
            }
            // Nothing can be final before the first arrival plus the idle time.
            if o.seen.first().is_none_or(|s| s.recv_s + idle >= w) {
                continue;
            }
            let mut lo = 0usize;
            let mut last_done = o.last_done;
            let mut finished_done = o.last_done;
            let mut cut = Vec::new();
            let mut stopped = false;
            for (i, s) in o.seen.iter().enumerate() {
                if i > lo && s.recv_s - last_done > idle {
                    if s.recv_s >= w {
                        stopped = true;
                        break;
                    }
                    cut.push((lo, i));
                    finished_done = last_done;
                    lo = i;
                }
                last_done = last_done.max(s.done_s);
            }
            // The last piece is complete when every request was looked at and the next
            // one, arriving at `w` or later, would start a new piece.
            let whole = !stopped && lo < o.seen.len() && (all || last_done + idle < w);
            if whole {
                cut.push((lo, o.seen.len()));
                finished_done = last_done;
            }
            if cut.is_empty() {
                continue;
            }
            let end = cut.last().map_or(0, |c| c.1);
            let rest = o.seen.split_off(end);
            let taken = std::mem::replace(&mut o.seen, rest);
            o.last_done = finished_done;
            let (client, file) = viewer_parts(key);
            let file = String::from_utf8_lossy(file).into_owned();
            for (a, b) in cut {
                let piece = crate::spill::Piece {
                    start: taken[a].recv_s,
                    client: client.to_vec(),
                    file: file.clone(),
                    seen: taken[a..b].to_vec(),
                };
                self.held = self
                    .held
                    .saturating_sub((b - a) * std::mem::size_of::<Seen>());
                self.first = self.first.min(piece.start);
                self.last = self.last.max(piece.start);
                self.pieces += 1;
                let f = self.files.entry(file.clone()).or_default();
                for s in &piece.seen {
                    self.requests += 1;
                    f.0 = f.0.max(s.offset + s.extent.max(s.bytes_sent));
                    f.1 += 1;
                }
                if self.err.is_none() {
                    if let Err(e) = self.runs.push(piece) {
                        self.err = Some(e);
                    }
                }
            }
            if o.seen.is_empty() {
                done_keys.push(key.clone());
            }
        }
        for k in done_keys {
            self.held = self
                .held
                .saturating_sub(k.len() + std::mem::size_of::<Open>() + 32);
            self.open.remove(&k);
        }
        self.note_peak();
    }

    /// Finish every session and order them.
    pub fn finish(mut self) -> Result<Rebuilt, String> {
        self.sweep(true);
        if let Some(e) = self.err.take() {
            return Err(format!("spilling sessions: {e}"));
        }
        let namer = Namer::new(&self.opt)?;
        let span = if self.pieces > 0 {
            self.last - self.first
        } else {
            0.0
        };
        let first = if self.pieces > 0 { self.first } else { 0.0 };
        let (out, catalog, mut summary) = output(
            &self.files,
            self.requests,
            self.pieces,
            first,
            span,
            &self.opt,
            &namer,
        );
        self.stats.spilled_bytes = self.runs.spilled;
        summary.stream = Some(self.stats);
        let merged = self
            .runs
            .finish()
            .map_err(|e| format!("spilling sessions: {e}"))?;
        Ok(Rebuilt {
            sessions: SessionStream {
                pieces: Pieces::Sorted(merged),
                out,
                error: None,
            },
            catalog,
            summary,
        })
    }
}

/// Names files in the output: as logged, or by a keyed hash.
struct Namer {
    key: Option<ring::hmac::Key>,
    random: bool,
}

impl Namer {
    fn new(opt: &FromLogOptions) -> Result<Namer, String> {
        if opt.keep_identities {
            return Ok(Namer {
                key: None,
                random: false,
            });
        }
        let (bytes, random) = match &opt.key {
            Some(k) => (k.clone(), false),
            None => {
                let mut k = vec![0u8; 32];
                ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut k)
                    .map_err(|_| "no random key for hashing identities: pass --key".to_string())?;
                (k, true)
            }
        };
        Ok(Namer {
            key: Some(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes)),
            random,
        })
    }

    /// The file's path in the output (relative, no leading slash).
    fn path(&self, name: &str) -> String {
        match &self.key {
            None => name.to_string(),
            Some(k) => {
                let tag = ring::hmac::sign(k, name.as_bytes());
                let hex: String = tag.as_ref()[..12]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                format!("f/{hex}")
            }
        }
    }

    fn describe(&self) -> String {
        match (&self.key, self.random) {
            (None, _) => "kept".into(),
            (Some(_), false) => "hashed (key given)".into(),
            (Some(_), true) => {
                "hashed (random key, not kept: a second run names files differently)".into()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    fn req(
        client: &str,
        file: &'static str,
        recv: f64,
        offset: u64,
        len: u64,
    ) -> (String, LogRequest<'static>) {
        (
            client.to_string(),
            LogRequest {
                done_s: recv + 0.5,
                service_s: 0.5,
                session: Cow::Owned(client.to_string()),
                file,
                offset,
                extent: len,
                kind: RequestKind::Chunk,
                bytes_sent: len,
                conn: None,
            },
        )
    }

    /// The default options, keeping client addresses and file names.
    fn kept() -> FromLogOptions {
        FromLogOptions {
            keep_identities: true,
            ..Default::default()
        }
    }

    fn rebuild(reqs: &[(String, LogRequest<'static>)], opt: &FromLogOptions) -> Rebuilt {
        let mut b = SessionRebuilder::default();
        for (_, r) in reqs {
            b.add(r);
        }
        b.finish(opt).unwrap()
    }

    #[test]
    fn sessions_are_split_by_client_file_and_idle_time() {
        let reqs = vec![
            req("a", "v1.mp4", 100.0, 0, 1000),
            req("a", "v1.mp4", 104.0, 1000, 1000),
            req("b", "v1.mp4", 101.0, 0, 500),
            // a comes back to v1 after 200 s: a new session.
            req("a", "v1.mp4", 304.0, 5000, 1000),
            req("a", "v2.mp4", 102.0, 0, 2000),
        ];
        let opt = kept();
        let r = rebuild(&reqs, &opt);
        assert_eq!(r.sessions.size_hint(), (4, Some(4)));
        let sessions: Vec<Session> = r.sessions.collect();
        assert_eq!(r.summary.sessions, 4);
        assert_eq!(r.summary.requests, 5);
        assert_eq!(r.summary.files, 2);
        // In arrival order: a/v1 (100), b/v1 (101), a/v2 (102), a/v1 again (304).
        let starts: Vec<(&str, usize)> = sessions
            .iter()
            .map(|s| (s.requests[0].path.as_str(), s.requests.len()))
            .collect();
        assert_eq!(
            starts,
            vec![
                ("/v1.mp4", 2),
                ("/v1.mp4", 1),
                ("/v2.mp4", 1),
                ("/v1.mp4", 1)
            ]
        );
        let first = &sessions[0];
        assert_eq!(first.requests[1].pacing_s, 4.0);
        assert_eq!(first.requests[1].range, Some(ByteRange::closed(1000, 1000)));
        // Timeout: the gap to the next request, at least the minimum.
        assert_eq!(first.requests[0].timeout_s, MIN_TIMEOUT_S);
        // Gaps scaled to mean 1 over the log: arrivals 100, 101, 102, 304 (mean gap 68).
        let gaps: Vec<f64> = sessions.iter().map(|s| s.gap).collect();
        let ids: Vec<u64> = sessions.iter().map(|s| s.id).collect();
        assert_eq!(ids, [0, 1, 2, 3]);
        assert!((gaps[1] - 1.0 / 68.0).abs() < 1e-9, "{gaps:?}");
        assert!((gaps[3] - 202.0 / 68.0).abs() < 1e-9, "{gaps:?}");
        assert!((r.summary.log_session_rate - 3.0 / 204.0).abs() < 1e-12);
        // The catalog: v1 reached byte 6000, ranked first (4 requests against 1).
        let v1 = r
            .catalog
            .titles
            .iter()
            .find(|t| t.renditions[0].files[0].path == "v1.mp4")
            .unwrap();
        assert_eq!(v1.renditions[0].size_bytes, 6000);
        assert_eq!(v1.rank, 1);
        assert_eq!(r.summary.identities, "kept");
    }

    #[test]
    fn streaming_with_spills_gives_the_in_memory_sessions() {
        let mut reqs = vec![
            req("a", "v1.mp4", 100.0, 0, 1000),
            req("a", "v1.mp4", 104.0, 1000, 1000),
            req("b", "v1.mp4", 101.0, 0, 500),
            req("a", "v2.mp4", 102.0, 0, 2000),
        ];
        for i in 0..300u64 {
            let client = ["a", "b", "c"][(i % 3) as usize];
            reqs.push(req(client, "v3.mp4", 200.0 + i as f64 * 7.0, i * 10, 10));
        }
        reqs.push(req("a", "v1.mp4", 3000.0, 5000, 1000));
        let opt = kept();
        let json = |r: Rebuilt| -> Vec<String> {
            r.sessions
                .map(|s| serde_json::to_string(&s).unwrap())
                .collect()
        };
        let want = json(rebuild(&reqs, &opt));
        let dir = tempfile::tempdir().unwrap();
        for memory_bytes in [1, 4000, usize::MAX / 8] {
            let limits = StreamOptions {
                max_service_s: 1.0,
                order_tolerance_s: 0.0,
                memory_bytes,
                spill_dir: dir.path().to_path_buf(),
            };
            let mut b = StreamRebuilder::new(&opt, &limits);
            for (_, r) in &reqs {
                b.add(r);
            }
            let r = b.finish().unwrap();
            let stream = r.summary.stream.clone().unwrap();
            assert_eq!(stream.spilled_bytes > 0, memory_bytes < 10_000);
            assert_eq!(stream.late_requests, 0);
            assert_eq!(r.summary.sessions, want.len() as u64);
            assert_eq!(json(r), want, "memory {memory_bytes}");
        }
    }

    #[test]
    fn viewers_are_keyed_apart_and_times_are_written_without_float_noise() {
        // Client "ab" reading "c" and client "a" reading "bc" are different viewers.
        let reqs = vec![
            req("ab", "c", 100.0, 0, 10),
            req("ab", "c", 100.058, 10, 10),
            req("a", "bc", 100.5, 0, 10),
        ];
        let opt = kept();
        let sessions: Vec<Session> = rebuild(&reqs, &opt).sessions.collect();
        assert_eq!(sessions.len(), 2);
        assert_eq!(sessions[0].requests[0].path, "/c");
        assert_eq!(sessions[1].requests[0].path, "/bc");
        // 100.058 - 100.0 is 0.05799999999999983 in binary; it is written as 0.058, and
        // the zero fields (first pacing, connection 0, no media time) not at all.
        let line = serde_json::to_string(&sessions[0]).unwrap();
        assert!(line.contains(r#""pacing_s":0.058,"#), "{line}");
        assert!(
            !line.contains("conn") && !line.contains("media_s"),
            "{line}"
        );
        assert_eq!(line.matches("pacing_s").count(), 1, "{line}");
        let back: Session = serde_json::from_str(&line).unwrap();
        assert_eq!(back.requests[0].pacing_s, 0.0);
        assert_eq!(back.requests[1].conn, 0);
    }

    #[test]
    fn identities_are_hashed_with_the_key_and_deterministic() {
        let reqs = vec![req("a", "secret/title.mp4", 1.0, 0, 10)];
        let keyed = |k: &str| FromLogOptions {
            key: Some(k.as_bytes().to_vec()),
            ..Default::default()
        };
        let mut a = rebuild(&reqs, &keyed("k1"));
        let mut b = rebuild(&reqs, &keyed("k1"));
        let mut c = rebuild(&reqs, &keyed("k2"));
        let path = |r: &mut Rebuilt| r.sessions.next().unwrap().requests[0].path.clone();
        let pa = path(&mut a);
        assert_eq!(pa, path(&mut b));
        assert_ne!(pa, path(&mut c));
        assert!(!pa.contains("secret"));
        assert!(pa.starts_with("/f/") && pa.len() == 3 + 24, "{pa}");
        assert_eq!(
            format!("/{}", a.catalog.titles[0].renditions[0].files[0].path),
            pa
        );
        assert_eq!(a.summary.identities, "hashed (key given)");
        let random = rebuild(&reqs, &FromLogOptions::default());
        assert!(random.summary.identities.starts_with("hashed (random key"));
    }
}
