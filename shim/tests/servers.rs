//! Unmodified nginx and Apache under the library serve byte-exact content for random
//! ranges (checked against `vodkit_workload::content`), with misses reaching the daemon;
//! stopping the daemon halfway through loses no request.

mod common;

use common::*;
use rand::{Rng, SeedableRng};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use vodkit_preload::{Mode, Preload};
use vodkit_workload::content::{first_mismatch, path_key};

const TITLES: usize = 6;
const TITLE_SIZE: usize = 8 << 20;
const CLIENTS: usize = 6;
const REQUESTS_PER_CLIENT: usize = 20;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn find_tool(names: &[&str]) -> Option<PathBuf> {
    for n in names {
        let p = Path::new(n);
        if p.is_absolute() && p.exists() {
            return Some(p.to_path_buf());
        }
        for dir in ["/usr/sbin", "/usr/bin", "/sbin", "/usr/local/sbin"] {
            let c = Path::new(dir).join(n);
            if c.exists() {
                return Some(c);
            }
        }
    }
    None
}

/// A server process under test; killed when dropped.
struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_ready(server: &mut Server) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!(
                "server exited early ({status}); log:\n{}",
                std::fs::read_to_string(&server.log).unwrap_or_default()
            );
        }
        if TcpStream::connect(("127.0.0.1", server.port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "server did not listen on {}; log:\n{}",
        server.port,
        std::fs::read_to_string(&server.log).unwrap_or_default()
    );
}

fn start_nginx(bin: &Path, root: &Path, preload: &Preload) -> Server {
    let port = free_port();
    let d = root.display();
    let user = if is_root() { "user root root;" } else { "" };
    let conf = format!(
        "daemon off;\nworker_processes 2;\n{user}\npid {d}/nginx.pid;\nerror_log {d}/nginx.log warn;\n\
         events {{ worker_connections 256; }}\n\
         http {{\n  access_log off;\n  sendfile on;\n  default_type application/octet-stream;\n\
           client_body_temp_path {d}/tmp-body;\n  proxy_temp_path {d}/tmp-proxy;\n\
           fastcgi_temp_path {d}/tmp-fcgi;\n  uwsgi_temp_path {d}/tmp-uwsgi;\n  scgi_temp_path {d}/tmp-scgi;\n\
           server {{ listen 127.0.0.1:{port}; root {d}/www; }}\n}}\n"
    );
    let conf_path = root.join("nginx.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let mut cmd = preload.command(bin);
    cmd.arg("-e")
        .arg(root.join("nginx.log"))
        .arg("-p")
        .arg(root)
        .arg("-c")
        .arg(&conf_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut server = Server {
        child: cmd.spawn().expect("start nginx"),
        port,
        log: root.join("nginx.log"),
    };
    wait_ready(&mut server);
    server
}

fn start_apache(bin: &Path, root: &Path, preload: &Preload) -> Server {
    let port = free_port();
    let d = root.display();
    let modules = "/usr/lib/apache2/modules";
    let user = if is_root() {
        "User www-data\nGroup www-data\n"
    } else {
        ""
    };
    let conf = format!(
        "ServerRoot {d}\nServerName 127.0.0.1\nListen 127.0.0.1:{port}\n\
         LoadModule mpm_event_module {modules}/mod_mpm_event.so\n\
         LoadModule authz_core_module {modules}/mod_authz_core.so\n\
         {user}PidFile {d}/apache.pid\nErrorLog {d}/apache.log\nLogLevel warn\n\
         DefaultRuntimeDir {d}\nMutex file:{d} default\n\
         DocumentRoot {d}/www\n<Directory {d}/www>\n  Require all granted\n</Directory>\n\
         EnableMMAP Off\nEnableSendfile On\nStartServers 2\nThreadsPerChild 16\n"
    );
    let conf_path = root.join("apache.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let mut cmd = preload.command(bin);
    cmd.arg("-f")
        .arg(&conf_path)
        .arg("-DFOREGROUND")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(root.join("apache.stderr")).unwrap());
    let mut server = Server {
        child: cmd.spawn().expect("start apache"),
        port,
        log: root.join("apache.log"),
    };
    wait_ready(&mut server);
    server
}

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

fn serve_and_verify(start: fn(&Path, &Path, &Preload) -> Server, bin: &Path) {
    let dir = site();
    let daemon = daemon(dir.path(), Mode::Both, "fixed:2MiB");
    let preload = Preload::attach(daemon.socket()).unwrap();
    let server = start(bin, dir.path(), &preload);
    verify_random_ranges(server.port, dir.path(), 1);
    let m = daemon.stop();
    assert!(
        m.requests > 0 && m.engine.reads > 0,
        "no miss reached the daemon: the library was not active in the server ({m:?}); stderr: {}",
        std::fs::read_to_string(dir.path().join("apache.stderr")).unwrap_or_default()
    );
    // Daemon gone: the server keeps serving correct bytes (the library fails open).
    verify_random_ranges(server.port, dir.path(), 2);
    drop(server);
}

#[test]
fn nginx_serves_exact_ranges_under_the_library() {
    let Some(bin) = find_tool(&["nginx"]) else {
        return missing_tool("nginx");
    };
    serve_and_verify(start_nginx, &bin);
}

#[test]
fn apache_serves_exact_ranges_under_the_library() {
    let Some(bin) = find_tool(&["apache2", "httpd"]) else {
        return missing_tool("apache2");
    };
    if !Path::new("/usr/lib/apache2/modules/mod_mpm_event.so").exists() {
        return missing_tool("apache2 modules (/usr/lib/apache2/modules)");
    }
    serve_and_verify(start_apache, &bin);
}
