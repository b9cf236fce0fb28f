//! First-Grow's parameters from the trace itself (thesis 5.6.1, 5.3.3).
//!
//! *First sizes*: for each category of chain (open-ended at offset 0, chunk at offset 0,
//! other) the first prefetch size is the one with the lowest cost-benefit ratio over the
//! category's chains. The benefit of a size `s` is the data the chains request within
//! their first `s` bytes, `Σ min(L, s)`; the cost is the disk time of reading what they do
//! not request, `Σ max(s − L, 0) / t_max`, plus one seek for every chain longer than `s`
//! (it needs another prefetch), `#{L > s} / s_max`. Categories with too few chains fall
//! back to thesis Table 5.6.
//!
//! *Growth*: the survival fit of the chain lengths (power law per segment, Eq. 5.1) gives
//! the factor `P^(−1/c) − 1` (Eq. 5.3) by which a chain of the 1 MB–200 MB segment grows
//! with probability `P`.

use serde::{Deserialize, Serialize};
use vodkit_prefetch::policy::FirstGrowParams;
use vodkit_prefetch::ChainKind;
use vodkit_trace::fit::PowerLawFit;

use crate::input::Trace;
use crate::model::Capacity;

/// Fewest chains in a category for the trace's own analysis to be used.
pub const MIN_CHAINS: usize = 30;
/// Candidate first sizes are limited to this range (bytes).
pub const MIN_FIRST: u64 = 4096;
pub const MAX_FIRST: u64 = 64 << 20;
/// Segment breakpoints of the survival fit (thesis 5.3.3: 1 MB and 200 MB).
pub const BREAKPOINTS: [f64; 2] = [1e6, 2e8];
/// Length at which the growth factor is read off the fit (inside the middle segment).
pub const GROWTH_AT: f64 = 1e7;

/// The first size chosen for one category of chain.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FirstSize {
    pub bytes: u64,
    /// `trace` (cost-benefit over this trace) or `table-5.6` (fallback).
    pub source: String,
    /// Chains of this category in the trace.
    pub chains: usize,
    /// Disk milliseconds of overhead per MB of benefit at the chosen size (trace only).
    pub cost_ms_per_mb: Option<f64>,
}

/// The growth factor and where it came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Growth {
    pub factor: f64,
    pub probability: f64,
    /// Exponent `c` of the fitted segment, when the fit was used.
    pub exponent: Option<f64>,
    /// `fit` or `default` (3.35, thesis 5.3.3).
    pub source: String,
}

/// Everything First-Grow needs besides its maximum size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FirstGrowSetup {
    pub open_at_zero: FirstSize,
    pub chunk_at_zero: FirstSize,
    pub other: FirstSize,
    pub growth: Growth,
}

impl FirstGrowSetup {
    /// Thesis Table 5.6 and growth 3.35.
    pub fn table() -> FirstGrowSetup {
        // The policy's defaults are Table 5.6 and the 3.35 growth.
        let d = FirstGrowParams::default();
        let t = |bytes| FirstSize {
            bytes,
            source: "table-5.6".into(),
            chains: 0,
            cost_ms_per_mb: None,
        };
        FirstGrowSetup {
            open_at_zero: t(d.first_open_at_zero),
            chunk_at_zero: t(d.first_chunk_at_zero),
            other: t(d.first_other),
            growth: Growth {
                factor: d.growth,
                probability: 0.45,
                exponent: None,
                source: "default".into(),
            },
        }
    }

    /// First sizes by cost-benefit over the trace's chains and growth from its survival
    /// fit at `probability`; each part falls back to the thesis figure when the trace has
    /// too little data.
    pub fn from_trace(trace: &Trace, cap: &Capacity, probability: f64) -> FirstGrowSetup {
        let mut lengths: [Vec<u64>; 3] = Default::default();
        for c in &trace.chains {
            lengths[category(c.kind)].push(c.bytes);
        }
        let table = FirstGrowSetup::table();
        let pick = |mut l: Vec<u64>, fallback: FirstSize| {
            let n = l.len();
            match (n >= MIN_CHAINS)
                .then(|| best_first_size(&mut l, cap))
                .flatten()
            {
                Some((bytes, ratio)) => FirstSize {
                    bytes,
                    source: "trace".into(),
                    chains: n,
                    cost_ms_per_mb: Some(ratio * 1e3 * 1e6),
                },
                None => FirstSize {
                    chains: n,
                    ..fallback
                },
            }
        };
        let all: Vec<u64> = trace.chains.iter().map(|c| c.bytes).collect();
        let [open, chunk, other] = lengths;
        FirstGrowSetup {
            open_at_zero: pick(open, table.open_at_zero),
            chunk_at_zero: pick(chunk, table.chunk_at_zero),
            other: pick(other, table.other),
            growth: growth_from_fit(&all, probability),
        }
    }
}

fn category(k: ChainKind) -> usize {
    match k {
        ChainKind::OpenAtZero => 0,
        ChainKind::ChunkAtZero => 1,
        ChainKind::Other => 2,
    }
}

/// The growth factor at `probability` from the power-law fit of `lengths`; 3.35 when the
/// fit has no usable segment.
pub fn growth_from_fit(lengths: &[u64], probability: f64) -> Growth {
    let fit = PowerLawFit::fit(lengths, &BREAKPOINTS);
    match fit
        .segment_at(GROWTH_AT)
        .filter(|s| s.c > 0.0 && s.c.is_finite())
    {
        Some(seg) if lengths.len() >= MIN_CHAINS => Growth {
            factor: vodkit_trace::fit::growth_factor(probability, seg.c),
            probability,
            exponent: Some(seg.c),
            source: "fit".into(),
        },
        _ => Growth {
            factor: FirstGrowParams::default().growth,
            probability,
            exponent: None,
            source: "default".into(),
        },
    }
}

/// The size with the lowest cost-benefit ratio for chains of `lengths` (sorted in place),
/// and that ratio in disk seconds per byte of benefit. Candidates are the chain lengths
/// themselves within [`MIN_FIRST`, `MAX_FIRST`] (between two consecutive lengths the ratio
/// is monotone, so its minimum lies at one of them).
pub fn best_first_size(lengths: &mut [u64], cap: &Capacity) -> Option<(u64, f64)> {
    lengths.sort_unstable();
    let n = lengths.len();
    let per_byte = 1.0 / cap.t_max_bytes_s();
    let per_seek = 1.0 / cap.s_max_per_s;
    let mut best: Option<(u64, f64)> = None;
    let mut below = 0u128; // Σ L for L <= s
    let mut i = 0usize;
    let mut consider = |s: u64, le: usize, below: u128| {
        let longer = (n - le) as f64;
        let benefit = below as f64 + longer * s as f64;
        let waste = le as f64 * s as f64 - below as f64;
        if benefit <= 0.0 {
            return;
        }
        let ratio = (waste * per_byte + longer * per_seek) / benefit;
        if best.is_none_or(|(_, r)| ratio < r) {
            best = Some((s, ratio));
        }
    };
    let mut candidates: Vec<u64> = lengths
        .iter()
        .copied()
        .filter(|&l| (MIN_FIRST..=MAX_FIRST).contains(&l))
        .collect();
    candidates.dedup();
    candidates.push(MIN_FIRST);
    candidates.push(MAX_FIRST);
    candidates.sort_unstable();
    candidates.dedup();
    for s in candidates {
        while i < n && lengths[i] <= s {
            below += u128::from(lengths[i]);
            i += 1;
        }
        consider(s, i, below);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap() -> Capacity {
        Capacity::given(100.0, 40.0).unwrap()
    }

    #[test]
    fn all_equal_chains_get_exactly_their_length() {
        let mut l = vec![786_432u64; 100];
        let (s, _) = best_first_size(&mut l, &cap()).unwrap();
        assert_eq!(s, 786_432);
    }

    #[test]
    fn ratio_matches_a_hand_computation() {
        // Two chains, 1 MiB and 8 MiB. At s = 1 MiB: benefit 2 MiB, waste 0, one seek:
        // 1/40 s per 2 MiB. At s = 8 MiB: benefit 9 MiB, waste 7 MiB => 0.07 s per 9 MiB.
        let mib = 1u64 << 20;
        let mut l = vec![mib, 8 * mib];
        let (s, r) = best_first_size(&mut l, &cap()).unwrap();
        let at_8 = (7.0 / 100.0) / (9.0 * mib as f64);
        let at_1 = (1.0 / 40.0) / (2.0 * mib as f64);
        assert!(at_8 < at_1);
        assert_eq!(s, 8 * mib);
        assert!((r - at_8).abs() < 1e-15, "{r} vs {at_8}");
    }

    #[test]
    fn growth_recovers_the_thesis_factor_from_a_matching_power_law() {
        // Lengths whose survival is x^-c between 1e6 and 2e8 with c such that P=0.45 gives 3.35.
        let c = (1.0f64 / 0.45).ln() / 4.35f64.ln();
        let n = 100_000;
        let lengths: Vec<u64> = (0..n)
            .map(|i| {
                let s = (i as f64 + 0.5) / n as f64;
                (1e6 * s.powf(-1.0 / c)) as u64
            })
            .collect();
        let g = growth_from_fit(&lengths, 0.45);
        assert_eq!(g.source, "fit");
        assert!((g.factor - 3.35).abs() < 0.15, "{g:?}");
        let few = growth_from_fit(&lengths[..3], 0.45);
        assert_eq!((few.factor, few.source.as_str()), (3.35, "default"));
    }
}
