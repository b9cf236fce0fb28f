//! Admission for unmodified nginx through the daemon's `/admit` (nginx's `auth_request`):
//! a new stream past the limit gets `503` with `Retry-After`, a continuation of an admitted
//! stream never does, and with admission off every request goes through.

use crate::common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use vodkit_peers::PeerSetup;
use vodkit_prefetch::admission::AdmissionPolicy;
use vodkit_preload::{Daemon, DaemonConfig, IoMode};

/// (status, Retry-After) of a GET of `first..=last` of `path` in session `session`.
fn get(port: u16, path: &str, session: &str, first: u64, last: u64) -> (u16, Option<String>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Session-Id: {session}\r\n\
         Range: bytes={first}-{last}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read response");
    let text = String::from_utf8_lossy(&raw);
    let head = text.split("\r\n\r\n").next().unwrap_or_default();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    let retry = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("retry-after")
            .then(|| v.trim().to_string())
    });
    (status, retry)
}

fn daemon_with(
    dir: &std::path::Path,
    admission: AdmissionPolicy,
) -> (Daemon, std::net::SocketAddr) {
    let mut cfg = DaemonConfig::new(dir.join("prefetchd.sock"));
    cfg.mode = IoMode::Asap;
    cfg.admission = admission;
    cfg.root = Some(dir.join("www"));
    let d = Daemon::start(cfg).unwrap();
    let admin = vodkit_preload::daemon::admin::spawn(&d, "127.0.0.1:0".parse().unwrap()).unwrap();
    (d, admin)
}

#[test]
fn nginx_asks_the_daemon_and_refuses_only_new_streams() {
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Peer("nginx")]) {
        return;
    }
    let dir = open_tempdir();
    for t in ["b", "c"] {
        write_content(&dir.path().join("www"), &format!("v/{t}.dat"), 4 << 20);
    }
    // nginx's readiness probe asks for `/`, its index page: a URI that names no file under
    // the root is not a stream, and is let through without taking the one admission.
    std::fs::write(dir.path().join("www/index.html"), "vodkit\n").unwrap();
    // One new stream, then none for a thousand seconds: the first viewer is admitted and
    // keeps playing, the next two are told to come back.
    let (d, admin) = daemon_with(dir.path(), AdmissionPolicy::Rate { per_s: 0.001 });
    let extra = vodkit_preload::daemon::admit::nginx_directives(admin);
    let run = dir.path().join("run");
    let root = dir.path().join("www");
    let setup = PeerSetup {
        server_extra: Some(&extra),
        ..PeerSetup::new(&root, &run, "/", 1)
    };
    let nginx = vodkit_peers::start_nginx(&setup, &vodkit_peers::no_wrap).unwrap();
    let port = nginx.port;
    let (first, _) = get(port, "/v/b.dat", "s1", 0, (1 << 20) - 1);
    let (cont, _) = get(port, "/v/b.dat", "s1", 1 << 20, (2 << 20) - 1);
    let (other, retry) = get(port, "/v/c.dat", "s2", 0, (1 << 20) - 1);
    let (jump, _) = get(port, "/v/b.dat", "s1", 3 << 20, (4 << 20) - 1);
    let after = d.metrics();
    let errors = nginx.stop(Duration::from_secs(10)).unwrap();
    eprintln!(
        "statuses: first {first}, continuation {cont}, other {other} (Retry-After {retry:?}), \
         jump {jump}; admitted {}, refused {}; nginx errors {errors:?}",
        after.streams_admitted, after.streams_refused
    );
    assert_eq!(after.admission, "rate:0.001");
    assert_eq!(first, 206, "the first new stream is admitted");
    assert_eq!(cont, 206, "its continuation is never refused");
    assert_eq!(other, 503, "a second new stream is refused");
    assert!(
        retry
            .as_deref()
            .is_some_and(|r| r.parse::<u32>().is_ok_and(|s| s >= 1)),
        "the refusal carries the daemon's Retry-After: {retry:?}"
    );
    assert_eq!(jump, 503, "a jump elsewhere in the file is a new stream");
    assert_eq!((after.streams_admitted, after.streams_refused), (1, 2));
    drop(d);

    // Admission off: the same requests all go through.
    let (d, admin) = daemon_with(dir.path(), AdmissionPolicy::Off);
    let extra = vodkit_preload::daemon::admit::nginx_directives(admin);
    let run = dir.path().join("run-off");
    let nginx = vodkit_peers::start_nginx(
        &PeerSetup {
            run_dir: &run,
            server_extra: Some(&extra),
            ..setup
        },
        &vodkit_peers::no_wrap,
    )
    .unwrap();
    for (path, session, at) in [
        ("/v/b.dat", "s1", 0u64),
        ("/v/c.dat", "s2", 0),
        ("/v/b.dat", "s1", 3 << 20),
    ] {
        assert_eq!(get(nginx.port, path, session, at, at + 4095).0, 206);
    }
    nginx.stop(Duration::from_secs(10)).unwrap();
    assert_eq!(d.metrics().streams_refused, 0);
}
