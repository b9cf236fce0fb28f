//! `--ingest`: a live source publishes by `PUT` with a bearer token and viewers get what it
//! published, with live caching headers; without or with a wrong token it is refused;
//! outside the prefix nothing changes; `Expect: 100-continue` works; oversized objects are
//! refused; a segment asked for before it exists is held and then served (or 404 after the
//! hold); the window stays bounded; a quiet stream expires; chunked bodies (what ffmpeg's
//! HLS muxer sends with `-method PUT`) are decoded, and a real ffmpeg publishes through them.

use crate::common;

use common::{Client, TestServer};
use std::io::Write;
use std::time::{Duration, Instant};
use vodkit_server::live::IngestConfig;

const TOKEN: &str = "t0ken";

fn server(tune: impl FnOnce(&mut IngestConfig)) -> TestServer {
    TestServer::start_with(|c| {
        let mut i = IngestConfig::new("/live/", TOKEN);
        tune(&mut i);
        c.ingest = Some(i);
        c.admin = Some("127.0.0.1:0".parse().unwrap());
    })
}

/// PUT `body` at `path` with the given Authorization value (if any).
fn put(c: &mut Client, path: &str, body: &[u8], auth: Option<&str>) -> common::Resp {
    let mut raw = format!(
        "PUT {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(a) = auth {
        raw.push_str(&format!("Authorization: {a}\r\n"));
    }
    raw.push_str("\r\n");
    let mut all = raw.into_bytes();
    all.extend_from_slice(body);
    c.reader.get_mut().write_all(&all).unwrap();
    c.read_response(false)
}

fn bearer() -> Option<&'static str> {
    Some("Bearer t0ken")
}

#[test]
fn a_published_segment_and_playlist_are_served_with_live_headers() {
    let s = server(|_| {});
    let mut c = s.connect();
    let seg: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(
        put(&mut c, "/live/stream-0/seg-0.m4s", &seg, bearer()).status,
        201
    );
    assert_eq!(
        put(&mut c, "/live/stream-0/seg-0.m4s", &seg, bearer()).status,
        204
    );
    let pl = b"#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2,\nseg-0.m4s\n";
    assert_eq!(
        put(&mut c, "/live/stream-0/index.m3u8", pl, bearer()).status,
        201
    );
    // The same keep-alive connection serves viewers too.
    let r = c.get("/live/stream-0/seg-0.m4s", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, seg);
    assert_eq!(r.header("content-type"), Some("video/iso.segment"));
    assert!(r.header("cache-control").unwrap().contains("max-age=86400"));
    assert!(r.header("etag").is_some());
    let r = s.connect().get("/live/stream-0/index.m3u8", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, pl);
    assert_eq!(
        r.header("content-type"),
        Some("application/vnd.apple.mpegurl")
    );
    assert_eq!(r.header("cache-control"), Some("max-age=1"));
    let r = s.connect().request("HEAD", "/live/stream-0/seg-0.m4s", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("50000"));
    let mut d = s.connect();
    let r = d.request(
        "DELETE",
        "/live/stream-0/seg-0.m4s",
        &[("Authorization", "Bearer t0ken")],
    );
    assert_eq!(r.status, 204);
    assert_eq!(d.get("/live/stream-0/seg-0.m4s", &[]).status, 404);
    let st = s.stats().ingest.expect("ingest stats");
    assert_eq!((st.puts, st.deletes), (3, 1));
    // The same figures in the Prometheus exposition.
    let mut a = common::Client::connect(s.admin.expect("admin listener"));
    let text = String::from_utf8(a.get("/metrics", &[]).body).unwrap();
    for (name, want) in [
        ("vodkit_ingest_puts_total", 3.0),
        ("vodkit_ingest_deletes_total", 1.0),
        ("vodkit_ingest_streams", 1.0),
    ] {
        let got = text
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok());
        assert_eq!(got, Some(want), "{name} in:\n{text}");
    }
}

#[test]
fn publishing_needs_the_token_and_the_prefix() {
    let s = server(|_| {});
    // No token: 401 with a challenge; a wrong one: 403; another scheme carries no bearer
    // token: 401 as with none.
    for (auth, status) in [
        (None, 401),
        (Some("Bearer nope"), 403),
        (Some("Basic dDBrZW4="), 401),
    ] {
        let r = put(&mut s.connect(), "/live/a/seg-0.m4s", b"x", auth);
        assert_eq!(r.status, status, "{auth:?}");
        if auth.is_none() {
            assert!(r.header("www-authenticate").unwrap().starts_with("Bearer"));
        }
    }
    // Outside the prefix PUT is what it always was.
    let r = put(&mut s.connect(), "/video.mp4", b"x", bearer());
    assert_eq!(r.status, 405);
    assert_eq!(s.connect().get("/live/a/seg-0.m4s", &[]).status, 404);
    assert_eq!(s.stats().ingest.unwrap().rejected, 3);
    // Without --ingest every PUT is 405.
    let plain = TestServer::start();
    assert_eq!(
        put(&mut plain.connect(), "/live/a/x.m4s", b"x", bearer()).status,
        405
    );
    assert!(plain.stats().ingest.is_none());
}

#[test]
fn expect_continue_and_the_object_size_limit() {
    let s = server(|i| i.max_object = 1000);
    let mut c = s.connect();
    c.send("PUT /live/a/seg-1.m4s HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer t0ken\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
    let interim = c.read_response(true);
    assert_eq!(interim.status, 100);
    c.reader.get_mut().write_all(b"hello").unwrap();
    assert_eq!(c.read_response(false).status, 201);
    assert_eq!(s.connect().get("/live/a/seg-1.m4s", &[]).body, b"hello");
    let r = put(&mut s.connect(), "/live/a/seg-2.m4s", &[0; 2000], bearer());
    assert_eq!(r.status, 413);
}

#[test]
fn a_segment_asked_for_early_is_held_until_it_is_published() {
    let s = server(|i| i.hold = Duration::from_secs(3));
    put(&mut s.connect(), "/live/a/seg-0.m4s", b"zero", bearer());
    let url_addr = s.connect();
    let started = Instant::now();
    let viewer = std::thread::spawn(move || {
        let mut c = url_addr;
        c.get("/live/a/seg-1.m4s", &[])
    });
    std::thread::sleep(Duration::from_millis(400));
    put(&mut s.connect(), "/live/a/seg-1.m4s", b"one", bearer());
    let r = viewer.join().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"one");
    assert!(started.elapsed() >= Duration::from_millis(400));
    // Nothing comes: 404 after the hold; an unknown stream or a playlist: 404 at once.
    let t = Instant::now();
    assert_eq!(s.connect().get("/live/a/seg-9.m4s", &[]).status, 404);
    assert!(t.elapsed() >= Duration::from_secs(3), "{:?}", t.elapsed());
    let t = Instant::now();
    assert_eq!(s.connect().get("/live/none/seg-0.m4s", &[]).status, 404);
    assert_eq!(s.connect().get("/live/a/index.m3u8", &[]).status, 404);
    assert!(t.elapsed() < Duration::from_secs(1));
    let st = s.stats().ingest.unwrap();
    assert_eq!((st.held, st.hold_timeouts), (2, 1));
}

#[test]
fn the_window_stays_bounded_and_quiet_streams_expire() {
    let s = server(|i| {
        i.window = 5;
        i.ttl = Duration::from_secs(2);
        i.hold = Duration::from_millis(100);
    });
    let mut c = s.connect();
    for n in 0..100 {
        let r = put(
            &mut c,
            &format!("/live/a/seg-{n}.m4s"),
            &[7; 1000],
            bearer(),
        );
        assert_eq!(r.status, 201);
        put(&mut c, "/live/a/index.m3u8", b"#EXTM3U\n", bearer());
    }
    let st = s.stats().ingest.unwrap();
    assert_eq!((st.objects, st.bytes), (6, 5 * 1000 + 8), "{st:?}");
    assert_eq!(st.expired, 95);
    assert_eq!(s.connect().get("/live/a/seg-94.m4s", &[]).status, 404);
    assert_eq!(s.connect().get("/live/a/seg-99.m4s", &[]).status, 200);
    std::thread::sleep(Duration::from_millis(2300));
    assert_eq!(s.connect().get("/live/a/index.m3u8", &[]).status, 404);
    assert_eq!(s.stats().ingest.unwrap().streams, 0);
}

#[test]
fn a_publisher_that_stalls_mid_body_is_dropped() {
    let s = TestServer::start_with(|c| {
        c.header_timeout = Duration::from_millis(500);
        c.ingest = Some(IngestConfig::new("/live/", TOKEN));
    });
    let mut c = s.connect();
    c.send("PUT /live/a/seg-0.m4s HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer t0ken\r\nContent-Length: 100\r\n\r\nonly-part");
    let r = c.read_response(false);
    assert_eq!(r.status, 408);
    assert!(c.is_closed());
    assert_eq!(s.connect().get("/live/a/seg-0.m4s", &[]).status, 404);
}

/// PUT with `Transfer-Encoding: chunked`, the body written as `pieces` (raw, already
/// framed) with a pause between them, as an encoder writes a segment while encoding it.
fn put_chunked(c: &mut Client, path: &str, pieces: &[&[u8]]) -> common::Resp {
    c.send(&format!(
        "PUT {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer t0ken\r\nTransfer-Encoding: chunked\r\n\r\n"
    ));
    for p in pieces {
        std::thread::sleep(Duration::from_millis(30));
        c.reader.get_mut().write_all(p).unwrap();
    }
    c.read_response(false)
}

#[test]
fn chunked_bodies_are_decoded_and_bad_framing_refused() {
    let s = TestServer::start_with(|c| {
        c.header_timeout = Duration::from_millis(400);
        let mut i = IngestConfig::new("/live/", TOKEN);
        i.max_object = 1000;
        c.ingest = Some(i);
    });
    let mut c = s.connect();
    // Slower overall than the header timeout, but never quiet that long.
    let pieces: Vec<&[u8]> = vec![
        b"5\r\nhel",
        b"lo\r\n",
        b"7;ext=1\r\n, world\r\n",
        b"0\r\n",
        b"X-Trailer: x\r\n\r\n",
    ];
    let mut slow = pieces.clone();
    for _ in 0..15 {
        slow.insert(2, b"1\r\n.\r\n");
    }
    assert_eq!(
        put_chunked(&mut c, "/live/a/seg-0.m4s", &pieces).status,
        201
    );
    // The same connection goes on: the body's end was found exactly.
    assert_eq!(put_chunked(&mut c, "/live/a/seg-1.m4s", &slow).status, 201);
    assert_eq!(c.get("/live/a/seg-0.m4s", &[]).body, b"hello, world");
    let dots = format!("hello{}, world", ".".repeat(15));
    assert_eq!(
        s.connect().get("/live/a/seg-1.m4s", &[]).body,
        dots.as_bytes()
    );
    // Bad framing: 400 and the connection closes; nothing is stored.
    let mut c = s.connect();
    let r = put_chunked(&mut c, "/live/a/seg-2.m4s", &[b"5\r\nhelloXX"]);
    assert_eq!(r.status, 400);
    assert!(c.is_closed());
    assert_eq!(s.connect().get("/live/a/seg-2.m4s", &[]).status, 404);
    // Over the object limit (decoded bytes): 413.
    let big = format!("{:x}\r\n", 1001);
    let r = put_chunked(&mut s.connect(), "/live/a/seg-3.m4s", &[big.as_bytes()]);
    assert_eq!(r.status, 413);
    // A sender that goes quiet mid-body: 408.
    let mut c = s.connect();
    let r = put_chunked(&mut c, "/live/a/seg-4.m4s", &[b"5\r\nhe"]);
    assert_eq!(r.status, 408);
    // Outside the prefix a chunked body is read and dropped like any other.
    let mut c = s.connect();
    c.send("POST /nothing HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n");
    assert_eq!(c.read_response(false).status, 405);
    assert_eq!(c.get("/live/a/seg-0.m4s", &[]).status, 200);
}

#[test]
fn ffmpeg_publishes_hls_by_chunked_put() {
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Tool("ffmpeg")]) {
        return;
    }
    let s = server(|_| {});
    let url = s.url("/live/ff/index.m3u8");
    vodkit_testkit::process::run_ok(
        std::process::Command::new("ffmpeg")
            .args([
                "-hide_banner",
                "-loglevel",
                "error",
                "-f",
                "lavfi",
                "-i",
                "testsrc=duration=4:size=160x120:rate=25",
                "-c:v",
                "mpeg2video",
                "-g",
                "25",
                "-f",
                "hls",
                "-hls_time",
                "1",
                "-hls_list_size",
                "0",
                "-method",
                "PUT",
                "-headers",
                "Authorization: Bearer t0ken\r\n",
            ])
            .arg(&url),
    );
    let pl = s.connect().get("/live/ff/index.m3u8", &[]);
    assert_eq!(pl.status, 200);
    let text = String::from_utf8(pl.body).unwrap();
    assert!(
        text.starts_with("#EXTM3U") && text.contains("#EXT-X-ENDLIST"),
        "{text}"
    );
    let segments: Vec<&str> = text.lines().filter(|l| l.ends_with(".ts")).collect();
    assert!(segments.len() >= 3, "{text}");
    for seg in segments {
        let r = s.connect().get(&format!("/live/ff/{seg}"), &[]);
        assert_eq!(r.status, 200, "{seg}");
        // Whole MPEG-TS packets, each starting with the sync byte.
        assert!(
            !r.body.is_empty() && r.body.len() % 188 == 0,
            "{seg}: {}",
            r.body.len()
        );
        assert!(r.body.chunks(188).all(|p| p[0] == 0x47), "{seg}");
    }
}

#[test]
fn the_live_window_comes_off_the_memory_budget() {
    // The window's segments live in the server's memory, inside the budget the memory
    // manager hands out to prefetches: the manager hears of every write and delete.
    let s = TestServer::start_with(|c| {
        c.ingest = Some(IngestConfig::new("/live/", TOKEN));
        c.io.memory = vodkit_server::io::MemorySetting::Budget(256 << 20);
    });
    let memory = || s.stats().prefetch.memory.expect("the memory manager is on");
    let empty = memory();
    assert_eq!(empty.other_bytes, 0);
    let mut c = s.connect();
    let seg = vec![7u8; 300_000];
    for i in 0..2 {
        let path = format!("/live/stream-0/seg-{i}.m4s");
        assert_eq!(put(&mut c, &path, &seg, bearer()).status, 201);
    }
    let two = memory();
    assert_eq!(two.other_bytes, 600_000);
    assert_eq!(two.prefetch_pool_bytes, empty.prefetch_pool_bytes - 600_000);
    let r = s.connect().request(
        "DELETE",
        "/live/stream-0/seg-0.m4s",
        &[("Authorization", "Bearer t0ken")],
    );
    assert_eq!(r.status, 204);
    assert_eq!(memory().other_bytes, 300_000);
}

#[test]
fn past_the_memory_cap_the_window_spills_to_disk_and_is_still_served() {
    // Twenty streams of four 100 kB segments (8 MB) against a 2 MB memory cap: without a
    // spill directory the oldest segments of every stream would be gone; with one they are
    // written to disk and served from there, byte for byte, and the memory stays capped.
    let spill = tempfile::tempdir().unwrap();
    let dir = spill.path().to_path_buf();
    let s = server(move |i| {
        i.window = 4;
        i.max_bytes = 2_000_000;
        i.spill = Some(vodkit_server::live::SpillConfig {
            dir,
            max_bytes: 1 << 30,
        });
    });
    let seg = |st: u32, n: u32| -> Vec<u8> {
        (0..100_000u32)
            .map(|i| (i.wrapping_mul(7) ^ (st * 31 + n)) as u8)
            .collect()
    };
    let mut c = s.connect();
    for n in 0..4 {
        for st in 0..20 {
            let path = format!("/live/s{st}/seg-{n}.m4s");
            assert_eq!(put(&mut c, &path, &seg(st, n), bearer()).status, 201);
        }
    }
    // The spill runs off the connection's task: wait for it to catch up.
    let deadline = Instant::now() + Duration::from_secs(10);
    let st = loop {
        let st = s.stats().ingest.unwrap();
        if st.bytes <= 2_000_000 || Instant::now() > deadline {
            break st;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(st.bytes <= 2_000_000, "{st:?}");
    assert_eq!(st.objects, 80, "no segment in a window was dropped: {st:?}");
    assert_eq!(st.expired, 0, "{st:?}");
    assert_eq!(st.bytes + st.spilled_bytes, 8_000_000, "{st:?}");
    assert!(st.spilled >= 60, "{st:?}");
    assert_eq!(st.spill_errors, 0);
    // The oldest (spilled) and the newest (in memory) come back intact; HEAD too.
    for (st_no, n) in [(0, 0), (19, 0), (7, 1), (19, 3)] {
        let r = s.connect().get(&format!("/live/s{st_no}/seg-{n}.m4s"), &[]);
        assert_eq!(r.status, 200);
        assert!(r.body == seg(st_no, n), "segment s{st_no}/{n} differs");
    }
    let r = s.connect().request("HEAD", "/live/s0/seg-0.m4s", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("100000"));
    // The spill files are unlinked: the directory shows nothing.
    assert_eq!(std::fs::read_dir(spill.path()).unwrap().count(), 0);
}
