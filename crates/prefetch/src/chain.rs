//! Chains (thesis 5.3): runs of byte-adjacent requests for one file — the one owner of the
//! concept for the server, the preload daemon, the trace analyzer and the simulator.
//!
//! - [`CHAIN_WINDOW_S`]: how close in time adjacent requests must be to join (40 s);
//! - [`ChainKind`]: how a chain began (thesis Table 5.6), which `first-grow` sizes by;
//! - [`ChainTracker`]: chains as they happen, for a miss's [`ChainPosition`]. Two join
//!   rules: [`ChainTracker::per_client`] (a server that knows the client: a request starting
//!   exactly where an open chain of the same client and file ends, within the window,
//!   extends it) and [`ChainTracker::per_file`] (a preload daemon that sees only misses and
//!   no clients: a miss at most `reach` bytes ahead of the file's previous miss extends the
//!   file's one chain).
//!
//! The trace analyzer's offline two-pass builder (`vodkit_trace::chain`) joins requests in
//! any arrival order using completion times, which a live tracker never has; it takes its
//! window and chain kinds from here. Memory is bounded: chains idle for longer than the
//! window are dropped, and at most `max_chains` are kept.

use crate::{FileId, Map};
use serde::{Deserialize, Serialize};

/// Adjacent requests this close in time belong to one chain (thesis 5.3: 40 s). Streams
/// and prefetched ranges untouched this long are taken as ended, too.
pub const CHAIN_WINDOW_S: f64 = 40.0;

/// Largest forward jump between two misses of a file that the per-file tracker still
/// counts as one chain.
pub const FILE_CHAIN_REACH: u64 = 64 << 20;

/// How the chain a request belongs to started (thesis 5.3.2, Table 5.6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChainKind {
    /// The chain began with an open-ended request (`bytes=0-`) at offset zero.
    OpenAtZero,
    /// The chain began with a closed range (a chunk request) at offset zero.
    ChunkAtZero,
    /// The chain began later than offset zero, whatever the request type.
    #[default]
    Other,
}

impl ChainKind {
    /// The kind of a chain whose first request starts at `offset`; `open_ended` for a
    /// `bytes=N-` request.
    pub fn starting_at(offset: u64, open_ended: bool) -> ChainKind {
        match (offset, open_ended) {
            (0, true) => ChainKind::OpenAtZero,
            (0, false) => ChainKind::ChunkAtZero,
            _ => ChainKind::Other,
        }
    }
}

/// Where a request stands in its chain.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChainPosition {
    /// Bytes of the chain before this request.
    pub bytes: u64,
    pub kind: ChainKind,
}

/// When a request continues an open chain.
#[derive(Clone, Copy, Debug)]
enum Join {
    /// It starts exactly where the chain ends, within `window_s` of the chain's last
    /// request; a (client, file) may have several open chains.
    Adjacent { window_s: f64 },
    /// It starts at most `reach` bytes past the chain's end (never before it); one chain per
    /// file, replaced by any request that does not continue it. No time limit.
    Ahead { reach: u64 },
}

impl Join {
    /// Whether a request at `offset` at `now_s` continues `c`.
    fn continues(self, c: &OpenChain, offset: u64, now_s: f64) -> bool {
        match self {
            Join::Adjacent { window_s } => c.end == offset && now_s - c.last_s <= window_s,
            Join::Ahead { reach } => offset >= c.end && offset - c.end <= reach,
        }
    }
}

#[derive(Clone, Debug)]
struct OpenChain {
    start: u64,
    end: u64,
    kind: ChainKind,
    last_s: f64,
}

/// Tracks open chains per (client, file) or per file.
#[derive(Clone, Debug)]
pub struct ChainTracker {
    join: Join,
    max_chains: usize,
    chains: Map<(u64, FileId), Vec<OpenChain>>,
    count: usize,
    last_sweep_s: f64,
}

impl Default for ChainTracker {
    /// Per client, with the 40 s window and at most 100 000 open chains.
    fn default() -> Self {
        ChainTracker::per_client(CHAIN_WINDOW_S, 100_000)
    }
}

impl ChainTracker {
    /// Chains of a client (a session or connection key) in a file: a request extends an
    /// open chain when it starts where the chain ends, at most `window_s` after the chain's
    /// last request.
    pub fn per_client(window_s: f64, max_chains: usize) -> Self {
        ChainTracker::with(Join::Adjacent { window_s }, max_chains)
    }

    /// One chain per file, for callers that see no clients and only misses: a miss at most
    /// `reach` bytes ahead of the file's previous miss extends its chain, any other miss
    /// starts a new one. Open-ended requests cannot be told apart, so a chain starting at
    /// offset 0 counts as a chunk chain.
    pub fn per_file(reach: u64, max_files: usize) -> Self {
        ChainTracker::with(Join::Ahead { reach }, max_files)
    }

    fn with(join: Join, max_chains: usize) -> Self {
        ChainTracker {
            join,
            max_chains,
            chains: Map::default(),
            count: 0,
            last_sweep_s: 0.0,
        }
    }

    /// Registers a request of `client` for `[offset, offset + len)` of `file` at `now_s`;
    /// `open_ended` for `bytes=N-` requests.
    pub fn request(
        &mut self,
        client: u64,
        file: FileId,
        offset: u64,
        len: u64,
        open_ended: bool,
        now_s: f64,
    ) -> ChainPosition {
        self.sweep(now_s);
        let join = self.join;
        let list = self.chains.entry((client, file)).or_default();
        let continued = list.iter_mut().find(|c| join.continues(c, offset, now_s));
        if let Some(c) = continued {
            let pos = ChainPosition {
                bytes: offset - c.start,
                kind: c.kind,
            };
            c.end = offset + len;
            c.last_s = now_s;
            return pos;
        }
        let kind = ChainKind::starting_at(offset, open_ended);
        let chain = OpenChain {
            start: offset,
            end: offset + len,
            kind,
            last_s: now_s,
        };
        if matches!(join, Join::Ahead { .. }) && !list.is_empty() {
            // One chain per file: the new one replaces the old.
            list.clear();
            list.push(chain);
        } else {
            list.push(chain);
            self.count += 1;
        }
        if self.count > self.max_chains {
            self.last_sweep_s = f64::MIN;
            self.sweep(now_s);
        }
        ChainPosition { bytes: 0, kind }
    }

    /// Whether a request of `client` at `offset` of `file` at `now_s` would continue an
    /// open chain (without registering it).
    pub fn continues(&self, client: u64, file: FileId, offset: u64, now_s: f64) -> bool {
        let join = self.join;
        self.chains
            .get(&(client, file))
            .is_some_and(|list| list.iter().any(|c| join.continues(c, offset, now_s)))
    }

    /// A miss at `offset` of `file` for a [`ChainTracker::per_file`] tracker (no client, no
    /// length, no clock).
    pub fn place(&mut self, file: FileId, offset: u64) -> ChainPosition {
        self.request(0, file, offset, 0, false, 0.0)
    }

    /// Open chains currently tracked.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn sweep(&mut self, now_s: f64) {
        let window_s = match self.join {
            Join::Adjacent { window_s } => window_s,
            Join::Ahead { .. } => f64::INFINITY,
        };
        if now_s - self.last_sweep_s < window_s / 4.0 && self.count <= self.max_chains {
            return;
        }
        self.last_sweep_s = now_s;
        self.chains.retain(|_, list| {
            list.retain(|c| now_s - c.last_s <= window_s);
            !list.is_empty()
        });
        self.count = self.chains.values().map(Vec::len).sum();
        if self.count > self.max_chains {
            // Still too many live chains: forget them all rather than grow without bound.
            self.chains.clear();
            self.count = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_requests_extend_a_chain() {
        let mut t = ChainTracker::default();
        let p = t.request(1, 9, 0, 100, false, 0.0);
        assert_eq!(
            p,
            ChainPosition {
                bytes: 0,
                kind: ChainKind::ChunkAtZero
            }
        );
        let p = t.request(1, 9, 100, 50, false, 10.0);
        assert_eq!(
            p,
            ChainPosition {
                bytes: 100,
                kind: ChainKind::ChunkAtZero
            }
        );
        let p = t.request(1, 9, 150, 50, false, 20.0);
        assert_eq!(p.bytes, 150);
        // Another client, same file: its own chain.
        assert_eq!(t.request(2, 9, 200, 10, false, 20.0).bytes, 0);
        // A gap longer than 40 s ends the chain.
        let p = t.request(1, 9, 200, 10, false, 70.0);
        assert_eq!(
            p,
            ChainPosition {
                bytes: 0,
                kind: ChainKind::Other
            }
        );
    }

    #[test]
    fn chain_kind_comes_from_the_first_request() {
        let mut t = ChainTracker::default();
        assert_eq!(
            t.request(1, 1, 0, 768 << 10, true, 0.0).kind,
            ChainKind::OpenAtZero
        );
        assert_eq!(
            t.request(1, 1, 768 << 10, 10, false, 1.0).kind,
            ChainKind::OpenAtZero
        );
        assert_eq!(t.request(1, 2, 5000, 10, true, 1.0).kind, ChainKind::Other);
        assert_eq!(ChainKind::starting_at(0, false), ChainKind::ChunkAtZero);
        assert_eq!(ChainKind::starting_at(1, true), ChainKind::Other);
    }

    #[test]
    fn tracker_stays_bounded() {
        let mut t = ChainTracker::per_client(CHAIN_WINDOW_S, 100);
        for i in 0..1000u64 {
            t.request(i, i, 0, 1, false, i as f64 * 0.001);
        }
        assert!(t.len() <= 100, "{}", t.len());
        for i in 0..10u64 {
            t.request(5000 + i, 1, 0, 1, false, 100.0);
        }
        assert_eq!(t.len(), 10, "idle chains swept after the gap");
    }

    #[test]
    fn per_file_forward_misses_extend_a_chain_and_jumps_start_one() {
        let mut t = ChainTracker::per_file(FILE_CHAIN_REACH, 1 << 16);
        let at = |bytes, kind| ChainPosition { bytes, kind };
        assert_eq!(t.place(1, 0), at(0, ChainKind::ChunkAtZero));
        assert_eq!(t.place(1, 2 << 20), at(2 << 20, ChainKind::ChunkAtZero));
        assert_eq!(t.place(2, 500), at(0, ChainKind::Other));
        // Backwards: a new chain, which replaces the file's old one.
        assert_eq!(t.place(1, 1 << 20), at(0, ChainKind::Other));
        assert_eq!(
            t.place(1, (1 << 20) + FILE_CHAIN_REACH + 1),
            at(0, ChainKind::Other)
        );
        assert_eq!(t.len(), 2, "one chain per file");
    }

    #[test]
    fn per_file_tracker_stays_bounded() {
        let mut t = ChainTracker::per_file(FILE_CHAIN_REACH, 100);
        for f in 0..1000u64 {
            t.place(f, 0);
        }
        assert!(t.len() <= 100, "{}", t.len());
    }
}
