//! The load generator's ground floor, named by every module above it: seconds as a
//! [`Duration`] ([`secs`]) and the one-line bad-input error ([`InputError`]).

use std::time::Duration;

/// Longest pacing interval or timeout accepted (about 11.5 days).
pub const MAX_INTERVAL_S: f64 = 1e6;

/// Seconds as a `Duration`, clamped to `[0, MAX_INTERVAL_S * 100]`; NaN is zero.
pub fn secs(x: f64) -> Duration {
    let x = if x.is_nan() {
        0.0
    } else {
        x.clamp(0.0, MAX_INTERVAL_S * 100.0)
    };
    Duration::try_from_secs_f64(x).unwrap_or(Duration::ZERO)
}

/// Bad input to a load run: a one-line message naming what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InputError(pub String);
