//! `vodkit run` supervises its command: SIGTERM and SIGHUP sent to it reach the command,
//! nothing of the command outlives it, and it exits with the command's status (the code it
//! exited with, or 128 + the signal that killed it). Needs root (a memory cgroup).

use crate::common::vodkit;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use vodkit_testkit::{needs, Need};

/// `vodkit run --memory 64MiB -- sh -c SCRIPT` started in `dir`, its stderr (and the
/// command's) in `dir/stderr`: a file, which a command outliving `vodkit run` cannot hold
/// open against the test as it would a pipe.
///
/// `vodkit run` starts with the forwarded signals at their default action: a test run under
/// `nohup` (SIGHUP ignored, which every descendant inherits and a shell cannot trap) would
/// otherwise test nohup, not the forwarding.
fn start(dir: &Path, script: &str) -> Child {
    use std::os::unix::process::CommandExt;
    let stderr = std::fs::File::create(dir.join("stderr")).expect("stderr file");
    let mut cmd = vodkit();
    // SAFETY: signal(2) is async-signal-safe; it runs in the child between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            for s in [libc::SIGHUP, libc::SIGINT, libc::SIGTERM] {
                libc::signal(s, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    cmd.args(["run", "--memory", "64MiB", "--interval", "100ms", "--"])
        .args(["sh", "-c", script])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("vodkit run starts")
}

/// The pid the command wrote to `file` (waited for up to 20 s).
fn pid_in(file: &Path) -> libc::pid_t {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(pid) = std::fs::read_to_string(file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "the command never wrote {file:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` exists (a zombie counts as gone: it runs nothing).
fn alive(pid: libc::pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.rsplit(')').next().unwrap_or("").starts_with(" Z"))
}

/// Kills the command on drop, whatever happened to `vodkit run` (so a failing test leaves
/// nothing behind).
struct Leftover(PathBuf);

impl Drop for Leftover {
    fn drop(&mut self) {
        if let Some(pid) = std::fs::read_to_string(&self.0)
            .ok()
            .and_then(|t| t.trim().parse::<libc::pid_t>().ok())
        {
            // SAFETY: a process this test started (through `vodkit run`).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// Waits up to 30 s for `vodkit run` started in `dir` to end: its exit code and stderr.
fn finish(mut child: Child, dir: &Path) -> (Option<i32>, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("vodkit run did not end");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = std::fs::read_to_string(dir.join("stderr")).unwrap_or_default();
    (status.code(), stderr)
}

/// `vodkit run` of `script`, which writes the pid of what it runs to `pid` in its new
/// temporary directory, started there: the directory, the guard that kills the command
/// whatever happens, `vodkit run` and the pid.
fn supervise(script: &str) -> (tempfile::TempDir, Leftover, Child, libc::pid_t) {
    let d = tempfile::tempdir().expect("temp dir");
    let pidfile = d.path().join("pid");
    let left = Leftover(pidfile.clone());
    let run = start(d.path(), script);
    let pid = pid_in(&pidfile);
    (d, left, run, pid)
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: signalling our own child, not yet reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, sig) };
}

#[test]
fn a_sigterm_to_vodkit_run_stops_its_command_and_exits_143() {
    if !needs(&[Need::Root]) {
        return;
    }
    let (d, _left, run, sleep) = supervise("echo $$ > pid.tmp && mv pid.tmp pid && exec sleep 300");
    assert!(alive(sleep));
    signal(&run, libc::SIGTERM);
    let (code, stderr) = finish(run, d.path());
    assert!(!alive(sleep), "sleep outlived vodkit run: {stderr}");
    assert_eq!(code, Some(143), "128 + SIGTERM: {stderr}");
    assert!(
        stderr.contains("limit 64 MiB"),
        "the report still printed: {stderr}"
    );
}

#[test]
fn vodkit_run_exits_with_the_status_its_command_exited_with() {
    if !needs(&[Need::Root]) {
        return;
    }
    let d = tempfile::tempdir().expect("temp dir");
    let report = d.path().join("run.json");
    let run = vodkit()
        .args(["run", "--memory", "64MiB", "--report"])
        .arg(&report)
        .args(["--", "sh", "-c", "exit 3"])
        .output()
        .expect("vodkit run runs");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("limit 64 MiB"), "{stderr}");
    let report = crate::common::json_file(&report);
    assert_eq!(report["exit_code"], 3);
    assert_eq!(report["signal"], serde_json::Value::Null);
}

#[test]
fn a_sighup_to_vodkit_run_reaches_its_command() {
    if !needs(&[Need::Root]) {
        return;
    }
    // The shell runs its trap once the current `sleep` returns, then exits 0.
    let (d, _left, run, shell) = supervise(
        "trap 'echo hangup > hup; exit 0' HUP; echo $$ > pid.tmp && mv pid.tmp pid; \
         while :; do sleep 0.1; done",
    );
    signal(&run, libc::SIGHUP);
    let (code, stderr) = finish(run, d.path());
    assert!(!alive(shell), "the shell outlived vodkit run: {stderr}");
    let hup = std::fs::read_to_string(d.path().join("hup")).unwrap_or_default();
    assert_eq!(hup.trim(), "hangup", "the trap ran: {stderr}");
    assert_eq!(code, Some(0), "the shell's own status: {stderr}");
}
