//! The open sessions' share of `--memory`, set from what the whole process holds: what
//! the rest of it needs (the file table, the statistics, the blocks and batches on their
//! way, each thread's allocator) comes out of the sessions' half, so the process stays
//! within the limit as long as the rest alone fits. The rule is pure ([`sessions_share`]);
//! the analysis reads the process's resident memory and calls it when a partition is about
//! to spill (its sessions at their peak) and at every sweep.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Kept free of the limit for what grows between two readings and for brief peaks: a
/// thirty-second of it, and at least [`MARGIN_MIN`].
const MARGIN_SHARE: usize = 32;
const MARGIN_MIN: usize = 16 << 20;

/// The open sessions never get less than this part of the limit (a quarter, half of what
/// they get when the rest is small), however much the rest holds: past that the limit
/// cannot be kept and the analysis says so. Lower, the index of the spilled sessions would
/// soon fill what is left, and spilling stop.
const FLOOR_SHARE: usize = 4;

/// Resident bytes of this process (the second field of `/proc/self/statm`, in pages), or
/// `None` where that cannot be read. `statm` rather than `status`: under a tight limit it
/// is read at nearly every spill, and the kernel writes `status`'s fifty lines each time.
pub(crate) fn resident_bytes() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = text.split_ascii_whitespace().nth(1)?.parse().ok()?;
    let page = usize::try_from(vodkit_prefetch::residency::page_size()).ok()?;
    Some(pages * page)
}

/// mimalloc's `mi_option_purge_delay` (`mimalloc.h`, the same place in its versions 2 and
/// 3): how long, in milliseconds, freed memory stays with the allocator before it goes back
/// to the system (10 by default).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Ask the allocator to give freed memory back to the system at once, for the rest of the
/// process, rather than after its delay. Under a tight limit the memory that spills and
/// sweeps free would otherwise still be resident, and counted as the rest's, at the next
/// reading; on the 54 M-request log at 256 MiB on two threads it was some 30 MiB. It can
/// cost CPU (about a sixth of that pass when set from its start), so it is asked for only
/// once the limit is tight. It acts only where the process allocates with mimalloc, as
/// `vodkit` does; under another allocator it changes nothing.
fn return_freed_memory_at_once() {
    static ASKED: AtomicBool = AtomicBool::new(false);
    if !ASKED.swap(true, Ordering::Relaxed) {
        // SAFETY: `mi_option_set` only stores an option's value (mimalloc initializes its
        // options on first use and reads this one each time it purges); the value is in
        // range and nothing else is touched.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    }
}

/// Below this `--memory` the process maps its memory in small pages only.
const SMALL_PAGES_BELOW: usize = 256 << 20;

/// Under a `limit` below [`SMALL_PAGES_BELOW`], stop transparent huge pages for the rest of
/// the process. mimalloc asks for them, and each is 2 MiB resident however little of it is
/// used: a log of 1 M files and 250,000 sessions open at once peaked at 51 MiB within
/// 32 MiB with them and 30 MiB without, as fast; the 54 M-request log within 128 MiB at 134
/// and 151 MiB on one and two threads with them, 117 and 135 without, no slower. From
/// 256 MiB up they stay: there the pass took 1.35 times as long without them on two
/// threads, and stopping them once the limit turned out tight left the peak where it was
/// (pages already huge stay so, which is why the caller asks before it allocates: see
/// `AnalyzeOptions::prepare_process`). Where the kernel has no such setting it changes
/// nothing.
pub(crate) fn small_pages_under(limit: usize) -> bool {
    if limit >= SMALL_PAGES_BELOW {
        return false;
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0)` sets one flag of this process
        // (the kernel then maps its future faults in small pages); it takes no pointers and
        // touches no memory of ours.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    false
}

/// Bytes the open sessions of all partitions may hold until the share is set again, when the
/// process holds `resident` bytes of which `held` are open sessions, under `limit`: the
/// limit less a margin and less the rest, between a quarter and half of the limit.
pub(crate) fn sessions_share(limit: usize, resident: usize, held: usize) -> usize {
    let target = limit.saturating_sub((limit / MARGIN_SHARE).max(MARGIN_MIN));
    let rest = resident.saturating_sub(held);
    target
        .saturating_sub(rest)
        .clamp((limit / FLOOR_SHARE).max(1), (limit / 2).max(1))
}

/// Whether the limit is tight: the rest of the process leaves the open sessions `share`,
/// less than the half of `limit` they get when it is small.
fn tight(limit: usize, share: usize) -> bool {
    share < (limit / 2).max(1)
}

/// One analysis's session budget, shared by the thread that decides the sweeps and the
/// partitions: the total they may hold, and what each held at its last sweep or spill.
pub(crate) struct Budget {
    limit: usize,
    total: AtomicUsize,
    held: Vec<Held>,
}

/// A partition's figure on a cache line of its own.
#[repr(align(64))]
#[derive(Default)]
struct Held(AtomicUsize);

impl Budget {
    pub fn new(limit: usize, partitions: usize) -> Budget {
        Budget {
            limit,
            total: AtomicUsize::new((limit / 2).max(1)),
            held: (0..partitions.max(1)).map(|_| Held::default()).collect(),
        }
    }

    /// What each partition may hold, until the share is set again.
    pub fn partition(&self) -> usize {
        (self.total.load(Ordering::Relaxed) / self.held.len()).max(1)
    }

    /// Partition `i` holds `bytes` (after its sweep).
    pub fn report(&self, i: usize, bytes: usize) {
        if let Some(h) = self.held.get(i) {
            h.0.store(bytes, Ordering::Relaxed);
        }
    }

    /// The share the process leaves, when it holds `resident` bytes (`None` where unknown).
    /// Once the rest leaves the sessions less than half, freed memory goes back to the
    /// system at once from then on ([`return_freed_memory_at_once`]).
    fn share(&self, resident: Option<usize>) -> Option<usize> {
        let held = self.held.iter().map(|h| h.0.load(Ordering::Relaxed)).sum();
        let share = resident.map(|r| sessions_share(self.limit, r, held))?;
        if tight(self.limit, share) {
            return_freed_memory_at_once();
        }
        Some(share)
    }

    /// Partition `i`, about to spill, holds `bytes`: its sessions are at the top of what
    /// they may hold, which is when the process is, so the total is set from this moment.
    pub fn at_peak(&self, i: usize, bytes: usize, resident: Option<usize>) {
        self.report(i, bytes);
        if let Some(share) = self.share(resident) {
            self.total.store(share, Ordering::Relaxed);
        }
    }

    /// Lower the total when the process, holding `resident` bytes at a sweep, leaves the
    /// sessions less; raised only at a peak ([`Budget::at_peak`]), since between peaks what
    /// the sessions held last is more than they hold.
    pub fn lower(&self, resident: Option<usize>) {
        if let Some(share) = self.share(resident) {
            self.total.fetch_min(share, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_limit_stops_huge_pages_and_a_large_one_does_not() {
        let thp = || {
            std::fs::read_to_string("/proc/self/status")
                .ok()?
                .lines()
                .find_map(|l| l.strip_prefix("THP_enabled:"))
                .map(|v| v.trim().to_string())
        };
        if thp().is_none() {
            vodkit_testkit::need::not_here("/proc/self/status has no THP_enabled (Linux 5.0+)");
            return;
        }
        // The flag is the whole test process's, and another test of this binary may have
        // set it already: a large limit must leave it as it was, a small one clears it.
        let before = thp();
        assert!(!small_pages_under(SMALL_PAGES_BELOW));
        assert_eq!(thp(), before);
        assert!(small_pages_under(64 << 20));
        assert_eq!(thp().as_deref(), Some("0"));
    }

    const MIB: usize = 1 << 20;

    #[test]
    fn the_sessions_get_what_the_rest_leaves_between_a_quarter_and_half() {
        let limit = 512 * MIB;
        // The margin is 16 MiB. The rest holds 100 MiB: 496 - 100 = 396, above half: half.
        assert_eq!(sessions_share(limit, 300 * MIB, 200 * MIB), 256 * MIB);
        // The rest holds 300 MiB: the sessions get 496 - 300.
        assert_eq!(sessions_share(limit, 500 * MIB, 200 * MIB), 196 * MIB);
        assert_eq!(sessions_share(limit, 410 * MIB, 100 * MIB), 186 * MIB);
        // Memory the sessions freed and the allocator kept counts as the rest's: 496 - 400
        // is below the floor, a quarter.
        assert_eq!(sessions_share(limit, 500 * MIB, 100 * MIB), 128 * MIB);
        // The rest alone passes the limit: a quarter.
        assert_eq!(sessions_share(limit, 900 * MIB, 10 * MIB), 128 * MIB);
        // A thirty-second of a large limit: 8 GiB less 256 MiB less a rest of 5000 MiB.
        assert_eq!(
            sessions_share(8192 * MIB, 5100 * MIB, 100 * MIB),
            (8192 - 256 - 5000) * MIB
        );
        // Tiny limits stay positive.
        assert_eq!(sessions_share(1, 100 * MIB, 0), 1);
    }

    #[test]
    fn the_budget_follows_the_process_and_is_split_over_partitions() {
        let b = Budget::new(512 * MIB, 2);
        assert_eq!(b.partition(), 128 * MIB);
        b.report(0, 100 * MIB);
        b.at_peak(1, 100 * MIB, None);
        b.lower(None);
        assert_eq!(b.partition(), 128 * MIB);
        // 496 - (516 - 200) = 180: each partition 90 MiB.
        b.lower(Some(516 * MIB));
        assert_eq!(b.partition(), 90 * MIB);
        // A sweep never raises it.
        b.lower(Some(200 * MIB));
        assert_eq!(b.partition(), 90 * MIB);
        // A peak does: 496 - (350 - 220) is above half.
        b.at_peak(0, 120 * MIB, Some(350 * MIB));
        assert_eq!(b.partition(), 128 * MIB);
        // And lowers it: 496 - (520 - 220) = 196.
        b.at_peak(0, 120 * MIB, Some(520 * MIB));
        assert_eq!(b.partition(), 98 * MIB);
    }

    #[test]
    fn the_limit_is_tight_once_the_rest_cuts_into_the_sessions_half() {
        let limit = 512 * MIB;
        // A rest of 100 MiB leaves the sessions their half: not tight.
        assert!(!tight(limit, sessions_share(limit, 300 * MIB, 200 * MIB)));
        // A rest of 300 MiB leaves them 196 MiB: tight.
        assert!(tight(limit, sessions_share(limit, 500 * MIB, 200 * MIB)));
        assert!(!tight(1, 1));
    }

    #[test]
    fn a_tight_limit_has_mimalloc_give_freed_memory_back_at_once() {
        let b = Budget::new(512 * MIB, 2);
        b.report(0, 10 * MIB);
        // 490 MiB besides the sessions: the share falls to the floor.
        b.lower(Some(500 * MIB));
        assert_eq!(b.partition(), 64 * MIB);
        // The tight reading set mimalloc's purge delay (10 ms by default) to none, whatever
        // the test's own allocator.
        // SAFETY: reads an option's value.
        let delay = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(delay, 0);
    }

    #[test]
    fn this_process_is_resident() {
        if !cfg!(target_os = "linux") {
            vodkit_testkit::need::not_here("resident memory is read from /proc (Linux)");
            return;
        }
        let r = resident_bytes().expect("statm is readable on Linux");
        assert!(r > 1 << 20 && r < 1 << 40, "{r}");
        // The same as `VmRSS` in `status`, give or take what moved between the readings.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let kib: usize = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse().ok())
            .expect("VmRSS in /proc/self/status");
        let vm_rss = kib << 10;
        assert!(r.abs_diff(vm_rss) < 4 << 20, "statm {r}, VmRSS {vm_rss}");
    }
}
