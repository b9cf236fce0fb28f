//! `vodkit serve` sizes its event loops to its CPU quota: in a cgroup held to a quarter of a
//! core it runs one loop (not one per CPU), `--threads N` still wins, and outside any
//! quota it runs one per CPU it may use.
//!
//! Needs root for the cgroup; without it the test prints why and passes, except under `CI`,
//! where it fails.

use crate::common;

use common::Daemon;
use vodkit_disk::cpu::CpuQuota;
use vodkit_testkit::{needs, turn, Need};

/// Threads of process `pid` named `vodkit-loop-*`.
fn loop_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|name| name.starts_with("vodkit-loop-"))
        })
        .count()
}

/// [`loop_threads`] once it reads `want` (the loops start as the server begins to listen,
/// not all before it says so), or what it reads after 5 s.
fn loop_threads_settled(pid: u32, want: usize) -> usize {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let n = loop_threads(pid);
        if n == want || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Starts `vodkit serve` (with `extra` arguments) inside `quota` when given; returns it once
/// it listens.
fn serve(root: &std::path::Path, quota: Option<&CpuQuota>, extra: &[&str]) -> Daemon {
    let mut args = vec![
        "serve",
        "--root",
        root.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    let mut server = common::daemon_with(root, &args[..], |cmd| {
        if let Some(q) = quota {
            q.confine(cmd).expect("joins the CPU cgroup");
        }
    });
    server.wait_for("listening on ");
    server
}

#[test]
fn event_loops_follow_the_cpu_quota() {
    if !needs(&[Need::Root]) {
        return;
    }
    let _cpu = turn(vodkit_testkit::turn::CPU);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.mp4"), b"x").unwrap();
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;

    let name = format!("vodkit-test-loops-{}", std::process::id());
    let quota = CpuQuota::create(&name, 0.25).expect("a CPU cgroup (root, cgroups)");
    let held = serve(dir.path(), Some(&quota), &[]);
    let configured = serve(dir.path(), Some(&quota), &["--threads", "3"]);
    let configured_loops = loop_threads_settled(configured.child.id(), 3);
    // By now the first server, started earlier, has started every loop it will.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let held_loops = loop_threads(held.child.id());
    drop((held, configured));
    quota.remove().unwrap();
    assert_eq!(held_loops, 1, "a quarter of a core runs one event loop");
    assert_eq!(configured_loops, 3, "--threads overrides the quota");

    // Outside the test's quota: one loop per CPU, unless the test itself runs under one.
    let free = serve(dir.path(), None, &[]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let loops = loop_threads(free.child.id());
    assert!(loops >= 1 && loops <= cpus, "{loops} loops on {cpus} CPUs");
}
