//! The process's own memory: kept in small pages, so that a server or daemon confined with
//! its page cache to a memory budget does not spend the budget on huge pages.
//!
//! The allocator backs a thread's first heap pages with a 2 MiB transparent huge page when
//! the kernel allows it (`madvise` mode included): measured, `vodkit prefetchd` with a
//! thread per connection held 213 MiB of anonymous memory for 235 connections (41 MiB in
//! small pages), and `vodkit serve` 52–59 MiB in a 256 MiB cgroup (18–23 MiB in small
//! pages, at the same capacity).

/// Keeps this process's memory in small pages (`PR_SET_THP_DISABLE`). The setting is the
/// process's and its children inherit it, so a process that starts another program (such
/// as `vodkit preload`) should not take it for that program.
pub fn small_pages_only() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only; it reads and writes no memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_keeps_to_small_pages() {
        small_pages_only().unwrap();
        // SAFETY: prctl with integer arguments only.
        let disabled = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        assert_eq!(disabled, 1, "transparent huge pages still allowed");
        // The kernel says so in the process's status too, where it reports the setting.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        if let Some(line) = status.lines().find(|l| l.starts_with("THP_enabled:")) {
            assert!(line.ends_with('0'), "{line}");
        }
    }
}
