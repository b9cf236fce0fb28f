//! Integration tests of the bench: the procedure, the adapters for every server kind, the emulated
//! disk and the players.
//!
//! One test binary for the crate, linked once: each module holds one area's tests.

mod hdd;
mod hdd_steady;
mod peers;
mod players;
mod preload_daemon;
mod procedure;
mod signed;
mod smoke;
mod tls;

/// What a bench on the emulated disk with nginx needs: FUSE, nginx and a working testbed
/// (`None`, after the skip line, when one is missing), then the disk's and the page cache's
/// turns, held while the returned value lives (its points drop the page cache, and a
/// steady-state point must not see another test's drop).
fn emulated_disk_with_nginx() -> Option<[vodkit_testkit::Turn; 2]> {
    if !vodkit_testkit::needs(&[
        vodkit_testkit::Need::Fuse,
        vodkit_testkit::Need::Peer("nginx"),
    ]) {
        return None;
    }
    if let Err(e) = vodkit_disk::testbed::preflight() {
        vodkit_testkit::skip(format_args!("the emulated disk cannot run here: {e}"));
        return None;
    }
    let disk = vodkit_testkit::turn(vodkit_testkit::turn::DISK);
    let cache = vodkit_testkit::turn(vodkit_testkit::turn::PAGE_CACHE);
    Some([disk, cache])
}
