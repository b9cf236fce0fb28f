//! HTTP/2 on the origin: curl over TLS (ALPN `h2`, and `http/1.1` still offered) and by
//! prior knowledge (h2c) gets exact bodies, ranges and 304s; h2load's requests all
//! succeed; a live source publishes and viewers read back over HTTP/2, with CORS; and hostile clients — rapid reset, a CONTINUATION flood, a window that never
//! opens, ten thousand streams opened and abandoned — are cut off while the server stays
//! up, serves another client, and holds no more streams than it allows.

use crate::common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use common::{h2_connect, pattern, runtime, TestServer};
use h2::Reason;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vodkit_server::tls::{selfsigned, TlsSettings};
use vodkit_server::H2Settings;
use vodkit_testkit::{needs, Need};

fn h2c_server(tune: impl FnOnce(&mut vodkit_server::ServerConfig)) -> TestServer {
    TestServer::start_with(|c| {
        c.http2 = Some(H2Settings::default());
        tune(c);
    })
}

fn curl(args: &[&str]) -> std::process::Output {
    common::run_ok(Command::new("curl").args(args))
}

/// `curl -sS` with `args`, then `-w` printing the protocol version and the status.
fn curl_version_status(args: &[&str]) -> (String, String) {
    let mut all = vec![
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_version} %{http_code}",
    ];
    all.extend_from_slice(args);
    let out = String::from_utf8(curl(&all).stdout).unwrap();
    let (v, s) = out.split_once(' ').unwrap();
    (v.to_string(), s.to_string())
}

/// The value of header `name` in curl's `-D -` dump of a response head.
fn header_in(dump: &[u8], name: &str) -> Option<String> {
    String::from_utf8_lossy(dump).lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
    })
}

/// Bodies, ranges, a multi-range answer and revalidation through curl, with `proto` the
/// flags choosing the protocol and `url` the file's address.
fn curl_semantics(proto: &[&str], url: &str, http2: bool) {
    let b = pattern(1024 * 1024 + 3);
    let with = |extra: &[&str]| {
        let mut a: Vec<&str> = vec!["-sS"];
        a.extend_from_slice(proto);
        a.extend_from_slice(extra);
        a.push(url);
        curl(&a)
    };
    assert_eq!(with(&[]).stdout, b, "the whole file");
    assert_eq!(with(&["-r", "1000-299999"]).stdout, &b[1000..300_000]);
    assert_eq!(with(&["-r", "-10"]).stdout, &b[b.len() - 10..]);
    let multi = with(&["-r", "0-99,5000-5099"]).stdout;
    let text = String::from_utf8_lossy(&multi);
    assert!(text.contains("Content-Range: bytes 0-99/1048579"), "{text}");
    assert!(
        text.contains("Content-Range: bytes 5000-5099/1048579"),
        "{text}"
    );
    let head = with(&["-I"]).stdout;
    let etag = header_in(&head, "etag").expect("an ETag");
    assert_eq!(
        header_in(&head, "content-length").as_deref(),
        Some("1048579")
    );
    if http2 {
        assert!(
            header_in(&head, "connection").is_none(),
            "no connection field in HTTP/2"
        );
    }
    let mut args: Vec<&str> = proto.to_vec();
    let inm = format!("If-None-Match: {etag}");
    args.extend_from_slice(&["-H", &inm, url]);
    assert_eq!(curl_version_status(&args).1, "304");
    // If-Range with the current ETag keeps the range; a stale one gets the whole file.
    let ir = format!("If-Range: {etag}");
    assert_eq!(with(&["-r", "0-9", "-H", &ir]).stdout, &b[..10]);
    assert_eq!(
        with(&["-r", "0-9", "-H", "If-Range: \"stale\""])
            .stdout
            .len(),
        b.len()
    );
    let missing = url.replace("video.mp4", "missing.mp4");
    let mut args2: Vec<&str> = proto.to_vec();
    args2.push(&missing);
    assert_eq!(curl_version_status(&args2).1, "404");
}

#[test]
fn curl_gets_bodies_ranges_and_304s_over_tls_alpn_and_h2c() {
    if !needs(&[Need::Tool("curl")]) {
        return;
    }
    let certs = tempfile::tempdir().unwrap();
    let files = selfsigned::write_dir(certs.path()).unwrap();
    let log = certs.path().join("access.log");
    let tls = TestServer::start_with(|c| {
        c.tls = Some(TlsSettings::new(&files.cert, &files.key));
        c.http2 = Some(H2Settings::default());
        c.access_log = Some(log.clone());
    });
    let ca = certs.path().join("ca.pem");
    let ca = ca.to_str().unwrap();
    let url = format!("https://127.0.0.1:{}/video.mp4", tls.addr.port());
    let h2 = ["--http2", "--cacert", ca];
    assert_eq!(curl_version_status(&[&h2[..], &[&url]].concat()).0, "2");
    curl_semantics(&h2, &url, true);
    // A client that offers only http/1.1 still gets it.
    let h1 = ["--http1.1", "--cacert", ca];
    assert_eq!(curl_version_status(&[&h1[..], &[&url]].concat()).0, "1.1");
    curl_semantics(&h1, &url, false);
    let streams = tls.stats().http2.streams;
    assert!(streams >= 10, "{streams} HTTP/2 streams counted");
    tls.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("\tHTTP/2.0\t") && text.contains("\tHTTP/1.1\t"),
        "{text}"
    );

    let plain = h2c_server(|_| {});
    let url = plain.url("/video.mp4");
    let h2c = ["--http2-prior-knowledge"];
    assert_eq!(curl_version_status(&[&h2c[..], &[&url]].concat()).0, "2");
    curl_semantics(&h2c, &url, true);
    // HTTP/1.1 on the same listener.
    assert_eq!(curl_version_status(&[&url]).0, "1.1");
    curl_semantics(&[], &url, false);
}

#[test]
fn h2load_requests_all_succeed() {
    if !needs(&[Need::Tool("h2load")]) {
        return;
    }
    let s = h2c_server(|_| {});
    s.write("small.bin", &pattern(40_000));
    let out = common::run_ok(Command::new("h2load").args([
        "-n",
        "400",
        "-c",
        "4",
        "-m",
        "16",
        &s.url("/small.bin"),
        &s.url("/video.mp4"),
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("400 succeeded, 0 failed, 0 errored"),
        "h2load: {text}"
    );
    assert!(text.contains("status codes: 400 2xx"), "h2load: {text}");
    let st = s.stats();
    assert_eq!(st.http2.connections, 4);
    assert_eq!(st.http2.streams, 400);
}

type Sender = h2::client::SendRequest<Bytes>;

fn get(path: &str) -> http::Request<()> {
    http::Request::get(format!("http://localhost{path}"))
        .body(())
        .unwrap()
}

/// GET `path` on a fresh h2c connection and read the whole body.
async fn fetch(addr: SocketAddr, path: &str) -> (u16, Vec<u8>) {
    let mut send = h2_connect(addr, &h2::client::Builder::new()).await;
    send = send.ready().await.unwrap();
    let (resp, _) = send.send_request(get(path), true).unwrap();
    let resp = resp.await.unwrap();
    let status = resp.status().as_u16();
    (status, read_body(resp.into_body()).await)
}

/// The whole body of a response, its flow-control window given back as it is read.
async fn read_body(mut body: h2::RecvStream) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        out.extend_from_slice(&chunk);
    }
    out
}

/// Another client gets the whole file: the server is up and serving.
fn others_are_served(rt: &tokio::runtime::Runtime, s: &TestServer) {
    let (status, body) = rt.block_on(fetch(s.addr, "/video.mp4"));
    assert_eq!((status, body.len()), (200, 1024 * 1024 + 3));
    assert_eq!(body, pattern(1024 * 1024 + 3));
}

/// Wait (polling `/stats`) until no HTTP/2 stream is being answered; panics after a minute.
fn streams_drain(s: &TestServer) {
    for _ in 0..600 {
        if s.stats().http2.streams_open == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("HTTP/2 streams still open: {:?}", s.stats().http2);
}

/// Resident memory of this process (the in-process server's too), from /proc.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn rapid_reset_ends_the_connection_and_others_are_served() {
    let s = h2c_server(|_| {});
    let rt = runtime();
    let ended = rt.block_on(async {
        let mut send = h2_connect(s.addr, &h2::client::Builder::new()).await;
        for i in 0..10_000u32 {
            send = match send.ready().await {
                Ok(s) => s,
                Err(e) => return (i, e),
            };
            match send.send_request(get("/video.mp4"), true) {
                Ok((_, mut stream)) => stream.send_reset(Reason::CANCEL),
                Err(e) => return (i, e),
            }
            if i.is_multiple_of(64) {
                // Let the frames out and the server's answer in, as a real attacker's
                // socket would.
                tokio::task::yield_now().await;
            }
        }
        // Every stream got through: wait for the server's verdict on the connection.
        let answer = async {
            let mut send = send.ready().await?;
            let (resp, _) = send.send_request(get("/video.mp4"), true)?;
            resp.await
        };
        match answer.await {
            Ok(_) => panic!("10,000 reset streams, and the connection is still served"),
            Err(e) => (10_000, e),
        }
    });
    let (sent, e) = ended;
    assert!(
        e.is_go_away() || e.reason() == Some(Reason::ENHANCE_YOUR_CALM) || e.is_io(),
        "after {sent} streams: {e:?}"
    );
    assert!(sent < 10_000, "the connection lasted all 10,000 resets");
    eprintln!(
        "rapid reset: cut off after {sent} streams: {e:?}; {:?}",
        s.stats().http2
    );
    others_are_served(&rt, &s);
    streams_drain(&s);
}

/// An HTTP/2 frame: 24-bit length, type, flags, stream id.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

#[test]
fn a_continuation_flood_is_cut_off() {
    let s = h2c_server(|_| {});
    let rt = runtime();
    let (written, cut) = rt.block_on(async {
        let mut tcp = tokio::net::TcpStream::connect(s.addr).await.unwrap();
        let mut start = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        start.extend(frame(0x4, 0, 0, &[])); // SETTINGS
                                             // HEADERS without END_HEADERS: :method GET, :path /, :scheme http (static table).
        start.extend(frame(0x1, 0x1, 1, &[0x82, 0x84, 0x86]));
        tcp.write_all(&start).await.unwrap();
        // CONTINUATION frames of literal fields, never ending the block.
        let mut field = vec![0x00, 5];
        field.extend_from_slice(b"x-pad");
        field.push(100);
        field.extend_from_slice(&[b'a'; 100]);
        let mut payload = Vec::new();
        while payload.len() + field.len() <= 16_000 {
            payload.extend_from_slice(&field);
        }
        let cont = frame(0x9, 0, 1, &payload);
        let cap: usize = 256 << 20;
        let mut written = 0usize;
        let (mut rd, mut wr) = tcp.into_split();
        let reader = tokio::spawn(async move {
            let mut sink = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(60), rd.read_to_end(&mut sink)).await;
            sink
        });
        let mut cut = false;
        while written < cap {
            match tokio::time::timeout(Duration::from_secs(30), wr.write_all(&cont)).await {
                Ok(Ok(())) => written += cont.len(),
                Ok(Err(_)) => {
                    cut = true;
                    break;
                }
                // The server neither reads nor closes: not cut off.
                Err(_) => break,
            }
        }
        drop(wr);
        let answer = reader.await.unwrap();
        // A GOAWAY frame (type 7) among what the server sent, or the socket just closed.
        let goaway = answer.windows(4).any(|w| w[3] == 0x7 && w[0] == 0);
        (written, cut || goaway)
    });
    assert!(cut, "the flood of {written} bytes was not cut off");
    eprintln!("CONTINUATION flood: cut off after {written} bytes");
    assert!(written < 256 << 20);
    others_are_served(&rt, &s);
    streams_drain(&s);
}

#[test]
fn a_window_that_never_opens_ends_at_the_minimum_send_rate() {
    let s = h2c_server(|c| {
        c.send_grace = Duration::from_millis(500);
        c.min_send_rate = 1024;
    });
    let rt = runtime();
    let e = rt.block_on(async {
        let mut b = h2::client::Builder::new();
        b.initial_window_size(0);
        let send = h2_connect(s.addr, &b).await;
        let mut send = send.ready().await.unwrap();
        let (resp, _) = send.send_request(get("/video.mp4"), true).unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.status(), 200);
        let mut body = resp.into_body();
        match body.data().await {
            Some(Err(e)) => e,
            other => panic!("a body through a closed window: {other:?}"),
        }
    });
    assert_eq!(e.reason(), Some(Reason::CANCEL), "{e:?}");
    assert!(s.stats().responses_too_slow >= 1);
    others_are_served(&rt, &s);
    streams_drain(&s);
}

#[test]
fn ten_thousand_abandoned_streams_leave_the_server_bounded() {
    let s = h2c_server(|_| {});
    let rt = runtime();
    let before = rss_kib();
    let opened = rt.block_on(async {
        let mut opened = 0u32;
        let mut b = h2::client::Builder::new();
        // Nothing of any body is let in: every stream is left waiting on its window.
        b.initial_window_size(0);
        let mut send = h2_connect(s.addr, &b).await;
        while opened < 10_000 {
            // A batch of streams, each answered (its head received: the server took it and
            // began its body), then all dropped unread (the client resets them).
            let mut batch = Vec::new();
            for _ in 0..100 {
                let Ok(ready) = send.clone().ready().await else {
                    break;
                };
                send = ready;
                match send.send_request(get("/video.mp4"), true) {
                    Ok((resp, stream)) => batch.push((resp, stream)),
                    Err(_) => break,
                }
            }
            let mut answered = Vec::new();
            let asked = batch.len();
            for (resp, stream) in batch {
                match resp.await {
                    Ok(r) => answered.push((r, stream)),
                    Err(_) => break,
                }
            }
            opened += answered.len() as u32;
            drop(answered);
            if asked < 100 || opened.is_multiple_of(1000) {
                // The server may have sent this connection away: a new one now and then.
                send = h2_connect(s.addr, &b).await;
            }
        }
        opened
    });
    assert!(opened >= 10_000);
    others_are_served(&rt, &s);
    streams_drain(&s);
    let st = s.stats();
    assert!(st.http2.streams >= 10_000, "{:?}", st.http2);
    assert!(
        st.http2.calmed >= 1,
        "no connection was sent away: {:?}",
        st.http2
    );
    let grown = rss_kib().saturating_sub(before);
    eprintln!(
        "{opened} abandoned streams: {:?}; RSS grew {grown} KiB",
        st.http2
    );
    assert!(grown < 256 << 10, "resident memory grew by {grown} KiB");
}

/// Send `req` with `body` (in two DATA frames) on `send` and read the answer whole.
async fn exchange(
    send: &mut Sender,
    req: http::Request<()>,
    body: &[u8],
) -> (http::response::Parts, Vec<u8>) {
    let ready = send.clone().ready().await.unwrap();
    *send = ready;
    let (resp, mut stream) = send.send_request(req, body.is_empty()).unwrap();
    if !body.is_empty() {
        let (a, b) = body.split_at(body.len() / 2);
        stream.send_data(Bytes::copy_from_slice(a), false).unwrap();
        stream.send_data(Bytes::copy_from_slice(b), true).unwrap();
    }
    let (parts, recv) = resp.await.unwrap().into_parts();
    (parts, read_body(recv).await)
}

#[test]
fn live_ingest_and_cors_work_over_http2() {
    let s = h2c_server(|c| {
        c.ingest = Some(vodkit_server::live::IngestConfig::new("/live/", "t0ken"));
        c.cors = Some(vodkit_server::web::Cors::Any);
    });
    let rt = runtime();
    rt.block_on(async {
        let mut send = h2_connect(s.addr, &h2::client::Builder::new()).await;
        let seg: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let put = |path: &str, len: Option<usize>| {
            let mut r = http::Request::put(format!("http://localhost{path}"))
                .header("authorization", "Bearer t0ken");
            if let Some(n) = len {
                r = r.header("content-length", n);
            }
            r.body(()).unwrap()
        };
        // With a declared length, and without one (the body's end is the stream's end).
        let (p, _) = exchange(&mut send, put("/live/s/seg-0.m4s", Some(seg.len())), &seg).await;
        assert_eq!(p.status, 201);
        let (p, _) = exchange(&mut send, put("/live/s/seg-1.m4s", None), &seg).await;
        assert_eq!(p.status, 201);
        for path in ["/live/s/seg-0.m4s", "/live/s/seg-1.m4s"] {
            let (p, body) = exchange(&mut send, get(path), &[]).await;
            assert_eq!(p.status, 200, "{path}");
            assert_eq!(body, seg, "{path}");
        }
        // A wrong token is refused as over HTTP/1.1, and the connection serves on.
        let bad = http::Request::put("http://localhost/live/s/x.m4s")
            .header("authorization", "Bearer nope")
            .body(())
            .unwrap();
        let (p, _) = exchange(&mut send, bad, b"xx").await;
        assert_eq!(p.status, 403);
        let req = http::Request::get("http://localhost/video.mp4")
            .header("origin", "https://player.test")
            .header("range", "bytes=10-19")
            .body(())
            .unwrap();
        let (p, body) = exchange(&mut send, req, &[]).await;
        assert_eq!(p.status, 206);
        assert_eq!(body, &pattern(20)[10..]);
        assert_eq!(p.headers["access-control-allow-origin"], "*");
        assert_eq!(p.headers["content-range"], "bytes 10-19/1048579");
    });
}

#[test]
fn a_connection_is_sent_away_at_max_requests_and_when_idle() {
    let s = h2c_server(|c| {
        c.max_requests_per_connection = Some(3);
        c.idle_timeout = Duration::from_millis(300);
    });
    let rt = runtime();
    rt.block_on(async {
        // Three streams are answered, then the server ends the connection.
        let tcp = tokio::net::TcpStream::connect(s.addr).await.unwrap();
        let (mut send, conn) = h2::client::handshake(tcp).await.unwrap();
        let driver = tokio::spawn(conn);
        for _ in 0..3 {
            let (p, body) = exchange(&mut send, get("/video.mp4"), &[]).await;
            assert_eq!((p.status.as_u16(), body.len()), (200, 1024 * 1024 + 3));
        }
        let ended = tokio::time::timeout(Duration::from_secs(30), driver).await;
        assert!(ended.is_ok(), "the connection outlived --max-requests");
        // A connection that asks nothing is closed after the idle timeout.
        let tcp = tokio::net::TcpStream::connect(s.addr).await.unwrap();
        let (_send, conn) = h2::client::handshake(tcp).await.unwrap();
        let ended = tokio::time::timeout(Duration::from_secs(30), conn).await;
        assert!(ended.is_ok(), "an idle connection stayed open");
    });
    assert_eq!(s.stats().http2.streams, 3);
}
