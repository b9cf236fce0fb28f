//! Concurrency and failure: 64 threads plus 8 forked processes read random ranges through
//! every read-like call with no deadlock and no wrong byte; a daemon killed (SIGKILL)
//! in the middle of such a run costs no read.

use crate::common;

use common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use vodkit_preload::{Daemon, DaemonConfig, IoMode};

const FILES: usize = 8;
const FILE_SIZE: usize = 4 << 20;

fn content_dir() -> tempfile::TempDir {
    let dir = open_tempdir();
    for i in 0..FILES {
        write_content(dir.path(), &format!("f{i:03}"), FILE_SIZE);
    }
    dir
}

fn check_stress_output(out: &std::process::Output, processes: usize) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "stress run failed: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let ok = stdout
        .lines()
        .filter(|l| l.starts_with("ok ") && l.contains("failures=0"))
        .count();
    assert_eq!(
        ok, processes,
        "every process must report success:\n{stdout}"
    );
}

#[test]
fn sixty_four_threads_and_eight_processes_read_correct_bytes() {
    let dir = content_dir();
    let d = dir.path().to_str().unwrap();
    let daemon = daemon(dir.path(), IoMode::Asap, "fixed:1MiB");
    let out = run_preloaded(
        daemon.socket(),
        STRESS_BIN,
        &[d, &FILES.to_string(), "64", "8", "40"],
        Duration::from_secs(150),
    );
    check_stress_output(&out, 9);
    let m = daemon.stop();
    assert!(
        m.requests > 50,
        "too few misses reached the daemon: {}",
        m.requests
    );
    assert!(m.engine.reads > 0);
    assert_eq!(m.bad_messages, 0);
}

/// Not a test of its own: the daemon process that `killed_daemon_loses_no_read` starts
/// (this test binary re-executed) and kills.
#[test]
#[ignore = "helper process for killed_daemon_loses_no_read"]
fn daemon_process_helper() {
    let Some(socket) = std::env::var_os("VODKIT_TEST_DAEMON_SOCKET") else {
        return;
    };
    let mut cfg = DaemonConfig::new(socket);
    cfg.policy = "fixed:512KiB".parse().unwrap();
    let _daemon = Daemon::start(cfg).expect("helper daemon");
    println!("ready");
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn start_daemon_process(socket: &Path) -> std::process::Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "concurrency::daemon_process_helper",
            "--ignored",
            "--nocapture",
        ])
        .env("VODKIT_TEST_DAEMON_SOCKET", socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start helper daemon");
    for _ in 0..200 {
        if vodkit_preload::launch::daemon_listening(socket) {
            return child;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("helper daemon did not come up");
}

#[test]
fn killed_daemon_loses_no_read() {
    let dir = content_dir();
    let d = dir.path().to_str().unwrap();
    let socket = dir.path().join("killed.sock");
    let mut helper = start_daemon_process(&socket);
    let mut cmd = vodkit_preload::Preload::attach(&socket)
        .unwrap()
        .command(STRESS_BIN);
    cmd.args([d, &FILES.to_string(), "16", "2", "400"])
        .env(vodkit_preload::library::ENV_QUIET, "0");
    let run = std::thread::spawn(move || run_with_limit(cmd, Duration::from_secs(150)));
    std::thread::sleep(Duration::from_millis(700));
    helper.kill().expect("SIGKILL the daemon");
    helper.wait().unwrap();
    let out = run.join().unwrap();
    check_stress_output(&out, 3);
    // The run must have used the daemon before it died, and noticed that it died.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("vodkit-preload:"),
        "the library should warn once the daemon is gone: {stderr}"
    );
}
