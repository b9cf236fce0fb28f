//! `vodkit serve`: an HTTP/1.1 origin for video files that sends bodies with sendfile(2)
//! from the page cache and routes cache misses through the prefetch engine.
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
pub mod io;
pub mod live;
pub mod metrics;
pub mod mime;
pub mod open_files;
pub mod range;
pub mod request;
pub mod response;
mod server;
pub mod target;
pub mod tls;
mod tls_conn;
pub mod validators;
pub mod web;

use std::sync::Arc;

pub use config::{ServerConfig, DEFAULT_BACKLOG};
pub use io::{IoMode, IoSettings};
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

/// Run a server in the foreground until SIGTERM or SIGINT, then drain and return.
/// `on_ready` is called with the bound addresses (HTTP, admin) once listening.
pub fn run_until_signal(
    config: ServerConfig,
    on_ready: impl FnOnce(std::net::SocketAddr, Option<std::net::SocketAddr>),
) -> std::io::Result<()> {
    raise_fd_limit();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if config.worker_threads > 0 {
        builder.worker_threads(config.worker_threads);
    }
    let runtime = builder.enable_all().build()?;
    runtime.block_on(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut hup = signal(SignalKind::hangup())?;
        let handle = Server::bind(config).await?;
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
