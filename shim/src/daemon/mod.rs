//! The prefetch daemon (`vodkit prefetchd`): accepts misses reported by the preload
//! library, sizes them with a prefetch policy and performs the reads, one at a time per
//! device (or globally), before replying so the application's own call finds its data in
//! the page cache.
//!
//! Threads: one accepts connections; one per connection receives requests and waits for
//! their completion (each library connection carries one request at a time). The reads
//! run on the shared prefetch engine of `vodkit-prefetch` (the one `vodkit serve` uses):
//! per-device FIFO workers, residency re-checks, the policy, and its accounting.

pub mod admin;
pub mod admit;
mod config;
mod metrics;
mod rates;
pub mod socket;

pub use config::DaemonConfig;
pub use metrics::{MetricsSnapshot, ModeCounts};
pub use rates::FileRates;

use crate::protocol::{Reply, Request};
use metrics::Metrics;
use rates::{FileKey, RateCache};
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;
use vodkit_prefetch::chain::FILE_CHAIN_REACH;
use vodkit_prefetch::{
    ChainPosition, ChainTracker, DeviceMap, Engine, EngineConfig, FileFacts, IoMode, ReadRequest,
};

/// Files whose chain the daemon remembers (it sees no clients: one chain per file).
const CHAIN_FILES: usize = 1 << 16;

/// The daemon's `--mode`: the engine's [`IoMode`] words, as for `vodkit serve --io`, with
/// the daemon's older words accepted too (seed 001 §3.2.2). What each means here:
///
/// | mode | old word | who reads | serialized | enlarged |
/// |---|---|---|---|---|
/// | `asap` (default) | `both` | the daemon's engine | yes | policy size |
/// | `serialized` | `serialize` | the daemon's engine | yes | no |
/// | `prefetch` | — | the library, sized by the engine's policy | no | policy size |
/// | `vanilla` | `track` | the application, unchanged; misses only recorded | no | no |
///
/// `direct` is refused: the application reads through the page cache.
pub fn parse_mode(word: &str) -> Result<IoMode, String> {
    let mode = match word {
        "both" => IoMode::Asap,
        "serialize" => IoMode::Serialized,
        "track" => IoMode::Vanilla,
        other => other.parse::<IoMode>().map_err(|_| {
            format!(
                "mode `{other}`: expected asap (or both), serialized (or serialize), prefetch \
                 or vanilla (or track)"
            )
        })?,
    };
    if mode == IoMode::Direct {
        return Err(
            "mode `direct`: the preloaded application reads through the page cache; \
             expected asap, serialized, prefetch or vanilla"
                .into(),
        );
    }
    Ok(mode)
}

/// State shared by the daemon's threads.
struct Shared {
    config: DaemonConfig,
    started: Instant,
    chains: Mutex<ChainTracker>,
    /// Bit rate per file seen, when the daemon has a catalog.
    rate_cache: RateCache,
    engine: Arc<Engine>,
    metrics: Metrics,
    gate: admit::AdmitGate,
    stopping: AtomicBool,
    connections: Mutex<HashMap<u64, RawFd>>,
    next_conn: AtomicU64,
}

/// A running daemon. Dropping it stops it.
pub struct Daemon {
    shared: Arc<Shared>,
    listener: OwnedFd,
    acceptor: Option<JoinHandle<()>>,
}

impl Daemon {
    /// Listen on the configured socket and start serving.
    pub fn start(config: DaemonConfig) -> std::io::Result<Daemon> {
        let listener = socket::listen(&config.socket)?;
        let engine = Engine::new(EngineConfig {
            mode: config.mode,
            policy: config.policy.clone(),
            devices: if config.per_device {
                DeviceMap::new()
            } else {
                DeviceMap::single("all")
            },
            pool_threads: 1,
            memory: config.memory.clone(),
            order: config.order,
            ..EngineConfig::default()
        });
        let gate = admit::AdmitGate::new(config.admission, config.root.clone());
        let shared = Arc::new(Shared {
            engine: Arc::new(engine),
            gate,
            config,
            started: Instant::now(),
            chains: Mutex::new(ChainTracker::per_file(FILE_CHAIN_REACH, CHAIN_FILES)),
            rate_cache: RateCache::default(),
            metrics: Metrics::default(),
            stopping: AtomicBool::new(false),
            connections: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(0),
        });
        let fd = listener.as_raw_fd();
        let s = Arc::clone(&shared);
        let acceptor = std::thread::Builder::new()
            .name("prefetchd-accept".into())
            .spawn(move || accept_loop(s, fd))?;
        Ok(Daemon {
            shared,
            listener,
            acceptor: Some(acceptor),
        })
    }

    /// The socket path clients connect to.
    pub fn socket(&self) -> &Path {
        &self.shared.config.socket
    }

    /// Counters so far.
    pub fn metrics(&self) -> MetricsSnapshot {
        snapshot(&self.shared)
    }

    /// Stop accepting, close every connection (clients fall back to plain calls) and
    /// remove the socket file.
    pub fn stop(mut self) -> MetricsSnapshot {
        self.shutdown();
        self.metrics()
    }

    fn shutdown(&mut self) {
        if self.shared.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        // SAFETY: shutting down our own listening socket wakes the blocked accept.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        if let Ok(conns) = self.shared.connections.lock() {
            for fd in conns.values() {
                // SAFETY: the fd stays open until its connection thread exits, and that
                // thread removes it from this map first.
                unsafe { libc::shutdown(*fd, libc::SHUT_RDWR) };
            }
        }
        let _ = std::fs::remove_file(&self.shared.config.socket);
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Every library connection and every file in flight is a descriptor; servers with hundreds
/// of worker threads exceed the usual soft limit of 1024, so use the hard limit.
fn raise_descriptor_limit() {
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

fn snapshot(shared: &Shared) -> MetricsSnapshot {
    let mut m = shared.metrics.snapshot(
        &shared.config,
        shared.started.elapsed(),
        shared.engine.stats(),
    );
    m.streams_admitted = shared.gate.admitted.load(Ordering::Relaxed);
    m.streams_refused = shared.gate.refused.load(Ordering::Relaxed);
    m
}

fn accept_loop(shared: Arc<Shared>, listener: RawFd) {
    loop {
        match socket::accept(listener) {
            Ok(Some(conn)) => {
                if shared.stopping.load(Ordering::SeqCst) {
                    return;
                }
                let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut c) = shared.connections.lock() {
                    c.insert(id, conn.as_raw_fd());
                }
                shared.metrics.connections.fetch_add(1, Ordering::Relaxed);
                let s = Arc::clone(&shared);
                let spawned = std::thread::Builder::new()
                    .name("prefetchd-conn".into())
                    .spawn(move || {
                        serve_connection(&s, &conn);
                        if let Ok(mut c) = s.connections.lock() {
                            c.remove(&id);
                        }
                    });
                if let Err(e) = spawned {
                    tracing::warn!("cannot start a connection thread: {e}");
                    if let Ok(mut c) = shared.connections.lock() {
                        c.remove(&id);
                    }
                }
            }
            Ok(None) => return,
            Err(e) => {
                if !shared.stopping.load(Ordering::SeqCst) {
                    tracing::error!("accept failed: {e}");
                }
                return;
            }
        }
    }
}

fn serve_connection(shared: &Shared, conn: &OwnedFd) {
    loop {
        match socket::receive(conn.as_raw_fd()) {
            Ok(socket::Incoming::Request(req, Some(file))) if req.resident => {
                note_resident(shared, &req, file);
            }
            Ok(socket::Incoming::Request(req, None)) if req.resident => {
                shared.metrics.bad_messages.fetch_add(1, Ordering::Relaxed);
            }
            Ok(socket::Incoming::Request(req, Some(file))) => {
                let reply = handle(shared, &req, file);
                if let Err(e) = socket::send_reply(conn.as_raw_fd(), reply, req.seq) {
                    tracing::debug!("reply to pid {} failed: {e}", req.pid);
                    return;
                }
            }
            Ok(socket::Incoming::Request(req, None)) => {
                shared.metrics.bad_messages.fetch_add(1, Ordering::Relaxed);
                let _ = socket::send_reply(conn.as_raw_fd(), Reply::Error, req.seq);
            }
            Ok(socket::Incoming::Garbage(why)) => {
                shared.metrics.bad_messages.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("ignoring a bad message: {why}");
            }
            Ok(socket::Incoming::Closed) => return,
            Err(e) => {
                if !shared.stopping.load(Ordering::SeqCst) {
                    tracing::debug!("connection failed: {e}");
                }
                return;
            }
        }
    }
}

/// Whether `file` is a regular file; returns its identity (the chain tracker uses `id`).
fn regular_file_key(file: &File) -> Option<(FileKey, FileFacts)> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().ok()?;
    let key = FileKey {
        id: vodkit_prefetch::engine::file_id(meta.dev(), meta.ino()),
        ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
    };
    let facts = FileFacts {
        dev: meta.dev(),
        ino: meta.ino(),
        size: meta.len(),
    };
    meta.is_file().then_some((key, facts))
}

/// The file's bit rate from the catalog, if the daemon has one and lists the file.
fn bitrate_of(shared: &Shared, key: FileKey, file: &File) -> Option<u32> {
    let rates = shared.config.bitrates.as_ref()?;
    let kbps = shared.rate_cache.kbps(rates, key, file);
    if kbps.is_some() {
        shared.metrics.with_bitrate.fetch_add(1, Ordering::Relaxed);
    }
    kbps
}

/// Where `req` falls in its file's chain (the tracker sees misses and notes alike).
fn chain_of(shared: &Shared, key: FileKey, req: &Request) -> ChainPosition {
    shared
        .chains
        .lock()
        .map(|mut c| c.place(key.id, req.offset))
        .unwrap_or_default()
}

/// A note of a read served from memory: the engine accounts it as a hit (its ledger marks
/// prefetched bytes used, the policy sees the request), as it does for `vodkit serve`.
fn note_resident(shared: &Shared, req: &Request, file: OwnedFd) {
    shared.metrics.note_resident(req);
    if shared.config.mode == IoMode::Vanilla {
        return;
    }
    let file = Arc::new(File::from(file));
    let Some((key, facts)) = regular_file_key(&file) else {
        return;
    };
    let request = ReadRequest {
        offset: req.offset,
        len: req.len,
        bitrate_kbps: None,
        chain: Some(chain_of(shared, key, req)),
        client: None,
        file: Some(facts),
    };
    if let Err(e) = shared.engine.note_resident(&file, &request) {
        tracing::debug!("resident note not accounted: {e}");
    }
}

/// Decide and perform what one miss needs; returns the reply for the library.
fn handle(shared: &Shared, req: &Request, file: OwnedFd) -> Reply {
    let m = &shared.metrics;
    m.note_request(req);
    let file = Arc::new(File::from(file));
    let Some((key, facts)) = regular_file_key(&file) else {
        m.not_regular.fetch_add(1, Ordering::Relaxed);
        return Reply::Skipped;
    };
    let mode = shared.config.mode;
    if mode == IoMode::Vanilla {
        m.tracked.fetch_add(1, Ordering::Relaxed);
        return Reply::Skipped;
    }
    let request = ReadRequest {
        offset: req.offset,
        len: req.len,
        bitrate_kbps: bitrate_of(shared, key, &file),
        chain: Some(chain_of(shared, key, req)),
        client: None,
        file: Some(facts),
    };
    if mode == IoMode::Prefetch {
        return plan_in_library(shared, &file, &request);
    }
    match shared.engine.ensure_resident_blocking(&file, request) {
        Ok(outcome) => {
            m.note_outcome(&outcome);
            Reply::Done
        }
        Err(e) => {
            m.read_errors.fetch_add(1, Ordering::Relaxed);
            tracing::debug!("prefetch read failed: {e}");
            Reply::Error
        }
    }
}

/// `prefetch` mode: the engine's policy sizes the read ([`Engine::plan`]) and the library
/// performs it.
fn plan_in_library(shared: &Shared, file: &Arc<File>, request: &ReadRequest) -> Reply {
    let len = match shared.engine.plan(file, request) {
        Ok(outcome) => outcome.read_bytes,
        Err(e) => {
            shared.metrics.read_errors.fetch_add(1, Ordering::Relaxed);
            tracing::debug!("sizing a miss failed: {e}");
            return Reply::Error;
        }
    };
    if len == 0 {
        return Reply::Skipped;
    }
    shared.metrics.prefetch_here.fetch_add(1, Ordering::Relaxed);
    shared
        .metrics
        .planned_bytes
        .fetch_add(len, Ordering::Relaxed);
    Reply::PrefetchHere {
        offset: request.offset,
        len,
    }
}

/// Run a daemon until SIGINT or SIGTERM, writing its metrics as JSON to `metrics` (when
/// given) every `interval` and once more at the end. Returns the final counters.
pub fn serve_until_signalled(
    config: DaemonConfig,
    metrics: Option<&Path>,
    interval: std::time::Duration,
    admin: Option<std::net::SocketAddr>,
) -> std::io::Result<MetricsSnapshot> {
    crate::signals::catch_termination();
    // Only the standalone daemon: an in-process one (`vodkit preload`) would pass the raised
    // limit on to the program it runs.
    raise_descriptor_limit();
    let daemon = Daemon::start(config)?;
    if let Some(addr) = admin {
        let bound = admin::spawn(&daemon, addr)?;
        eprintln!("prefetchd: admin on http://{bound} (/metrics, /stats)");
    }
    let mut last_write = Instant::now();
    while crate::signals::take().is_none() {
        std::thread::sleep(std::time::Duration::from_millis(50));
        if let Some(path) = metrics {
            if last_write.elapsed() >= interval {
                write_metrics(path, &daemon.metrics())?;
                last_write = Instant::now();
            }
        }
    }
    let last = daemon.stop();
    if let Some(path) = metrics {
        write_metrics(path, &last)?;
    }
    Ok(last)
}

/// Write a metrics snapshot as JSON, atomically (readers never see half a file).
pub fn write_metrics(path: &Path, m: &MetricsSnapshot) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let json = serde_json::to_vec_pretty(m).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, json)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_take_the_engine_words_and_the_daemon_older_ones() {
        for (word, mode) in [
            ("asap", IoMode::Asap),
            ("both", IoMode::Asap),
            ("serialized", IoMode::Serialized),
            ("serialize", IoMode::Serialized),
            ("prefetch", IoMode::Prefetch),
            ("vanilla", IoMode::Vanilla),
            ("track", IoMode::Vanilla),
        ] {
            assert_eq!(parse_mode(word), Ok(mode), "{word}");
        }
        assert!(parse_mode("direct").unwrap_err().contains("page cache"));
        assert!(parse_mode("turbo").unwrap_err().contains("mode `turbo`"));
    }
}
