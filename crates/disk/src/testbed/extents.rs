//! Where a file's data lives on its block device (`FS_IOC_FIEMAP`), so benchmarks can
//! place file sets at low or high addresses and fault injection can target one file.

use std::os::fd::AsRawFd;
use std::path::Path;

/// One contiguous piece of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Offset in the file, bytes.
    pub logical: u64,
    /// Offset on the device, bytes.
    pub physical: u64,
    pub length: u64,
}

const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
const FIEMAP_FLAG_SYNC: u32 = 1;
const MAX_EXTENTS: usize = 512;

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct FiemapExtent {
    fe_logical: u64,
    fe_physical: u64,
    fe_length: u64,
    fe_reserved64: [u64; 2],
    fe_flags: u32,
    fe_reserved: [u32; 3],
}

#[repr(C)]
struct Fiemap {
    fm_start: u64,
    fm_length: u64,
    fm_flags: u32,
    fm_mapped_extents: u32,
    fm_extent_count: u32,
    fm_reserved: u32,
    fm_extents: [FiemapExtent; MAX_EXTENTS],
}

/// The extents of `path` (its data is synced first so delayed allocations are placed).
pub fn file_extents(path: &Path) -> std::io::Result<Vec<Extent>> {
    let file = std::fs::File::open(path)?;
    let mut out = Vec::new();
    let mut start = 0u64;
    loop {
        let mut map = Box::new(Fiemap {
            fm_start: start,
            fm_length: u64::MAX - start,
            fm_flags: FIEMAP_FLAG_SYNC,
            fm_mapped_extents: 0,
            fm_extent_count: MAX_EXTENTS as u32,
            fm_reserved: 0,
            fm_extents: [FiemapExtent::default(); MAX_EXTENTS],
        });
        // SAFETY: `map` is a correctly laid out, writable `struct fiemap` with room for
        // `fm_extent_count` extents; the fd is open for the duration of the call.
        let rc = unsafe {
            libc::ioctl(
                file.as_raw_fd(),
                FS_IOC_FIEMAP as _,
                &mut *map as *mut Fiemap,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = map.fm_mapped_extents as usize;
        for e in &map.fm_extents[..n] {
            out.push(Extent {
                logical: e.fe_logical,
                physical: e.fe_physical,
                length: e.fe_length,
            });
        }
        let last = map.fm_extents[..n].last();
        match last {
            Some(e) if n == MAX_EXTENTS && e.fe_flags & 1 == 0 => {
                start = e.fe_logical + e.fe_length
            }
            _ => return Ok(out),
        }
    }
}
