//! The distributions a workload is drawn from: Zipf popularity over ranks, empirical CDFs
//! with linear interpolation (title durations, watch fractions), categorical shares
//! (client classes) and the named random streams that keep each purpose independent.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Independent random streams of one seed. Each purpose draws from its own ChaCha8 stream,
/// so changing, say, the session count leaves the catalog untouched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum Stream {
    Placement = 1,
    Durations = 2,
    Ranks = 3,
    SessionMix = 4,
    Popularity = 5,
    Watch = 6,
    Arrivals = 7,
    Classes = 8,
    /// Which sessions are live viewers (`[live]`).
    Live = 9,
}

pub fn rng(seed: u64, stream: Stream) -> ChaCha8Rng {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(stream as u64);
    r
}

/// Zipf popularity over ranks `1..=n`: P(rank k) ∝ k^-alpha.
#[derive(Clone, Debug)]
pub struct Zipf {
    /// cumulative[k-1] = P(rank <= k); the last entry is 1.
    cumulative: Vec<f64>,
}

impl Zipf {
    pub fn new(n: usize, alpha: f64) -> Zipf {
        let mut cumulative = Vec::with_capacity(n);
        let mut total = 0.0;
        for k in 1..=n {
            total += (k as f64).powf(-alpha);
            cumulative.push(total);
        }
        for c in &mut cumulative {
            *c /= total;
        }
        if let Some(last) = cumulative.last_mut() {
            *last = 1.0;
        }
        Zipf { cumulative }
    }

    pub fn len(&self) -> usize {
        self.cumulative.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cumulative.is_empty()
    }

    /// Probability of rank `k` (1-based).
    pub fn p(&self, k: usize) -> f64 {
        let hi = self.cumulative[k - 1];
        let lo = if k >= 2 { self.cumulative[k - 2] } else { 0.0 };
        hi - lo
    }

    /// The rank (1-based) for a uniform draw `u` in [0, 1).
    pub fn rank_for(&self, u: f64) -> usize {
        let i = self.cumulative.partition_point(|&c| c <= u);
        i.min(self.cumulative.len() - 1) + 1
    }

    pub fn sample(&self, rng: &mut impl Rng) -> usize {
        self.rank_for(rng.random::<f64>())
    }
}

/// An empirical distribution given as CDF points `(p_i, x_i)`, sampled by inverting the CDF
/// with linear interpolation between points; below the first point it interpolates from
/// (0, 0).
#[derive(Clone, Debug, PartialEq)]
pub struct EmpiricalCdf {
    p: Vec<f64>,
    x: Vec<f64>,
}

impl EmpiricalCdf {
    /// `p` must be non-decreasing in (0, 1] and end at 1; `x` non-decreasing and
    /// non-negative, of the same length. The message says which point is wrong.
    pub fn new(p: &[f64], x: &[f64]) -> Result<EmpiricalCdf, String> {
        if p.is_empty() {
            return Err("needs at least one point".into());
        }
        if p.len() != x.len() {
            return Err(format!(
                "has {} probabilities but {} values; they must pair up",
                p.len(),
                x.len()
            ));
        }
        for i in 0..p.len() {
            if !(p[i].is_finite() && p[i] > 0.0 && p[i] <= 1.0) {
                return Err(format!("probability [{i}] = {} is not in (0, 1]", p[i]));
            }
            if !(x[i].is_finite() && x[i] >= 0.0) {
                return Err(format!(
                    "value [{i}] = {} is not a non-negative number",
                    x[i]
                ));
            }
            if i > 0 && p[i] < p[i - 1] {
                return Err(format!(
                    "probability [{i}] = {} decreases (a CDF never does)",
                    p[i]
                ));
            }
            if i > 0 && x[i] < x[i - 1] {
                return Err(format!(
                    "value [{i}] = {} decreases (values must be sorted)",
                    x[i]
                ));
            }
        }
        if (p[p.len() - 1] - 1.0).abs() > 1e-9 {
            return Err(format!(
                "last probability is {}, it must be 1",
                p[p.len() - 1]
            ));
        }
        Ok(EmpiricalCdf {
            p: p.to_vec(),
            x: x.to_vec(),
        })
    }

    /// The value at cumulative probability `u` in [0, 1].
    pub fn quantile(&self, u: f64) -> f64 {
        let i = self.p.partition_point(|&c| c < u).min(self.p.len() - 1);
        let (p0, x0) = if i == 0 {
            (0.0, 0.0)
        } else {
            (self.p[i - 1], self.x[i - 1])
        };
        let (p1, x1) = (self.p[i], self.x[i]);
        if p1 <= p0 {
            return x1;
        }
        x0 + (x1 - x0) * (u - p0) / (p1 - p0)
    }

    pub fn sample(&self, rng: &mut impl Rng) -> f64 {
        self.quantile(rng.random::<f64>())
    }

    /// P(X <= x) under the interpolated distribution (the inverse of [`Self::quantile`]).
    pub fn cdf(&self, x: f64) -> f64 {
        if x < 0.0 {
            return 0.0;
        }
        let (mut p0, mut x0) = (0.0, 0.0);
        for (&p1, &x1) in self.p.iter().zip(&self.x) {
            if x < x1 {
                return p0 + (p1 - p0) * (x - x0) / (x1 - x0);
            }
            (p0, x0) = (p1, x1);
        }
        1.0
    }

    /// The mean of `g(X)` under the interpolated distribution, by midpoint integration
    /// over `steps` equal slices of probability (used by tests and summaries).
    pub fn mean_of(&self, steps: usize, mut g: impl FnMut(f64) -> f64) -> f64 {
        let mut total = 0.0;
        for k in 0..steps {
            total += g(self.quantile((k as f64 + 0.5) / steps as f64));
        }
        total / steps as f64
    }
}

/// Index drawn with probability proportional to `weights`.
#[derive(Clone, Debug)]
pub struct Categorical {
    cumulative: Vec<f64>,
}

impl Categorical {
    /// Weights must be non-negative with a positive sum.
    pub fn new(weights: &[f64]) -> Option<Categorical> {
        let total: f64 = weights.iter().sum();
        if !(total.is_finite() && total > 0.0) || weights.iter().any(|w| w.is_nan() || *w < 0.0) {
            return None;
        }
        let mut acc = 0.0;
        let cumulative = weights
            .iter()
            .map(|w| {
                acc += w / total;
                acc
            })
            .collect();
        Some(Categorical { cumulative })
    }

    pub fn sample(&self, rng: &mut impl Rng) -> usize {
        let u: f64 = rng.random();
        self.cumulative
            .partition_point(|&c| c <= u)
            .min(self.cumulative.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_interpolates_linearly_from_origin() {
        let c = EmpiricalCdf::new(&[0.5, 1.0], &[10.0, 30.0]).unwrap();
        assert_eq!(c.quantile(0.0), 0.0);
        assert_eq!(c.quantile(0.25), 5.0);
        assert_eq!(c.quantile(0.5), 10.0);
        assert_eq!(c.quantile(0.75), 20.0);
        assert_eq!(c.quantile(1.0), 30.0);
        let step = EmpiricalCdf::new(&[0.5, 0.5, 1.0], &[1.0, 2.0, 2.0]).unwrap();
        assert_eq!(step.quantile(0.5), 1.0);
        assert_eq!(step.quantile(0.75), 2.0);
        for u in [0.1, 0.3, 0.5, 0.9] {
            assert!((c.cdf(c.quantile(u)) - u).abs() < 1e-12);
        }
        assert_eq!(c.cdf(-1.0), 0.0);
        assert_eq!(c.cdf(31.0), 1.0);
    }

    #[test]
    fn cdf_rejects_bad_points_with_index() {
        assert!(EmpiricalCdf::new(&[], &[])
            .unwrap_err()
            .contains("at least one"));
        assert!(EmpiricalCdf::new(&[1.0], &[1.0, 2.0])
            .unwrap_err()
            .contains("pair up"));
        assert!(EmpiricalCdf::new(&[0.6, 0.5, 1.0], &[1.0, 2.0, 3.0])
            .unwrap_err()
            .contains("[1]"));
        assert!(EmpiricalCdf::new(&[0.5, 1.0], &[2.0, 1.0])
            .unwrap_err()
            .contains("[1]"));
        assert!(EmpiricalCdf::new(&[0.5, 0.9], &[1.0, 2.0])
            .unwrap_err()
            .contains("must be 1"));
        assert!(EmpiricalCdf::new(&[0.0, 1.0], &[1.0, 2.0])
            .unwrap_err()
            .contains("(0, 1]"));
        assert!(EmpiricalCdf::new(&[1.0], &[-1.0])
            .unwrap_err()
            .contains("non-negative"));
    }

    #[test]
    fn zipf_probabilities_follow_power_law() {
        let z = Zipf::new(1000, 0.8);
        let sum: f64 = (1..=1000).map(|k| z.p(k)).sum();
        assert!((sum - 1.0).abs() < 1e-12);
        assert!((z.p(1) / z.p(2) - 2f64.powf(0.8)).abs() < 1e-9);
        assert_eq!(z.rank_for(0.0), 1);
        assert_eq!(z.rank_for(0.999_999_999), 1000);
    }
}
