//! Zoned recording: the sustained transfer rate falls from the outer tracks (low block
//! addresses) to the inner tracks (high block addresses) in a number of constant-rate zones.

use serde::{Deserialize, Serialize};

/// One mebibyte; the model reads every "MB" of the published figures as 2^20 bytes.
pub const MIB: f64 = 1_048_576.0;

/// Transfer-rate profile fitted to three published points (outer, middle, inner), in MB/s.
///
/// Between the points the rate follows the parabola through all three, which is decreasing
/// across the whole surface as long as the middle figure lies between the outer and inner
/// ones closer to the outer one (true for every preset). The surface is then cut into
/// `zones` equal bands of addresses and each band gets the parabola's value at its inner
/// edge, so the innermost zone runs exactly at the inner figure and the outermost within
/// a fraction of a percent of the outer one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ZoneProfile {
    /// Rate at the first address (outermost track), MB/s.
    pub outer_mb_s: f64,
    /// Rate half-way through the address space, MB/s.
    pub middle_mb_s: f64,
    /// Rate at the last address (innermost track), MB/s.
    pub inner_mb_s: f64,
    /// Number of constant-rate zones.
    pub zones: u32,
}

impl ZoneProfile {
    /// Rate (MB/s) of the fitted parabola at address fraction `x` in `[0, 1]`.
    pub fn curve_mb_s(&self, x: f64) -> f64 {
        let x = x.clamp(0.0, 1.0);
        // r(x) = o + b x + c x^2 with r(1/2) = m and r(1) = i.
        let o = self.outer_mb_s;
        let c = 2.0 * (self.inner_mb_s + o) - 4.0 * self.middle_mb_s;
        let b = self.inner_mb_s - o - c;
        o + b * x + c * x * x
    }

    /// Index of the zone that holds address fraction `x`.
    pub fn zone_of(&self, x: f64) -> u32 {
        let n = self.zones.max(1);
        ((x.clamp(0.0, 1.0) * f64::from(n)) as u32).min(n - 1)
    }

    /// Sustained rate (MB/s) of zone `z`.
    pub fn zone_mb_s(&self, z: u32) -> f64 {
        let n = f64::from(self.zones.max(1));
        self.curve_mb_s((f64::from(z) + 1.0) / n)
    }

    /// Sustained rate (bytes/s) at address fraction `x`.
    pub fn rate_at(&self, x: f64) -> f64 {
        self.zone_mb_s(self.zone_of(x)) * MIB
    }

    /// Seconds to transfer the addresses from fraction `from` to fraction `to`, where
    /// `span_bytes` is the number of bytes the whole `[0, 1]` range stands for.
    pub fn transfer_secs(&self, from: f64, to: f64, span_bytes: f64) -> f64 {
        let n = f64::from(self.zones.max(1));
        let (mut x, end) = (from.clamp(0.0, 1.0), to.clamp(0.0, 1.0));
        let mut secs = 0.0;
        while x < end {
            let z = self.zone_of(x);
            let zone_end = (f64::from(z + 1) / n).min(end);
            // Guard against a fraction sitting exactly on a boundary due to rounding.
            let piece_end = if zone_end <= x { end } else { zone_end };
            secs += (piece_end - x) * span_bytes / self.rate_at(x);
            x = piece_end;
        }
        secs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WD: ZoneProfile = ZoneProfile {
        outer_mb_s: 133.0,
        middle_mb_s: 115.0,
        inner_mb_s: 67.0,
        zones: 32,
    };

    #[test]
    fn curve_passes_through_the_three_figures() {
        assert!((WD.curve_mb_s(0.0) - 133.0).abs() < 1e-9);
        assert!((WD.curve_mb_s(0.5) - 115.0).abs() < 1e-9);
        assert!((WD.curve_mb_s(1.0) - 67.0).abs() < 1e-9);
    }

    #[test]
    fn transfer_across_zones_adds_the_pieces() {
        let span = 1e12;
        let whole = WD.transfer_secs(0.0, 1.0, span);
        let halves = WD.transfer_secs(0.0, 0.5, span) + WD.transfer_secs(0.5, 1.0, span);
        assert!((whole - halves).abs() / whole < 1e-9);
        let first_zone = WD.transfer_secs(0.0, 1.0 / 32.0, span);
        assert!((first_zone - span / 32.0 / WD.rate_at(0.0)).abs() < 1e-6);
    }
}
