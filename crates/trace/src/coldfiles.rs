//! The file table's part on disk: every file the table has let go of memory, found again by
//! its name's hash. Records by id (where the name is, and what is known of the file) in one
//! file and the names in another, so an id is read back with two reads; and for each time
//! the table let go, a run of (hash, id) pairs sorted by hash, with a Bloom filter and every
//! [`BLOCK`]-th hash in memory, so a name the table never saw costs no read at all most of
//! the time and one it let go costs three (the run's block, the record and the name).
//! What stays in memory is about a byte and a half a file.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Bytes of one record: where the name starts (8), its length (4), four unused, and the
/// file's metadata as the table packs it (16).
pub(crate) const RECORD: usize = 32;

/// Pairs of a run read at once; the run keeps the hash of the first of every block.
const BLOCK: usize = 128;
/// Bytes of one (hash, id) pair in a run.
const PAIR: usize = 12;

/// Bits of a Bloom filter per name, and the probes per lookup: about one name in a hundred
/// that no run holds is looked for in a run all the same.
const BLOOM_BITS: usize = 10;
const BLOOM_PROBES: u64 = 7;

/// The files on disk, with ids `0..ids`.
#[derive(Debug)]
pub(crate) struct Cold {
    /// Removed with the table.
    _dir: tempfile::TempDir,
    records: File,
    names: File,
    names_len: u64,
    ids: u32,
    runs: Vec<Run>,
}

#[derive(Debug)]
struct Run {
    file: File,
    pairs: usize,
    /// The hash of pair `BLOCK * i`.
    marks: Vec<u64>,
    bloom: Vec<u64>,
}

/// A file as it goes to disk: its id (the next one), name, hash and packed metadata.
pub(crate) struct Leaving<'a> {
    pub id: u32,
    pub name: &'a str,
    pub hash: u64,
    pub packed: [u8; 16],
}

impl Run {
    fn bits(&self) -> u64 {
        self.bloom.len() as u64 * 64
    }

    /// The probes of `hash`: double hashing on its two halves.
    fn probes(hash: u64, bits: u64) -> impl Iterator<Item = u64> {
        let step = hash.rotate_left(32) | 1;
        (0..BLOOM_PROBES).map(move |i| hash.wrapping_add(i.wrapping_mul(step)) % bits)
    }

    fn may_hold(&self, hash: u64) -> bool {
        let bits = self.bits();
        Run::probes(hash, bits).all(|b| self.bloom[(b / 64) as usize] & (1 << (b % 64)) != 0)
    }

    /// The ids of the pairs with `hash`.
    fn ids_of(&self, hash: u64) -> io::Result<Vec<u32>> {
        let mut out = Vec::new();
        // The block before the first mark past `hash` holds the first pair with it (pairs
        // with the same hash may run on into the next blocks).
        let mut block = self.marks.partition_point(|&m| m < hash).saturating_sub(1);
        let mut buf = vec![0u8; BLOCK * PAIR];
        while block * BLOCK < self.pairs {
            let n = (self.pairs - block * BLOCK).min(BLOCK);
            let buf = &mut buf[..n * PAIR];
            self.file
                .read_exact_at(buf, (block * BLOCK * PAIR) as u64)?;
            for p in buf.chunks_exact(PAIR) {
                let h = u64::from_le_bytes(p[..8].try_into().unwrap_or_default());
                if h > hash {
                    return Ok(out);
                }
                if h == hash {
                    out.push(u32::from_le_bytes(p[8..].try_into().unwrap_or_default()));
                }
            }
            block += 1;
        }
        Ok(out)
    }

    fn bytes(&self) -> usize {
        (self.marks.capacity() + self.bloom.capacity()) * std::mem::size_of::<u64>()
    }
}

impl Cold {
    /// An empty part on disk, in a directory made in `dir`.
    pub(crate) fn create(dir: &Path) -> io::Result<Cold> {
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
            names: open("names")?,
            _dir: d,
            names_len: 0,
            ids: 0,
            runs: Vec::new(),
        })
    }

    /// Ids below this are on disk.
    pub(crate) fn ids(&self) -> u32 {
        self.ids
    }

    /// Runs written so far.
    pub(crate) fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Write `files`, whose ids follow on from [`Cold::ids`] one by one, as one more run.
    /// Only their hashes and ids are gathered in memory (16 bytes a file), to be sorted.
    pub(crate) fn write<'a>(
        &mut self,
        files: impl IntoIterator<Item = Leaving<'a>>,
    ) -> io::Result<()> {
        let mut names = BufWriter::with_capacity(1 << 16, &self.names);
        let mut records = BufWriter::with_capacity(1 << 16, &self.records);
        let mut at = self.names_len;
        let mut pairs: Vec<(u64, u32)> = Vec::new();
        for f in files {
            if f.id != self.ids + pairs.len() as u32 {
                return Err(io::Error::other(
                    "file table: ids leave memory out of order",
                ));
            }
            let len = u32::try_from(f.name.len())
                .map_err(|_| io::Error::other("file table: a name of 4 GiB or more"))?;
            names.write_all(f.name.as_bytes())?;
            let mut r = [0u8; RECORD];
            r[..8].copy_from_slice(&at.to_le_bytes());
            r[8..12].copy_from_slice(&len.to_le_bytes());
            r[16..].copy_from_slice(&f.packed);
            records.write_all(&r)?;
            at += u64::from(len);
            pairs.push((f.hash, f.id));
        }
        names.flush()?;
        records.flush()?;
        drop((names, records));
        self.names_len = at;
        if pairs.is_empty() {
            return Ok(());
        }

        pairs.sort_unstable();
        let path = self._dir.path().join(format!("run-{}", self.runs.len()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        let mut w = BufWriter::with_capacity(1 << 16, &file);
        let words = (pairs.len() * BLOOM_BITS).div_ceil(64).max(1);
        let mut bloom = vec![0u64; words];
        let mut marks = Vec::with_capacity(pairs.len().div_ceil(BLOCK));
        for (i, &(h, id)) in pairs.iter().enumerate() {
            if i % BLOCK == 0 {
                marks.push(h);
            }
            for b in Run::probes(h, words as u64 * 64) {
                bloom[(b / 64) as usize] |= 1 << (b % 64);
            }
            w.write_all(&h.to_le_bytes())?;
            w.write_all(&id.to_le_bytes())?;
        }
        w.flush()?;
        drop(w);
        self.runs.push(Run {
            file,
            pairs: pairs.len(),
            marks,
            bloom,
        });
        self.ids += pairs.len() as u32;
        Ok(())
    }

    /// The record of `id` (below [`Cold::ids`]): where its name is and its packed metadata.
    fn record(&self, id: u32) -> io::Result<(u64, usize, [u8; 16])> {
        let mut r = [0u8; RECORD];
        self.records
            .read_exact_at(&mut r, u64::from(id) * RECORD as u64)?;
        let at = u64::from_le_bytes(r[..8].try_into().unwrap_or_default());
        let len = u32::from_le_bytes(r[8..12].try_into().unwrap_or_default()) as usize;
        let mut packed = [0u8; 16];
        packed.copy_from_slice(&r[16..]);
        Ok((at, len, packed))
    }

    /// The packed metadata of `id`.
    pub(crate) fn packed(&self, id: u32) -> io::Result<[u8; 16]> {
        Ok(self.record(id)?.2)
    }

    /// The name of `id`.
    pub(crate) fn name(&self, id: u32) -> io::Result<String> {
        let (at, len, _) = self.record(id)?;
        let mut b = vec![0u8; len];
        self.names.read_exact_at(&mut b, at)?;
        String::from_utf8(b)
            .map_err(|_| io::Error::other("file table: a name read back is not UTF-8"))
    }

    /// The id and packed metadata of `name`, whose hash is `hash`, if it is on disk.
    pub(crate) fn find(&self, hash: u64, name: &str) -> io::Result<Option<(u32, [u8; 16])>> {
        for run in self.runs.iter().rev() {
            if !run.may_hold(hash) {
                continue;
            }
            for id in run.ids_of(hash)? {
                let (at, len, packed) = self.record(id)?;
                if len != name.len() {
                    continue;
                }
                let mut b = vec![0u8; len];
                self.names.read_exact_at(&mut b, at)?;
                if b == name.as_bytes() {
                    return Ok(Some((id, packed)));
                }
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
        let mut c = Cold::create(dir.path()).unwrap();
        // Two runs; many names share a hash (a tenth of the hashes), so found means the
        // name was compared, and runs span several blocks.
        let name = |i: u32| format!("t{}/v{i}.mp4", i % 97);
        let hash = |i: u32| u64::from(i / 10).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let packed = |i: u32| {
            let mut p = [0u8; 16];
            p[..4].copy_from_slice(&i.to_le_bytes());
            p
        };
        for (from, to) in [(0u32, 1000u32), (1000, 2500)] {
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
        assert_eq!((c.ids(), c.runs()), (2500, 2));
        for i in 0..2500 {
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
        assert!(c.bytes() < 2500 * 2, "{} bytes", c.bytes());
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
