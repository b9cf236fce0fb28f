//! A command reading 4 GiB under a 1 GiB budget keeps its page cache under the limit.
//!
//! Needs root and a memory cgroup; without them it prints why and passes, except under
//! `CI` where it fails.

use std::time::Duration;
use vodkit_disk::memory;

#[test]
fn page_cache_stays_within_the_budget() {
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Root]) {
        return;
    }
    if let Err(e) = memory::own_memory_cgroup() {
        return vodkit_testkit::skip(e);
    }
    let dir = tempfile::Builder::new()
        .prefix("vodkit-membudget")
        .tempdir_in("/var/tmp")
        .unwrap();
    let file = dir.path().join("big");
    // A sparse 4 GiB file: reading its holes fills the page cache without disk traffic.
    std::fs::File::create(&file)
        .unwrap()
        .set_len(4 << 30)
        .unwrap();
    memory::evict_file(&file).unwrap();
    let limit = 1u64 << 30;
    let argv: Vec<String> = [
        "dd",
        &format!("if={}", file.display()),
        "of=/dev/null",
        "bs=4M",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let report = memory::run(limit, &argv, Duration::from_millis(20), |_| {}).unwrap();
    assert_eq!(report.exit_code, Some(0), "dd failed");
    eprintln!(
        "limit {} MiB: peak {} MiB, peak page cache {} MiB, {} samples",
        limit >> 20,
        report.peak_bytes >> 20,
        report.peak_cache_bytes >> 20,
        report.samples.len()
    );
    // The cache was charged to the budget (so the measurement means something)...
    assert!(
        report.peak_cache_bytes > 256 << 20,
        "page cache was not charged to the budget"
    );
    // ...and never exceeded it, although the command read four times the limit.
    assert!(
        report.peak_cache_bytes <= limit,
        "page cache {} over the limit",
        report.peak_cache_bytes
    );
    assert!(
        report.peak_bytes <= limit,
        "peak usage {} over the limit",
        report.peak_bytes
    );
    assert!(!report.cgroup.exists(), "budget cgroup left behind");
}
