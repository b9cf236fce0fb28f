//! Where a file's bytes lie on their device, for the sweep read order
//! ([`crate::schedule::IoOrder::Sweep`]).
//!
//! The filesystem's extent map (the `FS_IOC_FIEMAP` ioctl: ext4, XFS, btrfs, …) gives the
//! device byte of each file offset; a file's map is asked once and kept (bounded). Where the
//! map is unavailable (tmpfs, FUSE, overlay filesystems, a hole, an extent not yet
//! allocated) a read's place is its inode and offset ([`Place::Logical`]), the order a
//! filesystem tends to lay files out in.

use crate::policy::FileId;
use crate::schedule::Place;
use crate::Map;
use std::fs::File;
use std::os::fd::AsRawFd;

/// One mapped extent: `[logical, logical + len)` of the file at device byte `physical`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub logical: u64,
    pub physical: u64,
    pub len: u64,
}

/// The device byte of `offset` in a file whose extents (sorted by `logical`) are `extents`;
/// `None` in a hole or past the map.
pub fn physical_of(extents: &[Extent], offset: u64) -> Option<u64> {
    let i = extents.partition_point(|e| e.logical <= offset);
    let e = extents.get(i.checked_sub(1)?)?;
    (offset < e.logical.saturating_add(e.len)).then(|| e.physical + (offset - e.logical))
}

/// `struct fiemap` of `<linux/fiemap.h>` (the header before the extent array).
#[repr(C)]
#[derive(Default)]
struct FiemapHeader {
    fm_start: u64,
    fm_length: u64,
    fm_flags: u32,
    fm_mapped_extents: u32,
    fm_extent_count: u32,
    fm_reserved: u32,
}

/// `struct fiemap_extent` of `<linux/fiemap.h>`.
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

/// `_IOWR('f', 11, struct fiemap)` (the generic ioctl encoding of x86 and Arm).
const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
/// The last extent of the file.
const FIEMAP_EXTENT_LAST: u32 = 0x1;
/// The extent's place is not known yet (delayed allocation, or not mappable).
const FIEMAP_EXTENT_UNKNOWN: u32 = 0x2;
/// Extents asked per call.
const BATCH: usize = 256;
/// Most extents kept per file (a badly fragmented file keeps its first ones).
const MAX_EXTENTS: usize = 16_384;

/// The extents of `file` from its filesystem, sorted by file offset, without those whose
/// place is unknown; an error when the filesystem has no extent map.
pub fn extents(file: &File) -> std::io::Result<Vec<Extent>> {
    const HEADER: usize = std::mem::size_of::<FiemapHeader>();
    const EXTENT: usize = std::mem::size_of::<FiemapExtent>();
    // u64 words: the kernel's structures need 8-byte alignment.
    let mut buf = vec![0u64; (HEADER + BATCH * EXTENT).div_ceil(8)];
    let mut out = Vec::new();
    let mut start = 0u64;
    loop {
        buf.iter_mut().for_each(|w| *w = 0);
        let header = FiemapHeader {
            fm_start: start,
            fm_length: u64::MAX - start,
            fm_extent_count: BATCH as u32,
            ..Default::default()
        };
        // SAFETY: `buf` is at least HEADER bytes, 8-byte aligned, and FiemapHeader is a
        // plain #[repr(C)] struct of integers.
        unsafe { std::ptr::write(buf.as_mut_ptr().cast::<FiemapHeader>(), header) };
        // SAFETY: the ioctl reads the header and writes at most `fm_extent_count` extents
        // after it, which `buf` has room for; the descriptor is open for `file`'s lifetime.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_FIEMAP as _, buf.as_mut_ptr()) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the kernel filled the header in place (aligned, initialized above).
        let mapped = unsafe { (*buf.as_ptr().cast::<FiemapHeader>()).fm_mapped_extents };
        let mapped = (mapped as usize).min(BATCH);
        let mut last = mapped == 0;
        for k in 0..mapped {
            // SAFETY: extent k lies within `buf` (k < BATCH), 8-byte aligned (HEADER and
            // EXTENT are multiples of 8), written by the kernel or zeroed above.
            let e = unsafe {
                std::ptr::read(
                    buf.as_ptr()
                        .cast::<u8>()
                        .add(HEADER + k * EXTENT)
                        .cast::<FiemapExtent>(),
                )
            };
            if e.fe_flags & FIEMAP_EXTENT_UNKNOWN == 0 && e.fe_length > 0 {
                out.push(Extent {
                    logical: e.fe_logical,
                    physical: e.fe_physical,
                    len: e.fe_length,
                });
            }
            start = e.fe_logical.saturating_add(e.fe_length);
            last |= e.fe_flags & FIEMAP_EXTENT_LAST != 0;
        }
        if last || mapped < BATCH || out.len() >= MAX_EXTENTS {
            break;
        }
    }
    out.sort_by_key(|e| e.logical);
    Ok(out)
}

/// Files whose extent maps are kept at most (then the cache starts over).
const MAX_FILES: usize = 4096;

/// Places of reads, with each file's extent map asked once.
#[derive(Default)]
pub struct Placement {
    /// The file's extents (empty: the file has no map).
    maps: Map<FileId, Vec<Extent>>,
}

impl Placement {
    pub fn new() -> Placement {
        Placement::default()
    }

    /// The place of byte `offset` of `file` (identity `id`, inode `ino`).
    pub fn place(&mut self, file: &File, id: FileId, ino: u64, offset: u64) -> Place {
        if !self.maps.contains_key(&id) {
            if self.maps.len() >= MAX_FILES {
                self.maps.clear();
            }
            let map = extents(file).unwrap_or_else(|e| {
                tracing::debug!("no extent map (reads ordered by inode and offset): {e}");
                Vec::new()
            });
            self.maps.insert(id, map);
        }
        self.maps
            .get(&id)
            .and_then(|m| physical_of(m, offset))
            .map_or(Place::Logical { ino, offset }, Place::Physical)
    }

    /// Forgets `file`'s map (it was rewritten, or it is gone).
    pub fn forget(&mut self, id: FileId) {
        self.maps.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn offsets_map_into_their_extent_and_holes_have_no_place() {
        let map = [
            Extent {
                logical: 0,
                physical: 1_000_000,
                len: 4096,
            },
            Extent {
                logical: 8192,
                physical: 50_000,
                len: 8192,
            },
        ];
        assert_eq!(physical_of(&map, 0), Some(1_000_000));
        assert_eq!(physical_of(&map, 4095), Some(1_004_095));
        assert_eq!(physical_of(&map, 4096), None);
        assert_eq!(physical_of(&map, 8192 + 100), Some(50_100));
        assert_eq!(physical_of(&map, 16_384), None);
        assert_eq!(physical_of(&[], 5), None);
    }

    #[test]
    fn a_written_file_has_places_on_its_device_or_falls_back_to_inode_order() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut f = File::create(&path).unwrap();
        f.write_all(&vec![7u8; 1 << 20]).unwrap();
        f.sync_all().unwrap();
        let f = File::open(&path).unwrap();
        let ino = f.metadata().unwrap().ino();
        let mut p = Placement::new();
        let a = p.place(&f, 1, ino, 0);
        let b = p.place(&f, 1, ino, 512 << 10);
        match extents(&f) {
            Ok(map) if !map.is_empty() => {
                // The filesystem maps the file: its bytes have device places, in order
                // within an extent.
                let (Place::Physical(x), Place::Physical(y)) = (a, b) else {
                    panic!("{a:?} {b:?} with a map {map:?}");
                };
                if map.len() == 1 {
                    assert_eq!(y - x, 512 << 10);
                }
            }
            _ => {
                assert_eq!(a, Place::Logical { ino, offset: 0 });
                assert_eq!(
                    b,
                    Place::Logical {
                        ino,
                        offset: 512 << 10
                    }
                );
            }
        }
        assert!(a < b || map_is_fragmented(&f));
    }

    fn map_is_fragmented(f: &File) -> bool {
        extents(f).map(|m| m.len() > 1).unwrap_or(false)
    }
}
