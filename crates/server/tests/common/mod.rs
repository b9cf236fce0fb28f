//! Shared helpers for the server's integration tests: an in-process server on a
//! temporary root, deterministic file contents, and a tiny blocking HTTP client that
//! reads responses byte-exactly.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use vodkit_server::{Server, ServerConfig, ServerHandle};

/// Deterministic content: byte i of a file is a function of i that repeats rarely.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 7 + i / 251) % 256) as u8).collect()
}

pub struct TestServer {
    pub addr: SocketAddr,
    pub admin: Option<SocketAddr>,
    pub dir: tempfile::TempDir,
    rt: tokio::runtime::Runtime,
    handle: Option<ServerHandle>,
}

impl TestServer {
    /// A server over a fresh root holding `video.mp4` (1 MiB + 3 bytes of pattern).
    pub fn start() -> TestServer {
        Self::start_with(|_| {})
    }

    pub fn start_with(tune: impl FnOnce(&mut ServerConfig)) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("video.mp4"), pattern(1024 * 1024 + 3)).unwrap();
        let mut config = ServerConfig::new(&root);
        config.listen = "127.0.0.1:0".parse().unwrap();
        tune(&mut config);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let handle = rt.block_on(Server::bind(config)).expect("bind");
        TestServer {
            addr: handle.local_addr(),
            admin: handle.admin_addr(),
            dir,
            rt,
            handle: Some(handle),
        }
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    pub fn write(&self, rel: &str, data: &[u8]) {
        let p = self.root().join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(p, data).unwrap();
    }

    pub fn connect(&self) -> Client {
        Client::connect(self.addr)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn stats(&self) -> vodkit_server::metrics::Stats {
        self.handle.as_ref().unwrap().stats()
    }

    /// Re-read the TLS certificate (what SIGHUP does).
    pub fn reload_tls(&self) -> Result<bool, String> {
        self.handle.as_ref().unwrap().reload_tls()
    }

    /// Shut down (drain) and wait.
    pub fn stop(mut self) {
        if let Some(h) = self.handle.take() {
            self.rt.block_on(h.shutdown());
        }
    }

    pub fn begin_shutdown(&self) {
        self.handle.as_ref().unwrap().begin_shutdown();
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

/// A parsed response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }
}

pub struct Client {
    pub reader: BufReader<TcpStream>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Client {
            reader: BufReader::new(s),
        }
    }

    pub fn send(&mut self, raw: &str) {
        self.reader.get_mut().write_all(raw.as_bytes()).unwrap();
    }

    /// GET (or another method) with extra header lines.
    pub fn request(&mut self, method: &str, path: &str, extra: &[(&str, &str)]) -> Resp {
        let mut raw = format!("{method} {path} HTTP/1.1\r\nHost: test\r\n");
        for (k, v) in extra {
            raw.push_str(&format!("{k}: {v}\r\n"));
        }
        raw.push_str("\r\n");
        self.send(&raw);
        self.read_response(method == "HEAD")
    }

    pub fn get(&mut self, path: &str, extra: &[(&str, &str)]) -> Resp {
        self.request("GET", path, extra)
    }

    /// Read one response; bodies are framed by Content-Length only (as the server sends).
    pub fn read_response(&mut self, head_only: bool) -> Resp {
        self.try_read_response(head_only).expect("response")
    }

    pub fn try_read_response(&mut self, head_only: bool) -> std::io::Result<Resp> {
        let mut status_line = String::new();
        if self.reader.read_line(&mut status_line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
        let mut headers = HashMap::new();
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line)?;
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                break;
            }
            let (k, v) = line.split_once(':').expect("header line");
            assert!(
                headers
                    .insert(k.to_ascii_lowercase(), v.trim().to_string())
                    .is_none(),
                "dup {k}"
            );
        }
        let len: usize = headers
            .get("content-length")
            .map(|v: &String| v.parse().unwrap())
            .unwrap_or(0);
        let mut body = vec![0u8; if head_only { 0 } else { len }];
        self.reader.read_exact(&mut body)?;
        Ok(Resp {
            status,
            headers,
            body,
        })
    }

    /// True when the server has closed the connection (EOF within the timeout).
    pub fn is_closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.reader.read(&mut b), Ok(0) | Err(_))
    }
}

/// Runs `cmd` to the end; it must succeed (its stderr is shown when it does not).
pub fn run_ok(cmd: &mut std::process::Command) -> std::process::Output {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Whether an external tool exists; tests that need it print why they skip, and fail in CI.
pub fn have_tool(name: &str) -> bool {
    let found = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {name}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !found {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{name} is required in CI (scripts/install-test-deps installs it)");
        }
        eprintln!("SKIPPED: {name} is not installed; this test needs it");
    }
    found
}

pub fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().len()
}
