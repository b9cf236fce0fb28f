//! The file table's part on disk: every file the table has let go of memory, found again by
//! its name's hash. Each file is an entry (its packed metadata, then its name) in one file
//! and a record by id (where the entry is, the name's length) in another; and each time the
//! table lets go it writes a run of the files added since, as (hash, id, length, entry)
//! sorted by hash, with a blocked Bloom filter and every [`BLOCK`]-th hash in memory. So a
//! name the table never saw costs no read at all most of the time, one it let go two (the
//! run's block and the entry), and an id's name or metadata two (its record and entry).
//! Past [`MAX_RUNS`] runs they are merged into one, so a lookup checks few filters and few
//! files stay open. What stays in memory is about a byte and a half a file.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Bytes of a record: where the entry starts (8), the name's length (4), four unused.
const RECORD: usize = 16;
/// Bytes of an entry before the name: the file's metadata as the table packs it.
const PACKED: usize = 16;

/// Pairs of a run read at once; the run keeps the hash of the first of every block.
const BLOCK: usize = 128;
/// Bytes of one pair of a run: hash (8), id (4), name length (4), entry (8).
const PAIR: usize = 24;

/// Runs at most: one more and they are merged into one.
const MAX_RUNS: usize = 8;

/// Bits of a Bloom filter per name, and the probes per lookup, all in one cache line of
/// the filter (a blocked filter: one memory read a run): about one name in a hundred that
/// no run holds is looked for in a run all the same.
const BLOOM_BITS: usize = 10;
const BLOOM_PROBES: u32 = 7;

/// A cache line of a Bloom filter.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(64))]
struct Line([u64; 8]);

/// The files on disk, with ids `0..ids`.
#[derive(Debug)]
pub(crate) struct Cold {
    /// Removed with the table.
    dir: tempfile::TempDir,
    records: File,
    entries: File,
    entries_len: u64,
    ids: u32,
    runs: Vec<Run>,
    /// Runs made, merged ones too (their files' numbers).
    made: usize,
    /// Times the table let go of new files.
    writes: usize,
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

/// A file as it goes to disk: its id (the next one), name, hash and packed metadata.
pub(crate) struct Leaving<'a> {
    pub id: u32,
    pub name: &'a str,
    pub hash: u64,
    pub packed: [u8; 16],
}

/// A pair of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Pair {
    hash: u64,
    id: u32,
    len: u32,
    at: u64,
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
        mut each: impl FnMut(Pair) -> io::Result<bool>,
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

impl Cold {
    /// An empty part on disk, in a directory made in `dir` (made first if need be: a table
    /// read before the analysis's output directory exists spills into it all the same).
    pub(crate) fn create(dir: &Path) -> io::Result<Cold> {
        std::fs::create_dir_all(dir)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
        let d = tempfile::Builder::new()
            .prefix("vodkit-files-")
            .tempdir_in(dir)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
        let open = |name: &str| {
            std::fs::OpenOptions::new()
                .read(true)
                .append(true)
                .create_new(true)
                .open(d.path().join(name))
        };
        Ok(Cold {
            records: open("records")?,
            entries: open("entries")?,
            dir: d,
            entries_len: 0,
            ids: 0,
            runs: Vec::new(),
            made: 0,
            writes: 0,
        })
    }

    /// Ids below this are on disk.
    pub(crate) fn ids(&self) -> u32 {
        self.ids
    }

    /// Times files were written.
    pub(crate) fn writes(&self) -> usize {
        self.writes
    }

    /// Write `files`, whose ids follow on from [`Cold::ids`] one by one, as one more run.
    /// Only their pairs are gathered in memory (24 bytes a file), to be sorted.
    pub(crate) fn write<'a>(
        &mut self,
        files: impl IntoIterator<Item = Leaving<'a>>,
    ) -> io::Result<()> {
        let mut entries = BufWriter::with_capacity(1 << 16, &self.entries);
        let mut records = BufWriter::with_capacity(1 << 16, &self.records);
        let mut at = self.entries_len;
        let mut pairs: Vec<Pair> = Vec::new();
        for f in files {
            if f.id != self.ids + pairs.len() as u32 {
                return Err(io::Error::other(
                    "file table: ids leave memory out of order",
                ));
            }
            let len = u32::try_from(f.name.len())
                .map_err(|_| io::Error::other("file table: a name of 4 GiB or more"))?;
            entries.write_all(&f.packed)?;
            entries.write_all(f.name.as_bytes())?;
            let mut r = [0u8; RECORD];
            r[..8].copy_from_slice(&at.to_le_bytes());
            r[8..12].copy_from_slice(&len.to_le_bytes());
            records.write_all(&r)?;
            pairs.push(Pair {
                hash: f.hash,
                id: f.id,
                len,
                at,
            });
            at += (PACKED + f.name.len()) as u64;
        }
        entries.flush()?;
        records.flush()?;
        drop((entries, records));
        self.entries_len = at;
        if pairs.is_empty() {
            return Ok(());
        }
        pairs.sort_unstable();
        let n = pairs.len();
        let run = self.new_run(n, pairs.into_iter().map(Ok))?;
        self.runs.push(run);
        self.ids += n as u32;
        self.writes += 1;
        if self.runs.len() > MAX_RUNS {
            self.merge()?;
        }
        Ok(())
    }

    /// A run of `count` pairs, given in order.
    fn new_run(
        &mut self,
        count: usize,
        pairs: impl Iterator<Item = io::Result<Pair>>,
    ) -> io::Result<Run> {
        let path = self.dir.path().join(format!("run-{}", self.made));
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
        if written != count {
            return Err(io::Error::other("file table: a run read back short"));
        }
        Ok(Run {
            path,
            file,
            pairs: count,
            marks,
            bloom,
        })
    }

    /// Merge every run into one (their pairs read in order, never all in memory).
    fn merge(&mut self) -> io::Result<()> {
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
        let merged = std::iter::from_fn(|| {
            let Reverse((p, i)) = heads.pop()?;
            match streams[i].next() {
                Some(Ok(next)) => heads.push(Reverse((next, i))),
                Some(Err(e)) => return Some(Err(e)),
                None => {}
            }
            Some(Ok(p))
        });
        let run = self.new_run(count, merged)?;
        for old in std::mem::replace(&mut self.runs, vec![run]) {
            std::fs::remove_file(&old.path)?;
        }
        Ok(())
    }

    /// Where the entry of `id` (below [`Cold::ids`]) is, and its name's length.
    fn record(&self, id: u32) -> io::Result<(u64, usize)> {
        let mut r = [0u8; RECORD];
        self.records
            .read_exact_at(&mut r, u64::from(id) * RECORD as u64)?;
        let mut w = [0u8; 8];
        w.copy_from_slice(&r[..8]);
        let len = u32::from_le_bytes([r[8], r[9], r[10], r[11]]) as usize;
        Ok((u64::from_le_bytes(w), len))
    }

    /// The entry at `at` with a name of `len` bytes: packed metadata, then the name.
    fn entry(&self, at: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut b = vec![0u8; PACKED + len];
        self.entries.read_exact_at(&mut b, at)?;
        Ok(b)
    }

    /// The packed metadata of `id`.
    pub(crate) fn packed(&self, id: u32) -> io::Result<[u8; 16]> {
        let (at, _) = self.record(id)?;
        let mut p = [0u8; PACKED];
        self.entries.read_exact_at(&mut p, at)?;
        Ok(p)
    }

    /// The name of `id`.
    pub(crate) fn name(&self, id: u32) -> io::Result<String> {
        let (at, len) = self.record(id)?;
        let mut e = self.entry(at, len)?;
        e.drain(..PACKED);
        String::from_utf8(e)
            .map_err(|_| io::Error::other("file table: a name read back is not UTF-8"))
    }

    /// The id and packed metadata of `name`, whose hash is `hash`, if it is on disk.
    pub(crate) fn find(&self, hash: u64, name: &str) -> io::Result<Option<(u32, [u8; 16])>> {
        let mut found = None;
        for run in self.runs.iter().rev() {
            if !run.may_hold(hash) {
                continue;
            }
            let hit = run.each_of(hash, |p| {
                if p.len as usize != name.len() {
                    return Ok(false);
                }
                let e = self.entry(p.at, name.len())?;
                if &e[PACKED..] != name.as_bytes() {
                    return Ok(false);
                }
                let mut packed = [0u8; PACKED];
                packed.copy_from_slice(&e[..PACKED]);
                found = Some((p.id, packed));
                Ok(true)
            })?;
            if hit {
                return Ok(found);
            }
        }
        Ok(None)
    }

    /// Heap bytes held: the runs' filters and marks.
    pub(crate) fn bytes(&self) -> usize {
        self.runs.iter().map(Run::bytes).sum::<usize>()
            + self.runs.capacity() * std::mem::size_of::<Run>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_written_are_found_by_hash_and_read_back_by_id() {
        let dir = tempfile::tempdir().unwrap();
        // In a directory not made yet (an output directory the analysis makes later).
        let mut c = Cold::create(&dir.path().join("out/not-yet")).unwrap();
        // Twelve writes, so the runs were merged; many names share a hash (a tenth of the
        // hashes), so found means the name was compared, and runs span several blocks.
        let name = |i: u32| format!("t{}/v{i}.mp4", i % 97);
        let hash = |i: u32| u64::from(i / 10).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let packed = |i: u32| {
            let mut p = [0u8; 16];
            p[..4].copy_from_slice(&i.to_le_bytes());
            p
        };
        let bounds: Vec<u32> = (0..=12).map(|k| k * 200 + k * k).collect();
        for w in bounds.windows(2) {
            let (from, to) = (w[0], w[1]);
            let names: Vec<String> = (from..to).map(name).collect();
            let leaving: Vec<Leaving> = (from..to)
                .map(|i| Leaving {
                    id: i,
                    name: &names[(i - from) as usize],
                    hash: hash(i),
                    packed: packed(i),
                })
                .collect();
            c.write(leaving).unwrap();
        }
        let n = bounds[12];
        assert_eq!((c.ids(), c.writes()), (n, 12));
        assert!(c.runs.len() <= MAX_RUNS, "{} runs", c.runs.len());
        assert!(c.runs.iter().any(|r| r.pairs > 1000), "merged");
        for i in 0..n {
            assert_eq!(
                c.find(hash(i), &name(i)).unwrap(),
                Some((i, packed(i))),
                "{i}"
            );
            assert_eq!(c.name(i).unwrap(), name(i));
            assert_eq!(c.packed(i).unwrap(), packed(i));
            // The same hash, another name: not found.
            assert_eq!(c.find(hash(i), &format!("{}x", name(i))).unwrap(), None);
        }
        assert_eq!(c.find(7, "t0/v0.mp4").unwrap(), None);
        // Ids must follow on.
        let e = c
            .write([Leaving {
                id: 9,
                name: "x",
                hash: 1,
                packed: [0; 16],
            }])
            .unwrap_err();
        assert!(e.to_string().contains("out of order"), "{e}");
        // About a byte and a half a name in memory.
        assert!(c.bytes() < n as usize * 2, "{} bytes", c.bytes());
    }

    #[test]
    fn the_filter_passes_few_names_it_does_not_hold() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Cold::create(dir.path()).unwrap();
        let h = |i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i << 7);
        let names: Vec<String> = (0..10_000).map(|i| format!("{i}")).collect();
        let leaving: Vec<Leaving> = (0..10_000u32)
            .map(|i| Leaving {
                id: i,
                name: &names[i as usize],
                hash: h(u64::from(i)),
                packed: [0; 16],
            })
            .collect();
        c.write(leaving).unwrap();
        let run = &c.runs[0];
        assert!((0..10_000).all(|i| run.may_hold(h(i))));
        let passed = (10_000..110_000).filter(|&i| run.may_hold(h(i))).count();
        assert!(passed < 2_000, "{passed} of 100000 passed");
    }
}
