//! Integration tests of the emulated disk, the memory budget and the CPU quota.
//!
//! One test binary for the crate, linked once: each module holds one area's tests.

mod cpu_quota;
mod direct_mount;
mod memory_budget;
mod testbed_e2e;

/// A `wd-red` device of `size` bytes to bring up under /var/tmp, with the disk turn held;
/// None (the reason printed) where the emulated disk cannot run.
#[cfg(feature = "testbed")]
struct Device {
    cfg: vodkit_disk::testbed::Config,
    _tmp: tempfile::TempDir,
    _turn: vodkit_testkit::Turn,
}

#[cfg(feature = "testbed")]
impl Device {
    fn plan(prefix: &str, size: u64) -> Option<Device> {
        use vodkit_disk::testbed;
        if !vodkit_testkit::needs(&[vodkit_testkit::Need::Fuse]) {
            return None;
        }
        if let Err(e) = testbed::preflight() {
            vodkit_testkit::skip(e);
            return None;
        }
        let turn = vodkit_testkit::turn(vodkit_testkit::turn::DISK);
        let tmp = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in("/var/tmp")
            .unwrap();
        let cfg = testbed::Config::in_dir(vodkit_disk::model::Preset::WdRed, size, tmp.path());
        Some(Device {
            cfg,
            _tmp: tmp,
            _turn: turn,
        })
    }
}
