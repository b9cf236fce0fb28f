//! Integration tests of the prefetch engine, its I/O modes and its memory use.
//!
//! One test binary for the crate, linked once: each module holds one area's tests.

mod direct;
mod engine;
mod io_mode;
mod io_order;
mod memory;

use std::fs::File;
use std::io::Write;
use std::sync::Arc;
use vodkit_prefetch::residency::{self, drop_cached, Probe};

const MIB: u64 = 1 << 20;

/// A written, fsynced file with its pages dropped from the cache, or `None` (with the
/// reason printed) when this filesystem keeps them.
fn cold_file(dir: &tempfile::TempDir, name: &str, size: u64) -> Option<Arc<File>> {
    let path = dir.path().join(name);
    let mut f = File::create(&path).unwrap();
    let block: Vec<u8> = (0..MIB).map(|i| (i % 253) as u8).collect();
    let mut left = size;
    while left > 0 {
        let n = left.min(MIB) as usize;
        f.write_all(&block[..n]).unwrap();
        left -= n as u64;
    }
    f.sync_all().unwrap();
    let f = File::open(&path).unwrap();
    drop_cached(&f, 0, 0).unwrap();
    let r = residency::check(&f, 0, size, size, Probe::Auto).unwrap();
    if r.missing != size {
        let why = format!(
            "{} keeps pages after POSIX_FADV_DONTNEED ({} of {size} bytes resident)",
            dir.path().display(),
            r.resident()
        );
        vodkit_testkit::skip(why);
        return None;
    }
    Some(Arc::new(f))
}
