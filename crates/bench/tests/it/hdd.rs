//! A miniature bench on the emulated disk with a memory budget: the testbed comes up, the
//! file set is written onto it, nginx runs inside the budget, and the disk figures come from
//! the emulated device. Needs root, FUSE and the loop driver; elsewhere it says why and
//! does nothing, except under `CI`, where that is a failure.

use vodkit_bench::report;
use vodkit_bench::runner::{self, BenchRequest};

#[test]
fn miniature_bench_on_the_emulated_disk() {
    let Some(t) = crate::on_emulated_disk(20, 40, 0.005) else {
        return;
    };
    let req = BenchRequest {
        memory: Some(256 << 20),
        ..crate::bench_request(
            &t.workload,
            "nginx",
            "hdd:wd-red",
            "fixed-rates:2".into(),
            20,
            t.dir.path(),
        )
    };
    let (rep, table) = runner::run(&req).unwrap();
    assert!(report::check(&rep).is_empty(), "{:?}", report::check(&rep));
    assert!(rep.testbed.contains("emulated wd-red"), "{}", rep.testbed);
    assert_eq!(rep.memory_bytes, Some(256 << 20));
    let s = rep.server("nginx").unwrap();
    assert_eq!(s.status, report::MEASURED, "{:?}", s.reason);
    let p = &s.points[0].metrics;
    let disk = p.disk.expect("disk figures from the emulated device");
    assert!(disk.mb_s > 0.0 && disk.reads_per_s > 0.0, "{disk:?}");
    assert!(p.cpu_busy.is_some() && p.cpu_iowait.is_some(), "{p:?}");
    // nginx runs as a child process tree, the emulated disk and the load generator in this
    // process: all three are watched (at 2 sessions/s their CPU may round to 0 ticks).
    eprintln!(
        "CPU busy {:?}, iowait {:?}, cores {:?}",
        p.cpu_busy, p.cpu_iowait, p.cores
    );
    let watched = [p.cores.server, p.cores.load, p.cores.disk_emulator];
    assert!(
        watched.iter().all(|c| c.is_some_and(|c| c >= 0.0)),
        "{:?}",
        p.cores
    );
    assert!(table.contains("nginx"));
    // The testbed is down again: nothing mounted at the workload's mount point.
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(!mounts.contains(&t.workload.join("hdd-mnt").display().to_string()));
}
