//! What a drive's read costs, learned from the reads it served: a positioning plus the bytes
//! at the transfer rate.
//!
//! The memory manager stops a read where its viewer is likely to have left
//! ([`crate::MemoryManager::set_positioning_bytes`]); that needs the price of a positioning
//! in bytes. The replay knows it from the drive's terms; a server on a real device learns
//! it here, from its own reads, weighted towards recent reads (a drive's positioning time
//! changes with the load's span and with the order reads are served in).
//!
//! Each read measures itself where it can: the engine reads a wholly missing range as a
//! short head and the rest ([`SPLIT_HEAD_BYTES`]), so the rest's time gives the transfer
//! rate and the head's time less its transfer gives the positioning
//! ([`ServiceFit::add_split`]). The rate is bytes over seconds summed across rests, not a
//! mean of each rest's rate: every request also pays the host's own latency (system calls,
//! the block layer, a wake-up), which would make short rests look slow; it stays in the
//! head's time, so the positioning carries it, as every read pays it. A line fitted
//! through (bytes, seconds) across reads cannot tell them apart reliably: the policy
//! chooses a read's size from its stream, and where a stream's file lies decides its
//! positioning, so size and positioning are correlated (on the emulated WD Red under load,
//! such a fit put the positioning at 4 ms where the drive spent 17, or the rate at 1 GB/s).
//! The fit remains for reads that cannot be split ([`ServiceFit::add`]: the `direct` pool's
//! reads, partly cached ranges) and is used only while no split read was seen.
//! Pure: the caller feeds each read's sizes and service times.

/// Reads after which an old read counts half.
const HALF_LIFE_READS: f64 = 512.0;
/// Reads needed before the terms are trusted.
const MIN_READS: f64 = 32.0;
/// Read sizes must spread at least this much (standard deviation, bytes) to tell a
/// positioning from a transfer.
const MIN_SPREAD_BYTES: f64 = 128.0 * 1024.0;
/// The head a split read reads first: long enough to cover the positioning and short
/// enough that its own transfer is a small correction.
pub const SPLIT_HEAD_BYTES: u64 = 128 * 1024;
/// The rest must be at least this long to time the transfer rate.
pub const SPLIT_MIN_REST_BYTES: u64 = 256 * 1024;

/// Decayed means of what reads cost: per-read positionings and transfer times from split
/// reads, and a least-squares line of seconds against bytes from whole ones.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServiceFit {
    /// Split reads: weight, and the decayed sums of head seconds, head bytes, rest
    /// seconds and rest bytes.
    split_w: f64,
    head_s: f64,
    head_b: f64,
    rest_s: f64,
    rest_b: f64,
    /// Whole reads: weight and the sums of x, y, x², xy.
    w: f64,
    x: f64,
    y: f64,
    xx: f64,
    xy: f64,
}

fn keep() -> f64 {
    0.5f64.powf(1.0 / HALF_LIFE_READS)
}

impl ServiceFit {
    /// Adds one read of `bytes` from the device that took `seconds` to serve, as a whole.
    pub fn add(&mut self, bytes: u64, seconds: f64) {
        if bytes == 0 || !seconds.is_finite() || seconds < 0.0 {
            return;
        }
        let k = keep();
        let x = bytes as f64;
        self.w = self.w * k + 1.0;
        self.x = self.x * k + x;
        self.y = self.y * k + seconds;
        self.xx = self.xx * k + x * x;
        self.xy = self.xy * k + x * seconds;
    }

    /// Adds one read served in two parts: `head_bytes` in `head_s` (the positioning and
    /// the first bytes), then the `rest_bytes` that follow on the device in `rest_s`.
    /// Ignored when the rest is too short to time a transfer.
    pub fn add_split(&mut self, head_bytes: u64, head_s: f64, rest_bytes: u64, rest_s: f64) {
        if rest_bytes < SPLIT_MIN_REST_BYTES
            || !(head_s.is_finite() && rest_s.is_finite())
            || head_s < 0.0
            || rest_s <= 0.0
        {
            return;
        }
        let k = keep();
        self.split_w = self.split_w * k + 1.0;
        self.head_s = self.head_s * k + head_s;
        self.head_b = self.head_b * k + head_bytes as f64;
        self.rest_s = self.rest_s * k + rest_s;
        self.rest_b = self.rest_b * k + rest_bytes as f64;
    }

    /// `(positioning seconds, transfer bytes/s)`: from split reads once enough were seen,
    /// else from the line through whole reads once they spread in size and cost more the
    /// larger they are; `None` before that.
    pub fn terms(&self) -> Option<(f64, f64)> {
        if self.split_w >= MIN_READS {
            let spb = self.rest_s / self.rest_b;
            let positioning = ((self.head_s - self.head_b * spb) / self.split_w).max(0.0);
            return (spb > 0.0).then(|| (positioning, 1.0 / spb));
        }
        if self.split_w > 0.0 || self.w < MIN_READS {
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
    /// the terms are not trusted).
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

    /// Reads whose positioning depends on their size, as when the policy gives the streams
    /// of files far from the rest shorter reads: small reads 25 ms, large ones 10 ms, at
    /// 120 MB/s. Returns the mean positioning.
    fn correlated(f: &mut ServiceFit, split: bool) -> f64 {
        let rate = 120e6;
        let mut sum = 0.0;
        for i in 0..400u64 {
            let (bytes, pos) = if i % 2 == 0 {
                (MIB / 2, 0.025)
            } else {
                (3 * MIB, 0.010)
            };
            sum += pos;
            if split {
                let head = SPLIT_HEAD_BYTES;
                f.add_split(
                    head,
                    pos + head as f64 / rate,
                    bytes - head,
                    (bytes - head) as f64 / rate,
                );
            } else {
                f.add(bytes, pos + bytes as f64 / rate);
            }
        }
        sum / 400.0
    }

    #[test]
    fn split_reads_see_the_mean_positioning_where_a_line_across_reads_cannot() {
        let mut line = ServiceFit::default();
        let mean = correlated(&mut line, false);
        let (p, rate) = line.terms().expect("line");
        // The line reads the correlation as a cheap transfer: a positioning 10 ms too
        // long and a rate three times the drive's.
        assert!(
            (p - mean).abs() > 0.005 && rate > 2.0 * 120e6,
            "line: {p} s, {rate} B/s"
        );

        let mut split = ServiceFit::default();
        correlated(&mut split, true);
        let (p, rate) = split.terms().expect("split");
        assert!((p - mean).abs() < 1e-4, "split: {p} s against {mean}");
        assert!((rate - 120e6).abs() < 1e3, "split: {rate} B/s");
        assert!(split.positioning_bytes().abs_diff((mean * 120e6) as u64) < 20_000);
    }

    #[test]
    fn a_fixed_latency_per_request_goes_to_the_positioning_not_the_rate() {
        // 15 ms positionings at 120 MB/s, and 1.5 ms of host latency on every request;
        // rests of 256 KiB to 8 MiB. A mean of each rest's rate would say 98 MB/s.
        let (rate, lag, pos) = (120e6, 0.0015, 0.015);
        let head = SPLIT_HEAD_BYTES;
        let mut f = ServiceFit::default();
        let mut mean_spb = 0.0;
        let n = 600u64;
        for i in 0..n {
            let rest = SPLIT_MIN_REST_BYTES << (i % 6);
            let rest_s = lag + rest as f64 / rate;
            mean_spb += rest_s / rest as f64 / n as f64;
            f.add_split(head, lag + pos + head as f64 / rate, rest, rest_s);
        }
        assert!(1.0 / mean_spb < 0.85 * rate, "{}", 1.0 / mean_spb);
        let (p, r) = f.terms().expect("terms");
        assert!((r - rate).abs() < 0.1 * rate, "rate {r}");
        assert!(p > pos && p < pos + 2.0 * lag, "positioning {p}");
    }

    #[test]
    fn split_reads_take_over_from_the_line_and_short_rests_are_ignored() {
        let mut f = ServiceFit::default();
        feed(&mut f, 200, 0.010);
        // One split read: the line is no longer used, the split terms not yet trusted.
        f.add_split(SPLIT_HEAD_BYTES, 0.02, MIB, 0.01);
        assert_eq!(f.terms(), None);
        let before = f.clone();
        f.add_split(SPLIT_HEAD_BYTES, 0.02, SPLIT_MIN_REST_BYTES - 1, 0.01);
        f.add_split(SPLIT_HEAD_BYTES, f64::NAN, MIB, 0.01);
        f.add_split(SPLIT_HEAD_BYTES, 0.02, MIB, 0.0);
        assert_eq!(
            f, before,
            "nothing learned from reads that time no transfer"
        );
        for _ in 0..40 {
            // 18 ms positioning at 100 MB/s.
            let head = SPLIT_HEAD_BYTES as f64;
            f.add_split(
                SPLIT_HEAD_BYTES,
                0.018 + head / 100e6,
                MIB,
                MIB as f64 / 100e6,
            );
        }
        let (p, rate) = f.terms().expect("split terms");
        assert!((p - 0.018).abs() < 1e-3, "{p}");
        assert!((rate - 100e6).abs() < 1e6, "{rate}");
    }
}
