//! The static policies: `none`, `fixed`, `proportional` and `sqrt` (thesis 5.6.1).
//!
//! None of them adapts; `proportional` and `sqrt` scale a size given for a reference bit
//! rate to the bit rate of the file being read.

use super::auto::Scaling;
use super::{ClassLog, Policy, PolicyState, ReadContext};

/// Reads exactly what was requested.
#[derive(Clone, Debug, Default)]
pub struct NonePolicy {
    log: ClassLog,
}

impl Policy for NonePolicy {
    fn prefetch_bytes(&mut self, ctx: &ReadContext) -> u64 {
        self.log.note(ctx.bitrate(), 0)
    }

    fn current(&self) -> PolicyState {
        PolicyState {
            policy: "none".into(),
            classes: self.log.classes(),
            ..Default::default()
        }
    }
}

/// One size for every file.
#[derive(Clone, Debug)]
pub struct FixedPolicy {
    bytes: u64,
    log: ClassLog,
}

impl FixedPolicy {
    pub fn new(bytes: u64) -> Self {
        FixedPolicy {
            bytes,
            log: ClassLog::default(),
        }
    }
}

impl Policy for FixedPolicy {
    fn prefetch_bytes(&mut self, ctx: &ReadContext) -> u64 {
        self.log.note(ctx.bitrate(), self.bytes)
    }

    fn current(&self) -> PolicyState {
        PolicyState {
            policy: format!("fixed:{}", self.bytes),
            classes: self.log.classes(),
            ..Default::default()
        }
    }
}

/// A size given for a reference bit rate, scaled to the bit rate of the file being read:
/// `bytes` at `ref_kbps`, in proportion to the bit rate (`proportional`) or to its square
/// root (`sqrt`).
#[derive(Clone, Debug)]
pub struct ScaledPolicy {
    scaling: Scaling,
    bytes: u64,
    ref_kbps: u32,
    log: ClassLog,
}

impl ScaledPolicy {
    pub fn new(scaling: Scaling, bytes: u64, ref_kbps: u32) -> Self {
        ScaledPolicy {
            scaling,
            bytes,
            ref_kbps,
            log: ClassLog::default(),
        }
    }
}

impl Policy for ScaledPolicy {
    fn prefetch_bytes(&mut self, ctx: &ReadContext) -> u64 {
        let kbps = ctx.bitrate();
        let size = self.scaling.scale(self.bytes, self.ref_kbps, kbps);
        self.log.note(kbps, size)
    }

    fn current(&self) -> PolicyState {
        PolicyState {
            policy: format!("{}:{}@{}", self.scaling.name(), self.bytes, self.ref_kbps),
            classes: self.log.classes(),
            ..Default::default()
        }
    }
}
