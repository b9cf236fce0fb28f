//! Where a file set's titles lie on disk (thesis 3.5.3), read with the Linux FIEMAP ioctl
//! instead of tracing the block layer: per title the byte-weighted mean physical position,
//! the number of fragments, and whether it is out of sequence with its neighbours in
//! creation order.

use super::{planned_files, FilesetError};
use crate::model::{Catalog, Layout};
use fiemap::{Fiemap, FiemapFlags};
use serde::Serialize;
use std::fs::File;
use std::path::Path;

/// A physically contiguous run of a file: (physical byte offset, length).
pub type Extent = (u64, u64);

/// Physical extents of a file, in logical order (data synced first so delayed
/// allocations are placed).
pub fn extents(path: &Path) -> Result<Vec<Extent>, FilesetError> {
    let f = File::open(path)
        .map_err(|e| FilesetError::Runtime(format!("{}: open: {e}", path.display())))?;
    Fiemap::with_flags(f, FiemapFlags::SYNC)
        .map(|e| e.map(|e| (e.fe_physical, e.fe_length)))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| {
            FilesetError::Runtime(format!(
                "{}: FIEMAP failed ({e}); the filesystem must support FIEMAP (ext4, xfs, btrfs; not tmpfs)",
                path.display()
            ))
        })
}

/// Placement of one title.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TitlePlacement {
    pub id: u32,
    /// Byte-weighted mean physical position, in 512-byte sectors (the thesis's LBA).
    pub avg_lba: f64,
    pub bytes: u64,
    /// Physically contiguous runs after joining adjacent extents (1 = unfragmented).
    pub fragments: u64,
    /// Mean position differs from the median of its neighbours' (±5 titles in creation
    /// order) by more than 1 % of the filesystem size.
    pub out_of_sequence: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlacementReport {
    pub layout: String,
    pub titles: u64,
    pub filesystem_sectors: u64,
    pub fragmented_titles_fraction: f64,
    pub mean_fragments: f64,
    pub out_of_sequence_fraction: f64,
    pub per_title: Vec<TitlePlacement>,
}

/// Join extents that continue each other on disk; returns (runs, weighted sum, bytes).
fn summarize(extents: &[Extent]) -> (u64, f64, u64) {
    let mut runs = 0u64;
    let mut weighted = 0.0;
    let mut bytes = 0u64;
    let mut end: Option<u64> = None;
    for &(phys, len) in extents {
        if end != Some(phys) {
            runs += 1;
        }
        end = Some(phys + len);
        weighted += (phys as f64 + len as f64 / 2.0) * len as f64;
        bytes += len;
    }
    (runs, weighted, bytes)
}

/// Flag titles whose position departs from their neighbours' by more than `threshold`.
pub fn out_of_sequence(positions: &[f64], threshold: f64) -> Vec<bool> {
    const WINDOW: usize = 5;
    (0..positions.len())
        .map(|i| {
            let lo = i.saturating_sub(WINDOW);
            let hi = (i + WINDOW + 1).min(positions.len());
            let mut around: Vec<f64> = (lo..hi).filter(|&j| j != i).map(|j| positions[j]).collect();
            if around.is_empty() {
                return false;
            }
            around.sort_by(f64::total_cmp);
            let median = around[around.len() / 2];
            (positions[i] - median).abs() > threshold
        })
        .collect()
}

/// Placement of every title of `catalog` under `root` in `layout` (default: the catalog's).
pub fn report(
    catalog: &Catalog,
    root: &Path,
    layout: Option<Layout>,
) -> Result<PlacementReport, FilesetError> {
    super::require_dir(root)?;
    let files = planned_files(catalog, layout)?;
    let fs_bytes = filesystem_bytes(root)?;
    let mut per_title: Vec<TitlePlacement> = Vec::new();
    let mut cur: Option<(u32, Vec<Extent>)> = None;
    let flush = |cur: &mut Option<(u32, Vec<Extent>)>, out: &mut Vec<TitlePlacement>| {
        if let Some((id, ex)) = cur.take() {
            let (runs, weighted, bytes) = summarize(&ex);
            out.push(TitlePlacement {
                id,
                avg_lba: if bytes > 0 {
                    weighted / bytes as f64 / 512.0
                } else {
                    0.0
                },
                bytes,
                fragments: runs,
                out_of_sequence: false,
            });
        }
    };
    for (id, f) in &files {
        if cur.as_ref().is_some_and(|(c, _)| c != id) {
            flush(&mut cur, &mut per_title);
        }
        let ex = extents(&root.join(&f.path))?;
        cur.get_or_insert_with(|| (*id, Vec::new())).1.extend(ex);
    }
    flush(&mut cur, &mut per_title);
    let positions: Vec<f64> = per_title.iter().map(|t| t.avg_lba).collect();
    let threshold = fs_bytes as f64 / 512.0 * 0.01;
    for (t, o) in per_title
        .iter_mut()
        .zip(out_of_sequence(&positions, threshold))
    {
        t.out_of_sequence = o;
    }
    let n = per_title.len().max(1) as f64;
    let layout_str = super::layout_label(catalog, layout);
    Ok(PlacementReport {
        layout: layout_str,
        titles: per_title.len() as u64,
        filesystem_sectors: fs_bytes / 512,
        fragmented_titles_fraction: per_title.iter().filter(|t| t.fragments > 1).count() as f64 / n,
        mean_fragments: per_title.iter().map(|t| t.fragments as f64).sum::<f64>() / n,
        out_of_sequence_fraction: per_title.iter().filter(|t| t.out_of_sequence).count() as f64 / n,
        per_title,
    })
}

/// Mean absolute difference of title positions between two reports (titles in sequence in
/// both), in sectors: how closely two layouts place the same titles (thesis 3.5.3).
pub fn divergence(a: &PlacementReport, b: &PlacementReport) -> Option<f64> {
    let pairs: Vec<f64> = a
        .per_title
        .iter()
        .zip(&b.per_title)
        .filter(|(x, y)| x.id == y.id && !x.out_of_sequence && !y.out_of_sequence)
        .map(|(x, y)| (x.avg_lba - y.avg_lba).abs())
        .collect();
    (!pairs.is_empty()).then(|| pairs.iter().sum::<f64>() / pairs.len() as f64)
}

fn filesystem_bytes(path: &Path) -> Result<u64, FilesetError> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| FilesetError::Input(format!("{}: path contains NUL", path.display())))?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid NUL-terminated path and writable statvfs.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(FilesetError::Runtime(format!(
            "{}: statvfs: {e}",
            path.display()
        )));
    }
    Ok(st.f_blocks as u64 * st.f_frsize as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_extents_join_into_one_fragment() {
        let (runs, w, bytes) = summarize(&[(0, 4096), (4096, 4096), (100_000, 4096)]);
        assert_eq!((runs, bytes), (2, 12_288));
        assert!((w / bytes as f64 - (2048.0 + 6144.0 + 102_048.0) / 3.0).abs() < 1e-6);
    }

    #[test]
    fn outliers_are_flagged_against_neighbours() {
        let mut pos: Vec<f64> = (0..50).map(|i| i as f64 * 10.0).collect();
        pos[20] = 10_000.0;
        let flags = out_of_sequence(&pos, 100.0);
        assert!(flags[20]);
        assert_eq!(flags.iter().filter(|&&f| f).count(), 1);
    }
}
