//! The run's global schedule and its steady state (thesis 3.6.1): every session of the whole
//! run in arrival order, and which sessions and requests count, decided from the schedule
//! alone. A shard of a sharded run computes the same schedule as the single-process run and
//! keeps its own part of it, so the shards' steady sets together are exactly the
//! single-process run's, whatever the ramps.
//!
//! Sessions are numbered by arrival over the whole run (ties in log order); probes come after
//! them. The session ramps cut that numbering: `ramp_up_sessions` and beyond, short of the
//! last `ramp_down_sessions`. The request ramps cut the run's requests in order of their
//! intended send times (arrival + the pacing before them, ties by session and request
//! number): a request is steady when its session is and it is neither among the first
//! `ramp_up_requests` nor among the last `ramp_down_requests`. With `--duration`, the run's
//! sessions and requests are those scheduled before it ends. Probes are judged apart and
//! never counted.
//!
//! Adaptive players and live viewers choose their requests as they play, so no schedule
//! knows them: a run with such sessions ranks the requests it sent by their send times
//! instead, which only a single process can do (a sharded one is refused request ramps).

use crate::config::{InputError, LoadConfig};
use crate::record::SessionRecord;
use crate::warm;
use std::sync::Arc;
use vodkit_workload::model::Session;

/// One session of the whole run as scheduled; its position in [`schedule`]'s list is its
/// number (`SessionRecord::index`).
#[derive(Clone, Debug)]
pub struct Scheduled {
    /// Position in the log (`None` for a probe).
    pub position: Option<usize>,
    /// Seconds after the start of the run.
    pub arrival: f64,
    /// The session as it runs: the log's, a warm start's tail or joined viewer, or a probe.
    pub session: Arc<Session>,
    /// Started mid-session by a warm start.
    pub prefilled: bool,
    pub probe: bool,
}

impl Scheduled {
    /// Whether this run (its shard) runs the session: its log position's shard, and for a
    /// probe shard 0 (so a sharded run has one set of probes).
    pub fn owned_by(&self, config: &LoadConfig) -> bool {
        match self.position {
            Some(p) => config.owns(p),
            None => config.shard.is_none_or(|s| s.index == 0),
        }
    }
}

/// When probes may start: at once after a warm start has settled, else once the longest
/// scheduled session could have played out.
pub fn probe_start_s(config: &LoadConfig) -> f64 {
    if config.warm_horizon() > 0.0 {
        config.settle_s()
    } else {
        config.sessions[..config.schedule().len()]
            .iter()
            .map(warm::nominal_length)
            .fold(0.0, f64::max)
    }
}

/// Every session of the whole run (all shards), numbered in arrival order, probes last.
pub fn schedule(config: &LoadConfig) -> Vec<Scheduled> {
    let arrivals = config.schedule();
    let horizon = config.warm_horizon();
    let mut run: Vec<Scheduled> = arrivals
        .iter()
        .enumerate()
        .filter_map(|(i, &a)| {
            let s = &config.sessions[i];
            let (arrival, trimmed) = match warm::place(s, a, horizon) {
                warm::Start::Whole(at) => (at, None),
                warm::Start::Tail { arrival, from } => (arrival, Some(warm::tail(s, from))),
                warm::Start::Joined { remaining_s } => (0.0, Some(warm::joined(s, remaining_s))),
                warm::Start::Gone => return None,
            };
            Some(Scheduled {
                position: Some(i),
                arrival,
                prefilled: trimmed.is_some(),
                session: Arc::new(trimmed.unwrap_or_else(|| s.clone())),
                probe: false,
            })
        })
        .collect();
    // A stable sort: simultaneous arrivals keep their log order.
    run.sort_by(|a, b| a.arrival.total_cmp(&b.arrival));
    if let Some(p) = &config.probes {
        let probes = crate::probe::plan(
            &config.sessions[..arrivals.len()],
            p,
            probe_start_s(config),
            config.span_s(),
        );
        run.extend(probes.into_iter().map(|(session, arrival)| Scheduled {
            position: None,
            arrival,
            session: Arc::new(session),
            prefilled: false,
            probe: true,
        }));
    }
    run
}

/// Whether a session chooses its requests as it plays (no schedule knows them).
fn chooses_requests(config: &LoadConfig, s: &Session) -> bool {
    config.player.is_some() || s.live.is_some()
}

/// Whether the run's requests follow from the schedule: no session of it chooses its own.
pub fn requests_planned(config: &LoadConfig) -> bool {
    !config.sessions[..config.schedule().len()]
        .iter()
        .any(|s| chooses_requests(config, s))
}

/// A sharded run's request ramps must be drawn on the whole run's schedule: refuse them
/// where the run's requests do not follow from it (players, live viewers).
pub fn check(config: &LoadConfig) -> Result<(), InputError> {
    let ramps = config.ramp.up_requests > 0 || config.ramp.down_requests > 0;
    match config.shard {
        Some(shard) if ramps && !requests_planned(config) => Err(InputError(format!(
            "--shard {shard} with --ramp-up-requests/--ramp-down-requests: players and live viewers \
             choose their requests as they play, so the shards cannot agree on the run's first and \
             last requests; give 0 for both (the session ramps still apply)"
        ))),
        _ => Ok(()),
    }
}

/// The steady state of a whole run, by session number.
#[derive(Clone, Debug, PartialEq)]
pub struct Steady {
    /// Inside the session ramps, by session number (probes never).
    pub sessions: Vec<bool>,
    /// Steady requests by session number and request number (into the scheduled session's
    /// requests); `None` when sessions choose their requests (see [`rank_sent`]).
    pub requests: Option<Vec<Vec<bool>>>,
}

impl Steady {
    /// Whether session number `index` is inside the session ramps.
    pub fn session(&self, index: usize) -> bool {
        self.sessions.get(index).copied().unwrap_or(false)
    }
}

/// The steady state of `run` (from [`schedule`]) under `config`'s ramps.
pub fn steady(config: &LoadConfig, run: &[Scheduled]) -> Steady {
    let ramp = config.ramp;
    let end = config.duration.map_or(f64::INFINITY, |d| d.as_secs_f64());
    let counted = |s: &Scheduled| !s.probe && s.arrival < end;
    let n = run.iter().filter(|s| counted(s)).count() as u64;
    let sessions: Vec<bool> = run
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let i = i as u64;
            counted(s) && i >= ramp.up_sessions && i + ramp.down_sessions < n
        })
        .collect();
    if !requests_planned(config) {
        return Steady {
            sessions,
            requests: None,
        };
    }
    let mut order: Vec<(f64, usize, usize)> = run
        .iter()
        .enumerate()
        .filter(|(_, s)| counted(s))
        .flat_map(|(si, s)| {
            warm::nominal_times(&s.session, s.arrival)
                .enumerate()
                .filter(|&(_, t)| t < end)
                .map(move |(ri, t)| (t, si, ri))
        })
        .collect();
    order.sort_by(|a, b| a.0.total_cmp(&b.0).then((a.1, a.2).cmp(&(b.1, b.2))));
    let total = order.len() as u64;
    let mut requests: Vec<Vec<bool>> = run
        .iter()
        .map(|s| vec![false; s.session.requests.len()])
        .collect();
    for (rank, &(_, si, ri)) in order.iter().enumerate() {
        let rank = rank as u64;
        requests[si][ri] =
            sessions[si] && rank >= ramp.up_requests && rank + ramp.down_requests < total;
    }
    Steady {
        sessions,
        requests: Some(requests),
    }
}

/// Whether session number `index` is judged as a session: inside the session ramps, and
/// neither prefilled by a warm start (its load counts, but it never started up in front of
/// the measurement) nor a probe, nor arriving before a warm start has settled (`settle_s`).
pub fn judged(
    steady: &Steady,
    index: usize,
    prefilled: bool,
    probe: bool,
    arrival: f64,
    settle_s: f64,
) -> bool {
    steady.session(index) && !prefilled && !probe && arrival >= settle_s
}

/// Steady requests of a run whose sessions choose their requests: those of steady sessions
/// outside the request ramps in the order they were sent (probes not ranked), by record
/// and request position.
pub fn rank_sent(
    config: &LoadConfig,
    steady: &Steady,
    records: &[SessionRecord],
) -> Vec<Vec<bool>> {
    let ramp = config.ramp;
    let mut order: Vec<(f64, usize, usize)> = records
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.probe)
        .flat_map(|(si, s)| {
            s.requests
                .iter()
                .enumerate()
                .map(move |(ri, r)| (r.started, si, ri))
        })
        .collect();
    order.sort_by(|a, b| a.0.total_cmp(&b.0).then((a.1, a.2).cmp(&(b.1, b.2))));
    let total = order.len() as u64;
    let mut marks: Vec<Vec<bool>> = records
        .iter()
        .map(|s| vec![false; s.requests.len()])
        .collect();
    for (rank, &(_, si, ri)) in order.iter().enumerate() {
        let rank = rank as u64;
        marks[si][ri] = steady.session(records[si].index)
            && rank >= ramp.up_requests
            && rank + ramp.down_requests < total;
    }
    marks
}
