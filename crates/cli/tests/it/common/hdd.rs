//! The emulated disk for end-to-end tests of the binary: bring one up in a temporary
//! directory (or say why it cannot run), write title files onto it, and a keep-alive
//! client that asks for byte ranges the way a player does.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use vodkit_disk::testbed::{self, Config, Testbed};
use vodkit_testkit::{needs, skip, turn, Need, Turn};

/// A running emulated WD Red with an ext4 file system mounted at `root`.
pub struct Hdd {
    pub bed: Testbed,
    pub root: PathBuf,
    pub tmp: tempfile::TempDir,
    /// The emulated disk's turn (FUSE and loop devices), held until the disk is down.
    _turn: Turn,
}

impl Hdd {
    /// A 256 MiB device, or `None` (with the reason printed) where the emulated disk
    /// cannot run; under `CI` that is a failure.
    pub fn up(prefix: &str) -> Option<Hdd> {
        if !needs(&[Need::Fuse]) {
            return None;
        }
        if let Err(e) = testbed::preflight() {
            skip(e);
            return None;
        }
        let held = turn(vodkit_testkit::turn::DISK);
        let tmp = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in("/var/tmp")
            .unwrap();
        let cfg = Config::in_dir(vodkit_disk::model::Preset::WdRed, 256 << 20, tmp.path());
        let bed = Testbed::up(&cfg).expect("emulated disk up");
        Some(Hdd {
            bed,
            root: cfg.mount.clone(),
            tmp,
            _turn: held,
        })
    }

    pub fn down(self) {
        self.bed.down().expect("emulated disk down");
    }
}

/// The byte at `offset` of a title written with `seed`.
pub fn pattern_byte(seed: u8, offset: u64) -> u8 {
    (offset as u8).wrapping_mul(29).wrapping_add(seed)
}

/// Writes `mib` MiB of the `seed` pattern to `path`, synced and then evicted from memory.
pub fn write_title(path: &Path, mib: u64, seed: u8) {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk: Vec<u8> = (0..1u64 << 20).map(|i| pattern_byte(seed, i)).collect();
    for _ in 0..mib {
        f.write_all(&chunk).unwrap();
    }
    f.sync_all().unwrap();
    vodkit_disk::memory::evict_file(path).unwrap();
}

/// One keep-alive connection of a viewer that names its session.
pub struct Viewer {
    reader: BufReader<TcpStream>,
    session: String,
}

/// What one range request got: the status, and the body bytes that arrived before the
/// server closed (all of them when `complete`).
pub struct Got {
    pub status: u16,
    /// The `Retry-After` header's seconds, if any.
    pub retry_after: Option<u32>,
    pub body: Vec<u8>,
    pub complete: bool,
}

impl Viewer {
    pub fn new(addr: &str, session: &str) -> Viewer {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Viewer {
            reader: BufReader::new(s),
            session: session.to_string(),
        }
    }

    /// GET bytes `first..=last` of `path`.
    pub fn get(&mut self, path: &str, first: u64, last: u64) -> Got {
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: t\r\nX-Session-Id: {}\r\nRange: bytes={first}-{last}\r\n\r\n",
            self.session
        );
        self.reader.get_mut().write_all(req.as_bytes()).unwrap();
        let mut len = 0usize;
        let mut status = 0u16;
        let mut retry_after = None;
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            if status == 0 {
                status = line
                    .split_whitespace()
                    .nth(1)
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0);
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap_or(0);
                } else if k.eq_ignore_ascii_case("retry-after") {
                    retry_after = v.trim().parse().ok();
                }
            }
        }
        let mut body = Vec::with_capacity(len);
        let _ = (&mut self.reader).take(len as u64).read_to_end(&mut body);
        Got {
            status,
            retry_after,
            complete: body.len() == len,
            body,
        }
    }

    /// GET `first..=last` of `path`; it must be a complete 206.
    pub fn play(&mut self, path: &str, first: u64, last: u64) {
        let g = self.get(path, first, last);
        assert_eq!(g.status, 206, "{path} {first}-{last}");
        assert!(g.complete, "{path} {first}-{last}: {} bytes", g.body.len());
    }
}
