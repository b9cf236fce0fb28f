//! A run watched while it runs, so a caller can end a run whose verdict is already settled
//! (the bench's early stop): once a second the run hands the caller a [`Tally`] of its
//! judged sessions — how those that ended ended, those already too far behind their pace,
//! and how many more could still complete before the run ends — and the caller's answer
//! `true` stops the run as `--duration` would ([`crate::watcher`] keeps the tally).

use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// What a watched run tells its caller once a second.
#[derive(Clone)]
pub struct Watch {
    /// Count the judged sessions that are more than this far behind their own pace
    /// (seconds; `None`: lag is not watched).
    pub lag_limit_s: Option<f64>,
    /// Called once a second with the tally; `true` ends the run (sessions still playing
    /// are cancelled, the results are written as after `--duration`).
    pub decide: Arc<dyn Fn(&Tally) -> bool + Send + Sync>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Watch {{ lag_limit_s: {:?} }}", self.lag_limit_s)
    }
}

/// The judged sessions of a run so far ([`crate::watcher`] says which are judged).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    /// Seconds since the run's clock started.
    pub t_s: f64,
    /// Judged sessions that completed, failed and were refused (`503`).
    pub completed: u64,
    pub failed: u64,
    pub refused: u64,
    /// Completed judged sessions that ended more than the lag limit behind their pace.
    pub behind: u64,
    /// Steady requests that timed out (any session's, as the results count them).
    pub timed_out_requests: u64,
    /// Judged sessions not ended yet that may still complete before the run ends and are
    /// not yet behind: at most this many more completions can still come.
    pub open: u64,
    /// Judged sessions still playing that are already more than the lag limit behind:
    /// should they complete, they complete behind.
    pub open_behind: u64,
}
