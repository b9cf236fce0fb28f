//! The live origin's low-latency side: a segment uploaded with chunked encoding is read by
//! viewers while it arrives (HTTP/1.1 chunks, HTTP/2 DATA frames) and ends with its upload;
//! an upload cut in the middle cuts its viewers' responses (never a complete body); a
//! `Range` request waits for the whole segment; a preload-hinted part is held until it is
//! published; blocking playlist reloads (`_HLS_msn`,
//! `_HLS_part`) are answered when the playlist holds the part, `503` past their timeout,
//! `400` when they ask too far; `_HLS_skip` answers a delta update; `/.vodkit/clock` tells
//! the server's time.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::{h2_connect, runtime, wait_for, Client, TestServer};
use vodkit_server::live::IngestConfig;

const TOKEN: &str = "t0ken";

fn server(http2: bool, tune: impl FnOnce(&mut IngestConfig)) -> TestServer {
    TestServer::start_with(|c| {
        let mut i = IngestConfig::new("/live/", TOKEN);
        i.hold = Duration::from_millis(300);
        tune(&mut i);
        c.ingest = Some(i);
        if http2 {
            c.http2 = Some(vodkit_server::H2Settings::default());
        }
    })
}

/// A whole `PUT` of `body` at `path` on a new connection; the status.
fn put(addr: SocketAddr, path: &str, body: &[u8]) -> u16 {
    let mut c = Client::connect(addr);
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut all = head.into_bytes();
    all.extend_from_slice(body);
    c.reader.get_mut().write_all(&all).unwrap();
    c.read_response(false).status
}

/// A publisher's chunked `PUT` in progress, on a raw socket: one chunk per part.
struct ChunkedPut(TcpStream);

impl ChunkedPut {
    fn start(addr: SocketAddr, path: &str) -> ChunkedPut {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let head = format!(
            "PUT {path} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {TOKEN}\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
        s.write_all(head.as_bytes()).unwrap();
        ChunkedPut(s)
    }

    fn chunk(&mut self, data: &[u8]) {
        self.0
            .write_all(format!("{:x}\r\n", data.len()).as_bytes())
            .unwrap();
        self.0.write_all(data).unwrap();
        self.0.write_all(b"\r\n").unwrap();
    }

    /// The last chunk; the answer's status.
    fn end(mut self) -> u16 {
        self.0.write_all(b"0\r\n\r\n").unwrap();
        let mut c = Client {
            reader: BufReader::new(self.0),
        };
        c.read_response(false).status
    }
}

/// A part's bytes: `len` bytes of a pattern that differs by `seed`.
fn part(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

/// Start a `GET` of `path` over HTTP/1.1 and read its head: the connection, ready for the
/// body.
fn get_head(addr: SocketAddr, path: &str) -> (Client, common::Resp) {
    let mut c = Client::connect(addr);
    c.send(&format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n"));
    let head = c.read_response(true);
    (c, head)
}

/// The next chunk of a chunked body: `Ok(None)` at the last chunk, an error when the
/// connection ends before it.
fn read_chunk(r: &mut BufReader<TcpStream>) -> std::io::Result<Option<Vec<u8>>> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let size = usize::from_str_radix(line.trim_end(), 16)
        .map_err(|_| std::io::Error::other(format!("bad chunk size line {line:?}")))?;
    let mut data = vec![0u8; size];
    r.read_exact(&mut data)?;
    let mut crlf = [0u8; 2];
    r.read_exact(&mut crlf)?;
    assert_eq!(&crlf, b"\r\n");
    Ok((size > 0).then_some(data))
}

/// Read chunks until `want` bytes have arrived.
fn read_at_least(r: &mut BufReader<TcpStream>, want: usize) -> Vec<u8> {
    let mut got = Vec::new();
    while got.len() < want {
        got.extend(read_chunk(r).unwrap().expect("more of the body"));
    }
    got
}

#[test]
fn a_segment_is_read_while_it_is_uploaded_and_ends_with_its_upload() {
    let s = server(false, |_| {});
    assert_eq!(put(s.addr, "/live/a/init.mp4", b"init"), 201);
    let (a, b) = (part(1, 70_000), part(2, 30_000));
    let mut upload = ChunkedPut::start(s.addr, "/live/a/seg-0.m4s");
    upload.chunk(&a);
    wait_for(&s, |st| st.in_flight_bytes == a.len() as u64);
    let (mut viewer, head) = get_head(s.addr, "/live/a/seg-0.m4s");
    assert_eq!(head.status, 200);
    assert_eq!(head.header("transfer-encoding"), Some("chunked"));
    assert_eq!(head.header("content-length"), None);
    assert_eq!(head.header("content-type"), Some("video/iso.segment"));
    // The first part arrives while the upload is still open: the rest is not sent yet.
    let first = read_at_least(&mut viewer.reader, a.len());
    assert_eq!(first, a);
    let h = s.connect().request("HEAD", "/live/a/seg-0.m4s", &[]);
    assert_eq!((h.status, h.header("content-length")), (200, None));
    // A Range request waits for the whole segment, then gets it whole.
    let addr = s.addr;
    let ranged = std::thread::spawn(move || {
        Client::connect(addr).get("/live/a/seg-0.m4s", &[("Range", "bytes=0-9")])
    });
    upload.chunk(&b);
    assert_eq!(upload.end(), 201);
    let mut body = first;
    while let Some(c) = read_chunk(&mut viewer.reader).unwrap() {
        body.extend(c);
    }
    let whole = [a.clone(), b.clone()].concat();
    assert_eq!(body, whole);
    // The connection serves on after the last chunk.
    let again = viewer.get("/live/a/seg-0.m4s", &[]);
    assert_eq!(again.status, 200);
    assert_eq!(again.body, whole);
    let r = ranged.join().unwrap();
    assert_eq!((r.status, r.body.len()), (200, whole.len()));
    let st = s.stats().ingest.unwrap();
    assert!(st.growing_reads >= 1, "{st:?}");
    assert_eq!(st.in_flight_bytes, 0);
}

#[test]
fn a_viewer_held_for_the_next_segment_reads_it_from_its_first_chunk() {
    let s = server(false, |i| i.hold = Duration::from_secs(20));
    assert_eq!(put(s.addr, "/live/a/seg-0.m4s", b"zero"), 201);
    let addr = s.addr;
    let viewer = std::thread::spawn(move || {
        let (mut c, head) = get_head(addr, "/live/a/seg-1.m4s");
        let mut body = Vec::new();
        while let Some(chunk) = read_chunk(&mut c.reader).unwrap() {
            body.extend(chunk);
        }
        (
            head.status,
            head.header("transfer-encoding").map(String::from),
            body,
        )
    });
    wait_for(&s, |st| st.held == 1);
    let mut upload = ChunkedPut::start(s.addr, "/live/a/seg-1.m4s");
    let parts: Vec<Vec<u8>> = (0..6).map(|p| part(p, 20_000)).collect();
    for p in &parts {
        upload.chunk(p);
    }
    assert_eq!(upload.end(), 201);
    let (status, te, body) = viewer.join().unwrap();
    assert_eq!((status, te.as_deref()), (200, Some("chunked")));
    assert_eq!(body, parts.concat());
}

#[test]
fn a_preload_hinted_part_is_held_until_it_is_published() {
    let s = server(false, |i| i.hold = Duration::from_secs(20));
    assert_eq!(put(s.addr, "/live/a/seg-0.0.m4s", b"p0"), 201);
    let addr = s.addr;
    let viewer = std::thread::spawn(move || Client::connect(addr).get("/live/a/seg-0.1.m4s", &[]));
    wait_for(&s, |st| st.held == 1);
    assert_eq!(put(s.addr, "/live/a/seg-0.1.m4s", b"part one"), 201);
    let r = viewer.join().unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, &b"part one"[..]));
    // A part numbered before the newest one is not coming: answered at once.
    let r = s.connect().get("/live/a/seg-0.0.m4s", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(put(s.addr, "/live/a/seg-0.m4s", b"p0part one"), 201);
    let before = s.stats().ingest.unwrap().held;
    assert_eq!(s.connect().get("/live/a/seg-0.2.m4s", &[]).status, 404);
    assert_eq!(
        s.stats().ingest.unwrap().held,
        before,
        "a complete segment's part"
    );
}

#[test]
fn an_upload_cut_in_the_middle_never_ends_its_viewers_response_as_complete() {
    let s = server(false, |_| {});
    assert_eq!(put(s.addr, "/live/a/init.mp4", b"init"), 201);
    let a = part(3, 50_000);
    let mut upload = ChunkedPut::start(s.addr, "/live/a/seg-0.m4s");
    upload.chunk(&a);
    wait_for(&s, |st| st.in_flight_bytes == a.len() as u64);
    let (mut viewer, head) = get_head(s.addr, "/live/a/seg-0.m4s");
    assert_eq!(head.status, 200);
    assert_eq!(read_at_least(&mut viewer.reader, a.len()), a);
    // The publisher goes away in the middle of the next chunk.
    upload.0.write_all(b"8000\r\nhalf").unwrap();
    drop(upload);
    let end = loop {
        match read_chunk(&mut viewer.reader) {
            Ok(Some(more)) => assert!(more.len() <= 4, "only what was sent"),
            other => break other,
        }
    };
    assert!(end.is_err(), "the body ended as if complete: {end:?}");
    // Nothing was stored: after the hold, 404.
    assert_eq!(s.connect().get("/live/a/seg-0.m4s", &[]).status, 404);
}

/// Start a `GET` of `path` over HTTP/2: the status and the body's stream.
async fn h2_get(addr: SocketAddr, path: &str) -> (u16, h2::RecvStream) {
    let mut send = h2_connect(addr, &h2::client::Builder::new())
        .await
        .ready()
        .await
        .unwrap();
    let req = http::Request::get(format!("http://localhost{path}"))
        .body(())
        .unwrap();
    let (resp, _) = send.send_request(req, true).unwrap();
    let resp = resp.await.unwrap();
    (resp.status().as_u16(), resp.into_body())
}

/// Read DATA until `want` bytes have arrived (or the stream ends or fails).
async fn h2_read(body: &mut h2::RecvStream, want: usize) -> Result<Vec<u8>, h2::Error> {
    let mut got = Vec::new();
    while got.len() < want {
        match body.data().await {
            Some(Ok(d)) => {
                let _ = body.flow_control().release_capacity(d.len());
                got.extend_from_slice(&d);
            }
            Some(Err(e)) => return Err(e),
            None => break,
        }
    }
    Ok(got)
}

#[test]
fn over_http2_a_growing_segment_arrives_in_data_frames_and_a_cut_one_is_reset() {
    let s = server(true, |_| {});
    assert_eq!(put(s.addr, "/live/a/init.mp4", b"init"), 201);
    let rt = runtime();
    let (a, b) = (part(4, 60_000), part(5, 40_000));
    // Whole: the first part before the rest is sent, then the end of the stream.
    let mut upload = ChunkedPut::start(s.addr, "/live/a/seg-0.m4s");
    upload.chunk(&a);
    wait_for(&s, |st| st.in_flight_bytes == a.len() as u64);
    let (status, mut body) = rt.block_on(h2_get(s.addr, "/live/a/seg-0.m4s"));
    assert_eq!(status, 200);
    let first = rt.block_on(h2_read(&mut body, a.len())).unwrap();
    assert_eq!(first, a);
    upload.chunk(&b);
    assert_eq!(upload.end(), 201);
    let rest = rt.block_on(h2_read(&mut body, usize::MAX)).unwrap();
    assert_eq!([first, rest].concat(), [a.clone(), b].concat());
    // Cut: the stream is reset, never ended as complete.
    let mut upload = ChunkedPut::start(s.addr, "/live/a/seg-1.m4s");
    upload.chunk(&a);
    wait_for(&s, |st| st.in_flight_bytes == a.len() as u64);
    let (status, mut body) = rt.block_on(h2_get(s.addr, "/live/a/seg-1.m4s"));
    assert_eq!(status, 200);
    assert_eq!(rt.block_on(h2_read(&mut body, a.len())).unwrap(), a);
    drop(upload);
    let end = rt.block_on(h2_read(&mut body, usize::MAX));
    let e = end.expect_err("a cut upload resets its viewers' streams");
    assert!(e.is_reset(), "{e}");
}

/// An LL-HLS playlist: `done` complete 2-s segments from 0, then `parts` parts of the next.
fn playlist(done: u64, parts: u64) -> String {
    let mut p = String::from(
        "#EXTM3U\n#EXT-X-VERSION:9\n#EXT-X-TARGETDURATION:2\n\
         #EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=1.000,CAN-SKIP-UNTIL=12.000\n\
         #EXT-X-PART-INF:PART-TARGET=0.333\n#EXT-X-MEDIA-SEQUENCE:0\n#EXT-X-MAP:URI=\"init.mp4\"\n",
    );
    for n in 0..done {
        p += &format!(
            "#EXT-X-PROGRAM-DATE-TIME:2026-11-28T23:00:{:02}.000Z\n#EXTINF:2.00000,\nseg-{n}.m4s\n",
            2 * n
        );
    }
    for i in 0..parts {
        p += &format!("#EXT-X-PART:DURATION=0.33333,URI=\"seg-{done}.{i}.m4s\"\n");
    }
    p += &format!("#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"seg-{done}.{parts}.m4s\"\n");
    p
}

#[test]
fn a_blocking_reload_returns_the_playlist_once_it_holds_the_part() {
    let s = server(true, |i| i.block_timeout = Some(Duration::from_secs(20)));
    let pl = "/live/a/index.m3u8";
    assert_eq!(put(s.addr, pl, playlist(10, 1).as_bytes()), 201);
    let addr = s.addr;
    let h1 = std::thread::spawn(move || {
        Client::connect(addr).get("/live/a/index.m3u8?_HLS_msn=10&_HLS_part=2", &[])
    });
    let rt = runtime();
    let h2 = rt.spawn(async move {
        let (status, mut body) = h2_get(addr, "/live/a/index.m3u8?_HLS_msn=10&_HLS_part=2").await;
        (status, h2_read(&mut body, usize::MAX).await.unwrap())
    });
    wait_for(&s, |st| st.blocked == 2);
    // Part 1 is not part 2: they stay held.
    assert_eq!(put(s.addr, pl, playlist(10, 2).as_bytes()), 204);
    assert_eq!(put(s.addr, pl, playlist(10, 3).as_bytes()), 204);
    let r = h1.join().unwrap();
    assert_eq!(r.status, 200);
    let text = String::from_utf8(r.body.clone()).unwrap();
    assert!(text.contains("URI=\"seg-10.2.m4s\""), "{text}");
    assert_eq!(r.header("cache-control"), Some("max-age=12"));
    let (status, body) = rt.block_on(h2).unwrap();
    assert_eq!(status, 200);
    assert!(String::from_utf8(body)
        .unwrap()
        .contains("URI=\"seg-10.2.m4s\""));
    // Something the playlist already holds is answered at once; a plain request keeps the
    // playlist's own max-age.
    let r = s.connect().get("/live/a/index.m3u8?_HLS_msn=9", &[]);
    assert_eq!(
        (r.status, r.header("cache-control")),
        (200, Some("max-age=12"))
    );
    let r = s.connect().get("/live/a/index.m3u8", &[]);
    assert_eq!(
        (r.status, r.header("cache-control")),
        (200, Some("max-age=1"))
    );
    assert_eq!(s.stats().ingest.unwrap().block_timeouts, 0);
}

#[test]
fn a_blocking_reload_for_a_part_that_never_comes_is_answered_503_and_bad_ones_400() {
    let s = server(false, |i| {
        i.block_timeout = Some(Duration::from_millis(300))
    });
    let pl = "/live/a/index.m3u8";
    assert_eq!(put(s.addr, pl, playlist(10, 1).as_bytes()), 201);
    let r = s
        .connect()
        .get("/live/a/index.m3u8?_HLS_msn=11&_HLS_part=0", &[]);
    assert_eq!(r.status, 503);
    assert_eq!(s.stats().ingest.unwrap().block_timeouts, 1);
    for bad in [
        "/live/a/index.m3u8?_HLS_msn=12",
        "/live/a/index.m3u8?_HLS_part=1",
        "/live/a/index.m3u8?_HLS_msn=ten",
    ] {
        let r = s.connect().get(bad, &[]);
        assert_eq!(r.status, 400, "{bad}");
        assert!(String::from_utf8_lossy(&r.body).contains("_HLS_"), "{bad}");
    }
    // Other paths ignore their query as before.
    assert_eq!(put(s.addr, "/live/a/seg-0.m4s", b"zero"), 201);
    let r = s.connect().get("/live/a/seg-0.m4s?_HLS_part=1", &[]);
    assert_eq!((r.status, r.body.as_slice()), (200, &b"zero"[..]));
}

#[test]
fn a_delta_update_replaces_old_segments_by_a_skip_tag() {
    let s = server(false, |_| {});
    assert_eq!(
        put(s.addr, "/live/a/index.m3u8", playlist(20, 2).as_bytes()),
        201
    );
    let r = s.connect().get(
        "/live/a/index.m3u8?_HLS_msn=20&_HLS_part=1&_HLS_skip=YES",
        &[],
    );
    assert_eq!(r.status, 200);
    let text = String::from_utf8(r.body.clone()).unwrap();
    // 20 segments and two parts end 40.67 s in; the 15 that start before 28.67 s go.
    assert!(text.contains("#EXT-X-SKIP:SKIPPED-SEGMENTS=15\n"), "{text}");
    assert!(!text.contains("seg-14.m4s") && text.contains("seg-15.m4s"));
    assert!(text.contains("#EXT-X-MEDIA-SEQUENCE:0\n"));
    assert_eq!(r.header("etag"), None, "a delta is not the stored playlist");
}

#[test]
fn the_clock_tells_utc_with_milliseconds() {
    let s = server(false, |_| {});
    let r = s.connect().get("/.vodkit/clock", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    let text = String::from_utf8(r.body.clone()).unwrap();
    // 2026-11-28T23:00:00.123Z
    let shape: String = text
        .chars()
        .map(|c| if c.is_ascii_digit() { 'd' } else { c })
        .collect();
    assert_eq!(shape, "dddd-dd-ddTdd:dd:dd.dddZ", "{text}");
    let year: i32 = text[..4].parse().unwrap();
    assert!(year >= 2024, "{text}");
}
