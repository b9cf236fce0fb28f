//! Test harness: a real nginx (the test kit's peer) on a free loopback port serving files
//! with the deterministic content, plus helpers to run the engine against it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;
use vodkit_load::{CancellationToken, LoadConfig, Run, Target};
use vodkit_testkit::peer::Peer;
use vodkit_workload::content;
use vodkit_workload::model::{ByteRange, Request, Session};

/// Reads one request head from `stream`, byte by byte (so nothing of the next request is
/// consumed); `None` at EOF or on an error.
pub fn request_head(stream: &mut impl std::io::Read) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    Some(head)
}

/// Reads one request head as [`request_head`] does; false at EOF or on an error.
pub fn read_head(stream: &mut impl std::io::Read) -> bool {
    request_head(stream).is_some()
}

/// Milliseconds since the Unix epoch now (the start of a scripted live stream).
pub fn unix_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

pub fn free_port() -> u16 {
    vodkit_peers::free_port().expect("a free loopback port")
}

/// A running nginx serving `files` with the deterministic content; stopped on drop.
pub struct Nginx(Peer);

impl Nginx {
    /// Start nginx with `files` (path relative to the root, size) written with the
    /// deterministic content; it is ready once it serves the first file. Returns `None`
    /// (after printing why) when nginx is absent.
    pub fn start(files: &[(&str, usize)]) -> Option<Nginx> {
        let (first, _) = files.first().expect("nginx serves at least one file");
        Peer::start("nginx", &format!("/{first}"), |root| {
            for (path, size) in files {
                write_file(root, path, *size);
            }
        })
        .map(Nginx)
    }

    pub fn target(&self) -> Target {
        Target::parse(&self.0.url(), false).unwrap()
    }

    pub fn root(&self) -> PathBuf {
        self.0.root()
    }
}

/// Write `path` under `root` with `size` bytes of deterministic content.
pub fn write_file(root: &Path, path: &str, size: usize) {
    let full = root.join(path);
    std::fs::create_dir_all(full.parent().unwrap()).unwrap();
    let mut data = vec![0u8; size];
    content::fill(content::path_key(path), 0, &mut data);
    std::fs::write(full, data).unwrap();
}

/// Run the engine on `sessions` with every session starting almost at once.
pub fn run(target: Target, sessions: Vec<Session>, tweak: impl FnOnce(&mut LoadConfig)) -> Run {
    let mut config = LoadConfig::new(target, sessions, 1000.0);
    config.workers = Some(2);
    tweak(&mut config);
    vodkit_load::run(config, CancellationToken::new()).expect("run starts")
}

/// Parse a log text in a given dialect through the same reader the CLI uses.
pub fn parse_log(text: &str, name: &str) -> Vec<Session> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    vodkit_load::input::read_sessions(&path, None).unwrap().0
}

/// A request for `path` (`range` of it) on the viewer's connection index `conn`, carrying
/// one second of media, with 20 s to complete.
pub fn req(path: &str, range: Option<ByteRange>, conn: u32) -> Request {
    Request {
        conn,
        media_s: 1.0,
        ..Request::new(path, range, 20.0)
    }
}

/// Requests for the first `len` bytes of `path` in closed ranges of `chunk` bytes, the
/// `i`th on connection index `conn(i)`.
pub fn ranges_of(path: &str, len: u64, chunk: u64, conn: impl Fn(usize) -> u32) -> Vec<Request> {
    (0..len.div_ceil(chunk))
        .map(|i| {
            let first = i * chunk;
            let last = (first + chunk - 1).min(len - 1);
            req(
                path,
                Some(ByteRange::Closed { first, last }),
                conn(i as usize),
            )
        })
        .collect()
}

/// Sessions of `class` reach the server over a link of `bandwidth_bps` (bit/s) with
/// `one_way_delay` each way.
pub fn link(config: &mut LoadConfig, class: &str, bandwidth_bps: u64, one_way_delay: Duration) {
    config.links.insert(
        class.into(),
        vodkit_load::Link {
            bandwidth_bps,
            one_way_delay,
        },
    );
}
