//! Is a byte range of a file in the page cache? (Linux)
//!
//! Three ways to ask, chosen by [`Probe`]:
//! - `cachestat(2)` (Linux ≥ 6.5): counts cached pages of a range without mapping it;
//! - `mincore(2)` on a temporary read-only mapping of the range (any Linux), the way
//!   Libception checks before forwarding a read;
//! - `preadv2(RWF_NOWAIT)` into a scratch buffer: the kernel copies the cached prefix and
//!   stops at the first page that would need I/O (costs a copy of the cached part).
//!
//! [`Probe::Auto`] uses `cachestat` and falls back to `mincore` when the kernel lacks it.
//! None of these block on disk I/O.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use strum::{EnumString, VariantNames};

/// How residency is checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[derive(EnumString, VariantNames)]
#[strum(serialize_all = "lowercase", parse_err_ty = String, parse_err_fn = unknown_probe)]
pub enum Probe {
    /// `cachestat`, falling back to `mincore` if unsupported.
    #[default]
    Auto,
    Cachestat,
    Mincore,
    #[strum(to_string = "nowait", serialize = "preadv2")]
    Nowait,
}

fn unknown_probe(s: &str) -> String {
    vodkit_units::unknown_choice("residency probe", s, Probe::VARIANTS)
}

/// Page-cache state of a byte range.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Residency {
    /// Bytes of the range (as asked, after clipping to the file).
    pub len: u64,
    /// Bytes of the range not in memory (whole pages, clipped to the range).
    pub missing: u64,
}

impl Residency {
    pub fn resident(&self) -> u64 {
        self.len - self.missing
    }

    pub fn is_complete(&self) -> bool {
        self.missing == 0
    }
}

/// The system page size (4096 when it cannot be read).
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// Page-aligned span covering `[offset, offset + len)`: (first page byte, byte length).
fn page_span(offset: u64, len: u64, page: u64) -> (u64, u64) {
    let start = offset / page * page;
    let end = (offset + len).div_ceil(page) * page;
    (start, end - start)
}

/// Converts a count of missing pages of the span into missing bytes of the range.
fn missing_bytes(missing_pages: u64, len: u64, page: u64) -> u64 {
    (missing_pages * page).min(len)
}

static CACHESTAT_MISSING: AtomicBool = AtomicBool::new(false);

/// Checks `[offset, offset + len)` of `file`, whose size is `file_size`; the range is
/// clipped to the file.
pub fn check(
    file: &File,
    offset: u64,
    len: u64,
    file_size: u64,
    probe: Probe,
) -> io::Result<Residency> {
    let len = len.min(file_size.saturating_sub(offset));
    if len == 0 {
        return Ok(Residency::default());
    }
    match probe {
        Probe::Cachestat => cachestat(file, offset, len),
        Probe::Mincore => mincore(file, offset, len),
        Probe::Nowait => nowait(file, offset, len),
        Probe::Auto => {
            if !CACHESTAT_MISSING.load(Ordering::Relaxed) {
                match cachestat(file, offset, len) {
                    Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                        CACHESTAT_MISSING.store(true, Ordering::Relaxed);
                    }
                    other => return other,
                }
            }
            mincore(file, offset, len)
        }
    }
}

#[repr(C)]
#[derive(Default)]
struct CachestatRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default, Debug)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// `cachestat(2)` is number 451 on every architecture (it came after the syscall
/// tables were unified).
const SYS_CACHESTAT: libc::c_long = 451;

/// Pages of the range in the page cache, and pages evicted from it (kernel's count).
fn cachestat_raw(file: &File, offset: u64, len: u64) -> io::Result<Cachestat> {
    let range = CachestatRange { off: offset, len };
    let mut out = Cachestat::default();
    // SAFETY: both pointers refer to live, correctly laid out structs for the call.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd() as libc::c_uint,
            &range as *const CachestatRange,
            &mut out as *mut Cachestat,
            0 as libc::c_uint,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(out)
}

fn cachestat(file: &File, offset: u64, len: u64) -> io::Result<Residency> {
    let page = page_size();
    let (start, span) = page_span(offset, len, page);
    let st = cachestat_raw(file, start, span)?;
    let pages = span / page;
    let missing = pages.saturating_sub(st.nr_cache);
    Ok(Residency {
        len,
        missing: missing_bytes(missing, len, page),
    })
}

/// The page map of `[offset, offset + len)` from `mincore(2)` on a temporary read-only
/// mapping: the first page's byte offset and one byte per page (bit 0: resident).
fn page_map(file: &File, offset: u64, len: u64) -> io::Result<(u64, Vec<u8>)> {
    let page = page_size();
    let (start, span) = page_span(offset, len, page);
    if span == 0 {
        return Ok((start, Vec::new()));
    }
    // SAFETY: mapping a file read-only and shared; the mapping is only passed to mincore
    // and unmapped before returning, never dereferenced.
    unsafe {
        let addr = libc::mmap(
            std::ptr::null_mut(),
            span as usize,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            start as libc::off_t,
        );
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut vec = vec![0u8; (span / page) as usize];
        let rc = libc::mincore(addr, span as usize, vec.as_mut_ptr());
        let err = io::Error::last_os_error();
        libc::munmap(addr, span as usize);
        if rc != 0 {
            return Err(err);
        }
        Ok((start, vec))
    }
}

fn mincore(file: &File, offset: u64, len: u64) -> io::Result<Residency> {
    let (_, map) = page_map(file, offset, len)?;
    let missing = map.iter().filter(|&&b| b & 1 == 0).count() as u64;
    Ok(Residency {
        len,
        missing: missing_bytes(missing, len, page_size()),
    })
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn nowait(file: &File, offset: u64, len: u64) -> io::Result<Residency> {
    SCRATCH.with(|s| {
        let mut buf = s.borrow_mut();
        let mut done = 0u64;
        while done < len {
            let want = (len - done).min(1 << 20) as usize;
            if buf.len() < want {
                buf.resize(want, 0);
            }
            let iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: want,
            };
            // SAFETY: the iovec points into a live buffer of at least `want` bytes.
            let n = unsafe {
                libc::preadv2(
                    file.as_raw_fd(),
                    &iov,
                    1,
                    (offset + done) as libc::off_t,
                    libc::RWF_NOWAIT,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EAGAIN) {
                    break;
                }
                return Err(e);
            }
            if n == 0 {
                break;
            }
            done += n as u64;
        }
        Ok(Residency {
            len,
            missing: len - done.min(len),
        })
    })
}

/// The resident runs of `[offset, offset + len)` as `(start, end)` byte ranges in file
/// order, page-aligned and clipped to the range (`mincore(2)` on a temporary mapping).
pub fn resident_runs(file: &File, offset: u64, len: u64) -> io::Result<Vec<(u64, u64)>> {
    let page = page_size();
    let (start, vec) = page_map(file, offset, len)?;
    let end = offset + len;
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for (i, b) in vec.iter().enumerate() {
        if b & 1 == 0 {
            continue;
        }
        let a = (start + i as u64 * page).max(offset);
        let z = (start + (i as u64 + 1) * page).min(end);
        match runs.last_mut() {
            Some(last) if last.1 == a => last.1 = z,
            _ => runs.push((a, z)),
        }
    }
    Ok(runs)
}

/// The resident runs of a read range `[start, end)` worth reading again: those with missing
/// bytes on both sides (a buffered read skips resident pages, so each such run splits the
/// read and costs the drive one more positioning) and at most `max_run` bytes long
/// (reading them again costs less transfer than the positioning it saves). `runs` are in
/// file order, inside the range.
pub fn runs_to_reread(runs: &[(u64, u64)], start: u64, end: u64, max_run: u64) -> Vec<(u64, u64)> {
    runs.iter()
        .copied()
        .filter(|&(a, z)| a > start && z < end && z - a <= max_run)
        .collect()
}

/// Drops the resident runs of `[start, end)` that [`runs_to_reread`] picks with runs of at
/// most `max_run` bytes, so that a buffered read of the range which follows reaches the
/// drive in one piece; returns the bytes dropped. A page the kernel keeps (another reader
/// holds it) stays and is skipped by the read, as before.
pub fn drop_runs_to_reread(file: &File, start: u64, end: u64, max_run: u64) -> io::Result<u64> {
    if end <= start {
        return Ok(0);
    }
    let runs = resident_runs(file, start, end - start)?;
    let mut dropped = 0;
    for (a, z) in runs_to_reread(&runs, start, end, max_run) {
        drop_cached(file, a, z - a)?;
        dropped += z - a;
    }
    Ok(dropped)
}

/// Drops the cached pages of a range (`posix_fadvise(DONTNEED)`); for tests and tools.
pub fn drop_cached(file: &File, offset: u64, len: u64) -> io::Result<()> {
    // SAFETY: plain syscall on an owned descriptor.
    let rc = unsafe {
        libc::posix_fadvise(
            file.as_raw_fd(),
            offset as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        )
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn written_file(len: usize) -> (tempfile::TempDir, File) {
        // Next to the test binary (the target dir, a real disk); /tmp may be tmpfs.
        let exe = std::env::current_exe().unwrap();
        let dir = tempfile::tempdir_in(exe.parent().unwrap()).unwrap();
        let path = dir.path().join("f.bin");
        let mut f = File::create(&path).unwrap();
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
        (dir, File::open(&path).unwrap())
    }

    #[test]
    fn page_span_covers_partial_pages() {
        assert_eq!(page_span(0, 1, 4096), (0, 4096));
        assert_eq!(page_span(4095, 2, 4096), (0, 8192));
        assert_eq!(page_span(8192, 4096, 4096), (8192, 4096));
        assert_eq!(missing_bytes(2, 100, 4096), 100);
    }

    #[test]
    fn every_probe_sees_dropped_and_reread_ranges() {
        let size = 1 << 20;
        let (_dir, f) = written_file(size);
        let size = size as u64;
        for probe in [Probe::Auto, Probe::Cachestat, Probe::Mincore, Probe::Nowait] {
            drop_cached(&f, 0, 0).unwrap();
            let r = check(&f, 0, size, size, probe).unwrap();
            if r.missing == 0 {
                vodkit_testkit::skip(format_args!(
                    "{probe:?}: the kernel kept the pages after POSIX_FADV_DONTNEED"
                ));
                continue;
            }
            assert_eq!(r.len, size);
            if probe != Probe::Nowait {
                assert_eq!(r.missing, size, "{probe:?}: all pages should be gone");
            }
            // Read the first half back in.
            let mut buf = vec![0u8; (size / 2) as usize];
            std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, 0).unwrap();
            let first = check(&f, 0, size / 2, size, probe).unwrap();
            assert!(first.is_complete(), "{probe:?}: {first:?}");
            let second = check(&f, size / 2, size / 2, size, probe).unwrap();
            // Kernel readahead may have pulled in some of the second half.
            assert!(second.len == size / 2, "{probe:?}");
            let whole = check(&f, 0, size, size, probe).unwrap();
            assert_eq!(whole.missing, second.missing, "{probe:?}");
        }
    }

    #[test]
    fn only_short_runs_with_missing_bytes_on_both_sides_are_read_again() {
        let runs = [
            (0, 100),
            (300, 400),
            (500, 2_000),
            (2_100, 2_200),
            (2_900, 3_000),
        ];
        // The first run starts the range and the last ends it: the drive starts after the
        // one and stops before the other, so neither splits the read. (500, 2000) is
        // longer than a positioning is worth.
        assert_eq!(
            runs_to_reread(&runs, 0, 3_000, 1_000),
            vec![(300, 400), (2_100, 2_200)]
        );
        assert_eq!(
            runs_to_reread(&runs, 0, 3_000, 99),
            Vec::<(u64, u64)>::new()
        );
        assert_eq!(
            runs_to_reread(&[], 0, 3_000, 1_000),
            Vec::<(u64, u64)>::new()
        );
    }

    /// Leaves exactly `runs` (in pages) of `f` resident, or says why it cannot.
    fn make_resident(f: &File, size: u64, runs: &[(u64, u64)]) -> Option<()> {
        let page = page_size();
        drop_cached(f, 0, 0).unwrap();
        if check(f, 0, size, size, Probe::Mincore).unwrap().missing != size {
            vodkit_testkit::skip(format_args!(
                "the kernel kept the pages after POSIX_FADV_DONTNEED"
            ));
            return None;
        }
        // SAFETY: plain syscall on an owned descriptor: no read-ahead past what is read.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        for &(a, z) in runs {
            let mut buf = vec![0u8; ((z - a) * page) as usize];
            std::os::unix::fs::FileExt::read_exact_at(f, &mut buf, a * page).unwrap();
        }
        let want: Vec<(u64, u64)> = runs.iter().map(|&(a, z)| (a * page, z * page)).collect();
        let got = resident_runs(f, 0, size).unwrap();
        if got != want {
            vodkit_testkit::skip(format_args!(
                "the kernel cached {got:?} for reads of {want:?}"
            ));
            return None;
        }
        Some(())
    }

    #[test]
    fn resident_runs_are_clipped_to_the_range_and_page_aligned_inside_it() {
        let page = page_size();
        let size = 64 * page;
        let (_dir, f) = written_file(size as usize);
        if make_resident(&f, size, &[(0, 2), (8, 16), (24, 64)]).is_none() {
            return;
        }
        let runs = resident_runs(&f, page / 2, size - page).unwrap();
        assert_eq!(
            runs,
            vec![
                (page / 2, 2 * page),
                (8 * page, 16 * page),
                (24 * page, size - page / 2)
            ]
        );
    }

    #[test]
    fn a_short_resident_run_between_missing_pages_is_dropped_and_a_long_one_kept() {
        let page = page_size();
        let size = 64 * page;
        let (_dir, f) = written_file(size as usize);
        if make_resident(&f, size, &[(0, 4), (8, 10), (16, 40), (48, 64)]).is_none() {
            return;
        }
        let dropped = drop_runs_to_reread(&f, 0, size, 8 * page).unwrap();
        // The run of 2 pages is inside and short; the first and last runs end the range;
        // the run of 24 pages is longer than reading it again is worth.
        assert_eq!(dropped, 2 * page);
        assert_eq!(
            resident_runs(&f, 0, size).unwrap(),
            vec![(0, 4 * page), (16 * page, 40 * page), (48 * page, size)]
        );
    }

    #[test]
    fn ranges_are_clipped_to_the_file() {
        let (_dir, f) = written_file(10_000);
        let r = check(&f, 9_000, 5_000, 10_000, Probe::Auto).unwrap();
        assert_eq!(r.len, 1_000);
        let r = check(&f, 20_000, 5_000, 10_000, Probe::Auto).unwrap();
        assert_eq!(r, Residency::default());
    }

    #[test]
    fn cachestat_is_available_on_this_kernel() {
        let (_dir, f) = written_file(4096);
        match cachestat_raw(&f, 0, 4096) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                eprintln!("skipping: cachestat(2) not supported by this kernel (needs 6.5)");
            }
            Err(e) => panic!("cachestat failed: {e}"),
        }
    }
}
