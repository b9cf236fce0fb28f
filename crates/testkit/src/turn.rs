//! Taking turns: tests that must not overlap (they share a cgroup name, the FUSE device,
//! loop devices, or measure CPU time) hold a [`Turn`] on the same name. The lock is a file
//! under the temporary directory, so it holds across test binaries and crates.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// The emulated disk: the FUSE device and loop devices.
pub const DISK: &str = "emulated-disk";
/// Tests that measure CPU time or run under a CPU quota.
pub const CPU: &str = "cpu";
/// Tests that create cgroups.
pub const CGROUP: &str = "cgroup";
/// Tests that create network namespaces, links and bridges.
pub const NETNS: &str = "netns";
/// The machine's page cache: tests that drop it (every bench point does, as root) and tests
/// that need it undisturbed while they measure (a steady-state point). Take it after
/// [`DISK`] when holding both.
pub const PAGE_CACHE: &str = "page-cache";

/// A held turn; the next test waiting on the same name runs when this is dropped.
pub struct Turn {
    _file: File,
}

/// Waits for and takes the turn called `name` (`[a-z0-9-]`, e.g. [`DISK`]).
pub fn turn(name: &str) -> Turn {
    let path = lock_path(name);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("the turn lock {}: {e}", path.display()));
    loop {
        // SAFETY: flock on a descriptor this function owns; it is released when the file
        // is closed (the Turn is dropped).
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Turn { _file: file };
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            panic!("locking {}: {e}", path.display());
        }
    }
}

fn lock_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("vodkit-test-{name}.lock"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn turns_on_one_name_do_not_overlap() {
        let inside = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let inside = inside.clone();
                std::thread::spawn(move || {
                    for _ in 0..5 {
                        let _t = turn("testkit-self-check");
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "overlap");
                        std::thread::sleep(std::time::Duration::from_millis(2));
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
