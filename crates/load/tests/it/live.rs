//! Live viewers against a scripted live origin (a sliding HLS window that advances in real
//! time, half-second segments): on an idle origin viewers join at the edge and play without
//! a stall; a viewer too slow for the bit rate falls out of the window and skips segments;
//! a source that stops makes viewers stall and end with a reason; `#EXT-X-ENDLIST` ends
//! them cleanly.

use crate::common;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};
use vodkit_load::record::{FailureReason, SessionEnd};
use vodkit_load::Target;
use vodkit_workload::model::{LiveView, Session};

/// Segment duration of the scripted source, seconds.
const SEG_S: f64 = 0.5;

/// How the scripted source behaves.
#[derive(Clone, Copy)]
struct Script {
    /// Segments in the playlist window.
    window: u64,
    segment_bytes: usize,
    /// The source stops publishing after this many segments (the playlist freezes).
    stops_after: Option<u64>,
    /// The source ends cleanly (`#EXT-X-ENDLIST`) after this many segments.
    ends_after: Option<u64>,
}

impl Script {
    /// A source that publishes for as long as the test runs.
    fn steady(window: u64, segment_bytes: usize) -> Script {
        Script {
            window,
            segment_bytes,
            stops_after: None,
            ends_after: None,
        }
    }
}

struct Origin {
    script: Script,
    t0: Instant,
    wall0_ms: u64,
}

impl Origin {
    /// Segments published by now.
    fn published(&self) -> u64 {
        let n = (self.t0.elapsed().as_secs_f64() / SEG_S).floor() as u64;
        let cap = self.script.stops_after.or(self.script.ends_after);
        cap.map_or(n, |c| n.min(c))
    }

    fn playlist(&self) -> String {
        let end = self.published();
        let first = end.saturating_sub(self.script.window);
        let mut p = format!(
            "#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:1\n#EXT-X-MEDIA-SEQUENCE:{first}\n#EXT-X-MAP:URI=\"init.mp4\"\n"
        );
        for n in first..end {
            let ms = self.wall0_ms + (n as f64 * SEG_S * 1000.0) as u64;
            let t = vodkit_live::playlist::rfc3339_ms(UNIX_EPOCH + Duration::from_millis(ms));
            p += &format!("#EXT-X-PROGRAM-DATE-TIME:{t}\n#EXTINF:{SEG_S:.3},\nseg-{n}.m4s\n");
        }
        if self.script.ends_after.is_some_and(|e| end >= e) {
            p += "#EXT-X-ENDLIST\n";
        }
        p
    }

    fn answer(&self, path: &str) -> Vec<u8> {
        let ok = |body: Vec<u8>| {
            let mut v =
                format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
            v.extend(body);
            v
        };
        if path.ends_with("/index.m3u8") {
            return ok(self.playlist().into_bytes());
        }
        if path.ends_with("/init.mp4") {
            return ok(vec![0u8; 600]);
        }
        let n: Option<u64> = path
            .rsplit('/')
            .next()
            .and_then(|f| f.strip_prefix("seg-"))
            .and_then(|f| f.strip_suffix(".m4s"))
            .and_then(|n| n.parse().ok());
        match n {
            Some(n) if n < self.published() => ok(vec![7u8; self.script.segment_bytes]),
            _ => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
        }
    }
}

fn read_path(stream: &mut TcpStream) -> Option<String> {
    let head = common::request_head(stream)?;
    let line = String::from_utf8_lossy(&head).lines().next()?.to_string();
    line.split_whitespace().nth(1).map(str::to_string)
}

/// Start the scripted origin (the source's clock starts now) and let its window fill for
/// `fill_s` seconds.
fn origin(script: Script, fill_s: f64) -> Target {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let wall0_ms = common::unix_now_ms();
    let o = Arc::new(Origin {
        script,
        t0: Instant::now(),
        wall0_ms,
    });
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let o = o.clone();
            std::thread::spawn(move || {
                while let Some(path) = read_path(&mut stream) {
                    if stream.write_all(&o.answer(&path)).is_err() {
                        return;
                    }
                }
            });
        }
    });
    std::thread::sleep(Duration::from_secs_f64(fill_s));
    Target::parse(&format!("http://127.0.0.1:{port}"), false).unwrap()
}

fn viewer(id: u64, stream: u32, watch_s: f64, start_s: f64, class: &str) -> Session {
    let mut s = Session::new(id, 0.0, class, Vec::new());
    s.start_s = Some(start_s);
    s.bitrate_kbps = Some(1000);
    s.live = Some(LiveView { stream, watch_s });
    s
}

/// `n` viewers of class `lan` joining `step_s` apart from time 0, each watching `watch_s`
/// of stream `stream(i)`.
fn joining(n: u64, watch_s: f64, step_s: f64, stream: impl Fn(u64) -> u32) -> Vec<Session> {
    (0..n)
        .map(|i| viewer(i, stream(i), watch_s, i as f64 * step_s, "lan"))
        .collect()
}

#[test]
fn viewers_join_at_the_edge_and_play_without_stalls_on_an_idle_origin() {
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Slow]) {
        return;
    }
    // Let the window fill, then four viewers join half a second apart.
    let target = origin(Script::steady(6, 20_000), 3.5);
    let sessions = joining(4, 3.0, 0.5, |i| i as u32);
    let run = common::run(target, sessions, |_| {});
    for s in &run.sessions {
        assert_eq!(s.end, SessionEnd::Completed, "{:?}", s.requests.last());
        let p = s.player.as_ref().unwrap();
        let l = p.live.as_ref().unwrap();
        assert_eq!(p.stalls, 0, "viewer {} stalled: {l:?}", s.index);
        assert_eq!(l.skipped_segments, 0);
        assert!(p.media_s >= 3.0);
        assert!(p.startup_s.unwrap() < 0.5, "{:?}", p.startup_s);
        // Joined three segments behind the edge: 1-2.5 s behind, never ahead of it.
        for &x in &l.latency_s {
            assert!((0.5..3.0).contains(&x), "latency {x}");
        }
        assert!(l.reloads >= 2, "followed the edge with reloads: {l:?}");
    }
    let live = run.results.qos.live.as_ref().expect("qos.live");
    assert_eq!(live.sessions, 4);
    assert_eq!(live.stalls, 0);
    assert_eq!(live.unstalled_sessions, 4);
    assert!(live.latency_to_edge_s_p50 > 0.5 && live.latency_to_edge_s_p50 < 3.0);
    let json = serde_json::to_value(&run.results).unwrap();
    assert!(json["qos"]["live"]["latency_to_edge_s_p50"].is_number());
    assert!(json["qos"]["live"]["skipped_segments"].is_number());
    assert!(json["qos"]["live"]["stalls"].is_number());
    assert!(run.results.summary().contains("live       4 viewers"));
}

#[test]
fn a_viewer_too_slow_for_the_stream_falls_out_of_the_window_and_skips() {
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Slow]) {
        return;
    }
    // 100 kB per half second is 1.6 Mbit/s; the viewer's link carries 0.8 Mbit/s.
    let target = origin(Script::steady(3, 100_000), 2.0);
    let run = common::run(target, vec![viewer(0, 0, 6.0, 0.0, "slow")], |c| {
        common::link(c, "slow", 800_000, Duration::ZERO);
    });
    let s = &run.sessions[0];
    let p = s.player.as_ref().unwrap();
    let l = p.live.as_ref().unwrap();
    assert!(l.skipped_segments > 0, "{l:?}");
    assert!(p.stalls > 0, "{p:?}");
    assert!(!l.late_s.is_empty());
    let live = run.results.qos.live.as_ref().unwrap();
    assert_eq!(live.skipped_segments, u64::from(l.skipped_segments));
}

#[test]
fn a_source_that_stops_makes_viewers_stall_then_end_with_a_reason() {
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Slow]) {
        return;
    }
    let script = Script {
        stops_after: Some(8),
        ..Script::steady(4, 10_000)
    };
    let target = origin(script, 2.5);
    let started = Instant::now();
    let run = common::run(target, vec![viewer(0, 0, 30.0, 0.0, "lan")], |_| {});
    let s = &run.sessions[0];
    assert_eq!(s.end, SessionEnd::Failed(FailureReason::Timeout));
    let failure = s.requests.last().unwrap().failure.as_ref().unwrap();
    assert!(failure.detail.contains("did not advance"), "{failure:?}");
    let p = s.player.as_ref().unwrap();
    assert!(p.stalls >= 1);
    // Five target durations (1 s) of a frozen playlist, not the 30 s watch time.
    assert!(started.elapsed() < Duration::from_secs(12));
}

#[test]
fn an_ended_stream_ends_its_viewers_cleanly() {
    let script = Script {
        ends_after: Some(8),
        ..Script::steady(4, 10_000)
    };
    let target = origin(script, 2.0);
    let run = common::run(target, vec![viewer(0, 0, 30.0, 0.0, "lan")], |_| {});
    let s = &run.sessions[0];
    assert_eq!(s.end, SessionEnd::Completed);
    let l = s.player.as_ref().unwrap().live.as_ref().unwrap();
    assert!(l.stream_ended);
    assert!(l.segments >= 4, "{l:?}");
}

#[test]
fn probes_run_apart_from_the_load_and_report_their_own_quality() {
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Slow]) {
        return;
    }
    let target = origin(Script::steady(6, 10_000), 2.0);
    let sessions = joining(6, 2.0, 0.3, |_| 0);
    let run = common::run(target, sessions, |c| {
        c.probes = Some("2,1.5s".parse().unwrap());
        c.duration = Some(Duration::from_secs(5));
    });
    let probes: Vec<_> = run.sessions.iter().filter(|s| s.probe).collect();
    assert_eq!(probes.len(), 2);
    for p in &probes {
        assert!(p.session.id >= vodkit_load::probe::PROBE_ID_BASE);
        assert_eq!(p.session.live.unwrap().watch_s, 1.5);
        assert_eq!(p.end, SessionEnd::Completed);
    }
    let report = run.results.probes.as_ref().expect("probes in results");
    assert_eq!(report.sessions.started, 2);
    assert_eq!(
        report.sessions.goodput_fraction, 1.0,
        "{:?}",
        report.sessions
    );
    assert!(report.qos.sessions == 0 || report.qos.acceptable_sessions_fraction > 0.0);
    assert_eq!(report.qos.live.as_ref().unwrap().sessions, 2);
    // The run's own figures leave the probes out.
    assert_eq!(run.results.sessions.started, 6);
    assert_eq!(run.results.qos.live.as_ref().unwrap().sessions, 6);
    assert!(run.results.summary().contains("probes     2 sessions"));
}
