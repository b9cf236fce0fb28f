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
//! The rule of `auto`: a new stream is refused while the reads of the request's device
//! wait too long — the longest wait in the queue (enqueued to started) of nine in ten reads
//! that started in the last observation interval is over `wait_max_s` (1 s by default;
//! `auto:SECONDS` sets it) — or while `MAX_QUEUE` reads wait for it. A device that stopped
//! starting reads while some wait counts as waiting the whole interval. Fewer than
//! `MIN_STREAMS` open streams always admit (too little to judge from).
//!
//! Why the queue and not the busy fraction (an earlier rule, thesis 4.2's
//! threshold): a prefetching server keeps the disk busy long before its viewers stall, and
//! a rule that predicted the busy fraction stopped near 90% busy while the server, left
//! alone, served a third more viewers clean (docs/server.md, "overload"). A viewer stalls
//! when its reads wait longer than its buffer, and the queue wait is that wait. The
//! *admission limit* reported in the metrics is the stream count at the last refusal.
//! `rate:R` admits at most `R` new streams per second (a token bucket of `max(1, R)`).
//!
//! Pure: the caller passes the time and the device's load.

use std::fmt;
use std::str::FromStr;

/// Fewer open streams than this say too little about the device to refuse anyone.
pub const MIN_STREAMS: u64 = 4;
/// Reads queued on one device beyond which new streams are refused.
pub const MAX_QUEUE: u64 = 256;

/// `--admission`: how new streams are admitted.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum AdmissionPolicy {
    /// Every request is served (a server without admission control).
    #[default]
    Off,
    /// Refuse new streams while the device's reads wait longer than `wait_max_s` in its
    /// queue (see the module doc).
    Auto { wait_max_s: f64 },
    /// At most `per_s` new streams per second.
    Rate { per_s: f64 },
}

/// The queue wait (s) `auto` keeps the device's reads under.
pub const AUTO_WAIT_MAX_S: f64 = 1.0;

impl FromStr for AdmissionPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(AdmissionPolicy::Off),
            "auto" => Ok(AdmissionPolicy::Auto {
                wait_max_s: AUTO_WAIT_MAX_S,
            }),
            _ => {
                let bad = || {
                    format!(
                        "`{s}`: expected off, auto, auto:SECONDS (the longest queue wait, \
                         > 0) or rate:R (new streams per second, R > 0)"
                    )
                };
                let positive = |v: Result<f64, vodkit_units::UnitError>| {
                    v.ok().filter(|v| *v > 0.0).ok_or_else(bad)
                };
                if let Some(w) = s.strip_prefix("auto:") {
                    Ok(AdmissionPolicy::Auto {
                        wait_max_s: positive(vodkit_units::parse_seconds(w))?,
                    })
                } else if let Some(r) = s.strip_prefix("rate:") {
                    Ok(AdmissionPolicy::Rate {
                        per_s: positive(vodkit_units::parse_session_rate(r))?,
                    })
                } else {
                    Err(bad())
                }
            }
        }
    }
}

impl fmt::Display for AdmissionPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdmissionPolicy::Off => write!(f, "off"),
            AdmissionPolicy::Auto { wait_max_s } if *wait_max_s == AUTO_WAIT_MAX_S => {
                write!(f, "auto")
            }
            AdmissionPolicy::Auto { wait_max_s } => write!(f, "auto:{wait_max_s}s"),
            AdmissionPolicy::Rate { per_s } => write!(f, "rate:{per_s}"),
        }
    }
}

/// What the device of a new stream is doing.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DeviceLoad {
    /// Fraction of the recent past the device was busy (0..=1; reported, not judged).
    pub busy: f64,
    /// Streams open on the server (those the memory manager weighs, or open chains).
    pub streams: u64,
    /// Reads waiting for the device.
    pub queued: u64,
    /// How long the device's reads waited in its queue lately (s): the 90th percentile
    /// of the reads that started in the last observation interval.
    pub wait_s: f64,
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
    /// The open streams when `auto` last refused (`None` before any refusal).
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
            AdmissionPolicy::Auto { wait_max_s } => {
                let full = load.queued >= MAX_QUEUE;
                if !full && (load.streams < MIN_STREAMS || load.wait_s <= wait_max_s) {
                    return Decision::Admit;
                }
                self.limit = Some(load.streams as f64);
                Decision::Refuse { retry_after_s: 1 }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(wait_s: f64, streams: u64) -> DeviceLoad {
        DeviceLoad {
            busy: 1.0,
            streams,
            queued: 0,
            wait_s,
        }
    }

    #[test]
    fn parses_and_prints_every_policy() {
        for (text, p) in [
            ("off", AdmissionPolicy::Off),
            (
                "auto",
                AdmissionPolicy::Auto {
                    wait_max_s: AUTO_WAIT_MAX_S,
                },
            ),
            ("auto:0.5s", AdmissionPolicy::Auto { wait_max_s: 0.5 }),
            ("rate:2.5", AdmissionPolicy::Rate { per_s: 2.5 }),
        ] {
            assert_eq!(text.parse::<AdmissionPolicy>().unwrap(), p);
            assert_eq!(p.to_string(), text);
        }
        assert_eq!(
            "auto:2".parse::<AdmissionPolicy>().unwrap(),
            AdmissionPolicy::Auto { wait_max_s: 2.0 }
        );
        for bad in [
            "", "on", "rate:", "rate:0", "rate:-1", "rate:x", "rate:inf", "auto:", "auto:0",
            "auto:-1s", "auto:xs",
        ] {
            let e = bad.parse::<AdmissionPolicy>().unwrap_err();
            assert!(e.contains("off, auto, auto:SECONDS"), "{bad}: {e}");
        }
    }

    #[test]
    fn off_admits_even_a_saturated_device() {
        let mut a = Admission::new(AdmissionPolicy::Off);
        let full = DeviceLoad {
            busy: 1.0,
            streams: 1000,
            queued: 10_000,
            wait_s: 60.0,
        };
        assert_eq!(a.decide(0.0, &full), Decision::Admit);
    }

    #[test]
    fn auto_admits_while_reads_wait_less_than_the_limit() {
        let mut a = Admission::new("auto".parse().unwrap());
        // A disk busy all the time whose reads wait 0.3 s serves its viewers: admitted,
        // however many streams it has.
        assert_eq!(a.decide(0.0, &load(0.3, 400)), Decision::Admit);
        assert_eq!(a.decide(0.0, &load(1.0, 400)), Decision::Admit);
        assert_eq!(a.limit, None);
        // Reads waiting longer than a second: new streams are refused ...
        assert_eq!(
            a.decide(1.0, &load(1.2, 410)),
            Decision::Refuse { retry_after_s: 1 }
        );
        assert_eq!(a.limit, Some(410.0));
        // ... until the queue drains as streams end.
        assert_eq!(a.decide(5.0, &load(0.4, 380)), Decision::Admit);
        // A stricter setting refuses earlier.
        let mut strict = Admission::new("auto:0.25s".parse().unwrap());
        assert!(matches!(
            strict.decide(0.0, &load(0.3, 400)),
            Decision::Refuse { .. }
        ));
    }

    #[test]
    fn auto_does_not_judge_from_too_little() {
        let mut a = Admission::new("auto".parse().unwrap());
        // Three streams whose reads wait long (a single slow reader, say) are too few to
        // judge from.
        assert_eq!(a.decide(0.0, &load(5.0, 3)), Decision::Admit);
        // A full queue refuses whatever the waits say.
        let queued = DeviceLoad {
            busy: 0.2,
            streams: 1,
            queued: MAX_QUEUE,
            wait_s: 0.0,
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
