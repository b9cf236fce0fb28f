//! Low-latency live viewers against a scripted low-latency origin: a stream of 1.5-s
//! segments in six 0.25-s parts that advances with the wall clock, whose playlist lists
//! the parts of its newest segments and a preload hint, which holds a blocking reload
//! (`_HLS_msn`/`_HLS_part`) and a hinted part until that part exists, and which sends a
//! segment still being made as a chunked body, one chunk per part at that part's time
//! (over HTTP/1.1, or as DATA frames over HTTP/2). LL-HLS and LL-DASH viewers play it
//! within a segment of the live edge without a stall, where classic viewers of the same
//! stream stay at least two segments behind. The same stream, published part by part to
//! vodkit's own live origin as the low-latency source publishes, plays as well there.

use crate::common;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use vodkit_load::player::{PlayerConfig, Protocol};
use vodkit_load::record::{LiveMode, LiveOutcome, SessionEnd, SessionRecord};
use vodkit_load::{HttpVersion, Run, Target};
use vodkit_testkit::Need;
use vodkit_workload::model::{LiveView, Session};

/// Segment and part durations, ms; parts per segment.
const SEG_MS: u64 = 1500;
const PART_MS: u64 = 250;
const PARTS: u64 = SEG_MS / PART_MS;
const PART_BYTES: usize = 25_000;
/// Complete segments in the playlist's window.
const WINDOW: u64 = 6;

/// What a response is, once it may be sent.
enum Body {
    Whole(Vec<u8>),
    /// Chunks, each sent at its time (ms since the stream's start).
    Chunks(Vec<(u64, Vec<u8>)>),
    Missing,
}

/// A response: its head goes out at `at` (ms since the stream's start).
struct Answer {
    at: u64,
    body: Body,
}

#[derive(Default)]
struct Counts {
    connections: AtomicU32,
    /// Playlist requests with `_HLS_msn`.
    blocking: AtomicU32,
    /// Part requests held until the part existed.
    held_parts: AtomicU32,
    /// Segment responses begun before the segment was complete.
    growing: AtomicU32,
}

struct Origin {
    t0: Instant,
    wall0_ms: u64,
    /// The origin's clock runs this far ahead of the machine's: its MPD and its
    /// `/.vodkit/clock` say so (the HLS dates do not).
    skew_ms: u64,
    /// Holds blocking reloads and hinted parts (false: a static server of the same
    /// objects, which answers at once: the playlist as it stands, 404 for what is not out).
    holds: bool,
    counts: Counts,
}

fn query_number(query: &str, name: &str) -> Option<u64> {
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
}

impl Origin {
    /// The stream starts now.
    fn starting_now(skew_ms: u64, holds: bool) -> Arc<Origin> {
        Arc::new(Origin {
            t0: Instant::now(),
            wall0_ms: common::unix_now_ms(),
            skew_ms,
            holds,
            counts: Counts::default(),
        })
    }

    fn now_ms(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64
    }

    /// When part `p` of segment `n` is complete.
    fn part_done_ms(n: u64, p: u64) -> u64 {
        n * SEG_MS + (p + 1) * PART_MS
    }

    fn date(&self, n: u64) -> String {
        let ms = self.wall0_ms + n * SEG_MS;
        vodkit_live::playlist::rfc3339_ms(UNIX_EPOCH + Duration::from_millis(ms))
    }

    /// A time on the origin's own clock.
    fn own_date(&self, t: SystemTime) -> String {
        vodkit_live::playlist::rfc3339_ms(t + Duration::from_millis(self.skew_ms))
    }

    /// The playlist as it stands at `t` ms.
    fn playlist(&self, t: u64) -> String {
        let complete = t / SEG_MS;
        let parts_now = (t % SEG_MS) / PART_MS;
        let first = complete.saturating_sub(WINDOW);
        let mut out = format!(
            "#EXTM3U\n#EXT-X-VERSION:9\n#EXT-X-TARGETDURATION:2\n\
#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=0.750\n\
#EXT-X-PART-INF:PART-TARGET=0.250\n#EXT-X-MEDIA-SEQUENCE:{first}\n#EXT-X-MAP:URI=\"init.mp4\"\n"
        );
        let parts = |out: &mut String, n: u64, upto: u64| {
            for p in 0..upto {
                let independent = if p == 0 { ",INDEPENDENT=YES" } else { "" };
                out.push_str(&format!(
                    "#EXT-X-PART:DURATION=0.25000,URI=\"seg-{n}.{p}.m4s\"{independent}\n"
                ));
            }
        };
        for n in first..complete {
            out += &format!("#EXT-X-PROGRAM-DATE-TIME:{}\n", self.date(n));
            // Parts of the segments in the last three target durations.
            if n + 2 >= complete {
                parts(&mut out, n, PARTS);
            }
            out += &format!("#EXTINF:1.50000,\nseg-{n}.m4s\n");
        }
        if parts_now > 0 {
            out += &format!("#EXT-X-PROGRAM-DATE-TIME:{}\n", self.date(complete));
            parts(&mut out, complete, parts_now);
        }
        out += &format!("#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"seg-{complete}.{parts_now}.m4s\"\n");
        out
    }

    fn mpd(&self) -> String {
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" profiles="urn:mpeg:dash:profile:isoff-live:2011" type="dynamic" availabilityStartTime="{ast}" publishTime="{ast}" minimumUpdatePeriod="PT1.500S" timeShiftBufferDepth="PT9.000S" suggestedPresentationDelay="PT4.500S" minBufferTime="PT1.500S">
  <ServiceDescription id="0">
    <Latency referenceId="0" target="750" min="500" max="3000"/>
    <PlaybackRate min="0.96" max="1.04"/>
  </ServiceDescription>
  <Period id="0" start="PT0S">
    <AdaptationSet id="0" contentType="video" mimeType="video/mp4" segmentAlignment="true" startWithSAP="1">
      <SegmentTemplate timescale="1000" duration="{SEG_MS}" startNumber="0" initialization="init.mp4" media="seg-$Number$.m4s" availabilityTimeOffset="1.250" availabilityTimeComplete="false"/>
      <Representation id="v0" bandwidth="800000" codecs="avc1.64001f"/>
    </AdaptationSet>
  </Period>
  <UTCTiming schemeIdUri="urn:mpeg:dash:utc:http-iso:2014" value="http://origin.test/.vodkit/clock"/>
</MPD>
"#,
            ast = self.own_date(UNIX_EPOCH + Duration::from_millis(self.wall0_ms))
        )
    }

    fn answer(&self, target: &str) -> Answer {
        let now = self.now_ms();
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let name = path.rsplit('/').next().unwrap_or("");
        let whole = |body: Vec<u8>| Answer {
            at: now,
            body: Body::Whole(body),
        };
        if name == "index.m3u8" {
            let Some(msn) = query_number(query, "_HLS_msn") else {
                return whole(self.playlist(now).into_bytes());
            };
            self.counts.blocking.fetch_add(1, Ordering::Relaxed);
            if !self.holds {
                return whole(self.playlist(now).into_bytes());
            }
            let due = match query_number(query, "_HLS_part") {
                Some(p) => Self::part_done_ms(msn, p),
                None => (msn + 1) * SEG_MS,
            };
            let at = due.max(now);
            return Answer {
                at,
                body: Body::Whole(self.playlist(at).into_bytes()),
            };
        }
        if name == "manifest.mpd" {
            return whole(self.mpd().into_bytes());
        }
        if path == "/.vodkit/clock" {
            return whole(self.own_date(SystemTime::now()).into_bytes());
        }
        if name == "init.mp4" {
            return whole(vec![1u8; 700]);
        }
        let Some(stem) = name
            .strip_prefix("seg-")
            .and_then(|n| n.strip_suffix(".m4s"))
        else {
            return Answer {
                at: now,
                body: Body::Missing,
            };
        };
        let missing = Answer {
            at: now,
            body: Body::Missing,
        };
        match stem.split_once('.') {
            Some((n, p)) => {
                let (Ok(n), Ok(p)) = (n.parse::<u64>(), p.parse::<u64>()) else {
                    return missing;
                };
                let due = Self::part_done_ms(n, p);
                if p >= PARTS || due > now + 2 * SEG_MS {
                    return missing;
                }
                if due > now {
                    if !self.holds {
                        return missing;
                    }
                    self.counts.held_parts.fetch_add(1, Ordering::Relaxed);
                }
                Answer {
                    at: due.max(now),
                    body: Body::Whole(vec![2u8; PART_BYTES]),
                }
            }
            None => {
                let Ok(n) = stem.parse::<u64>() else {
                    return missing;
                };
                let (begin, end) = (n * SEG_MS, (n + 1) * SEG_MS);
                if end <= now {
                    return whole(vec![2u8; PART_BYTES * PARTS as usize]);
                }
                if begin > now + 2 * SEG_MS {
                    return missing;
                }
                self.counts.growing.fetch_add(1, Ordering::Relaxed);
                let chunks = (0..PARTS)
                    .map(|p| (Self::part_done_ms(n, p), vec![2u8; PART_BYTES]))
                    .collect();
                Answer {
                    at: begin.max(now),
                    body: Body::Chunks(chunks),
                }
            }
        }
    }

    fn sleep_until(&self, ms: u64) {
        let now = self.now_ms();
        if ms > now {
            std::thread::sleep(Duration::from_millis(ms - now));
        }
    }

    /// Serve one HTTP/1.1 connection: each request in turn, held as its answer says.
    fn serve_h1(&self, mut stream: TcpStream) {
        while let Some(head) = common::request_head(&mut stream) {
            let line = String::from_utf8_lossy(&head)
                .lines()
                .next()
                .unwrap_or("")
                .to_string();
            let target = line.split_whitespace().nth(1).unwrap_or("/").to_string();
            let a = self.answer(&target);
            self.sleep_until(a.at);
            let sent = match a.body {
                Body::Whole(b) => {
                    let mut v = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", b.len())
                        .into_bytes();
                    v.extend(b);
                    stream.write_all(&v)
                }
                Body::Missing => {
                    stream.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                }
                Body::Chunks(chunks) => (|| {
                    stream.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")?;
                    for (at, data) in chunks {
                        self.sleep_until(at);
                        stream.write_all(format!("{:x}\r\n", data.len()).as_bytes())?;
                        stream.write_all(&data)?;
                        stream.write_all(b"\r\n")?;
                    }
                    stream.write_all(b"0\r\n\r\n")
                })(),
            };
            if sent.is_err() {
                return;
            }
        }
    }

    /// Serve one HTTP/2 connection (prior knowledge): every stream on its own task.
    async fn serve_h2(self: Arc<Self>, stream: tokio::net::TcpStream) {
        let Ok(mut conn) = h2::server::handshake(stream).await else {
            return;
        };
        while let Some(Ok((req, respond))) = conn.accept().await {
            let o = self.clone();
            tokio::spawn(async move {
                let target = req
                    .uri()
                    .path_and_query()
                    .map_or("/".to_string(), |p| p.to_string());
                let a = o.answer(&target);
                o.sleep_until_async(a.at).await;
                o.respond_h2(a.body, respond).await;
            });
        }
    }

    async fn sleep_until_async(&self, ms: u64) {
        let now = self.now_ms();
        if ms > now {
            tokio::time::sleep(Duration::from_millis(ms - now)).await;
        }
    }

    async fn respond_h2(&self, body: Body, mut respond: h2::server::SendResponse<bytes::Bytes>) {
        let head = |status: u16| http::Response::builder().status(status).body(()).unwrap();
        match body {
            Body::Missing => {
                let _ = respond.send_response(head(404), true);
            }
            Body::Whole(b) => {
                let r = http::Response::builder()
                    .status(200)
                    .header("content-length", b.len())
                    .body(())
                    .unwrap();
                if let Ok(mut s) = respond.send_response(r, false) {
                    let _ = s.send_data(b.into(), true);
                }
            }
            Body::Chunks(chunks) => {
                let Ok(mut s) = respond.send_response(head(200), false) else {
                    return;
                };
                let last = chunks.len() - 1;
                for (i, (at, data)) in chunks.into_iter().enumerate() {
                    self.sleep_until_async(at).await;
                    if s.send_data(data.into(), i == last).is_err() {
                        return;
                    }
                }
            }
        }
    }
}

/// Start the scripted origin (the stream starts now, HTTP/2 by prior knowledge when
/// `h2`) and let it run for `fill_s` seconds.
fn origin(h2: bool, fill_s: f64) -> (Target, Arc<Origin>) {
    skewed_origin(h2, fill_s, 0)
}

/// [`origin`] with its clock `skew_ms` ahead of the machine's.
fn skewed_origin(h2: bool, fill_s: f64, skew_ms: u64) -> (Target, Arc<Origin>) {
    scripted_origin(h2, fill_s, skew_ms, true)
}

fn scripted_origin(h2: bool, fill_s: f64, skew_ms: u64, holds: bool) -> (Target, Arc<Origin>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let o = Origin::starting_now(skew_ms, holds);
    let served = o.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            served.counts.connections.fetch_add(1, Ordering::Relaxed);
            let o = served.clone();
            if h2 {
                stream.set_nonblocking(true).unwrap();
                let _guard = rt.enter();
                let stream = tokio::net::TcpStream::from_std(stream).unwrap();
                rt.spawn(o.serve_h2(stream));
            } else {
                std::thread::spawn(move || o.serve_h1(stream));
            }
        }
    });
    std::thread::sleep(Duration::from_secs_f64(fill_s));
    (
        Target::parse(&format!("http://127.0.0.1:{port}"), false).unwrap(),
        o,
    )
}

fn viewers(n: u64, watch_s: f64) -> Vec<Session> {
    (0..n)
        .map(|id| {
            let mut s = Session::new(id, 0.0, "lan", Vec::new());
            s.start_s = Some(id as f64 * 0.3);
            s.bitrate_kbps = Some(800);
            s.live = Some(LiveView { stream: 0, watch_s });
            s
        })
        .collect()
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

const SEG_S: f64 = SEG_MS as f64 / 1000.0;

/// Every viewer of `run` completed in `mode` without a stall; their latencies to the edge.
fn played(run: &Run, mode: LiveMode) -> Vec<f64> {
    let mut all = Vec::new();
    for s in &run.sessions {
        assert_eq!(s.end, SessionEnd::Completed, "{}", detail(s));
        let p = s.player.as_ref().unwrap();
        let l = p.live.as_ref().unwrap();
        assert_eq!(l.mode, mode, "{}", detail(s));
        assert_eq!(p.stalls, 0, "{}", detail(s));
        assert!(!l.latency_s.is_empty(), "{}", detail(s));
        all.extend(&l.latency_s);
    }
    all
}

fn detail(s: &SessionRecord) -> String {
    format!(
        "viewer {}: {:?} / last request {:?}",
        s.index,
        s.player.as_ref().map(|p| p.live.clone()),
        s.requests.last()
    )
}

/// One viewer of `target` the classic way (`setup`, then low latency off): it plays in
/// `mode` at least two segments behind the edge (`what` names it in the failure); its live
/// figures.
fn classic_view(
    target: Target,
    mode: LiveMode,
    what: &str,
    setup: impl FnOnce(&mut vodkit_load::LoadConfig),
) -> LiveOutcome {
    let classic = common::run(target, viewers(1, 4.0), |c| {
        setup(c);
        c.live.low_latency = false;
    });
    let latency = played(&classic, mode);
    let m = median(&latency);
    assert!(m >= 2.0 * SEG_S, "{what} latency p50 {m:.2} s: {latency:?}");
    classic.sessions[0]
        .player
        .as_ref()
        .unwrap()
        .live
        .clone()
        .unwrap()
}

fn ll_hls_plays_near_the_edge(http: HttpVersion) {
    let h2 = http == HttpVersion::Http2;
    let (target, o) = origin(h2, 4.0);
    let ll = common::run(target.clone(), viewers(2, 4.0), |c| c.http = http);
    let latency = played(&ll, LiveMode::LlHls);
    for s in &ll.sessions {
        let l = s.player.as_ref().unwrap().live.as_ref().unwrap();
        assert!(l.parts >= 8, "{}", detail(s));
        assert!(l.hinted_parts >= 4, "{}", detail(s));
        assert!(l.blocking_reloads >= 4, "{}", detail(s));
        // Reloads were held for parts: far fewer than a poll every half part would make.
        assert!(l.reloads < 40, "{}", detail(s));
    }
    // Joined 0.75 s behind the newest part and kept there: every sample under one segment
    // at the median, where a viewer of whole segments is never less than one behind.
    let m = median(&latency);
    assert!(m < SEG_S, "LL-HLS latency p50 {m:.2} s: {latency:?}");
    let c = &o.counts;
    assert!(c.blocking.load(Ordering::Relaxed) >= 8);
    assert!(c.held_parts.load(Ordering::Relaxed) >= 8);
    // Over HTTP/2 one connection per viewer carries the held part and the blocking reload
    // at once; over HTTP/1.1 each viewer holds a second connection for the hinted part.
    let conns = c.connections.load(Ordering::Relaxed);
    assert_eq!(conns, if h2 { 2 } else { 4 }, "connections");
    let q = ll.results.qos.live.as_ref().unwrap();
    assert_eq!(q.ll_hls_sessions, 2);
    assert!(q.blocking_reloads >= 8 && q.parts >= 16, "{q:?}");
    assert!(q.latency_to_edge_s_p50 < SEG_S, "{q:?}");
    assert!(
        ll.results.summary().contains("LL-HLS 2"),
        "{}",
        ll.results.summary()
    );

    // The same stream, viewed the classic way: whole segments, three behind.
    let l = classic_view(target, LiveMode::Hls, "classic", |c| c.http = http);
    assert_eq!((l.parts, l.blocking_reloads), (0, 0));
}

#[test]
fn ll_hls_viewers_follow_parts_near_the_edge_where_classic_ones_stay_segments_behind() {
    if !vodkit_testkit::needs(&[Need::Slow]) {
        return;
    }
    ll_hls_plays_near_the_edge(HttpVersion::Http11);
}

#[test]
fn over_http2_an_ll_hls_viewer_holds_its_part_and_its_reload_on_one_connection() {
    if !vodkit_testkit::needs(&[Need::Slow]) {
        return;
    }
    ll_hls_plays_near_the_edge(HttpVersion::Http2);
}

#[test]
fn ll_dash_viewers_read_segments_while_they_are_written() {
    if !vodkit_testkit::needs(&[Need::Slow]) {
        return;
    }
    // The origin's clock is 3 s ahead: the viewers read it from the MPD's UTCTiming and
    // time their requests and latencies by it.
    let (target, o) = skewed_origin(false, 3.0, 3000);
    let dash = |c: &mut vodkit_load::LoadConfig| {
        c.player = Some(PlayerConfig::new(Protocol::Dash));
    };
    let ll = common::run(target.clone(), viewers(2, 4.0), dash);
    let latency = played(&ll, LiveMode::LlDash);
    for s in &ll.sessions {
        let l = s.player.as_ref().unwrap().live.as_ref().unwrap();
        // Each segment after the first (the one joined, maybe complete by then) was
        // asked for as it began and read as its chunks came.
        assert!(l.early_segments >= 2, "{}", detail(s));
        assert!(l.early_segments + 1 >= l.segments, "{}", detail(s));
        // The estimate counts only the time bytes were arriving: far above the stream's
        // 800 kbit/s, which counting the waits between chunks would give.
        let kbps = l.throughput_kbps.unwrap();
        assert!(kbps > 4_000.0, "{kbps} kbit/s: {}", detail(s));
    }
    assert!(o.counts.growing.load(Ordering::Relaxed) >= 4);
    let m = median(&latency);
    assert!(m < SEG_S, "LL-DASH latency p50 {m:.2} s: {latency:?}");
    // On the machine's clock they would be 3 s less: below zero.
    assert!(latency.iter().all(|&x| x > 0.0), "{latency:?}");
    let q = ll.results.qos.live.as_ref().unwrap();
    assert_eq!(q.ll_dash_sessions, 2);
    assert!(q.early_segments >= 4, "{q:?}");

    // Classic DASH on the same stream: each segment once complete, from the suggested
    // presentation delay (three segments) behind.
    let growing_before = o.counts.growing.load(Ordering::Relaxed);
    let l = classic_view(target, LiveMode::Dash, "classic DASH", dash);
    assert_eq!(l.early_segments, 0);
    assert_eq!(o.counts.growing.load(Ordering::Relaxed), growing_before);
}

#[test]
fn probes_of_a_low_latency_stream_follow_it_the_low_latency_way() {
    if !vodkit_testkit::needs(&[Need::Slow]) {
        return;
    }
    let (target, _o) = origin(false, 3.0);
    let run = common::run(target, viewers(2, 2.0), |c| {
        c.probes = Some("1,1.5s".parse().unwrap());
        c.duration = Some(Duration::from_secs(5));
    });
    let probes: Vec<_> = run.sessions.iter().filter(|s| s.probe).collect();
    assert_eq!(probes.len(), 1);
    let l = probes[0].player.as_ref().unwrap().live.as_ref().unwrap();
    assert_eq!(
        probes[0].end,
        SessionEnd::Completed,
        "{}",
        detail(probes[0])
    );
    assert_eq!(l.mode, LiveMode::LlHls);
    assert!(l.parts > 0);
    let report = run.results.probes.as_ref().expect("probes in results");
    assert_eq!(report.qos.live.as_ref().unwrap().ll_hls_sessions, 1);
}

const TOKEN: &str = "ll-token";

/// Write a whole `PUT` of `body` at `path` on a new connection and read the answer's head:
/// whether the origin stored it (201 new, 204 replaced).
fn put(addr: std::net::SocketAddr, path: &str, body: &[u8]) -> bool {
    let mut s = TcpStream::connect(addr).unwrap();
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    matches!(status_of(&mut s), 201 | 204)
}

fn status_of(s: &mut TcpStream) -> u16 {
    let head = common::request_head(s).unwrap_or_default();
    let line = String::from_utf8_lossy(&head)
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Publish the scripted stream to a live origin at `addr` under `/live/stream-0/` the way
/// the low-latency source does: per part, `PUT` of the part, its bytes as the next chunk
/// of the segment's chunked `PUT` (begun at the segment's start, on a connection of its
/// own), then the playlist; the MPD once per segment, at its start. Stops after `for_s`.
fn publish(addr: std::net::SocketAddr, text: Arc<Origin>, for_s: f64) {
    let dir = "/live/stream-0";
    assert!(put(addr, &format!("{dir}/init.mp4"), &[1u8; 700]));
    let end_ms = (for_s * 1000.0) as u64;
    let mut n = 0u64;
    while n * SEG_MS < end_ms {
        text.sleep_until(n * SEG_MS);
        let mut seg = TcpStream::connect(addr).unwrap();
        let head = format!(
            "PUT {dir}/seg-{n}.m4s HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {TOKEN}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        );
        seg.write_all(head.as_bytes()).unwrap();
        assert!(put(
            addr,
            &format!("{dir}/manifest.mpd"),
            text.mpd().as_bytes()
        ));
        for p in 0..PARTS {
            let at = Origin::part_done_ms(n, p);
            text.sleep_until(at);
            let data = vec![2u8; PART_BYTES];
            assert!(put(addr, &format!("{dir}/seg-{n}.{p}.m4s"), &data));
            seg.write_all(format!("{:x}\r\n", data.len()).as_bytes())
                .unwrap();
            seg.write_all(&data).unwrap();
            seg.write_all(b"\r\n").unwrap();
            if p + 1 == PARTS {
                seg.write_all(b"0\r\n\r\n").unwrap();
                assert!(matches!(status_of(&mut seg), 201 | 204));
            }
            let playlist = text.playlist(at);
            assert!(put(addr, &format!("{dir}/index.m3u8"), playlist.as_bytes()));
        }
        n += 1;
    }
}

#[test]
fn on_the_vodkit_origin_ll_hls_and_ll_dash_viewers_play_near_the_edge() {
    if !vodkit_testkit::needs(&[Need::Slow]) {
        return;
    }
    let server = vodkit_testkit::server::TestServer::start_with(|c| {
        let mut i = vodkit_server::live::IngestConfig::new("/live/", TOKEN);
        i.hold = Duration::from_secs(4);
        c.ingest = Some(i);
        c.http2 = Some(vodkit_server::H2Settings::default());
    });
    let addr = server.addr;
    // The publisher's texts: the scripted stream's playlist and MPD, timed from now.
    let text = Origin::starting_now(0, true);
    let publisher = std::thread::spawn(move || publish(addr, text, 16.0));
    std::thread::sleep(Duration::from_secs(3));
    let target = Target::parse(&format!("http://{addr}"), false).unwrap();
    for http in [HttpVersion::Http11, HttpVersion::Http2] {
        let run = common::run(target.clone(), viewers(2, 3.0), |c| c.http = http);
        let latency = played(&run, LiveMode::LlHls);
        let m = median(&latency);
        assert!(
            m < SEG_S,
            "{http:?}: LL-HLS latency p50 {m:.2} s: {latency:?}"
        );
        let q = run.results.qos.live.as_ref().unwrap();
        assert!(
            q.blocking_reloads >= 4 && q.hinted_parts >= 4,
            "{http:?}: {q:?}"
        );
        assert!(
            run.results.requests.errors.is_empty(),
            "{}",
            run.results.summary()
        );
    }
    let run = common::run(target, viewers(2, 3.0), |c| {
        c.player = Some(PlayerConfig::new(Protocol::Dash));
    });
    let latency = played(&run, LiveMode::LlDash);
    let m = median(&latency);
    assert!(m < SEG_S, "LL-DASH latency p50 {m:.2} s: {latency:?}");
    let q = run.results.qos.live.as_ref().unwrap();
    assert!(q.early_segments >= 2, "{q:?}");
    let st = server.stats().ingest.unwrap();
    assert!(st.growing_reads >= 2, "{st:?}");
    publisher.join().unwrap();
}

#[test]
fn on_an_origin_that_does_not_hold_an_ll_hls_viewer_polls_and_stops_asking_for_hints() {
    if !vodkit_testkit::needs(&[Need::Slow]) {
        return;
    }
    let (target, o) = scripted_origin(false, 4.0, 0, false);
    let run = common::run(target, viewers(1, 4.0), |_| {});
    let latency = played(&run, LiveMode::LlHls);
    let l = run.sessions[0]
        .player
        .as_ref()
        .unwrap()
        .live
        .clone()
        .unwrap();
    // At most the first hint was asked for (answered 404); every part came listed.
    assert!(l.hinted_parts == 0, "{l:?}");
    assert!(
        run.results.requests.errors.values().sum::<u64>() <= 1,
        "{}",
        run.results.summary()
    );
    assert!(l.parts >= 12, "{l:?}");
    assert_eq!(o.counts.held_parts.load(Ordering::Relaxed), 0);
    // Polling every half part still plays within a segment of the edge.
    let m = median(&latency);
    assert!(m < SEG_S, "latency p50 {m:.2} s: {latency:?}");
}
