//! Where a file's data lives on its block device (`FS_IOC_FIEMAP`, through the `fiemap`
//! crate), so benchmarks can place file sets at low or high addresses and fault injection
//! can target one file.

use fiemap::{Fiemap, FiemapFlags};
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

/// The extents of `path` (its data is synced first so delayed allocations are placed).
pub fn file_extents(path: &Path) -> std::io::Result<Vec<Extent>> {
    let file = std::fs::File::open(path)?;
    Fiemap::with_flags(file, FiemapFlags::SYNC)
        .map(|e| {
            e.map(|e| Extent {
                logical: e.fe_logical,
                physical: e.fe_physical,
                length: e.fe_length,
            })
        })
        .collect()
}
