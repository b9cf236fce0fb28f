//! What a drive can sustain: expected sequential and random-read throughput from the model,
//! and the maximum transfer and seek rates `t_max` / `s_max` of thesis Eq. 5.4 used to turn
//! a prefetch schedule into disk utilization (`t / t_max + s / s_max`).

use super::spec::{half_rotation_ms, DriveSpec};
use super::zones::MIB;
use serde::{Deserialize, Serialize};

/// Sequential transfer rate (MB/s) at address fraction `x`.
pub fn sequential_mb_s(spec: &DriveSpec, x: f64) -> f64 {
    spec.zones.rate_at(x) / MIB
}

/// Expected throughput (MB/s) of back-to-back reads of `request_bytes` at independent,
/// uniformly random positions over the whole drive, with average rotational latency.
pub fn expected_random_mb_s(spec: &DriveSpec, request_bytes: f64) -> f64 {
    request_bytes / MIB / expected_random_secs(spec, request_bytes)
}

/// Expected service time (s) of one read of `request_bytes` at a random position.
pub fn expected_random_secs(spec: &DriveSpec, request_bytes: f64) -> f64 {
    const STEPS: usize = 512;
    let span = spec.capacity_bytes as f64;
    let len = request_bytes / span;
    let room = (1.0 - len).max(0.0);
    let transfer: f64 = (0..STEPS)
        .map(|i| {
            let x = (i as f64 + 0.5) / STEPS as f64 * room;
            spec.zones.transfer_secs(x, x + len, span)
        })
        .sum::<f64>()
        / STEPS as f64;
    let positioning = (spec.seek.mean_random_ms() + half_rotation_ms(spec.rpm)) / 1000.0;
    positioning + transfer
}

/// Thesis Eq. 5.4: if random reads of `request_mb` MB reach `t` MB/s on a drive whose
/// seek-free rate is `t_max`, each read costs one seek, so `s = t / request_mb` seeks/s and
/// `t / t_max + s / s_max = 1` gives `s_max = s * t_max / (t_max - t)`.
pub fn s_max_from(t_max_mb_s: f64, t_mb_s: f64, request_mb: f64) -> f64 {
    let s = t_mb_s / request_mb;
    s * t_max_mb_s / (t_max_mb_s - t_mb_s)
}

/// The two capacities of a drive the simulator budgets against.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DiskCapacity {
    /// Maximum transfer rate, MB/s (sequential reads at the outer zone).
    pub t_max_mb_s: f64,
    /// Throughput of random reads of the reference size, MB/s.
    pub random_mb_s: f64,
    /// Reference request size, MB.
    pub request_mb: f64,
    /// Maximum seek rate, seeks/s (Eq. 5.4).
    pub s_max_per_s: f64,
}

impl DiskCapacity {
    /// Utilization of transferring `t_mb_s` MB/s with `s_per_s` seeks/s (1.0 = saturated).
    pub fn utilization(&self, t_mb_s: f64, s_per_s: f64) -> f64 {
        t_mb_s / self.t_max_mb_s + s_per_s / self.s_max_per_s
    }
}

/// Derive `t_max` and `s_max` from the model with 2 MB reads, as thesis 5.6.2 does from the
/// Hitachi benchmark figures.
pub fn capacity(spec: &DriveSpec) -> DiskCapacity {
    let request_mb = 2.0;
    let t_max = sequential_mb_s(spec, 0.0);
    let random = expected_random_mb_s(spec, request_mb * MIB);
    DiskCapacity {
        t_max_mb_s: t_max,
        random_mb_s: random,
        request_mb,
        s_max_per_s: s_max_from(t_max, random, request_mb),
    }
}

/// Scale factor for `spec`'s seek curve that makes the expected random throughput for
/// `request_bytes` equal `target_mb_s` (bisection; the throughput falls as seeks slow).
pub fn fit_seek_scale(spec: &DriveSpec, request_bytes: f64, target_mb_s: f64) -> f64 {
    let base = spec.seek;
    let rate_with = |k: f64| {
        let mut s = spec.clone();
        s.seek = base.scaled(k);
        expected_random_mb_s(&s, request_bytes)
    };
    let (mut lo, mut hi) = (0.01, 20.0);
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if rate_with(mid) > target_mb_s {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eq_5_4_with_the_thesis_figures() {
        let s_max = s_max_from(125.5, 48.4, 2.0);
        assert!((s_max - 39.4).abs() < 0.05, "{s_max}");
    }

    #[test]
    fn utilization_is_one_at_the_random_benchmark_point() {
        let c = DiskCapacity {
            t_max_mb_s: 125.5,
            random_mb_s: 48.4,
            request_mb: 2.0,
            s_max_per_s: s_max_from(125.5, 48.4, 2.0),
        };
        assert!((c.utilization(48.4, 24.2) - 1.0).abs() < 1e-9);
    }
}

/// The drive's cost figures over the addresses the file set occupies.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DiskTerms {
    /// Expected positioning time of a read at a random place (mean seek between two uniform
    /// positions over the span plus half a revolution), s.
    pub positioning_s: f64,
    /// Zoned transfer rate averaged over the span (bytes / transfer time), bytes/s.
    pub transfer_bytes_s: f64,
    /// Fraction of the modelled surface the file set occupies, from the outer edge.
    pub span_fraction: f64,
    /// Positioning when reads are served in sweeps ([`super::sweep`]); `None`: reads at
    /// independent places only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<super::sweep::SweepTerms>,
}

impl DiskTerms {
    /// Expected positioning (s) per read when the drive serves `reads_per_sweep` reads per
    /// sweep: the cheaper of independent places and a sweep (a server may order its reads
    /// either way).
    pub fn positioning_for(&self, reads_per_sweep: f64) -> f64 {
        match &self.sweep {
            Some(s) => self.positioning_s.min(s.positioning_s(reads_per_sweep)),
            None => self.positioning_s,
        }
    }
}

/// Positioning and transfer figures of `spec` for a file set packed onto the outermost
/// `span_fraction` of the surface (the most favourable placement, so the bound stays an
/// upper bound).
pub fn disk_terms(spec: &DriveSpec, span_fraction: f64) -> Result<DiskTerms, String> {
    let f = span_fraction;
    if !(f > 0.0 && f <= 1.0) {
        return Err(format!("disk terms: span fraction {f} is not in (0, 1]"));
    }
    // Distance between two uniform points of [0, f] is f·d with d of density 2(1 − d).
    const STEPS: usize = 4000;
    let h = 1.0 / STEPS as f64;
    let seek_ms: f64 = (0..STEPS)
        .map(|i| {
            let d = (i as f64 + 0.5) * h;
            spec.seek.ms(f * d) * 2.0 * (1.0 - d) * h
        })
        .sum();
    let positioning_s = (seek_ms + half_rotation_ms(spec.rpm)) / 1000.0;
    // Bytes spread evenly over [0, f]: bytes over the time it takes to read them all.
    let transfer_bytes_s = f / spec.zones.transfer_secs(0.0, f, 1.0);
    Ok(DiskTerms {
        positioning_s,
        transfer_bytes_s,
        span_fraction: f,
        sweep: Some(super::sweep::SweepTerms::new(spec, f)),
    })
}
