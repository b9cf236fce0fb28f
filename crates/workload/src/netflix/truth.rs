//! Ground truth kept while a synthetic session is generated: the runs of contiguous
//! requests the client meant as one chain, and the phases it went through.

use std::fmt;

/// One request of a synthetic session, with server-side times (absolute seconds).
#[derive(Clone, Debug, PartialEq)]
pub struct SynthRequest {
    /// Index into the catalog's files.
    pub file: usize,
    pub offset: u64,
    /// Bytes covered (and sent).
    pub len: u64,
    pub open_ended: bool,
    /// When the server received the request.
    pub recv_s: f64,
    /// When the server finished sending the response.
    pub done_s: f64,
    /// Connection index within the session.
    pub conn: u32,
    /// Seconds of content carried.
    pub media_s: f64,
}

impl SynthRequest {
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// A true chain: a maximal run of byte-adjacent requests the client issued back to back.
#[derive(Clone, Debug, PartialEq)]
pub struct TruthRun {
    pub file: usize,
    pub start: u64,
    pub end: u64,
    pub requests: u32,
    pub t_start: f64,
    pub t_end: f64,
    /// Whether the request at the run's start offset was open-ended.
    pub open: bool,
    /// Whether the run was downloaded as part of a stable phase.
    pub stable: bool,
    end_recv: f64,
    end_done: f64,
    start_recv: f64,
}

/// The phase the generator put a session in (its own labels; the analyzer's
/// `vodkit_trace::phase::PhaseKind` is found from the log, and the two meet only in the
/// `phases.csv` the generator writes, by these names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TruthPhaseKind {
    Transient,
    Stable,
    Inactive,
}

impl fmt::Display for TruthPhaseKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TruthPhaseKind::Transient => "transient",
            TruthPhaseKind::Stable => "stable",
            TruthPhaseKind::Inactive => "inactive",
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TruthPhase {
    pub kind: TruthPhaseKind,
    pub t_start: f64,
    pub t_end: f64,
}

/// Joins within this gap extend a run; the analyzer's window is 40 s.
pub const JOIN_GAP_S: f64 = 36.0;
/// Byte-adjacent runs closer than this in time, but not joined, would be ambiguous.
pub const CLEAR_GAP_S: f64 = 45.0;

/// Time distance between a request (arrival `p0`, completion `p1`) and the one that
/// continues it (arrival `s0`): zero when `s0` lies within `[p0, p1]`. The analyzer joins at
/// 40 s.
fn join_distance(p0: f64, p1: f64, s0: f64) -> f64 {
    (p0 - s0).max(s0 - p1).max(0.0)
}

/// The runs of one session, built as requests are issued.
#[derive(Default, Debug)]
pub struct RunBook {
    pub runs: Vec<TruthRun>,
    /// Requests whose placement the analyzer could not decide like the generator did.
    pub ambiguous: u32,
}

impl RunBook {
    /// Record a request; returns the index of the run it belongs to.
    pub fn add(&mut self, r: &SynthRequest) -> usize {
        // Among runs ending where this request starts and close enough in time, the
        // longest one takes it (the analyzer's rule, which keeps chains as long as possible).
        let mut join: Option<usize> = None;
        for (i, run) in self.runs.iter().enumerate() {
            if run.file != r.file {
                continue;
            }
            if run.end == r.offset {
                let g = join_distance(run.end_recv, run.end_done, r.recv_s);
                if g <= JOIN_GAP_S {
                    let longer = join.is_none_or(|j| {
                        let cur = &self.runs[j];
                        run.end - run.start > cur.end - cur.start
                    });
                    if longer {
                        join = Some(i);
                    }
                } else if g <= CLEAR_GAP_S {
                    self.ambiguous += 1;
                }
            } else if run.start == r.end() {
                let g = join_distance(r.recv_s, r.done_s, run.start_recv);
                if g <= CLEAR_GAP_S {
                    self.ambiguous += 1;
                }
            }
        }
        match join {
            Some(i) => {
                let run = &mut self.runs[i];
                run.end = r.end();
                run.requests += 1;
                run.t_start = run.t_start.min(r.recv_s);
                run.t_end = run.t_end.max(r.done_s);
                run.end_recv = r.recv_s;
                run.end_done = r.done_s;
                i
            }
            None => {
                self.runs.push(TruthRun {
                    file: r.file,
                    start: r.offset,
                    end: r.end(),
                    requests: 1,
                    t_start: r.recv_s,
                    t_end: r.done_s,
                    open: r.open_ended,
                    stable: false,
                    end_recv: r.recv_s,
                    end_done: r.done_s,
                    start_recv: r.recv_s,
                });
                self.runs.len() - 1
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(offset: u64, len: u64, recv: f64) -> SynthRequest {
        SynthRequest {
            file: 0,
            offset,
            len,
            open_ended: false,
            recv_s: recv,
            done_s: recv + 0.1,
            conn: 0,
            media_s: 1.0,
        }
    }

    #[test]
    fn adjacent_requests_join_and_distant_ones_split() {
        let mut b = RunBook::default();
        assert_eq!(b.add(&req(0, 10, 0.0)), 0);
        assert_eq!(b.add(&req(10, 10, 5.0)), 0);
        assert_eq!(b.add(&req(20, 10, 100.0)), 1);
        assert_eq!(b.runs[0].end, 20);
        assert_eq!(b.runs[0].requests, 2);
        assert_eq!(b.ambiguous, 0);
        // 41 s later and adjacent: neither clearly joined nor clearly apart.
        b.add(&req(30, 10, 141.0));
        assert_eq!(b.ambiguous, 1);
    }
}
