//! Byte-range arithmetic the manager's rules (and the bench's bound) share: merging,
//! subtracting, page alignment, and admitting intervals smallest first; the joining of
//! sorted intervals also serves the trace's spans of time.

/// A range to drop from the page cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drop {
    pub file: crate::policy::FileId,
    pub start: u64,
    pub end: u64,
}

/// Admits `gaps` smallest first while their sum stays within `budget` (after `used`);
/// returns the largest admitted gap (0: none) and the budget used.
pub(super) fn admit_smallest(mut gaps: Vec<u64>, budget: u64, mut used: u64) -> (u64, u64) {
    gaps.sort_unstable();
    let mut largest = 0;
    for g in gaps {
        if used + g > budget {
            break;
        }
        used += g;
        largest = g;
    }
    (largest, used)
}

/// Sorted, merged copy of `v` (overlapping or touching ranges joined).
pub fn merge(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.sort_unstable();
    join_sorted(v)
}

/// `v`, sorted by start, with overlapping or touching intervals joined (for byte ranges
/// and for spans of time alike).
pub fn join_sorted<T: PartialOrd + Copy>(v: Vec<(T, T)>) -> Vec<(T, T)> {
    let mut out: Vec<(T, T)> = Vec::with_capacity(v.len());
    for (a, b) in v {
        match out.last_mut() {
            Some(last) if a <= last.1 => {
                if b > last.1 {
                    last.1 = b;
                }
            }
            _ => out.push((a, b)),
        }
    }
    out
}

/// `[from, to)` minus the ranges `holes` (in any order, overlapping or not).
pub fn subtract(from: u64, to: u64, holes: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = from;
    for &(a, b) in &merge(holes.to_vec()) {
        if b <= at || a >= to {
            continue;
        }
        if a > at {
            out.push((at, a.min(to)));
        }
        at = at.max(b);
        if at >= to {
            break;
        }
    }
    if at < to {
        out.push((at, to));
    }
    out
}

/// Page-aligned part of a drop: whole pages only, except that a range reaching the end of
/// the file takes its last partial page too.
pub fn page_aligned(start: u64, end: u64, file_size: u64, page: u64) -> Option<(u64, u64)> {
    let a = start.div_ceil(page) * page;
    let b = if end >= file_size {
        file_size.div_ceil(page) * page
    } else {
        end / page * page
    };
    (a < b).then_some((a, b))
}
