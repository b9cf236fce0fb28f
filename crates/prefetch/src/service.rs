//! What a drive's read costs, learned from the reads it served: a straight line through
//! (bytes, seconds) — a positioning plus the bytes at the transfer rate.
//!
//! The memory manager stops a read where its viewer is likely to have left
//! ([`crate::MemoryManager::set_positioning_bytes`]); that needs the price of a positioning
//! in bytes. The replay knows it from the drive's terms; a server on a real device learns
//! it here, from its own reads, by least squares weighted towards recent reads (a drive's
//! positioning time changes with the load's span and with the order reads are served in).
//! Pure: the caller feeds each read's size and service time.

/// Reads after which an old read counts half.
const HALF_LIFE_READS: f64 = 512.0;
/// Reads needed before the line is trusted.
const MIN_READS: f64 = 32.0;
/// Read sizes must spread at least this much (standard deviation, bytes) to tell a
/// positioning from a transfer.
const MIN_SPREAD_BYTES: f64 = 128.0 * 1024.0;

/// Decayed least-squares fit of service seconds against bytes read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServiceFit {
    w: f64,
    x: f64,
    y: f64,
    xx: f64,
    xy: f64,
}

impl ServiceFit {
    /// Adds one read of `bytes` from the device that took `seconds` to serve.
    pub fn add(&mut self, bytes: u64, seconds: f64) {
        if bytes == 0 || !seconds.is_finite() || seconds < 0.0 {
            return;
        }
        let keep = 0.5f64.powf(1.0 / HALF_LIFE_READS);
        let x = bytes as f64;
        self.w = self.w * keep + 1.0;
        self.x = self.x * keep + x;
        self.y = self.y * keep + seconds;
        self.xx = self.xx * keep + x * x;
        self.xy = self.xy * keep + x * seconds;
    }

    /// `(positioning seconds, transfer bytes/s)` once enough reads of different sizes were
    /// seen and they cost more the larger they are; `None` before that.
    pub fn terms(&self) -> Option<(f64, f64)> {
        if self.w < MIN_READS {
            return None;
        }
        let mx = self.x / self.w;
        let my = self.y / self.w;
        let var = self.xx / self.w - mx * mx;
        if var < MIN_SPREAD_BYTES * MIN_SPREAD_BYTES {
            return None;
        }
        let slope = (self.xy / self.w - mx * my) / var;
        if slope <= 0.0 || !slope.is_finite() {
            return None;
        }
        let positioning = (my - slope * mx).max(0.0);
        Some((positioning, 1.0 / slope))
    }

    /// One positioning's price in bytes the drive could have transferred meanwhile (0 while
    /// the fit is not trusted).
    pub fn positioning_bytes(&self) -> u64 {
        self.terms().map_or(0, |(p, rate)| (p * rate) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// `n` reads of 0.5 to 4 MiB from a drive of `positioning_s` a read and 100 MB/s.
    fn feed(f: &mut ServiceFit, n: u64, positioning_s: f64) {
        for i in 0..n {
            let bytes = MIB / 2 + (i % 8) * MIB / 2;
            f.add(bytes, positioning_s + bytes as f64 / 100e6);
        }
    }

    #[test]
    fn a_drive_with_a_positioning_and_a_rate_is_recovered() {
        // 10 ms a positioning, 100 MB/s: reads of 0.5 to 4 MiB.
        let mut f = ServiceFit::default();
        feed(&mut f, 200, 0.010);
        let (p, rate) = f.terms().expect("fit");
        assert!((p - 0.010).abs() < 1e-6, "{p}");
        assert!((rate - 100e6).abs() < 1.0, "{rate}");
        assert_eq!(f.positioning_bytes(), 1_000_000);
    }

    #[test]
    fn too_few_reads_or_one_size_only_tell_nothing() {
        let mut f = ServiceFit::default();
        for _ in 0..10 {
            f.add(2 * MIB, 0.03);
        }
        assert_eq!(f.terms(), None, "too few reads");
        for _ in 0..100 {
            f.add(2 * MIB, 0.03);
        }
        assert_eq!(f.terms(), None, "every read the same size");
        assert_eq!(f.positioning_bytes(), 0);
    }

    #[test]
    fn reads_that_cost_less_when_larger_are_not_a_drive() {
        // A cache in front of the drive can make large reads cheaper than small ones.
        let mut f = ServiceFit::default();
        for i in 0..100u64 {
            let bytes = MIB + (i % 4) * MIB;
            f.add(bytes, 0.05 - bytes as f64 / 200e6);
        }
        assert_eq!(f.terms(), None);
    }

    #[test]
    fn the_fit_follows_a_drive_that_changed() {
        let mut f = ServiceFit::default();
        feed(&mut f, 2000, 0.020);
        feed(&mut f, 6000, 0.005);
        let (p, _) = f.terms().expect("fit");
        assert!((p - 0.005).abs() < 0.001, "{p}");
    }
}
