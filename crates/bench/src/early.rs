//! Early stop: a point ends as soon as its failure is certain, so an overloaded point costs
//! seconds instead of its whole window. The load generator tallies the judged sessions
//! once a second ([`vodkit_load::Tally`]); [`certain_failure`] says whether the point's
//! criterion can still pass whatever happens in the rest of the window. It never changes
//! a verdict: it stops only points that would have failed.
//!
//! The rule, for each criterion (failed sessions count those refused with `503`, as the
//! criterion counts them):
//!
//! - `strict`, `quality:P%`: a judged session failed, or a steady request timed out.
//! - `pace:L`: as `strict`, or more completed sessions ended over L behind their pace than
//!   the 5% the 95th percentile allows of the most sessions the window can still complete
//!   (those completed, plus those not ended that may still complete and are not already
//!   over L behind — completing one of those could only add to the count). A session's
//!   lag never shrinks, so a count over the allowance stays over it.
//! - `sessions:P%`: the failed sessions are at least P of the failed ones plus the most
//!   sessions the window can complete (lag aside: those behind their pace count).
//!
//! `quality` is judged on stalls, which are known only once the run is summarised; its
//! early stop is its `strict` part.

use crate::search::Criterion;
use serde::{Deserialize, Serialize};
use vodkit_load::Tally;

/// Why and when a point was ended early.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EarlyStop {
    /// Seconds into the judged run.
    pub at_s: f64,
    /// What made the failure certain.
    pub why: String,
}

impl EarlyStop {
    /// `stopped at 9 s: failure certain (…)`.
    pub fn describe(&self) -> String {
        format!(
            "stopped at {:.0} s: failure certain ({})",
            self.at_s, self.why
        )
    }
}

/// The lag limit the load generator must watch for `criterion` (`pace` only).
pub fn lag_limit_s(criterion: &Criterion) -> Option<f64> {
    match *criterion {
        Criterion::Pace { max_lag_s } => Some(max_lag_s),
        _ => None,
    }
}

/// Sessions of `n` whose lag may exceed the limit with the 95th percentile still within
/// it: the percentile is the ⌈0.95·n⌉-th smallest lag (as the load generator's histogram
/// reads it), so at most n − ⌈0.95·n⌉ may be above.
pub fn lag_allowance(n: u64) -> u64 {
    let k = (vodkit_load::results::LAG_PERCENTILE / 100.0 * n as f64).ceil() as u64;
    n.saturating_sub(k.max(1))
}

/// What already fails the point under `criterion` whatever the rest of the window does,
/// or `None` while it may still pass. A point with nothing against it yet (no session
/// ended, or all passing) is never stopped.
pub fn certain_failure(criterion: &Criterion, t: &Tally) -> Option<String> {
    let not_served = t.failed + t.refused;
    let most = t.completed + t.open;
    let strict = || {
        if not_served > 0 {
            Some(format!("judged sessions failed: {not_served}"))
        } else if t.timed_out_requests > 0 {
            Some(format!(
                "steady requests timed out: {}",
                t.timed_out_requests
            ))
        } else {
            None
        }
    };
    match *criterion {
        Criterion::Strict | Criterion::Quality { .. } => strict(),
        Criterion::Pace { max_lag_s } => strict().or_else(|| {
            let allowed = lag_allowance(most);
            (t.behind > allowed).then(|| {
                format!(
                    "{} of at most {most} sessions already more than {max_lag_s} s behind, {allowed} allowed",
                    t.behind
                )
            })
        }),
        Criterion::Sessions {
            max_failed_fraction,
        } => {
            let total = not_served + most + t.open_behind;
            let share = not_served as f64 / total.max(1) as f64;
            (not_served > 0 && share >= max_failed_fraction).then(|| {
                format!(
                    "{not_served} of at most {total} sessions failed, {:.1}% allowed",
                    max_failed_fraction * 100.0
                )
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pace() -> Criterion {
        Criterion::Pace { max_lag_s: 2.0 }
    }

    /// `completed` of them `behind`, `open` more possible.
    fn tally(completed: u64, behind: u64, open: u64) -> Tally {
        Tally {
            t_s: 9.0,
            completed,
            behind,
            open,
            ..Tally::default()
        }
    }

    #[test]
    fn the_allowance_is_what_the_95th_percentile_leaves_above_it() {
        // n − ⌈0.95 n⌉.
        for (n, allowed) in [
            (0, 0),
            (1, 0),
            (19, 0),
            (20, 1),
            (21, 1),
            (39, 1),
            (40, 2),
            (100, 5),
        ] {
            assert_eq!(lag_allowance(n), allowed, "n = {n}");
        }
    }

    #[test]
    fn pace_fails_once_more_are_behind_than_the_most_sessions_allow() {
        // 100 at most: 5 may be behind.
        assert_eq!(certain_failure(&pace(), &tally(40, 5, 60)), None);
        let why = certain_failure(&pace(), &tally(40, 6, 60)).unwrap();
        assert_eq!(
            why,
            "6 of at most 100 sessions already more than 2 s behind, 5 allowed"
        );
        // Not yet certain while enough sessions may still complete on pace.
        assert_eq!(certain_failure(&pace(), &tally(10, 6, 200)), None);
        // Sessions already behind while playing do not count as possible completions.
        let mut t = tally(40, 6, 60);
        t.open_behind = 500;
        assert!(certain_failure(&pace(), &t).is_some());
    }

    #[test]
    fn pace_is_strict_first() {
        let mut t = tally(1, 0, 1000);
        t.failed = 1;
        assert_eq!(
            certain_failure(&pace(), &t).as_deref(),
            Some("judged sessions failed: 1")
        );
        let mut t = tally(1, 0, 1000);
        t.timed_out_requests = 3;
        assert_eq!(
            certain_failure(&pace(), &t).as_deref(),
            Some("steady requests timed out: 3")
        );
    }

    #[test]
    fn nothing_against_a_point_never_stops_it() {
        for c in [
            Criterion::Strict,
            pace(),
            "sessions:0.3%".parse().unwrap(),
            "quality:95%".parse().unwrap(),
        ] {
            // No session ended, none possible: a point without sessions fails anyway, but
            // it is not stopped for it.
            assert_eq!(certain_failure(&c, &Tally::default()), None, "{c}");
            // Everything passing so far.
            assert_eq!(certain_failure(&c, &tally(300, 0, 0)), None, "{c}");
            assert_eq!(certain_failure(&c, &tally(3, 0, 300)), None, "{c}");
        }
    }

    #[test]
    fn strict_and_quality_fail_on_the_first_failure_or_refusal() {
        for c in [Criterion::Strict, "quality:95%".parse().unwrap()] {
            let mut t = tally(300, 299, 0);
            assert_eq!(certain_failure(&c, &t), None, "{c}: lag is not theirs");
            t.refused = 1;
            assert!(certain_failure(&c, &t).is_some(), "{c}");
        }
    }

    #[test]
    fn sessions_share_fails_once_the_failed_are_that_share_of_the_most_possible() {
        let c: Criterion = "sessions:10%".parse().unwrap();
        let mut t = tally(50, 0, 50);
        t.failed = 11;
        // 11 of at most 111: under 10%.
        assert_eq!(certain_failure(&c, &t), None);
        t.failed = 12;
        t.refused = 0;
        // 12 of at most 112: 10.7%.
        assert_eq!(
            certain_failure(&c, &t).as_deref(),
            Some("12 of at most 112 sessions failed, 10.0% allowed")
        );
        // Exactly the share fails (the criterion needs fewer).
        let mut t = tally(0, 0, 90);
        t.failed = 10;
        assert!(certain_failure(&c, &t).is_some());
        // Sessions behind their pace may still complete: they count as possible.
        t.open_behind = 10;
        assert_eq!(certain_failure(&c, &t), None);
    }

    #[test]
    fn the_rule_agrees_with_the_criterion_on_every_completion_of_the_window() {
        // For small windows, every way the open sessions could still end: whenever the
        // rule says certain, no ending passes the criterion.
        let c = pace();
        for completed in 0..25u64 {
            for behind in 0..=completed {
                for open in 0..25u64 {
                    let t = tally(completed, behind, open);
                    if certain_failure(&c, &t).is_none() {
                        continue;
                    }
                    for good in 0..=open {
                        let n = completed + good;
                        // Lags: `behind` at 5 s, the rest at 0; p95 as the histogram reads it.
                        let k = ((0.95 * n as f64).ceil() as u64).max(1);
                        let p95 = if n - behind >= k { 0.0 } else { 5.0 };
                        let o = crate::search::Observation {
                            sessions: n,
                            lag_p95_s: (n > 0).then_some(p95),
                            ..Default::default()
                        };
                        assert!(!c.passes(&o), "{t:?} with {good} more on pace");
                    }
                }
            }
        }
    }
}
