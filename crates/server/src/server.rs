//! Binding, accepting and shutting down: the event loops and their listeners, the
//! connection limit, connection ids, the admin listener, and the graceful drain on shutdown.
//!
//! [`Server::bind`] accepts on the caller's runtime (tests, the in-process bench);
//! [`Server::bind_loops`] is the foreground server's shape, nginx's: one single-threaded
//! event loop per thread, all accepting from one listening socket (each loop polls its own
//! descriptor of it), so whichever loop is free takes the next connection, and a
//! connection lives its whole life on one thread — no work stealing, no cross-thread
//! wake-ups on the way of a request. One socket, not an `SO_REUSEPORT` group: a second
//! server started on the same port fails with "address in use" instead of silently
//! sharing the port's connections.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch, Semaphore};
use tokio::task::JoinSet;

use crate::access_log::AccessLog;
use crate::config::ServerConfig;
use crate::conn;
use crate::io::DiskIo;
use crate::metrics::Metrics;
use crate::response::PlanSettings;
use crate::target::DocRoot;
use crate::wire::ConnInfo;
use crate::Shared;

/// Entry point of the library.
#[derive(Debug)]
pub struct Server;

/// A running server: its addresses, and the way to stop it.
#[derive(Debug)]
pub struct ServerHandle {
    local_addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    shutdown: Arc<watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
    shared: Arc<Shared>,
}

impl Server {
    /// Open the root and the listener, and start serving on the current tokio runtime.
    pub async fn bind(config: ServerConfig) -> io::Result<ServerHandle> {
        Server::bind_with(config, None).await
    }

    /// Open the root and the listener, and serve it from `loops` event loops of their
    /// own: threads each running a single-threaded tokio runtime with its own descriptor
    /// of the listening socket. The admin listener and the access-log writer stay on the
    /// caller's runtime.
    pub async fn bind_loops(config: ServerConfig, loops: usize) -> io::Result<ServerHandle> {
        Server::bind_with(config, Some(loops.max(1))).await
    }

    async fn bind_with(config: ServerConfig, loops: Option<usize>) -> io::Result<ServerHandle> {
        let root = DocRoot::open(&config.root, config.allow_outside_symlinks)
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("document root {}: {e}", config.root.display()),
                )
            })?
            .with_open_files(config.open_file_cache, config.open_file_valid);
        let listener = listen(config.listen, config.backlog)
            .map_err(|e| io::Error::new(e.kind(), format!("listen on {}: {e}", config.listen)))?;
        let local_addr = listener.local_addr()?;
        let admin =
            match config.admin {
                Some(addr) => Some(TcpListener::bind(addr).await.map_err(|e| {
                    io::Error::new(e.kind(), format!("admin listen on {addr}: {e}"))
                })?),
                None => None,
            };
        let admin_addr = admin.as_ref().map(|l| l.local_addr()).transpose()?;
        let (log, log_task) = match &config.access_log {
            Some(path) => {
                let (log, task) = AccessLog::open(path, config.access_log_format).map_err(|e| {
                    io::Error::new(e.kind(), format!("access log {}: {e}", path.display()))
                })?;
                (Some(log), Some(task))
            }
            None => (None, None),
        };
        let io = DiskIo::new(&config.io, root.path())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let tls = match &config.tls {
            Some(t) => Some(
                crate::tls::Tls::new(t, io.mode(), config.http2.is_some())
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
            ),
            None => None,
        };
        let live = config
            .ingest
            .clone()
            .map(|c| Arc::new(crate::live::LiveStore::new(c)));
        let metrics = Metrics::new(Some(io.engine().clone()), live.clone());
        let shutdown = Arc::new(watch::channel(false).0);
        let admission = std::sync::Mutex::new(crate::admission::Admission::new(config.admission));
        let shared = Arc::new(Shared {
            limit: Arc::new(Semaphore::new(config.max_connections)),
            next_conn_id: AtomicU64::new(0),
            admission,
            live,
            plan: PlanSettings {
                max_ranges: config.max_ranges,
                cors: config.cors.clone(),
                cache: config.cache.clone(),
                gzip: config.gzip,
            },
            config,
            root,
            metrics,
            log,
            io,
            tls,
            shutdown: shutdown.clone(),
        });
        let done = match loops {
            None => {
                let listener = TcpListener::from_std(listener)?;
                let (tx, rx) = oneshot::channel();
                let shared = shared.clone();
                tokio::spawn(async move {
                    accept_loop(listener, shared).await;
                    let _ = tx.send(());
                });
                vec![rx]
            }
            Some(n) => spawn_loops(listener, n, &shared).inspect_err(|_| {
                // The loops already started stop again.
                shared.shutdown.send_replace(true);
            })?,
        };
        let admin_task = admin.map(|l| tokio::spawn(crate::admin::run(l, shared.clone())));
        let task = tokio::spawn(supervise(done, shared.clone(), admin_task, log_task));
        Ok(ServerHandle {
            local_addr,
            admin_addr,
            shutdown,
            task,
            shared,
        })
    }
}

impl ServerHandle {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// Current counters (the same figures as `/stats`).
    pub fn stats(&self) -> crate::metrics::Stats {
        let mut stats = self.shared.metrics.stats(&self.shared.io);
        stats.ingest = self.shared.live.as_ref().map(|l| l.stats());
        stats
    }

    /// Re-read the TLS certificate and key; connections already open keep theirs.
    /// `Ok(false)`: not a TLS listener.
    pub fn reload_tls(&self) -> Result<bool, String> {
        match &self.shared.tls {
            Some(t) => t.store.reload().map(|()| true),
            None => Ok(false),
        }
    }

    /// Ask the server to stop accepting and drain; returns at once.
    pub fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Stop accepting, let in-flight responses finish (up to the drain timeout), flush
    /// the access log, and return.
    pub async fn shutdown(self) {
        self.begin_shutdown();
        let ServerHandle { task, shared, .. } = self;
        drop(shared);
        let _ = task.await;
    }

    /// Wait until the server has stopped (after [`ServerHandle::begin_shutdown`]).
    pub async fn wait(self) {
        let ServerHandle { task, shared, .. } = self;
        drop(shared);
        let _ = task.await;
    }
}

/// A non-blocking listener on `addr` with a listen queue of `backlog` (the kernel caps it
/// at `net.core.somaxconn`), address reuse on as with `TcpListener::bind`.
fn listen(addr: SocketAddr, backlog: u32) -> io::Result<std::net::TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// Start `loops` event-loop threads, each with its own descriptor of `listener`; each
/// answers on its receiver once its connections are drained and its runtime is gone.
/// Every runtime and descriptor is made before any thread starts, so a failure leaves no
/// loop half set up.
fn spawn_loops(
    listener: std::net::TcpListener,
    loops: usize,
    shared: &Arc<Shared>,
) -> io::Result<Vec<oneshot::Receiver<()>>> {
    let mut listeners = Vec::with_capacity(loops);
    for _ in 1..loops {
        listeners.push(listener.try_clone()?);
    }
    listeners.push(listener);
    let runtimes = listeners
        .iter()
        .map(|_| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        })
        .collect::<io::Result<Vec<_>>>()?;
    let mut done = Vec::with_capacity(listeners.len());
    for (i, (listener, runtime)) in listeners.into_iter().zip(runtimes).enumerate() {
        let (tx, rx) = oneshot::channel();
        let shared = shared.clone();
        std::thread::Builder::new()
            .name(format!("vodkit-loop-{i}"))
            .spawn(move || {
                let served = runtime.block_on(async move {
                    let listener = TcpListener::from_std(listener)?;
                    accept_loop(listener, shared).await;
                    Ok::<(), io::Error>(())
                });
                if let Err(e) = served {
                    tracing::error!("event loop {i}: {e}");
                }
                // The runtime's blocking pool finishes before the loop reports done, so
                // nothing of it still holds the shared state.
                drop(runtime);
                let _ = tx.send(());
            })?;
        done.push(rx);
    }
    Ok(done)
}

/// Wait for every event loop to finish draining, then stop the admin listener and let the
/// access log flush (its writer ends when the last holder of the shared state is gone).
async fn supervise(
    loops: Vec<oneshot::Receiver<()>>,
    shared: Arc<Shared>,
    admin_task: Option<tokio::task::JoinHandle<()>>,
    log_task: Option<tokio::task::JoinHandle<()>>,
) {
    for done in loops {
        let _ = done.await;
    }
    if let Some(t) = admin_task {
        t.abort();
        let _ = t.await;
    }
    drop(shared);
    if let Some(t) = log_task {
        let _ = t.await;
    }
}

/// Accept on `listener` until shutdown, then drain this loop's connections (up to the
/// drain timeout).
async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut conns = JoinSet::new();
    let mut stop = shared.shutdown.subscribe();
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, peer)) => {
                    let id = shared.next_conn_id.fetch_add(1, Ordering::Relaxed) + 1;
                    admit(&shared, &mut conns, stream, ConnInfo { id, peer, http2: false });
                }
                Err(e) => {
                    // Out of descriptors or similar: back off briefly instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            _ = async { let _ = stop.wait_for(|&v| v).await; } => break,
        }
    }
    drop(listener);
    let drain = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(shared.config.drain_timeout, drain)
        .await
        .is_err()
    {
        tracing::warn!("drain timeout: closing {} connections", conns.len());
        conns.shutdown().await;
    }
}

fn admit(shared: &Arc<Shared>, conns: &mut JoinSet<()>, stream: TcpStream, info: ConnInfo) {
    let m = &shared.metrics;
    let Ok(permit) = shared.limit.clone().try_acquire_owned() else {
        m.connections_refused.inc();
        if shared.tls.is_some() {
            // Never plaintext on a TLS listener: just close.
            return;
        }
        let _ = stream.try_write(
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\nRetry-After: 1\r\n\r\n",
        );
        return;
    };
    let _ = stream.set_nodelay(true);
    m.connections_total.inc();
    m.connections_open.inc();
    let shared = shared.clone();
    conns.spawn(async move {
        if shared.tls.is_some() {
            crate::tls_conn::serve(shared.clone(), stream, info).await;
        } else if shared.config.http2.is_some()
            && crate::h2_conn::sniff_preface(&stream, shared.config.header_timeout).await
        {
            crate::h2_conn::serve(shared.clone(), stream, info).await;
        } else {
            conn::serve(shared.clone(), stream, info).await;
        }
        shared.metrics.connections_open.dec();
        drop(permit);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The listen queue asked for is the one the kernel reports (`ss` shows a listener's
    /// queue length as its Send-Q), capped by `net.core.somaxconn`.
    #[tokio::test]
    async fn the_listener_gets_the_configured_backlog() {
        let Ok(out) = std::process::Command::new("ss").arg("-V").output() else {
            eprintln!("skipped: `ss` (iproute2) is not installed, the queue length cannot be read");
            return;
        };
        assert!(out.status.success());
        let somaxconn: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(u32::MAX);
        for backlog in [100, crate::DEFAULT_BACKLOG] {
            let l = listen("127.0.0.1:0".parse().unwrap(), backlog).unwrap();
            let port = l.local_addr().unwrap().port();
            let out = std::process::Command::new("ss")
                .args(["-ltnH", &format!("sport = :{port}")])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let queue: u32 = text
                .split_whitespace()
                .nth(2)
                .and_then(|q| q.parse().ok())
                .unwrap_or_else(|| panic!("no listener line for port {port}: {text:?}"));
            assert_eq!(queue, backlog.min(somaxconn), "{text}");
        }
    }
}
