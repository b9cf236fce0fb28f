//! The live origin's limits against a publisher that holds the token but not the rules:
//! every stored object counts in the memory cap (playlists and init segments too, refused
//! with 507 when only they would remain), names per stream and streams are bounded, bodies
//! count as they arrive and no room is reserved for what is only announced, a body that
//! trickles in is cut off at its deadline, ingest targets are decoded and normalized as
//! `GET` targets are, and 201 and 401 go out with their reason phrases.

use crate::common;

use common::{wait_for, Client, TestServer};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use vodkit_server::live::IngestConfig;

const TOKEN: &str = "t0ken";

fn server(header_timeout: Duration, tune: impl FnOnce(&mut IngestConfig)) -> TestServer {
    TestServer::start_with(|c| {
        c.header_timeout = header_timeout;
        let mut i = IngestConfig::new("/live/", TOKEN);
        tune(&mut i);
        c.ingest = Some(i);
    })
}

/// The raw bytes of a PUT head with the token and `Content-Length: len`.
fn put_head(path: &str, len: usize) -> String {
    format!(
        "PUT {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {len}\r\n\r\n"
    )
}

fn put(c: &mut Client, path: &str, body: &[u8]) -> common::Resp {
    let mut all = put_head(path, body.len()).into_bytes();
    all.extend_from_slice(body);
    // The server may answer (and close) before the whole body is written.
    let _ = c.reader.get_mut().write_all(&all);
    c.read_response(false)
}

#[test]
fn playlists_and_init_segments_count_in_the_byte_cap() {
    // Five 8 KiB playlists and two 8 KiB init segments against a 32 KiB cap.
    let s = server(Duration::from_secs(5), |i| i.max_bytes = 32 << 10);
    let mut refused = 0;
    for (n, name) in [
        "a.m3u8",
        "b.m3u8",
        "c.mpd",
        "d.m3u8",
        "e.m3u8",
        "init.mp4",
        "v2-init.m4s",
    ]
    .iter()
    .enumerate()
    {
        let r = put(
            &mut s.connect(),
            &format!("/live/s{n}/{name}"),
            &[b'#'; 8 << 10],
        );
        match r.status {
            201 => {}
            507 => {
                refused += 1;
                let text = String::from_utf8_lossy(&r.body);
                assert!(text.contains("--ingest-max-bytes"), "{text}");
            }
            other => panic!("{name}: {other}"),
        }
    }
    assert_eq!(refused, 3, "only four 8 KiB objects fit 32 KiB");
    let st = s.stats().ingest.unwrap();
    assert!(st.bytes <= 32 << 10, "{st:?}");
    // Segments still make room for each other within what is left, but not by evicting a
    // playlist: there is none left for them.
    let r = put(&mut s.connect(), "/live/s0/seg-0.m4s", &[1; 100]);
    assert_eq!(r.status, 507);
    assert_eq!(s.connect().get("/live/s0/a.m3u8", &[]).status, 200);
    // Replacing a playlist frees what it held.
    assert_eq!(
        put(&mut s.connect(), "/live/s0/a.m3u8", b"#EXTM3U\n").status,
        204
    );
    assert_eq!(
        put(&mut s.connect(), "/live/s0/seg-0.m4s", &[1; 100]).status,
        201
    );
}

#[test]
fn names_per_stream_and_streams_are_bounded() {
    let s = server(Duration::from_secs(5), |i| {
        i.max_objects = 4;
        i.max_streams = 2;
        i.window = 30;
    });
    let mut c = s.connect();
    for n in 0..4 {
        assert_eq!(
            put(&mut c, &format!("/live/a/v{n}.m3u8"), b"#EXTM3U\n").status,
            201
        );
    }
    let r = put(&mut c, "/live/a/v4.m3u8", b"#EXTM3U\n");
    assert_eq!(r.status, 507);
    assert!(String::from_utf8_lossy(&r.body).contains("--ingest-max-objects"));
    // A refusal for room keeps the connection (the body was read).
    assert_eq!(put(&mut c, "/live/b/seg-0.m4s", b"x").status, 201);
    let r = put(&mut c, "/live/c/seg-0.m4s", b"x");
    assert_eq!(r.status, 507);
    assert!(String::from_utf8_lossy(&r.body).contains("--ingest-max-streams"));
    // Segments of a full stream replace its oldest ones instead.
    for n in 1..10 {
        assert_eq!(
            put(&mut c, &format!("/live/b/seg-{n}.m4s"), b"x").status,
            201
        );
    }
    let st = s.stats().ingest.unwrap();
    assert_eq!((st.streams, st.objects), (2, 8), "{st:?}");
}

#[test]
fn bodies_in_flight_count_as_they_arrive_and_are_bounded() {
    let s = server(Duration::from_secs(30), |i| {
        i.max_bytes = 8 << 20;
        i.max_object = 8 << 20;
    });
    // Twelve publishers announce 8 MiB each, send 100 bytes and stall: 1,200 bytes are in
    // flight, nothing is reserved for the rest.
    let stalled: Vec<TcpStream> = (0..12)
        .map(|_| {
            let mut t = TcpStream::connect(s.addr).unwrap();
            let mut all = put_head("/live/a/seg-0.m4s", 8 << 20).into_bytes();
            all.extend_from_slice(&[7; 100]);
            t.write_all(&all).unwrap();
            t
        })
        .collect();
    wait_for(&s, |st| st.in_flight_bytes >= 1200);
    assert_eq!(s.stats().ingest.unwrap().in_flight_bytes, 1200);
    drop(stalled);
    wait_for(&s, |st| st.in_flight_bytes == 0);
    // Three publishers send 3 MiB each of 4 MiB bodies: the third finds no room left in the
    // 8 MiB cap and is refused with 507 while sending.
    let mut senders: Vec<TcpStream> = Vec::new();
    for n in 0..2 {
        let mut t = TcpStream::connect(s.addr).unwrap();
        t.write_all(put_head(&format!("/live/b/seg-{n}.m4s"), 4 << 20).as_bytes())
            .unwrap();
        t.write_all(&vec![n as u8; 3 << 20]).unwrap();
        senders.push(t);
    }
    wait_for(&s, |st| st.in_flight_bytes == 6 << 20);
    let mut third = TcpStream::connect(s.addr).unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let _ = third.write_all(put_head("/live/b/seg-2.m4s", 4 << 20).as_bytes());
    let _ = third.write_all(&vec![2; 3 << 20]);
    let mut answer = Vec::new();
    let _ = third.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 507 Insufficient Storage\r\n"),
        "{answer}"
    );
    assert!(answer.contains("--ingest-max-bytes"), "{answer}");
    let st = s.stats().ingest.unwrap();
    assert!(st.in_flight_bytes <= 8 << 20, "{st:?}");
    // The first two finish and are stored; nothing is left in flight.
    for (n, t) in senders.iter_mut().enumerate() {
        t.write_all(&vec![n as u8; 1 << 20]).unwrap();
        let mut c = Client {
            reader: std::io::BufReader::new(t.try_clone().unwrap()),
        };
        assert_eq!(c.read_response(false).status, 201);
    }
    let st = s.stats().ingest.unwrap();
    assert_eq!((st.objects, st.bytes, st.in_flight_bytes), (2, 8 << 20, 0));
}

#[test]
fn a_body_that_trickles_in_is_cut_off_at_its_deadline() {
    // Never quiet for the header timeout (2 s), but slower in all than the body deadline.
    let s = server(Duration::from_secs(2), |i| {
        i.body_timeout = Duration::from_secs(1)
    });
    let mut c = s.connect();
    c.send(&format!(
        "PUT /live/a/seg-0.m4s HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {TOKEN}\r\nTransfer-Encoding: chunked\r\n\r\n"
    ));
    for _ in 0..8 {
        std::thread::sleep(Duration::from_millis(300));
        if c.reader.get_mut().write_all(b"1\r\nx\r\n").is_err() {
            break;
        }
    }
    let _ = c.reader.get_mut().write_all(b"0\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status, 408);
    assert!(c.is_closed());
    // The same by Content-Length.
    let mut c = s.connect();
    c.send(&put_head("/live/a/seg-1.m4s", 8));
    for _ in 0..8 {
        std::thread::sleep(Duration::from_millis(300));
        if c.reader.get_mut().write_all(b"x").is_err() {
            break;
        }
    }
    assert_eq!(c.read_response(false).status, 408);
    assert_eq!(s.connect().get("/live/a/seg-0.m4s", &[]).status, 404);
    assert_eq!(s.connect().get("/live/a/seg-1.m4s", &[]).status, 404);
}

#[test]
fn ingest_targets_are_decoded_and_normalized_as_get_targets_are() {
    let s = server(Duration::from_secs(5), |_| {});
    for bad in [
        "/live/q/%2e%2e/f.ts",
        "/live/q/..%2ff.ts",
        "/live/q/./f.ts",
        "/live/q/f%00.ts",
        "/live/q/f%0a.ts",
        "/live/q/f%0d%0aX-Injected:%201.ts",
        "/live/q/f%5c.ts",
        "/live/q\\f.ts",
        "/live/q/%zz.ts",
    ] {
        let r = put(&mut s.connect(), bad, b"data");
        assert_eq!(r.status, 400, "{bad}");
    }
    assert_eq!(s.stats().ingest.unwrap().objects, 0);
    // The authority of an absolute-form target ends at `?`: this names `/`, not a live
    // object (a PUT outside the prefix is not allowed).
    let r = put(&mut s.connect(), "http://x?/live/q/f.ts", b"data");
    assert_eq!(r.status, 405);
    assert_eq!(s.connect().get("/live/q/f.ts", &[]).status, 404);
    // Escapes mean what they mean to GET: `%73` is `s`, `//` one slash.
    assert_eq!(
        put(&mut s.connect(), "/live/q//%73eg-1.ts", b"one").status,
        201
    );
    let r = s.connect().get("/live/q/seg-1.ts", &[]);
    assert_eq!((r.status, r.body.as_slice()), (200, b"one".as_slice()));
    let r = s.connect().get("/live/x/../q/seg-1.ts", &[]);
    assert_eq!(r.status, 200);
    let r = s.connect().get("http://h/live/q/seg-%31.ts", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(s.stats().ingest.unwrap().objects, 1);
}

/// The status line of the answer to `raw`.
fn status_line(s: &TestServer, raw: &str) -> String {
    let mut t = TcpStream::connect(s.addr).unwrap();
    t.write_all(raw.as_bytes()).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n") && t.read(&mut byte).unwrap_or(0) == 1 {
        got.push(byte[0]);
    }
    String::from_utf8_lossy(&got).trim_end().to_string()
}

#[test]
fn created_and_unauthorized_carry_their_reason_phrases() {
    let s = server(Duration::from_secs(5), |_| {});
    let created = format!("{}abc", put_head("/live/a/seg-0.m4s", 3));
    assert_eq!(status_line(&s, &created), "HTTP/1.1 201 Created");
    let anonymous = "PUT /live/a/seg-1.m4s HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc";
    assert_eq!(status_line(&s, anonymous), "HTTP/1.1 401 Unauthorized");
}
