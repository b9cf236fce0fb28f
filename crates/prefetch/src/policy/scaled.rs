//! The static policies: `none`, `fixed`, `proportional` and `sqrt` (thesis 5.6.1).
//!
//! None of them adapts; `proportional` and `sqrt` scale a size given for a reference bit
//! rate to the bit rate of the file being read.

use super::{proportional_scale, sqrt_scale, ClassLog, Policy, PolicyState, ReadContext};

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

/// Size proportional to the file's bit rate: `bytes` at `ref_kbps`.
#[derive(Clone, Debug)]
pub struct ProportionalPolicy {
    bytes: u64,
    ref_kbps: u32,
    log: ClassLog,
}

impl ProportionalPolicy {
    pub fn new(bytes: u64, ref_kbps: u32) -> Self {
        ProportionalPolicy {
            bytes,
            ref_kbps,
            log: ClassLog::default(),
        }
    }
}

impl Policy for ProportionalPolicy {
    fn prefetch_bytes(&mut self, ctx: &ReadContext) -> u64 {
        let kbps = ctx.bitrate();
        let size = proportional_scale(self.bytes, self.ref_kbps, kbps);
        self.log.note(kbps, size)
    }

    fn current(&self) -> PolicyState {
        PolicyState {
            policy: format!("proportional:{}@{}", self.bytes, self.ref_kbps),
            classes: self.log.classes(),
            ..Default::default()
        }
    }
}

/// Size proportional to the square root of the file's bit rate: `bytes` at `ref_kbps`.
#[derive(Clone, Debug)]
pub struct SqrtPolicy {
    bytes: u64,
    ref_kbps: u32,
    log: ClassLog,
}

impl SqrtPolicy {
    pub fn new(bytes: u64, ref_kbps: u32) -> Self {
        SqrtPolicy {
            bytes,
            ref_kbps,
            log: ClassLog::default(),
        }
    }
}

impl Policy for SqrtPolicy {
    fn prefetch_bytes(&mut self, ctx: &ReadContext) -> u64 {
        let kbps = ctx.bitrate();
        let size = sqrt_scale(self.bytes, self.ref_kbps, kbps);
        self.log.note(kbps, size)
    }

    fn current(&self) -> PolicyState {
        PolicyState {
            policy: format!("sqrt:{}@{}", self.bytes, self.ref_kbps),
            classes: self.log.classes(),
            ..Default::default()
        }
    }
}
