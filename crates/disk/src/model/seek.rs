//! Head movement: seek time as a function of the distance travelled, as a fraction of a
//! full stroke (first to last address).
//!
//! Short seeks are dominated by the arm accelerating and decelerating, so their time grows
//! with the square root of the distance; long seeks reach the arm's top speed and grow
//! linearly. The curve here is `settle + sqrt_coef * sqrt(d)` up to the knee and a straight
//! line beyond it, continuous at the knee.

use serde::{Deserialize, Serialize};

/// Seek-time curve; all times in milliseconds, distances as fractions of a full stroke.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SeekCurve {
    /// Time of the shortest possible seek (head settling), ms.
    pub settle_ms: f64,
    /// Coefficient of `sqrt(d)` in the short-seek part, ms.
    pub sqrt_ms: f64,
    /// Distance where the curve turns linear (fraction of a full stroke).
    pub knee: f64,
    /// Growth of the linear part per full stroke, ms.
    pub linear_ms_per_stroke: f64,
}

impl SeekCurve {
    /// Fit the curve to positioning times measured over a quarter, half and full stroke
    /// (FreeBSD `diskinfo -t` style figures, which include rotational latency; pass the
    /// drive's average rotational latency to remove it).
    ///
    /// The square-root part goes through the quarter and half stroke points, the linear
    /// part through the half and full stroke points; the knee is therefore half a stroke.
    pub fn fit(quarter_ms: f64, half_ms: f64, full_ms: f64, rotation_avg_ms: f64) -> Self {
        let (q, h, f) = (
            quarter_ms - rotation_avg_ms,
            half_ms - rotation_avg_ms,
            full_ms - rotation_avg_ms,
        );
        let sqrt_ms = (h - q) / (0.5f64.sqrt() - 0.5);
        let settle_ms = q - 0.5 * sqrt_ms;
        SeekCurve {
            settle_ms,
            sqrt_ms,
            knee: 0.5,
            linear_ms_per_stroke: (f - h) / 0.5,
        }
    }

    /// The same shape with every time multiplied by `k`.
    pub fn scaled(&self, k: f64) -> Self {
        SeekCurve {
            settle_ms: self.settle_ms * k,
            sqrt_ms: self.sqrt_ms * k,
            knee: self.knee,
            linear_ms_per_stroke: self.linear_ms_per_stroke * k,
        }
    }

    /// Seek time in milliseconds for a move of `d` (fraction of a full stroke). Zero distance
    /// costs nothing: the head is already there.
    pub fn ms(&self, d: f64) -> f64 {
        let d = d.abs().min(1.0);
        if d == 0.0 {
            return 0.0;
        }
        if d <= self.knee {
            self.settle_ms + self.sqrt_ms * d.sqrt()
        } else {
            let at_knee = self.settle_ms + self.sqrt_ms * self.knee.sqrt();
            at_knee + self.linear_ms_per_stroke * (d - self.knee)
        }
    }

    /// Mean seek time (ms) between two independent, uniformly placed addresses: the
    /// distance then has density `2 (1 - d)` on `[0, 1]`.
    pub fn mean_random_ms(&self) -> f64 {
        const STEPS: usize = 4000;
        let h = 1.0 / STEPS as f64;
        (0..STEPS)
            .map(|i| {
                let d = (i as f64 + 0.5) * h;
                self.ms(d) * 2.0 * (1.0 - d) * h
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_reproduces_the_three_points() {
        let rot = 5.5556;
        let c = SeekCurve::fit(18.9, 23.1, 32.6, rot);
        assert!((c.ms(0.25) + rot - 18.9).abs() < 1e-9);
        assert!((c.ms(0.5) + rot - 23.1).abs() < 1e-9);
        assert!((c.ms(1.0) + rot - 32.6).abs() < 1e-9);
        assert!(c.settle_ms > 0.0 && c.sqrt_ms > 0.0 && c.linear_ms_per_stroke > 0.0);
    }

    #[test]
    fn zero_distance_is_free() {
        let c = SeekCurve::fit(6.8, 8.0, 10.5, 3.0);
        assert_eq!(c.ms(0.0), 0.0);
        assert!(c.ms(1e-9) > 0.0);
    }
}
