//! The vodkit server in-process, on a fresh temporary root, with its own runtime: bound to
//! a free loopback port, drained on [`TestServer::stop`] or when dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use vodkit_server::{Server, ServerConfig, ServerHandle};

use crate::http::Client;

/// Deterministic content: byte i of a file is a function of i that repeats rarely.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 7 + i / 251) % 256) as u8).collect()
}

/// `count` contents of `len` bytes, distinct but each as exact to check as [`pattern`]: the
/// i-th is `pattern(len)` rotated left by `i * step` bytes.
pub fn rotated_patterns(count: usize, len: usize, step: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| {
            let mut d = pattern(len);
            d.rotate_left(i * step % len.max(1));
            d
        })
        .collect()
}

/// For tests that run the server themselves (their own runtime, loops or signal handling):
/// a configuration serving `dir`, where `content` is written as `name`, on a free loopback
/// port, with its access log at the path returned.
pub fn logged_config(dir: &Path, name: &str, content: &[u8]) -> (ServerConfig, PathBuf) {
    std::fs::write(dir.join(name), content).expect("the served file");
    let log = dir.join("access.log");
    let mut config = ServerConfig::new(dir);
    config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.access_log = Some(log.clone());
    (config, log)
}

/// A running in-process server.
pub struct TestServer {
    pub addr: SocketAddr,
    pub admin: Option<SocketAddr>,
    /// A fresh temporary directory; the root is `dir/root` unless [`TestServer::serving`]
    /// named another.
    pub dir: tempfile::TempDir,
    root: PathBuf,
    rt: tokio::runtime::Runtime,
    handle: Option<ServerHandle>,
}

impl TestServer {
    /// A server over a fresh root holding `video.mp4` (1 MiB + 3 bytes of [`pattern`]).
    pub fn start() -> TestServer {
        Self::start_with(|_| {})
    }

    /// [`TestServer::start`] with the configuration changed by `tune` first.
    pub fn start_with(tune: impl FnOnce(&mut ServerConfig)) -> TestServer {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let root = dir.path().join("root");
        std::fs::create_dir(&root).expect("the server's root");
        std::fs::write(root.join("video.mp4"), pattern(1024 * 1024 + 3)).expect("video.mp4");
        Self::bind(dir, root, tune)
    }

    /// A server over `root`, which the caller filled (and keeps), its configuration changed
    /// by `tune` first.
    pub fn serving(root: &Path, tune: impl FnOnce(&mut ServerConfig)) -> TestServer {
        let dir = tempfile::tempdir().expect("a temporary directory");
        Self::bind(dir, root.to_path_buf(), tune)
    }

    fn bind(
        dir: tempfile::TempDir,
        root: PathBuf,
        tune: impl FnOnce(&mut ServerConfig),
    ) -> TestServer {
        let mut config = ServerConfig::new(&root);
        config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        tune(&mut config);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let handle = rt.block_on(Server::bind(config)).expect("bind");
        TestServer {
            addr: handle.local_addr(),
            admin: handle.admin_addr(),
            dir,
            root,
            rt,
            handle: Some(handle),
        }
    }

    pub fn root(&self) -> PathBuf {
        self.root.clone()
    }

    /// Writes `rel` under the root (creating directories).
    pub fn write(&self, rel: &str, data: &[u8]) {
        let p = self.root().join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("directories under the root");
        }
        std::fs::write(&p, data).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    }

    pub fn connect(&self) -> Client {
        Client::connect(self.addr)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    fn handle(&self) -> &ServerHandle {
        self.handle.as_ref().expect("the server is running")
    }

    pub fn stats(&self) -> vodkit_server::metrics::Stats {
        self.handle().stats()
    }

    /// Re-reads the TLS certificate (what SIGHUP does).
    pub fn reload_tls(&self) -> Result<bool, String> {
        self.handle().reload_tls()
    }

    /// Shuts down (drains) and waits.
    pub fn stop(mut self) {
        if let Some(h) = self.handle.take() {
            self.rt.block_on(h.shutdown());
        }
    }

    pub fn begin_shutdown(&self) {
        self.handle().begin_shutdown();
    }

    pub fn wait(mut self) {
        if let Some(h) = self.handle.take() {
            self.rt.block_on(h.wait());
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.begin_shutdown();
            let _ = self
                .rt
                .block_on(async { tokio::time::timeout(Duration::from_secs(5), h.wait()).await });
        }
    }
}
