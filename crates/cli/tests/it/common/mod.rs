//! Helpers for the end-to-end tests of the `vodkit` binary: run it, check exit codes and
//! one-line errors, build a small workload, and start long-running subcommands (as the
//! test kit's daemons).

#![allow(dead_code)]

pub mod hdd;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub use vodkit_testkit::http::get as http_get;
pub use vodkit_testkit::process::Daemon;

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

/// `vodkit ARGS` started in `dir` as a long-running subcommand (serve, prefetchd), its
/// stderr lines readable while it runs.
pub fn daemon(dir: &Path, args: &(impl Argv + ?Sized)) -> Daemon {
    daemon_with(dir, args, |_| {})
}

/// [`daemon`] with a last change to the command (a cgroup, an environment).
pub fn daemon_with(
    dir: &Path,
    args: &(impl Argv + ?Sized),
    prepare: impl FnOnce(&mut Command),
) -> Daemon {
    let mut cmd = vodkit();
    cmd.args(args.argv()).current_dir(dir);
    prepare(&mut cmd);
    Daemon::spawn(cmd)
}

/// The JSON document in the file at `path` (a report a subcommand wrote).
pub fn json_file(path: &Path) -> serde_json::Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
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
