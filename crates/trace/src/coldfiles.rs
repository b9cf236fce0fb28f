//! The file table's part on disk: every file the table has let go of memory, found again by
//! its name's hash. Each file is an entry (its packed metadata, then its name) in one file
//! and a record by id (where the entry is, the name's length) in another; and each time the
//! table lets go it files the files added since under their hashes, as (hash, id, length,
//! entry) in a [`HashRuns`] index. So a name the table never saw costs no read at all most
//! of the time, one it let go two (the index's block and the entry), and an id's name or
//! metadata two (its record and entry). What stays in memory is about a byte and a half a
//! file.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::hashruns::{HashRuns, Pair};
use crate::runfile::at_dir;

/// Bytes of a record: where the entry starts (8), the name's length (4), four unused.
const RECORD: usize = 16;
/// Bytes of an entry before the name: the file's metadata as the table packs it.
const PACKED: usize = 16;

/// The files on disk, with ids `0..ids`.
#[derive(Debug)]
pub(crate) struct Cold {
    /// Removed with the table.
    dir: tempfile::TempDir,
    records: File,
    entries: File,
    entries_len: u64,
    ids: u32,
    /// (hash, id, name length, entry) of every file, by hash.
    index: HashRuns,
    /// Times the table let go of new files.
    writes: usize,
}

/// A file as it goes to disk: its id (the next one), name, hash and packed metadata.
pub(crate) struct Leaving<'a> {
    pub id: u32,
    pub name: &'a str,
    pub hash: u64,
    pub packed: [u8; 16],
}

impl Cold {
    /// An empty part on disk, in a directory made in `dir` (made first if need be: a table
    /// read before the analysis's output directory exists spills into it all the same).
    pub(crate) fn create(dir: &Path) -> io::Result<Cold> {
        std::fs::create_dir_all(dir).map_err(at_dir(dir))?;
        let d = tempfile::Builder::new()
            .prefix("vodkit-files-")
            .tempdir_in(dir)
            .map_err(at_dir(dir))?;
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
            index: HashRuns::new("run"),
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
        let n = pairs.len();
        self.index.add(self.dir.path(), pairs, |_| true)?;
        self.ids += n as u32;
        self.writes += 1;
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
        self.index.each_of(hash, |p| {
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
        Ok(found)
    }

    /// Heap bytes held: the index's filters and marks.
    pub(crate) fn bytes(&self) -> usize {
        self.index.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hashruns::MAX_RUNS;

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
        let sizes = c.index.run_sizes();
        assert!(sizes.len() <= MAX_RUNS, "{sizes:?}");
        assert!(sizes.iter().any(|&n| n > 1000), "merged: {sizes:?}");
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
}
