//! A `+preload` server gets its own `vodkit prefetchd` as a child process, started before
//! the server inside the same memory budget and CPU quota and stopped after it, with its metrics left in
//! the run directory; a daemon that dies or will not start is reported, not ignored.
//!
//! These tests need the vodkit executable (`cargo build -p vodkit`, or `VODKIT=...`); the
//! budget test also needs root, a memory cgroup and nginx. Without them each test says
//! why it did not run, except under `CI`, where it must run.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use vodkit_bench::adapters::{built_vodkit, PreloadKit, DAEMON_METRICS, DAEMON_PROMETHEUS};
use vodkit_bench::experiment::Launcher;
use vodkit_bench::launch::{memory_cgroup, LocalLauncher, CGROUPS_FILE};
use vodkit_bench::sut::parse_one;
use vodkit_peers::process::http_get;
use vodkit_prefetch::PolicySpec;

const FILE_BYTES: usize = 3 << 20;

/// A daemon with `policy`, its run directory in a fresh temp directory (kept alive by the
/// caller); `None` where the kit is not available.
fn daemon_with(policy: &str) -> Option<(tempfile::TempDir, vodkit_bench::adapters::PreloadDaemon)> {
    let kit = kit()?;
    let dir = tempfile::tempdir().unwrap();
    let daemon = kit
        .start_daemon(&policy.parse().unwrap(), dir.path(), None)
        .unwrap();
    Some((dir, daemon))
}

fn kit() -> Option<PreloadKit> {
    match PreloadKit::locate(built_vodkit().as_deref()) {
        Ok(k) => Some(k),
        Err(why) => {
            vodkit_testkit::skip(format_args!(
                "no vodkit executable ({why}); `cargo build -p vodkit` first"
            ));
            None
        }
    }
}

fn file_set(dir: &Path) -> PathBuf {
    let root = dir.join("video");
    std::fs::create_dir_all(&root).unwrap();
    for d in [dir, root.as_path()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    for i in 0..2u8 {
        let body: Vec<u8> = (0..FILE_BYTES)
            .map(|b| (b as u8).wrapping_mul(i + 3))
            .collect();
        std::fs::write(root.join(format!("t{i}.mp4")), body).unwrap();
    }
    root
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn wait_gone(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(Instant::now() < deadline, "process {pid} is still there");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Pids listed in a cgroup's `cgroup.procs` whose command line mentions `word`.
fn members_running(cgroup: &Path, word: &str) -> Vec<u32> {
    std::fs::read_to_string(cgroup.join("cgroup.procs"))
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(word))
                .unwrap_or(false)
        })
        .collect()
}

#[test]
fn the_daemon_runs_as_a_child_inside_the_servers_memory_budget_and_cpu_quota() {
    if !vodkit_testkit::needs(&[
        vodkit_testkit::Need::Root,
        vodkit_testkit::Need::Peer("nginx"),
    ]) {
        return;
    }
    let Some(kit) = kit() else { return };
    let budget = match vodkit_bench::system::Budget::create(Some(256 << 20), Some(0.5)) {
        Ok(Some(b)) => b,
        Ok(None) => unreachable!("a memory limit was given"),
        Err(e) => {
            return vodkit_testkit::skip(format_args!("no memory budget or CPU quota here ({e})"))
        }
    };
    let cgroup = budget.cgroup_dir().unwrap();
    let cpu_cgroup = budget.cpu_cgroup_dir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = file_set(dir.path());
    let runs = dir.path().join("runs");
    let mut launcher = LocalLauncher::new(root.clone(), runs.clone(), "/t0.mp4".into());
    launcher.preload = Ok(kit);
    launcher.budget = budget.wrap();
    let sut = parse_one("nginx+preload:fixed:1MiB").unwrap();
    launcher.available(&sut).unwrap();
    let running = launcher
        .start(&sut)
        .unwrap_or_else(|e| panic!("start: {e:?}"));

    let run_dir = std::fs::read_dir(&runs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let listed = std::fs::read_to_string(run_dir.join(CGROUPS_FILE)).unwrap();
    eprintln!("{CGROUPS_FILE}:\n{listed}");
    let daemon_pid: u32 = listed
        .lines()
        .find_map(|l| l.strip_prefix("prefetchd "))
        .and_then(|l| l.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no prefetchd in {listed}"));
    let proc_cgroup = std::fs::read_to_string(format!("/proc/{daemon_pid}/cgroup")).unwrap();
    let daemon_cgroup = memory_cgroup(&proc_cgroup).unwrap();
    eprintln!("prefetchd pid {daemon_pid}: memory cgroup {daemon_cgroup}");
    assert!(
        cgroup.ends_with(daemon_cgroup.trim_start_matches('/')),
        "daemon in {daemon_cgroup}, budget is {}",
        cgroup.display()
    );
    assert_eq!(members_running(&cgroup, "prefetchd"), [daemon_pid]);
    assert!(!members_running(&cgroup, "nginx").is_empty());
    // Both also run under the CPU quota (`--server-cpus`).
    assert_eq!(members_running(&cpu_cgroup, "prefetchd"), [daemon_pid]);
    assert!(!members_running(&cpu_cgroup, "nginx").is_empty());
    // The daemon is our child, not a thread of this process.
    let stat = std::fs::read_to_string(format!("/proc/{daemon_pid}/stat")).unwrap();
    let ppid: u32 = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(ppid, std::process::id());

    // A miss through nginx reaches the daemon.
    vodkit_disk::memory::evict_file(&root.join("t1.mp4")).unwrap();
    let url = running.base_url();
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let (status, body) = http_get(port, "/t1.mp4").unwrap();
    assert_eq!((status, body.len()), (200, FILE_BYTES));
    let errors = running.stop().unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    wait_gone(daemon_pid);

    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run_dir.join(DAEMON_METRICS)).unwrap()).unwrap();
    assert_eq!(metrics["policy"], "fixed:1048576");
    assert!(
        metrics["requests"].as_u64().unwrap() > 0,
        "the daemon saw no miss: {metrics}"
    );
    let prom = std::fs::read_to_string(run_dir.join(DAEMON_PROMETHEUS)).unwrap();
    assert!(prom.contains("vodkit_preload_misses"), "{prom}");
}

#[test]
fn a_daemon_that_dies_during_the_run_is_reported() {
    let Some((_dir, daemon)) = daemon_with("auto") else {
        return;
    };
    let pid = daemon.pid();
    // SAFETY: killing our own child.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    wait_gone_or_zombie(pid);
    let lines = daemon.stop();
    assert!(
        lines.iter().any(|l| l.contains("exited during the run")),
        "{lines:?}"
    );
}

/// A killed child stays a zombie until reaped; wait until it is at least not running.
/// The main thread of a multi-threaded process turns zombie before its other threads have
/// exited, and it can be reaped only once they have, so wait for those too.
fn wait_gone_or_zombie(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| d.count())
            .unwrap_or(0);
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit(')')
                    .next()
                    .and_then(|r| r.split_whitespace().next().map(str::to_string))
            });
        if state.as_deref().is_none_or(|s| s == "Z") && threads <= 1 {
            return;
        }
        assert!(Instant::now() < deadline, "process {pid} did not die");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_clean_daemon_stop_leaves_counters_and_no_error_lines() {
    let Some((dir, daemon)) = daemon_with("fixed:4MiB") else {
        return;
    };
    let pid = daemon.pid();
    let lines = daemon.stop();
    assert!(lines.is_empty(), "{lines:?}");
    wait_gone(pid);
    let text = std::fs::read_to_string(dir.path().join(DAEMON_METRICS)).unwrap();
    assert!(text.contains("\"policy\": \"fixed:4194304\""), "{text}");
}

#[test]
fn a_daemon_that_will_not_start_is_a_start_error_with_its_reason() {
    let Some(kit) = kit() else { return };
    let dir = tempfile::tempdir().unwrap();
    // Policies are typed by the time they reach the kit; a bad flag value appended to the
    // daemon's command line stands for any input the daemon refuses.
    let bad_flag: vodkit_bench::launch::CommandWrap = Box::new(|mut c| {
        c.args(["--memory", "lots"]);
        Ok(c)
    });
    let e = kit
        .start_daemon(&PolicySpec::default(), dir.path(), Some(&bad_flag))
        .err()
        .expect("a bad policy must not start");
    assert!(e.contains("prefetchd") && e.contains("lots"), "{e}");
    assert!(!e.contains('\n'), "{e}");
}

#[test]
fn without_a_vodkit_executable_preload_servers_are_skipped_with_the_reason() {
    // The launcher reports the peer's absence before the kit's.
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Peer("nginx")]) {
        return;
    }
    let e = PreloadKit::locate(Some(Path::new("/nonexistent/vodkit"))).unwrap_err();
    assert!(
        e.contains("/nonexistent/vodkit") && e.contains("skipped"),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    let mut launcher = LocalLauncher::new(dir.path().into(), dir.path().join("runs"), "/".into());
    launcher.preload = Err(e.clone());
    let why = launcher
        .available(&parse_one("nginx+preload").unwrap())
        .unwrap_err();
    assert_eq!(why, e);
    if std::env::var_os(vodkit_bench::adapters::ENV_VODKIT).is_none() {
        let none = PreloadKit::locate(None).unwrap_err();
        assert!(none.contains("VODKIT="), "{none}");
    }
}
