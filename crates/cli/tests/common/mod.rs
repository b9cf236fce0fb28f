//! Helpers for the end-to-end tests of the `vodkit` binary: run it, check exit codes and
//! one-line errors, build a small workload, and start long-running subcommands.

#![allow(dead_code)]

pub mod hdd;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The binary under test.
pub fn vodkit() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vodkit"));
    c.env_remove("VODKIT_LOG").stdin(Stdio::null());
    c
}

/// What one run of the binary left.
#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// A command line for the helpers below: a list of arguments, or one line of words
/// separated by spaces (no quoting; test paths have no spaces).
pub trait Argv {
    fn argv(&self) -> Vec<&str>;
}

impl Argv for str {
    fn argv(&self) -> Vec<&str> {
        self.split_whitespace().collect()
    }
}

impl Argv for String {
    fn argv(&self) -> Vec<&str> {
        self.as_str().argv()
    }
}

impl Argv for [&str] {
    fn argv(&self) -> Vec<&str> {
        self.to_vec()
    }
}

impl<const N: usize> Argv for [&str; N] {
    fn argv(&self) -> Vec<&str> {
        self.to_vec()
    }
}

impl Argv for Vec<&str> {
    fn argv(&self) -> Vec<&str> {
        self.clone()
    }
}

/// Run `vodkit ARGS` in `dir` to the end.
pub fn run_in(dir: &Path, args: &(impl Argv + ?Sized)) -> Out {
    let args = args.argv();
    let o = vodkit()
        .args(&args)
        .current_dir(dir)
        .output()
        .expect("the vodkit binary runs");
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// Run `vodkit ARGS` in `dir`; it must succeed.
pub fn ok(dir: &Path, args: &(impl Argv + ?Sized)) -> Out {
    let o = run_in(dir, args);
    let args = args.argv();
    assert_eq!(o.code, 0, "vodkit {args:?} failed: {o:?}");
    o
}

/// `vodkit ARGS` is a usage error: exit 2 and exactly one line on stderr, `vodkit: …`,
/// containing `needle`.
pub fn usage_error(dir: &Path, args: &(impl Argv + ?Sized), needle: &str) {
    let o = run_in(dir, args);
    let args = args.argv();
    assert_eq!(o.code, 2, "vodkit {args:?}: expected exit 2: {o:?}");
    let lines: Vec<&str> = o.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "vodkit {args:?}: expected one line: {o:?}");
    assert!(lines[0].starts_with("vodkit: "), "{o:?}");
    assert!(
        lines[0].contains(needle),
        "vodkit {args:?}: `{needle}` not in {o:?}"
    );
}

/// `vodkit ARGS` is a runtime failure: exit 1 and its error as the one `vodkit: …` line,
/// the last on stderr (progress lines may come before it), containing `needle`.
pub fn runtime_error(dir: &Path, args: &(impl Argv + ?Sized), needle: &str) {
    let o = run_in(dir, args);
    let args = args.argv();
    assert_eq!(o.code, 1, "vodkit {args:?}: expected exit 1: {o:?}");
    let errors: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("vodkit: "))
        .collect();
    assert_eq!(
        errors.len(),
        1,
        "vodkit {args:?}: expected one error line: {o:?}"
    );
    assert_eq!(o.stderr.lines().last(), Some(errors[0]), "{o:?}");
    assert!(
        errors[0].contains(needle),
        "vodkit {args:?}: `{needle}` not in {o:?}"
    );
}

/// A workload of 7 sessions over 10 twenty-second titles (about 10 MB of files) in
/// `dir/w`, its file set in `dir/files`.
pub fn small_workload(dir: &Path) {
    ok(
        dir,
        &[
            "workload",
            "new",
            "--spec",
            "youtube-2011",
            "--scale",
            "0.001",
            "--set",
            "catalog.max_duration=20s",
            "--out",
            "w",
        ],
    );
    ok(
        dir,
        &["fileset", "create", "--workload", "w", "--root", "files"],
    );
}

/// Whether the test may use root-only facilities. Without root it prints why and the test
/// returns early, except under `CI`, where CI runs as root and the test must not skip.
pub fn have_root(what: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{what} needs root, and CI runs as root"
    );
    eprintln!("skipped: {what} needs root");
    false
}

/// A long-running subcommand (serve, prefetchd) with its stderr lines on a channel.
pub struct Daemon {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    pub seen: Vec<String>,
}

impl Daemon {
    pub fn start(dir: &Path, args: &(impl Argv + ?Sized)) -> Daemon {
        Daemon::start_with(dir, args, |_| {})
    }

    /// [`Daemon::start`] with a last change to the command (a cgroup, an environment).
    pub fn start_with(
        dir: &Path,
        args: &(impl Argv + ?Sized),
        prepare: impl FnOnce(&mut Command),
    ) -> Daemon {
        let args = args.argv();
        let mut cmd = vodkit();
        cmd.args(args).current_dir(dir);
        prepare(&mut cmd);
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the vodkit binary starts");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Daemon {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The text after `prefix` on the first stderr line that has it (waits up to 20 s).
    pub fn wait_for(&mut self, prefix: &str) -> String {
        if let Some(l) = self.seen.iter().find_map(|l| after(l, prefix)) {
            return l;
        }
        loop {
            match self.lines.recv_timeout(Duration::from_secs(20)) {
                Ok(line) => {
                    let hit = after(&line, prefix);
                    self.seen.push(line);
                    if let Some(rest) = hit {
                        return rest;
                    }
                }
                Err(_) => panic!("no `{prefix}` on stderr; saw {:?}", self.seen),
            }
        }
    }

    /// SIGTERM, then the exit code and the rest of stdout.
    pub fn stop(mut self) -> (i32, String) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid fits");
        // SAFETY: signalling our own child process, which has not been reaped yet.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let status = self.child.wait().expect("child exits");
        let mut out = String::new();
        if let Some(mut s) = self.child.stdout.take() {
            let _ = s.read_to_string(&mut out);
        }
        (status.code().unwrap_or(-1), out)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn after(line: &str, prefix: &str) -> Option<String> {
    line.find(prefix).map(|i| {
        line[i + prefix.len()..]
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string()
    })
}

/// `GET path` from `addr` (`127.0.0.1:PORT`): status and body.
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, body.to_string())
}

/// The repository root (for docs/ and README.md).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `ip ARGS` (words separated by spaces) succeeded.
pub fn ip(args: &str) -> bool {
    Command::new("ip")
        .args(args.split_whitespace())
        .status()
        .is_ok_and(|s| s.success())
}
