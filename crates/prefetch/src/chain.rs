//! Chains as a server sees them live: contiguous requests by one client to one file.
//!
//! First-Grow needs, for each miss, how many bytes the request's chain already covered
//! and how the chain began. [`ChainTracker`] keeps, per (client, file), the open chains'
//! end offsets; a request starting where an open chain ends (within `gap_s`, 40 s as in
//! thesis 5.3) extends it, any other request starts a new chain. Out-of-order requests on
//! parallel connections are handled only when they arrive in order; the trace tools do
//! the full two-pass chain analysis offline. Memory is bounded: chains idle for longer than
//! `gap_s` are dropped, and at most `max_chains` are kept.

use crate::policy::{ChainKind, FileId};
use std::collections::HashMap;

/// Where a request stands in its chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainPosition {
    /// Bytes of the chain before this request.
    pub bytes: u64,
    pub kind: ChainKind,
}

#[derive(Clone, Debug)]
struct OpenChain {
    end: u64,
    bytes: u64,
    kind: ChainKind,
    last_s: f64,
}

/// Tracks open chains per client and file.
#[derive(Clone, Debug)]
pub struct ChainTracker {
    gap_s: f64,
    max_chains: usize,
    chains: HashMap<(u64, FileId), Vec<OpenChain>>,
    count: usize,
    last_sweep_s: f64,
}

impl Default for ChainTracker {
    fn default() -> Self {
        ChainTracker::new(40.0, 100_000)
    }
}

impl ChainTracker {
    pub fn new(gap_s: f64, max_chains: usize) -> Self {
        ChainTracker {
            gap_s,
            max_chains,
            chains: HashMap::new(),
            count: 0,
            last_sweep_s: 0.0,
        }
    }

    /// Registers a request of `client` (a session or connection key) for `[offset,
    /// offset + len)` of `file` at `now_s`; `open_ended` for `bytes=N-` requests.
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
        let gap = self.gap_s;
        let list = self.chains.entry((client, file)).or_default();
        if let Some(c) = list
            .iter_mut()
            .find(|c| c.end == offset && now_s - c.last_s <= gap)
        {
            let pos = ChainPosition {
                bytes: c.bytes,
                kind: c.kind,
            };
            c.end += len;
            c.bytes += len;
            c.last_s = now_s;
            return pos;
        }
        let kind = match (offset, open_ended) {
            (0, true) => ChainKind::OpenAtZero,
            (0, false) => ChainKind::ChunkAtZero,
            _ => ChainKind::Other,
        };
        list.push(OpenChain {
            end: offset + len,
            bytes: len,
            kind,
            last_s: now_s,
        });
        self.count += 1;
        if self.count > self.max_chains {
            self.last_sweep_s = f64::MIN;
            self.sweep(now_s);
        }
        ChainPosition { bytes: 0, kind }
    }

    /// Open chains currently tracked.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn sweep(&mut self, now_s: f64) {
        if now_s - self.last_sweep_s < self.gap_s / 4.0 && self.count <= self.max_chains {
            return;
        }
        self.last_sweep_s = now_s;
        let gap = self.gap_s;
        self.chains.retain(|_, list| {
            list.retain(|c| now_s - c.last_s <= gap);
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
    }

    #[test]
    fn tracker_stays_bounded() {
        let mut t = ChainTracker::new(40.0, 100);
        for i in 0..1000u64 {
            t.request(i, i, 0, 1, false, i as f64 * 0.001);
        }
        assert!(t.len() <= 100, "{}", t.len());
        for i in 0..10u64 {
            t.request(5000 + i, 1, 0, 1, false, 100.0);
        }
        assert_eq!(t.len(), 10, "idle chains swept after the gap");
    }
}
