//! `vodkit serve`: an HTTP/1.1 and HTTP/2 origin for video files that sends bodies with
//! sendfile(2) from the page cache (HTTP/1.1 in plaintext) and routes cache misses through
//! the prefetch engine.
//!
//! Use [`Server::bind`] inside a tokio runtime to run it in-process (tests, the bench
//! runner), or [`run_until_signal`] for a foreground server that drains on SIGTERM.
//! Linux only: it relies on `sendfile`, `openat2` and `MSG_MORE`.

pub mod access_log;
mod admin;
pub use vodkit_prefetch::admission;
pub mod body;
pub mod chunked;
pub mod config;
mod conn;
mod h2_conn;
mod handler;
pub mod io;
pub mod live;
pub mod metrics;
pub mod mime;
pub mod open_files;
pub mod range;
pub mod request;
pub mod response;
mod server;
pub mod signed_manifest;
pub mod target;
pub mod tls;
mod tls_conn;
pub mod validators;
pub mod web;
mod wire;

use std::sync::Arc;

pub use config::{H2Settings, SecureLink, ServerConfig, DEFAULT_BACKLOG};
pub use io::{IoMode, IoOrder, IoSettings};
pub use server::{Server, ServerHandle};

/// State shared by every connection of one server.
#[derive(Debug)]
pub(crate) struct Shared {
    pub config: ServerConfig,
    pub root: target::DocRoot,
    pub plan: response::PlanSettings,
    pub metrics: metrics::Metrics,
    pub log: Option<access_log::AccessLog>,
    pub io: io::DiskIo,
    /// Set on a TLS listener: every connection is handshaken first.
    pub tls: Option<tls::Tls>,
    pub shutdown: Arc<tokio::sync::watch::Sender<bool>>,
    pub admission: std::sync::Mutex<admission::Admission>,
    /// The live origin (`--ingest`), when on.
    pub live: Option<Arc<live::LiveStore>>,
    /// Open connections across every event loop (`--max-connections`).
    pub limit: Arc<tokio::sync::Semaphore>,
    /// The last connection id handed out, across every event loop.
    pub next_conn_id: std::sync::atomic::AtomicU64,
}

/// `text` lowercased (ASCII) into `buf`, for matching names without an allocation; `""`
/// when `text` is longer than `buf` (callers size `buf` to their longest name, so such a
/// text matches none of them).
pub(crate) fn ascii_lowercase_in<'b>(text: &str, buf: &'b mut [u8]) -> &'b str {
    match buf.get_mut(..text.len()) {
        Some(l) => {
            l.copy_from_slice(text.as_bytes());
            l.make_ascii_lowercase();
            std::str::from_utf8(l).unwrap_or("")
        }
        None => "",
    }
}

/// Raise the soft open-file limit to the hard limit so thousands of connections fit.
pub fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is a valid out-pointer for getrlimit/setrlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Event loops of [`run_until_signal`]: `configured` when not 0, else one per CPU this
/// process may run on (its affinity mask), but no more than its cgroup CPU quota rounded
/// up, as the JVM counts its processors in a container: a server held to a quarter of a
/// core runs one loop. Two loops there ran into the quota together and were throttled
/// together, and the same viewers cost 0.179 cores against one loop's 0.156 (VPL at 91.3
/// sessions/s, docs/bench.md).
pub fn event_loop_threads(configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    let cpus = cpus_allowed().unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    match vodkit_prefetch::budget::cpu_limit() {
        Some(cores) => cpus.min(cores.ceil().max(1.0) as usize),
        None => cpus,
    }
}

/// CPUs in this process's affinity mask.
fn cpus_allowed() -> Option<usize> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set, which sched_getaffinity fills
    // (at most the size passed); CPU_COUNT only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        usize::try_from(libc::CPU_COUNT(&set))
            .ok()
            .filter(|&n| n > 0)
    }
}

/// Run a server in the foreground until SIGTERM or SIGINT, then drain and return.
/// `on_ready` is called with the bound addresses (HTTP, admin) once listening.
///
/// Connections are served by [`event_loop_threads`] event loops of their own
/// ([`Server::bind_loops`]); this thread keeps the signals, the admin listener and the
/// access-log writer.
pub fn run_until_signal(
    config: ServerConfig,
    on_ready: impl FnOnce(std::net::SocketAddr, Option<std::net::SocketAddr>),
) -> std::io::Result<()> {
    raise_fd_limit();
    let loops = event_loop_threads(config.worker_threads);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut hup = signal(SignalKind::hangup())?;
        let handle = Server::bind_loops(config, loops).await?;
        on_ready(handle.local_addr(), handle.admin_addr());
        loop {
            tokio::select! {
                _ = term.recv() => break,
                _ = int.recv() => break,
                _ = hup.recv() => match handle.reload_tls() {
                    Ok(true) => tracing::info!("SIGHUP: TLS certificate reloaded"),
                    Ok(false) => tracing::info!("SIGHUP ignored: not a TLS listener"),
                    Err(e) => tracing::warn!("SIGHUP: keeping the old certificate: {e}"),
                },
            }
        }
        tracing::info!("shutting down: draining connections");
        handle.shutdown().await;
        tracing::info!("drained");
        Ok::<(), std::io::Error>(())
    })?;
    tracing::info!("runtime finished");
    drop(runtime);
    tracing::info!("runtime dropped");
    Ok(())
}

#[cfg(test)]
mod tests {
    /// CPUs listed in `Cpus_allowed_list` of /proc/self/status ("0-1,4").
    fn cpus_in_status() -> usize {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let list = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim();
        list.split(',')
            .map(|part| match part.split_once('-') {
                Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
                None => 1,
            })
            .sum()
    }

    #[test]
    fn event_loop_threads_are_one_per_allowed_cpu_within_the_quota_unless_configured() {
        assert_eq!(super::event_loop_threads(3), 3);
        let expected = match vodkit_prefetch::budget::cpu_limit() {
            Some(cores) => cpus_in_status().min(cores.ceil().max(1.0) as usize),
            None => cpus_in_status(),
        };
        assert_eq!(super::event_loop_threads(0), expected);
        assert!(expected >= 1);
    }
}
