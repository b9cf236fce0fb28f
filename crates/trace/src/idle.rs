//! Idle open sessions on disk: when the analyzer's open sessions would pass their memory
//! budget, the ones idle longest are written to a run sorted by their last completion; a
//! small index says which keys are on disk and where, a session is read back when a
//! request for it arrives, and the sweeps take the rest back in order of last completion
//! as they close them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use crate::runfile;

/// A value that can be written to a run and read back exactly.
pub(crate) trait Park: Sized {
    fn put(&self, w: &mut Vec<u8>) -> io::Result<()>;
    fn get(r: &mut &[u8]) -> io::Result<Self>;
}

/// What was spilled in a pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpillSummary {
    /// Idle open sessions written to disk (a session written twice counts twice).
    pub sessions: u64,
    /// Bytes written to run files (idle sessions, closing sessions sorted on disk, and the
    /// closed sessions' name hashes).
    pub bytes: u64,
    /// Run files written.
    pub runs: u64,
    /// Sessions read back because a request for them arrived.
    pub reloaded: u64,
}

impl SpillSummary {
    pub fn add(&mut self, o: &SpillSummary) {
        self.sessions += o.sessions;
        self.bytes += o.bytes;
        self.runs += o.runs;
        self.reloaded += o.reloaded;
    }
}

/// Where a spilled session's record starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Loc {
    run: u32,
    at: u64,
}

/// One run of spilled sessions, sorted by last completion. No file is held open between
/// uses: a partition may have many runs.
struct Run {
    path: PathBuf,
    /// Offset of the first record the sweeps have not read, and its last completion;
    /// `None` once read through.
    at: u64,
    head: Option<f64>,
    /// Records not yet taken back.
    live: usize,
}

const TOO_LONG: &str = "a session too large to spill";

/// Spilled sessions of one partition, values `T`, in a temporary directory made in `dir`
/// on first use (removed when dropped).
pub(crate) struct Idle<T> {
    dir: PathBuf,
    tmp: Option<tempfile::TempDir>,
    runs: BTreeMap<u32, Run>,
    next_run: u32,
    /// Spilled sessions by a hash of their key.
    index: HashMap<u64, Loc, foldhash::fast::RandomState>,
    hash: Box<dyn Fn(&str) -> u64 + Send>,
    buf: Vec<u8>,
    pub stats: SpillSummary,
    _values: PhantomData<T>,
}

/// The rest of a record after its last completion: the key, the value's bytes, and the
/// record's length.
fn read_record(r: &mut impl Read) -> io::Result<(String, Vec<u8>, u64)> {
    let name = String::from_utf8(runfile::get_bytes(r)?).map_err(io::Error::other)?;
    let body = runfile::get_bytes(r)?;
    let len = 8 + 4 + name.len() + 4 + body.len();
    Ok((name, body, len as u64))
}

impl<T: Park> Idle<T> {
    /// `hash` keys the index (a collision is detected: such a session stays in memory).
    pub fn new(dir: &Path, hash: Box<dyn Fn(&str) -> u64 + Send>) -> Idle<T> {
        Idle {
            dir: dir.to_path_buf(),
            tmp: None,
            runs: BTreeMap::new(),
            next_run: 0,
            index: HashMap::default(),
            hash,
            buf: Vec::new(),
            stats: SpillSummary::default(),
            _values: PhantomData,
        }
    }

    /// Sessions on disk.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Bytes the index holds in memory (an estimate).
    pub fn index_bytes(&self) -> usize {
        self.index.capacity() * (std::mem::size_of::<(u64, Loc)>() + 1)
    }

    /// Write `sessions` (key, last completion, value) to a new run. Returns those that
    /// were not written: a key whose hash is already spilled stays in memory.
    pub fn park(
        &mut self,
        mut sessions: Vec<(Box<str>, f64, T)>,
    ) -> io::Result<Vec<(Box<str>, T)>> {
        let mut kept = Vec::new();
        sessions.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        let mut hashes = Vec::with_capacity(sessions.len());
        let mut fresh: HashSet<u64, foldhash::fast::RandomState> = HashSet::default();
        let mut write = Vec::with_capacity(sessions.len());
        for (name, last_done, v) in sessions {
            let h = (self.hash)(&name);
            if self.index.contains_key(&h) || !fresh.insert(h) {
                kept.push((name, v));
            } else {
                hashes.push(h);
                write.push((name, last_done, v));
            }
        }
        if write.is_empty() {
            return Ok(kept);
        }
        let run = self.next_run;
        self.next_run += 1;
        let (path, mut w) =
            runfile::create(&mut self.tmp, &self.dir, ".vodkit-idle-", run as usize)?;
        let mut at = 0u64;
        let mut locs = Vec::with_capacity(write.len());
        for (name, last_done, v) in &write {
            self.buf.clear();
            runfile::put_f64(&mut self.buf, *last_done)?;
            runfile::put_bytes(&mut self.buf, name.as_bytes(), TOO_LONG)?;
            let body = self.buf.len();
            self.buf.extend_from_slice(&[0; 4]);
            v.put(&mut self.buf)?;
            let len =
                u32::try_from(self.buf.len() - body - 4).map_err(|_| io::Error::other(TOO_LONG))?;
            self.buf[body..body + 4].copy_from_slice(&len.to_le_bytes());
            w.write_all(&self.buf)?;
            locs.push(at);
            at += self.buf.len() as u64;
        }
        w.flush()?;
        drop(w);
        let head = write.first().map(|s| s.1);
        for (h, at) in hashes.into_iter().zip(locs) {
            self.index.insert(h, Loc { run, at });
        }
        self.stats.sessions += write.len() as u64;
        self.stats.bytes += at;
        self.stats.runs += 1;
        self.runs.insert(
            run,
            Run {
                path,
                at: 0,
                head,
                live: write.len(),
            },
        );
        Ok(kept)
    }

    /// The session `name` if it is on disk, taken back.
    pub fn take(&mut self, name: &str) -> io::Result<Option<T>> {
        let h = (self.hash)(name);
        let Some(&loc) = self.index.get(&h) else {
            return Ok(None);
        };
        let Some(run) = self.runs.get(&loc.run) else {
            return Ok(None);
        };
        let mut f = File::open(&run.path)?;
        f.seek(SeekFrom::Start(loc.at))?;
        let mut r = BufReader::with_capacity(4 << 10, f);
        runfile::get_f64(&mut r)?;
        let (got, body, _) = read_record(&mut r)?;
        if got != name {
            return Ok(None);
        }
        let v = T::get(&mut &body[..])?;
        self.index.remove(&h);
        self.release(loc.run)?;
        self.stats.reloaded += 1;
        Ok(Some(v))
    }

    /// One record of `run` is taken back: the run is removed once none is left.
    fn release(&mut self, run: u32) -> io::Result<()> {
        let Some(r) = self.runs.get_mut(&run) else {
            return Ok(());
        };
        r.live -= 1;
        if r.live == 0 {
            if let Some(r) = self.runs.remove(&run) {
                std::fs::remove_file(&r.path)?;
            }
        }
        Ok(())
    }

    /// Take back, in each run's order, every session whose last completion is `due`
    /// (`due` must hold for a prefix of last completions in increasing order), handing
    /// each to `f` with its key and last completion.
    pub fn due(
        &mut self,
        due: impl Fn(f64) -> bool,
        mut f: impl FnMut(Box<str>, f64, T) -> io::Result<()>,
    ) -> io::Result<()> {
        let ids: Vec<u32> = self.runs.keys().copied().collect();
        for id in ids {
            let Some(run) = self.runs.get(&id) else {
                continue;
            };
            if !run.head.is_some_and(&due) {
                continue;
            }
            let mut file = File::open(&run.path)?;
            file.seek(SeekFrom::Start(run.at + 8))?;
            let mut scan = BufReader::with_capacity(64 << 10, file);
            while let Some(run) = self.runs.get_mut(&id) {
                let Some(last_done) = run.head.filter(|&t| due(t)) else {
                    break;
                };
                let at = run.at;
                let (name, body, len) = read_record(&mut scan)?;
                run.at += len;
                run.head = runfile::first8(&mut scan)?.map(f64::from_le_bytes);
                let h = (self.hash)(&name);
                // A record whose session was taken back (and maybe spilled again) is stale.
                if self.index.get(&h) == Some(&Loc { run: id, at }) {
                    self.index.remove(&h);
                    let v = T::get(&mut &body[..])?;
                    self.release(id)?;
                    f(name.into_boxed_str(), last_done, v)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct V(Vec<f64>);

    impl Park for V {
        fn put(&self, w: &mut Vec<u8>) -> io::Result<()> {
            runfile::put_seq(w, &self.0, "long", |w, x| runfile::put_f64(w, *x))
        }

        fn get(r: &mut &[u8]) -> io::Result<V> {
            runfile::get_seq(r, runfile::get_f64).map(V)
        }
    }

    fn h(s: &str) -> u64 {
        // A poor hash on purpose: "a1" and "b1" collide.
        s.bytes().skip(1).fold(7u64, |a, b| a * 31 + u64::from(b))
    }

    fn v(i: u32) -> V {
        V(vec![f64::from(i), -0.0, f64::from(i) / 3.0])
    }

    #[test]
    fn spilled_sessions_come_back_when_asked_or_due_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut idle: Idle<V> = Idle::new(dir.path(), Box::new(h));
        // Two runs, interleaved in time.
        let first: Vec<_> = (0..50u32)
            .map(|i| (format!("s{i}").into_boxed_str(), f64::from(i * 2), v(i)))
            .collect();
        assert!(idle.park(first).unwrap().is_empty());
        let second: Vec<_> = (50..100u32)
            .map(|i| {
                (
                    format!("s{i}").into_boxed_str(),
                    f64::from((i - 50) * 2 + 1),
                    v(i),
                )
            })
            .collect();
        assert!(idle.park(second).unwrap().is_empty());
        assert_eq!(
            (idle.len(), idle.stats.runs, idle.stats.sessions),
            (100, 2, 100)
        );
        // A request for s7 and s60 arrives: they come back exactly; s7 is spilled again later.
        assert_eq!(idle.take("s7").unwrap(), Some(v(7)));
        assert_eq!(idle.take("s60").unwrap(), Some(v(60)));
        assert_eq!(idle.take("s60").unwrap(), None);
        assert_eq!(idle.take("nobody").unwrap(), None);
        assert!(idle
            .park(vec![("s7".into(), 1000.0, v(7))])
            .unwrap()
            .is_empty());
        // A sweep takes everything last completed before 20 s, in each run's order.
        let mut got = Vec::new();
        idle.due(
            |t| t < 20.0,
            |name, t, x| {
                got.push((name.to_string(), t, x));
                Ok(())
            },
        )
        .unwrap();
        let names: Vec<&str> = got.iter().map(|g| g.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s8", "s9", "s50", "s51", "s52", "s53",
                "s54", "s55", "s56", "s57", "s58", "s59"
            ]
        );
        assert!(got.iter().all(|(n, _, x)| *x == v(n[1..].parse().unwrap())));
        // The rest, s7 last (its later copy), and the directory is emptied run by run.
        let mut rest = Vec::new();
        idle.due(
            |_| true,
            |name, t, _| {
                rest.push((name.to_string(), t));
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(rest.len(), 100 - 2 - got.len() + 1);
        assert!(rest.contains(&("s7".to_string(), 1000.0)));
        assert!(idle.is_empty());
        let tmp = idle.tmp.as_ref().unwrap().path().to_path_buf();
        assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
        assert_eq!(idle.stats.reloaded, 2);
    }

    #[test]
    fn a_key_whose_hash_is_spilled_already_stays_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let mut idle: Idle<V> = Idle::new(dir.path(), Box::new(h));
        assert_eq!(h("a1"), h("b1"));
        let kept = idle
            .park(vec![("a1".into(), 1.0, v(1)), ("b1".into(), 2.0, v(2))])
            .unwrap();
        assert_eq!(kept, vec![("b1".into(), v(2))]);
        let kept = idle.park(vec![("b1".into(), 2.0, v(2))]).unwrap();
        assert_eq!(kept.len(), 1);
        // b1 is not a1, though their hashes meet.
        assert_eq!(idle.take("b1").unwrap(), None);
        assert_eq!(idle.take("a1").unwrap(), Some(v(1)));
    }
}
