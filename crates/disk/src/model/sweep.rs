//! Positioning in sweeps: what a read's seek costs when the head serves `n` reads in one
//! pass in position order (SCAN, grouped sweeping) rather than each at an independent
//! place.
//!
//! `n` reads at independent uniform places of a span `f` (a fraction of a full stroke),
//! served in position order: the distance from one to the next (and from the sweep's start
//! to the first) is `f·X` with `X ~ Beta(1, n)`, of density `n(1 − x)^(n−1)` and mean
//! `1/(n + 1)`, so the expected seek per read is `∫ seek(f·x) n(1 − x)^(n−1) dx` — about
//! `seek(f/(n + 1))`, and no more than that, the seek curve being concave
//! (Jensen). Rotational latency stays half a revolution per read.

use super::seek::SeekCurve;
use super::spec::{half_rotation_ms, DriveSpec};
use serde::{Deserialize, Serialize};

/// Mean seek (ms) per read of a sweep serving `reads` reads (at least 1) spread uniformly
/// over `span_fraction` of a full stroke.
pub fn sweep_seek_ms(seek: &SeekCurve, span_fraction: f64, reads: f64) -> f64 {
    const STEPS: usize = 4000;
    let n = reads.max(1.0);
    let f = span_fraction.clamp(0.0, 1.0);
    // Substituting u = 1 − (1 − x)^n (the gap's distribution function) makes u uniform:
    // the mean is ∫₀¹ seek(f·x(u)) du with x(u) = 1 − (1 − u)^(1/n).
    (0..STEPS)
        .map(|i| {
            let u = (i as f64 + 0.5) / STEPS as f64;
            let x = -((1.0 - u).ln() / n).exp_m1();
            seek.ms(f * x)
        })
        .sum::<f64>()
        / STEPS as f64
}

/// What a sweep's positioning costs on one drive over the span a file set occupies.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SweepTerms {
    pub seek: SeekCurve,
    /// Fraction of the surface the reads are spread over.
    pub span_fraction: f64,
    /// Half a revolution, s.
    pub half_rotation_s: f64,
}

impl SweepTerms {
    /// The sweep terms of `spec` over `span_fraction` of its surface.
    pub fn new(spec: &DriveSpec, span_fraction: f64) -> SweepTerms {
        SweepTerms {
            seek: spec.seek,
            span_fraction,
            half_rotation_s: half_rotation_ms(spec.rpm) / 1000.0,
        }
    }

    /// Expected positioning (s) per read of a sweep serving `reads` reads: the mean seek
    /// plus half a revolution.
    pub fn positioning_s(&self, reads: f64) -> f64 {
        sweep_seek_ms(&self.seek, self.span_fraction, reads) / 1000.0 + self.half_rotation_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1e-12)
    }

    /// A seek of `settle + linear·d` for any distance d > 0.
    fn linear(settle_ms: f64, linear_ms_per_stroke: f64) -> SeekCurve {
        SeekCurve {
            settle_ms,
            sqrt_ms: 0.0,
            knee: 0.0,
            linear_ms_per_stroke,
        }
    }

    /// A seek of `c·√d` (no settling, no linear part).
    fn root(c: f64) -> SeekCurve {
        SeekCurve {
            settle_ms: 0.0,
            sqrt_ms: c,
            knee: 1.0,
            linear_ms_per_stroke: 0.0,
        }
    }

    #[test]
    fn a_linear_seek_costs_its_settle_plus_the_span_over_n_plus_one() {
        let c = linear(2.0, 10.0);
        // 2 + 10·1/5 = 4 ms: four reads over the whole stroke.
        assert!(close(sweep_seek_ms(&c, 1.0, 4.0), 4.0, 1e-4));
        // 2 + 10·0.5/2 = 4.5 ms: one read over half the stroke.
        assert!(close(sweep_seek_ms(&c, 0.5, 1.0), 4.5, 1e-4));
        // 2 + 10·0.2/10 = 2.2 ms: nine reads over a fifth of it.
        assert!(close(sweep_seek_ms(&c, 0.2, 9.0), 2.2, 1e-4));
    }

    #[test]
    fn a_square_root_seek_has_the_beta_means_by_hand() {
        // E[√X] for X ~ Beta(1, n) is n·B(3/2, n): 2/3, 8/15 and 16/35 for n = 1, 2, 3.
        let c = root(6.0);
        assert!(close(sweep_seek_ms(&c, 1.0, 1.0), 6.0 * 2.0 / 3.0, 1e-3));
        assert!(close(sweep_seek_ms(&c, 1.0, 2.0), 6.0 * 8.0 / 15.0, 1e-3));
        assert!(close(sweep_seek_ms(&c, 1.0, 3.0), 6.0 * 16.0 / 35.0, 1e-3));
        // Over a quarter of the stroke every distance is a quarter: √¼ = ½ of the cost.
        assert!(close(sweep_seek_ms(&c, 0.25, 1.0), 2.0, 1e-3));
    }

    #[test]
    fn more_reads_per_sweep_cost_less_each_and_never_more_than_the_mean_gap() {
        let spec = crate::model::Preset::WdRed.spec();
        let mut last = f64::INFINITY;
        for n in [1.0, 2.0, 5.0, 10.0, 50.0, 200.0] {
            let ms = sweep_seek_ms(&spec.seek, 0.8, n);
            assert!(ms < last, "{n}: {ms} after {last}");
            // Jensen: the concave curve at the mean gap bounds the mean.
            assert!(ms <= spec.seek.ms(0.8 / (n + 1.0)) + 1e-9, "{n}");
            assert!(ms >= spec.seek.settle_ms, "{n}");
            last = ms;
        }
        let t = SweepTerms::new(&spec, 0.8);
        assert!(close(
            t.positioning_s(10.0),
            sweep_seek_ms(&spec.seek, 0.8, 10.0) / 1000.0 + half_rotation_ms(spec.rpm) / 1000.0,
            1e-12
        ));
        // Fewer than one read is one read.
        assert_eq!(t.positioning_s(0.3), t.positioning_s(1.0));
    }
}
