//! Which chain a miss belongs to. The library sees no HTTP sessions, so a chain is
//! approximated per file: a miss continues the file's chain when it lies ahead of the
//! previous miss within [`REACH`]; otherwise it starts a new one.

use std::collections::HashMap;
use vodkit_prefetch::{ChainKind, ChainPosition};

/// Largest forward jump that still counts as the same chain.
const REACH: u64 = 64 << 20;
/// Files remembered before the table is reset.
const CAPACITY: usize = 1 << 16;

struct Chain {
    start: u64,
    last: u64,
    kind: ChainKind,
}

/// Per-file chain state.
#[derive(Default)]
pub(crate) struct ChainTracker {
    files: HashMap<u64, Chain>,
}

impl ChainTracker {
    /// Place a miss at `offset` of `file`: bytes of its chain before it, and how the chain
    /// began (a chain starting at offset 0 is taken for a chunked one: the library cannot
    /// tell open-ended HTTP requests apart).
    pub(crate) fn place(&mut self, file: u64, offset: u64) -> ChainPosition {
        if self.files.len() >= CAPACITY && !self.files.contains_key(&file) {
            self.files.clear();
        }
        let chain = self.files.entry(file).or_insert(Chain {
            start: offset,
            last: offset,
            kind: kind_at(offset),
        });
        if offset < chain.last || offset - chain.last > REACH {
            *chain = Chain {
                start: offset,
                last: offset,
                kind: kind_at(offset),
            };
        }
        chain.last = offset;
        ChainPosition {
            bytes: offset - chain.start,
            kind: chain.kind,
        }
    }
}

fn kind_at(offset: u64) -> ChainKind {
    if offset == 0 {
        ChainKind::ChunkAtZero
    } else {
        ChainKind::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_misses_extend_a_chain_and_jumps_start_one() {
        let mut t = ChainTracker::default();
        let at = |bytes, kind| ChainPosition { bytes, kind };
        assert_eq!(t.place(1, 0), at(0, ChainKind::ChunkAtZero));
        assert_eq!(t.place(1, 2 << 20), at(2 << 20, ChainKind::ChunkAtZero));
        assert_eq!(t.place(2, 500), at(0, ChainKind::Other));
        assert_eq!(t.place(1, 1 << 20), at(0, ChainKind::Other));
        assert_eq!(t.place(1, (1 << 20) + REACH + 1), at(0, ChainKind::Other));
    }
}
