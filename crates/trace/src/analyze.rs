//! The analyzer: one streaming pass over a log that builds every session's chains, closes
//! a session once no later request could still join its chains, and feeds the closed
//! session to the chain, phase and session statistics and to the caller's sink.
//!
//! Memory: one small record per open chain fragment and per file of an open session, not
//! per request. A session is closed when the log's clock (latest completion seen) is more
//! than `window + max_service` past its last completion; a request served for longer than
//! `max_service` could have joined a chain already closed (such requests are counted).

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::io::BufRead;

use crate::chain::{ChainBuilder, ChainRec, CHAIN_WINDOW_S};
use crate::chainstats::{ChainStatsBuilder, ChainSummary};
use crate::files::FileTable;
use crate::parse::{LogFormat, ReadSummary};
use crate::phase::{session_phases, Phase, PhaseParams, PhaseStatsBuilder, PhaseSummary};
use crate::read::{read_log_with, ReadOptions};
use crate::record::LogRequest;
use crate::sessions::{ParallelTracker, SessionStatsBuilder, SessionSummary};

#[derive(Clone, Debug)]
pub struct AnalyzeOptions {
    pub format: LogFormat,
    /// Threads parsing the log (the analysis itself runs on the calling thread); the
    /// result is the same for any number.
    pub threads: usize,
    /// Adjacent requests this close in time join a chain (thesis: 40 s).
    pub window_s: f64,
    /// Longest service time a request may have and still join a chain closed before it
    /// completed.
    pub max_service_s: f64,
    pub phase: PhaseParams,
    /// CCDF breakpoints for the power-law fit (bytes).
    pub breakpoints: Vec<f64>,
    /// Probabilities for survival growth factors.
    pub probabilities: Vec<f64>,
    /// Leave sessions that start this close to the end of the log out of the session and
    /// phase statistics (thesis 5.1.2 drops the last hour); their chains are still written.
    pub exclude_tail_s: f64,
}

impl Default for AnalyzeOptions {
    fn default() -> Self {
        AnalyzeOptions {
            format: LogFormat::Auto,
            threads: 1,
            window_s: CHAIN_WINDOW_S,
            max_service_s: 3600.0,
            phase: PhaseParams::default(),
            breakpoints: vec![1e6, 2e8],
            probabilities: vec![0.45],
            exclude_tail_s: 0.0,
        }
    }
}

/// One closed session as the analyzer hands it to a [`SessionSink`].
pub struct ClosedSession<'a> {
    /// The session's key in the log.
    pub name: &'a str,
    /// Its chains, ordered by start time.
    pub chains: &'a [ChainRec],
    /// Its phases.
    pub phases: &'a [Phase],
    /// The file table the chains' `file` fields index.
    pub files: &'a FileTable,
}

/// Receives every closed session (and, when it asks for them, every request as it is read).
pub trait SessionSink {
    fn session(&mut self, s: &ClosedSession<'_>) -> std::io::Result<()>;

    /// Whether [`SessionSink::request`] should be called.
    fn wants_requests(&self) -> bool {
        false
    }

    /// One analyzed request, in the order the analysis reads them.
    fn request(&mut self, _r: &LogRequest<'_>) -> std::io::Result<()> {
        Ok(())
    }
}

/// A sink that ignores sessions.
pub struct NoSink;

impl SessionSink for NoSink {
    fn session(&mut self, _: &ClosedSession<'_>) -> std::io::Result<()> {
        Ok(())
    }
}

/// Everything a pass found.
#[derive(Debug)]
pub struct Analysis {
    pub read: ReadSummary,
    pub chains: ChainSummary,
    pub phases: PhaseSummary,
    pub sessions: SessionSummary,
    /// Sessions with a request within the chain window of the log's end (maybe cut off).
    pub open_at_end: u64,
    /// Sessions seen again after they had been closed (counted as new sessions).
    pub reopened: u64,
    /// Requests served for longer than `max_service_s`.
    pub long_service: u64,
    pub excluded_tail: u64,
    pub peak_open_sessions: usize,
    /// Most bytes the open sessions held at once (an estimate, measured when sessions are
    /// closed, every minute of log time).
    pub peak_open_bytes: u64,
    pub files: FileTable,
}

struct OpenSession {
    chains: ChainBuilder,
    parallel: Vec<(u32, ParallelTracker)>,
    first_recv: f64,
    last_done: f64,
}

struct State<'s> {
    opts: AnalyzeOptions,
    files: FileTable,
    max_end: Vec<u64>,
    open: HashMap<Box<str>, OpenSession, foldhash::fast::RandomState>,
    /// Hashes of closed sessions' names ([`name_hash`]: the same for every run).
    closed: HashSet<u64, foldhash::fast::RandomState>,
    clock: f64,
    next_sweep: f64,
    chain_stats: ChainStatsBuilder,
    phase_stats: PhaseStatsBuilder,
    session_stats: SessionStatsBuilder,
    sink: &'s mut dyn SessionSink,
    /// The sink's [`SessionSink::wants_requests`], asked once.
    requests_out: bool,
    err: Option<std::io::Error>,
    reopened: u64,
    long_service: u64,
    excluded_tail: u64,
    peak_open: usize,
    peak_open_bytes: usize,
}

fn name_hash(s: &str) -> u64 {
    foldhash::fast::FixedState::with_seed(0x5EED).hash_one(s)
}

impl State<'_> {
    fn add(&mut self, r: &LogRequest<'_>) {
        if self.requests_out && self.err.is_none() {
            if let Err(e) = self.sink.request(r) {
                self.err = Some(e);
            }
        }
        let file = self.files.intern(r.file);
        if self.max_end.len() <= file as usize {
            self.max_end.resize(file as usize + 1, 0);
        }
        let me = &mut self.max_end[file as usize];
        *me = (*me).max(r.end());
        self.session_stats.on_request(r, self.files.get(file));
        if r.service_s > self.opts.max_service_s {
            self.long_service += 1;
        }
        if r.done_s > self.clock {
            self.clock = r.done_s;
        }
        let s = match self.open.get_mut(&*r.session) {
            Some(s) => s,
            None => {
                if !self.closed.is_empty() && self.closed.contains(&name_hash(&r.session)) {
                    self.reopened += 1;
                }
                self.open.insert(
                    r.session.as_ref().into(),
                    OpenSession {
                        chains: ChainBuilder::default(),
                        parallel: Vec::new(),
                        first_recv: r.recv_s(),
                        last_done: r.done_s,
                    },
                );
                self.peak_open = self.peak_open.max(self.open.len());
                self.open.get_mut(&*r.session).expect("just inserted")
            }
        };
        s.chains.add(file, r, self.opts.window_s);
        s.first_recv = s.first_recv.min(r.recv_s());
        s.last_done = s.last_done.max(r.done_s);
        match s.parallel.iter_mut().find(|p| p.0 == file) {
            Some(p) => p.1.add(r),
            None => {
                let mut p = ParallelTracker::default();
                p.add(r);
                s.parallel.push((file, p));
            }
        }
        if self.clock >= self.next_sweep {
            self.sweep(false);
            self.next_sweep = self.clock + 60.0;
        }
    }

    /// Close sessions that can no longer change (all of them at the end of the log).
    fn sweep(&mut self, all: bool) {
        let held: usize = self
            .open
            .iter()
            .map(|(k, s)| {
                k.len()
                    + std::mem::size_of::<OpenSession>()
                    + s.chains.bytes()
                    + s.parallel.capacity() * std::mem::size_of::<(u32, ParallelTracker)>()
                    + s.parallel.iter().map(|p| p.1.bytes()).sum::<usize>()
            })
            .sum();
        self.peak_open_bytes = self.peak_open_bytes.max(held);
        let horizon = self.opts.window_s + self.opts.max_service_s;
        let clock = self.clock;
        let done: Vec<Box<str>> = self
            .open
            .iter()
            .filter(|(_, s)| all || s.last_done + horizon < clock)
            .map(|(k, _)| k.clone())
            .collect();
        let mut done = done;
        done.sort();
        for name in done {
            let s = self.open.remove(&name).expect("listed");
            self.close(&name, s, all);
        }
    }

    fn close(&mut self, name: &str, s: OpenSession, at_end: bool) {
        self.closed.insert(name_hash(name));
        let chains = s.chains.finish();
        let phases = session_phases(&chains, &self.files, &self.opts.phase);
        for c in &chains {
            self.chain_stats.add(c, self.files.get(c.file));
        }
        let excluded = at_end
            && self.opts.exclude_tail_s > 0.0
            && s.first_recv >= self.clock - self.opts.exclude_tail_s;
        if excluded {
            self.excluded_tail += 1;
        } else {
            self.phase_stats
                .add_session(&chains, &phases, &self.files, &self.opts.phase);
            let parallel: Vec<u32> = s.parallel.iter().map(|p| p.1.max).collect();
            let files = &self.files;
            let max_end = &self.max_end;
            self.session_stats
                .add_session(&chains, &parallel, files, |f| {
                    files
                        .get(f)
                        .size_bytes
                        .or_else(|| max_end.get(f as usize).copied())
                });
        }
        if self.err.is_none() {
            let closed = ClosedSession {
                name,
                chains: &chains,
                phases: &phases,
                files: &self.files,
            };
            if let Err(e) = self.sink.session(&closed) {
                self.err = Some(e);
            }
        }
    }
}

/// Analyze a log. `files` is the file table (empty when unknown); `sink` receives every
/// session as it closes. Only I/O errors (reading the log, or from the sink) fail.
pub fn analyze<R: BufRead + Send>(
    input: R,
    files: FileTable,
    opts: &AnalyzeOptions,
    sink: &mut dyn SessionSink,
) -> std::io::Result<Analysis> {
    let mut st = State {
        opts: opts.clone(),
        max_end: vec![0; files.len()],
        files,
        open: HashMap::default(),
        closed: HashSet::default(),
        clock: f64::NEG_INFINITY,
        next_sweep: f64::NEG_INFINITY,
        chain_stats: ChainStatsBuilder::default(),
        phase_stats: PhaseStatsBuilder::default(),
        session_stats: SessionStatsBuilder::default(),
        requests_out: sink.wants_requests(),
        sink,
        err: None,
        reopened: 0,
        long_service: 0,
        excluded_tail: 0,
        peak_open: 0,
        peak_open_bytes: 0,
    };
    let read_opts = ReadOptions {
        format: opts.format,
        threads: opts.threads,
        ..Default::default()
    };
    let read = read_log_with(input, &read_opts, |r| st.add(r))?;
    let open_at_end = st
        .open
        .values()
        .filter(|s| s.last_done + opts.window_s >= st.clock)
        .count() as u64;
    st.sweep(true);
    if let Some(e) = st.err.take() {
        return Err(e);
    }
    Ok(Analysis {
        read,
        chains: st
            .chain_stats
            .finish(&opts.breakpoints, &opts.probabilities),
        phases: st.phase_stats.finish(&opts.phase),
        sessions: st.session_stats.finish(),
        open_at_end,
        reopened: st.reopened,
        long_service: st.long_service,
        excluded_tail: st.excluded_tail,
        peak_open_sessions: st.peak_open,
        peak_open_bytes: st.peak_open_bytes as u64,
        files: st.files,
    })
}
