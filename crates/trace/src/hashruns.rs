//! Runs of fixed-size pairs sorted by a 64-bit hash, on disk, each with a blocked Bloom
//! filter and every [`BLOCK`]-th hash in memory: an index that finds what was written under
//! a hash for about a byte and a half a pair of memory. A hash no run holds costs no read
//! most of the time (about one in a hundred passes a filter), one a run holds a read of one
//! block. Past [`MAX_RUNS`] runs they are merged into one, dropping the pairs the owner no
//! longer needs, so a lookup checks few filters. The file table's part on disk
//! ([`crate::coldfiles`]) and the spilled open sessions ([`crate::idle`]) keep their
//! indexes so.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Pairs of a run read at once; the run keeps the hash of the first of every block.
const BLOCK: usize = 128;
/// Bytes of one pair of a run: hash (8), id (4), len (4), at (8).
const PAIR: usize = 24;

/// Runs at most: one more and they are merged into one.
pub(crate) const MAX_RUNS: usize = 8;

/// Bits of a Bloom filter per pair, and the probes per lookup, all in one cache line of
/// the filter (a blocked filter: one memory read a run).
const BLOOM_BITS: usize = 10;
const BLOOM_PROBES: u32 = 7;

/// A cache line of a Bloom filter.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(64))]
struct Line([u64; 8]);

/// What an owner files under a hash: two 32-bit numbers and an offset of its own (the file
/// table: a file's id, its name's length and where its entry is; the spilled sessions: a
/// run, a record's number in it and where it starts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Pair {
    pub hash: u64,
    pub id: u32,
    pub len: u32,
    pub at: u64,
}

impl Pair {
    fn to_bytes(self) -> [u8; PAIR] {
        let mut b = [0u8; PAIR];
        b[..8].copy_from_slice(&self.hash.to_le_bytes());
        b[8..12].copy_from_slice(&self.id.to_le_bytes());
        b[12..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..].copy_from_slice(&self.at.to_le_bytes());
        b
    }

    fn from_bytes(b: &[u8]) -> Pair {
        let mut w = [0u8; 8];
        let mut u = [0u8; 4];
        let mut word = |r: std::ops::Range<usize>| {
            w.copy_from_slice(&b[r]);
            u64::from_le_bytes(w)
        };
        let (hash, at) = (word(0..8), word(16..24));
        let mut half = |r: std::ops::Range<usize>| {
            u.copy_from_slice(&b[r]);
            u32::from_le_bytes(u)
        };
        Pair {
            hash,
            id: half(8..12),
            len: half(12..16),
            at,
        }
    }
}

#[derive(Debug)]
struct Run {
    path: PathBuf,
    file: File,
    pairs: usize,
    /// The hash of pair `BLOCK * i`.
    marks: Vec<u64>,
    bloom: Vec<Line>,
}

impl Run {
    /// The line of `hash` in a filter of `lines`, and its bits there (one bit a probe,
    /// from 9-bit pieces of the hash mixed again).
    fn probes(hash: u64, lines: usize) -> (usize, [u64; 8]) {
        let line = ((hash >> 32) * lines as u64) >> 32;
        let mixed = hash.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut bits = [0u64; 8];
        for i in 0..BLOOM_PROBES {
            let b = (mixed >> (9 * i)) & 511;
            bits[(b / 64) as usize] |= 1 << (b % 64);
        }
        (line as usize, bits)
    }

    fn may_hold(&self, hash: u64) -> bool {
        let (line, bits) = Run::probes(hash, self.bloom.len());
        let have = &self.bloom[line].0;
        (0..8).all(|w| have[w] & bits[w] == bits[w])
    }

    /// Call `each` with the pairs of `hash` until it says it found what it looked for.
    fn each_of(
        &self,
        hash: u64,
        each: &mut impl FnMut(Pair) -> io::Result<bool>,
    ) -> io::Result<bool> {
        // The block before the first mark past `hash` holds the first pair with it (pairs
        // with the same hash may run on into the next blocks).
        let mut block = self.marks.partition_point(|&m| m < hash).saturating_sub(1);
        let mut buf = [0u8; BLOCK * PAIR];
        while block * BLOCK < self.pairs {
            let n = (self.pairs - block * BLOCK).min(BLOCK);
            let buf = &mut buf[..n * PAIR];
            self.file
                .read_exact_at(buf, (block * BLOCK * PAIR) as u64)?;
            for b in buf.chunks_exact(PAIR) {
                let p = Pair::from_bytes(b);
                if p.hash > hash {
                    return Ok(false);
                }
                if p.hash == hash && each(p)? {
                    return Ok(true);
                }
            }
            block += 1;
        }
        Ok(false)
    }

    /// Every pair, in order.
    fn pairs(&self) -> io::Result<impl Iterator<Item = io::Result<Pair>>> {
        let mut r = BufReader::with_capacity(1 << 16, File::open(&self.path)?);
        let mut left = self.pairs;
        Ok(std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            left -= 1;
            let mut b = [0u8; PAIR];
            Some(r.read_exact(&mut b).map(|()| Pair::from_bytes(&b)))
        }))
    }

    fn bytes(&self) -> usize {
        self.marks.capacity() * std::mem::size_of::<u64>()
            + self.bloom.capacity() * std::mem::size_of::<Line>()
    }
}

/// Runs of pairs in files `{prefix}-N` of a directory the owner keeps (and removes).
#[derive(Debug)]
pub(crate) struct HashRuns {
    prefix: &'static str,
    runs: Vec<Run>,
    /// Runs made, merged ones too (their files' numbers).
    made: usize,
    /// The runs' filters and marks, in bytes (asked for on every request of a session not
    /// in memory, so kept rather than summed).
    held: usize,
}

impl HashRuns {
    pub(crate) fn new(prefix: &'static str) -> HashRuns {
        HashRuns {
            prefix,
            runs: Vec::new(),
            made: 0,
            held: 0,
        }
    }

    /// Write `pairs` as one more run in `dir`; past [`MAX_RUNS`] runs, merge them all into
    /// one, keeping the pairs `keep` holds to. Only the merged run's pairs that are kept
    /// take room in its filter's count.
    pub(crate) fn add(
        &mut self,
        dir: &Path,
        mut pairs: Vec<Pair>,
        keep: impl Fn(&Pair) -> bool,
    ) -> io::Result<()> {
        if pairs.is_empty() {
            return Ok(());
        }
        pairs.sort_unstable();
        let n = pairs.len();
        let run = self.new_run(dir, n, pairs.into_iter().map(Ok))?;
        self.runs.push(run);
        if self.runs.len() > MAX_RUNS {
            self.merge(dir, keep)?;
        }
        self.held = self.runs.iter().map(Run::bytes).sum::<usize>()
            + self.runs.capacity() * std::mem::size_of::<Run>();
        Ok(())
    }

    /// A run of at most `count` pairs, given in order.
    fn new_run(
        &mut self,
        dir: &Path,
        count: usize,
        pairs: impl Iterator<Item = io::Result<Pair>>,
    ) -> io::Result<Run> {
        let path = dir.join(format!("{}-{}", self.prefix, self.made));
        self.made += 1;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        let mut w = BufWriter::with_capacity(1 << 16, &file);
        let lines = (count * BLOOM_BITS).div_ceil(512).max(1);
        let mut bloom = vec![Line::default(); lines];
        let mut marks = Vec::with_capacity(count.div_ceil(BLOCK));
        let mut written = 0;
        for p in pairs {
            let p = p?;
            if written % BLOCK == 0 {
                marks.push(p.hash);
            }
            let (line, bits) = Run::probes(p.hash, lines);
            for (have, b) in bloom[line].0.iter_mut().zip(bits) {
                *have |= b;
            }
            w.write_all(&p.to_bytes())?;
            written += 1;
        }
        w.flush()?;
        drop(w);
        if written > count {
            return Err(io::Error::other("hash index: a run read back long"));
        }
        marks.shrink_to_fit();
        Ok(Run {
            path,
            file,
            pairs: written,
            marks,
            bloom,
        })
    }

    /// Merge every run into one (their pairs read in order, never all in memory), without
    /// the pairs `keep` lets go of.
    fn merge(&mut self, dir: &Path, keep: impl Fn(&Pair) -> bool) -> io::Result<()> {
        let count = self.runs.iter().map(|r| r.pairs).sum();
        let mut streams = Vec::with_capacity(self.runs.len());
        for r in &self.runs {
            streams.push(r.pairs()?);
        }
        let mut heads = BinaryHeap::new();
        for (i, s) in streams.iter_mut().enumerate() {
            if let Some(p) = s.next() {
                heads.push(Reverse((p?, i)));
            }
        }
        let merged = std::iter::from_fn(|| loop {
            let Reverse((p, i)) = heads.pop()?;
            match streams[i].next() {
                Some(Ok(next)) => heads.push(Reverse((next, i))),
                Some(Err(e)) => return Some(Err(e)),
                None => {}
            }
            if keep(&p) {
                return Some(Ok(p));
            }
        });
        let run = self.new_run(dir, count, merged)?;
        for old in std::mem::replace(&mut self.runs, vec![run]) {
            std::fs::remove_file(&old.path)?;
        }
        Ok(())
    }

    /// Call `each` with the pairs filed under `hash`, newest run first, until it says it
    /// found what it looked for; whether it did.
    pub(crate) fn each_of(
        &self,
        hash: u64,
        mut each: impl FnMut(Pair) -> io::Result<bool>,
    ) -> io::Result<bool> {
        for run in self.runs.iter().rev() {
            if run.may_hold(hash) && run.each_of(hash, &mut each)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Remove every run.
    pub(crate) fn clear(&mut self) -> io::Result<()> {
        self.held = 0;
        for old in self.runs.drain(..) {
            std::fs::remove_file(&old.path)?;
        }
        Ok(())
    }

    /// Pairs in each run, oldest first.
    #[cfg(test)]
    pub(crate) fn run_sizes(&self) -> Vec<usize> {
        self.runs.iter().map(|r| r.pairs).collect()
    }

    /// Heap bytes held: the runs' filters and marks.
    pub(crate) fn bytes(&self) -> usize {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(i: u64) -> u64 {
        i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i << 7)
    }

    fn pair(i: u64) -> Pair {
        Pair {
            hash: h(i),
            id: i as u32,
            len: (i % 7) as u32,
            at: i * 3,
        }
    }

    #[test]
    fn the_filter_passes_few_hashes_it_does_not_hold() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = HashRuns::new("run");
        r.add(dir.path(), (0..10_000).map(pair).collect(), |_| true)
            .unwrap();
        let run = &r.runs[0];
        assert!((0..10_000).all(|i| run.may_hold(h(i))));
        let passed = (10_000..110_000).filter(|&i| run.may_hold(h(i))).count();
        assert!(passed < 2_000, "{passed} of 100000 passed");
    }

    #[test]
    fn merged_runs_keep_what_the_owner_keeps_and_find_every_pair() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = HashRuns::new("idx");
        // Twelve runs of 300 pairs: merged past eight, dropping the odd ids then.
        for k in 0..12u64 {
            r.add(
                dir.path(),
                (k * 300..(k + 1) * 300).map(pair).collect(),
                |p| p.id % 2 == 0,
            )
            .unwrap();
        }
        let sizes = r.run_sizes();
        assert!(sizes.len() <= MAX_RUNS, "{sizes:?}");
        // The merge of the first nine runs kept their 1,350 even ids; three runs after it.
        assert_eq!(sizes, vec![1350, 300, 300, 300]);
        for i in 0..3600u64 {
            let mut seen = Vec::new();
            let found = r
                .each_of(h(i), |p| {
                    seen.push(p);
                    Ok(true)
                })
                .unwrap();
            let kept = i >= 2700 || i % 2 == 0;
            assert_eq!(found, kept, "{i}");
            if kept {
                assert_eq!(seen, vec![pair(i)]);
            }
        }
        // The merged-away files are gone.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 4);
    }
}
