//! Admission control for a disk-bound origin: refuse *new* streams (with `503` and
//! `Retry-After`) when admitting one more would push the disk past what it can sustain,
//! and never refuse a request that continues an admitted stream.
//!
//! Past capacity every server collapses for everyone at once: each viewer's reads queue
//! behind everyone else's and all of them stall. A viewer told "busy" within milliseconds
//! can be sent to another server; a viewer whose stream stalls is lost. The server knows
//! which requests start a stream (offset 0, or a range adjacent to no open chain of this
//! client) and how busy each device is, so it can keep the viewers it has.
//!
//! The rule of `auto` (thesis 4.2 uses a busy threshold the same way): with `n` open
//! streams on the request's device, which kept it busy a fraction `b` of the recent past,
//! one more stream of the same kind is predicted to make it `b · (n + 1) / n`; the stream is
//! admitted while that stays at or below `busy_max` (0.9), or while the device has fewer
//! than `MIN_STREAMS` streams or is less than half busy (too little to predict from). A
//! device whose queue already holds `MAX_QUEUE` reads refuses outright. The *admission limit*
//! reported in the metrics is the stream count this rule stops at: `n · busy_max / b`.
//! `rate:R` admits at most `R` new streams per second (a token bucket of `max(1, R)`).
//!
//! Pure: the caller passes the time and the device's load.

use std::fmt;
use std::str::FromStr;

/// Fewer open streams than this say too little about the device to refuse anyone.
pub const MIN_STREAMS: u64 = 4;
/// Below this busy fraction nobody is refused.
const IDLE_BUSY: f64 = 0.5;
/// Reads queued on one device beyond which new streams are refused.
pub const MAX_QUEUE: u64 = 256;

/// `--admission`: how new streams are admitted.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum AdmissionPolicy {
    /// Every request is served (a server without admission control).
    #[default]
    Off,
    /// Refuse new streams when the device would pass `busy_max` (see the module doc).
    Auto { busy_max: f64 },
    /// At most `per_s` new streams per second.
    Rate { per_s: f64 },
}

/// The busy fraction `auto` keeps the device under.
pub const AUTO_BUSY_MAX: f64 = 0.9;

impl FromStr for AdmissionPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(AdmissionPolicy::Off),
            "auto" => Ok(AdmissionPolicy::Auto {
                busy_max: AUTO_BUSY_MAX,
            }),
            _ => match s.strip_prefix("rate:").map(str::parse::<f64>) {
                Some(Ok(r)) if r > 0.0 && r.is_finite() => Ok(AdmissionPolicy::Rate { per_s: r }),
                _ => Err(format!(
                    "`{s}`: expected off, auto or rate:R (new streams per second, R > 0)"
                )),
            },
        }
    }
}

impl fmt::Display for AdmissionPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdmissionPolicy::Off => write!(f, "off"),
            AdmissionPolicy::Auto { .. } => write!(f, "auto"),
            AdmissionPolicy::Rate { per_s } => write!(f, "rate:{per_s}"),
        }
    }
}

/// What the device of a new stream is doing.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DeviceLoad {
    /// Fraction of the recent past the device was busy (0..=1).
    pub busy: f64,
    /// Streams open on the server (those the memory manager weighs, or open chains).
    pub streams: u64,
    /// Reads waiting for the device.
    pub queued: u64,
}

/// The decision for one new stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decision {
    Admit,
    /// Refuse; the client may try again after this many seconds.
    Refuse {
        retry_after_s: u32,
    },
}

/// The admission state of one server.
#[derive(Debug, Clone)]
pub struct Admission {
    policy: AdmissionPolicy,
    tokens: f64,
    last_s: f64,
    /// The stream count `auto` stops at, as last computed (`None` before any estimate).
    pub limit: Option<f64>,
}

impl Admission {
    pub fn new(policy: AdmissionPolicy) -> Self {
        Admission {
            policy,
            tokens: 1.0,
            last_s: 0.0,
            limit: None,
        }
    }

    pub fn policy(&self) -> AdmissionPolicy {
        self.policy
    }

    /// Decide on a request that starts a new stream, at `now_s`.
    pub fn decide(&mut self, now_s: f64, load: &DeviceLoad) -> Decision {
        match self.policy {
            AdmissionPolicy::Off => Decision::Admit,
            AdmissionPolicy::Rate { per_s } => {
                let cap = per_s.max(1.0);
                self.tokens = (self.tokens + (now_s - self.last_s).max(0.0) * per_s).min(cap);
                self.last_s = now_s;
                if self.tokens >= 1.0 {
                    self.tokens -= 1.0;
                    Decision::Admit
                } else {
                    let wait = ((1.0 - self.tokens) / per_s).ceil().max(1.0);
                    Decision::Refuse {
                        retry_after_s: wait.min(60.0) as u32,
                    }
                }
            }
            AdmissionPolicy::Auto { busy_max } => {
                if load.queued >= MAX_QUEUE {
                    return Decision::Refuse { retry_after_s: 1 };
                }
                let n = load.streams as f64;
                self.limit = (load.busy > 0.0).then(|| n * busy_max / load.busy);
                if load.streams < MIN_STREAMS || load.busy < IDLE_BUSY {
                    return Decision::Admit;
                }
                if load.busy * (n + 1.0) / n <= busy_max {
                    Decision::Admit
                } else {
                    Decision::Refuse { retry_after_s: 1 }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(busy: f64, streams: u64) -> DeviceLoad {
        DeviceLoad {
            busy,
            streams,
            queued: 0,
        }
    }

    #[test]
    fn parses_and_prints_every_policy() {
        for (text, p) in [
            ("off", AdmissionPolicy::Off),
            (
                "auto",
                AdmissionPolicy::Auto {
                    busy_max: AUTO_BUSY_MAX,
                },
            ),
            ("rate:2.5", AdmissionPolicy::Rate { per_s: 2.5 }),
        ] {
            assert_eq!(text.parse::<AdmissionPolicy>().unwrap(), p);
            assert_eq!(p.to_string(), text);
        }
        for bad in ["", "on", "rate:", "rate:0", "rate:-1", "rate:x", "rate:inf"] {
            let e = bad.parse::<AdmissionPolicy>().unwrap_err();
            assert!(e.contains("off, auto or rate:R"), "{bad}: {e}");
        }
    }

    #[test]
    fn off_admits_even_a_saturated_device() {
        let mut a = Admission::new(AdmissionPolicy::Off);
        let full = DeviceLoad {
            busy: 1.0,
            streams: 1000,
            queued: 10_000,
        };
        assert_eq!(a.decide(0.0, &full), Decision::Admit);
    }

    #[test]
    fn auto_admits_until_the_predicted_busy_fraction_passes_the_threshold() {
        let mut a = Admission::new("auto".parse().unwrap());
        // 40 streams keep the disk 80% busy: the 41st makes 82% (admitted), and at 87%
        // the next would make 89.2% (admitted) while at 88% it would make 90.2% (refused).
        assert_eq!(a.decide(0.0, &load(0.80, 40)), Decision::Admit);
        assert_eq!(a.decide(0.0, &load(0.87, 40)), Decision::Admit);
        assert_eq!(
            a.decide(0.0, &load(0.88, 40)),
            Decision::Refuse { retry_after_s: 1 }
        );
        // The limit is where the rule stops: 40 · 0.9 / 0.88.
        assert!((a.limit.unwrap() - 40.0 * 0.9 / 0.88).abs() < 1e-9);
        // A saturated device refuses; once streams end and it calms down, it admits again.
        assert!(matches!(
            a.decide(1.0, &load(1.0, 60)),
            Decision::Refuse { .. }
        ));
        assert_eq!(a.decide(2.0, &load(0.6, 40)), Decision::Admit);
    }

    #[test]
    fn auto_does_not_judge_from_too_little() {
        let mut a = Admission::new("auto".parse().unwrap());
        // Three streams that keep the disk fully busy (a single slow reader, say) are too
        // few to predict from; an idle-ish device is never refused.
        assert_eq!(a.decide(0.0, &load(1.0, 3)), Decision::Admit);
        assert_eq!(a.decide(0.0, &load(0.45, 100)), Decision::Admit);
        // A full queue refuses whatever the streams say.
        let queued = DeviceLoad {
            busy: 0.2,
            streams: 1,
            queued: MAX_QUEUE,
        };
        assert!(matches!(a.decide(0.0, &queued), Decision::Refuse { .. }));
    }

    #[test]
    fn rate_admits_r_new_streams_per_second_on_a_simulated_clock() {
        let mut a = Admission::new("rate:2".parse().unwrap());
        let idle = DeviceLoad::default();
        let mut admitted = 0;
        let mut refused = 0;
        // Ten seconds of 10 new streams per second: about 2 per second get in.
        for i in 0..100 {
            match a.decide(i as f64 * 0.1, &idle) {
                Decision::Admit => admitted += 1,
                Decision::Refuse { retry_after_s } => {
                    assert_eq!(retry_after_s, 1);
                    refused += 1;
                }
            }
        }
        assert!((19..=22).contains(&admitted), "{admitted}");
        assert_eq!(admitted + refused, 100);
    }
}
