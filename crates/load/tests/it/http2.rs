//! `--http 2` against the vodkit origin: each viewer's requests, over its several connection
//! indexes, are streams of one HTTP/2 connection, by prior knowledge (h2c) and over TLS
//! (ALPN `h2`); the bytes are verified, open-ended ranges are cancelled without losing the
//! connection, and an origin that does not speak HTTP/2 over TLS is a clear failure.

use crate::common;

use common::{ranges_of, req, run, write_file};
use vodkit_load::record::FailureReason;
use vodkit_load::{HttpVersion, Target, TlsClient, Trust};
use vodkit_server::tls::{selfsigned, TlsSettings};
use vodkit_server::H2Settings;
use vodkit_testkit::server::TestServer;
use vodkit_workload::model::{ByteRange, Session};

const FILE: usize = 2 * 1024 * 1024 + 7;

/// Sessions reading one file in ranges on two connection indexes, a whole file, and an
/// open-ended range of it.
fn sessions(n: u64) -> Vec<Session> {
    (0..n)
        .map(|id| {
            let mut requests = ranges_of("/v/a.mp4", FILE as u64, 256 * 1024, |i| i as u32 % 2);
            requests.push(req("/v/b.mp4", None, 0));
            requests.push(req(
                "/v/a.mp4",
                Some(ByteRange::OpenEnded {
                    first: 1000,
                    read: 300_000,
                }),
                1,
            ));
            requests.push(req("/v/b.mp4", Some(ByteRange::closed(10, 99)), 1)); // 99 bytes from 10
            Session::new(id, 0.0, "default", requests)
        })
        .collect()
}

fn origin(tune: impl FnOnce(&mut vodkit_server::ServerConfig)) -> (TestServer, tempfile::TempDir) {
    let root = tempfile::tempdir().unwrap();
    write_file(root.path(), "v/a.mp4", FILE);
    write_file(root.path(), "v/b.mp4", 500_003);
    let server = TestServer::serving(root.path(), |c| {
        c.http2 = Some(H2Settings::default());
        tune(c);
    });
    (server, root)
}

fn requests_per_session() -> u64 {
    (FILE as u64).div_ceil(256 * 1024) + 3
}

#[test]
fn h2c_viewers_multiplex_their_requests_on_one_connection() {
    let (server, _root) = origin(|_| {});
    let target = Target::parse(&format!("http://{}", server.addr), false).unwrap();
    let n = 5;
    let out = run(target, sessions(n), |c| {
        c.verify = true;
        c.http = HttpVersion::Http2;
    });
    let r = &out.results;
    assert!(r.requests.errors.is_empty(), "{}", r.summary());
    assert_eq!(r.sessions.completed, n, "{}", r.summary());
    assert_eq!(r.requests.completed, n * requests_per_session());
    assert_eq!(r.requests.bytes, n * (FILE as u64 + 500_003 + 300_000 + 99));
    assert_eq!(r.run.http, "2");
    let st = server.stats();
    // One connection per viewer (none lost to the cancelled open-ended range), every
    // request a stream of it.
    assert_eq!(st.http2.connections, n, "{:?}", st.http2);
    assert_eq!(st.connections_total, n);
    assert_eq!(st.http2.streams, n * requests_per_session());
}

#[test]
fn tls_viewers_negotiate_h2_by_alpn() {
    let certs = tempfile::tempdir().unwrap();
    let files = selfsigned::write_dir(certs.path()).unwrap();
    let (server, _root) = origin(|c| c.tls = Some(TlsSettings::new(&files.cert, &files.key)));
    let target =
        Target::parse(&format!("https://localhost:{}", server.addr.port()), false).unwrap();
    let n = 3;
    let tls = TlsClient::new(Trust::Ca(files.ca.clone()), &target.name).unwrap();
    let out = run(target.clone(), sessions(n), |c| {
        c.verify = true;
        c.http = HttpVersion::Http2;
        c.tls = Some(tls.clone());
    });
    let r = &out.results;
    assert!(r.requests.errors.is_empty(), "{}", r.summary());
    assert_eq!(r.requests.completed, n * requests_per_session());
    let st = server.stats();
    assert_eq!(st.http2.connections, n, "{:?}", st.http2);
    assert_eq!(st.tls_handshakes, n);

    // An origin offering only http/1.1 over TLS: the viewers say why they cannot go on.
    let (plain, _root) = origin(|c| {
        c.tls = Some(TlsSettings::new(&files.cert, &files.key));
        c.http2 = None;
    });
    let target = Target::parse(&format!("https://localhost:{}", plain.addr.port()), false).unwrap();
    let one = vec![Session::new(
        1,
        0.0,
        "default",
        vec![req("/v/b.mp4", None, 0)],
    )];
    let out = run(target, one, |c| {
        c.http = HttpVersion::Http2;
        c.tls = Some(tls);
    });
    let f = out.sessions[0].requests[0]
        .failure
        .as_ref()
        .expect("a failure");
    assert_eq!(f.reason, FailureReason::Connect, "{}", f.detail);
}

#[test]
fn a_viewer_behind_a_slow_link_gets_every_byte_over_h2c() {
    let (server, _root) = origin(|_| {});
    let target = Target::parse(&format!("http://{}", server.addr), false).unwrap();
    let s = vec![Session::new(
        7,
        0.0,
        "slow",
        vec![
            req("/v/b.mp4", None, 0),
            req("/v/a.mp4", Some(ByteRange::closed(5, 200_000)), 1),
        ],
    )];
    let out = run(target, s, |c| {
        c.verify = true;
        c.http = HttpVersion::Http2;
        common::link(c, "slow", 16_000_000, std::time::Duration::from_millis(5));
    });
    let r = &out.results;
    assert!(r.requests.errors.is_empty(), "{}", r.summary());
    assert_eq!(r.requests.bytes, 500_003 + 200_000);
}
