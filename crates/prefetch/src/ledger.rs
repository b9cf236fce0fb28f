//! Bookkeeping of prefetched ranges: prefetch evictions, eviction time, wasted prefetch.
//!
//! Whenever a read brings in bytes beyond what the client asked for, the extra range is
//! recorded with the time it was read. Later requests consume the record:
//! - a request that finds recorded bytes resident uses the prefetch;
//! - a request that finds recorded bytes missing is a *prefetch eviction*: the data was
//!   read ahead and evicted before anyone asked for it. Its *eviction time* is taken as
//!   the time between the prefetch and the first sweep that saw the pages gone
//!   ([`Ledger::mark_gone`]), or this discovery if no sweep saw it (the kernel does not
//!   say when it dropped the pages);
//! - bytes still unrequested when a record expires (no request touched it for `ttl_s`)
//!   or is pushed out by the per-file / total bounds are *wasted prefetch*.
//!
//! The ledger never looks at a clock or a file: callers pass times and residency, so the
//! simulator can use it too. Memory is bounded by `max_ranges_per_file` and `max_files`.

use crate::policy::FileId;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Limits and expiry of the ledger.
#[derive(Clone, Debug, PartialEq)]
pub struct LedgerConfig {
    /// A record untouched for this long is closed; its unrequested bytes count as waste.
    pub ttl_s: f64,
    pub max_ranges_per_file: usize,
    pub max_files: usize,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig {
            ttl_s: 300.0,
            max_ranges_per_file: 32,
            max_files: 100_000,
        }
    }
}

/// Running totals of the ledger.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LedgerTotals {
    /// Bytes read beyond the requests (recorded ranges).
    pub prefetched_bytes: u64,
    /// Recorded bytes later requested and found in memory.
    pub used_bytes: u64,
    /// Recorded bytes requested but found evicted.
    pub evicted_bytes: u64,
    /// Number of prefetch evictions (one per record and request).
    pub evictions: u64,
    /// Sum of eviction times, seconds.
    pub eviction_time_s: f64,
    /// Recorded bytes never requested.
    pub wasted_bytes: u64,
    /// Recorded bytes read again by a later prefetch before being requested.
    pub superseded_bytes: u64,
}

/// What one request did to the ledger.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestEffect {
    pub used_bytes: u64,
    pub evicted_bytes: u64,
    pub evictions: u64,
    pub eviction_time_s: f64,
}

#[derive(Clone, Debug)]
struct Record {
    id: u64,
    at_s: f64,
    /// First time a sweep found some of the pending bytes gone from memory.
    gone_s: Option<f64>,
    touched_s: f64,
    /// Sorted, disjoint, unrequested `[start, end)` intervals.
    pending: Vec<(u64, u64)>,
}

impl Record {
    fn pending_bytes(&self) -> u64 {
        self.pending.iter().map(|(a, b)| b - a).sum()
    }

    /// Removes `[start, end)` from the pending intervals; returns the bytes removed.
    fn take(&mut self, start: u64, end: u64) -> u64 {
        cut(&mut self.pending, start, end)
    }
}

/// Removes `[start, end)` from the disjoint `[a, b)` ranges of `ranges` (splitting a range
/// that straddles it); returns the bytes removed.
pub(crate) fn cut(ranges: &mut Vec<(u64, u64)>, start: u64, end: u64) -> u64 {
    let mut taken = 0;
    let mut rest = Vec::with_capacity(ranges.len() + 1);
    for &(a, b) in ranges.iter() {
        let (lo, hi) = (a.max(start), b.min(end));
        if lo >= hi {
            rest.push((a, b));
            continue;
        }
        taken += hi - lo;
        if a < lo {
            rest.push((a, lo));
        }
        if hi < b {
            rest.push((hi, b));
        }
    }
    *ranges = rest;
    taken
}

/// The prefetched-range ledger.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    cfg: LedgerConfig,
    files: HashMap<FileId, Vec<Record>>,
    totals: LedgerTotals,
    last_sweep_s: f64,
    next_id: u64,
}

/// A pending prefetched range to check for eviction (see [`Ledger::sweep_targets`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SweepTarget {
    pub file: FileId,
    pub record: u64,
    pub start: u64,
    pub end: u64,
}

impl Ledger {
    pub fn new(cfg: LedgerConfig) -> Self {
        Ledger {
            cfg,
            ..Default::default()
        }
    }

    pub fn totals(&self) -> &LedgerTotals {
        &self.totals
    }

    /// Recorded ranges currently tracked.
    pub fn open_records(&self) -> usize {
        self.files.values().map(Vec::len).sum()
    }

    /// A read of `[start, end)` happened at `now_s`; `[start, requested_end)` was asked
    /// for, the rest is prefetch.
    pub fn record_read(
        &mut self,
        file: FileId,
        start: u64,
        requested_end: u64,
        end: u64,
        now_s: f64,
    ) {
        let lo = start.max(requested_end);
        if lo >= end {
            return;
        }
        let records = self.files.entry(file).or_default();
        for r in records.iter_mut() {
            self.totals.superseded_bytes += r.take(lo, end);
        }
        records.retain(|r| !r.pending.is_empty());
        records.push(Record {
            id: self.next_id,
            at_s: now_s,
            gone_s: None,
            touched_s: now_s,
            pending: vec![(lo, end)],
        });
        self.next_id += 1;
        self.totals.prefetched_bytes += end - lo;
        if records.len() > self.cfg.max_ranges_per_file {
            let oldest = records.remove(0);
            self.totals.wasted_bytes += oldest.pending_bytes();
        }
        if self.files.len() > self.cfg.max_files {
            self.shed_oldest_files();
        }
    }

    /// A request for `[start, end)` arrived at `now_s`. For every prefetched, still
    /// unrequested part `[a, b)` of it the ledger asks `missing_in(a, b)` how many of those
    /// bytes are not in memory (a residency check; the simulator answers from its model).
    pub fn record_request(
        &mut self,
        file: FileId,
        start: u64,
        end: u64,
        now_s: f64,
        mut missing_in: impl FnMut(u64, u64) -> u64,
    ) -> RequestEffect {
        let mut effect = RequestEffect::default();
        let Some(records) = self.files.get_mut(&file) else {
            return effect;
        };
        for r in records.iter_mut() {
            let overlap: Vec<(u64, u64)> = r
                .pending
                .iter()
                .map(|&(a, b)| (a.max(start), b.min(end)))
                .filter(|(a, b)| a < b)
                .collect();
            if overlap.is_empty() {
                continue;
            }
            let evicted: u64 = overlap
                .iter()
                .map(|&(a, b)| missing_in(a, b).min(b - a))
                .sum();
            let fresh = r.take(start, end);
            r.touched_s = now_s;
            effect.used_bytes += fresh - evicted;
            if evicted > 0 {
                effect.evicted_bytes += evicted;
                effect.evictions += 1;
                let gone = r.gone_s.unwrap_or(now_s).min(now_s);
                effect.eviction_time_s += (gone - r.at_s).max(0.0);
            }
        }
        records.retain(|r| !r.pending.is_empty());
        if records.is_empty() {
            self.files.remove(&file);
        }
        self.totals.used_bytes += effect.used_bytes;
        self.totals.evicted_bytes += effect.evicted_bytes;
        self.totals.evictions += effect.evictions;
        self.totals.eviction_time_s += effect.eviction_time_s;
        effect
    }

    /// Up to `limit` pending ranges not yet seen evicted. A caller that finds one of them
    /// (partly) gone from memory reports it with [`Ledger::mark_gone`]; the eviction time
    /// of a later prefetch eviction is then measured to that moment instead of to the
    /// request that discovers it.
    pub fn sweep_targets(&self, limit: usize) -> Vec<SweepTarget> {
        self.files
            .iter()
            .flat_map(|(&file, rs)| {
                rs.iter()
                    .filter(|r| r.gone_s.is_none())
                    .filter_map(move |r| {
                        let &(start, end) = r.pending.first()?;
                        Some(SweepTarget {
                            file,
                            record: r.id,
                            start,
                            end,
                        })
                    })
            })
            .take(limit)
            .collect()
    }

    /// Files with open records.
    pub fn tracks(&self, file: FileId) -> bool {
        self.files.contains_key(&file)
    }

    /// A sweep at `now_s` found part of a record's pending bytes evicted.
    pub fn mark_gone(&mut self, file: FileId, record: u64, now_s: f64) {
        if let Some(r) = self
            .files
            .get_mut(&file)
            .and_then(|rs| rs.iter_mut().find(|r| r.id == record))
        {
            r.gone_s.get_or_insert(now_s);
        }
    }

    /// Closes records untouched for `ttl_s`; their unrequested bytes become waste.
    /// Cheap to call often: it sweeps at most once per tenth of the ttl.
    pub fn expire(&mut self, now_s: f64) {
        if now_s - self.last_sweep_s < self.cfg.ttl_s / 10.0 {
            return;
        }
        self.last_sweep_s = now_s;
        let ttl = self.cfg.ttl_s;
        let mut wasted = 0;
        self.files.retain(|_, records| {
            records.retain(|r| {
                let keep = now_s - r.touched_s < ttl;
                if !keep {
                    wasted += r.pending_bytes();
                }
                keep
            });
            !records.is_empty()
        });
        self.totals.wasted_bytes += wasted;
    }

    /// Closes every record (e.g. at the end of a simulation); all unrequested bytes are
    /// waste.
    pub fn close_all(&mut self) {
        let wasted: u64 = self
            .files
            .values()
            .flat_map(|rs| rs.iter().map(Record::pending_bytes))
            .sum();
        self.totals.wasted_bytes += wasted;
        self.files.clear();
    }

    /// Over the file bound: close the least recently touched tenth of the files.
    fn shed_oldest_files(&mut self) {
        let mut ages: Vec<(f64, FileId)> = self
            .files
            .iter()
            .map(|(&f, rs)| (rs.iter().map(|r| r.touched_s).fold(f64::MIN, f64::max), f))
            .collect();
        ages.sort_by(|a, b| a.0.total_cmp(&b.0));
        let shed = (ages.len() / 10).max(1);
        for &(_, f) in &ages[..shed] {
            if let Some(rs) = self.files.remove(&f) {
                self.totals.wasted_bytes += rs.iter().map(Record::pending_bytes).sum::<u64>();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn none(_: u64, _: u64) -> u64 {
        0
    }

    fn all(a: u64, b: u64) -> u64 {
        b - a
    }

    #[test]
    fn misses_outside_the_prefetched_range_are_not_evictions() {
        let mut l = Ledger::default();
        // 1.3 MiB read for a 0.5 MiB request: the range ends mid-request later on.
        l.record_read(4, 0, MIB / 2, 13 * MIB / 10, 0.0);
        let mut asked = vec![];
        let e = l.record_request(4, MIB, 3 * MIB / 2, 1.0, |a, b| {
            asked.push((a, b));
            0 // the prefetched part is resident; only the tail past 1.3 MiB is not
        });
        assert_eq!(asked, [(MIB, 13 * MIB / 10)]);
        assert_eq!((e.evictions, e.used_bytes), (0, 13 * MIB / 10 - MIB));
    }

    #[test]
    fn sequential_viewer_uses_the_whole_prefetch() {
        let mut l = Ledger::default();
        // Request 0.5 MiB, read 2 MiB.
        l.record_read(1, 0, MIB / 2, 2 * MIB, 0.0);
        assert_eq!(l.totals().prefetched_bytes, 3 * MIB / 2);
        for i in 1..4 {
            let e = l.record_request(1, i * MIB / 2, (i + 1) * MIB / 2, i as f64 * 10.0, none);
            assert_eq!(e.used_bytes, MIB / 2);
            assert_eq!(e.evictions, 0);
        }
        assert_eq!(l.open_records(), 0);
        l.close_all();
        let t = l.totals();
        assert_eq!(
            (t.used_bytes, t.wasted_bytes, t.evicted_bytes),
            (3 * MIB / 2, 0, 0)
        );
    }

    #[test]
    fn evicted_prefetch_is_counted_with_its_age() {
        let mut l = Ledger::default();
        l.record_read(7, 0, MIB / 2, 4 * MIB, 100.0);
        l.record_request(7, MIB / 2, MIB, 110.0, none);
        // At 160 s the next half MiB is gone.
        let e = l.record_request(7, MIB, 3 * MIB / 2, 160.0, all);
        assert_eq!(e.evicted_bytes, MIB / 2);
        assert_eq!(e.evictions, 1);
        assert!((e.eviction_time_s - 60.0).abs() < 1e-9);
        // Only part missing: evicted bytes are capped by what was missing.
        let e = l.record_request(7, 3 * MIB / 2, 2 * MIB, 170.0, |_, _| 4096);
        assert_eq!((e.evicted_bytes, e.used_bytes), (4096, MIB / 2 - 4096));
        let t = l.totals().clone();
        assert_eq!(t.evictions, 2);
        assert_eq!(t.evicted_bytes, MIB / 2 + 4096);
    }

    #[test]
    fn a_sweep_dates_the_eviction_before_the_request_finds_it() {
        let mut l = Ledger::default();
        l.record_read(2, 0, MIB / 2, 2 * MIB, 10.0);
        let targets = l.sweep_targets(10);
        assert_eq!(targets.len(), 1);
        assert_eq!((targets[0].start, targets[0].end), (MIB / 2, 2 * MIB));
        l.mark_gone(2, targets[0].record, 25.0);
        l.mark_gone(2, targets[0].record, 30.0); // the first sighting counts
        assert!(l.sweep_targets(10).is_empty());
        let e = l.record_request(2, MIB / 2, MIB, 70.0, all);
        assert_eq!(e.evictions, 1);
        assert!((e.eviction_time_s - 15.0).abs() < 1e-9, "{e:?}");
    }

    #[test]
    fn viewer_who_stops_leaves_waste_after_the_ttl() {
        let mut l = Ledger::new(LedgerConfig {
            ttl_s: 40.0,
            ..Default::default()
        });
        l.record_read(3, 0, MIB / 2, 3 * MIB, 0.0);
        l.record_request(3, MIB / 2, MIB, 10.0, none);
        l.expire(30.0);
        assert_eq!(l.totals().wasted_bytes, 0, "still within ttl");
        l.expire(60.0);
        assert_eq!(l.totals().wasted_bytes, 2 * MIB);
        assert_eq!(l.open_records(), 0);
    }

    #[test]
    fn skipping_ahead_wastes_the_skipped_part_only() {
        let mut l = Ledger::default();
        l.record_read(1, 0, MIB, 4 * MIB, 0.0);
        l.record_request(1, 3 * MIB, 4 * MIB, 5.0, none);
        l.close_all();
        let t = l.totals();
        assert_eq!(t.used_bytes, MIB);
        assert_eq!(t.wasted_bytes, 2 * MIB);
    }

    #[test]
    fn re_prefetching_supersedes_and_bounds_hold() {
        let mut l = Ledger::new(LedgerConfig {
            max_ranges_per_file: 2,
            max_files: 10,
            ..Default::default()
        });
        l.record_read(1, 0, MIB, 2 * MIB, 0.0);
        l.record_read(1, MIB, MIB + 1, 3 * MIB, 1.0);
        assert_eq!(l.totals().superseded_bytes, MIB - 1);
        l.record_read(1, 10 * MIB, 11 * MIB, 12 * MIB, 2.0);
        l.record_read(1, 20 * MIB, 21 * MIB, 22 * MIB, 3.0);
        assert_eq!(l.open_records(), 2);
        assert_eq!(
            l.totals().wasted_bytes,
            2 * MIB,
            "oldest records pushed out"
        );
        for f in 100..120 {
            l.record_read(f, 0, 1, 2, f as f64);
        }
        assert!(l.files.len() <= 10);
    }
}
