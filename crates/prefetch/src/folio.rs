//! Large page-cache folios for the engine's page-cache reads.
//!
//! `sendfile` costs less CPU per byte from large folios than from 4 KiB pages (measured on
//! a 6.18 kernel's ext4: 1.4–1.9 × less, docs/results/folio/report.md).
//! The kernel's own readahead builds large folios; the engine's `pread`s with
//! `POSIX_FADV_RANDOM` (so that the policy alone decides what is read) build 4 KiB ones.
//! This module reads a window's whole aligned folios through a mapping advised
//! `MADV_HUGEPAGE | MADV_RANDOM` and filled with `MADV_POPULATE_READ`: the kernel then reads
//! each aligned PMD-sized range as one folio, and exactly that range (no readahead
//! around it). The window's unaligned head and tail are still `pread`, so the bytes read
//! are exactly the window's and the memory manager's accounting stays exact.
//!
//! Windows of a chain are aligned by [`aligned_end`]: a prefetch that spans at least one
//! folio ends on a folio boundary, so the chain's next window starts on one.
//!
//! The engine reads large folios only when asked (`EngineConfig::large_folios`, off by
//! default) and for files that many streams read at once ([`POPULAR_STREAMS`]). The kernel
//! marks each folio read this way as a readahead trigger, so the first `sendfile` through
//! it reads ahead by the device's `read_ahead_kb`; with that at 0 the gain is real but the
//! kernel then serves `POSIX_FADV_RANDOM` `pread`s a page at a time (docs/prefetch.md).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::OnceLock;

/// With a memory manager, large folios are read only for files that at least this many
/// streams read at once ([`crate::memory::MemoryManager::streams_on`]): `sendfile`'s saving
/// is per byte sent, large when a byte goes to many viewers, small when it goes to one —
/// as when the disk decides, where a large folio costs instead: it leaves the cache only
/// when a drop covers it whole (in the disk-bound `servers` pair with large folios for
/// every file, 1.2 GB of drops stayed resident at first and were retried; docs/results/folio/report.md). The popular cells (one title, thousands of viewers) spent 5–8% less CPU
/// with them.
pub const POPULAR_STREAMS: usize = 8;

/// The size of the page cache's PMD folios (2 MiB on x86-64) when the kernel builds them
/// for a mapping advised `MADV_HUGEPAGE`; `None` when transparent huge pages are off
/// (`never`) or absent, where a `MADV_RANDOM` mapping would read one page per fault.
pub fn huge_folio_bytes() -> Option<u64> {
    static SIZE: OnceLock<Option<u64>> = OnceLock::new();
    *SIZE.get_or_init(|| {
        let dir = std::path::Path::new("/sys/kernel/mm/transparent_hugepage");
        let enabled = std::fs::read_to_string(dir.join("enabled")).ok()?;
        let size = std::fs::read_to_string(dir.join("hpage_pmd_size")).ok()?;
        thp_folio_bytes(&enabled, &size)
    })
}

/// [`huge_folio_bytes`] from the text of the two sysfs files.
fn thp_folio_bytes(enabled: &str, pmd_size: &str) -> Option<u64> {
    if enabled.contains("[never]") || !enabled.contains('[') {
        return None;
    }
    let size: u64 = pmd_size.trim().parse().ok()?;
    (size.is_power_of_two() && size >= 4096).then_some(size)
}

/// The end of the read `[start, end)` (which covers a request ending at `request_end`)
/// moved to the nearest folio boundary, so that the next read of the chain starts on one
/// and reads whole folios. Reads shorter than a folio and reads to the end of the file
/// are left alone, as is a read whose boundaries would all cut the request short; a
/// boundary past the end of the file becomes the end of the file. The result never falls
/// below `request_end` and moves `end` by less than one folio.
pub fn aligned_end(start: u64, request_end: u64, end: u64, file_size: u64, folio: u64) -> u64 {
    if folio == 0 || end >= file_size || end.saturating_sub(start) < folio {
        return end;
    }
    let down = end / folio * folio;
    if down == end {
        return end;
    }
    let up = (down + folio).min(file_size);
    if down >= request_end && down > start && end - down <= up - end {
        down
    } else {
        up
    }
}

/// `[offset, end)` cut into its unaligned head, its whole aligned folios and its
/// unaligned tail (each `(start, end)`, possibly empty); a range with no whole folio is
/// all head.
pub fn split(offset: u64, end: u64, folio: u64) -> [(u64, u64); 3] {
    if folio == 0 {
        return [(offset, end), (end, end), (end, end)];
    }
    let first = offset.div_ceil(folio) * folio;
    let last = end / folio * folio;
    if first >= last {
        return [(offset, end), (end, end), (end, end)];
    }
    [(offset, first), (first, last), (last, end)]
}

/// Reads `[offset, offset + len)` — whole folios, `offset` aligned — into the page cache
/// as large folios: a shared read-only mapping advised `MADV_HUGEPAGE | MADV_RANDOM`,
/// filled by `MADV_POPULATE_READ`, then unmapped. Fails (the caller falls back to `pread`)
/// where the kernel or the filesystem does not support it, or on a read error.
pub fn populate(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let map_len = usize::try_from(len).map_err(|_| io::Error::other("range too long to map"))?;
    let file_offset =
        libc::off_t::try_from(offset).map_err(|_| io::Error::other("offset too large to map"))?;
    if map_len == 0 {
        return Ok(());
    }
    // SAFETY: a new read-only shared mapping of an open file; nothing dereferences it.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            file_offset,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let mapping = Mapping { addr, len: map_len };
    for advice in [
        libc::MADV_HUGEPAGE,
        libc::MADV_RANDOM,
        libc::MADV_POPULATE_READ,
    ] {
        // SAFETY: advice on the whole of the mapping made above, still mapped; no memory
        // is read or written through it by this process.
        if unsafe { libc::madvise(mapping.addr, mapping.len, advice) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A mapping unmapped when dropped.
struct Mapping {
    addr: *mut libc::c_void,
    len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `addr` and `len` are those `mmap` returned and accepted; no reference into
        // the mapping outlives it.
        unsafe {
            libc::munmap(self.addr, self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: u64 = 2 << 20;

    #[test]
    fn thp_setting_decides_whether_folios_are_built() {
        assert_eq!(
            thp_folio_bytes("always [madvise] never\n", "2097152\n"),
            Some(F)
        );
        assert_eq!(
            thp_folio_bytes("[always] madvise never\n", "2097152\n"),
            Some(F)
        );
        assert_eq!(thp_folio_bytes("always madvise [never]\n", "2097152"), None);
        assert_eq!(thp_folio_bytes("", "2097152"), None);
        assert_eq!(thp_folio_bytes("[madvise]", "3000"), None);
        assert_eq!(thp_folio_bytes("[madvise]", "x"), None);
    }

    #[test]
    fn ends_move_to_the_nearest_boundary_but_never_cut_the_request() {
        let size = 100 * F;
        // Nearer the lower boundary: down.
        assert_eq!(aligned_end(100, 1000, 100 + F, size, F), F);
        // Nearer the upper one: up.
        assert_eq!(
            aligned_end(F / 2 + 100, F, F / 2 + 100 + 2 * F, size, F),
            3 * F
        );
        // The lower boundary would cut the request: up even though it is farther.
        assert_eq!(aligned_end(100, F + 10, 100 + F + 20, size, F), 2 * F);
        // Already aligned, shorter than a folio, or at the end of the file: unchanged.
        assert_eq!(aligned_end(F, F + 10, 2 * F, size, F), 2 * F);
        assert_eq!(aligned_end(10, 20, F, size, F), F);
        assert_eq!(aligned_end(10, 20, F - 1, size, F), F - 1);
        assert_eq!(aligned_end(size - F - 5, size - 2, size, size, F), size);
        // A boundary past the end of the file: the end of the file.
        assert_eq!(
            aligned_end(F / 2, F, 2 * F + 90, 2 * F + 100, F),
            2 * F + 100
        );
        // The move is always under a folio.
        for start in (0..3 * F).step_by(777_777) {
            for len in [F, F + 1, 3 * F / 2, 5 * F / 2] {
                let end = start + len;
                let got = aligned_end(start, start + 1, end, size, F);
                assert!(got.abs_diff(end) < F && got > start && got.is_multiple_of(F));
            }
        }
    }

    #[test]
    fn split_gives_head_whole_folios_and_tail() {
        assert_eq!(
            split(100, 3 * F + 7, F),
            [(100, F), (F, 3 * F), (3 * F, 3 * F + 7)]
        );
        assert_eq!(split(0, 2 * F, F), [(0, 0), (0, 2 * F), (2 * F, 2 * F)]);
        // No whole folio: all head.
        assert_eq!(
            split(100, F + 100, F),
            [(100, F + 100), (F + 100, F + 100), (F + 100, F + 100)]
        );
        assert_eq!(split(5, 10, 0), [(5, 10), (10, 10), (10, 10)]);
    }
}
