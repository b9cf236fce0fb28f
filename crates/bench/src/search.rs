//! Capacity search: find the highest offered rate a server sustains under a failure
//! criterion. The failure-free search raises the rate in fixed steps until a run fails and
//! then bisects between the last pass and the first failure (thesis 4.4.3); the fixed-rates
//! plan measures a given list. Repeats give a 95% confidence interval (t-distribution).
//!
//! The search is pure: it talks to an [`Oracle`] that runs one data point, so it can be
//! tested against synthetic servers of known capacity.
//!
//! A point that meets the criterion but delivered far less than the rate offered (its
//! client throughput per offered session/s [`DELIVERY_SHORTFALL`] below the best of the
//! lower points, on samples large enough to tell) ends the search like the ceiling: the
//! testbed — most often the load generator sharing two cores with the server — carried
//! no more, so the server was not judged there and its capacity is a lower bound (matrix
//! MPL without a CPU quota: 146 → 183 → 219 sessions/s "passed" at 804, 844 and 836 MB/s).

use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// When a data point counts as a failure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Criterion {
    /// No request may time out and no session may fail (thesis ch. 4).
    Strict,
    /// Fewer than this fraction of sessions may fail (seed 001 uses 0.3%).
    Sessions { max_failed_fraction: f64 },
    /// Strict, and at least this fraction of the judged sessions (the probes where the
    /// run has them, else every steady-state session) completed and played without a
    /// stall: seed 004's capacity, which viewers lose before any server resource looks
    /// saturated (adaptive players must also have kept 90% of
    /// their unloaded mean bit rate, which the load generator folds into `played_clean`).
    Quality { min_acceptable_fraction: f64 },
    /// `strict`, and 95% of the completed sessions ended at most `max_lag_s` behind their
    /// own pace (`vodkit load`'s session lag): the server served the offered load, not
    /// just survived it with every viewer slowed down.
    Pace { max_lag_s: f64 },
}

impl Criterion {
    /// A point passes when steady-state sessions were measured and the failures stay
    /// within the criterion (a point without measured sessions proves nothing); a point
    /// stopped early had already failed.
    pub fn passes(&self, o: &Observation) -> bool {
        if o.sessions == 0 || o.stopped_early {
            return false;
        }
        match *self {
            Criterion::Strict => o.timed_out_requests == 0 && o.failed_sessions == 0,
            Criterion::Sessions {
                max_failed_fraction,
            } => o.failure_fraction < max_failed_fraction,
            Criterion::Quality {
                min_acceptable_fraction,
            } => {
                Criterion::Strict.passes(o)
                    && o.acceptable_fraction
                        .is_some_and(|a| a + 1e-12 >= min_acceptable_fraction)
            }
            Criterion::Pace { max_lag_s } => {
                Criterion::Strict.passes(o) && o.lag_p95_s.is_some_and(|l| l <= max_lag_s)
            }
        }
    }
}

impl fmt::Display for Criterion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Criterion::Strict => f.write_str("strict"),
            Criterion::Sessions {
                max_failed_fraction,
            } => {
                write!(f, "sessions:{}%", max_failed_fraction * 100.0)
            }
            Criterion::Quality {
                min_acceptable_fraction,
            } => write!(f, "quality:{}%", min_acceptable_fraction * 100.0),
            Criterion::Pace { max_lag_s } => write!(f, "pace:{max_lag_s}s"),
        }
    }
}

impl FromStr for Criterion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "strict" {
            return Ok(Criterion::Strict);
        }
        let bad = || {
            format!(
                "criterion `{s}`: expected strict, sessions:PERCENT% (e.g. sessions:0.3%), quality:PERCENT% (e.g. quality:95%) or pace:SECONDS (e.g. pace:2s)"
            )
        };
        if let Some(v) = s.strip_prefix("pace:") {
            // A duration: `2s`, `2`, `1m`; never negative.
            let lag = vodkit_units::parse_seconds(v).map_err(|_| bad())?;
            return Ok(Criterion::Pace { max_lag_s: lag });
        }
        if let Some(v) = s.strip_prefix("quality:") {
            let fraction = match v.strip_suffix('%') {
                Some(p) => p.parse::<f64>().map_err(|_| bad())? / 100.0,
                None => v.parse::<f64>().map_err(|_| bad())?,
            };
            if !(fraction > 0.0 && fraction <= 1.0) {
                return Err(format!(
                    "criterion `{s}`: the acceptable share must be above 0 and at most 100%"
                ));
            }
            return Ok(Criterion::Quality {
                min_acceptable_fraction: fraction,
            });
        }
        let v = s.strip_prefix("sessions:").ok_or_else(bad)?;
        let fraction = match v.strip_suffix('%') {
            Some(p) => p.parse::<f64>().map_err(|_| bad())? / 100.0,
            None => v.parse::<f64>().map_err(|_| bad())?,
        };
        if !(fraction > 0.0 && fraction < 1.0) {
            return Err(format!(
                "criterion `{s}`: the failure share must be between 0 and 100%"
            ));
        }
        Ok(Criterion::Sessions {
            max_failed_fraction: fraction,
        })
    }
}

/// What the criterion looks at in one run.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Observation {
    /// Steady-state sessions measured.
    pub sessions: u64,
    pub failure_fraction: f64,
    pub failed_sessions: u64,
    pub timed_out_requests: u64,
    /// Fraction of the judged sessions that played acceptably (`None`: not modelled).
    pub acceptable_fraction: Option<f64>,
    /// 95th percentile of the completed sessions' lag behind their pace, s (`None`: none
    /// measured).
    pub lag_p95_s: Option<f64>,
    /// Bytes delivered to the clients per second over the steady state, MB/s.
    pub throughput_mb_s: f64,
    /// The run was ended once its failure was certain ([`crate::early`]).
    pub stopped_early: bool,
}

/// How far a passing point's throughput per offered session/s may fall below the best of
/// the lower passing points before the point counts as not delivered (the spread of
/// steady-state throughput at one rate is a few percent on samples of
/// [`SHORTFALL_MIN_SESSIONS`]; matrix MPL fell 18% at 183/s).
pub const DELIVERY_SHORTFALL: f64 = 0.15;

/// Points with fewer steady sessions are too noisy to judge delivery on (heavy-tailed
/// session sizes: the sum over n sessions spreads by about 2/√n).
pub const SHORTFALL_MIN_SESSIONS: u64 = 1000;

/// Where a repeat's search stopped because the offered load was not delivered.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Shortfall {
    /// The rate of the first point that fell short.
    pub rate: f64,
    /// Its throughput per offered session/s over the best of the lower points.
    pub delivered_fraction: f64,
}

/// Which rates to run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum SearchPlan {
    /// Step up from `start` by `step` until a failure, then bisect to within `precision`.
    FailureFree {
        start: f64,
        step: f64,
        precision: f64,
        max_rate: f64,
    },
    /// Measure exactly these rates (ascending).
    FixedRates { rates: Vec<f64> },
}

impl SearchPlan {
    /// Default failure-free plan for a rough capacity guess (sessions/s).
    pub fn failure_free_around(guess: f64) -> SearchPlan {
        let step = (guess / 4.0).max(0.05);
        SearchPlan::FailureFree {
            start: step,
            step,
            precision: step / 4.0,
            max_rate: guess * 20.0,
        }
    }

    /// Default plan where the capacity bound `bound` (sessions/s) is known, as on an
    /// emulated drive: no server passes above it, so the search starts at half of it, steps
    /// by a quarter up to the bound and bisects to 1/32 of it — at most six points whatever
    /// the drive, the budget or the workload's bit rates.
    pub fn within_bound(bound: f64) -> SearchPlan {
        let b = bound.max(0.05);
        SearchPlan::FailureFree {
            start: round_rate(b / 2.0),
            step: b / 4.0,
            // 1/32 of the bound, and the 1e-4 that rates are rounded to.
            precision: b / 32.0 + 1e-4,
            max_rate: b,
        }
    }

    /// The default plan: [`SearchPlan::within_bound`] when the bound is known, else
    /// [`SearchPlan::failure_free_around`] the workload's rate guess.
    pub fn default_for(guess: f64, bound: Option<f64>) -> SearchPlan {
        match bound {
            Some(b) if b.is_finite() && b > 0.0 => SearchPlan::within_bound(b),
            _ => SearchPlan::failure_free_around(guess),
        }
    }

    /// Parse `failure-free[:start=R,step=R,precision=R,max=R]` or `fixed-rates:R,R,…`,
    /// with unset failure-free fields taken from `default`.
    pub fn parse(s: &str, default: &SearchPlan) -> Result<SearchPlan, String> {
        if let Some(list) = s.strip_prefix("fixed-rates:") {
            let mut rates = list
                .split(',')
                .map(|r| {
                    r.trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|v| *v > 0.0 && v.is_finite())
                        .ok_or_else(|| {
                            format!("--search fixed-rates: `{r}` is not a positive rate")
                        })
                })
                .collect::<Result<Vec<_>, _>>()?;
            rates.sort_by(f64::total_cmp);
            rates.dedup();
            return Ok(SearchPlan::FixedRates { rates });
        }
        let rest = s.strip_prefix("failure-free").ok_or_else(|| {
            format!("--search `{s}`: expected failure-free[:start=R,step=R,precision=R,max=R] or fixed-rates:R,R,…")
        })?;
        let (mut start, mut step, mut precision, mut max_rate) = match default {
            SearchPlan::FailureFree {
                start,
                step,
                precision,
                max_rate,
            } => (*start, *step, *precision, *max_rate),
            SearchPlan::FixedRates { .. } => (1.0, 1.0, 0.25, 100.0),
        };
        if let Some(opts) = rest.strip_prefix(':') {
            for kv in opts.split(',') {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| format!("--search: `{kv}` is not key=value"))?;
                let v: f64 = v
                    .parse()
                    .ok()
                    .filter(|v: &f64| *v > 0.0 && v.is_finite())
                    .ok_or_else(|| format!("--search: {k} `{v}` is not a positive number"))?;
                match k {
                    "start" => start = v,
                    "step" => step = v,
                    "precision" => precision = v,
                    "max" => max_rate = v,
                    _ => {
                        return Err(format!(
                            "--search: unknown key `{k}`; expected start, step, precision or max"
                        ))
                    }
                }
            }
        } else if !rest.is_empty() {
            return Err(format!(
                "--search `{s}`: expected failure-free or failure-free:key=value,…"
            ));
        }
        if start > max_rate {
            return Err(format!("--search: start {start} is above max {max_rate}"));
        }
        Ok(SearchPlan::FailureFree {
            start,
            step,
            precision,
            max_rate,
        })
    }
}

/// Runs one data point at a rate. `repeat` numbers the repetition (seeds may differ).
pub trait Oracle {
    type Detail;
    type Error;
    fn measure(
        &mut self,
        rate: f64,
        repeat: u32,
    ) -> Result<(Observation, Self::Detail), Self::Error>;
}

/// One measured data point.
#[derive(Debug, Clone, Serialize)]
pub struct Trial<D> {
    pub rate: f64,
    pub repeat: u32,
    /// The criterion's verdict.
    pub passed: bool,
    /// Met the criterion but did not deliver the offered load (see [`Shortfall`]).
    pub short: bool,
    pub observation: Observation,
    pub detail: D,
}

/// Result of one repetition of the search.
#[derive(Debug, Clone, Serialize)]
pub struct RepeatOutcome {
    pub repeat: u32,
    /// Highest rate that passed (None when even the lowest tried rate failed).
    pub max_failure_free_rate: Option<f64>,
    /// True when the search stopped at the plan's ceiling without a failure, or at a
    /// point that did not deliver the offered load (`shortfall`): the capacity is a lower
    /// bound either way.
    pub hit_ceiling: bool,
    /// The first point that met the criterion without delivering the offered load.
    pub shortfall: Option<Shortfall>,
}

/// All trials and the per-repeat capacities.
#[derive(Debug, Clone, Serialize)]
pub struct SearchOutcome<D> {
    pub trials: Vec<Trial<D>>,
    pub repeats: Vec<RepeatOutcome>,
}

impl<D> SearchOutcome<D> {
    /// Mean capacity and its 95% interval over repeats (interval needs ≥ 2 repeats).
    pub fn capacity(&self) -> Option<Estimate> {
        let values: Vec<f64> = self
            .repeats
            .iter()
            .map(|r| r.max_failure_free_rate.unwrap_or(0.0))
            .collect();
        if self
            .repeats
            .iter()
            .all(|r| r.max_failure_free_rate.is_none())
        {
            return None;
        }
        Some(Estimate::from_samples(&values))
    }

    /// Trials run at exactly `rate` that passed.
    pub fn passing_at(&self, rate: f64) -> impl Iterator<Item = &Trial<D>> {
        self.trials
            .iter()
            .filter(move |t| t.passed && t.rate == rate)
    }
}

/// A mean with an optional 95% confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    pub mean: f64,
    pub ci95: Option<(f64, f64)>,
    pub n: usize,
}

impl Estimate {
    pub fn from_samples(xs: &[f64]) -> Estimate {
        let n = xs.len();
        let mean = xs.iter().sum::<f64>() / n.max(1) as f64;
        let ci95 = (n >= 2).then(|| {
            let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            let half = t_975(n - 1) * (var / n as f64).sqrt();
            (mean - half, mean + half)
        });
        Estimate { mean, ci95, n }
    }
}

/// Two-sided 95% quantile of Student's t with `df` degrees of freedom.
pub fn t_975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => TABLE[df - 1],
        31..=40 => 2.021,
        41..=60 => 2.000,
        61..=120 => 1.980,
        _ => 1.960,
    }
}

/// Run `plan` `repeats` times against `oracle`; `on_trial` sees each data point as it lands.
pub fn search<O: Oracle>(
    oracle: &mut O,
    plan: &SearchPlan,
    criterion: Criterion,
    repeats: u32,
    mut on_trial: impl FnMut(&Trial<O::Detail>),
) -> Result<SearchOutcome<O::Detail>, O::Error> {
    let mut out = SearchOutcome {
        trials: Vec::new(),
        repeats: Vec::new(),
    };
    let mut previous: Option<f64> = None;
    for repeat in 0..repeats.max(1) {
        // The best throughput per offered session/s of this repeat's delivered points.
        let mut per_rate_best: Option<f64> = None;
        let mut shortfall: Option<Shortfall> = None;
        let mut run = |rate: f64| -> Result<Verdict, O::Error> {
            let (observation, detail) = oracle.measure(rate, repeat)?;
            let passed = criterion.passes(&observation);
            let judged = observation.sessions >= SHORTFALL_MIN_SESSIONS && rate > 0.0;
            let per_rate = observation.throughput_mb_s / rate;
            let short = passed
                && judged
                && per_rate_best.is_some_and(|b| per_rate < b * (1.0 - DELIVERY_SHORTFALL));
            if short {
                let best = per_rate_best.unwrap_or(per_rate);
                if shortfall.is_none_or(|s| rate < s.rate) {
                    shortfall = Some(Shortfall {
                        rate,
                        delivered_fraction: per_rate / best,
                    });
                }
            } else if passed && judged {
                per_rate_best = Some(per_rate_best.map_or(per_rate, |b| b.max(per_rate)));
            }
            let t = Trial {
                rate,
                repeat,
                passed,
                short,
                observation,
                detail,
            };
            on_trial(&t);
            out.trials.push(t);
            Ok(match (passed, short) {
                (true, false) => Verdict::Pass,
                (true, true) => Verdict::Short,
                (false, _) => Verdict::Fail,
            })
        };
        let outcome = match plan {
            SearchPlan::FixedRates { rates } => {
                let mut best = None;
                let mut still_clean = true;
                let mut short = false;
                for &r in rates {
                    let verdict = run(r)?;
                    short |= still_clean && verdict == Verdict::Short;
                    still_clean &= verdict == Verdict::Pass;
                    if still_clean {
                        best = Some(r);
                    }
                }
                RepeatOutcome {
                    repeat,
                    max_failure_free_rate: best,
                    hit_ceiling: short,
                    shortfall: None,
                }
            }
            SearchPlan::FailureFree {
                start,
                step,
                precision,
                max_rate,
            } => {
                // Later repeats start just below the previous answer to save runs.
                let first =
                    previous.map_or(*start, |p| (p - 2.0 * step).max(*start).min(*max_rate));
                let (best, hit_ceiling) =
                    step_then_bisect(&mut run, first, *step, *precision, *max_rate)?;
                RepeatOutcome {
                    repeat,
                    max_failure_free_rate: best,
                    hit_ceiling,
                    shortfall: None,
                }
            }
        };
        let outcome = RepeatOutcome {
            hit_ceiling: outcome.hit_ceiling || shortfall.is_some(),
            shortfall,
            ..outcome
        };
        previous = outcome.max_failure_free_rate.or(previous);
        out.repeats.push(outcome);
    }
    Ok(out)
}

/// How one point went for the search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Pass,
    Fail,
    /// Met the criterion without delivering the offered load: no higher rate is judged.
    Short,
}

fn step_then_bisect<E>(
    run: &mut impl FnMut(f64) -> Result<Verdict, E>,
    start: f64,
    step: f64,
    precision: f64,
    max_rate: f64,
) -> Result<(Option<f64>, bool), E> {
    let mut pass: Option<f64> = None;
    let mut rate = start;
    let fail = loop {
        match run(rate)? {
            Verdict::Pass => {
                pass = Some(rate);
                if rate >= max_rate {
                    return Ok((pass, true));
                }
                rate = (rate + step).min(max_rate);
            }
            // The step below was the last one delivered: bisect between them, points
            // falling short counting as failures (the caller marks the capacity a bound).
            Verdict::Short | Verdict::Fail => break rate,
        }
    };
    let (mut lo, mut hi) = (pass.unwrap_or(0.0), fail);
    while hi - lo > precision {
        let mid = round_rate((lo + hi) / 2.0);
        if mid <= lo || mid >= hi {
            break;
        }
        if run(mid)? == Verdict::Pass {
            pass = Some(mid);
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok((pass, false))
}

/// Keep rates readable in reports (4 significant decimals).
fn round_rate(r: f64) -> f64 {
    (r * 10_000.0).round() / 10_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server with a known capacity; `jitter` shifts each repeat's capacity.
    struct Synthetic {
        capacity: f64,
        jitter: Vec<f64>,
        calls: u32,
    }

    impl Synthetic {
        /// A server of `capacity` sessions/s, the same in every repeat.
        fn at(capacity: f64) -> Synthetic {
            Synthetic {
                capacity,
                jitter: vec![],
                calls: 0,
            }
        }
    }

    impl Oracle for Synthetic {
        type Detail = ();
        type Error = String;
        fn measure(&mut self, rate: f64, repeat: u32) -> Result<(Observation, ()), String> {
            self.calls += 1;
            let cap = self.capacity + self.jitter.get(repeat as usize).copied().unwrap_or(0.0);
            let over = ((rate - cap) / cap).max(0.0);
            let o = Observation {
                sessions: 1000,
                failure_fraction: over,
                failed_sessions: (over * 1000.0).ceil() as u64,
                timed_out_requests: (over * 5000.0).ceil() as u64,
                acceptable_fraction: None,
                lag_p95_s: None,
                throughput_mb_s: 0.0,
                stopped_early: false,
            };
            Ok((o, ()))
        }
    }

    /// A server that never fails but whose testbed carries at most `limit_mb_s`: 5 MB/s
    /// per session/s below it, flat above it (as matrix MPL without a CPU quota).
    struct Flattening {
        limit_mb_s: f64,
        sessions_per_rate: f64,
    }

    impl Oracle for Flattening {
        type Detail = ();
        type Error = String;
        fn measure(&mut self, rate: f64, _: u32) -> Result<(Observation, ()), String> {
            let o = Observation {
                sessions: (rate * self.sessions_per_rate) as u64,
                throughput_mb_s: (5.0 * rate).min(self.limit_mb_s),
                ..Observation::default()
            };
            Ok((o, ()))
        }
    }

    #[test]
    fn a_plan_within_the_bound_finds_any_capacity_below_it_in_six_points() {
        let bound = 20.94;
        for share in [0.05, 0.17, 0.3, 0.49, 0.51, 0.62, 0.74, 0.76, 0.9, 0.99] {
            let capacity = bound * share;
            let mut o = Synthetic {
                capacity,
                jitter: vec![],
                calls: 0,
            };
            let plan = SearchPlan::within_bound(bound);
            let out = search(&mut o, &plan, Criterion::Strict, 1, |_| {}).unwrap();
            assert!(o.calls <= 6, "capacity {capacity}: {} points", o.calls);
            let got = out.repeats[0].max_failure_free_rate.unwrap_or(0.0);
            assert!(got <= capacity + 1e-9, "{got} above {capacity}");
            assert!(
                capacity - got <= bound / 32.0 + 2e-4,
                "capacity {capacity}: found {got}, coarser than bound/32"
            );
            assert!(out.trials.iter().all(|t| t.rate <= bound + 1e-9));
        }
        // Without a bound the guess decides, as before.
        assert_eq!(
            SearchPlan::default_for(3.0, None),
            SearchPlan::failure_free_around(3.0)
        );
        assert_eq!(
            SearchPlan::default_for(3.0, Some(bound)),
            SearchPlan::within_bound(bound)
        );
    }

    #[test]
    fn a_point_that_does_not_deliver_the_offered_load_ends_the_search_as_a_bound() {
        let mut o = Flattening {
            limit_mb_s: 840.0,
            sessions_per_rate: 13.5,
        };
        let out = search(&mut o, &ff(36.5, 36.5, 4.0), Criterion::Strict, 1, |_| {}).unwrap();
        let rep = &out.repeats[0];
        // Delivery is proportional up to 168/s; 15% short at 197.6/s: the capacity lies
        // between 168 and 197.6 and is marked a lower bound.
        let got = rep.max_failure_free_rate.unwrap();
        assert!((168.0..197.7).contains(&got), "{got}");
        assert!(rep.hit_ceiling);
        let s = rep.shortfall.expect("a shortfall is recorded");
        assert!(s.delivered_fraction < 0.85, "{s:?}");
        assert!(s.rate > got, "{s:?}");
        assert!(out.trials.iter().any(|t| t.short && t.passed));
        // Far fewer points than stepping to the ceiling of 1000/s.
        assert!(out.trials.len() < 12, "{}", out.trials.len());
        // Small samples are not judged: the same flattening over 30 sessions a point runs
        // to the ceiling without a shortfall.
        let mut o = Flattening {
            limit_mb_s: 840.0,
            sessions_per_rate: 0.1,
        };
        let plan = ff_to(36.5, 36.5, 4.0, 300.0);
        let out = search(&mut o, &plan, Criterion::Strict, 1, |_| {}).unwrap();
        assert!(out.repeats[0].shortfall.is_none());
        assert_eq!(out.repeats[0].max_failure_free_rate, Some(300.0));
    }

    fn ff(start: f64, step: f64, precision: f64) -> SearchPlan {
        ff_to(start, step, precision, 1000.0)
    }

    /// A failure-free search that stops at `max_rate`.
    fn ff_to(start: f64, step: f64, precision: f64, max_rate: f64) -> SearchPlan {
        SearchPlan::FailureFree {
            start,
            step,
            precision,
            max_rate,
        }
    }

    #[test]
    fn finds_known_capacity_within_precision() {
        for cap in [0.7, 3.0, 12.34, 55.5] {
            let mut o = Synthetic::at(cap);
            let out = search(&mut o, &ff(1.0, 2.0, 0.05), Criterion::Strict, 1, |_| {}).unwrap();
            let got = out.capacity().map(|e| e.mean).unwrap_or(0.0);
            assert!(
                got <= cap && cap - got <= 0.05 + 1e-9,
                "cap {cap}: got {got}"
            );
            assert!(o.calls < 60, "too many runs: {}", o.calls);
        }
    }

    #[test]
    fn start_above_capacity_bisects_down() {
        let mut o = Synthetic::at(2.0);
        let out = search(&mut o, &ff(10.0, 5.0, 0.1), Criterion::Strict, 1, |_| {}).unwrap();
        let got = out.repeats[0].max_failure_free_rate.unwrap();
        assert!((1.9..=2.0).contains(&got), "{got}");
    }

    #[test]
    fn session_criterion_tolerates_small_failure_share() {
        // 0.3% failures allowed: capacity moves up to cap * 1.003.
        let mut o = Synthetic::at(10.0);
        let c: Criterion = "sessions:0.3%".parse().unwrap();
        let out = search(&mut o, &ff(1.0, 1.0, 0.001), c, 1, |_| {}).unwrap();
        let got = out.repeats[0].max_failure_free_rate.unwrap();
        assert!(got > 10.0 && got < 10.03 + 1e-9, "{got}");
        let mut o = Synthetic::at(10.0);
        let strict = search(&mut o, &ff(1.0, 1.0, 0.001), Criterion::Strict, 1, |_| {}).unwrap();
        assert!(strict.repeats[0].max_failure_free_rate.unwrap() <= 10.0);
    }

    #[test]
    fn repeats_give_a_t_interval_around_noisy_capacity() {
        let jitter = vec![0.3, -0.2, 0.1, -0.4, 0.2];
        let mut o = Synthetic {
            capacity: 8.0,
            jitter: jitter.clone(),
            calls: 0,
        };
        let out = search(&mut o, &ff(1.0, 1.0, 0.01), Criterion::Strict, 5, |_| {}).unwrap();
        let est = out.capacity().unwrap();
        assert_eq!(est.n, 5);
        let (lo, hi) = est.ci95.unwrap();
        assert!(lo < 8.0 && 8.0 < hi, "{lo}..{hi}");
        // Width follows the sample spread of the jitter: t(4) * s / sqrt(5).
        let m = jitter.iter().sum::<f64>() / 5.0;
        let s = (jitter.iter().map(|j| (j - m).powi(2)).sum::<f64>() / 4.0).sqrt();
        let expected_half = 2.776 * s / 5f64.sqrt();
        assert!(
            ((hi - lo) / 2.0 - expected_half).abs() < 0.03,
            "{} vs {expected_half}",
            (hi - lo) / 2.0
        );
    }

    #[test]
    fn fixed_rates_stop_counting_after_first_failure() {
        let mut o = Synthetic::at(5.0);
        let plan = SearchPlan::parse("fixed-rates:8,2,4,6", &ff(1.0, 1.0, 0.1)).unwrap();
        let out = search(&mut o, &plan, Criterion::Strict, 1, |_| {}).unwrap();
        assert_eq!(out.trials.len(), 4);
        assert_eq!(out.repeats[0].max_failure_free_rate, Some(4.0));
    }

    #[test]
    fn ceiling_is_flagged() {
        let mut o = Synthetic::at(500.0);
        let plan = ff_to(1.0, 1.0, 0.1, 3.0);
        let out = search(&mut o, &plan, Criterion::Strict, 1, |_| {}).unwrap();
        assert!(out.repeats[0].hit_ceiling);
        assert_eq!(out.repeats[0].max_failure_free_rate, Some(3.0));
    }

    #[test]
    fn nothing_passes_gives_no_capacity() {
        let mut o = Synthetic::at(0.001);
        let out = search(&mut o, &ff(1.0, 1.0, 0.5), Criterion::Strict, 2, |_| {}).unwrap();
        assert!(out.capacity().is_none());
    }

    #[test]
    fn parse_errors_are_explicit() {
        let d = ff(1.0, 1.0, 0.1);
        assert!(SearchPlan::parse("fixed-rates:1,x", &d)
            .unwrap_err()
            .contains("`x`"));
        assert!(SearchPlan::parse("binary", &d)
            .unwrap_err()
            .contains("expected failure-free"));
        assert!(SearchPlan::parse("failure-free:speed=3", &d)
            .unwrap_err()
            .contains("unknown key"));
        assert_eq!(
            SearchPlan::parse("failure-free:start=2,step=3", &d).unwrap(),
            SearchPlan::FailureFree {
                start: 2.0,
                step: 3.0,
                precision: 0.1,
                max_rate: 1000.0
            }
        );
        assert!("sessions:abc"
            .parse::<Criterion>()
            .unwrap_err()
            .contains("expected strict"));
        assert!("sessions:150%".parse::<Criterion>().is_err());
        assert_eq!(
            "sessions:0.3%".parse::<Criterion>().unwrap(),
            Criterion::Sessions {
                max_failed_fraction: 0.003
            }
        );
    }

    /// `quality` and `pace` need what `strict` needs and their own measure: each criterion
    /// passes its `ok` point, fails each variation of it, and refuses its malformed forms.
    #[test]
    fn quality_and_pace_need_strictness_and_their_own_measure() {
        let quality = Observation {
            sessions: 100,
            acceptable_fraction: Some(0.96),
            ..Observation::default()
        };
        let pace = Observation {
            sessions: 100,
            lag_p95_s: Some(1.5),
            ..Observation::default()
        };
        let cases: [(&str, Observation, Vec<Observation>, [&str; 4]); 2] = [
            (
                "quality:95%",
                quality,
                vec![
                    Observation {
                        acceptable_fraction: Some(0.9),
                        ..quality
                    },
                    Observation {
                        acceptable_fraction: None,
                        ..quality
                    },
                    Observation {
                        failed_sessions: 1,
                        ..quality
                    },
                ],
                ["quality:", "quality:0%", "quality:120%", "quality:x"],
            ),
            (
                "pace:2s",
                pace,
                vec![
                    // Every session survived, but they ended 5 s late: the load was not
                    // served.
                    Observation {
                        lag_p95_s: Some(5.0),
                        ..pace
                    },
                    Observation {
                        lag_p95_s: None,
                        ..pace
                    },
                    Observation {
                        timed_out_requests: 1,
                        ..pace
                    },
                ],
                ["pace:", "pace:-1s", "pace:x", "pace:infs"],
            ),
        ];
        for (text, ok, failing, malformed) in cases {
            let c: Criterion = text.parse().unwrap();
            assert_eq!(c.to_string(), text);
            assert!(c.passes(&ok), "{c} failed {ok:?}");
            for p in failing {
                assert!(!c.passes(&p), "{c} passed {p:?}");
            }
            for bad in malformed {
                assert!(bad.parse::<Criterion>().is_err(), "{bad}");
            }
        }
        assert_eq!(
            "pace:2s".parse::<Criterion>().unwrap(),
            Criterion::Pace { max_lag_s: 2.0 }
        );
        assert_eq!(
            "pace:0.5".parse::<Criterion>().unwrap().to_string(),
            "pace:0.5s"
        );
    }

    #[test]
    fn a_point_without_sessions_never_passes() {
        let empty = Observation::default();
        assert!(!Criterion::Strict.passes(&empty));
        assert!(!"sessions:0.3%".parse::<Criterion>().unwrap().passes(&empty));
        assert!(Criterion::Strict.passes(&Observation {
            sessions: 3,
            ..empty
        }));
    }

    #[test]
    fn t_table_matches_known_quantiles() {
        assert_eq!(t_975(9), 2.262);
        assert!(t_975(1000) < 1.97 && t_975(1000) > 1.95);
        assert!(t_975(0).is_infinite());
    }
}
