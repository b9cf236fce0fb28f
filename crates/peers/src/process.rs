//! Child-process servers (the peers, and any other server run as a child): pick a free
//! loopback port, start the server in its own process group, wait until it answers HTTP,
//! stop it with every process it forked, and collect the error-log lines that say the run
//! was not clean.

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Failures starting or stopping a server under test.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("cannot start {name} ({program}): {source}")]
    Spawn {
        name: String,
        program: String,
        source: std::io::Error,
    },
    #[error("{name} exited during start-up ({status}): {detail}")]
    Exited {
        name: String,
        status: String,
        detail: String,
    },
    #[error("{name} on 127.0.0.1:{port} is not serving the file set (waited {secs} s): {detail}")]
    NotReady {
        name: String,
        port: u16,
        secs: u64,
        detail: String,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A loopback port that was free a moment ago, below Linux's ephemeral range (32768 and
/// up by default): a port the kernel picks for `bind(0)` is one it may hand next to one of
/// the load generator's thousands of outgoing connections before the server binds it.
/// Successive calls walk the range from a per-process start, so two servers started one
/// after the other never get the same port.
pub fn free_port() -> std::io::Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let seed = std::process::id().wrapping_mul(2_654_435_761) % SPAN;
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (LOW + (seed + n) % SPAN) as u16;
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return Ok(port);
        }
    }
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(l.local_addr()?.port())
}

/// Whether `program` can be found on PATH (or is an existing path).
pub fn find_program(program: &str) -> Option<PathBuf> {
    let p = Path::new(program);
    if p.components().count() > 1 {
        return p.is_file().then(|| p.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(program))
        .find(|c| c.is_file())
}

/// A running server; stopped (SIGTERM, then SIGKILL to its process group) when dropped.
#[derive(Debug)]
pub struct ServerProcess {
    pub name: String,
    pub port: u16,
    child: Child,
    error_log: PathBuf,
    stderr_path: PathBuf,
    is_error: fn(&str) -> bool,
}

/// How to recognise a server's readiness and errors.
pub struct StartSpec<'a> {
    pub name: &'a str,
    pub port: u16,
    pub run_dir: &'a Path,
    pub error_log: PathBuf,
    pub is_error: fn(&str) -> bool,
    /// Path to request to check readiness: ready once it answers 2xx (the probe asks for
    /// the first byte, so a file answers 206); any other status is a start error.
    pub probe_path: &'a str,
    pub timeout: Duration,
}

impl ServerProcess {
    /// Spawn `cmd` with stdout/stderr captured in the run directory and wait until it answers.
    pub fn start(cmd: Command, spec: StartSpec<'_>) -> Result<ServerProcess, ProcessError> {
        Self::start_probed(cmd, spec, None)
    }

    /// [`ServerProcess::start`] for a server that speaks HTTPS only: the readiness probe
    /// runs over TLS and trusts only `tls.ca`.
    pub fn start_tls(
        cmd: Command,
        spec: StartSpec<'_>,
        tls: &crate::tls::TlsFiles,
    ) -> Result<ServerProcess, ProcessError> {
        Self::start_probed(cmd, spec, Some(tls))
    }

    fn start_probed(
        mut cmd: Command,
        spec: StartSpec<'_>,
        tls: Option<&crate::tls::TlsFiles>,
    ) -> Result<ServerProcess, ProcessError> {
        let stderr_path = spec.run_dir.join(format!("{}.stderr", spec.name));
        let stdout_path = spec.run_dir.join(format!("{}.stdout", spec.name));
        // The server dies with its parent, even when the parent is killed.
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        // Its own process group, so that a hard kill also reaches the workers it forks.
        cmd.process_group(0);
        cmd.stdin(Stdio::null())
            .stdout(fs::File::create(&stdout_path)?)
            .stderr(fs::File::create(&stderr_path)?);
        let program = cmd.get_program().to_string_lossy().into_owned();
        let child = cmd.spawn().map_err(|source| ProcessError::Spawn {
            name: spec.name.to_string(),
            program,
            source,
        })?;
        let mut server = ServerProcess {
            name: spec.name.to_string(),
            port: spec.port,
            child,
            error_log: spec.error_log,
            stderr_path,
            is_error: spec.is_error,
        };
        match server.wait_ready(spec.probe_path, spec.timeout, tls) {
            Ok(()) => Ok(server),
            Err(e) => {
                let _ = server.kill_now();
                Err(e)
            }
        }
    }

    fn wait_ready(
        &mut self,
        probe_path: &str,
        timeout: Duration,
        tls: Option<&crate::tls::TlsFiles>,
    ) -> Result<(), ProcessError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(ProcessError::Exited {
                    name: self.name.clone(),
                    status: status.to_string(),
                    detail: self.diagnostics(),
                });
            }
            let status = match tls {
                None => http_status(self.port, probe_path),
                Some(files) => crate::tls::https_status(self.port, probe_path, files),
            };
            let last = match status {
                Ok(code) if (200..300).contains(&code) => return Ok(()),
                Ok(code) => {
                    return Err(ProcessError::NotReady {
                        name: self.name.clone(),
                        port: self.port,
                        secs: 0,
                        detail: format!(
                            "it answers {code} for {probe_path}; {}",
                            self.diagnostics()
                        ),
                    })
                }
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(ProcessError::NotReady {
                    name: self.name.clone(),
                    port: self.port,
                    secs: timeout.as_secs(),
                    detail: format!("{last}; {}", self.diagnostics()),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last lines of stderr and the error log, on one line.
    pub fn diagnostics(&self) -> String {
        let mut lines: Vec<String> = Vec::new();
        for p in [&self.stderr_path, &self.error_log] {
            if let Ok(text) = fs::read_to_string(p) {
                lines.extend(text.lines().rev().take(3).map(str::to_string));
            }
        }
        if lines.is_empty() {
            "no output".into()
        } else {
            lines.join(" | ")
        }
    }

    /// The process id of the server's main process.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stop the server (SIGTERM, then SIGKILL to its process group after `grace`) and
    /// return the error-log lines it logged while it ran. Lines logged during the
    /// shutdown itself are left out: nginx, for one, SIGKILLs workers still blocked in disk
    /// reads a moment after SIGTERM and logs an alert for each, which says nothing about
    /// the run.
    pub fn stop(mut self, grace: Duration) -> Result<Vec<String>, ProcessError> {
        let lines = self.error_lines();
        self.terminate(grace)?;
        Ok(lines)
    }

    /// The exit status when the server has already exited on its own (it is then reaped);
    /// `None` while it runs.
    pub fn exited(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }

    /// [`ServerProcess::stop`], also returning how the main process ended (a signal
    /// status when it had to be killed after `grace`); unlike `stop` it keeps the lines
    /// logged during the shutdown.
    pub fn stop_with_status(
        mut self,
        grace: Duration,
    ) -> Result<(ExitStatus, Vec<String>), ProcessError> {
        self.terminate(grace)?;
        let status = self.child.wait()?;
        Ok((status, self.error_lines()))
    }

    fn terminate(&mut self, grace: Duration) -> std::io::Result<()> {
        if self.child.try_wait()?.is_some() {
            return Ok(());
        }
        // SAFETY: plain kill(2) on our own child's pid (not yet reaped, so still ours).
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + grace;
        while self.child.try_wait()?.is_none() {
            if Instant::now() >= deadline {
                return self.kill_now();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// SIGKILL the whole process group (the main process and the workers it forked).
    fn kill_now(&mut self) -> std::io::Result<()> {
        if self.child.try_wait()?.is_some() {
            // Reaped: its id may name someone else's group by now; leave it alone.
            return Ok(());
        }
        // SAFETY: killpg(2) on the group our unreaped child leads (process_group(0)).
        unsafe { libc::killpg(self.child.id() as libc::pid_t, libc::SIGKILL) };
        self.child.wait().map(|_| ())
    }

    /// Lines of the error log (and stderr) that mark an error.
    pub fn error_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for p in [&self.error_log, &self.stderr_path] {
            if let Ok(text) = fs::read_to_string(p) {
                out.extend(
                    text.lines()
                        .filter(|l| (self.is_error)(l))
                        .map(str::to_string),
                );
            }
        }
        out
    }
}

/// How long a dropped server gets to shut down cleanly before its group is killed.
const DROP_GRACE: Duration = Duration::from_secs(5);

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.terminate(DROP_GRACE);
    }
}

/// Send one GET to 127.0.0.1:port and return the status code.
pub fn http_status(port: u16, path: &str) -> std::io::Result<u16> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nRange: bytes=0-0\r\nConnection: close\r\n\r\n"
    )?;
    let mut head = [0u8; 64];
    let n = s.read(&mut head)?;
    crate::status_of(&head[..n])
}

/// Fetch a whole file over HTTP/1.0 from 127.0.0.1:port; returns (status, body).
pub fn http_get(port: u16, path: &str) -> std::io::Result<(u16, Vec<u8>)> {
    http_request(port, "GET", path)
}

/// Send one bodiless HTTP/1.0 request (`GET`, `POST`, …) to 127.0.0.1:port and read the
/// whole answer; returns (status, body).
pub fn http_request(port: u16, method: &str, path: &str) -> std::io::Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let empty_body = if method == "GET" {
        ""
    } else {
        "Content-Length: 0\r\n"
    };
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: localhost\r\n{empty_body}\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("response without header end"))?;
    let head = String::from_utf8_lossy(&buf[..split]);
    let status = head
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line in {head:?}")))?;
    Ok((status, buf[split + 4..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_port_is_bindable() {
        let p = free_port().unwrap();
        assert!(p > 0);
        TcpListener::bind((Ipv4Addr::LOCALHOST, p)).unwrap();
    }

    #[test]
    fn a_server_that_exits_is_reported_with_its_output() {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo 'config broken on line 3' >&2; exit 3"]);
        let e = ServerProcess::start(
            cmd,
            StartSpec {
                name: "fake",
                port: free_port().unwrap(),
                run_dir: dir.path(),
                error_log: dir.path().join("none.log"),
                is_error: |_| true,
                probe_path: "/",
                timeout: Duration::from_secs(5),
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("exited during start-up"), "{e}");
        assert!(e.contains("config broken on line 3"), "{e}");
    }

    /// A server that logs an error while running, and another while shutting down: only
    /// the first is the run's.
    #[test]
    fn stop_reports_the_errors_of_the_run_not_of_the_shutdown() {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "trap 'echo ERROR shutting down >&2; exit 0' TERM; echo ERROR while running >&2; \
             while :; do sleep 0.05; done",
        ]);
        let s = ServerProcess::start(
            cmd,
            StartSpec {
                name: "fake",
                port: ready_answerer(),
                run_dir: dir.path(),
                error_log: dir.path().join("none.log"),
                is_error: |l| l.contains("ERROR"),
                probe_path: "/",
                timeout: Duration::from_secs(10),
            },
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while s.error_lines().is_empty() {
            assert!(Instant::now() < deadline, "the server never logged");
            std::thread::sleep(Duration::from_millis(20));
        }
        let lines = s.stop(Duration::from_secs(10)).unwrap();
        assert_eq!(lines, ["ERROR while running"]);
    }

    /// Answers every connection with 200, standing in for the child's readiness.
    fn ready_answerer() -> u16 {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for mut c in l.incoming().flatten() {
                let _ = c.read(&mut [0u8; 512]);
                let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
            }
        });
        port
    }

    #[test]
    fn a_stop_reports_the_exit_status_and_an_early_exit_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let port = ready_answerer();
        let spec = || StartSpec {
            name: "fake",
            port,
            run_dir: dir.path(),
            error_log: dir.path().join("none.log"),
            is_error: |l| l.contains("ERROR"),
            probe_path: "/",
            timeout: Duration::from_secs(10),
        };
        let ready = dir.path().join("trap-set");
        let child = |on_term: &str| {
            let _ = std::fs::remove_file(&ready);
            let mut cmd = Command::new("sh");
            cmd.args([
                "-c",
                &format!(
                    "trap 'echo ERROR going >&2; exit {on_term}' TERM; touch {}; while :; do sleep 0.05; done",
                    ready.display()
                ),
            ]);
            cmd
        };
        // Signal only once the trap is in place.
        let trap_set = || {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !ready.exists() {
                assert!(Instant::now() < deadline, "the child never set its trap");
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        let mut s = ServerProcess::start(child("3"), spec()).unwrap();
        trap_set();
        assert!(s.exited().unwrap().is_none());
        let (status, lines) = s.stop_with_status(Duration::from_secs(10)).unwrap();
        assert_eq!(status.code(), Some(3));
        assert_eq!(lines, ["ERROR going"]);

        let mut s = ServerProcess::start(child("0"), spec()).unwrap();
        trap_set();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(s.pid() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(st) = s.exited().unwrap() {
                break st;
            }
            assert!(Instant::now() < deadline, "the child did not exit");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success());
        let (again, _) = s.stop_with_status(Duration::from_secs(1)).unwrap();
        assert_eq!(again, status);
    }

    #[test]
    fn finds_sh_on_path() {
        assert!(find_program("sh").is_some());
        assert!(find_program("surely-not-a-program-xyz").is_none());
    }

    #[test]
    fn free_ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let a = free_port().unwrap();
        let b = free_port().unwrap();
        assert_ne!(a, b);
        for p in [a, b] {
            assert!((20_000..32_000).contains(&p), "{p}");
            TcpListener::bind((Ipv4Addr::LOCALHOST, p)).unwrap();
        }
    }
}
