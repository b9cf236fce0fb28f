//! End to end: a 1 GiB `wd-red` emulated disk brought up in this process with the block
//! queue of a real rotational disk on the running kernel, files written through ext4,
//! caches dropped, read benchmarks within tolerance of the preset, EIO injected on one file
//! and seen by read(2), a user's queue setting winning over the default, and teardown
//! (normal and after a "crash") leaving nothing mounted or attached.
//!
//! Needs root, /dev/fuse, loop devices, losetup and mkfs.ext4. Without them the
//! test prints why and passes, except under `CI` where it fails.

#![cfg(feature = "testbed")]

use std::io::{Read, Write};
use std::path::Path;
use vodkit_disk::devbench::{self, BenchOptions};
use vodkit_disk::model::preset;
use vodkit_disk::testbed::{self, system, Config, Testbed};

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn assert_torn_down(cfg: &Config) {
    let fuse_dir = testbed::state_dir(&cfg.state_root, &cfg.mount).join("fuse");
    assert!(
        system::mount_at(&cfg.mount).is_none(),
        "{} still mounted",
        cfg.mount.display()
    );
    assert!(
        system::mount_at(&fuse_dir).is_none(),
        "FUSE still mounted at {}",
        fuse_dir.display()
    );
    assert!(
        system::loops_backed_by(&fuse_dir.join("disk.img")).is_empty(),
        "loop device still attached"
    );
    assert!(
        testbed::load_state(&cfg.state_root, &cfg.mount).is_none(),
        "state file left behind"
    );
}

#[test]
fn wd_red_device_end_to_end() {
    let Some(device) = super::Device::plan("vodkit-hdd-e2e", 1 << 30) else {
        return;
    };
    let cfg = device.cfg.clone();
    let bed = Testbed::up(&cfg).expect("device up");
    let st = bed.state().clone();
    assert!(st.ready);
    let q = testbed::queue::read(&st.loop_device).unwrap();
    assert!(q.rotational, "loop queue not marked rotational");
    // The queue reads back the defaults of a real rotational SATA disk on this kernel
    // (max_sectors_kb capped at what the loop device accepts).
    let d =
        testbed::queue::rotational_defaults("wd-red", testbed::KernelVersion::running().unwrap());
    assert_eq!(q.read_ahead_kb, d.read_ahead_kb, "read_ahead_kb of {q:?}");
    assert_eq!(
        q.max_sectors_kb,
        d.max_sectors_kb.min(q.max_hw_sectors_kb),
        "max_sectors_kb of {q:?}"
    );
    let applied = st
        .queue
        .clone()
        .expect("the state records the queue settings");
    if q.schedulers.contains(&d.scheduler) {
        assert_eq!(q.scheduler, d.scheduler, "scheduler of {q:?}");
    } else {
        assert!(
            applied.notes.iter().any(|n| n.contains("not offered")),
            "{applied:?}"
        );
    }
    assert_eq!(
        (
            applied.read_ahead_kb,
            applied.max_sectors_kb,
            applied.scheduler.as_str()
        ),
        (q.read_ahead_kb, q.max_sectors_kb, q.scheduler.as_str()),
        "state and sysfs disagree"
    );
    assert!(
        applied.line().starts_with("queue: read_ahead_kb="),
        "{}",
        applied.line()
    );

    // Files through ext4.
    let (a, b) = (cfg.mount.join("a.bin"), cfg.mount.join("b.bin"));
    for (path, seed) in [(&a, 1u8), (&b, 2u8)] {
        let mut f = std::fs::File::create(path).unwrap();
        f.write_all(&pattern(seed, 8 << 20)).unwrap();
        f.sync_all().unwrap();
    }
    system::drop_caches().unwrap();
    let before = testbed::counters(&st).unwrap().reads;
    assert_eq!(
        std::fs::read(&a).unwrap(),
        pattern(1, 8 << 20),
        "data read back differs"
    );
    assert!(
        testbed::counters(&st).unwrap().reads > before,
        "read did not reach the emulated disk"
    );

    // Benchmarks against the preset.
    let spec = preset("wd-red").unwrap();
    let opts = BenchOptions {
        sequential_bytes: 24 << 20,
        random_2m_reads: 24,
        random_128k_reads: 40,
        ..BenchOptions::default()
    };
    // The device runs in real time; on a shared, busy machine one pass can be disturbed,
    // so up to three passes are made and one must be within tolerance on every line.
    let tolerance = |test: &str| {
        if test.starts_with("sequential") {
            0.05
        } else {
            0.10
        }
    };
    let dev = Path::new("/dev").join(&st.loop_device);
    let mut failures = Vec::new();
    for pass in 1..=3 {
        let report = devbench::run(&dev, st.size, &spec, &opts).unwrap();
        for r in &report.rows {
            eprintln!(
                "pass {pass}: {:<18} {:>7.1} MB/s  model {:>6.1}  published {:?}  ({:+.1}%)",
                r.test,
                r.mb_s,
                r.model_mb_s,
                r.published_mb_s,
                r.deviation() * 100.0
            );
        }
        let off: Vec<String> = report
            .rows
            .iter()
            .filter(|r| r.deviation().abs() > tolerance(&r.test))
            .map(|r| {
                format!(
                    "{} {:.1} MB/s ({:+.1}%)",
                    r.test,
                    r.mb_s,
                    r.deviation() * 100.0
                )
            })
            .collect();
        if off.is_empty() {
            failures.clear();
            break;
        }
        failures.push(format!("pass {pass}: {}", off.join(", ")));
    }
    assert!(
        failures.is_empty(),
        "benchmark out of tolerance in every pass: {}",
        failures.join("; ")
    );

    // EIO on every block of b.bin surfaces to read(2); clearing the plan heals it.
    for x in testbed::file_extents(&b).unwrap() {
        testbed::control(
            &st,
            testbed::Control::range(x.physical / 512, (x.physical + x.length).div_ceil(512))
                .unwrap(),
        )
        .unwrap();
    }
    system::drop_caches().unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let err = std::fs::File::open(&b)
        .unwrap()
        .read(&mut buf)
        .expect_err("read of a failed range succeeded");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert!(testbed::counters(&st).unwrap().injected_errors > 0);
    testbed::control(&st, testbed::Control::EioClear).unwrap();
    system::drop_caches().unwrap();
    assert_eq!(std::fs::read(&b).unwrap(), pattern(2, 8 << 20));

    bed.down().expect("teardown");
    assert_torn_down(&cfg);

    // A server that vanished without tearing down: `down` releases what it left. This
    // time the user sets read_ahead_kb, which wins over the default.
    let mut tuned = cfg.clone();
    tuned.tuning.read_ahead_kb = Some(512);
    let bed = Testbed::up(&tuned).expect("device up again (existing file system)");
    let q = testbed::queue::read(&bed.state().loop_device).unwrap();
    assert_eq!(q.read_ahead_kb, 512, "user's read_ahead_kb lost: {q:?}");
    let applied = bed.state().queue.clone().unwrap();
    assert_eq!(applied.overridden, ["read_ahead_kb"]);
    assert_eq!(
        q.max_sectors_kb,
        d.max_sectors_kb.min(q.max_hw_sectors_kb),
        "default max_sectors_kb beside the user's read_ahead_kb"
    );
    assert_eq!(
        std::fs::read(&a).unwrap(),
        pattern(1, 8 << 20),
        "file lost across restart"
    );
    std::mem::forget(bed);
    let steps = testbed::down(&cfg.state_root, &cfg.mount).expect("stale teardown");
    assert!(steps.iter().any(|s| s.contains("detached")), "{steps:?}");
    assert_torn_down(&cfg);
}
