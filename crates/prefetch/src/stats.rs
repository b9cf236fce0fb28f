//! The engine's accounting as a serializable snapshot, and a periodic log line.

use crate::ledger::LedgerTotals;
use crate::policy::PolicyState;
use serde::{Deserialize, Serialize};

/// Per-device figures.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceStats {
    pub device: String,
    /// Reads issued to this device.
    pub reads: u64,
    /// Bytes those reads covered.
    pub read_bytes: u64,
    /// Of those, bytes that were not in memory before the read (really from disk).
    pub disk_bytes: u64,
    /// Seconds with at least one read in progress.
    pub busy_s: f64,
    /// `busy_s` over the engine's lifetime.
    pub busy_fraction: f64,
    /// Busy fraction over the last observation period (about a second).
    pub recent_busy_fraction: f64,
    /// Reads waiting or running now.
    pub queue_depth: u64,
    /// Reads that finished after the client waiting for them ran dry, as
    /// [`crate::schedule::Deadlines`] estimates it (serializing modes; 0 with the pool).
    #[serde(default)]
    pub late_reads: u64,
    /// Seconds the device's reads waited in its queue before its worker started them, summed
    /// (over `reads`: the mean queue wait).
    #[serde(default)]
    pub wait_s: f64,
    /// What a read of this device costs, learned from its reads
    /// ([`crate::service::ServiceFit`]): a positioning, ms, and the transfer rate, MB/s
    /// (absent until enough reads of different sizes were seen).
    pub positioning_ms: Option<f64>,
    pub transfer_mb_s: Option<f64>,
}

/// Everything the engine counts (totals since start).
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub uptime_s: f64,
    pub mode: String,
    /// Requests checked.
    pub requests: u64,
    /// Requests found entirely in memory.
    pub hits: u64,
    /// Requests with at least one byte missing.
    pub misses: u64,
    pub requested_bytes: u64,
    /// Requested bytes that were already in memory.
    pub memory_bytes: u64,
    /// Requested bytes that had to come from disk.
    pub missed_bytes: u64,
    /// Reads issued and the bytes they covered (requests plus prefetch).
    pub reads: u64,
    pub read_bytes: u64,
    pub read_errors: u64,
    /// Misses that waited for a read already queued or running instead of a new read.
    pub joined: u64,
    /// Bytes the reads really fetched from disk (not already cached).
    pub disk_bytes: u64,
    /// Prefetch accounting (prefetched, used, evicted, eviction time, wasted).
    pub prefetch: LedgerTotals,
    /// Mean time from prefetch to discovering its eviction, seconds.
    pub eviction_time_mean_s: f64,
    /// Device busy seconds, summed over devices.
    pub disk_time_s: f64,
    /// Device busy milliseconds per 128 KiB fetched from disk (the thesis' ms/t).
    pub disk_ms_per_128k: f64,
    pub devices: Vec<DeviceStats>,
    pub policy: PolicyState,
    /// The memory manager's levels and totals, when the engine runs one.
    pub memory: Option<crate::memory::MemoryTotals>,
    /// What the memory manager's page-cache drops achieved (buffered modes).
    pub drops: DropStats,
    /// The `direct` mode's buffer pool (pool bytes, capacity, chunks, direct and fallback
    /// reads), in that mode only.
    pub direct: Option<crate::direct::DirectStats>,
}

impl Stats {
    /// Fills the derived fields from the totals.
    pub(crate) fn derive(&mut self) {
        let p = &self.prefetch;
        self.eviction_time_mean_s = if p.evictions > 0 {
            p.eviction_time_s / p.evictions as f64
        } else {
            0.0
        };
        self.disk_ms_per_128k = if self.disk_bytes > 0 {
            self.disk_time_s * 1000.0 / (self.disk_bytes as f64 / 131_072.0)
        } else {
            0.0
        };
    }
}

/// What `POSIX_FADV_DONTNEED` drops achieved (totals, bytes).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DropStats {
    /// Bytes the memory manager asked to drop.
    pub issued_bytes: u64,
    /// Of those, bytes of files the engine no longer held open (not dropped).
    pub unheld_bytes: u64,
    /// Bytes still resident right after their first drop (retried by the sweeper).
    pub stuck_bytes: u64,
    /// Bytes still resident after every retry (left to the kernel).
    pub gave_up_bytes: u64,
    /// Bytes whose retry was cancelled because a stream wants them again.
    pub claimed_bytes: u64,
}

/// Formats one log line per call with rates since the previous call.
#[derive(Debug, Default)]
pub struct StatsLog {
    prev: Option<Stats>,
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

impl StatsLog {
    pub fn new() -> Self {
        StatsLog::default()
    }

    /// One line summarising the period since the last call (or since start).
    pub fn line(&mut self, cur: &Stats) -> String {
        let zero = Stats::default();
        let prev = self.prev.as_ref().unwrap_or(&zero);
        let dt = (cur.uptime_s - prev.uptime_s).max(1e-9);
        let rate = |c: u64, p: u64| mb(c.saturating_sub(p)) / dt;
        let busy = cur
            .devices
            .iter()
            .map(|d| format!("{}={:.0}%", d.device, d.recent_busy_fraction * 100.0))
            .collect::<Vec<_>>()
            .join(",");
        let sizes = cur
            .policy
            .classes
            .iter()
            .map(|c| format!("{}k={:.2}MB", c.bitrate_kbps, mb(c.bytes)))
            .collect::<Vec<_>>()
            .join(",");
        let (p, q) = (&cur.prefetch, &prev.prefetch);
        let pool = cur
            .direct
            .as_ref()
            .map(|d| {
                format!(
                    " | pool {:.1}/{:.1}MB direct {} fallback {}",
                    mb(d.pool_bytes),
                    mb(d.capacity_bytes),
                    d.direct_reads,
                    d.fallback_reads
                )
            })
            .unwrap_or_default();
        let memory = cur
            .memory
            .as_ref()
            .map(|m| {
                format!(
                    " | budget {:.0}MB: unconsumed {:.1} kept {:.1} consumed-cached {:.1} unreleased {:.1} other {:.1} pool {:.1} \
                     streams {} ({} weighted) capped {} | drops {:.1} MB/s unheld {:.1} stuck {:.1} gave-up {:.1} claimed {:.1}",
                    mb(m.budget_bytes),
                    mb(m.unconsumed_bytes),
                    mb(m.kept_bytes),
                    mb(m.consumed_cached_bytes),
                    mb(m.unreleased_bytes),
                    mb(m.other_bytes),
                    mb(m.prefetch_pool_bytes),
                    m.streams,
                    m.weighted_streams,
                    m.capped_reads - prev.memory.as_ref().map_or(0, |p| p.capped_reads).min(m.capped_reads),
                    rate(cur.drops.issued_bytes, prev.drops.issued_bytes),
                    rate(cur.drops.unheld_bytes, prev.drops.unheld_bytes),
                    rate(cur.drops.stuck_bytes, prev.drops.stuck_bytes),
                    rate(cur.drops.gave_up_bytes, prev.drops.gave_up_bytes),
                    rate(cur.drops.claimed_bytes, prev.drops.claimed_bytes),
                )
            })
            .unwrap_or_default();
        let line = format!(
            "prefetch[{mode}] req {req:.1} MB/s mem {mem:.1} disk {disk:.1} prefetched {pf:.1} \
             evicted {ev:.2} wasted {w:.2} | hits {h} misses {m} | {ms:.1} ms/128K evict-time {et:.0}s \
             | busy {busy} | size {sizes}{pool}{memory}",
            mode = cur.mode,
            req = rate(cur.requested_bytes, prev.requested_bytes),
            mem = rate(cur.memory_bytes, prev.memory_bytes),
            disk = rate(cur.disk_bytes, prev.disk_bytes),
            pf = rate(p.prefetched_bytes, q.prefetched_bytes),
            ev = rate(p.evicted_bytes, q.evicted_bytes),
            w = rate(p.wasted_bytes, q.wasted_bytes),
            h = cur.hits - prev.hits.min(cur.hits),
            m = cur.misses - prev.misses.min(cur.misses),
            ms = cur.disk_ms_per_128k,
            et = cur.eviction_time_mean_s,
        );
        self.prev = Some(cur.clone());
        line
    }
}
