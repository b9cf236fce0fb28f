//! Test harness: a real nginx on a free loopback port serving files with the deterministic
//! content, plus helpers to run the engine against it.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use vodkit_load::{CancellationToken, LoadConfig, Run, Target};
use vodkit_workload::content;
use vodkit_workload::model::Session;

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The nginx binary, or `None` with a printed reason. Under `CI` a missing nginx fails.
pub fn nginx_binary() -> Option<PathBuf> {
    for p in ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"] {
        if Path::new(p).is_file() {
            return Some(PathBuf::from(p));
        }
    }
    let msg =
        "nginx is not installed (Debian: apt-get install nginx-light); nginx tests cannot run";
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("SKIPPED: {msg}");
    None
}

/// A running nginx serving `root`; killed on drop.
pub struct Nginx {
    pub dir: tempfile::TempDir,
    pub port: u16,
    child: Child,
}

impl Nginx {
    /// Start nginx with `files` (path relative to the root, size) written with the
    /// deterministic content. Returns `None` (after printing why) when nginx is absent.
    pub fn start(files: &[(&str, usize)]) -> Option<Nginx> {
        let bin = nginx_binary()?;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        for (path, size) in files {
            write_file(&root, path, *size);
        }
        let port = free_port();
        let d = dir.path().display();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\nerror_log {d}/error.log warn;\npid {d}/nginx.pid;\n\
             events {{ worker_connections 4096; }}\n\
             http {{\n access_log off;\n client_body_temp_path {d}/t1;\n proxy_temp_path {d}/t2;\n fastcgi_temp_path {d}/t3;\n uwsgi_temp_path {d}/t4;\n scgi_temp_path {d}/t5;\n\
             keepalive_requests 1000000;\n keepalive_timeout 120s;\n sendfile on;\n\
             server {{ listen 127.0.0.1:{port}; root {root}; }}\n}}\n",
            root = root.display()
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let child = Command::new(bin)
            .arg("-c")
            .arg(&conf_path)
            .arg("-p")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("nginx starts");
        let nginx = Nginx { dir, port, child };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nginx did not listen on port {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(nginx)
    }

    pub fn target(&self) -> Target {
        Target::parse(&format!("http://127.0.0.1:{}", self.port), false).unwrap()
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
