//! The library actually prefetches: a 4 KiB read of a cold file makes the policy's whole
//! range resident when the daemon reads it (`both`) or when the library does (`prefetch`),
//! and not when the daemon only tracks misses (`track`, the control).

use crate::common;

use common::*;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;
use vodkit_preload::IoMode;

const PREFETCH: usize = 1 << 20;

/// Resident pages among the first `len` bytes of `path`.
fn resident_pages(path: &Path, len: usize) -> usize {
    let f = std::fs::File::open(path).unwrap();
    // SAFETY: a read-only shared mapping of an open file, unmapped below.
    unsafe {
        let map = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(map, libc::MAP_FAILED);
        let pages = len.div_ceil(4096);
        let mut vec = vec![0u8; pages];
        assert_eq!(libc::mincore(map, len, vec.as_mut_ptr()), 0);
        libc::munmap(map, len);
        vec.iter().filter(|v| *v & 1 == 1).count()
    }
}

fn first_read_under(mode: IoMode) -> usize {
    let dir = open_tempdir();
    let file = write_content(dir.path(), "cold.dat", 8 << 20);
    evict(&file);
    assert!(resident_pages(&file, PREFETCH) < 4, "eviction did not work");
    let daemon = daemon(dir.path(), mode, "fixed:1MiB");
    let out = run_preloaded(
        daemon.socket(),
        "dd",
        &[
            &format!("if={}", file.display()),
            "of=/dev/null",
            "bs=4096",
            "count=1",
        ],
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "dd failed: {out:?}");
    let m = daemon.stop();
    assert_eq!(m.requests, 1, "exactly one miss expected: {m:?}");
    resident_pages(&file, PREFETCH)
}

#[test]
fn a_miss_makes_the_policy_range_resident() {
    let all = PREFETCH / 4096;
    assert_eq!(first_read_under(IoMode::Asap), all, "daemon-side prefetch");
    assert_eq!(
        first_read_under(IoMode::Prefetch),
        all,
        "library-side prefetch"
    );
    let tracked = first_read_under(IoMode::Vanilla);
    assert!(
        tracked < all,
        "control: without prefetching the kernel alone should not read 1 MiB ({tracked} pages)"
    );
}

#[test]
fn resident_reads_are_noted_to_the_daemon_in_batches() {
    let dir = open_tempdir();
    let file = write_content(dir.path(), "warm.dat", 4 << 20);
    std::fs::read(&file).unwrap(); // all of it in memory
    let daemon = daemon(dir.path(), IoMode::Asap, "fixed:1MiB");
    let out = run_preloaded(
        daemon.socket(),
        "dd",
        &[&format!("if={}", file.display()), "of=/dev/null", "bs=64k"],
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "dd failed: {out:?}");
    // Notes are not answered: give the daemon a moment to take the last ones off the socket.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while daemon.metrics().engine.hits < 16 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let m = daemon.stop();
    assert_eq!(m.requests, 0, "no misses: {m:?}");
    // 64 reads of 64 KiB: the first is told at once, then every 256 KiB of continuation;
    // the last 192 KiB are still being gathered when dd closes the file.
    assert_eq!(m.resident_notes, 16, "{m:?}");
    assert_eq!(m.noted_bytes, (64 + 15 * 256) << 10);
    assert_eq!((m.engine.hits, m.engine.misses), (16, 0));
}
