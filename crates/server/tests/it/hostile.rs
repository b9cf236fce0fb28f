//! Hostile and broken clients: path traversal, malformed and oversized heads, slowloris,
//! slow readers, mid-body disconnects and the connection limit.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{pattern, Client, TestServer};

#[test]
fn path_traversal_attempts_never_escape() {
    let s = TestServer::start();
    // A secret next to the root, and symlinks pointing out of and inside the root.
    std::fs::write(s.dir.path().join("secret.txt"), b"SECRET").unwrap();
    std::os::unix::fs::symlink(s.dir.path().join("secret.txt"), s.root().join("out.mp4")).unwrap();
    std::os::unix::fs::symlink("/etc", s.root().join("etc")).unwrap();
    std::os::unix::fs::symlink("video.mp4", s.root().join("in.mp4")).unwrap();
    let attempts = [
        "/../secret.txt",
        "/..%2fsecret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E%2Fsecret.txt",
        "/a/../../secret.txt",
        "/./../secret.txt",
        "/%2e%2e%5csecret.txt",
        "/..\\secret.txt",
        "/out.mp4",
        "/etc/passwd",
        "/etc/../../secret.txt",
        "/video.mp4%00.txt",
        "/%00",
        "/bad%2",
        "secret.txt",
        "http://h/../secret.txt",
        "/....//secret.txt",
        "//../secret.txt",
    ];
    let mut c = s.connect();
    for a in attempts {
        let r = c.get(a, &[]);
        assert!(matches!(r.status, 400 | 403 | 404), "{a} -> {}", r.status);
        assert!(
            !String::from_utf8_lossy(&r.body).contains("SECRET"),
            "{a} leaked"
        );
        if r.header("connection") == Some("close") {
            c = s.connect();
        }
    }
    // Symlinks that stay inside the root are fine.
    let r = c.get("/in.mp4", &[("Range", "bytes=0-3")]);
    assert_eq!((r.status, r.body.as_slice()), (206, &pattern(4)[..]));
}

#[test]
fn outside_symlinks_only_when_allowed() {
    let s = TestServer::start_with(|c| c.allow_outside_symlinks = true);
    std::fs::write(s.dir.path().join("shared.mp4"), b"SHARED").unwrap();
    std::os::unix::fs::symlink(s.dir.path().join("shared.mp4"), s.root().join("link.mp4")).unwrap();
    let r = s.connect().get("/link.mp4", &[]);
    assert_eq!((r.status, r.body.as_slice()), (200, b"SHARED".as_slice()));
    let r = s.connect().get("/../shared.mp4", &[]);
    assert_eq!(r.status, 400, "dot segments above the root stay refused");
}

#[test]
fn malformed_and_oversized_heads() {
    let s = TestServer::start();
    let long_target = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(10_000));
    let big_header = format!(
        "GET / HTTP/1.1\r\nHost: t\r\nX-Pad: {}\r\n\r\n",
        "p".repeat(20_000)
    );
    let cases: Vec<(String, u16)> = vec![
        ("GET / HTTP/1.1\r\n\r\n".into(), 400),
        ("GARBAGE\r\n\r\n".into(), 400),
        ("GET /video.mp4 HTTP/2.0\r\nHost: t\r\n\r\n".into(), 400),
        ("GET /video.mp4 HTTP/1.1\r\nHost t\r\n\r\n".into(), 400),
        ("\x01\x02\x03\r\n\r\n".into(), 400),
        (
            "GET /video.mp4 HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n".into(),
            400,
        ),
        (
            "GET /video.mp4 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n".into(),
            501,
        ),
        (
            "GET /video.mp4 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc".into(),
            400,
        ),
        (
            "GET /video.mp4 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".into(),
            400,
        ),
        (long_target, 414),
        (big_header, 431),
    ];
    for (raw, want) in cases {
        let mut c = s.connect();
        c.reader.get_mut().write_all(raw.as_bytes()).unwrap();
        let r = c.read_response(false);
        assert_eq!(r.status, want, "{:?}", &raw[..raw.len().min(60)]);
        assert_eq!(r.header("connection"), Some("close"));
        assert!(c.is_closed());
    }
    // The server is still fine.
    assert_eq!(
        s.connect()
            .get("/video.mp4", &[("Range", "bytes=0-0")])
            .status,
        206
    );
    assert!(s.stats().bad_requests >= 9);
}

#[test]
fn slowloris_does_not_starve_normal_clients() {
    let s = TestServer::start_with(|c| c.header_timeout = Duration::from_secs(30));
    vodkit_server::raise_fd_limit();
    let mut lorises = Vec::new();
    for i in 0..1000 {
        let mut t = TcpStream::connect(s.addr).unwrap();
        t.write_all(b"GET /video.mp4 HTTP/1.1\r\nHost: t\r\n")
            .unwrap();
        if i % 2 == 0 {
            t.write_all(b"X-Slow: a").unwrap();
        }
        lorises.push(t);
    }
    // While a thousand heads dribble in, a normal client is served, repeatedly.
    let b = pattern(1024 * 1024 + 3);
    for round in 0..3 {
        for t in lorises.iter_mut() {
            let _ = t.write_all(b"b");
        }
        let started = Instant::now();
        let mut c = s.connect();
        for _ in 0..20 {
            let r = c.get("/video.mp4", &[("Range", "bytes=0-524287")]);
            assert_eq!(r.status, 206);
            assert_eq!(r.body, &b[..524288], "round {round}");
        }
        eprintln!(
            "round {round}: 20 requests in {:?} beside 1000 slowloris connections",
            started.elapsed()
        );
    }
    // The slow heads are all still open (the header timeout is 30 s): none was dropped.
    assert!(
        s.stats().connections_open >= 1000,
        "{:?}",
        s.stats().connections_open
    );
}

#[test]
fn header_timeout_closes_stalled_heads_with_408() {
    let s = TestServer::start_with(|c| c.header_timeout = Duration::from_millis(300));
    let mut t = TcpStream::connect(s.addr).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    t.write_all(b"GET /video.mp4 HTTP/1.1\r\nHo").unwrap();
    let mut got = Vec::new();
    t.read_to_end(&mut got).unwrap();
    assert!(
        got.starts_with(b"HTTP/1.1 408 "),
        "{}",
        String::from_utf8_lossy(&got)
    );
    assert_eq!(s.stats().header_timeouts, 1);
}

#[test]
fn idle_keep_alive_connections_time_out() {
    let s = TestServer::start_with(|c| c.idle_timeout = Duration::from_millis(300));
    let mut c = s.connect();
    assert_eq!(c.get("/video.mp4", &[("Range", "bytes=0-0")]).status, 206);
    let t0 = Instant::now();
    assert!(c.is_closed());
    assert!(t0.elapsed() < Duration::from_secs(15));
}

#[test]
fn reader_below_minimum_rate_is_dropped() {
    let s = TestServer::start_with(|c| {
        c.send_grace = Duration::from_millis(200);
        c.min_send_rate = 10 * 1024 * 1024;
    });
    s.write("big.mp4", &pattern(64 * 1024 * 1024));
    let mut t = TcpStream::connect(s.addr).unwrap();
    t.write_all(b"GET /big.mp4 HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    // Never read: the socket buffers fill and the server must give up on us.
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.stats().responses_too_slow == 0 {
        assert!(Instant::now() < deadline, "slow reader was never dropped");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Others are unaffected.
    assert_eq!(
        s.connect()
            .get("/video.mp4", &[("Range", "bytes=0-0")])
            .status,
        206
    );
}

#[test]
fn clients_vanishing_mid_body_do_not_disturb_others() {
    let s = TestServer::start();
    s.write("big.mp4", &pattern(16 * 1024 * 1024));
    let mut steady = s.connect();
    let b = pattern(1024 * 1024 + 3);
    for i in 0..30 {
        let mut t = TcpStream::connect(s.addr).unwrap();
        t.write_all(b"GET /big.mp4 HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut some = [0u8; 10000];
        let _ = t.read(&mut some).unwrap();
        // Reset instead of a clean close for half of them.
        if i % 2 == 0 {
            set_linger_zero(&t);
        }
        drop(t);
        let r = steady.get("/video.mp4", &[("Range", "bytes=100-199")]);
        assert_eq!(r.body, &b[100..200]);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.stats().responses_aborted < 30 {
        assert!(
            Instant::now() < deadline,
            "aborted responses: {}",
            s.stats().responses_aborted
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Set SO_LINGER {on, 0} so closing sends RST.
fn set_linger_zero(t: &TcpStream) {
    use std::os::fd::AsRawFd;
    let l = libc_linger();
    // SAFETY: valid socket fd and a properly sized linger struct.
    unsafe {
        libc::setsockopt(
            t.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as u32,
        );
    }
}

fn libc_linger() -> libc::linger {
    libc::linger {
        l_onoff: 1,
        l_linger: 0,
    }
}

#[test]
fn connection_limit_answers_503() {
    let s = TestServer::start_with(|c| c.max_connections = 2);
    let mut a = s.connect();
    let mut b = s.connect();
    assert_eq!(a.get("/video.mp4", &[("Range", "bytes=0-0")]).status, 206);
    assert_eq!(b.get("/video.mp4", &[("Range", "bytes=0-0")]).status, 206);
    let mut c = Client::connect(s.addr);
    let r = c.read_response(false);
    assert_eq!(r.status, 503);
    drop(a);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut d = s.connect();
        d.send("GET /video.mp4 HTTP/1.1\r\nHost: t\r\nRange: bytes=0-0\r\n\r\n");
        if d.read_response(false).status == 206 {
            break;
        }
        assert!(Instant::now() < deadline, "slot never freed");
        std::thread::sleep(Duration::from_millis(20));
    }
}
