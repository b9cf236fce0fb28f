//! `first-grow` and `first-grow-sr` (thesis 5.6.1, Table 5.6).
//!
//! A chain's first miss gets a size chosen by how the chain began (open-ended request at
//! offset zero, chunk request at offset zero, or anything else). Later misses read
//! `growth × bytes of the chain so far` (3.35: the survival distance at which 45% of
//! chains between 1 MB and 200 MB live on), never more than a maximum. For
//! `first-grow-sr` the maximum is given for a reference bit rate and scaled to each file
//! by the square-root rule.

use super::{sqrt_scale, ChainKind, ClassLog, Policy, PolicyState, ReadContext};
use std::collections::BTreeMap;

/// First-prefetch size for chains of open-ended requests starting at zero (Table 5.6).
pub const FIRST_OPEN_AT_ZERO: u64 = 1_049_212;
/// First-prefetch size for chains of chunk requests starting at zero (Table 5.6).
pub const FIRST_CHUNK_AT_ZERO: u64 = 131_073;
/// First-prefetch size for chains starting later in the file (Table 5.6).
pub const FIRST_OTHER: u64 = 2_936_037;
/// Growth multiplier for 45% survival (thesis 5.3.3).
pub const GROWTH: f64 = 3.35;
/// Default cap; the thesis found First-Grow-SR at its best with a 16 MB parameter.
pub const DEFAULT_MAX_BYTES: u64 = 16 << 20;
/// Reference bit rate of the cap for `first-grow-sr` (thesis Fig. 5.22/5.23 use 2,000 kbps).
pub const DEFAULT_SR_REF_KBPS: u32 = 2000;

/// Parameters of `first-grow` / `first-grow-sr`.
#[derive(Clone, Debug, PartialEq)]
pub struct FirstGrowParams {
    pub first_open_at_zero: u64,
    pub first_chunk_at_zero: u64,
    pub first_other: u64,
    pub growth: f64,
    /// Cap on any prefetch (for `first-grow-sr`: the cap at `sr_ref_kbps`).
    pub max_bytes: u64,
    /// `Some(ref)` makes this `first-grow-sr`: the cap scales with √(bitrate / ref).
    pub sr_ref_kbps: Option<u32>,
}

impl Default for FirstGrowParams {
    fn default() -> Self {
        FirstGrowParams {
            first_open_at_zero: FIRST_OPEN_AT_ZERO,
            first_chunk_at_zero: FIRST_CHUNK_AT_ZERO,
            first_other: FIRST_OTHER,
            growth: GROWTH,
            max_bytes: DEFAULT_MAX_BYTES,
            sr_ref_kbps: None,
        }
    }
}

impl FirstGrowParams {
    /// Defaults for `first-grow-sr`.
    pub fn square_root() -> Self {
        FirstGrowParams {
            sr_ref_kbps: Some(DEFAULT_SR_REF_KBPS),
            ..Default::default()
        }
    }

    /// The first-prefetch size for a chain of this kind.
    pub fn first(&self, kind: ChainKind) -> u64 {
        match kind {
            ChainKind::OpenAtZero => self.first_open_at_zero,
            ChainKind::ChunkAtZero => self.first_chunk_at_zero,
            ChainKind::Other => self.first_other,
        }
    }

    /// The cap for a file of `kbps`.
    pub fn cap(&self, kbps: u32) -> u64 {
        match self.sr_ref_kbps {
            Some(r) => sqrt_scale(self.max_bytes, r, kbps),
            None => self.max_bytes,
        }
    }
}

/// The First-Grow policy (with or without the square-root cap).
#[derive(Clone, Debug)]
pub struct FirstGrowPolicy {
    params: FirstGrowParams,
    spec: String,
    log: ClassLog,
}

impl FirstGrowPolicy {
    pub fn new(params: FirstGrowParams, spec: String) -> Self {
        FirstGrowPolicy {
            params,
            spec,
            log: ClassLog::default(),
        }
    }
}

impl Policy for FirstGrowPolicy {
    fn prefetch_bytes(&mut self, ctx: &ReadContext) -> u64 {
        let kbps = ctx.bitrate();
        let wanted = if ctx.chain_bytes == 0 {
            self.params.first(ctx.chain_kind)
        } else {
            (ctx.chain_bytes as f64 * self.params.growth).round() as u64
        };
        self.log.note(kbps, wanted.min(self.params.cap(kbps)))
    }

    fn current(&self) -> PolicyState {
        let mut detail = BTreeMap::new();
        detail.insert("max_bytes".into(), self.params.max_bytes as f64);
        detail.insert("growth".into(), self.params.growth);
        // For metrics, report each class's cap: the size a long chain settles at.
        let classes = self
            .log
            .kbps()
            .map(|kbps| super::ClassSize {
                bitrate_kbps: kbps,
                bytes: self.params.cap(kbps),
            })
            .collect();
        PolicyState {
            policy: self.spec.clone(),
            classes,
            detail,
        }
    }
}
