//! One adaptive-player session (`vodkit load --player`): fetch the manifest, then one segment
//! at a time, each from the rendition the ABR rule picks, keeping a playout buffer that
//! drains in real time once playback has started; waiting when the buffer is full,
//! stalling when it runs dry. Everything it fetched becomes the session's request list, so
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
use crate::session::{fetch, Plan, Shared, Viewer};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::time::Instant;
use vodkit_workload::model::{ByteRange, Request, Session};

/// Largest manifest, playlist or index kept in memory.
pub const MAX_TEXT_BYTES: usize = 8 << 20;

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
}

impl Buffer {
    /// Let time pass until `now`.
    pub(super) fn advance(&mut self, now: f64) {
        let dt = (now - self.last).max(0.0);
        self.last = now;
        if self.playing {
            self.level_s -= dt;
            if self.level_s < 0.0 {
                self.stall_s += -self.level_s;
                self.stall_began = now + self.level_s;
                self.level_s = 0.0;
                self.playing = false;
                self.stalled = true;
                self.stalls += 1;
            }
        } else if self.stalled {
            self.stall_s += dt;
        }
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

impl<'a> Player<'a> {
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
        let start = Instant::now();
        let range = piece.range.map(|(a, b)| ByteRange::closed(a, b - a + 1));
        let ask = Ask {
            path: &piece.path,
            range,
            host: &self.shared.host,
            session_id: self.plan.session.id,
            verify: false,
        };
        let offset = piece.range.map_or(0, |(a, _)| a);
        let expected = self.checksums.as_ref().and_then(|c| {
            c.get(&(piece.path.trim_start_matches('/').to_string(), offset))
                .copied()
        });
        let mut body = Vec::new();
        let mut overflow = false;
        let mut crc = crc32fast::Hasher::new();
        let mut sink = |chunk: &[u8]| {
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
        let sink: Option<crate::http::BodySink<'_, '_>> = if keep || expected.is_some() {
            Some(&mut sink)
        } else {
            None
        };
        let conn = self.conn.take();
        let f = fetch(
            conn,
            self.server_closed,
            &ask,
            timeout_s,
            self.plan,
            self.shared,
            &self.viewer,
            start,
            sink,
        )
        .await;
        self.conn = f.conn;
        self.server_closed = f.server_closed;
        self.opened += f.opened;
        self.reconnects += f.reconnects;
        let mut req = Request::new(piece.path.clone(), range, timeout_s);
        req.media_s = media_s;
        self.made.push(req);
        let mut failure = f.failure;
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
        let end = failure.as_ref().map(|fl| match fl.reason {
            FailureReason::Refused => SessionEnd::Refused,
            r => SessionEnd::Failed(r),
        });
        self.records.push(RequestRecord {
            index: self.records.len() as u32,
            conn: 0,
            started: start.duration_since(self.shared.t0).as_secs_f64(),
            ttfb: f.ttfb,
            ttlb: f.ttlb,
            elapsed: f.elapsed,
            bytes: f.progress.bytes,
            status: f.progress.status,
            failure,
            media_s,
            pacing_s: 0.0,
        });
        match end {
            Some(e) => Err(e),
            None => {
                self.shared
                    .live
                    .completed_requests
                    .fetch_add(1, Ordering::Relaxed);
                Ok((body, f.progress.bytes, f.elapsed))
            }
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
        let piece = Piece {
            path: path.to_string(),
            range: None,
        };
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
        let piece = Piece {
            path: format!("{dir}/{}", vodkit_media::SIDECAR),
            range: None,
        };
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
                let piece = Piece {
                    path: path.clone(),
                    range: None,
                };
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

    async fn play(
        &mut self,
        cfg: &PlayerConfig,
        out: &mut PlayerOutcome,
    ) -> Result<(), SessionEnd> {
        let session = &self.plan.session;
        let Some(path) = manifest_path(session, cfg.protocol) else {
            return Err(SessionEnd::Failed(FailureReason::Protocol));
        };
        let begin = self.now();
        let watch_s = watch_seconds(session).max(cfg.min_watch_s);
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
        let mut media_at = 0.0f64;
        let mut last_choice: Option<usize> = None;
        'periods: for period in &p.periods {
            let mut resolved: Vec<Option<(Option<Piece>, Vec<Segment>)>> =
                vec![None; period.renditions.len()];
            let mut init_of: Option<usize> = None;
            let mut i = 0usize;
            loop {
                if media_at + 1e-9 >= watch_s {
                    break 'periods;
                }
                // Keep at most the buffer target ahead of the playhead.
                let now = self.now();
                buf.advance(now);
                if buf.playing && buf.level_s > cfg.buffer_target_s {
                    self.wait(buf.level_s - cfg.buffer_target_s).await?;
                    buf.advance(self.now());
                }
                let pick = abr.choose(buf.level_s).min(period.renditions.len() - 1);
                if resolved[pick].is_none() {
                    resolved[pick] = Some(self.resolve(cfg, &period.renditions[pick]).await?);
                }
                // One segment (and the init piece on a switch) is copied, not the list.
                let Some((init, segments)) = resolved[pick].as_ref() else {
                    break;
                };
                let Some(seg) = segments.get(i).cloned() else {
                    break;
                };
                let n_segments = segments.len();
                let init = if init_of != Some(pick) {
                    init.clone()
                } else {
                    None
                };
                if init_of != Some(pick) {
                    if let Some(init) = &init {
                        self.get(init, 0.0, cfg.segment_timeout_s, false).await?;
                    }
                    init_of = Some(pick);
                }
                let (_, bytes, secs) = self
                    .get(&seg.piece, seg.duration_s, cfg.segment_timeout_s, false)
                    .await?;
                abr.observe(bytes, secs);
                let kbps = (period.renditions[pick].bandwidth_bps / 1000) as u32;
                if last_choice.is_some_and(|c| c != pick) {
                    out.switches += 1;
                }
                last_choice = Some(pick);
                out.timeline.push(Stretch {
                    media_s: media_at,
                    duration_s: seg.duration_s,
                    kbps,
                });
                media_at += seg.duration_s;
                i += 1;
                let last = media_at + 1e-9 >= watch_s || i >= n_segments;
                let resume = if buf.started {
                    cfg.resume_s
                } else {
                    cfg.startup_segments as f64 * seg.duration_s
                };
                if let Some(at) = buf.add(self.now(), seg.duration_s, resume, last) {
                    out.startup_s = Some(at - begin);
                }
                if i >= n_segments {
                    break;
                }
            }
        }
        buf.advance(self.now());
        out.media_s = media_at;
        out.stalls = buf.stalls;
        out.stall_s = buf.stall_s;
        let durations: Vec<f64> = out.timeline.iter().map(|s| s.duration_s).collect();
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
