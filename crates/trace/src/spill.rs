//! External merge sort of records that must come out in an order they are not made in:
//! the from-log rebuild's sessions (finished in the order they end, written in the order
//! they start), the analyzer's sessions closed at one sweep (taken in the order of their
//! names), its chain lengths and closed sessions' names, and `--sort`'s log lines. Records
//! are gathered in sorted runs of bounded size, spilled to temporary files (at most 64 at
//! once: past that the newest are merged a level up, so a record is rewritten about once
//! per 63-fold of runs), and merged back.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

use crate::record::{LogRequest, RequestKind};
use crate::runfile;
use vodkit_workload::order::{MergeKey, MinEntry};

/// One logged request, owned.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Seen {
    pub recv_s: f64,
    pub done_s: f64,
    pub offset: u64,
    pub extent: u64,
    pub kind: RequestKind,
    pub bytes_sent: u64,
}

impl Seen {
    pub fn of(r: &LogRequest<'_>) -> Seen {
        Seen {
            recv_s: r.recv_s(),
            done_s: r.done_s,
            offset: r.offset,
            extent: r.extent,
            kind: r.kind,
            bytes_sent: r.bytes_sent,
        }
    }
}

/// One finished session: its first arrival, viewer and requests in arrival order.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Piece {
    pub start: f64,
    pub client: Vec<u8>,
    pub file: String,
    pub seen: Vec<Seen>,
}

/// Output order: by start, then file name, then client (as the in-memory rebuild orders
/// viewers).
impl MergeKey for Piece {
    fn merge_cmp(&self, other: &Piece) -> Ordering {
        self.start
            .total_cmp(&other.start)
            .then_with(|| self.file.cmp(&other.file))
            .then_with(|| self.client.cmp(&other.client))
    }
}

/// A record an external sort can hold, spill and read back exactly.
pub(crate) trait Record: MergeKey + Sized {
    /// Bytes it holds in memory (an estimate for the budget).
    fn bytes(&self) -> usize;
    fn write(&self, w: &mut impl Write) -> std::io::Result<()>;
    /// The next record of a run, `None` at its end.
    fn read(r: &mut impl Read) -> std::io::Result<Option<Self>>;
}

impl Record for Piece {
    fn bytes(&self) -> usize {
        std::mem::size_of::<Piece>()
            + self.client.len()
            + self.file.len()
            + self.seen.len() * std::mem::size_of::<Seen>()
    }

    fn write(&self, w: &mut impl Write) -> std::io::Result<()> {
        let too_long = "a session too large to spill";
        runfile::put_f64(w, self.start)?;
        runfile::put_bytes(w, &self.client, too_long)?;
        runfile::put_bytes(w, self.file.as_bytes(), too_long)?;
        runfile::put_seq(w, &self.seen, too_long, |w, s| {
            runfile::put_f64(w, s.recv_s)?;
            runfile::put_f64(w, s.done_s)?;
            runfile::put_u64(w, s.offset)?;
            runfile::put_u64(w, s.extent)?;
            runfile::put_u64(w, s.bytes_sent)?;
            runfile::put_kind(w, s.kind)
        })
    }

    /// The next piece of a run, `None` at its end.
    fn read(r: &mut impl Read) -> std::io::Result<Option<Piece>> {
        let Some(start) = runfile::first8(r)? else {
            return Ok(None);
        };
        let start = f64::from_le_bytes(start);
        let client = runfile::get_bytes(r)?;
        let file = String::from_utf8(runfile::get_bytes(r)?).map_err(std::io::Error::other)?;
        let seen = runfile::get_seq(r, |r| {
            let recv_s = runfile::get_f64(r)?;
            let done_s = runfile::get_f64(r)?;
            let offset = runfile::get_u64(r)?;
            let extent = runfile::get_u64(r)?;
            let bytes_sent = runfile::get_u64(r)?;
            Ok(Seen {
                recv_s,
                done_s,
                offset,
                extent,
                kind: runfile::get_kind(r)?,
                bytes_sent,
            })
        })?;
        Ok(Some(Piece {
            start,
            client,
            file,
            seen,
        }))
    }
}

/// Most run files a sort keeps at once: past it the newest are merged, so a sort of any
/// length holds at most this many files open when it is read back (the usual limit of open
/// files is 1,024).
const MAX_RUNS: usize = 64;

/// Records gathered into sorted runs; a run is spilled when it passes the budget.
pub(crate) struct Runs<T> {
    dir: PathBuf,
    tmp: Option<tempfile::TempDir>,
    buf: Vec<T>,
    buf_bytes: usize,
    budget: usize,
    runs: Vec<PathBuf>,
    /// Per run, how many merges deep it is (0: spilled from memory); never rising along
    /// `runs`, so the runs of the lowest level are the newest.
    levels: Vec<u32>,
    /// Run files made so far (names are never reused).
    made: usize,
    /// Bytes written to run files.
    pub spilled: u64,
}

impl<T: Record> Runs<T> {
    /// Runs of at most `budget` bytes, spilled under `dir` (a temporary directory made
    /// there when first needed, removed when done).
    pub fn new(dir: &Path, budget: usize) -> Runs<T> {
        Runs {
            dir: dir.to_path_buf(),
            tmp: None,
            buf: Vec::new(),
            buf_bytes: 0,
            budget: budget.max(1),
            runs: Vec::new(),
            levels: Vec::new(),
            made: 0,
            spilled: 0,
        }
    }

    /// Bytes held in memory now.
    pub fn held(&self) -> usize {
        self.buf_bytes
    }

    /// Run files written so far (merged ones included).
    pub fn runs(&self) -> usize {
        self.made
    }

    pub fn push(&mut self, p: T) -> std::io::Result<()> {
        self.buf_bytes += p.bytes();
        self.buf.push(p);
        if self.buf_bytes > self.budget {
            self.spill()?;
        }
        Ok(())
    }

    fn spill(&mut self) -> std::io::Result<()> {
        if self.runs.len() >= MAX_RUNS {
            self.merge_runs()?;
        }
        let (path, mut w) = self.new_run()?;
        self.buf.sort_by(T::merge_cmp);
        for p in self.buf.drain(..) {
            p.write(&mut w)?;
        }
        w.flush()?;
        self.spilled += w.get_ref().metadata()?.len();
        self.buf_bytes = 0;
        self.runs.push(path);
        self.levels.push(0);
        Ok(())
    }

    fn new_run(&mut self) -> std::io::Result<(PathBuf, std::io::BufWriter<File>)> {
        self.made += 1;
        runfile::create(&mut self.tmp, &self.dir, ".vodkit-spill-", self.made)
    }

    /// Merge the newest runs, those of the lowest level (and the level above when that is
    /// one run), into one a level up, in their place: equal records stay in the order the
    /// final merge takes them (the lower run first), and a record is rewritten once per
    /// level, about log₆₃ of the runs, not once per merge.
    fn merge_runs(&mut self) -> std::io::Result<()> {
        let group = |levels: &[u32]| {
            let low = levels.last().copied().unwrap_or(0);
            levels.iter().rposition(|&l| l != low).map_or(0, |i| i + 1)
        };
        let mut from = group(&self.levels);
        if self.runs.len() - from < 2 {
            from = group(&self.levels[..from]);
        }
        let level = self.levels[from] + 1;
        let (path, mut w) = self.new_run()?;
        let mut merged = open_runs::<T>(&self.runs[from..])?;
        while let Some(p) = merged.next_record()? {
            p.write(&mut w)?;
        }
        w.flush()?;
        self.spilled += w.get_ref().metadata()?.len();
        drop(merged);
        for old in self.runs.drain(from..) {
            std::fs::remove_file(old)?;
        }
        self.levels.truncate(from);
        self.runs.push(path);
        self.levels.push(level);
        Ok(())
    }

    /// All records in order.
    pub fn finish(mut self) -> std::io::Result<Merged<T>> {
        if self.runs.is_empty() {
            self.buf.sort_by(T::merge_cmp);
            return Ok(Merged {
                memory: self.buf.into_iter(),
                readers: Vec::new(),
                heap: BinaryHeap::new(),
                _tmp: None,
                spilled: 0,
                runs: 0,
            });
        }
        if !self.buf.is_empty() {
            self.spill()?;
        }
        let mut m = open_runs(&self.runs)?;
        m._tmp = self.tmp;
        m.spilled = self.spilled;
        m.runs = self.made;
        Ok(m)
    }
}

/// The records of sorted run files, merged.
fn open_runs<T: Record>(runs: &[PathBuf]) -> std::io::Result<Merged<T>> {
    let mut readers = Vec::with_capacity(runs.len());
    let mut heap = BinaryHeap::new();
    for (i, path) in runs.iter().enumerate() {
        let mut r = BufReader::with_capacity(1 << 16, File::open(path)?);
        if let Some(p) = T::read(&mut r)? {
            heap.push(MinEntry::new((p, i), ()));
        }
        readers.push(r);
    }
    Ok(Merged {
        memory: Vec::new().into_iter(),
        readers,
        heap,
        _tmp: None,
        spilled: 0,
        runs: runs.len(),
    })
}

/// The head record of a run, keyed by the record and then the run's index (equal records
/// come from the lower run first).
type Head<T> = MinEntry<(T, usize), ()>;

/// Records in order: from memory, or merged from the spilled runs.
pub(crate) struct Merged<T> {
    memory: std::vec::IntoIter<T>,
    readers: Vec<BufReader<File>>,
    heap: BinaryHeap<Head<T>>,
    _tmp: Option<tempfile::TempDir>,
    /// Bytes written to run files, and their number.
    pub spilled: u64,
    pub runs: usize,
}

impl<T: Record> Merged<T> {
    pub fn next_record(&mut self) -> std::io::Result<Option<T>> {
        if let Some(p) = self.memory.next() {
            return Ok(Some(p));
        }
        let Some(MinEntry { key: (p, i), .. }) = self.heap.pop() else {
            return Ok(None);
        };
        if let Some(r) = self.readers.get_mut(i) {
            if let Some(next) = T::read(r)? {
                self.heap.push(MinEntry::new((next, i), ()));
            }
        }
        Ok(Some(p))
    }

    pub fn len_hint(&self) -> usize {
        self.memory.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(start: f64, client: &str, file: &str, n: usize) -> Piece {
        Piece {
            start,
            client: client.as_bytes().to_vec(),
            file: file.into(),
            seen: (0..n)
                .map(|i| Seen {
                    recv_s: start + i as f64,
                    done_s: start + i as f64 + 0.5,
                    offset: i as u64 * 10,
                    extent: 10,
                    kind: if i % 2 == 0 {
                        RequestKind::Chunk
                    } else {
                        RequestKind::Open
                    },
                    bytes_sent: 10,
                })
                .collect(),
        }
    }

    #[test]
    fn spilled_runs_merge_into_the_in_memory_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut all = Vec::new();
        for i in 0..500u64 {
            let start = ((i * 7919) % 113) as f64;
            all.push(piece(
                start,
                &format!("c{}", i % 3),
                &format!("f{}", i % 5),
                (i % 4) as usize,
            ));
        }
        let mut want = all.clone();
        want.sort_by(Piece::merge_cmp);
        for budget in [1, 2000, usize::MAX] {
            let mut runs = Runs::new(dir.path(), budget);
            for p in &all {
                runs.push(p.clone()).unwrap();
            }
            assert_eq!(runs.runs.len() > 1, budget < 10_000, "budget {budget}");
            // One run per record at a budget of one byte: merged whenever they reach the
            // most kept at once, so no more files are ever open than that.
            assert!(
                runs.runs.len() <= MAX_RUNS,
                "budget {budget}: {}",
                runs.runs.len()
            );
            if budget == 1 {
                let files = std::fs::read_dir(runs.tmp.as_ref().unwrap().path()).unwrap();
                assert_eq!(files.count(), runs.runs.len());
                // 500 runs need one level of merges: every record is written at most twice.
                assert!(runs.runs() > all.len(), "merged: {}", runs.runs());
                let once: u64 = all
                    .iter()
                    .map(|p| {
                        let mut b = Vec::new();
                        p.write(&mut b).unwrap();
                        b.len() as u64
                    })
                    .sum();
                assert!(runs.spilled <= 2 * once, "{} of {once}", runs.spilled);
            }
            let mut m = runs.finish().unwrap();
            let mut got = Vec::new();
            while let Some(p) = m.next_record().unwrap() {
                got.push(p);
            }
            assert!(got == want, "budget {budget}");
        }
        // The spill directory is gone once merged.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
