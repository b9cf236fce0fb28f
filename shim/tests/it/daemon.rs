//! The daemon's protocol seen from a client: replies per mode, descriptors that are not
//! regular files, malformed messages, and the admin endpoints.

use crate::common;

use common::*;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use vodkit_preload::daemon::socket;
use vodkit_preload::protocol::{Op, Request};
use vodkit_preload::IoMode;

fn request(offset: u64, len: u64, size: u64, seq: u64) -> Request {
    Request {
        op: Op::Pread,
        pid: std::process::id(),
        offset,
        len,
        file_size: size,
        seq,
        resident: false,
    }
}

/// One client connection to a daemon, speaking the library's side of the protocol.
struct Client(std::os::fd::OwnedFd);

impl Client {
    fn connect(d: &vodkit_preload::Daemon) -> Client {
        Client(socket::connect(d.socket()).unwrap())
    }

    /// Sends `req` about the file open on `fd`.
    fn send(&self, req: &Request, fd: &impl AsRawFd) {
        socket::send_request(self.0.as_raw_fd(), req, fd.as_raw_fd()).unwrap();
    }

    /// The next reply: (status, sequence number, offset, length).
    fn reply(&self) -> (u32, u64, u64, u64) {
        socket::receive_reply(self.0.as_raw_fd()).unwrap()
    }

    /// [`Client::send`] then [`Client::reply`].
    fn ask(&self, req: &Request, fd: &impl AsRawFd) -> (u32, u64, u64, u64) {
        self.send(req, fd);
        self.reply()
    }
}

/// A file of `size` bytes in `dir`, out of the page cache, and open for reading.
fn cold_file(dir: &std::path::Path, name: &str, size: usize) -> std::fs::File {
    let file = write_content(dir, name, size);
    evict(&file);
    std::fs::File::open(&file).unwrap()
}

#[test]
fn replies_follow_the_mode_and_bad_input_is_survived() {
    let dir = open_tempdir();
    let f = cold_file(dir.path(), "a.dat", 3 << 20);

    let d = daemon(dir.path(), IoMode::Prefetch, "fixed:1MiB");
    let c = Client::connect(&d);
    // status 1 = read it yourself: from the request's offset, the policy's size
    assert_eq!(
        c.ask(&request(4096, 100, 3 << 20, 7), &f),
        (1, 7, 4096, 1 << 20)
    );

    // a pipe is not a regular file: skipped (status 2), nothing read
    let (r, _w) = std::io::pipe().unwrap();
    assert_eq!(c.ask(&request(0, 10, 10, 8), &r).0, 2);

    // garbage is counted and ignored; the connection still works afterwards
    // SAFETY: sending a short buffer on our own socket.
    unsafe { libc::send(c.0.as_raw_fd(), b"hello".as_ptr().cast(), 5, 0) };
    assert_eq!(c.ask(&request(0, 10, 3 << 20, 9), &f).1, 9);
    let m = d.stop();
    assert_eq!(m.bad_messages, 1);
    assert_eq!(m.outcomes.not_regular, 1);
    assert_eq!(m.outcomes.prefetch_in_library, 2);

    let d = daemon(
        dir.path(),
        IoMode::Asap,
        vodkit_prefetch::PolicySpec::DEFAULT_TEXT,
    );
    assert_eq!(
        Client::connect(&d).ask(&request(0, 4096, 3 << 20, 1), &f).0,
        0
    );
    let m = d.stop();
    assert_eq!(m.engine.reads, 1);
    assert_eq!(m.engine.read_bytes, 2 << 20);
}

#[test]
fn resident_notes_are_accounted_as_hits_and_never_answered() {
    let dir = open_tempdir();
    let f = cold_file(dir.path(), "n.dat", 4 << 20);
    let d = daemon(
        dir.path(),
        IoMode::Asap,
        vodkit_prefetch::PolicySpec::DEFAULT_TEXT,
    );
    let c = Client::connect(&d);
    // a miss at 0 prefetches [0, 2 MiB)
    assert_eq!(c.ask(&request(0, 512 << 10, 4 << 20, 1), &f), (0, 1, 0, 0));
    // the library then reads [512 KiB, 1 MiB) from memory and notes it
    let note = Request {
        resident: true,
        ..request(512 << 10, 512 << 10, 4 << 20, 2)
    };
    c.send(&note, &f);
    // the next miss is answered with its own sequence number: the note got no reply
    assert_eq!(c.ask(&request(3 << 20, 4096, 4 << 20, 3), &f).1, 3);
    let m = d.stop();
    assert_eq!((m.resident_notes, m.noted_bytes), (1, 512 << 10));
    assert_eq!(m.requests, 2, "notes are not misses");
    assert_eq!((m.engine.hits, m.engine.misses), (1, 2));
    // the noted half MiB is prefetched data used (without the note it would count as unused)
    assert_eq!(m.engine.prefetch.used_bytes, 512 << 10);
}

fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    http(addr, "GET", path)
}

fn http(addr: std::net::SocketAddr, method: &str, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn admin_serves_prometheus_metrics_and_json_stats() {
    let dir = open_tempdir();
    let f = cold_file(dir.path(), "a.dat", 1 << 20);
    let d = daemon(dir.path(), IoMode::Asap, "fixed:512KiB");
    let addr = vodkit_preload::daemon::admin::spawn(&d, "127.0.0.1:0".parse().unwrap()).unwrap();
    Client::connect(&d).ask(&request(0, 100, 1 << 20, 1), &f);

    let metrics = http_get(addr, "/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(
        metrics.contains("vodkit_preload_misses_total{call=\"pread\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("vodkit_prefetch_reads_total 1"),
        "{metrics}"
    );
    let stats = http_get(addr, "/stats");
    let body = stats.split("\r\n\r\n").nth(1).unwrap();
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["requests"], 1);
    assert_eq!(v["engine"]["read_bytes"], 512 * 1024);
    assert!(http_get(addr, "/nope").starts_with("HTTP/1.1 404"));
    // The engine's clock rate (a bench's fast-forward), checked.
    assert!(http(addr, "POST", "/clock?rate=8").starts_with("HTTP/1.1 204"));
    assert!(http(addr, "POST", "/clock?rate=1").starts_with("HTTP/1.1 204"));
    let bad = http(addr, "POST", "/clock?rate=-1");
    assert!(
        bad.starts_with("HTTP/1.1 400") && bad.contains("clock rate"),
        "{bad}"
    );
}

#[test]
fn start_reuses_a_running_daemon_and_wrap_adds_the_library() {
    let dir = open_tempdir();
    let first = daemon(dir.path(), IoMode::Asap, "fixed:1MiB");
    let cfg = vodkit_preload::DaemonConfig::new(first.socket());
    let preload = vodkit_preload::Preload::start(cfg).unwrap();
    assert!(
        preload.daemon().is_none(),
        "a daemon already listens: reuse it"
    );
    let lib = preload.library().to_path_buf();
    let wrap = preload.into_wrap();
    let cmd = wrap(std::process::Command::new("true")).unwrap();
    let env: Vec<_> = cmd.get_envs().collect();
    let get = |k: &str| {
        env.iter()
            .find(|(n, _)| *n == k)
            .and_then(|(_, v)| *v)
            .map(|v| v.to_string_lossy().into_owned())
    };
    assert!(get("LD_PRELOAD")
        .unwrap()
        .starts_with(lib.to_str().unwrap()));
    assert_eq!(
        get("VODKIT_PREFETCHD_SOCKET").unwrap(),
        first.socket().to_str().unwrap()
    );
    // a second daemon on the same live socket is refused
    let again = vodkit_preload::Daemon::start(vodkit_preload::DaemonConfig::new(first.socket()));
    assert!(again.is_err());
}

/// A catalog listing `rel` at `kbps` (one title, one rendition, one file).
fn catalog_listing(dir: &std::path::Path, rel: &str, kbps: u32) -> std::path::PathBuf {
    let catalog = vodkit_workload::model::Catalog::of_files([(rel.into(), 16 << 20)], 60.0, kbps);
    let path = dir.join("catalog.json");
    std::fs::write(&path, serde_json::to_string(&catalog).unwrap()).unwrap();
    path
}

fn daemon_with_catalog(
    dir: &std::path::Path,
    mode: IoMode,
    catalog: &std::path::Path,
    root: Option<&std::path::Path>,
) -> vodkit_preload::Daemon {
    let mut cfg = vodkit_preload::DaemonConfig::new(dir.join("prefetchd.sock"));
    cfg.mode = mode;
    cfg.policy = "auto".parse().unwrap();
    let map =
        vodkit_prefetch::BitrateMap::from_rates(vodkit_workload::bitrates::load(catalog).unwrap());
    cfg.bitrates = Some(vodkit_preload::daemon::FileRates::new(map, catalog, root).unwrap());
    vodkit_preload::Daemon::start(cfg).unwrap()
}

/// Ask the daemon about a miss at the start of `file`; the reply's status and length.
fn ask(c: &Client, file: &std::path::Path, seq: u64) -> (u32, u64) {
    let f = std::fs::File::open(file).unwrap();
    let (status, _, _, len) = c.ask(&request(0, 4096, 16 << 20, seq), &f);
    (status, len)
}

#[test]
fn catalog_bit_rates_scale_auto_by_square_root() {
    let dir = open_tempdir();
    let root = dir.path().join("www");
    let listed = write_content(&root, "hd/t1.dat", 16 << 20);
    let unlisted = write_content(&root, "sd/t2.dat", 16 << 20);
    let catalog = catalog_listing(dir.path(), "hd/t1.dat", 1676);
    let expected = (1676f64 / 419f64).sqrt();

    // prefetch mode: the reply carries the size auto chose for each file
    for root_arg in [Some(root.as_path()), None] {
        let d = daemon_with_catalog(dir.path(), IoMode::Prefetch, &catalog, root_arg);
        let conn = Client::connect(&d);
        let (s1, plain) = ask(&conn, &unlisted, 1);
        let (s2, scaled) = ask(&conn, &listed, 2);
        assert_eq!((s1, s2), (1, 1), "both are read in the library");
        let ratio = scaled as f64 / plain as f64;
        assert!(
            (ratio - expected).abs() < 1e-3,
            "root {root_arg:?}: {scaled} vs {plain} bytes, ratio {ratio}"
        );
        let m = d.stop();
        assert_eq!(m.misses_with_bitrate, 1);
        assert_eq!(m.catalog_files, 1);
        assert_eq!(m.planned_bytes, plain + scaled);
    }

    // both mode: the engine reads each file at its size
    evict(&listed);
    evict(&unlisted);
    let d = daemon_with_catalog(dir.path(), IoMode::Asap, &catalog, Some(&root));
    let conn = Client::connect(&d);
    assert_eq!(ask(&conn, &unlisted, 1).0, 0);
    assert_eq!(ask(&conn, &listed, 2).0, 0);
    let m = d.stop();
    let classes = &m.engine.policy.classes;
    assert_eq!(
        classes.iter().map(|c| c.bitrate_kbps).collect::<Vec<_>>(),
        [419, 1676],
        "{classes:?}"
    );
    let ratio = classes[1].bytes as f64 / classes[0].bytes as f64;
    assert!((ratio - expected).abs() < 1e-3, "{classes:?}");
    assert_eq!(m.engine.read_bytes, classes[0].bytes + classes[1].bytes);
}

#[test]
fn a_catalog_outside_the_root_gives_no_rates() {
    let dir = open_tempdir();
    let root = dir.path().join("www");
    let listed = write_content(&root, "hd/t1.dat", 16 << 20);
    let other = dir.path().join("elsewhere");
    std::fs::create_dir_all(&other).unwrap();
    let catalog = catalog_listing(dir.path(), "hd/t1.dat", 1676);
    let d = daemon_with_catalog(dir.path(), IoMode::Prefetch, &catalog, Some(&other));
    let conn = Client::connect(&d);
    ask(&conn, &listed, 1);
    assert_eq!(d.stop().misses_with_bitrate, 0);
}
