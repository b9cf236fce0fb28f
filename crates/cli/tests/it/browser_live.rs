//! Low-latency live in real browser players: `vodkit live push --low-latency` publishes a
//! real H.264 title (fragmented at a third of a second, 2-s segments) over HTTPS to
//! `vodkit serve --http2 --ingest`, and headless Chromium plays the stream over HTTP/2
//! with hls.js in its low-latency mode (LL-HLS: parts, preload hints, blocking reloads)
//! and with dash.js (low-latency DASH: chunked segments, `availabilityTimeOffset`). Each
//! page reports the player's own latency figure after some seconds of playback: hls.js's
//! `latency` must be under 3 s, dash.js's `getCurrentLiveLatency()` under 4 s; both play
//! without a player error and with frames advancing. The server's access log shows the
//! pages' requests as HTTP/2, the hls.js page's playlist requests as blocking reloads
//! (`_HLS_msn`) and its media as parts.
//!
//! Needs Chromium, ffmpeg and the vendored players (`scripts/install-test-deps`); without
//! them the test says so and returns, except under `CI`.

use crate::browser_player::{chromium, prerequisites, snap_js, start_player, BROWSER};
use crate::common;
use common::ok;
use std::path::Path;
use std::process::Command;

/// Seconds of playback after which a page reports.
const WATCH_S: u32 = 12;

/// A page that plays the live stream at `manifest` with `kind` (`hls` or `dash`) and
/// reports the player's latency to the live edge once it has played [`WATCH_S`] seconds.
fn page(kind: &str, manifest: &str) -> String {
    let (script, start) = start_player(kind, manifest, "", "{ lowLatencyMode: true }");
    let latency = match kind {
        "dash" => "p.getCurrentLiveLatency()",
        _ => "h.latency",
    };
    let snap = snap_js(32, 18);
    format!(
        r#"<!doctype html>
<html><body>
<video id="v" muted autoplay playsinline width="320" height="180"></video>
<script src="{script}"></script>
<script>
const v = document.getElementById('v');
const ev = {{ errors: [], stalls: 0, shots: [], latencies: [] }};
{snap}
v.addEventListener('playing', () => {{ if (ev.started === undefined) ev.started = performance.now(); }});
// Two captures of frames actually presented, at least 3 s of media apart.
function onFrame(now, md) {{
  if (ev.shots.length === 0) {{ ev.shots.push(snap()); ev.t0 = md.mediaTime; }}
  else if (ev.shots.length === 1 && md.mediaTime > ev.t0 + 3) {{ ev.shots.push(snap()); }}
  if (ev.shots.length < 2) v.requestVideoFrameCallback(onFrame);
}}
v.requestVideoFrameCallback(onFrame);
v.addEventListener('waiting', () => {{ if (ev.started !== undefined) ev.stalls++; }});
{start}
const tick = setInterval(() => {{
  if (ev.started === undefined) return;
  const played = (performance.now() - ev.started) / 1000;
  if (played > 4) ev.latencies.push({latency});
  if (played >= {WATCH_S}) {{
    ev.latency = {latency};
    ev.frames = (v.getVideoPlaybackQuality ? v.getVideoPlaybackQuality().totalVideoFrames : 0);
    clearInterval(tick);
    fetch('/report/' + encodeURIComponent(JSON.stringify(ev)));
  }}
}}, 500);
setTimeout(() => {{ ev.latency = -1; fetch('/report/' + encodeURIComponent(JSON.stringify(ev))); }}, 50000);
</script>
</body></html>
"#
    )
}

/// An H.264 test title fragmented every third of a second with a key frame every 2 s: each
/// fragment becomes one part, six of them one segment.
fn title(dir: &Path) -> std::path::PathBuf {
    let out = dir.join("title.mp4");
    let status = Command::new("ffmpeg")
        .args(["-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi"])
        .args(["-i", "testsrc2=size=320x180:rate=30", "-t", "12"])
        .args([
            "-c:v",
            "libx264",
            "-profile:v",
            "baseline",
            "-pix_fmt",
            "yuv420p",
        ])
        .args([
            "-g",
            "60",
            "-keyint_min",
            "60",
            "-sc_threshold",
            "0",
            "-b:v",
            "400k",
        ])
        .args(["-movflags", "frag_keyframe+empty_moov+default_base_moof"])
        .args(["-frag_duration", "333333"])
        .arg(&out)
        .status()
        .expect("ffmpeg runs");
    assert!(status.success(), "ffmpeg could not encode the test title");
    out
}

/// The `GET` requests of the access-log lines after `skip`: (protocol, path with query).
fn requests(log: &Path, skip: usize) -> Vec<(String, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .skip(skip)
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            if f.get(6) != Some(&"GET") {
                return None;
            }
            let proto = f.iter().find(|x| x.starts_with("HTTP/"))?.to_string();
            Some((proto, f.get(7)?.to_string()))
        })
        .collect()
}

#[test]
fn hls_js_and_dash_js_play_vodkit_low_latency_live_over_http2() {
    let Some((dash_js, hls_js)) = prerequisites() else {
        return;
    };
    let _one = BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    let title = title(p);
    std::fs::create_dir_all(p.join("www/vendor")).unwrap();
    std::fs::copy(&dash_js, p.join("www/vendor/dash.all.min.js")).unwrap();
    std::fs::copy(&hls_js, p.join("www/vendor/hls.min.js")).unwrap();
    std::fs::write(
        p.join("www/hls.html"),
        page("hls", "/live/stream-0/index.m3u8"),
    )
    .unwrap();
    std::fs::write(
        p.join("www/dash.html"),
        page("dash", "/live/stream-0/manifest.mpd"),
    )
    .unwrap();
    ok(p, "tls selfsigned --out certs");
    let mut server = common::daemon(
        p,
        "serve --root www --listen 127.0.0.1:0 --tls-cert certs/cert.pem --tls-key certs/key.pem \
         --http2 --cors * --access-log access.log --ingest /live/ --ingest-token tok",
    );
    let url = server.wait_for("listening on ");
    assert!(url.starts_with("https://"), "{url}");
    let source = common::daemon(
        p,
        &format!(
            "live push --target {url} --ca certs/ca.pem --ingest-token tok --streams 1 \
             --low-latency --title {} --segment 2s --duration 80s --clock-url {url}/.vodkit/clock",
            title.display()
        ),
    );
    // Let the source publish a few segments before the first viewer arrives.
    std::thread::sleep(std::time::Duration::from_secs(5));
    let log = p.join("access.log");
    let mut reports = Vec::new();
    for kind in ["hls", "dash"] {
        let before = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count();
        let report = chromium(
            &format!("{url}/{kind}.html"),
            &p.join(format!("profile-{kind}")),
            &log,
            before,
            None,
        );
        std::thread::sleep(std::time::Duration::from_millis(1500)); // the log flushes each second
        let seen = requests(&log, before);
        eprintln!("{kind}: {report}");
        reports.push((kind, report, seen));
    }
    let _ = source.stop();
    let (code, _) = server.stop();
    assert_eq!(code, 0);

    for (kind, report, seen) in reports {
        assert_eq!(
            report["errors"].as_array().map(Vec::len),
            Some(0),
            "{kind}: {report}"
        );
        let shots = report["shots"].as_array().cloned().unwrap_or_default();
        assert!(
            shots.len() == 2 && shots[0] != shots[1],
            "{kind}: frames did not advance: {report}"
        );
        // About 30 frames a second were presented while it played (the title's rate).
        let frames = report["frames"].as_u64().unwrap_or(0);
        assert!(
            frames >= u64::from(WATCH_S) * 15,
            "{kind}: {frames} frames in {WATCH_S} s: {report}"
        );
        let latency = report["latency"].as_f64().unwrap_or(-1.0);
        let limit = if kind == "hls" { 3.0 } else { 4.0 };
        assert!(
            latency > 0.0 && latency < limit,
            "{kind}: the player's latency to the live edge is {latency} s (limit {limit} s): {report}"
        );
        let media: Vec<&(String, String)> = seen
            .iter()
            .filter(|(_, path)| path.contains("/live/"))
            .collect();
        assert!(
            !media.is_empty() && media.iter().all(|(proto, _)| proto == "HTTP/2.0"),
            "{kind}: the stream's requests are not all HTTP/2: {media:?}"
        );
        if kind == "hls" {
            assert!(
                media.iter().any(|(_, path)| path.contains("_HLS_msn=")),
                "hls.js made no blocking playlist reload: {media:?}"
            );
            let parts = media
                .iter()
                .filter(|(_, path)| {
                    let name = path.rsplit('/').next().unwrap_or("");
                    name.starts_with("seg-") && name.matches('.').count() == 2
                })
                .count();
            assert!(parts > 0, "hls.js fetched no parts: {media:?}");
        }
    }
}
