//! The resource model of thesis 5.6.2: per-chain prefetch schedules, disk utilization per
//! drive and interval, and the memory held by prefetch buffers over time.
//!
//! See `docs/simulate.md` for the model stated precisely; in short:
//! - a chain's progress runs linearly from its first byte at `t_start` to its last byte at
//!   `t_end`; the first prefetch happens at `t_start`, each later one when progress reaches
//!   the bytes already read; the policy chooses each size; the last read may run past the
//!   chain's end (waste) and is clipped only at the end of the file;
//! - each prefetch adds its bytes and one seek to its drive's interval; utilization of an
//!   interval is `(bytes / t_max + seeks / s_max) / interval`;
//! - each chain holds a buffer the size of its latest read from `t_start` until
//!   `release_after` seconds past `t_end`; memory is the sum over chains.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};
use vodkit_disk::model::capacity::{capacity, DiskCapacity};
use vodkit_disk::model::preset::{preset, PRESET_NAMES};
use vodkit_disk::model::zones::MIB;
use vodkit_prefetch::{Observation, Policy, ReadContext};

use crate::input::{SimChain, Trace};

/// The two limits of a drive the utilization is measured against.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Capacity {
    /// Maximum (sequential) transfer rate in MB/s, where MB = 2^20 bytes as in the disk model.
    pub t_max_mb_s: f64,
    /// Maximum seeks per second (thesis Eq. 5.4).
    pub s_max_per_s: f64,
}

impl Capacity {
    /// From a drive preset of the disk model: `t_max` is the outer-zone sequential rate,
    /// `s_max` comes from Eq. 5.4 with the model's random 2 MB throughput.
    pub fn from_preset(name: &str) -> Result<Capacity, String> {
        let spec = preset(name).ok_or_else(|| {
            format!(
                "unknown drive preset `{name}` (expected one of {})",
                PRESET_NAMES.join(", ")
            )
        })?;
        Ok(Capacity::from_disk(&capacity(&spec)))
    }

    /// The capacity of a drive preset already parsed.
    pub fn of_preset(p: vodkit_disk::model::Preset) -> Capacity {
        Capacity::from_disk(&capacity(&p.spec()))
    }

    pub fn from_disk(c: &DiskCapacity) -> Capacity {
        Capacity {
            t_max_mb_s: c.t_max_mb_s,
            s_max_per_s: c.s_max_per_s,
        }
    }

    /// Given figures; both must be positive.
    pub fn given(t_max_mb_s: f64, s_max_per_s: f64) -> Result<Capacity, String> {
        for (what, v) in [("--t-max", t_max_mb_s), ("--s-max", s_max_per_s)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{what} must be a positive number, got {v}"));
            }
        }
        Ok(Capacity {
            t_max_mb_s,
            s_max_per_s,
        })
    }

    /// `t_max` in bytes per second.
    pub fn t_max_bytes_s(&self) -> f64 {
        self.t_max_mb_s * MIB
    }

    /// Seconds of a drive's time that `bytes` of transfer and `seeks` seeks take.
    pub fn busy_seconds(&self, bytes: f64, seeks: f64) -> f64 {
        bytes / self.t_max_bytes_s() + seeks / self.s_max_per_s
    }
}

/// Parameters of the model.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    pub capacity: Capacity,
    /// Length of an accounting interval (thesis: 60 s).
    pub interval_s: f64,
    /// How long a chain's buffer outlives the chain (thesis: 40 s, the chain window).
    pub release_after_s: f64,
}

impl ModelConfig {
    pub fn new(capacity: Capacity) -> ModelConfig {
        ModelConfig {
            capacity,
            interval_s: 60.0,
            release_after_s: vodkit_prefetch::CHAIN_WINDOW_S,
        }
    }
}

/// What one policy (with one parameter) costs on one trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// Highest utilization of any drive in any interval (1.0 = 100%).
    pub max_disk_util: f64,
    /// Drive index and interval index where it happened.
    pub busiest_drive: u32,
    pub busiest_interval: u64,
    /// Highest total of prefetch buffers at any moment.
    pub max_memory_bytes: u64,
    /// When that peak began (seconds on the trace clock).
    pub memory_peak_s: f64,
    /// No drive above 100% in any interval.
    pub feasible: bool,
    pub prefetches: u64,
    /// Bytes read from the drives.
    pub disk_bytes: u64,
    /// Bytes the chains cover.
    pub chain_bytes: u64,
    /// Bytes read past the chains' ends.
    pub wasted_bytes: u64,
}

/// Calls `visit(time, bytes)` for every prefetch of `chain` under `policy`; returns the
/// bytes read in total. A policy answer of 0 (read only what was asked) ends the schedule,
/// since the model has no requests to read.
pub fn for_each_prefetch(
    chain: &SimChain,
    policy: &mut dyn Policy,
    mut visit: impl FnMut(f64, u64),
) -> u64 {
    let mut fetched = 0u64;
    while fetched < chain.bytes {
        let t = progress_time(chain, fetched);
        let n = next_read(chain, policy, fetched, t);
        if n == 0 {
            break;
        }
        visit(t, n);
        fetched += n;
    }
    fetched
}

/// When the simulator may stop asking a policy within a chain and reuse its last answer.
/// Every rule gives results identical to asking at every read (tests check this on
/// hand-built and synthesized traces); they only save policy calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reuse {
    /// Ask at every read.
    Never,
    /// Ask once per chain: the answer depends only on the file's bit rate (`fixed`,
    /// `proportional`, `sqrt`).
    PerChain,
    /// Stop asking once two answers after the first read are equal: the answer is
    /// `min(growth × chain bytes, cap)`, non-decreasing in the chain bytes, so two equal
    /// answers at different chain lengths mean the cap is reached (`first-grow`,
    /// `first-grow-sr`).
    OnceCapped,
}

/// [`for_each_prefetch`] with a [`Reuse`] rule: the same reads with fewer policy calls.
pub fn for_each_read(
    chain: &SimChain,
    policy: &mut dyn Policy,
    reuse: Reuse,
    mut visit: impl FnMut(f64, u64),
) -> u64 {
    let mut fetched = 0u64;
    let mut settled: Option<u64> = None;
    let mut last_grown: Option<u64> = None;
    while fetched < chain.bytes {
        let t = progress_time(chain, fetched);
        let n = match settled {
            // A settled answer is clipped at the end of the file like any read.
            Some(size) => size.min(chain.file_size.saturating_sub(chain.offset + fetched)),
            None => {
                let n = next_read(chain, policy, fetched, t);
                match reuse {
                    Reuse::Never => {}
                    Reuse::PerChain => settled = Some(n),
                    Reuse::OnceCapped if fetched > 0 => {
                        if last_grown == Some(n) {
                            settled = Some(n);
                        }
                        last_grown = Some(n);
                    }
                    Reuse::OnceCapped => {}
                }
                n
            }
        };
        if n == 0 {
            break;
        }
        visit(t, n);
        fetched += n;
    }
    fetched
}

/// Time at which the chain's linear progress reaches `fetched` bytes.
#[inline]
fn progress_time(chain: &SimChain, fetched: u64) -> f64 {
    if fetched == 0 {
        chain.t_start
    } else {
        chain.t_start + (chain.t_end - chain.t_start) * (fetched as f64 / chain.bytes as f64)
    }
}

/// Size of the read the policy asks for when the chain has `fetched` bytes in memory.
#[inline]
fn next_read(chain: &SimChain, policy: &mut dyn Policy, fetched: u64, t: f64) -> u64 {
    let ctx = ReadContext {
        file: u64::from(chain.file),
        offset: chain.offset + fetched,
        len: 0,
        file_size: chain.file_size,
        bitrate_kbps: chain.bitrate_kbps,
        chain_bytes: fetched,
        chain_kind: chain.kind,
        now_s: t,
    };
    ctx.read_len(policy.prefetch_bytes(&ctx))
}

/// Runs policies over one trace. Reusable scratch space lives in [`Scratch`], one per
/// worker thread.
#[derive(Clone, Debug)]
pub struct Simulator<'a> {
    trace: &'a Trace,
    cfg: ModelConfig,
    origin: f64,
    intervals: usize,
    drives: usize,
}

/// Per-worker accumulators, reused between runs.
#[derive(Clone, Debug, Default)]
pub struct Scratch {
    bytes: Vec<u64>,
    seeks: Vec<u32>,
    /// Memory changes: (time since origin as ordered bits, change in bytes).
    events: Vec<(u64, i64)>,
    /// The same in time order, and bucket counts for sorting them.
    sorted: Vec<(u64, i64)>,
    counts: Vec<u32>,
}

impl<'a> Simulator<'a> {
    pub fn new(trace: &'a Trace, cfg: ModelConfig) -> Result<Simulator<'a>, String> {
        if !(cfg.interval_s.is_finite() && cfg.interval_s > 0.0) {
            return Err(format!(
                "interval must be a positive duration, got {} s",
                cfg.interval_s
            ));
        }
        if !(cfg.release_after_s.is_finite() && cfg.release_after_s >= 0.0) {
            return Err(format!(
                "release-after must be a duration >= 0, got {} s",
                cfg.release_after_s
            ));
        }
        let origin = trace.origin_s();
        let span = trace.end_s() - origin;
        let intervals = (span / cfg.interval_s).floor() as usize + 1;
        Ok(Simulator {
            trace,
            cfg,
            origin,
            intervals,
            drives: trace.drives.len().max(1),
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    pub fn trace(&self) -> &Trace {
        self.trace
    }

    /// Number of accounting intervals the trace spans.
    pub fn intervals(&self) -> usize {
        self.intervals
    }

    #[inline]
    fn slot(&self, drive: u32, t: f64) -> usize {
        // A division, not a multiplication by the inverse: a read exactly at an interval
        // boundary must land in the later interval.
        let i = (((t - self.origin) / self.cfg.interval_s) as usize).min(self.intervals - 1);
        i * self.drives + drive as usize
    }

    #[inline]
    fn key(&self, t: f64) -> u64 {
        // Non-negative finite floats order like their bit patterns.
        (t - self.origin).max(0.0).to_bits()
    }

    fn reset(&self, s: &mut Scratch) {
        let cells = self.intervals * self.drives;
        s.bytes.clear();
        s.bytes.resize(cells, 0);
        s.seeks.clear();
        s.seeks.resize(cells, 0);
        s.events.clear();
    }

    /// Runs one policy over every chain, chain by chain. Right for policies whose answers
    /// do not depend on observations (all but `auto`); see [`Simulator::run_timed`].
    pub fn run(&self, policy: &mut dyn Policy, s: &mut Scratch) -> RunResult {
        self.run_with(policy, s, Reuse::Never)
    }

    /// As [`Simulator::run`], asking the policy less often as `reuse` allows (same
    /// results, faster).
    pub fn run_with(&self, policy: &mut dyn Policy, s: &mut Scratch, reuse: Reuse) -> RunResult {
        self.reset(s);
        let mut r = RunResult::default();
        let release = self.cfg.release_after_s;
        for c in &self.trace.chains {
            let mut held = 0u64;
            let visit = |t: f64, n: u64| {
                let k = self.slot(c.drive, t);
                s.bytes[k] += n;
                s.seeks[k] += 1;
                r.prefetches += 1;
                if n != held {
                    s.events.push((self.key(t), n as i64 - held as i64));
                    held = n;
                }
            };
            let fetched = for_each_read(c, policy, reuse, visit);
            if held > 0 {
                s.events.push((self.key(c.t_end + release), -(held as i64)));
            }
            r.disk_bytes += fetched;
            r.chain_bytes += c.bytes;
            r.wasted_bytes += fetched.saturating_sub(c.bytes);
        }
        self.finish(r, s)
    }

    /// Runs one policy over all chains in global time order, feeding it one
    /// [`Observation`] per interval (for `auto`). Gives the same result as
    /// [`Simulator::run`] for policies that ignore observations.
    pub fn run_timed(&self, policy: &mut dyn Policy, s: &mut Scratch) -> RunResult {
        self.reset(s);
        let mut r = RunResult::default();
        let release = self.cfg.release_after_s;
        let chains = &self.trace.chains;
        // (time key, chain index); `state` holds per-chain bytes fetched and buffer held.
        let mut heap: BinaryHeap<Reverse<(u64, u32)>> = chains
            .iter()
            .enumerate()
            .filter(|(_, c)| c.bytes > 0)
            .map(|(i, c)| Reverse((self.key(c.t_start), i as u32)))
            .collect();
        let mut state = vec![(0u64, 0u64); chains.len()];
        let mut obs = Observation::default();
        let mut obs_interval = 0usize;
        while let Some(Reverse((_, i))) = heap.pop() {
            let c = &chains[i as usize];
            let (fetched, held) = state[i as usize];
            let t = progress_time(c, fetched);
            let interval =
                (((t - self.origin) / self.cfg.interval_s) as usize).min(self.intervals - 1);
            while obs_interval < interval {
                obs_interval += 1;
                obs.now_s = self.origin + obs_interval as f64 * self.cfg.interval_s;
                policy.observe(&obs);
                obs = Observation::default();
            }
            let n = next_read(c, policy, fetched, t);
            if n == 0 {
                // The policy stopped reading: the chain ends here for the model.
                if held > 0 {
                    s.events.push((self.key(c.t_end + release), -(held as i64)));
                }
                r.disk_bytes += fetched;
                continue;
            }
            let k = self.slot(c.drive, t);
            s.bytes[k] += n;
            s.seeks[k] += 1;
            r.prefetches += 1;
            let busy = self.cfg.capacity.busy_seconds(n as f64, 1.0);
            obs.requested_bytes += n.min(c.bytes - fetched);
            obs.disk_bytes += n;
            obs.disk_time_s += busy;
            obs.busy_s += busy / self.drives as f64;
            if n != held {
                s.events.push((self.key(t), n as i64 - held as i64));
            }
            let fetched = fetched + n;
            state[i as usize] = (fetched, n);
            if fetched < c.bytes {
                heap.push(Reverse((self.key(progress_time(c, fetched)), i)));
            } else {
                s.events.push((self.key(c.t_end + release), -(n as i64)));
                r.disk_bytes += fetched;
                r.wasted_bytes += fetched - c.bytes;
            }
        }
        for c in chains {
            r.chain_bytes += c.bytes;
        }
        self.finish(r, s)
    }

    fn finish(&self, mut r: RunResult, s: &mut Scratch) -> RunResult {
        let cap = &self.cfg.capacity;
        let per_byte = 1.0 / (cap.t_max_bytes_s() * self.cfg.interval_s);
        let per_seek = 1.0 / (cap.s_max_per_s * self.cfg.interval_s);
        for (k, (&b, &n)) in s.bytes.iter().zip(&s.seeks).enumerate() {
            let u = b as f64 * per_byte + f64::from(n) * per_seek;
            if u > r.max_disk_util {
                r.max_disk_util = u;
                r.busiest_drive = (k % self.drives) as u32;
                r.busiest_interval = (k / self.drives) as u64;
            }
        }
        r.feasible = r.max_disk_util <= 1.0;
        // About one event per bucket, so most buckets need no sorting.
        let span = self.intervals as f64 * self.cfg.interval_s + self.cfg.release_after_s;
        let bucket_s = (span / s.events.len().max(1) as f64).max(1e-3);
        let (peak, at) = peak_memory(s, bucket_s);
        r.max_memory_bytes = peak;
        r.memory_peak_s = self.origin + at;
        r
    }
}

/// Highest running total of the memory changes, applying all changes that happen at the
/// same moment together; returns the peak and when it began (seconds since the origin).
///
/// The events are put in time order by a counting sort on `bucket_s`-wide time buckets
/// followed by a sort within each (small) bucket.
fn peak_memory(s: &mut Scratch, bucket_s: f64) -> (u64, f64) {
    let bucket = |key: u64| (f64::from_bits(key) / bucket_s) as usize;
    let buckets = s
        .events
        .iter()
        .map(|e| bucket(e.0))
        .max()
        .map_or(0, |b| b + 1);
    s.counts.clear();
    s.counts.resize(buckets, 0);
    for e in &s.events {
        s.counts[bucket(e.0)] += 1;
    }
    let mut start = 0u32;
    for c in s.counts.iter_mut() {
        let n = *c;
        *c = start;
        start += n;
    }
    s.sorted.clear();
    s.sorted.resize(s.events.len(), (0, 0));
    for &e in &s.events {
        let b = bucket(e.0);
        s.sorted[s.counts[b] as usize] = e;
        s.counts[b] += 1;
    }
    // counts[b] is now the end of bucket b.
    let mut from = 0usize;
    for &end in &s.counts {
        let end = end as usize;
        if end - from > 1 {
            s.sorted[from..end].sort_unstable_by_key(|e| e.0);
        }
        from = end;
    }
    let events = &s.sorted;
    let mut total = 0i64;
    let mut peak = 0i64;
    let mut at = 0.0;
    let mut i = 0;
    while i < events.len() {
        let key = events[i].0;
        while i < events.len() && events[i].0 == key {
            total += events[i].1;
            i += 1;
        }
        if total > peak {
            peak = total;
            at = f64::from_bits(key);
        }
    }
    (peak.max(0) as u64, at)
}
