//! Failure injection for reliability tests: reads that touch chosen address ranges, or a
//! random fraction of reads, fail with EIO; and the device's control commands, which also
//! scale the drive model's clock (`timing SCALE`, for a bench's fast-forward).
//!
//! The plan is changed at run time by [`Control`] commands, written as one line each to the
//! device's control file ([`Control`]'s `Display` and `FromStr` are the wire format and its
//! only encoder and decoder); addresses are 512-byte sectors of the image, which are also
//! the sectors of the loop device.

use std::fmt;
use std::str::FromStr;

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

/// One change to a running device: its fault plan or its clock. On the wire (the control
/// file) it is one line: `eio-range START END`, `eio-rate P [SEED]`, `eio-clear` or
/// `timing SCALE`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Control {
    /// Reads touching sectors `[start, end)` fail (`end > start`).
    EioRange { start: u64, end: u64 },
    /// Each read fails with probability `p` (0..=1); `seed` reseeds the generator.
    EioRate { p: f64, seed: Option<u64> },
    /// Remove all ranges and set the rate to 0.
    EioClear,
    /// Run the drive model's clock `scale` times faster than real time: every service time
    /// takes `1/scale` of its modelled length in real time (`timing 1`: real time).
    Timing { scale: f64 },
}

/// Largest clock scale accepted by `timing`.
pub const MAX_TIMING_SCALE: f64 = 1000.0;

impl Control {
    /// A range command, checked: `end` must exceed `start`.
    pub fn range(start: u64, end: u64) -> Result<Control, String> {
        if end <= start {
            return Err(format!(
                "eio-range: END {end} must be greater than START {start}"
            ));
        }
        Ok(Control::EioRange { start, end })
    }

    /// A rate command, checked: `p` must lie in 0..=1.
    pub fn rate(p: f64, seed: Option<u64>) -> Result<Control, String> {
        if !(0.0..=1.0).contains(&p) {
            return Err(format!(
                "eio-rate {p}: expected a probability between 0 and 1"
            ));
        }
        Ok(Control::EioRate { p, seed })
    }

    /// A timing command, checked: `scale` must lie in (0, [`MAX_TIMING_SCALE`]].
    pub fn timing(scale: f64) -> Result<Control, String> {
        if !(scale > 0.0 && scale <= MAX_TIMING_SCALE) {
            return Err(format!(
                "timing {scale}: expected a clock scale above 0 and at most {MAX_TIMING_SCALE}"
            ));
        }
        Ok(Control::Timing { scale })
    }
}

impl fmt::Display for Control {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Control::EioRange { start, end } => write!(f, "eio-range {start} {end}"),
            Control::EioRate { p, seed: None } => write!(f, "eio-rate {p}"),
            Control::EioRate { p, seed: Some(s) } => write!(f, "eio-rate {p} {s}"),
            Control::EioClear => f.write_str("eio-clear"),
            Control::Timing { scale } => write!(f, "timing {scale}"),
        }
    }
}

impl FromStr for Control {
    type Err = String;

    /// Decode one control line (surrounding whitespace ignored).
    fn from_str(line: &str) -> Result<Control, String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(&command) = words.first() else {
            return Err("empty control command (eio-range, eio-rate, eio-clear, timing)".into());
        };
        // The `i`th word, parsed; `what` names what was expected.
        fn arg<T: std::str::FromStr>(words: &[&str], i: usize, what: &str) -> Result<T, String> {
            words
                .get(i)
                .and_then(|w| w.parse().ok())
                .ok_or_else(|| format!("{}: expected {what}", words[0]))
        }
        let num = |i: usize, what: &str| arg::<u64>(&words, i, what);
        let arity = |n: usize| -> Result<(), String> {
            if words.len() > n {
                return Err(format!("{command}: unexpected `{}`", words[n]));
            }
            Ok(())
        };
        match command {
            "eio-range" => {
                arity(3)?;
                Control::range(num(1, "START sector")?, num(2, "END sector")?)
            }
            "eio-rate" => {
                arity(3)?;
                let p = arg(&words, 1, "a probability between 0 and 1")?;
                let seed = if words.len() > 2 {
                    Some(num(2, "SEED")?)
                } else {
                    None
                };
                Control::rate(p, seed)
            }
            "eio-clear" => {
                arity(1)?;
                Ok(Control::EioClear)
            }
            "timing" => {
                arity(2)?;
                let scale = arg(&words, 1, "a clock scale (1: real time)")?;
                Control::timing(scale)
            }
            other => Err(format!(
                "unknown control command `{other}` (eio-range, eio-rate, eio-clear, timing)"
            )),
        }
    }
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

    /// Apply one control command (`timing` is the device clock's, not the plan's: ignored
    /// here).
    pub fn apply(&mut self, c: Control) {
        match c {
            Control::EioRange { start, end } => self.plan.ranges.push((start, end)),
            Control::EioRate { p, seed } => {
                let seed = seed.unwrap_or(self.plan.seed);
                self.plan.rate = p;
                self.plan.seed = seed;
                self.rng = ChaCha8Rng::seed_from_u64(seed);
            }
            Control::EioClear => {
                self.plan.ranges.clear();
                self.plan.rate = 0.0;
            }
            Control::Timing { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(line: &str) -> Control {
        line.parse().unwrap()
    }

    #[test]
    fn ranges_hit_overlapping_reads_only() {
        let mut f = Faults::new(FaultPlan::default());
        f.apply(c("eio-range 100 200"));
        assert!(f.should_fail(100 * SECTOR, 512));
        assert!(f.should_fail(99 * SECTOR, 1024));
        assert!(!f.should_fail(200 * SECTOR, 4096));
        assert!(!f.should_fail(0, 99 * SECTOR));
        assert_eq!(f.injected, 2);
        f.apply(c("eio-clear"));
        assert!(!f.should_fail(150 * SECTOR, 512));
    }

    #[test]
    fn rate_is_seeded_and_roughly_right() {
        let mut f = Faults::new(FaultPlan::default());
        f.apply(c("eio-rate 0.25 9"));
        let n = (0..4000).filter(|_| f.should_fail(0, 4096)).count();
        assert!((800..1200).contains(&n), "{n}");
    }

    #[test]
    fn bad_commands_are_refused() {
        for bad in [
            "eio-range 5 1",
            "eio-rate 2",
            "explode",
            "eio-range x",
            "",
            "eio-clear now",
            "eio-range 1 2 3",
            "timing",
            "timing 0",
            "timing -2",
            "timing 1e9",
            "timing 2 3",
        ] {
            assert!(bad.parse::<Control>().is_err(), "{bad:?} accepted");
        }
        assert!(Control::range(7, 7).is_err());
        assert!(Control::rate(-0.1, None).is_err());
    }

    #[test]
    fn commands_round_trip_through_the_wire_text() {
        for cmd in [
            Control::EioRange {
                start: 8,
                end: 4096,
            },
            Control::EioRate {
                p: 0.25,
                seed: None,
            },
            Control::EioRate {
                p: 1.0,
                seed: Some(9),
            },
            Control::EioClear,
            Control::Timing { scale: 8.0 },
            Control::Timing { scale: 0.5 },
        ] {
            assert_eq!(cmd.to_string().parse::<Control>(), Ok(cmd), "{cmd}");
        }
        assert_eq!(
            c("  eio-range 1 2\n"),
            Control::EioRange { start: 1, end: 2 }
        );
    }
}
