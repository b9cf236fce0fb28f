//! A busy loop in a quarter-core quota is throttled and uses about a quarter of a core.
//!
//! Needs root and a cpu cgroup; without them it prints why and passes, except under `CI`
//! where it fails.

use std::time::{Duration, Instant};
use vodkit_disk::cpu::CpuQuota;

/// CPU seconds process `pid` has used (user + system), from `/proc/PID/stat`.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the command name.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    ticks as f64 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

#[test]
fn a_busy_loop_gets_no_more_than_its_quota() {
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Root]) {
        return;
    }
    if let Err(e) = vodkit_disk::cpu::own_cpu_cgroup() {
        return vodkit_testkit::skip(e);
    }
    let _cpu = vodkit_testkit::turn(vodkit_testkit::turn::CPU);
    let name = format!("vodkit-cpuquota-test-{}", std::process::id());
    let quota = CpuQuota::create(&name, 0.25).unwrap();
    let dir = quota.dir().to_path_buf();
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", "while :; do :; done"]);
    quota.confine(&mut cmd).unwrap();
    let mut child = cmd.spawn().unwrap();
    let start = Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    let used = cpu_seconds(child.id());
    let elapsed = start.elapsed().as_secs_f64();
    let throttled = quota.throttled_periods();
    child.kill().unwrap();
    child.wait().unwrap();
    quota.remove().unwrap();
    assert!(!dir.exists(), "{} left behind", dir.display());
    // Without the quota the loop has a whole core's worth (1.5 s) on an idle machine and
    // is never throttled.
    assert!(
        throttled.is_some_and(|t| t >= 3),
        "the loop was not throttled: {throttled:?}"
    );
    assert!(
        used <= 0.25 * elapsed * 1.5 + 0.05,
        "used {used:.2} CPU-s in {elapsed:.2} s under a 0.25-core quota"
    );
}
