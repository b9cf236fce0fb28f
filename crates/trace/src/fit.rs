//! Power-law fits of the chain-length survival function and survival distances
//! (thesis 5.3.3, Eq. 5.1-5.3).
//!
//! Over each segment between breakpoints the empirical survival S(x) = P(X > x) is fitted
//! as S(x) = A x^(-c) by least squares on log10 S against log10 x. For a chain that has
//! reached length x, the probability of reaching x + d is ((x + d) / x)^(-c), so the length
//! it reaches with probability P is x + d with d = (P^(-1/c) - 1) x.

use serde::{Deserialize, Serialize};

/// One fitted piece: S(x) = a * x^(-c) for lo <= x < hi (bytes).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PowerLawSegment {
    pub lo: f64,
    pub hi: f64,
    pub a: f64,
    pub c: f64,
    /// Points of the empirical CCDF the fit used.
    pub points: usize,
}

/// A piecewise power-law fit over breakpoints.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PowerLawFit {
    pub segments: Vec<PowerLawSegment>,
}

/// Survival distance d for a chain of length `x` at probability `p`, exponent `c`.
pub fn survival_distance(p: f64, c: f64, x: f64) -> f64 {
    growth_factor(p, c) * x
}

/// d / x: how many times its current length a chain grows further with probability `p`.
pub fn growth_factor(p: f64, c: f64) -> f64 {
    p.powf(-1.0 / c) - 1.0
}

impl PowerLawFit {
    /// Fit the lengths (any order) over `breakpoints` (bytes, ascending). Segments with
    /// fewer than two usable points are left out.
    pub fn fit(lengths: &[u64], breakpoints: &[f64]) -> PowerLawFit {
        let mut sorted = lengths.to_vec();
        sorted.sort_unstable();
        PowerLawFit::fit_sorted(&sorted, breakpoints)
    }

    /// [`PowerLawFit::fit`] of lengths sorted in ascending order, without a copy.
    pub fn fit_sorted(sorted: &[u64], breakpoints: &[f64]) -> PowerLawFit {
        let sorted = &sorted[sorted.partition_point(|&l| l == 0)..];
        let (Some(&min), Some(&max)) = (sorted.first(), sorted.last()) else {
            return PowerLawFit::default();
        };
        let n = sorted.len();
        PowerLawFit::fit_survival(min, max, breakpoints, |x| {
            let le = sorted.partition_point(|&l| (l as f64) <= x);
            (n - le) as f64 / n as f64
        })
    }

    /// Every length at which [`PowerLawFit::fit_survival`] asks for the survival, for
    /// nonzero lengths from `min` to `max`: what a caller that cannot hold the lengths
    /// counts in one pass over them beforehand.
    pub fn sample_points(min: u64, max: u64, breakpoints: &[f64]) -> Vec<f64> {
        PowerLawFit::segment_samples(min, max, breakpoints)
            .into_iter()
            .flat_map(|(_, _, xs)| xs)
            .collect()
    }

    /// Each segment's ends and sample points: the edges are the smallest length, the
    /// breakpoints inside and the largest; 20 points a decade, log-spaced.
    fn segment_samples(min: u64, max: u64, breakpoints: &[f64]) -> Vec<(f64, f64, Vec<f64>)> {
        let (min, max) = (min as f64, max as f64);
        let mut edges = vec![min];
        edges.extend(breakpoints.iter().copied().filter(|&b| b > min && b < max));
        edges.push(max);
        edges
            .windows(2)
            .map(|w| {
                let (lo, hi) = (w[0], w[1]);
                let decades = (hi / lo).log10();
                let steps = ((decades * 20.0).ceil() as usize).max(2);
                let xs = (0..=steps)
                    .map(|k| lo * 10f64.powf(decades * k as f64 / steps as f64))
                    .collect();
                (lo, hi, xs)
            })
            .collect()
    }

    /// The fit of the survival `survival(x)` = P(X > x) of nonzero lengths from `min` to
    /// `max`, asked only at [`PowerLawFit::sample_points`].
    pub fn fit_survival(
        min: u64,
        max: u64,
        breakpoints: &[f64],
        survival: impl Fn(f64) -> f64,
    ) -> PowerLawFit {
        let mut segments = Vec::new();
        for (lo, hi, samples) in PowerLawFit::segment_samples(min, max, breakpoints) {
            let (mut xs, mut ys) = (Vec::new(), Vec::new());
            for x in samples {
                let s = survival(x);
                if s > 0.0 {
                    xs.push(x.log10());
                    ys.push(s.log10());
                }
            }
            if xs.len() < 2 {
                continue;
            }
            let (slope, intercept) = least_squares(&xs, &ys);
            segments.push(PowerLawSegment {
                lo,
                hi,
                a: 10f64.powf(intercept),
                c: -slope,
                points: xs.len(),
            });
        }
        PowerLawFit { segments }
    }

    /// The segment covering length `x` (the last one beyond the largest length).
    pub fn segment_at(&self, x: f64) -> Option<&PowerLawSegment> {
        self.segments
            .iter()
            .find(|s| x >= s.lo && x < s.hi)
            .or_else(|| self.segments.last().filter(|s| x >= s.hi))
            .or_else(|| self.segments.first().filter(|s| x < s.lo))
    }

    /// Growth factor d/x at probability `p` for a chain of length `x`.
    pub fn growth_at(&self, p: f64, x: f64) -> Option<f64> {
        self.segment_at(x)
            .filter(|s| s.c > 0.0)
            .map(|s| growth_factor(p, s.c))
    }
}

fn least_squares(xs: &[f64], ys: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mx = xs.iter().sum::<f64>() / n;
    let my = ys.iter().sum::<f64>() / n;
    let sxy: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (slope, my - slope * mx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thesis_example_growth() {
        // P = 0.45 and d = 3.35x imply c = ln(1/0.45) / ln(4.35).
        let c = (1.0f64 / 0.45).ln() / 4.35f64.ln();
        assert!((growth_factor(0.45, c) - 3.35).abs() < 1e-9);
        assert!((survival_distance(0.45, c, 2e6) - 6.7e6).abs() < 1e-3);
    }

    #[test]
    fn recovers_exponents_of_a_piecewise_pareto_sample() {
        // Deterministic quantiles of S(x) = (x / 1e3)^-0.5 below 1e6 and a steeper tail
        // with c = 1.5 above it.
        let n = 200_000;
        let s_break = (1e6f64 / 1e3).powf(-0.5);
        let lengths: Vec<u64> = (0..n)
            .map(|i| {
                let s = (i as f64 + 0.5) / n as f64;
                let x = if s >= s_break {
                    1e3 * s.powf(-1.0 / 0.5)
                } else {
                    1e6 * (s / s_break).powf(-1.0 / 1.5)
                };
                x as u64
            })
            .collect();
        let fit = PowerLawFit::fit(&lengths, &[1e6]);
        assert_eq!(fit.segments.len(), 2);
        // Sorted, with zero lengths (left out of the fit): the same fit without a copy.
        let mut sorted = lengths.clone();
        sorted.extend([0, 0]);
        sorted.sort_unstable();
        assert_eq!(PowerLawFit::fit_sorted(&sorted, &[1e6]), fit);
        assert!(
            (fit.segments[0].c - 0.5).abs() < 0.03,
            "{:?}",
            fit.segments[0]
        );
        assert!(
            (fit.segments[1].c - 1.5).abs() < 0.1,
            "{:?}",
            fit.segments[1]
        );
        let g = fit.growth_at(0.45, 5e4).unwrap();
        assert!((g - growth_factor(0.45, fit.segments[0].c)).abs() < 1e-12);
    }
}
