//! Failure injection for reliability tests: reads that touch chosen address ranges, or a
//! random fraction of reads, fail with EIO.
//!
//! The plan is changed at run time by writing one-line commands to the device's control
//! file (see [`FaultPlan::apply`]); addresses are 512-byte sectors of the image, which are
//! also the sectors of the loop device.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Sector size used by fault ranges.
pub const SECTOR: u64 = 512;

/// Which reads fail.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FaultPlan {
    /// Half-open sector ranges `[start, end)` whose reads fail.
    pub ranges: Vec<(u64, u64)>,
    /// Probability that any read fails.
    pub rate: f64,
    /// Seed of the generator behind `rate`.
    pub seed: u64,
}

/// A fault plan with its random generator.
#[derive(Debug, Clone)]
pub struct Faults {
    plan: FaultPlan,
    rng: ChaCha8Rng,
    /// Reads failed so far.
    pub injected: u64,
}

impl Faults {
    pub fn new(plan: FaultPlan) -> Self {
        let rng = ChaCha8Rng::seed_from_u64(plan.seed);
        Faults {
            plan,
            rng,
            injected: 0,
        }
    }

    pub fn plan(&self) -> &FaultPlan {
        &self.plan
    }

    /// Whether a read of `len` bytes at byte `offset` fails; counts the failures.
    pub fn should_fail(&mut self, offset: u64, len: u64) -> bool {
        let (first, last) = (offset / SECTOR, (offset + len.max(1) - 1) / SECTOR);
        let hit = self
            .plan
            .ranges
            .iter()
            .any(|&(s, e)| first < e && last >= s)
            || (self.plan.rate > 0.0 && self.rng.random::<f64>() < self.plan.rate);
        if hit {
            self.injected += 1;
        }
        hit
    }

    /// Apply one control command:
    /// `eio-range START END` (sectors, half-open), `eio-rate P [SEED]`, `eio-clear`.
    pub fn apply(&mut self, line: &str) -> Result<(), String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize, what: &str| -> Result<u64, String> {
            words
                .get(i)
                .and_then(|w| w.parse().ok())
                .ok_or_else(|| format!("{}: expected {what}", words[0]))
        };
        match words.first().copied() {
            Some("eio-range") => {
                let (s, e) = (num(1, "START sector")?, num(2, "END sector")?);
                if e <= s {
                    return Err(format!("eio-range: END {e} must be greater than START {s}"));
                }
                self.plan.ranges.push((s, e));
            }
            Some("eio-rate") => {
                let p: f64 = words
                    .get(1)
                    .and_then(|w| w.parse().ok())
                    .filter(|p: &f64| (0.0..=1.0).contains(p))
                    .ok_or("eio-rate: expected a probability between 0 and 1")?;
                let seed = if words.len() > 2 {
                    num(2, "SEED")?
                } else {
                    self.plan.seed
                };
                self.plan.rate = p;
                self.plan.seed = seed;
                self.rng = ChaCha8Rng::seed_from_u64(seed);
            }
            Some("eio-clear") => {
                self.plan.ranges.clear();
                self.plan.rate = 0.0;
            }
            Some(other) => {
                return Err(format!(
                    "unknown control command `{other}` (eio-range, eio-rate, eio-clear)"
                ))
            }
            None => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_hit_overlapping_reads_only() {
        let mut f = Faults::new(FaultPlan::default());
        f.apply("eio-range 100 200").unwrap();
        assert!(f.should_fail(100 * SECTOR, 512));
        assert!(f.should_fail(99 * SECTOR, 1024));
        assert!(!f.should_fail(200 * SECTOR, 4096));
        assert!(!f.should_fail(0, 99 * SECTOR));
        assert_eq!(f.injected, 2);
        f.apply("eio-clear").unwrap();
        assert!(!f.should_fail(150 * SECTOR, 512));
    }

    #[test]
    fn rate_is_seeded_and_roughly_right() {
        let mut f = Faults::new(FaultPlan::default());
        f.apply("eio-rate 0.25 9").unwrap();
        let n = (0..4000).filter(|_| f.should_fail(0, 4096)).count();
        assert!((800..1200).contains(&n), "{n}");
    }

    #[test]
    fn bad_commands_are_refused() {
        let mut f = Faults::new(FaultPlan::default());
        assert!(f.apply("eio-range 5 1").is_err());
        assert!(f.apply("eio-rate 2").is_err());
        assert!(f.apply("explode").is_err());
        assert!(f.apply("eio-range x").is_err());
    }
}
