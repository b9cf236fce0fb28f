//! Prefetch policies: how many bytes to read when a request misses the page cache.
//!
//! A policy is a pure, deterministic state machine. It never reads a clock or touches a
//! file: every input arrives through [`ReadContext`] (one per cache miss) and
//! [`Observation`] (measurements fed back by whoever performs the I/O), each stamped with
//! a time in seconds. The server and the preload daemon pass wall-clock seconds since the
//! engine started; the simulator passes simulated seconds. The same inputs always give
//! the same sizes.
//!
//! The contract:
//! - [`Policy::prefetch_bytes`] is asked once per miss and answers the number of bytes to
//!   read starting at `ctx.offset`. The caller reads `max(answer, ctx.len)` bytes and
//!   clips at end of file ([`ReadContext::read_len`] does both). `0` means "read only what
//!   was requested".
//! - [`Policy::observe`] receives accounting deltas (disk time, bytes read, bytes
//!   requested, prefetch evictions, worker busy time) since the previous observation.
//!   Only `auto` uses them; the others ignore them.
//! - [`Policy::current`] reports the size in use per bit-rate class, for metrics.
//!
//! Policies are built from strings with [`PolicySpec`] (see `docs/prefetch.md`).

mod auto;
mod first_grow;
mod scaled;
mod spec;

pub use auto::{AutoParams, AutoPolicy, Scaling};
pub use first_grow::{FirstGrowParams, FirstGrowPolicy};
pub use scaled::{FixedPolicy, NonePolicy, ScaledPolicy};
pub use spec::{PolicySpec, SpecError};

pub use crate::chain::ChainKind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Bit rate assumed for files whose rate is unknown (the YouTube SD rate, thesis 3.3).
pub const DEFAULT_BITRATE_KBPS: u32 = 419;

pub use crate::FileId;

/// One cache miss, as presented to a policy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReadContext {
    pub file: FileId,
    /// First byte the client asked for.
    pub offset: u64,
    /// Bytes the client asked for (already clipped to the file).
    pub len: u64,
    pub file_size: u64,
    /// Nominal bit rate of the file; `None` means [`DEFAULT_BITRATE_KBPS`].
    pub bitrate_kbps: Option<u32>,
    /// Bytes of the request's chain before this request (0 for a chain's first request).
    pub chain_bytes: u64,
    pub chain_kind: ChainKind,
    /// Seconds on the caller's clock (real or simulated); must not go backwards.
    pub now_s: f64,
}

impl ReadContext {
    /// A context for a chain's first request with no bit rate, at time zero.
    pub fn new(file: FileId, offset: u64, len: u64, file_size: u64) -> Self {
        ReadContext {
            file,
            offset,
            len,
            file_size,
            bitrate_kbps: None,
            chain_bytes: 0,
            chain_kind: ChainKind::Other,
            now_s: 0.0,
        }
    }

    /// The bit rate to use for sizing.
    pub fn bitrate(&self) -> u32 {
        self.bitrate_kbps
            .filter(|&k| k > 0)
            .unwrap_or(DEFAULT_BITRATE_KBPS)
    }

    /// Bytes from `offset` to the end of the file.
    pub fn remaining(&self) -> u64 {
        self.file_size.saturating_sub(self.offset)
    }

    /// Bytes to actually read for a policy answer: at least the request, at most the
    /// rest of the file.
    pub fn read_len(&self, prefetch: u64) -> u64 {
        prefetch.max(self.len).min(self.remaining())
    }
}

/// Measurements since the previous observation (deltas, not totals).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// End of the measured period, on the same clock as [`ReadContext::now_s`].
    pub now_s: f64,
    /// Bytes clients asked for.
    pub requested_bytes: u64,
    /// Bytes read from disk (requested and prefetched).
    pub disk_bytes: u64,
    /// Seconds spent reading them.
    pub disk_time_s: f64,
    /// Seconds the I/O workers were busy, divided by the number of workers (so that
    /// `busy_s / period` is the busy fraction).
    pub busy_s: f64,
    /// Prefetched bytes found evicted when a client asked for them.
    pub evicted_bytes: u64,
    /// Number of such prefetch evictions (one per prefetched range).
    pub evictions: u64,
    /// Sum over those evictions of the seconds between prefetch and eviction.
    pub eviction_time_s: f64,
    /// The memory budget's prefetch pool per unit of √kbps over the active streams (the
    /// memory manager's share rule): a stream at `k` kbps may hold at most this × √k bytes
    /// of prefetch. `None` without a memory manager or without streams.
    #[serde(default)]
    pub budget_per_sqrt_kbps: Option<f64>,
}

impl Observation {
    /// Adds another delta into this one (keeps the later time).
    pub fn merge(&mut self, o: &Observation) {
        self.now_s = self.now_s.max(o.now_s);
        self.requested_bytes += o.requested_bytes;
        self.disk_bytes += o.disk_bytes;
        self.disk_time_s += o.disk_time_s;
        self.busy_s += o.busy_s;
        self.evicted_bytes += o.evicted_bytes;
        self.evictions += o.evictions;
        self.eviction_time_s += o.eviction_time_s;
        if o.budget_per_sqrt_kbps.is_some() {
            self.budget_per_sqrt_kbps = o.budget_per_sqrt_kbps;
        }
    }
}

/// Prefetch size in use for one bit-rate class.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassSize {
    pub bitrate_kbps: u32,
    pub bytes: u64,
}

/// What a policy is doing now, for metrics and logs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PolicyState {
    /// The spec string the policy was built from.
    pub policy: String,
    /// Current size per bit-rate class seen so far (sorted by bit rate).
    pub classes: Vec<ClassSize>,
    /// Policy-specific figures (e.g. `auto`: reference size, target, last score).
    pub detail: BTreeMap<String, f64>,
}

/// A prefetch policy; see the module documentation for the contract.
pub trait Policy: Send {
    /// Bytes to read from `ctx.offset` for this miss (0 = just the request).
    fn prefetch_bytes(&mut self, ctx: &ReadContext) -> u64;
    /// Feed measurements back; ignored by policies that do not adapt.
    fn observe(&mut self, _o: &Observation) {}
    /// Current sizes per bit-rate class.
    fn current(&self) -> PolicyState;
}

/// `size` for `ref_kbps`, scaled to `kbps` by the square-root rule (thesis 4.3).
pub fn sqrt_scale(size: u64, ref_kbps: u32, kbps: u32) -> u64 {
    if ref_kbps == 0 {
        return size;
    }
    (size as f64 * (kbps as f64 / ref_kbps as f64).sqrt()).round() as u64
}

/// `size` for `ref_kbps`, scaled in proportion to `kbps` (Gill and Bathen's rule).
pub fn proportional_scale(size: u64, ref_kbps: u32, kbps: u32) -> u64 {
    if ref_kbps == 0 {
        return size;
    }
    (size as f64 * kbps as f64 / ref_kbps as f64).round() as u64
}

/// Remembers the last size handed out per bit-rate class, for [`PolicyState`].
#[derive(Clone, Debug, Default)]
pub(crate) struct ClassLog {
    sizes: BTreeMap<u32, u64>,
}

impl ClassLog {
    /// Records `bytes` for `kbps` and returns it.
    pub(crate) fn note(&mut self, kbps: u32, bytes: u64) -> u64 {
        self.sizes.insert(kbps, bytes);
        bytes
    }

    pub(crate) fn kbps(&self) -> impl Iterator<Item = u32> + '_ {
        self.sizes.keys().copied()
    }

    pub(crate) fn classes(&self) -> Vec<ClassSize> {
        self.sizes
            .iter()
            .map(|(&bitrate_kbps, &bytes)| ClassSize {
                bitrate_kbps,
                bytes,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
