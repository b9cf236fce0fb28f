//! A live viewer (sessions with `live` set, seed 004's live workloads). It follows its
//! stream one of four ways ([`LiveMode`]):
//!
//! - **HLS**: load the media playlist, join a few segments behind the live edge (hls.js's
//!   `liveSyncDurationCount`), fetch each new segment as it appears, reload the playlist
//!   the way RFC 8216 §6.3.4 says (after the newest segment's duration when it changed,
//!   half the target duration when it did not).
//! - **Low-latency HLS** (the playlist has `#EXT-X-PART-INF` and `CAN-BLOCK-RELOAD=YES`):
//!   join `PART-HOLD-BACK` behind the newest part (fetching from the independent part at or
//!   before it), then fetch part by part: the preload-hinted part is requested at once (the
//!   origin holds it until it exists) while a blocking reload (`_HLS_msn`, `_HLS_part`)
//!   waits for the playlist that lists it — two requests in flight, on two connections
//!   over HTTP/1.1 or as two streams of one over HTTP/2. Whole segments when it is behind
//!   the parts the playlist lists.
//! - **DASH** (`--player dash`): from the dynamic MPD's `availabilityStartTime` and
//!   `SegmentTemplate`, request segment N once it is available: at its end, or — with
//!   `availabilityTimeOffset` (low-latency DASH) — that much earlier, reading the chunked
//!   body as it is written; media counts into the buffer as its bytes arrive.
//!
//! In every mode a playout buffer drains in real time. What it measures besides start-up
//! and stalls (counted at the granularity content arrives in: parts, chunks): latency
//! behind the live edge (wall clock minus the capture time of the content at the
//! playhead), segments skipped because they left the window before the viewer got to them
//! (the HTTP form of seed 004's thinning), the length of each stall (late-only jitter), and
//! for DASH a throughput estimate that leaves out the idle gaps between chunks. A stream
//! that stops advancing ends the session after `stale_targets` target durations (a
//! failure, with the reason); `#EXT-X-ENDLIST` (a static MPD) ends it cleanly.

use super::manifest::{self, LiveMpd, LiveWindow, PartAt, Piece};
use super::play::{Buffer, Player, Want};
pub use super::LiveSettings;
use crate::record::{
    FailureReason, LiveMode, LiveOutcome, PlayerOutcome, SessionEnd, SessionRecord,
};
use crate::viewer::{Plan, Shared};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::time::Instant;
use vodkit_workload::model::LiveView;

/// A gap between body bytes longer than this is the origin waiting for the source, not
/// the network: the throughput estimate leaves it out.
const IDLE_GAP_S: f64 = 0.05;

fn wall_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

async fn load(p: &mut Player<'_>, cfg: &LiveSettings, url: &str) -> Result<LiveWindow, SessionEnd> {
    let piece = Piece::whole(url.to_string());
    let (text, _, _) = p.get(&piece, 0.0, cfg.playlist_timeout_s, true).await?;
    manifest::hls_live(url, &text).map_err(|e| p.broken(e.to_string()))
}

/// Latency off its target by this much or more plays at the catch-up rate's bound.
const CATCHUP_SPAN_S: f64 = 0.5;

/// Playback-rate catch-up toward a target latency (LL-DASH: the MPD's `ServiceDescription`
/// `Latency@target` and `PlaybackRate` bounds, which dash.js follows).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Catchup {
    pub target_s: f64,
    pub min_rate: f64,
    pub max_rate: f64,
}

impl Catchup {
    /// The rate for latency `latency_s` with `level_s` buffered: in proportion to how far
    /// the latency is from the target, at the bound from [`CATCHUP_SPAN_S`] off; never
    /// faster than real time with less than `low_s` buffered.
    pub fn rate(&self, latency_s: f64, level_s: f64, low_s: f64) -> f64 {
        let off = ((latency_s - self.target_s) / CATCHUP_SPAN_S).clamp(-1.0, 1.0);
        let rate = if off >= 0.0 {
            1.0 + off * (self.max_rate - 1.0).max(0.0)
        } else {
            1.0 + off * (1.0 - self.min_rate).max(0.0)
        };
        if level_s < low_s {
            rate.min(1.0)
        } else {
            rate
        }
    }
}

/// What a live viewer keeps while it follows its stream.
struct Follow<'a> {
    cfg: &'a LiveSettings,
    url: &'a str,
    watch_s: f64,
    out: PlayerOutcome,
    lo: LiveOutcome,
    buf: Buffer,
    begin: f64,
    /// Playback-rate catch-up, and the buffer below which it does not speed up.
    catchup: Option<(Catchup, f64)>,
    /// The origin's clock minus ours, ms (DASH `UTCTiming`; 0 otherwise).
    clock_ms: f64,
}

impl Follow<'_> {
    /// Wall-clock time on the origin's clock, ms since the Unix epoch.
    fn wall_ms(&self) -> f64 {
        wall_ms() + self.clock_ms
    }

    fn done(&self) -> bool {
        self.out.media_s + 1e-9 >= self.watch_s
    }

    /// `dur_s` seconds of media arrived at `now`, playback waiting for `resume_s` of them;
    /// `end_ms`: capture time of the end of what arrived (ms since the epoch), for the
    /// latency sample.
    fn arrived(&mut self, now: f64, dur_s: f64, resume_s: f64, end_ms: Option<f64>) {
        self.out.media_s += dur_s;
        let last = self.done();
        if let Some(at) = self.buf.add(now, dur_s, resume_s, last) {
            self.out.startup_s = Some(at - self.begin);
        }
        if let (true, Some(end_ms)) = (self.buf.playing, end_ms) {
            // The playhead is `level` seconds before the end of what just arrived.
            let at_playhead = end_ms - self.buf.level_s * 1000.0;
            let latency_s = (self.wall_ms() - at_playhead) / 1000.0;
            self.lo.latency_s.push(latency_s);
            if let Some((c, low_s)) = self.catchup {
                self.buf.speedup = c.rate(latency_s, self.buf.level_s, low_s) - 1.0;
            }
        }
    }

    /// Seconds buffered before playback starts (whole segments), or resumes.
    fn resume_s(&self, unit_s: f64) -> f64 {
        if self.buf.started {
            self.cfg.resume_s
        } else {
            f64::from(self.cfg.startup_segments.max(1)) * unit_s
        }
    }

    /// The stream has not moved for too long: the session fails with the reason.
    fn stale(&self, p: &mut Player<'_>, quiet_s: f64, target_s: f64) -> Result<(), SessionEnd> {
        if quiet_s > self.cfg.stale_targets * target_s {
            return Err(p.fail_last(
                FailureReason::Timeout,
                format!(
                    "{}: the live stream did not advance for {quiet_s:.1} s",
                    self.url
                ),
            ));
        }
        Ok(())
    }
}

/// Follow an HLS stream: the low-latency way when it offers it, else whole segments.
async fn follow_hls(p: &mut Player<'_>, f: &mut Follow<'_>) -> Result<(), SessionEnd> {
    let win = load(p, f.cfg, f.url).await?;
    let ll = win
        .ll
        .as_ref()
        .is_some_and(|l| l.can_block_reload && f.cfg.low_latency);
    if ll {
        if let Some(ll) = win.ll.clone() {
            let hold = ll.part_hold_back_s.unwrap_or(3.0 * ll.part_target_s);
            if let Some(join) = win.join(hold) {
                return follow_ll_hls(p, f, win, join).await;
            }
        }
    }
    follow_segments(p, f, win).await
}

/// Whole segments from the playlist's window.
async fn follow_segments(
    p: &mut Player<'_>,
    f: &mut Follow<'_>,
    mut win: LiveWindow,
) -> Result<(), SessionEnd> {
    let (cfg, url) = (f.cfg, f.url);
    let mut loaded_at = p.now();
    let mut changed_at = loaded_at;
    let mut changed = true;
    let mut next = win
        .end()
        .saturating_sub(u64::from(cfg.sync_segments.max(1)))
        .max(win.first);
    let mut init_done = false;
    loop {
        if f.done() {
            return Ok(());
        }
        if next < win.first {
            f.lo.skipped_segments += (win.first - next) as u32;
            next = win.first;
        }
        if let Some(seg) = win.get(next).cloned() {
            if !init_done {
                if let Some(init) = win.init.clone() {
                    p.get(&init, 0.0, cfg.segment_timeout_s, false).await?;
                }
                init_done = true;
            }
            p.get(&seg.piece, seg.duration_s, cfg.segment_timeout_s, false)
                .await?;
            f.lo.segments += 1;
            next += 1;
            let resume = f.resume_s(seg.duration_s);
            let end_ms = seg.pdt_ms.map(|t| t as f64 + seg.duration_s * 1000.0);
            f.arrived(p.now(), seg.duration_s, resume, end_ms);
            continue;
        }
        if win.ended {
            f.lo.stream_ended = true;
            return Ok(());
        }
        // The next segment is not out yet: reload (RFC 8216 §6.3.4: after the duration of
        // the newest segment when the playlist changed, half the target duration when not).
        let interval = if changed {
            win.segments.last().map_or(win.target_s, |s| s.duration_s)
        } else {
            win.target_s / 2.0
        };
        p.wait(loaded_at + interval - p.now()).await?;
        f.stale(p, p.now() - changed_at, win.target_s)?;
        let before = win.end();
        win = load(p, cfg, url).await?;
        f.lo.reloads += 1;
        loaded_at = p.now();
        changed = win.end() != before;
        if changed {
            changed_at = loaded_at;
        }
    }
}

/// The newest part a window lists, if any.
fn newest_part(win: &LiveWindow) -> Option<PartAt> {
    if let Some(p) = win.partial.as_ref().filter(|p| !p.parts.is_empty()) {
        return Some((win.end(), p.parts.len() - 1));
    }
    let last = win.segments.last()?;
    (!last.parts.is_empty()).then(|| (win.end() - 1, last.parts.len() - 1))
}

/// Low-latency HLS from `join` = (the part playback starts at, the part fetching starts
/// at).
async fn follow_ll_hls(
    p: &mut Player<'_>,
    f: &mut Follow<'_>,
    mut win: LiveWindow,
    (play_at, mut next): (PartAt, PartAt),
) -> Result<(), SessionEnd> {
    let (cfg, url) = (f.cfg, f.url);
    f.lo.mode = LiveMode::LlHls;
    let part_s = win
        .ll
        .as_ref()
        .map_or(win.target_s / 3.0, |l| l.part_target_s);
    if let Some(init) = win.init.clone() {
        p.get(&init, 0.0, cfg.segment_timeout_s, false).await?;
    }
    let mut changed_at = p.now();
    // A hint that the origin did not hold (404, 503): not asked for again.
    let mut refused_hint: Option<String> = None;
    // The origin answered a blocking reload before the part it asked for (a static
    // server): it would not hold a hinted part either, so none are asked for.
    let mut blocks = true;
    loop {
        if f.done() {
            return Ok(());
        }
        next = win.settle(next);
        if next.0 < win.first {
            f.lo.skipped_segments += (win.first - next.0) as u32;
            next = (win.first, 0);
        }
        // Playback starts at `play_at`; the parts before it are fetched only to decode.
        let played = |at: PartAt| at >= play_at;
        if let Some(part) = win.part(next).cloned() {
            p.get(
                &part.piece,
                if played(next) { part.duration_s } else { 0.0 },
                cfg.segment_timeout_s,
                false,
            )
            .await?;
            f.lo.parts += 1;
            credit_part(p, f, &win, next, part.duration_s, part_s, played(next));
            let after = win.after(next);
            if after.0 > next.0 {
                f.lo.segments += 1;
            }
            next = after;
            continue;
        }
        if let Some(seg) = win.get(next.0).cloned() {
            // Behind the parts the playlist lists: the whole segment (the rest of it).
            p.get(&seg.piece, seg.duration_s, cfg.segment_timeout_s, false)
                .await?;
            f.lo.segments += 1;
            let rest = (seg.duration_s - next.1 as f64 * part_s).max(0.0);
            let end_ms = seg.pdt_ms.map(|t| t as f64 + seg.duration_s * 1000.0);
            let resume = if f.buf.started {
                part_s
            } else {
                part_s.min(rest)
            };
            f.arrived(p.now(), rest, resume, end_ms);
            next = (next.0 + 1, 0);
            continue;
        }
        if win.ended {
            f.lo.stream_ended = true;
            return Ok(());
        }
        // The part is not out yet: a blocking reload for it and, when the playlist hints
        // at it, the part itself at once.
        let hint = win.ll.as_ref().and_then(|l| l.hint.clone()).filter(|h| {
            blocks
                && newest_part(&win).map(|n| win.after(n)) == Some(next)
                && refused_hint.as_deref() != Some(h.path.as_str())
        });
        let skip = win
            .ll
            .as_ref()
            .is_some_and(|l| l.can_skip_until_s.is_some());
        let query = format!(
            "{url}?_HLS_msn={}&_HLS_part={}{}",
            next.0,
            next.1,
            if skip { "&_HLS_skip=YES" } else { "" }
        );
        let reload = Piece::whole(query);
        let mut wants = vec![Want {
            keep: true,
            ..Want::new(&reload, 0.0, cfg.playlist_timeout_s + 3.0 * win.target_s)
        }];
        if let Some(h) = &hint {
            let media = if played(next) { part_s } else { 0.0 };
            wants.push(Want {
                slot: 1,
                ..Want::new(h, media, cfg.segment_timeout_s)
            });
        }
        let asked = p.now();
        let mut got = p.fetch_slots(wants).await.into_iter();
        f.lo.blocking_reloads += 1;
        f.lo.reloads += 1;
        let before = newest_part(&win);
        match got.next() {
            Some(Ok(g)) => match manifest::hls_live(url, &g.body) {
                Ok(mut fresh) => {
                    fresh.merge_delta(&win);
                    win = fresh;
                    let settled = win.settle(next);
                    if win.part(settled).is_none() && win.get(settled.0).is_none() && !win.ended {
                        blocks = false;
                    }
                }
                Err(e) => return Err(p.broken(e.to_string())),
            },
            // Past the origin's blocking timeout: ask again.
            Some(Err(m)) if m.status == 503 => {}
            Some(Err(m)) => return Err(m.end),
            None => {}
        }
        match (got.next(), hint) {
            (Some(Ok(_)), Some(h)) => {
                f.lo.parts += 1;
                f.lo.hinted_parts += 1;
                if win.part(next).is_some_and(|x| x.piece.path != h.path) {
                    // The hint named another part than the one now listed there: that one
                    // is fetched next, the hinted bytes go unplayed.
                    refused_hint = Some(h.path);
                } else {
                    let dur = win.part(next).map_or(part_s, |x| x.duration_s);
                    credit_part(p, f, &win, next, dur, part_s, played(next));
                    let after = win.after(next);
                    if after.0 > next.0 {
                        f.lo.segments += 1;
                    }
                    next = after;
                }
            }
            (Some(Err(m)), Some(h)) if matches!(m.status, 404 | 503) => refused_hint = Some(h.path),
            (Some(Err(m)), _) => return Err(m.end),
            _ => {}
        }
        let now = p.now();
        if newest_part(&win) != before {
            changed_at = now;
        } else {
            // The origin answered without waiting (it does not block): poll.
            p.wait(asked + part_s / 2.0 - now).await?;
        }
        f.stale(p, p.now() - changed_at, win.target_s)?;
    }
}

/// Part `at` of `win` (`dur_s` long) arrived; into the buffer when `played`.
fn credit_part(
    p: &Player<'_>,
    f: &mut Follow<'_>,
    win: &LiveWindow,
    at: PartAt,
    dur_s: f64,
    part_s: f64,
    played: bool,
) {
    if !played {
        return;
    }
    let end_ms = win
        .pdt_ms(at.0)
        .map(|t| t as f64 + (win.before_part_s(at) + dur_s) * 1000.0);
    // Playback starts, and resumes, after one part.
    f.arrived(p.now(), dur_s, part_s, end_ms);
}

async fn load_mpd(
    p: &mut Player<'_>,
    cfg: &LiveSettings,
    url: &str,
) -> Result<LiveMpd, SessionEnd> {
    let piece = Piece::whole(url.to_string());
    let (text, _, _) = p.get(&piece, 0.0, cfg.playlist_timeout_s, true).await?;
    std::str::from_utf8(&text)
        .map_err(|_| manifest::ManifestError(format!("{url}: not UTF-8")))
        .and_then(|t| manifest::dash_live(url, t))
        .map_err(|e| p.broken(e.to_string()))
}

/// The origin's clock minus ours (ms), read from the MPD's `UTCTiming` (http-iso or
/// http-xsdate: the body is an ISO 8601 time) as dash.js does, taking the answer as the
/// time halfway through the request; `None` when the clock cannot be read.
async fn clock_offset_ms(p: &mut Player<'_>, cfg: &LiveSettings, clock: &Piece) -> Option<f64> {
    let before = wall_ms();
    let got = p
        .fetch_one(Want {
            keep: true,
            ..Want::new(clock, 0.0, cfg.playlist_timeout_s)
        })
        .await
        .ok()?;
    let after = wall_ms();
    let text = std::str::from_utf8(&got.body).ok()?.trim();
    let at = humantime::parse_rfc3339(text).ok()?;
    let server = at.duration_since(UNIX_EPOCH).ok()?.as_secs_f64() * 1000.0;
    Some(server - (before + after) / 2.0)
}

/// The bytes of a download and the seconds they were arriving, from its reads (when, how
/// many): the gap before a read counts when it is short (the network), not when it is
/// long (the origin waiting for the source) — and then neither do that read's bytes.
pub fn active_transfer(reads: &[(f64, usize)]) -> Option<(u64, f64)> {
    let (mut bytes, mut secs) = (0u64, 0f64);
    for w in reads.windows(2) {
        let gap = w[1].0 - w[0].0;
        if gap <= IDLE_GAP_S {
            bytes += w[1].1 as u64;
            secs += gap;
        }
    }
    (secs > 0.0).then_some((bytes, secs))
}

/// Follow a DASH stream from its dynamic MPD.
async fn follow_dash(p: &mut Player<'_>, f: &mut Follow<'_>) -> Result<(), SessionEnd> {
    let (cfg, url) = (f.cfg, f.url);
    let mut mpd = load_mpd(p, cfg, url).await?;
    if let Some(clock) = mpd.clock.clone() {
        f.clock_ms = clock_offset_ms(p, cfg, &clock).await.unwrap_or(0.0);
    }
    let ll = mpd.low_latency() && cfg.low_latency;
    f.lo.mode = if ll { LiveMode::LlDash } else { LiveMode::Dash };
    let d = mpd.segment_s;
    // Without the offset (classic, or `--low-latency off`) a segment is asked for once
    // complete.
    let offset_s = if ll { mpd.availability_offset_s } else { 0.0 };
    let chunk_s = if ll { (d - offset_s).max(d / 100.0) } else { d };
    // Join at the target latency (dash.js: the ServiceDescription's, else about three
    // segments for a classic stream), at a segment's start unless low-latency.
    let delay_s = if ll {
        mpd.latency_target_s.unwrap_or(3.0 * chunk_s)
    } else {
        mpd.suggested_delay_s.unwrap_or(3.0 * d)
    };
    if let (true, Some(target_s), Some((min_rate, max_rate))) =
        (ll, mpd.latency_target_s, mpd.playback_rate)
    {
        let c = Catchup {
            target_s,
            min_rate,
            max_rate,
        };
        f.catchup = Some((c, chunk_s));
    }
    let join_ms = f.wall_ms() - delay_s * 1000.0;
    let mut n = mpd.start_number
        + ((join_ms - mpd.start_ms as f64) / (d * 1000.0))
            .floor()
            .max(0.0) as u64;
    // Media of the first segment before the join point is fetched, not played.
    let mut skip_s = if ll {
        ((join_ms - mpd.begins_ms(n)) / 1000.0).clamp(0.0, d)
    } else {
        0.0
    };
    if let Some(init) = mpd.init.clone() {
        p.get(&init, 0.0, cfg.segment_timeout_s, false).await?;
    }
    let update_s = d;
    let mut loaded_at = p.now();
    let mut progressed_at = loaded_at;
    let mut expected_bytes = (mpd.bandwidth_bps as f64 * d / 8.0) as u64;
    let (mut est_bytes, mut est_secs) = (0u64, 0f64);
    loop {
        if f.done() {
            break;
        }
        if mpd.end_number.is_some_and(|e| n >= e) {
            f.lo.stream_ended = true;
            break;
        }
        if p.now() - loaded_at >= update_s {
            let fresh = load_mpd(p, cfg, url).await?;
            // A static MPD (the stream ended) need not say when it started.
            let start_ms = mpd.start_ms;
            mpd = fresh;
            if mpd.end_number.is_some() {
                mpd.start_ms = start_ms;
            }
            f.lo.reloads += 1;
            loaded_at = p.now();
            continue;
        }
        let available = mpd.begins_ms(n) + (d - offset_s) * 1000.0;
        let wait_s = (available - f.wall_ms()) / 1000.0;
        if wait_s > 0.0 {
            // Until it is available, or the MPD is due again (the stream may have ended).
            p.wait(wait_s.min(loaded_at + update_s - p.now()).max(0.0))
                .await?;
            continue;
        }
        let piece = mpd.segment(n).map_err(|e| p.broken(e.to_string()))?;
        let seg = n;
        let begins_ms = mpd.begins_ms(seg);
        let t0 = p.shared.t0;
        let clock_ms = f.clock_ms;
        let mut reads: Vec<(f64, usize)> = Vec::new();
        let mut first_wall_ms: Option<f64> = None;
        let mut got = 0u64;
        let mut credited = 0f64;
        let played_s = d - skip_s;
        let resume = if f.buf.started {
            if ll {
                chunk_s.min(cfg.resume_s)
            } else {
                cfg.resume_s
            }
        } else if ll {
            chunk_s
        } else {
            f64::from(cfg.startup_segments.max(1)) * d
        };
        let result = {
            let ff = &mut *f;
            let mut sink = |chunk: &[u8]| {
                let now = Instant::now().duration_since(t0).as_secs_f64();
                first_wall_ms.get_or_insert_with(|| wall_ms() + clock_ms);
                reads.push((now, chunk.len()));
                got += chunk.len() as u64;
                if ll && expected_bytes > 0 {
                    // Media counts as its bytes arrive (in proportion, never the whole
                    // segment before the body ends).
                    let at = d * (got as f64 / expected_bytes as f64).min(0.999);
                    let more = (at - skip_s).max(0.0) - credited;
                    if more > 0.0 {
                        credited += more;
                        ff.out.media_s += more;
                        if let Some(t) = ff.buf.add(now, more, resume, false) {
                            ff.out.startup_s = Some(t - ff.begin);
                        }
                    }
                }
            };
            p.fetch_one(Want {
                sink: Some(&mut sink),
                ..Want::new(&piece, played_s, cfg.segment_timeout_s)
            })
            .await
        };
        match result {
            Ok(_) => {}
            Err(m) if m.status == 404 => {
                // Not there: too early (clocks apart), or gone from the window.
                if mpd.begins_ms(seg) + 2.0 * d * 1000.0 < f.wall_ms() {
                    f.lo.skipped_segments += 1;
                    n += 1;
                    skip_s = 0.0;
                } else {
                    p.wait(chunk_s / 2.0).await?;
                }
                f.stale(p, p.now() - progressed_at, d)?;
                continue;
            }
            Err(m) => return Err(m.end),
        }
        progressed_at = p.now();
        f.lo.segments += 1;
        if first_wall_ms.is_some_and(|t| t < begins_ms + d * 1000.0 - 1.0) {
            f.lo.early_segments += 1;
        }
        if let Some((b, s)) = active_transfer(&reads) {
            est_bytes += b;
            est_secs += s;
        }
        if got > 0 {
            expected_bytes = got;
        }
        let rest = (played_s - credited).max(0.0);
        let end_ms = begins_ms + d * 1000.0;
        f.arrived(p.now(), rest, resume, Some(end_ms));
        n += 1;
        skip_s = 0.0;
    }
    if est_secs > 0.0 {
        f.lo.throughput_kbps = Some(est_bytes as f64 * 8.0 / est_secs / 1000.0);
    }
    Ok(())
}

/// Watch `view`'s live stream from the edge for its watch time.
pub(crate) async fn watch(plan: &Plan, shared: &Arc<Shared>, view: LiveView) -> SessionRecord {
    let cfg = &shared.live_view;
    let (mut p, _lease) = Player::new(plan, shared);
    let stream = cfg.stream_of(&view);
    let dash = plan
        .player
        .as_ref()
        .is_some_and(|c| c.protocol == super::Protocol::Dash);
    let url = if dash {
        cfg.mpd_path(stream)
    } else {
        cfg.playlist_path(stream)
    };
    let begin = p.now();
    let mut f = Follow {
        cfg,
        url: &url,
        watch_s: view.watch_s,
        out: PlayerOutcome::default(),
        lo: LiveOutcome {
            stream,
            mode: if dash { LiveMode::Dash } else { LiveMode::Hls },
            ..LiveOutcome::default()
        },
        buf: Buffer {
            last: begin,
            ..Buffer::default()
        },
        begin,
        catchup: None,
        clock_ms: 0.0,
    };
    let result = if dash {
        follow_dash(&mut p, &mut f).await
    } else {
        follow_hls(&mut p, &mut f).await
    };
    // Stalls count up to the end, however the session ended.
    f.buf.advance(p.now());
    f.out.stalls = f.buf.stalls;
    f.out.stall_s = f.buf.stall_s;
    f.lo.late_s = std::mem::take(&mut f.buf.stall_lengths);
    f.lo.catchup_s = f.buf.gained_s;
    let end = match result {
        Ok(()) => SessionEnd::Completed,
        Err(e) => e,
    };
    let mut out = f.out;
    out.live = Some(f.lo);
    p.finish(end, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_wrap_and_paths_follow_the_layout() {
        let mut s = LiveSettings::default();
        let v = LiveView {
            stream: 7,
            watch_s: 60.0,
        };
        assert_eq!(s.stream_of(&v), 7);
        assert_eq!(s.playlist_path(7), "/live/stream-7/index.m3u8");
        s.streams = Some(5);
        assert_eq!(s.stream_of(&v), 2);
        s.prefix = "/tv".into();
        assert_eq!(s.playlist_path(2), "/tv/stream-2/index.m3u8");
    }

    #[test]
    fn a_live_window_parses_with_dates_and_init() {
        let text =
            b"#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:2\n#EXT-X-MEDIA-SEQUENCE:41\n\
#EXT-X-MAP:URI=\"init.mp4\"\n\
#EXT-X-PROGRAM-DATE-TIME:2026-11-25T10:00:00.000Z\n#EXTINF:2.000,\nseg-41.m4s\n\
#EXT-X-PROGRAM-DATE-TIME:2026-11-25T10:00:02.000Z\n#EXTINF:2.000,\nseg-42.m4s\n";
        let w = manifest::hls_live("/live/stream-0/index.m3u8", text).unwrap();
        assert_eq!(w.first, 41);
        assert_eq!(w.end(), 43);
        assert!(!w.ended);
        assert_eq!(w.init.as_ref().unwrap().path, "/live/stream-0/init.mp4");
        assert_eq!(w.get(42).unwrap().piece.path, "/live/stream-0/seg-42.m4s");
        assert_eq!(w.get(40), None);
        assert_eq!(w.get(43), None);
        let d = w.get(42).unwrap().pdt_ms.unwrap() - w.get(41).unwrap().pdt_ms.unwrap();
        assert_eq!(d, 2000);
        let bad = manifest::hls_live("/x.m3u8", b"#EXTM3U\n#EXTINF:2,\na.ts\n");
        assert!(bad.is_err());
    }

    #[test]
    fn throughput_leaves_out_the_gaps_between_chunks() {
        // Two chunks of 3 reads, 10 ms apart (1,000 bytes each), a third of a second apart.
        let reads = [
            (0.00, 1000),
            (0.01, 1000),
            (0.02, 1000),
            (0.333, 1000),
            (0.343, 1000),
            (0.353, 1000),
        ];
        let (bytes, secs) = active_transfer(&reads).unwrap();
        assert_eq!(bytes, 4000);
        assert!((secs - 0.04).abs() < 1e-9, "{secs}");
        // A single read gives no estimate.
        assert_eq!(active_transfer(&[(0.0, 10)]), None);
        // Counting the whole time would have said 6,000 bytes in 0.353 s: about 8 times less.
    }

    #[test]
    fn catch_up_plays_faster_behind_the_target_slower_ahead_of_it_within_the_bounds() {
        let c = Catchup {
            target_s: 1.5,
            min_rate: 0.96,
            max_rate: 1.04,
        };
        assert_eq!(c.rate(1.5, 1.0, 0.5), 1.0);
        assert!((c.rate(1.75, 1.0, 0.5) - 1.02).abs() < 1e-9);
        assert_eq!(c.rate(4.0, 1.0, 0.5), 1.04);
        assert!((c.rate(1.25, 1.0, 0.5) - 0.98).abs() < 1e-9);
        assert_eq!(c.rate(0.2, 1.0, 0.5), 0.96);
        // Too little buffered to speed up.
        assert_eq!(c.rate(4.0, 0.3, 0.5), 1.0);
        assert_eq!(c.rate(0.2, 0.3, 0.5), 0.96);
    }

    #[test]
    fn a_buffer_played_faster_drains_faster_and_counts_what_it_gained() {
        let mut b = Buffer::default();
        assert_eq!(b.add(0.0, 2.0, 1.0, false), Some(0.0));
        b.speedup = 0.04;
        b.advance(1.0);
        assert!((b.level_s - 0.96).abs() < 1e-9, "{}", b.level_s);
        assert!((b.gained_s - 0.04).abs() < 1e-9, "{}", b.gained_s);
        // It runs dry 0.96 / 1.04 s later: the stall starts then.
        b.advance(2.0);
        assert_eq!(b.stalls, 1);
        assert!(
            (b.stall_s - (1.0 - 0.96 / 1.04)).abs() < 1e-9,
            "{}",
            b.stall_s
        );
    }
}
