//! The consumed-cache: bytes viewers have consumed that no follower is kept for, left in
//! the page cache while the budget has room and dropped in the order the retention
//! ([`super::retention`]) decides.

use super::ranges::Drop;
use super::retention::{Key, Retention, RetentionSpec};
use crate::policy::FileId;
use crate::Map;
use std::collections::BTreeMap;

/// Weight of the newest eviction in the running worth of evictions (prefix admission).
const EVICTED_WEIGHT: f64 = 0.05;

#[derive(Clone, Debug)]
pub(super) struct ConsumedCache {
    /// Per file: start → (end, worth) of its disjoint cached ranges.
    index: Map<FileId, BTreeMap<u64, (u64, f64)>>,
    bytes: u64,
    retention: Box<dyn Retention>,
    /// Running mean of the worth of evicted ranges (`None` before the first eviction).
    evicted_value: Option<f64>,
}

impl ConsumedCache {
    pub(super) fn new(spec: RetentionSpec) -> Self {
        ConsumedCache {
            index: Map::default(),
            bytes: 0,
            retention: spec.build(),
            evicted_value: None,
        }
    }

    pub(super) fn retention(&self) -> &dyn Retention {
        self.retention.as_ref()
    }

    /// Cached bytes.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether any range of `file` is cached.
    pub(super) fn has(&self, file: FileId) -> bool {
        self.index.contains_key(&file)
    }

    /// Whether a cached range overlaps `[start, end)` of `file`.
    pub(super) fn overlaps(&self, file: FileId, start: u64, end: u64) -> bool {
        self.index.get(&file).is_some_and(|idx| {
            idx.range(..end)
                .next_back()
                .is_some_and(|(_, &(b, _))| b > start)
        })
    }

    /// Cached parts of `[from, to)` of `file`, lowest first.
    pub(super) fn within(&self, file: FileId, from: u64, to: u64) -> Vec<(u64, u64)> {
        self.index
            .get(&file)
            .map(|idx| {
                idx.range(..to)
                    .map(|(&a, &(b, _))| (a.max(from), b.min(to)))
                    .filter(|(a, b)| a < b)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Offers consumed `[from, to)` of `file`, worth `value`, to the cache: cached (as the
    /// newest) if the retention admits it; otherwise returned to be dropped.
    pub(super) fn offer(&mut self, file: FileId, from: u64, to: u64, value: f64) -> bool {
        if from >= to {
            return true;
        }
        self.remove(file, from, to, false);
        if !self.retention.admits(value, self.evicted_value) {
            return false;
        }
        self.index
            .entry(file)
            .or_default()
            .insert(from, (to, value));
        self.bytes += to - from;
        self.retention.inserted((file, from), to - from, value);
        true
    }

    /// Takes `[from, to)` of `file` out of the cache (not dropped: in use again, asked for
    /// by a viewer when `taken`, else kept for a follower).
    pub(super) fn remove(&mut self, file: FileId, from: u64, to: u64, taken: bool) {
        let Some(idx) = self.index.get_mut(&file) else {
            return;
        };
        let hit: Vec<(u64, u64, f64)> = idx
            .range(..to)
            .rev()
            .take_while(|(_, (end, _))| *end > from)
            .map(|(&a, &(b, v))| (a, b, v))
            .collect();
        for (a, b, v) in hit {
            idx.remove(&a);
            self.bytes -= b - a;
            // The parts outside [from, to) stay, in the range's place.
            let mut parts: Vec<(Key, u64)> = Vec::new();
            for (x, y) in [(a, from.min(b)), (to.max(a), b)] {
                if x < y {
                    idx.insert(x, (y, v));
                    self.bytes += y - x;
                    parts.push(((file, x), y - x));
                }
            }
            if !parts.is_empty() {
                self.retention.split((file, a), &parts);
            } else if taken {
                self.retention.taken((file, a));
            } else {
                self.retention.removed((file, a));
            }
        }
        if idx.is_empty() {
            self.index.remove(&file);
        }
    }

    /// Removes the range the retention evicts next from a cache allowed `room` bytes.
    pub(super) fn pop(&mut self, room: u64) -> Option<Drop> {
        loop {
            let (file, start) = self.retention.victim(room)?;
            let Some(idx) = self.index.get_mut(&file) else {
                continue;
            };
            let Some((end, value)) = idx.remove(&start) else {
                continue;
            };
            if idx.is_empty() {
                self.index.remove(&file);
            }
            self.bytes -= end - start;
            self.evicted_value = Some(match self.evicted_value {
                Some(m) => m + EVICTED_WEIGHT * (value - m),
                None => value,
            });
            return Some(Drop { file, start, end });
        }
    }
}
