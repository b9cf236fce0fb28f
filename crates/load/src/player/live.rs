//! A live viewer (sessions with `live` set, seed 004's live workloads): load the stream's
//! HLS media playlist, join a few segments behind the live edge (hls.js's
//! `liveSyncDurationCount`), fetch each new segment as it appears, reload the playlist the
//! way RFC 8216 §6.3.4 says (after the newest segment's duration when it changed, half the
//! target duration when it did not), and keep a playout buffer that drains in real time.
//!
//! What it measures besides start-up and stalls: latency behind the live edge (wall clock
//! minus the `#EXT-X-PROGRAM-DATE-TIME` of the content at the playhead), segments skipped
//! because they left the window before the viewer got to them (the HTTP form of seed
//! 004's thinning), and the length of each stall (late-only jitter). A playlist that stops
//! advancing ends the session after `stale_targets` target durations (a failure, with the
//! reason); `#EXT-X-ENDLIST` ends it cleanly.

use super::manifest::{self, LiveWindow, Piece};
use super::play::{Buffer, Player};
pub use super::LiveSettings;
use crate::record::{FailureReason, LiveOutcome, PlayerOutcome, SessionEnd, SessionRecord};
use crate::viewer::{Plan, Shared};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use vodkit_workload::model::LiveView;

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

async fn load(p: &mut Player<'_>, cfg: &LiveSettings, url: &str) -> Result<LiveWindow, SessionEnd> {
    let piece = Piece {
        path: url.to_string(),
        range: None,
    };
    let (text, _, _) = p.get(&piece, 0.0, cfg.playlist_timeout_s, true).await?;
    manifest::hls_live(url, &text).map_err(|e| p.broken(e.to_string()))
}

#[allow(clippy::too_many_arguments)]
async fn follow(
    p: &mut Player<'_>,
    cfg: &LiveSettings,
    url: &str,
    watch_s: f64,
    out: &mut PlayerOutcome,
    lo: &mut LiveOutcome,
    buf: &mut Buffer,
    begin: f64,
) -> Result<(), SessionEnd> {
    let mut win = load(p, cfg, url).await?;
    let mut loaded_at = p.now();
    let mut changed_at = loaded_at;
    let mut changed = true;
    let mut next = win
        .end()
        .saturating_sub(u64::from(cfg.sync_segments.max(1)))
        .max(win.first);
    let mut init_done = false;
    loop {
        if out.media_s + 1e-9 >= watch_s {
            return Ok(());
        }
        if next < win.first {
            lo.skipped_segments += (win.first - next) as u32;
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
            lo.segments += 1;
            out.media_s += seg.duration_s;
            next += 1;
            let resume = if buf.started {
                cfg.resume_s
            } else {
                f64::from(cfg.startup_segments.max(1)) * seg.duration_s
            };
            let last = out.media_s + 1e-9 >= watch_s;
            if let Some(at) = buf.add(p.now(), seg.duration_s, resume, last) {
                out.startup_s = Some(at - begin);
            }
            if let (true, Some(pdt)) = (buf.playing, seg.pdt_ms) {
                // The playhead is `level` seconds before the end of what just arrived.
                let end_ms = pdt as f64 + seg.duration_s * 1000.0;
                let at_playhead = end_ms - buf.level_s * 1000.0;
                lo.latency_s.push((wall_ms() as f64 - at_playhead) / 1000.0);
            }
            continue;
        }
        if win.ended {
            lo.stream_ended = true;
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
        let quiet = p.now() - changed_at;
        if quiet > cfg.stale_targets * win.target_s {
            return Err(p.fail_last(
                FailureReason::Timeout,
                format!("{url}: the live playlist did not advance for {quiet:.1} s"),
            ));
        }
        let before = win.end();
        win = load(p, cfg, url).await?;
        lo.reloads += 1;
        loaded_at = p.now();
        changed = win.end() != before;
        if changed {
            changed_at = loaded_at;
        }
    }
}

/// Watch `view`'s live stream from the edge for its watch time.
pub(crate) async fn watch(plan: &Plan, shared: &Arc<Shared>, view: LiveView) -> SessionRecord {
    let cfg = &shared.live_view;
    let (mut p, _lease) = Player::new(plan, shared);
    let stream = cfg.stream_of(&view);
    let url = cfg.playlist_path(stream);
    let mut out = PlayerOutcome::default();
    let mut lo = LiveOutcome {
        stream,
        ..LiveOutcome::default()
    };
    let begin = p.now();
    let mut buf = Buffer {
        last: begin,
        ..Buffer::default()
    };
    let result = follow(
        &mut p,
        cfg,
        &url,
        view.watch_s,
        &mut out,
        &mut lo,
        &mut buf,
        begin,
    )
    .await;
    // Stalls count up to the end, however the session ended.
    buf.advance(p.now());
    out.stalls = buf.stalls;
    out.stall_s = buf.stall_s;
    lo.late_s = std::mem::take(&mut buf.stall_lengths);
    let end = match result {
        Ok(()) => SessionEnd::Completed,
        Err(e) => e,
    };
    out.live = Some(lo);
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
}
