//! The engine's clock: seconds since the engine started, as every policy, the ledger and
//! the memory manager see them (they take the time from the caller and read no clock of
//! their own). It runs at real time unless told otherwise: a bench's fast-forward plays a
//! workload's history faster on a drive whose clock is scaled the same way, and sets the
//! rate here so that the policies' rates, ages and deadlines stay on the workload's time.

use std::sync::Mutex;
use std::time::Instant;

/// Largest clock rate accepted.
pub const MAX_RATE: f64 = 1000.0;

/// A monotonic clock in seconds that runs `rate` times faster than real time.
#[derive(Debug)]
pub struct Clock {
    start: Instant,
    state: Mutex<Anchor>,
}

/// Clock reading `at` at real second `real`, advancing `rate` seconds per real second.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Anchor {
    real: f64,
    at: f64,
    rate: f64,
}

impl Anchor {
    fn read(&self, real: f64) -> f64 {
        self.at + (real - self.real).max(0.0) * self.rate
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

impl Clock {
    /// A clock at zero now, at real time.
    pub fn new() -> Clock {
        Clock {
            start: Instant::now(),
            state: Mutex::new(Anchor {
                real: 0.0,
                at: 0.0,
                rate: 1.0,
            }),
        }
    }

    fn real(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Seconds on this clock.
    pub fn now(&self) -> f64 {
        let real = self.real();
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .read(real)
    }

    /// The current rate (1: real time).
    pub fn rate(&self) -> f64 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).rate
    }

    /// Whether the clock has run at real time since its reading `t`: a duration measured
    /// from `t` to now is then real seconds. A read timed while the clock ran faster has
    /// the host's own latency (system calls, the block layer, wake-ups) multiplied by the
    /// rate, where an emulated drive's time is scaled to match.
    pub fn real_time_since(&self, t: f64) -> bool {
        let a = self.state.lock().unwrap_or_else(|p| p.into_inner());
        a.rate == 1.0 && t >= a.at
    }

    /// From now on, advance `rate` seconds per real second (the reading does not jump).
    /// `rate` must lie in (0, [`MAX_RATE`]].
    pub fn set_rate(&self, rate: f64) -> Result<(), String> {
        check_rate(rate)?;
        let real = self.real();
        let mut a = self.state.lock().unwrap_or_else(|p| p.into_inner());
        *a = Anchor {
            real,
            at: a.read(real),
            rate,
        };
        Ok(())
    }
}

/// `rate` if it is a clock rate the engine accepts; else a one-line error.
pub fn check_rate(rate: f64) -> Result<f64, String> {
    if rate > 0.0 && rate <= MAX_RATE {
        Ok(rate)
    } else {
        Err(format!(
            "clock rate {rate}: expected a number above 0 and at most {MAX_RATE} (1: real time)"
        ))
    }
}

/// The rate of an admin request `POST /clock?rate=R` from its query string (`rate=R`,
/// other keys ignored); a one-line error naming what is wrong.
pub fn rate_from_query(query: &str) -> Result<f64, String> {
    let value = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("rate="))
        .ok_or("POST /clock: expected ?rate=R (1: real time)")?;
    let rate: f64 = value
        .parse()
        .map_err(|_| format!("POST /clock: rate `{value}` is not a number"))?;
    check_rate(rate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_anchor_advances_at_its_rate_and_keeps_its_reading_when_changed() {
        let a = Anchor {
            real: 2.0,
            at: 2.0,
            rate: 8.0,
        };
        assert_eq!(a.read(3.0), 10.0);
        assert_eq!(a.read(1.0), 2.0, "never earlier than the anchor");
    }

    #[test]
    fn the_admin_query_names_the_rate() {
        assert_eq!(rate_from_query("rate=8"), Ok(8.0));
        assert_eq!(rate_from_query("x=1&rate=0.5"), Ok(0.5));
        assert!(rate_from_query("").unwrap_err().contains("?rate=R"));
        assert!(rate_from_query("rate=fast").unwrap_err().contains("fast"));
        assert!(rate_from_query("rate=0")
            .unwrap_err()
            .contains("clock rate"));
    }

    #[test]
    fn the_clock_is_monotonic_across_rate_changes() {
        let c = Clock::new();
        let t0 = c.now();
        c.set_rate(50.0).unwrap();
        assert_eq!(c.rate(), 50.0);
        let t1 = c.now();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let t2 = c.now();
        c.set_rate(1.0).unwrap();
        let t3 = c.now();
        assert!(t0 <= t1 && t1 <= t2 && t2 <= t3, "{t0} {t1} {t2} {t3}");
        // 20 ms of real time at 50×: at least a second on the clock.
        assert!(t2 - t1 >= 1.0, "{t1} → {t2}");
        assert!(!c.real_time_since(t2), "a reading taken at 50x");
        assert!(c.real_time_since(c.now()), "back at real time");
        c.set_rate(2.0).unwrap();
        assert!(!c.real_time_since(c.now()), "running fast now");
        for bad in [0.0, -1.0, f64::NAN, 1e6] {
            let e = c.set_rate(bad).unwrap_err();
            assert!(e.contains("clock rate"), "{e}");
        }
    }
}
