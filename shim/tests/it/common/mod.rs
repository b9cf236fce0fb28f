//! Helpers shared by the shim's integration tests: content files, daemons, child runs
//! (bounded by the test kit's time limit).
#![allow(dead_code)]

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use std::time::Duration;
use vodkit_preload::{Daemon, DaemonConfig, IoMode, Preload};
pub use vodkit_testkit::process::run_with_limit;
use vodkit_workload::content::{fill, path_key};

pub const TRANSPARENCY_BIN: &str = env!("VODKIT_TRANSPARENCY_BIN");
pub const STRESS_BIN: &str = env!("VODKIT_STRESS_BIN");

/// A temporary directory readable by servers that drop privileges.
pub fn open_tempdir() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("vodkit-shim-test")
        .tempdir()
        .expect("tempdir");
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    d
}

/// Write `rel` under `root` with the content function's bytes, flushed to disk so the
/// page cache can be emptied later.
pub fn write_content(root: &Path, rel: &str, size: usize) -> PathBuf {
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).expect("mkdir");
    }
    let key = path_key(rel);
    let mut f = fs::File::create(&path).expect("create");
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0usize;
    while off < size {
        let n = (size - off).min(buf.len());
        fill(key, off as u64, &mut buf[..n]);
        f.write_all(&buf[..n]).expect("write");
        off += n;
    }
    f.sync_all().expect("fsync");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
    path
}

/// Drop a file's pages from the page cache (clean pages only; files are fsynced).
pub fn evict(path: &Path) {
    use std::os::fd::AsRawFd;
    let f = fs::File::open(path).expect("open for evict");
    // SAFETY: f is an open descriptor.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

/// Start a daemon on a socket in `dir`.
pub fn daemon(dir: &Path, mode: IoMode, policy: &str) -> Daemon {
    let mut cfg = DaemonConfig::new(dir.join("prefetchd.sock"));
    cfg.mode = mode;
    cfg.policy = policy.parse().expect("policy");
    Daemon::start(cfg).expect("start daemon")
}

/// Run `program args` with the library loaded and reporting to `socket`.
pub fn run_preloaded(socket: &Path, program: &str, args: &[&str], limit: Duration) -> Output {
    let preload = Preload::attach(socket).expect("library");
    let mut cmd = preload.command(program);
    cmd.args(args);
    run_with_limit(cmd, limit)
}

/// Run `program args` plainly.
pub fn run_plain(program: &str, args: &[&str], limit: Duration) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args).env_remove("LD_PRELOAD");
    run_with_limit(cmd, limit)
}
