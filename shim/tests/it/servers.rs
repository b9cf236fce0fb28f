//! Unmodified nginx and Apache under the library serve byte-exact content for random
//! ranges (checked against `vodkit_workload::content`), with misses reaching the daemon;
//! stopping the daemon halfway through loses no request.

use crate::common;

use common::*;
use rand::{Rng, SeedableRng};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use vodkit_peers::{PeerSetup, StartPeer};
use vodkit_preload::{IoMode, Preload};
use vodkit_workload::content::{first_mismatch, path_key};

const TITLES: usize = 6;
const TITLE_SIZE: usize = 8 << 20;
const CLIENTS: usize = 6;
const REQUESTS_PER_CLIENT: usize = 20;

/// GET a byte range; returns (status, body).
fn get_range(port: u16, path: &str, first: u64, last: u64) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET /{path} HTTP/1.1\r\nHost: 127.0.0.1\r\nRange: bytes={first}-{last}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read response");
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("response headers");
    let head = String::from_utf8_lossy(&raw[..end]);
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status code");
    (status, raw[end + 4..].to_vec())
}

/// Random range requests from several clients; every body must match the content
/// function. Files are dropped from the page cache now and then so misses keep coming.
fn verify_random_ranges(port: u16, root: &Path, seed: u64) -> usize {
    let threads: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let root = root.to_path_buf();
            std::thread::spawn(move || {
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed * 100 + c as u64);
                for _ in 0..REQUESTS_PER_CLIENT {
                    let rel = format!("v/title-{:03}.dat", rng.random_range(0..TITLES));
                    if rng.random_range(0..4) == 0 {
                        evict(&root.join("www").join(&rel));
                    }
                    let first = rng.random_range(0..TITLE_SIZE as u64 - 1);
                    let len = rng.random_range(1..=(1u64 << 20));
                    let last = (first + len - 1).min(TITLE_SIZE as u64 - 1);
                    let (status, body) = get_range(port, &rel, first, last);
                    assert_eq!(status, 206, "{rel} {first}-{last}");
                    assert_eq!(body.len() as u64, last - first + 1, "{rel} {first}-{last}");
                    if let Some(at) = first_mismatch(path_key(&rel), first, &body) {
                        panic!("{rel} {first}-{last}: wrong byte at body offset {at}");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client thread");
    }
    CLIENTS * REQUESTS_PER_CLIENT
}

fn site() -> tempfile::TempDir {
    let dir = open_tempdir();
    for i in 0..TITLES {
        let rel = format!("v/title-{i:03}.dat");
        write_content(&dir.path().join("www"), &rel, TITLE_SIZE);
    }
    dir
}

fn serve_and_verify(start: StartPeer, aio_threads: Option<usize>) {
    let dir = site();
    let daemon = daemon(
        dir.path(),
        IoMode::Asap,
        vodkit_prefetch::PolicySpec::DEFAULT_TEXT,
    );
    let preload = Preload::attach(daemon.socket()).unwrap();
    let with_library = |mut cmd: Command| -> Result<Command, String> {
        preload.apply(&mut cmd);
        Ok(cmd)
    };
    let (root, run) = (dir.path().join("www"), dir.path().join("run"));
    let setup = PeerSetup {
        aio_threads,
        ..PeerSetup::new(&root, &run, "/v/title-000.dat", 2)
    };
    let server = start(&setup, &with_library).unwrap_or_else(|e| panic!("{e}"));
    // The readiness probe went through the library too: count only what the clients cause.
    let before = daemon.metrics();
    verify_random_ranges(server.port, dir.path(), 1);
    let m = daemon.stop();
    assert!(
        m.requests > before.requests && m.engine.reads > before.engine.reads,
        "no miss reached the daemon: the library was not active in the server ({m:?}); {}",
        server.diagnostics()
    );
    // Daemon gone: the server keeps serving correct bytes (the library fails open).
    verify_random_ranges(server.port, dir.path(), 2);
    server.stop(Duration::from_secs(5)).expect("server stops");
}

#[test]
fn nginx_serves_exact_ranges_under_the_library() {
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Peer("nginx")]) {
        return;
    }
    serve_and_verify(vodkit_peers::start_nginx, None);
}

#[test]
fn nginx_with_aio_threads_serves_exact_ranges_under_the_library() {
    // `aio threads`: nginx calls sendfile from its thread pool; the library is thread-safe.
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Peer("nginx")]) {
        return;
    }
    serve_and_verify(vodkit_peers::start_nginx, Some(32));
}

#[test]
fn apache_serves_exact_ranges_under_the_library() {
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Peer("apache2")]) {
        return;
    }
    let modules = Path::new(vodkit_peers::apache::MODULE_DIR);
    if !modules.join("mod_mpm_event.so").exists() {
        return vodkit_testkit::skip(format_args!(
            "needs the apache2 modules in {}",
            modules.display()
        ));
    }
    serve_and_verify(vodkit_peers::start_apache, None);
}
