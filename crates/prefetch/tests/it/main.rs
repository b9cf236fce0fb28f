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

/// A temporary directory in the target directory, which is on a real disk (/tmp may be
/// tmpfs).
fn tmp() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// A written, fsynced file with its pages dropped from the cache, or `None` (with the
/// reason printed) when this filesystem keeps them.
fn cold_file(dir: &tempfile::TempDir, name: &str, size: u64) -> Option<Arc<File>> {
    let data: Vec<u8> = (0..size).map(|i| (i % MIB % 253) as u8).collect();
    cold_copy(dir, name, &data)
}

/// [`cold_file`] holding `data`.
fn cold_copy(dir: &tempfile::TempDir, name: &str, data: &[u8]) -> Option<Arc<File>> {
    let path = dir.path().join(name);
    let mut f = File::create(&path).unwrap();
    f.write_all(data).unwrap();
    f.sync_all().unwrap();
    let f = File::open(&path).unwrap();
    drop_cached(&f, 0, 0).unwrap();
    let size = data.len() as u64;
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
