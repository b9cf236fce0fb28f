//! vodkit's players checked against real ones: a CMAF media set (one set of segments behind
//! both a DASH and an HLS manifest) served by `vodkit serve --cors '*'` plays in headless
//! Chromium with dash.js and with hls.js — to the end of the title, frames advancing (two canvas
//! captures of the video differ), no player error — and the requests each browser player
//! made (from the server's access log) agree with `vodkit load --player` on the same title:
//! every segment fetched once and in order, starting on the same rung, and ending on the top
//! rung. Tolerance: the rendition of individual segments may differ while the players'
//! throughput estimates settle; the first segment's rung, the order, the set of segments
//! and the final rung must match.
//!
//!
//! Behind a shaped link (a network namespace for the clients whose veth's server side
//! carries an htb limit, needs root), the two kinds of players face the same bandwidth,
//! between the two rungs' advertised bandwidths: both still fetch every segment in order from the same first rung,
//! end on the low rung, and their shares of top-rung segments and their stall counts agree
//! within the tolerance written at [`SHAPED_TOLERANCE`].
//!
//! The unshaped run serves the title with `--secure-link` (under `/t1/` only): the pages
//! open signed manifest URLs, both browser players play the whole title from the URIs the
//! signed manifests carry (scoped HMAC tokens for the DASH templates, MD5 signatures for
//! every HLS URI), `vodkit load --player --sign-key` does the same, and an unsigned
//! segment is refused. The shaped run is unsigned.
//!
//! Needs Chromium, ffmpeg and the vendored dash.js and hls.js (`scripts/install-test-deps`
//! installs all three); without them the test says so and returns, except under `CI`.

use crate::common;

use common::{ip, ok};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use vodkit_testkit::{needs, Need};

/// One browser at a time: two Chromium playbacks in parallel on two cores would starve both.
pub(crate) static BROWSER: Mutex<()> = Mutex::new(());

/// Largest difference between the browser's and vodkit's share of top-rung segments behind
/// the shaped link, and between their stall counts (the browser's `waiting` events after
/// playback began).
const SHAPED_TOLERANCE: (f64, i64) = (0.3, 1);

const PLAYERS: &str = "/var/cache/vodkit/players/node_modules";

/// The vendored player builds: (dash.js UMD bundle, hls.js bundle).
fn vendored() -> Option<(PathBuf, PathBuf)> {
    let base = Path::new(PLAYERS);
    let dash = [
        "dashjs/dist/modern/umd/dash.all.min.js",
        "dashjs/dist/legacy/umd/dash.all.min.js",
        "dashjs/dist/dash.all.min.js",
    ]
    .iter()
    .map(|p| base.join(p))
    .find(|p| p.exists())?;
    let hls = base.join("hls.js/dist/hls.min.js");
    hls.exists().then_some((dash, hls))
}

pub(crate) fn prerequisites() -> Option<(PathBuf, PathBuf)> {
    if !needs(&[Need::Browser, Need::Tool("ffmpeg")]) {
        return None;
    }
    let found = vendored();
    if found.is_none() {
        vodkit_testkit::skip("dash.js/hls.js are not vendored (scripts/install-test-deps)");
    }
    found
}

/// The player script of `kind` (`dash` or `hls`) and the page's lines that start it on
/// the `<video id="v">` with `manifest`, pushing player errors to `ev.errors`: dash.js with
/// `dash_settings` (lines of script, each ending in a newline) before its handlers, hls.js
/// made with `hls_options` (a script object, or nothing).
pub(crate) fn start_player(
    kind: &str,
    manifest: &str,
    dash_settings: &str,
    hls_options: &str,
) -> (&'static str, String) {
    match kind {
        "dash" => (
            "/vendor/dash.all.min.js",
            format!(
                "const p = dashjs.MediaPlayer().create();\n\
                 {dash_settings}\
                 p.on(dashjs.MediaPlayer.events.ERROR, e => ev.errors.push(JSON.stringify(e.error || e)));\n\
                 p.initialize(v, '{manifest}', true);"
            ),
        ),
        _ => (
            "/vendor/hls.min.js",
            format!(
                "const h = new Hls({hls_options});\n\
                 h.on(Hls.Events.ERROR, (_, d) => {{ if (d.fatal) ev.errors.push(d.details); }});\n\
                 h.loadSource('{manifest}');\n\
                 h.attachMedia(v);\n\
                 h.on(Hls.Events.MANIFEST_PARSED, () => v.play());"
            ),
        ),
    }
}

/// A page's `snap()`: a hash of the video's current frame drawn at `width` × `height`
/// pixels, to tell frames apart.
pub(crate) fn snap_js(width: u32, height: u32) -> String {
    format!(
        "const c = document.createElement('canvas');
c.width = {width}; c.height = {height};
function snap() {{
  const g = c.getContext('2d');
  g.drawImage(v, 0, 0, {width}, {height});
  const d = g.getImageData(0, 0, {width}, {height}).data;
  let x = 0;
  for (let i = 0; i < d.length; i++) x = (x * 31 + d[i]) >>> 0;
  return x;
}}"
    )
}

/// A page that plays `manifest` with the player `kind` (`dash` or `hls`) and writes what
/// happened into `<pre id="out">` when the video ends (or after 60 s). dash.js's fast
/// switching is off: after an up-switch it would fetch segments near the playhead again at
/// the higher rendition, which vodkit's players never do (and a comparison of request
/// sequences then fails on dash.js's timing, not on the rules compared).
fn page(kind: &str, manifest: &str) -> String {
    let (script, start) = start_player(
        kind,
        manifest,
        "p.updateSettings({ streaming: { buffer: { fastSwitchEnabled: false } } });\n",
        "",
    );
    let snap = snap_js(64, 36);
    format!(
        r#"<!doctype html>
<html><body>
<video id="v" muted autoplay playsinline width="640" height="360"></video>
<pre id="out">pending</pre>
<script src="{script}"></script>
<script>
const v = document.getElementById('v');
const ev = {{ errors: [], waiting: 0, stalls: 0, shots: [] }};
{snap}
v.addEventListener('playing', () => {{ ev.played = true; }});
// A stall: waiting for data after playback began, before the last half second.
v.addEventListener('waiting', () => {{
  ev.waiting++;
  if (ev.played && !ev.state && !(v.duration > 0 && v.currentTime >= v.duration - 0.5)) ev.stalls++;
}});
// Two captures of frames actually presented, at least 3 s of media apart.
function onFrame(now, md) {{
  if (ev.shots.length === 0 && md.mediaTime > 0.5) {{ ev.shots.push(snap()); ev.t0 = md.mediaTime; }}
  else if (ev.shots.length === 1 && md.mediaTime > ev.t0 + 3) {{ ev.shots.push(snap()); ev.t1 = md.mediaTime; }}
  if (ev.shots.length < 2) v.requestVideoFrameCallback(onFrame);
}}
v.requestVideoFrameCallback(onFrame);
v.addEventListener('timeupdate', () => {{
  // MSE players do not always fire `ended`; reaching the duration is the end.
  if (v.duration > 0 && v.currentTime >= v.duration - 0.05 && !ev.state) report('ended');
}});
function report(state) {{
  const q = v.getVideoPlaybackQuality ? v.getVideoPlaybackQuality() : {{}};
  ev.state = state; ev.time = v.currentTime; ev.duration = v.duration; ev.frames = q.totalVideoFrames || 0;
  if (ev.reported) return;
  ev.reported = true;
  document.getElementById('out').textContent = JSON.stringify(ev);
  // The test reads the report from the server's access log.
  fetch('/report/' + encodeURIComponent(JSON.stringify(ev)));
}}
v.addEventListener('ended', () => report('ended'));
setTimeout(() => report('timeout'), 45000);
{start}
</script>
</body></html>
"#
    )
}

/// A network namespace for the clients, joined to the server's by a veth pair whose root
/// side (server-to-client traffic leaves there) is shaped by htb; removed on drop.
pub(crate) struct Shaped {
    ns: String,
    host_if: String,
    /// The server's address on the pair (the clients' is the next one).
    server: String,
}

impl Shaped {
    /// Link `index` of this process (each in its own /30 of 10.232.0.0/16).
    fn create(bps: u64, index: u8) -> Option<Shaped> {
        let tag = format!("{}{index}", std::process::id() % 100_000);
        let shaped = Shaped {
            ns: format!("vkbp{tag}"),
            host_if: format!("vkbp{tag}h"),
            server: format!("10.232.{index}.1"),
        };
        let (ns, host, inner) = (&shaped.ns, &shaped.host_if, format!("vkbp{tag}n"));
        let server = &shaped.server;
        let steps = [
            format!("netns add {ns}"),
            format!("link add {host} type veth peer name {inner}"),
            format!("link set {inner} netns {ns}"),
            format!("addr add {server}/30 dev {host}"),
            format!("link set {host} up"),
            format!("-n {ns} addr add 10.232.{index}.2/30 dev {inner}"),
            format!("-n {ns} link set {inner} up"),
            format!("-n {ns} link set lo up"),
        ];
        let tc = |args: String| {
            Command::new("tc")
                .args(args.split_whitespace())
                .status()
                .is_ok_and(|s| s.success())
        };
        let ok = steps.iter().all(|s| ip(s))
            && tc(format!("qdisc add dev {host} root handle 1: htb default 1"))
            && tc(format!(
                "class add dev {host} parent 1: classid 1:1 htb rate {bps}bit ceil {bps}bit burst 3200b cburst 3200b"
            ));
        ok.then_some(shaped)
    }

    /// `program` run inside the clients' namespace.
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns, program]);
        c
    }
}

impl Drop for Shaped {
    fn drop(&mut self) {
        ip(&format!("netns del {}", self.ns));
        ip(&format!("link del {}", self.host_if));
    }
}

/// Play `url` in headless Chromium in real time until the page reports (it requests
/// `/report/<json>`, which the access log at `log` records), and return the report. Inside
/// `shaped`'s namespace when given.
pub(crate) fn chromium(
    url: &str,
    profile: &Path,
    log: &Path,
    skip_lines: usize,
    shaped: Option<&Shaped>,
) -> serde_json::Value {
    let mut command = match shaped {
        Some(s) => s.command("chromium"),
        None => Command::new("chromium"),
    };
    let mut child = command
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--mute-audio",
            "--autoplay-policy=no-user-gesture-required",
            // The live pages are served over HTTPS with a test certificate.
            "--ignore-certificate-errors",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("chromium runs");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let report = loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let found = text.lines().skip(skip_lines).find_map(|l| {
            let path = l.split('\t').nth(7)?;
            path.strip_prefix("/report/").map(str::to_string)
        });
        if let Some(r) = found {
            break Some(r);
        }
        if std::time::Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    let _ = child.kill();
    let _ = child.wait();
    let Some(encoded) = report else {
        panic!("no report from the page {url} within 60 s");
    };
    let json = percent_decode(&encoded);
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// (rendition kbit/s, segment number) of every `/t1/vK/seg-N.m4s` request in the access
/// log lines from `lines`, in log order.
fn segments(log: &str, skip_lines: usize) -> Vec<(u32, u32)> {
    log.lines()
        .skip(skip_lines)
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let path = l.split('\t').nth(7)?;
            let path = path.split('?').next()?;
            let rest = path.strip_prefix("/t1/v")?;
            let (kbps, seg) = rest.split_once("/seg-")?;
            Some((kbps.parse().ok()?, seg.strip_suffix(".m4s")?.parse().ok()?))
        })
        .collect()
}

/// Every segment 1..=n fetched, in non-decreasing order (a player switching up may fetch a
/// segment again at the new rung).
fn check_sequence(who: &str, seq: &[(u32, u32)], n: u32) {
    let numbers: Vec<u32> = seq.iter().map(|s| s.1).collect();
    assert!(
        numbers.windows(2).all(|w| w[0] <= w[1]),
        "{who}: out of order: {seq:?}"
    );
    let mut covered = numbers.clone();
    covered.dedup();
    assert_eq!(
        covered,
        (1..=n).collect::<Vec<_>>(),
        "{who}: segments fetched {seq:?}"
    );
}

/// What one kind of player did: (kind, browser segments, vodkit segments, browser report,
/// vodkit results).
type Played = (
    &'static str,
    Vec<(u32, u32)>,
    Vec<(u32, u32)>,
    serde_json::Value,
    serde_json::Value,
);

#[test]
fn dash_js_and_hls_js_agree_with_vodkit_players() {
    let Some(vendored) = prerequisites() else {
        return;
    };
    let _one = BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let (runs, _) = play_both(vendored, false, true);
    for (kind, browser, ours, _, _) in runs {
        agree(kind, &browser, &ours, 1500);
    }
}

/// Both fetched every segment in order, from the same first rung, and ended on `last_rung`.
fn agree(kind: &str, browser: &[(u32, u32)], ours: &[(u32, u32)], last_rung: u32) {
    check_sequence(&format!("{kind} in Chromium"), browser, 10);
    check_sequence(&format!("vodkit --player {kind}"), ours, 10);
    assert_eq!(
        browser[0].0, ours[0].0,
        "{kind}: first rung differs: {browser:?} vs {ours:?}"
    );
    let last = |s: &[(u32, u32)]| s.last().map(|x| x.0);
    assert_eq!(
        last(browser),
        Some(last_rung),
        "{kind}: Chromium ends elsewhere: {browser:?}"
    );
    assert_eq!(
        last(ours),
        Some(last_rung),
        "{kind}: vodkit ends elsewhere: {ours:?}"
    );
}

#[test]
fn behind_a_shaped_link_browser_and_vodkit_players_choose_alike() {
    let Some(vendored) = prerequisites() else {
        return;
    };
    if !needs(&[Need::Netns]) {
        return;
    }
    let _netns = vodkit_testkit::turn(vodkit_testkit::turn::NETNS);
    let _one = BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let top_share =
        |s: &[(u32, u32)]| s.iter().filter(|x| x.0 == 1500).count() as f64 / s.len().max(1) as f64;
    let (runs, link) = play_both(vendored, true, false);
    for (kind, browser, ours, report, results) in runs {
        eprintln!("{kind} behind {link:?} bit/s: Chromium {browser:?}, vodkit {ours:?}");
        agree(kind, &browser, &ours, 400);
        let (share, stalls) = SHAPED_TOLERANCE;
        assert!(
            (top_share(&browser) - top_share(&ours)).abs() <= share,
            "{kind}: top-rung shares {} (Chromium) and {} (vodkit): {browser:?} vs {ours:?}",
            top_share(&browser),
            top_share(&ours)
        );
        let theirs = report["stalls"].as_i64().unwrap_or(0);
        let mine = results["qos"]["abr"]["stalls"].as_i64().unwrap_or(0);
        assert!(
            (theirs - mine).abs() <= stalls,
            "{kind}: stalls {theirs} (Chromium) and {mine} (vodkit): {report} {results}"
        );
    }
}

/// The `bandwidth="N"` values of a DASH manifest, ascending.
fn bandwidths(mpd: &str) -> Vec<u64> {
    let mut v: Vec<u64> = mpd
        .split("bandwidth=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next()?.parse().ok())
        .collect();
    v.sort_unstable();
    v
}

/// Package the test title, serve it, and play it with each browser player and with
/// `vodkit load --player` of the same kind. With `shape`, every client runs in a namespace
/// behind a link between the two rungs' advertised bandwidths (their geometric mean: the
/// test pattern encodes below the nominal rates, so the link follows the manifest); the
/// link's bit rate is returned. With `signed`, the title needs signed URLs
/// (`--secure-link`): the pages and the load open signed manifests.
fn play_both(
    (dash_js, hls_js): (PathBuf, PathBuf),
    shape: bool,
    signed: bool,
) -> (Vec<Played>, Option<u64>) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    // One 20 s title in two rungs, 2 s segments.
    let catalog = serde_json::json!({
        "spec": "browser-test", "seed": 1,
        "titles": [{"id": 1, "rank": 1, "duration_s": 20.0, "renditions": [
            {"bitrate_kbps": 400, "media": "video", "size_bytes": 1, "layout": {"kind": "unchunked"},
             "files": [{"path": "v/1-400.dat", "size_bytes": 1}]},
            {"bitrate_kbps": 1500, "media": "video", "size_bytes": 1, "layout": {"kind": "unchunked"},
             "files": [{"path": "v/1-1500.dat", "size_bytes": 1}]}]}]
    });
    std::fs::create_dir_all(p.join("w")).unwrap();
    std::fs::write(p.join("w/catalog.json"), catalog.to_string()).unwrap();
    ok(
        p,
        "fileset create --workload w --root media --media cmaf --segment 2s --pool 4 --quiet",
    );
    std::fs::create_dir_all(p.join("media/vendor")).unwrap();
    std::fs::copy(&dash_js, p.join("media/vendor/dash.all.min.js")).unwrap();
    std::fs::copy(&hls_js, p.join("media/vendor/hls.min.js")).unwrap();
    std::fs::write(p.join("url.key"), "browser-test-secret\n").unwrap();
    let signer = vodkit_securelink::Signer {
        secret: vodkit_securelink::Secret::new("browser-test-secret").unwrap(),
        form: vodkit_securelink::Form::Md5,
        ttl_s: 600,
    };
    let entry = |path: &str| match signed {
        true => signer.sign_target(path, vodkit_securelink::unix_now()),
        false => path.to_string(),
    };
    std::fs::write(
        p.join("media/dash.html"),
        page("dash", &entry("/t1/manifest.mpd")),
    )
    .unwrap();
    std::fs::write(
        p.join("media/hls.html"),
        page("hls", &entry("/t1/master.m3u8")),
    )
    .unwrap();
    // vodkit's own player: one session watching the whole title.
    let session = serde_json::json!({"id": 1, "gap": 0.0, "class": "c", "title": 1,
        "requests": [{"path": "/t1/manifest.mpd", "timeout_s": 30, "media_s": 20.0}]});
    std::fs::write(p.join("w/sessions.jsonl"), format!("{session}\n")).unwrap();
    let bw = bandwidths(&std::fs::read_to_string(p.join("media/t1/manifest.mpd")).unwrap());
    assert_eq!(bw.len(), 2, "{bw:?}");
    let link = shape.then(|| (bw[0] as f64 * bw[1] as f64).sqrt() as u64);
    // Chromium and vodkit's player play at the same time, each from its own server (and
    // access log) and, when shaped, behind its own link of the same bit rate.
    let nets: Vec<Shaped> = link.map_or_else(Vec::new, |bps| {
        (0..2)
            .map(|i| {
                Shaped::create(bps, i)
                    .expect("cannot create a namespace with an htb-shaped veth (ip, tc) as root")
            })
            .collect()
    });
    let (browser_net, load_net) = (nets.first(), nets.get(1));
    let secure = match signed {
        true => " --secure-link url.key --secure-link-prefix /t1/",
        false => "",
    };
    let serve = |net: Option<&Shaped>, log: &str| {
        let listen = net.map_or("127.0.0.1", |s| s.server.as_str());
        let mut server = common::daemon(
            p,
            &format!("serve --root media --listen {listen}:0 --cors * --access-log {log}{secure}"),
        );
        let url = server.wait_for("listening on ");
        (server, url)
    };
    let (server, url) = serve(browser_net, "access.log");
    let (load_server, load_url) = serve(load_net, "access-load.log");
    let lines = |log: &str| std::fs::read_to_string(p.join(log)).unwrap_or_default();
    let mut runs = Vec::new();
    for kind in ["dash", "hls"] {
        let before = lines("access.log").lines().count();
        let load_before = lines("access-load.log").lines().count();
        let sign = if signed { " --sign-key url.key" } else { "" };
        let load = format!("load --target {load_url} --sessions w/sessions.jsonl --no-link --rate 1 --player {kind} --out {kind}.json{sign}");
        let play_load = || match load_net {
            None => {
                ok(p, &load);
            }
            Some(s) => {
                let status = s
                    .command(env!("CARGO_BIN_EXE_vodkit"))
                    .args(load.split_whitespace())
                    .arg("--allow-remote")
                    .current_dir(p)
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .status()
                    .expect("ip netns exec vodkit runs");
                assert!(
                    status.success(),
                    "{kind}: vodkit load in the namespace failed"
                );
            }
        };
        let report = std::thread::scope(|scope| {
            let ours = scope.spawn(play_load);
            let report = chromium(
                &format!("{url}/{kind}.html"),
                &p.join(format!("profile-{kind}")),
                &p.join("access.log"),
                before,
                browser_net,
            );
            if let Err(e) = ours.join() {
                std::panic::resume_unwind(e);
            }
            report
        });
        std::thread::sleep(std::time::Duration::from_millis(1500)); // the logs flush each second
                                                                    // `state` is `ended`, or `timeout` with the playhead at the end: dash.js leaves the
                                                                    // element waiting at the last frame instead of firing `ended` in headless runs.
        assert_eq!(
            report["errors"].as_array().map(Vec::len),
            Some(0),
            "{kind}: {report}"
        );
        // Under headless virtual time Chromium presents only some of the 480 frames; the
        // canvas captures below are the proof that pictures advanced.
        assert!(
            report["frames"].as_u64().unwrap_or(0) > 0,
            "{kind}: {report}"
        );
        assert!(
            report["time"].as_f64().unwrap_or(0.0) >= 19.9,
            "{kind}: {report}"
        );
        let shots = report["shots"].as_array().cloned().unwrap_or_default();
        assert!(
            shots.len() == 2 && shots[0] != shots[1],
            "{kind}: frames did not advance: {report}"
        );
        let browser = segments(&lines("access.log"), before);
        let ours = segments(&lines("access-load.log"), load_before);
        let results = common::json_file(&p.join(format!("{kind}.json")));
        if load_net.is_none() {
            assert_eq!(results["qos"]["abr"]["stalls"], 0, "{kind}: {results}");
        }
        runs.push((kind, browser, ours, report, results));
    }
    if signed {
        let addr = url.trim_start_matches("http://");
        let (status, _) = common::http_get(addr, "/t1/v400/seg-1.m4s");
        assert_eq!(status, 403, "an unsigned segment is refused");
    }
    for s in [server, load_server] {
        let (code, _) = s.stop();
        assert_eq!(code, 0);
    }
    (runs, link)
}
