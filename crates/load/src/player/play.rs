//! One adaptive-player session (`vodkit load --player`): fetch the manifest, then one segment
//! at a time, each from the rendition the ABR rule picks, keeping a playout buffer that
//! drains in real time once playback has started; waiting when the buffer is full,
//! stalling when it runs dry; a segment download that falls too far behind is given up for a
//! lower rendition ([`abr::Abandon`]). Everything it fetched becomes the session's request list, so
//! the run's statistics, QoS model and CSV treat it like any replayed session; what only a
//! player knows (renditions chosen, switches, its own start-up and stalls) goes into
//! [`PlayerOutcome`]. Under `--verify` a player first fetches its title's checksum sidecar
//! (`/tID/pieces.json`, written by `vodkit fileset create --media`) and checks the CRC-32
//! of every init segment and media segment it receives against it.

use super::abr::{self, Abr};
use super::manifest::{self, Piece, Presentation, Segment, Segments};
use super::{PlayerConfig, Protocol};
use crate::http::{Ask, Conn};
use crate::record::{
    FailureReason, PlayerOutcome, RequestRecord, SessionEnd, SessionRecord, Stretch,
};
use crate::viewer::{fetch, Plan, Shared, Viewer};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::time::Instant;
use vodkit_workload::model::{ByteRange, Request, Seek, Session};

/// Largest manifest, playlist or index kept in memory.
pub const MAX_TEXT_BYTES: usize = 8 << 20;

/// How often a watched download's progress is looked at (the abandon rule).
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Looks at a download in progress (bytes received, seconds since it was sent) and says
/// whether to give it up; it has nothing to say before `first_s` (most downloads end
/// before then, and never wake the player).
#[derive(Clone, Copy)]
pub(super) struct Watch<'w> {
    pub(super) check: &'w (dyn Fn(u64, f64) -> bool + Sync),
    pub(super) first_s: f64,
}

/// What a fetch brought: the body when kept, bytes received, seconds taken, and whether the
/// player gave the download up (then the bytes are what had arrived).
pub(super) struct Got {
    pub(super) body: Vec<u8>,
    pub(super) bytes: u64,
    pub(super) secs: f64,
    pub(super) abandoned: bool,
}

/// One request of [`Player::fetch_slots`].
pub(super) struct Want<'s> {
    pub(super) piece: &'s Piece,
    pub(super) media_s: f64,
    pub(super) timeout_s: f64,
    /// Keep the body (a playlist or manifest).
    pub(super) keep: bool,
    /// The viewer's connection index it goes on.
    pub(super) slot: u32,
    /// Sees each run of body bytes as it arrives.
    pub(super) sink: Option<crate::http::BodySink<'s, 's>>,
}

impl<'s> Want<'s> {
    /// `piece` on connection index 0, its body not kept.
    pub(super) fn new(piece: &'s Piece, media_s: f64, timeout_s: f64) -> Want<'s> {
        Want {
            piece,
            media_s,
            timeout_s,
            keep: false,
            slot: 0,
            sink: None,
        }
    }
}

/// A request of [`Player::fetch_slots`] that did not complete: its status (0: no response)
/// and how the session ends if the caller does not take it in its stride.
#[derive(Debug)]
pub(super) struct Miss {
    pub(super) status: u16,
    pub(super) end: SessionEnd,
}

/// Smallest part a download is split into: a piece shorter than two of them goes on one
/// connection.
const MIN_PART_BYTES: u64 = 16 << 10;

/// The byte range `a..=b` cut into at most `n` consecutive parts of (nearly) equal size,
/// none shorter than [`MIN_PART_BYTES`].
fn split((a, b): (u64, u64), n: u32) -> Vec<(u64, u64)> {
    let len = b.saturating_sub(a) + 1;
    let n = u64::from(n).min(len / MIN_PART_BYTES).max(1);
    let (base, extra) = (len / n, len % n);
    let mut out = Vec::with_capacity(n as usize);
    let mut at = a;
    for k in 0..n {
        let l = base + u64::from(k < extra);
        out.push((at, at + l - 1));
        at += l;
    }
    out
}

/// Run a download to its end or, with a watch, until the watch gives it up (`None`).
async fn watched<F: std::future::Future>(
    fetching: F,
    watch: Option<Watch<'_>>,
    start: Instant,
    received: &std::sync::atomic::AtomicU64,
) -> Option<F::Output> {
    let Some(watch) = watch else {
        return Some(fetching.await);
    };
    tokio::pin!(fetching);
    let first = crate::config::secs(watch.first_s.max(0.0)).max(WATCH_EVERY);
    let mut tick = tokio::time::interval_at(start + first, WATCH_EVERY);
    loop {
        tokio::select! {
            f = &mut fetching => return Some(f),
            _ = tick.tick() => {
                if (watch.check)(received.load(Ordering::Relaxed), start.elapsed().as_secs_f64()) {
                    return None;
                }
            }
        }
    }
}

/// The manifest a session plays: the one it names, else its title's in the media-set layout.
pub fn manifest_path(session: &Session, protocol: Protocol) -> Option<String> {
    let title = session.title?;
    let entry = match protocol {
        Protocol::Dash => "manifest.mpd",
        Protocol::Hls => "master.m3u8",
    };
    Some(format!(
        "/{}/{entry}",
        vodkit_media::package::title_dir(title)
    ))
}

/// Seconds of media the session watches: the media time its log requests carry.
pub fn watch_seconds(session: &Session) -> f64 {
    session.requests.iter().map(|r| r.media_s).sum()
}

/// A session's connection and everything it fetched; shared by the on-demand player and
/// the live viewer ([`super::live`]).
pub(super) struct Player<'a> {
    pub(super) plan: &'a Plan,
    pub(super) shared: &'a Shared,
    viewer: Viewer,
    conn: Option<Conn>,
    server_closed: bool,
    /// Connections 1.. of a player spreading byte-range downloads over several (each with
    /// its server-closed flag); connection 0 is `conn`.
    more: Vec<(Option<Conn>, bool)>,
    /// Connections a byte-range segment download is spread over (1: one at a time).
    connections: u32,
    made: Vec<Request>,
    records: Vec<RequestRecord>,
    opened: u32,
    reconnects: u32,
    /// `--verify`: (path without the leading `/`, offset) → (length, CRC-32) of every piece
    /// of the title, from its sidecar.
    checksums: Option<HashMap<(String, u64), (u64, u32)>>,
}

/// Playout buffer and stall accounting on the caller's clock (seconds since the session began).
#[derive(Debug, Default)]
pub(super) struct Buffer {
    pub(super) level_s: f64,
    pub(super) playing: bool,
    pub(super) started: bool,
    /// Stalled after start-up, waiting for the buffer to refill.
    pub(super) stalled: bool,
    pub(super) last: f64,
    pub(super) stalls: u32,
    pub(super) stall_s: f64,
    /// Length of each stall that ended (how late the content it waited for arrived).
    pub(super) stall_lengths: Vec<f64>,
    /// When the current stall began.
    pub(super) stall_began: f64,
    /// Seconds of media played so far.
    pub(super) played_s: f64,
    /// Playback rate minus 1 (0: real time; a live viewer's catch-up plays a little faster
    /// or slower).
    pub(super) speedup: f64,
    /// Seconds of media played beyond the wall-clock time it took (negative: behind).
    pub(super) gained_s: f64,
}

impl Buffer {
    /// Let time pass until `now`.
    pub(super) fn advance(&mut self, now: f64) {
        let dt = (now - self.last).max(0.0);
        self.last = now;
        if self.playing {
            let rate = 1.0 + self.speedup;
            let played = (dt * rate).min(self.level_s);
            self.played_s += played;
            self.gained_s += played - played / rate;
            self.level_s -= dt * rate;
            if self.level_s < 0.0 {
                // The buffer ran dry `level / rate` seconds ago (wall clock).
                let dry = -self.level_s / rate;
                self.stall_s += dry;
                self.stall_began = now - dry;
                self.level_s = 0.0;
                self.playing = false;
                self.stalled = true;
                self.stalls += 1;
            }
        } else if self.stalled {
            self.stall_s += dt;
        }
    }

    /// A seek at `now`: the buffered media is dropped and playback waits for new media
    /// (not a stall).
    pub(super) fn seek(&mut self, now: f64) {
        self.advance(now);
        self.level_s = 0.0;
        self.playing = false;
        self.stalled = false;
    }

    /// A segment of `dur` seconds arrived at `now`; playback (re)starts once `resume_s` is
    /// buffered or nothing more will come.
    pub(super) fn add(&mut self, now: f64, dur: f64, resume_s: f64, last: bool) -> Option<f64> {
        self.advance(now);
        self.level_s += dur;
        if !self.playing && (self.level_s + 1e-9 >= resume_s || last) {
            self.playing = true;
            if self.stalled {
                self.stall_lengths.push(now - self.stall_began);
            }
            self.stalled = false;
            if !self.started {
                self.started = true;
                return Some(now);
            }
        }
        None
    }
}

/// Where the player fetches next.
#[derive(Debug, Default)]
struct Place {
    period: usize,
    /// The period's renditions' init pieces and segments, each resolved when first needed.
    resolved: Vec<Option<(Option<Piece>, Vec<Segment>)>>,
    /// The rendition whose init piece the player holds.
    init_of: Option<usize>,
    segment: usize,
    /// Media position of `segment` in the title (seconds).
    media_at: f64,
    /// Past the last segment of the last period.
    ended: bool,
}

impl Place {
    fn enter(&mut self, period: usize, renditions: usize, start_s: f64) {
        *self = Place {
            period,
            resolved: vec![None; renditions],
            init_of: None,
            segment: 0,
            media_at: start_s,
            ended: false,
        };
    }

    /// On to the next period's first segment, or to the end of the title.
    fn next_period(&mut self, p: &Presentation) {
        match p.periods.get(self.period + 1) {
            Some(next) => self.enter(self.period + 1, next.renditions.len(), self.media_at),
            None => self.ended = true,
        }
    }
}

/// A viewer's progress through its `play` spec: the media counted towards its watch time,
/// and the seeks still to come.
#[derive(Debug)]
struct Viewing {
    watch_s: f64,
    /// Media played before the latest seek, and media fetched since it.
    credited: f64,
    fetched_since: f64,
    /// [`Buffer::played_s`] at the latest seek.
    played_at_seek: f64,
    seeks: std::collections::VecDeque<Seek>,
    /// When the seek in progress began (until playback resumes).
    seeking: Option<f64>,
}

impl Viewing {
    fn new(seeks: Vec<Seek>, watch_s: f64) -> Viewing {
        Viewing {
            watch_s,
            credited: 0.0,
            fetched_since: 0.0,
            played_at_seek: 0.0,
            seeks: seeks.into(),
            seeking: None,
        }
    }

    /// Enough media fetched to play out the watch time.
    fn enough(&self) -> bool {
        self.credited + self.fetched_since + 1e-9 >= self.watch_s
    }

    /// Seconds of playback until the next seek falls due (≤ 0: now); `None` without one, or
    /// when the watch time ends before it.
    fn due_in(&self, buf: &Buffer) -> Option<f64> {
        let next = self.seeks.front()?;
        if self.credited + next.after_s >= self.watch_s - 1e-9 {
            return None;
        }
        Some(next.after_s - (buf.played_s - self.played_at_seek))
    }

    /// Make the next seek at `now`: the buffer is dropped and the media played since the
    /// previous one counts; returns the position to continue from.
    fn seek(&mut self, buf: &mut Buffer, now: f64, out: &mut PlayerOutcome) -> Option<f64> {
        let next = self.seeks.pop_front()?;
        buf.seek(now);
        self.credited += buf.played_s - self.played_at_seek;
        self.fetched_since = 0.0;
        self.played_at_seek = buf.played_s;
        self.seeking = Some(now);
        out.seeks += 1;
        Some(next.to_s)
    }
}

impl<'a> Player<'a> {
    /// A request that completed: counted in the run's live status, and what it brought.
    fn completed(&self, body: Vec<u8>, bytes: u64, secs: f64) -> Got {
        self.shared
            .live
            .completed_requests
            .fetch_add(1, Ordering::Relaxed);
        Got {
            body,
            bytes,
            secs,
            abandoned: false,
        }
    }

    /// A player for `plan`'s session (the lease keeps its network-namespace address).
    pub(super) fn new(
        plan: &'a Plan,
        shared: &'a Arc<Shared>,
    ) -> (Player<'a>, Option<crate::netns::Lease>) {
        let (viewer, lease) = Viewer::of(plan, shared);
        let p = Player {
            plan,
            shared,
            viewer,
            conn: None,
            server_closed: false,
            more: Vec::new(),
            connections: 1,
            made: Vec::new(),
            records: Vec::new(),
            opened: 0,
            reconnects: 0,
            checksums: None,
        };
        (p, lease)
    }

    /// The session's record: what it fetched, how it ended, what the player saw.
    pub(super) fn finish(self, end: SessionEnd, outcome: PlayerOutcome) -> SessionRecord {
        let mut session = (*self.plan.session).clone();
        session.requests = self.made;
        SessionRecord {
            index: self.plan.index,
            session: Arc::new(session),
            arrival: self.plan.arrival,
            end,
            requests: self.records,
            skipped: 0,
            connections_opened: self.opened,
            reconnects: self.reconnects,
            player: Some(outcome),
            prefilled: self.plan.prefilled,
            probe: self.plan.probe,
        }
    }

    pub(super) fn now(&self) -> f64 {
        self.shared.t0.elapsed().as_secs_f64()
    }

    /// Fetch a piece; its body is returned when `keep` (manifests, playlists, indexes).
    pub(super) async fn get(
        &mut self,
        piece: &Piece,
        media_s: f64,
        timeout_s: f64,
        keep: bool,
    ) -> Result<(Vec<u8>, u64, f64), SessionEnd> {
        let g = self
            .fetch_watched(piece, media_s, timeout_s, keep, None)
            .await?;
        Ok((g.body, g.bytes, g.secs))
    }

    /// Fetch a piece while `watch` (if any) looks at its progress every [`WATCH_EVERY`]; a
    /// download it gives up is cut (its connection closed, as a browser's abort does) and
    /// recorded as unfinished, neither completed nor failed.
    pub(super) async fn fetch_watched(
        &mut self,
        piece: &Piece,
        media_s: f64,
        timeout_s: f64,
        keep: bool,
        watch: Option<Watch<'_>>,
    ) -> Result<Got, SessionEnd> {
        if let Some(whole) = piece.range.filter(|_| !keep && self.connections > 1) {
            let parts = split(whole, self.connections);
            if parts.len() > 1 {
                return self
                    .fetch_parts(piece, &parts, media_s, timeout_s, watch)
                    .await;
            }
        }
        let start = Instant::now();
        let range = piece.range.map(|(a, b)| ByteRange::closed(a, b - a + 1));
        let ask = Ask {
            path: &piece.path,
            range,
            host: &self.shared.host,
            session_id: self.plan.session.id,
            verify: false,
            sign: self.shared.sign.as_ref(),
        };
        let offset = piece.range.map_or(0, |(a, _)| a);
        let expected = self.checksum_of(piece, offset);
        let mut body = Vec::new();
        let mut overflow = false;
        let mut crc = crc32fast::Hasher::new();
        let received = std::sync::atomic::AtomicU64::new(0);
        let mut sink = |chunk: &[u8]| {
            received.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            if expected.is_some() {
                crc.update(chunk);
            }
            if keep {
                if body.len() + chunk.len() <= MAX_TEXT_BYTES {
                    body.extend_from_slice(chunk);
                } else {
                    overflow = true;
                }
            }
        };
        let sink: Option<crate::http::BodySink<'_, '_>> =
            if keep || expected.is_some() || watch.is_some() {
                Some(&mut sink)
            } else {
                None
            };
        let conn = self.conn.take();
        let fetching = fetch(
            conn,
            self.server_closed,
            &ask,
            timeout_s,
            self.plan,
            self.shared,
            &self.viewer,
            start,
            sink,
        );
        let Some(mut f) = watched(fetching, watch, start, &received).await else {
            // The fetch (and its connection) was dropped above, as a browser's abort closes it.
            self.conn = None;
            self.server_closed = false;
            let got = received.load(Ordering::Relaxed);
            return Ok(self.abandoned(piece, range, timeout_s, start, got));
        };
        self.conn = f.conn.take();
        self.server_closed = f.server_closed;
        self.opened += f.opened;
        self.reconnects += f.reconnects;
        let mut req = Request::new(piece.path.clone(), range, timeout_s);
        req.media_s = media_s;
        self.made.push(req);
        let mut failure = f.failure.take();
        if failure.is_none() && overflow {
            failure = Some(crate::record::Failure::new(
                FailureReason::Protocol,
                format!("{}: larger than {MAX_TEXT_BYTES} bytes", piece.path),
            ));
        }
        if let (None, Some((len, want))) = (&failure, expected) {
            let got = crc.finalize();
            if f.progress.bytes != len || got != want {
                failure = Some(crate::record::Failure::new(
                    FailureReason::Mismatch,
                    format!(
                        "{} at {offset}: {} bytes with CRC-32 {got:08x}, the sidecar says {len} bytes with {want:08x}",
                        piece.path, f.progress.bytes
                    ),
                ));
            }
        }
        let end = failure.as_ref().map(SessionEnd::after);
        let started = start.duration_since(self.shared.t0).as_secs_f64();
        let index = self.records.len() as u32;
        self.records
            .push(f.record(index, 0, started, failure, media_s, 0.0));
        match end {
            Some(e) => Err(e),
            None => Ok(self.completed(body, f.progress.bytes, f.elapsed)),
        }
    }

    /// Fetch a byte-range piece as `parts`, each on its own connection at the same time
    /// (thesis Table 5.3: a Netflix client spread a download over up to six), sharing the
    /// viewer's link. Each part is a request of its own (its connection's index in the
    /// record, its share of the media time); the piece is done when every part is, and
    /// `watch` looks at the bytes of all of them. Under `--verify` the parts' CRC-32s are
    /// combined in order and checked against the sidecar's for the whole piece.
    async fn fetch_parts(
        &mut self,
        piece: &Piece,
        parts: &[(u64, u64)],
        media_s: f64,
        timeout_s: f64,
        watch: Option<Watch<'_>>,
    ) -> Result<Got, SessionEnd> {
        let start = Instant::now();
        let offset = piece.range.map_or(0, |(a, _)| a);
        let expected = self.checksum_of(piece, offset);
        let n = parts.len();
        while self.more.len() + 1 < n {
            self.more.push((None, false));
        }
        let mut conns = vec![(self.conn.take(), self.server_closed)];
        conns.extend(self.more.iter_mut().take(n - 1).map(|c| (c.0.take(), c.1)));
        let (plan, shared, viewer) = (self.plan, self.shared, &self.viewer);
        let asks: Vec<Ask<'_>> = parts
            .iter()
            .map(|&(a, b)| Ask {
                path: &piece.path,
                range: Some(ByteRange::closed(a, b - a + 1)),
                host: &shared.host,
                session_id: plan.session.id,
                verify: false,
                sign: shared.sign.as_ref(),
            })
            .collect();
        let received = std::sync::atomic::AtomicU64::new(0);
        let checked = expected.is_some();
        let counted = checked || watch.is_some();
        let mut crcs = vec![crc32fast::Hasher::new(); n];
        let mut sinks: Vec<_> = crcs
            .iter_mut()
            .map(|crc| {
                let received = &received;
                move |chunk: &[u8]| {
                    received.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                    if checked {
                        crc.update(chunk);
                    }
                }
            })
            .collect();
        let fetching =
            futures_util::future::join_all(conns.into_iter().zip(&asks).zip(sinks.iter_mut()).map(
                |(((conn, closed), ask), sink)| {
                    let sink: Option<crate::http::BodySink<'_, '_>> =
                        if counted { Some(sink) } else { None };
                    fetch(
                        conn, closed, ask, timeout_s, plan, shared, viewer, start, sink,
                    )
                },
            ));
        let done = watched(fetching, watch, start, &received).await;
        drop(sinks);
        let Some(done) = done else {
            // Every part (and its connection) was dropped, as a browser's abort closes them.
            self.conn = None;
            self.server_closed = false;
            self.more.iter_mut().for_each(|c| *c = (None, false));
            let got = received.load(Ordering::Relaxed);
            let range = piece.range.map(|(a, b)| ByteRange::closed(a, b - a + 1));
            return Ok(self.abandoned(piece, range, timeout_s, start, got));
        };
        let whole: u64 = parts.iter().map(|(a, b)| b - a + 1).sum();
        let mut bytes = 0u64;
        let mut secs = 0f64;
        let mut end = None;
        let mut all_ok = true;
        for (k, (mut f, &(a, b))) in done.into_iter().zip(parts).enumerate() {
            if k == 0 {
                self.conn = f.conn.take();
                self.server_closed = f.server_closed;
            } else {
                self.more[k - 1] = (f.conn.take(), f.server_closed);
            }
            self.opened += f.opened;
            self.reconnects += f.reconnects;
            let share = media_s * (b - a + 1) as f64 / whole.max(1) as f64;
            let range = Some(ByteRange::closed(a, b - a + 1));
            let mut req = Request::new(piece.path.clone(), range, timeout_s);
            req.media_s = share;
            req.conn = k as u32;
            self.made.push(req);
            bytes += f.progress.bytes;
            secs = secs.max(f.elapsed);
            all_ok &= f.failure.is_none();
            if end.is_none() {
                end = f.failure.as_ref().map(SessionEnd::after);
            }
            if f.failure.is_none() {
                self.shared
                    .live
                    .completed_requests
                    .fetch_add(1, Ordering::Relaxed);
            }
            let started = start.duration_since(self.shared.t0).as_secs_f64();
            let index = self.records.len() as u32;
            let failure = f.failure.take();
            self.records
                .push(f.record(index, k as u32, started, failure, share, 0.0));
        }
        if let (true, Some((len, want))) = (all_ok, expected) {
            let mut crc = crc32fast::Hasher::new();
            for part in &crcs {
                crc.combine(part);
            }
            let got = crc.finalize();
            if bytes != len || got != want {
                let failure = crate::record::Failure::new(
                    FailureReason::Mismatch,
                    format!(
                        "{} at {offset}: {bytes} bytes in {n} parts with CRC-32 {got:08x}, the sidecar says {len} bytes with {want:08x}",
                        piece.path
                    ),
                );
                if let Some(last) = self.records.last_mut() {
                    last.failure = Some(failure);
                }
                end = Some(SessionEnd::Failed(FailureReason::Mismatch));
            }
        }
        match end {
            Some(e) => Err(e),
            None => Ok(Got {
                body: Vec::new(),
                bytes,
                secs,
                abandoned: false,
            }),
        }
    }

    /// The connection of index `slot` (0: the player's own), taken out while a request
    /// uses it, with its server-closed flag.
    fn take_slot(&mut self, slot: u32) -> (Option<Conn>, bool) {
        match slot {
            0 => (self.conn.take(), std::mem::take(&mut self.server_closed)),
            k => {
                let k = k as usize - 1;
                while self.more.len() <= k {
                    self.more.push((None, false));
                }
                (self.more[k].0.take(), std::mem::take(&mut self.more[k].1))
            }
        }
    }

    fn put_slot(&mut self, slot: u32, conn: Option<Conn>, closed: bool) {
        match slot {
            0 => (self.conn, self.server_closed) = (conn, closed),
            k => self.more[k as usize - 1] = (conn, closed),
        }
    }

    /// Run `wants` at once, each on its connection index (HTTP/1.1: a connection each, as
    /// a player holds a second one for a request the origin keeps waiting; HTTP/2: streams
    /// of the viewer's one connection), and record them all. Each result is the body (when
    /// kept) or what made the request miss: its status, and how the session ends if the
    /// caller does not take it in its stride (a hinted part the origin does not have yet, a
    /// blocking reload answered 503).
    pub(super) async fn fetch_slots(&mut self, mut wants: Vec<Want<'_>>) -> Vec<Result<Got, Miss>> {
        let start = Instant::now();
        let conns: Vec<_> = wants
            .iter()
            .map(|w| w.slot)
            .collect::<Vec<_>>()
            .into_iter()
            .map(|s| self.take_slot(s))
            .collect();
        let (plan, shared, viewer) = (self.plan, self.shared, &self.viewer);
        let asks: Vec<Ask<'_>> = wants
            .iter()
            .map(|w| Ask {
                path: &w.piece.path,
                range: None,
                host: &shared.host,
                session_id: plan.session.id,
                verify: false,
                sign: shared.sign.as_ref(),
            })
            .collect();
        let mut bodies: Vec<(Vec<u8>, bool)> = vec![(Vec::new(), false); wants.len()];
        let mut sinks: Vec<_> = bodies
            .iter_mut()
            .zip(wants.iter_mut())
            .map(|((body, overflow), w)| {
                let keep = w.keep;
                let mut user = w.sink.take();
                move |chunk: &[u8]| {
                    if keep {
                        if body.len() + chunk.len() <= MAX_TEXT_BYTES {
                            body.extend_from_slice(chunk);
                        } else {
                            *overflow = true;
                        }
                    }
                    if let Some(u) = user.as_mut() {
                        u(chunk);
                    }
                }
            })
            .collect();
        let done = futures_util::future::join_all(
            conns
                .into_iter()
                .zip(&asks)
                .zip(&wants)
                .zip(sinks.iter_mut())
                .map(|((((conn, closed), ask), w), sink)| {
                    let sink: Option<crate::http::BodySink<'_, '_>> = Some(sink);
                    fetch(
                        conn,
                        closed,
                        ask,
                        w.timeout_s,
                        plan,
                        shared,
                        viewer,
                        start,
                        sink,
                    )
                }),
        )
        .await;
        drop(sinks);
        drop(asks);
        let mut out = Vec::with_capacity(done.len());
        for ((mut f, w), (body, overflow)) in done.into_iter().zip(&wants).zip(bodies) {
            self.put_slot(w.slot, f.conn.take(), f.server_closed);
            self.opened += f.opened;
            self.reconnects += f.reconnects;
            let mut req = Request::new(w.piece.path.clone(), None, w.timeout_s);
            req.media_s = w.media_s;
            req.conn = w.slot;
            self.made.push(req);
            let mut failure = f.failure.take();
            if failure.is_none() && overflow {
                failure = Some(crate::record::Failure::new(
                    FailureReason::Protocol,
                    format!("{}: larger than {MAX_TEXT_BYTES} bytes", w.piece.path),
                ));
            }
            let end = failure.as_ref().map(SessionEnd::after);
            let started = start.duration_since(self.shared.t0).as_secs_f64();
            let index = self.records.len() as u32;
            self.records
                .push(f.record(index, w.slot, started, failure, w.media_s, 0.0));
            out.push(match end {
                Some(end) => Err(Miss {
                    status: f.progress.status,
                    end,
                }),
                None => Ok(self.completed(body, f.progress.bytes, f.elapsed)),
            });
        }
        out
    }

    /// One request of [`Player::fetch_slots`] on the player's own connection.
    pub(super) async fn fetch_one(&mut self, want: Want<'_>) -> Result<Got, Miss> {
        let mut all = self.fetch_slots(vec![want]).await;
        all.pop().unwrap_or(Err(Miss {
            status: 0,
            end: SessionEnd::Failed(FailureReason::Protocol),
        }))
    }

    /// The sidecar's (length, CRC-32) of the piece at `offset`, under `--verify`.
    fn checksum_of(&self, piece: &Piece, offset: u64) -> Option<(u64, u32)> {
        let key = (piece.path.trim_start_matches('/').to_string(), offset);
        self.checksums.as_ref()?.get(&key).copied()
    }

    /// Record a download given up after `got` bytes: unfinished, no failure, no media.
    fn abandoned(
        &mut self,
        piece: &Piece,
        range: Option<ByteRange>,
        timeout_s: f64,
        start: Instant,
        got: u64,
    ) -> Got {
        let elapsed = start.elapsed().as_secs_f64();
        self.made
            .push(Request::new(piece.path.clone(), range, timeout_s));
        self.records.push(RequestRecord {
            index: self.records.len() as u32,
            conn: 0,
            started: start.duration_since(self.shared.t0).as_secs_f64(),
            ttfb: None,
            ttlb: None,
            elapsed,
            bytes: got,
            status: 0,
            failure: None,
            media_s: 0.0,
            pacing_s: 0.0,
        });
        Got {
            body: Vec::new(),
            bytes: got,
            secs: elapsed,
            abandoned: true,
        }
    }

    /// A protocol-level failure of the presentation itself (unparseable manifest, ...).
    pub(super) fn broken(&mut self, detail: String) -> SessionEnd {
        self.fail_last(FailureReason::Protocol, detail)
    }

    /// Mark the latest request as the session's failure (`reason`, `detail`).
    pub(super) fn fail_last(&mut self, reason: FailureReason, detail: String) -> SessionEnd {
        if let Some(last) = self.records.last_mut() {
            last.failure = Some(crate::record::Failure::new(reason, detail));
            last.ttlb = None;
        }
        SessionEnd::Failed(reason)
    }

    async fn presentation(
        &mut self,
        cfg: &PlayerConfig,
        path: &str,
    ) -> Result<Presentation, SessionEnd> {
        let piece = Piece::whole(path.to_string());
        let (text, _, _) = self.get(&piece, 0.0, cfg.manifest_timeout_s, true).await?;
        let parsed = match cfg.protocol {
            Protocol::Dash => std::str::from_utf8(&text)
                .map_err(|_| manifest::ManifestError(format!("{path}: not UTF-8")))
                .and_then(|t| manifest::dash(path, t)),
            Protocol::Hls => manifest::hls(path, &text),
        };
        parsed.map_err(|e| self.broken(e.to_string()))
    }

    /// `--verify`: fetch the checksum sidecar beside the manifest at `manifest` and keep its
    /// pieces; a missing or unreadable sidecar fails the session (`protocol`).
    async fn load_checksums(&mut self, manifest: &str) -> Result<(), SessionEnd> {
        let dir = manifest.rsplit_once('/').map_or("", |(d, _)| d);
        let piece = Piece::whole(format!("{dir}/{}", vodkit_media::SIDECAR));
        let (text, _, _) = self.get(&piece, 0.0, 10.0, true).await?;
        let sidecar: vodkit_media::Sidecar = serde_json::from_slice(&text).map_err(|e| {
            self.broken(format!(
                "{}: {e} (--verify needs the media set's sidecars)",
                piece.path
            ))
        })?;
        self.checksums = Some(
            sidecar
                .pieces
                .into_iter()
                .map(|p| ((p.path, p.offset), (p.len, p.crc32)))
                .collect(),
        );
        Ok(())
    }

    /// The init piece and segments of a rendition, fetching its index or playlist once.
    async fn resolve(
        &mut self,
        cfg: &PlayerConfig,
        r: &manifest::Rendition,
    ) -> Result<(Option<Piece>, Vec<Segment>), SessionEnd> {
        match &r.segments {
            Segments::Listed(s) => Ok((r.init.clone(), s.clone())),
            Segments::Sidx { index } => {
                let (bytes, _, _) = self.get(index, 0.0, cfg.manifest_timeout_s, true).await?;
                let segs =
                    manifest::from_sidx(index, &bytes).map_err(|e| self.broken(e.to_string()))?;
                Ok((r.init.clone(), segs))
            }
            Segments::Playlist { path } => {
                let piece = Piece::whole(path.clone());
                let (text, _, _) = self.get(&piece, 0.0, cfg.manifest_timeout_s, true).await?;
                manifest::hls_media(path, &text).map_err(|e| self.broken(e.to_string()))
            }
        }
    }

    /// Wait `seconds`, or until the run is cancelled.
    pub(super) async fn wait(&self, seconds: f64) -> Result<(), SessionEnd> {
        if seconds <= 0.0 {
            return Ok(());
        }
        tokio::select! {
            _ = tokio::time::sleep(crate::config::secs(seconds)) => Ok(()),
            _ = self.shared.cancel.cancelled() => Err(SessionEnd::Cancelled),
        }
    }

    /// Move `place` to the segment holding media position `to_s` (by rendition `r`'s segment
    /// lists, fetched when needed); `false` when `to_s` lies past the presentation's end.
    async fn locate(
        &mut self,
        cfg: &PlayerConfig,
        p: &Presentation,
        place: &mut Place,
        r: usize,
        to_s: f64,
    ) -> Result<bool, SessionEnd> {
        let mut start = 0.0f64;
        for (k, period) in p.periods.iter().enumerate() {
            if place.period != k {
                place.enter(k, period.renditions.len(), start);
            }
            let r = r.min(period.renditions.len().saturating_sub(1));
            if place.resolved[r].is_none() {
                place.resolved[r] = Some(self.resolve(cfg, &period.renditions[r]).await?);
            }
            let Some((_, segments)) = place.resolved[r].as_ref() else {
                return Ok(false);
            };
            let listed: f64 = segments.iter().map(|s| s.duration_s).sum();
            let mut at = start;
            for (i, seg) in segments.iter().enumerate() {
                if to_s < at + seg.duration_s - 1e-9 {
                    place.segment = i;
                    place.media_at = at;
                    return Ok(true);
                }
                at += seg.duration_s;
            }
            start += period.duration_s.unwrap_or(listed);
        }
        Ok(false)
    }

    async fn play(
        &mut self,
        cfg: &PlayerConfig,
        out: &mut PlayerOutcome,
    ) -> Result<(), SessionEnd> {
        let plan = self.plan;
        let session = &plan.session;
        let Some(path) = manifest_path(session, cfg.protocol) else {
            return Err(SessionEnd::Failed(FailureReason::Protocol));
        };
        let begin = self.now();
        let spec = session.play.clone().unwrap_or_default();
        let own = cfg.for_viewer(&spec);
        let cfg = &own;
        self.connections = cfg.connections;
        let watch_s = spec
            .watch_s
            .unwrap_or_else(|| watch_seconds(session))
            .max(cfg.min_watch_s);
        let start_s = spec.start_s;
        let mut viewing = Viewing::new(spec.seeks, watch_s);
        if self.shared.verify {
            self.load_checksums(&path).await?;
        }
        let p = self.presentation(cfg, &path).await?;
        let ladder: Vec<u64> = p.periods[0]
            .renditions
            .iter()
            .map(|r| r.bandwidth_bps)
            .collect();
        let mut abr = Abr::new(cfg.rule, cfg.abr, &ladder);
        let mut buf = Buffer {
            last: self.now(),
            ..Buffer::default()
        };
        let mut place = Place::default();
        place.enter(0, p.periods[0].renditions.len(), 0.0);
        let mut last_choice: Option<usize> = None;
        // The rendition an abandoned download asked the segment to be fetched from again.
        let mut forced: Option<usize> = None;
        let mut jump_to = (start_s > 0.0).then_some(start_s);
        loop {
            if let Some(to) = jump_to.take() {
                if !self
                    .locate(cfg, &p, &mut place, last_choice.unwrap_or(0), to)
                    .await?
                {
                    break;
                }
            }
            // Enough fetched for the watch time (or the title ended): wait for a seek still
            // to come, else stop.
            if viewing.enough() || place.ended {
                match self.await_seek(&mut viewing, &mut buf, out).await? {
                    Some(to) => {
                        place.ended = false;
                        jump_to = Some(to);
                        continue;
                    }
                    None => break,
                }
            }
            // Keep at most the buffer target ahead of the playhead; a seek may fall due.
            buf.advance(self.now());
            if buf.playing && buf.level_s > cfg.buffer_target_s {
                let mut wait = buf.level_s - cfg.buffer_target_s;
                if let Some(due) = viewing.due_in(&buf) {
                    wait = wait.min(due.max(0.0));
                }
                self.wait(wait).await?;
                buf.advance(self.now());
            }
            if viewing.due_in(&buf).is_some_and(|d| d <= 1e-9) {
                jump_to = viewing.seek(&mut buf, self.now(), out);
                continue;
            }
            let period = &p.periods[place.period];
            let pick = match forced.take() {
                Some(to) => {
                    abr.switch_to(to);
                    to
                }
                None => abr.choose(buf.level_s),
            }
            .min(period.renditions.len() - 1);
            if place.resolved[pick].is_none() {
                place.resolved[pick] = Some(self.resolve(cfg, &period.renditions[pick]).await?);
            }
            // One segment (and the init piece on a switch) is copied, not the list.
            let (init, seg, n_segments) = match place.resolved[pick].as_ref() {
                Some((init, segments)) => (
                    init.clone(),
                    segments.get(place.segment).cloned(),
                    segments.len(),
                ),
                None => (None, None, 0),
            };
            let Some(seg) = seg else {
                place.next_period(&p);
                continue;
            };
            if place.init_of != Some(pick) {
                if let Some(init) = &init {
                    self.get(init, 0.0, cfg.segment_timeout_s, false).await?;
                }
                place.init_of = Some(pick);
            }
            let (level0, playing0) = (buf.level_s, buf.playing);
            let seek_in = viewing.due_in(&buf);
            let expected_bytes =
                (period.renditions[pick].bandwidth_bps as f64 * seg.duration_s / 8.0) as u64;
            let abandon_to = std::sync::atomic::AtomicUsize::new(usize::MAX);
            let seek_hit = std::sync::atomic::AtomicBool::new(false);
            let check = |received: u64, elapsed_s: f64| -> bool {
                // The playhead reaches the seek point while the segment is on its way.
                if let Some(due) = seek_in {
                    if playing0 && due <= level0 && elapsed_s >= due {
                        seek_hit.store(true, Ordering::Relaxed);
                        return true;
                    }
                }
                let Some(rule) = cfg.abandon else {
                    return false;
                };
                let left = (level0 - elapsed_s).max(0.0);
                let progress = abr::Progress {
                    rendition: pick,
                    duration_s: seg.duration_s,
                    expected_bytes,
                    received,
                    elapsed_s,
                    buffer_s: if playing0 { left } else { level0 },
                    playing: playing0 && left > 0.0,
                };
                match abr.abandon(&rule, &progress) {
                    Some(to) => {
                        abandon_to.store(to, Ordering::Relaxed);
                        true
                    }
                    None => false,
                }
            };
            // The first look: when the abandon rule's grace ends or the seek falls due.
            let first_s = cfg
                .abandon
                .map(|a| a.grace_s)
                .into_iter()
                .chain(seek_in.filter(|_| playing0))
                .fold(f64::INFINITY, f64::min);
            let watch = first_s.is_finite().then_some(Watch {
                check: &check,
                first_s,
            });
            let got = self
                .fetch_watched(
                    &seg.piece,
                    seg.duration_s,
                    cfg.segment_timeout_s,
                    false,
                    watch,
                )
                .await?;
            abr.observe(got.bytes, got.secs);
            if got.abandoned {
                if seek_hit.load(Ordering::Relaxed) {
                    // The viewer jumped; the segment in flight is dropped, as players do.
                    jump_to = viewing.seek(&mut buf, self.now(), out);
                } else {
                    out.aborted += 1;
                    out.aborted_bytes += got.bytes;
                    forced = Some(abandon_to.load(Ordering::Relaxed).min(pick));
                }
                continue;
            }
            let kbps = (period.renditions[pick].bandwidth_bps / 1000) as u32;
            if last_choice.is_some_and(|c| c != pick) {
                out.switches += 1;
            }
            last_choice = Some(pick);
            out.timeline.push(Stretch {
                media_s: place.media_at,
                duration_s: seg.duration_s,
                kbps,
            });
            place.media_at += seg.duration_s;
            place.segment += 1;
            viewing.fetched_since += seg.duration_s;
            if place.segment >= n_segments {
                place.next_period(&p);
            }
            let last = place.ended || viewing.enough();
            let resume = if buf.started && viewing.seeking.is_none() {
                cfg.resume_s
            } else {
                cfg.startup_segments as f64 * seg.duration_s
            };
            let was_playing = buf.playing;
            let now = self.now();
            if let Some(at) = buf.add(now, seg.duration_s, resume, last) {
                out.startup_s = Some(at - begin);
            }
            if !was_playing && buf.playing {
                if let Some(since) = viewing.seeking.take() {
                    out.seek_wait_s += now - since;
                }
            }
        }
        buf.advance(self.now());
        out.stalls = buf.stalls;
        out.stall_s = buf.stall_s;
        let durations: Vec<f64> = out.timeline.iter().map(|s| s.duration_s).collect();
        out.media_s = durations.iter().sum();
        let startup_s = cfg.startup_segments as f64 * durations.first().copied().unwrap_or(0.0);
        out.reference_kbps = abr::unloaded_mean_bps(
            cfg.rule,
            cfg.abr,
            &ladder,
            self.plan.link_bps,
            &durations,
            cfg.buffer_target_s,
            startup_s,
        ) / 1000.0;
        Ok(())
    }

    /// Nothing more to fetch before the next seek: wait while the playhead moves on to it and
    /// make it (the position to continue from), or `None` when no seek is still to come
    /// (none left, or the playhead cannot reach it: stalled, or the watch time ends first).
    async fn await_seek(
        &self,
        viewing: &mut Viewing,
        buf: &mut Buffer,
        out: &mut PlayerOutcome,
    ) -> Result<Option<f64>, SessionEnd> {
        buf.advance(self.now());
        let Some(due) = viewing.due_in(buf) else {
            return Ok(None);
        };
        if !buf.playing || due > buf.level_s + 1e-9 {
            return Ok(None);
        }
        self.wait(due).await?;
        Ok(viewing.seek(buf, self.now(), out))
    }
}

/// Play `plan`'s session as an adaptive player.
pub(crate) async fn play(plan: &Plan, shared: &Arc<Shared>, cfg: &PlayerConfig) -> SessionRecord {
    let (mut p, _lease) = Player::new(plan, shared);
    let mut outcome = PlayerOutcome::default();
    let end = match p.play(cfg, &mut outcome).await {
        Ok(()) => SessionEnd::Completed,
        Err(e) => e,
    };
    p.finish(end, outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_is_split_into_equal_consecutive_parts_no_smaller_than_the_minimum() {
        // 100,000 bytes in 3: 33,334 + 33,333 + 33,333, back to back, all of it.
        let parts = split((1_000, 100_999), 3);
        assert_eq!(
            parts,
            [(1_000, 34_333), (34_334, 67_666), (67_667, 100_999)]
        );
        // Too short for three parts of 16 KiB: two; for two: one.
        assert_eq!(split((0, 40_959), 3).len(), 2);
        assert_eq!(split((0, 20_000), 4), [(0, 20_000)]);
        assert_eq!(split((5, 5), 6), [(5, 5)]);
        // One connection never splits.
        assert_eq!(split((0, 10 << 20), 1).len(), 1);
    }

    #[test]
    fn a_seek_falls_due_after_its_playback_and_credits_what_was_played() {
        let mut v = Viewing::new(
            vec![
                Seek {
                    after_s: 3.0,
                    to_s: 100.0,
                },
                Seek {
                    after_s: 50.0,
                    to_s: 0.0,
                },
            ],
            10.0,
        );
        let mut buf = Buffer::default();
        let mut out = PlayerOutcome::default();
        // Playback starts at t = 1 with 4 s buffered.
        assert_eq!(buf.add(1.0, 4.0, 2.0, false), Some(1.0));
        v.fetched_since = 4.0;
        buf.advance(2.5);
        assert!((v.due_in(&buf).unwrap() - 1.5).abs() < 1e-9);
        assert!(!v.enough());
        buf.advance(4.0);
        assert!(
            v.due_in(&buf).unwrap().abs() < 1e-9,
            "due after 3 s of playback"
        );
        assert_eq!(v.seek(&mut buf, 4.0, &mut out), Some(100.0));
        // The buffer is gone, not stalled; 3 s are credited, 7 s remain to be fetched.
        assert_eq!((buf.level_s, buf.playing, buf.stalled), (0.0, false, false));
        assert_eq!((v.credited, v.fetched_since, out.seeks), (3.0, 0.0, 1));
        v.fetched_since = 6.9;
        assert!(!v.enough());
        v.fetched_since = 7.0;
        assert!(v.enough());
        // The second seek comes after 50 s of playback, past the 10 s watch: never made.
        assert_eq!(v.due_in(&buf), None);
        // Time spent waiting after a seek is not a stall.
        buf.advance(6.0);
        assert_eq!((buf.stalls, buf.stall_s), (0, 0.0));
        assert!((buf.played_s - 3.0).abs() < 1e-9);
    }
}
