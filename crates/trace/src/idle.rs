//! Idle open sessions on disk: when the analyzer's open sessions would pass their memory
//! budget, the ones idle longest are written to a run sorted by their last completion; an
//! index says where each key's record is (a hash map of the latest ones, and past its share
//! of memory an index on disk, [`HashRuns`], about a byte and a half a session in memory)
//! and a bit a record which are still there. A session is read back
//! when a request for it arrives, and the sweeps take the rest back in order of last
//! completion as they close them.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use crate::hashruns::{HashRuns, Pair};
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

/// One run of spilled sessions, sorted by last completion. No file is held open between
/// uses: a partition may have many runs.
struct Run {
    path: PathBuf,
    /// Offset and number of the first record the sweeps have not read, and its last
    /// completion; `None` once read through.
    at: u64,
    rec: u32,
    head: Option<f64>,
    /// Records not yet taken back, and a bit a record: set while it is.
    live: usize,
    alive: Vec<u64>,
}

impl Run {
    fn is_alive(&self, rec: u32) -> bool {
        self.alive
            .get(rec as usize / 64)
            .is_some_and(|w| w & (1 << (rec % 64)) != 0)
    }
}

const TOO_LONG: &str = "a session too large to spill";

/// Runs kept open to read sessions back from: opening a run for every session read back
/// cost as much as the read under a tight limit (millions of sessions come back).
const OPEN_RUNS: usize = 16;

/// Run files open for reading, the one used last at the end.
#[derive(Default)]
struct OpenRuns(Vec<(u32, File)>);

impl OpenRuns {
    /// Run `id`'s file (at `path`), opened if it is not open yet; the one used longest ago
    /// is closed past [`OPEN_RUNS`].
    fn get(&mut self, id: u32, path: &Path) -> io::Result<&File> {
        match self.0.iter().position(|(r, _)| *r == id) {
            Some(i) => {
                let open = self.0.remove(i);
                self.0.push(open);
            }
            None => {
                if self.0.len() >= OPEN_RUNS {
                    self.0.remove(0);
                }
                self.0.push((id, File::open(path)?));
            }
        }
        match self.0.last() {
            Some((_, f)) => Ok(f),
            None => Err(io::Error::other("idle sessions: no run open")),
        }
    }

    /// Close run `id`'s file, if open.
    fn close(&mut self, id: u32) {
        self.0.retain(|(r, _)| *r != id);
    }
}

/// Spilled sessions of one partition, values `T`, in a temporary directory made in `dir`
/// on first use (removed when dropped).
pub(crate) struct Idle<T> {
    dir: PathBuf,
    tmp: Option<tempfile::TempDir>,
    runs: BTreeMap<u32, Run>,
    next_run: u32,
    /// Where the latest records are, by the hash of their key: (run, record number, offset).
    recent: HashMap<u64, (u32, u32, u64), foldhash::fast::RandomState>,
    /// (hash of the key, run, record number, offset) of the records `recent` let go of.
    index: HashRuns,
    /// Sessions on disk.
    spilled: usize,
    /// Bytes of the runs' bits.
    bits_bytes: usize,
    hash: Box<dyn Fn(&str) -> u64 + Send>,
    buf: Vec<u8>,
    open: OpenRuns,
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
    /// `hash` keys the index (keys whose hashes meet are told apart by the key a record
    /// holds).
    pub fn new(dir: &Path, hash: Box<dyn Fn(&str) -> u64 + Send>) -> Idle<T> {
        Idle {
            dir: dir.to_path_buf(),
            tmp: None,
            runs: BTreeMap::new(),
            next_run: 0,
            recent: HashMap::default(),
            index: HashRuns::new("index"),
            spilled: 0,
            bits_bytes: 0,
            hash,
            buf: Vec::new(),
            open: OpenRuns::default(),
            stats: SpillSummary::default(),
            _values: PhantomData,
        }
    }

    /// Sessions on disk.
    pub fn len(&self) -> usize {
        self.spilled
    }

    pub fn is_empty(&self) -> bool {
        self.spilled == 0
    }

    /// Bytes the index holds in memory: the recent map, the disk index's filters and marks,
    /// and the runs' bits.
    pub fn index_bytes(&self) -> usize {
        self.recent_bytes() + self.index.bytes() + self.bits_bytes
    }

    fn recent_bytes(&self) -> usize {
        self.recent.capacity() * (std::mem::size_of::<(u64, (u32, u32, u64))>() + 1)
    }

    /// Write `sessions` (key, last completion, value) to a new run; past `recent_limit`
    /// bytes the map of where the latest records are goes to the index on disk.
    pub fn park(
        &mut self,
        mut sessions: Vec<(Box<str>, f64, T)>,
        recent_limit: usize,
    ) -> io::Result<()> {
        if sessions.is_empty() {
            return Ok(());
        }
        sessions.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        let run = self.next_run;
        self.next_run += 1;
        let (path, mut w) =
            runfile::create(&mut self.tmp, &self.dir, ".vodkit-idle-", run as usize)?;
        let mut at = 0u64;
        let mut pairs = Vec::with_capacity(sessions.len());
        for (rec, (name, last_done, v)) in sessions.iter().enumerate() {
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
            pairs.push(Pair {
                hash: (self.hash)(name),
                id: run,
                len: u32::try_from(rec).map_err(|_| io::Error::other(TOO_LONG))?,
                at,
            });
            at += self.buf.len() as u64;
        }
        w.flush()?;
        drop(w);
        let n = sessions.len();
        let mut alive = vec![u64::MAX; n.div_ceil(64)];
        if !n.is_multiple_of(64) {
            if let Some(last) = alive.last_mut() {
                *last = (1 << (n % 64)) - 1;
            }
        }
        self.bits_bytes += alive.capacity() * 8;
        self.runs.insert(
            run,
            Run {
                path,
                at: 0,
                rec: 0,
                head: sessions.first().map(|s| s.1),
                live: n,
                alive,
            },
        );
        // A key whose hash meets one in the map (another key: the session itself is not on
        // disk twice) goes to the index on disk.
        let mut clash = Vec::new();
        for p in pairs {
            match self.recent.entry(p.hash) {
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert((p.id, p.len, p.at));
                }
                std::collections::hash_map::Entry::Occupied(_) => clash.push(p),
            }
        }
        if self.recent_bytes() > recent_limit {
            clash.extend(self.recent.drain().map(|(hash, (id, len, at))| Pair {
                hash,
                id,
                len,
                at,
            }));
            self.recent.shrink_to_fit();
        }
        self.file_on_disk(clash)?;
        self.spilled += n;
        self.stats.sessions += n as u64;
        self.stats.bytes += at;
        self.stats.runs += 1;
        Ok(())
    }

    /// Pairs of the index on disk (the ones still alive are kept when it merges).
    fn file_on_disk(&mut self, pairs: Vec<Pair>) -> io::Result<()> {
        if pairs.is_empty() {
            return Ok(());
        }
        let dir = self
            .tmp
            .as_ref()
            .map(|t| t.path().to_path_buf())
            .ok_or_else(|| io::Error::other("idle sessions: no directory"))?;
        let runs = &self.runs;
        self.index.add(&dir, pairs, |p| {
            runs.get(&p.id).is_some_and(|r| r.is_alive(p.len))
        })
    }

    /// The record `p` points to, if it is still there and holds `name`.
    fn read_if(
        runs: &BTreeMap<u32, Run>,
        open: &mut OpenRuns,
        p: Pair,
        name: &str,
    ) -> io::Result<Option<Vec<u8>>> {
        let Some(run) = runs.get(&p.id).filter(|r| r.is_alive(p.len)) else {
            return Ok(None);
        };
        let mut f = open.get(p.id, &run.path)?;
        f.seek(SeekFrom::Start(p.at))?;
        let mut r = BufReader::with_capacity(4 << 10, f);
        runfile::get_f64(&mut r)?;
        let (got, body, _) = read_record(&mut r)?;
        Ok((got == name).then_some(body))
    }

    /// The session `name` if it is on disk, taken back.
    pub fn take(&mut self, name: &str) -> io::Result<Option<T>> {
        if self.spilled == 0 {
            return Ok(None);
        }
        let hash = (self.hash)(name);
        let mut found = None;
        if let Some(&(id, len, at)) = self.recent.get(&hash) {
            let p = Pair { hash, id, len, at };
            if let Some(body) = Self::read_if(&self.runs, &mut self.open, p, name)? {
                self.recent.remove(&hash);
                found = Some((id, len, body));
            }
        }
        if found.is_none() {
            let (runs, open) = (&self.runs, &mut self.open);
            self.index.each_of(hash, |p| {
                found = Self::read_if(runs, open, p, name)?.map(|body| (p.id, p.len, body));
                Ok(found.is_some())
            })?;
        }
        let Some((run, rec, body)) = found else {
            return Ok(None);
        };
        let v = T::get(&mut &body[..])?;
        self.release(run, rec)?;
        self.stats.reloaded += 1;
        Ok(Some(v))
    }

    /// Record `rec` of `run` is taken back: the run is removed once none is left.
    fn release(&mut self, run: u32, rec: u32) -> io::Result<()> {
        let Some(r) = self.runs.get_mut(&run) else {
            return Ok(());
        };
        if let Some(w) = r.alive.get_mut(rec as usize / 64) {
            *w &= !(1 << (rec % 64));
        }
        r.live -= 1;
        self.spilled -= 1;
        if r.live == 0 {
            if let Some(r) = self.runs.remove(&run) {
                self.open.close(run);
                self.bits_bytes -= r.alive.capacity() * 8;
                std::fs::remove_file(&r.path)?;
            }
        }
        if self.spilled == 0 {
            self.index.clear()?;
            self.recent.clear();
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
                let (rec, at) = (run.rec, run.at);
                let (name, body, len) = read_record(&mut scan)?;
                run.at += len;
                run.rec += 1;
                run.head = runfile::first8(&mut scan)?.map(f64::from_le_bytes);
                // A record whose session was taken back (and maybe spilled again) is stale.
                if run.is_alive(rec) {
                    let h = (self.hash)(&name);
                    if self.recent.get(&h) == Some(&(id, rec, at)) {
                        self.recent.remove(&h);
                    }
                    let v = T::get(&mut &body[..])?;
                    self.release(id, rec)?;
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
        idle.park(first, 0).unwrap();
        let second: Vec<_> = (50..100u32)
            .map(|i| {
                (
                    format!("s{i}").into_boxed_str(),
                    f64::from((i - 50) * 2 + 1),
                    v(i),
                )
            })
            .collect();
        idle.park(second, usize::MAX).unwrap();
        assert_eq!(
            (idle.len(), idle.stats.runs, idle.stats.sessions),
            (100, 2, 100)
        );
        // A request for s7 and s60 arrives: they come back exactly; s7 is spilled again later.
        assert_eq!(idle.take("s7").unwrap(), Some(v(7)));
        assert_eq!(idle.take("s60").unwrap(), Some(v(60)));
        assert_eq!(idle.take("s60").unwrap(), None);
        assert_eq!(idle.take("nobody").unwrap(), None);
        idle.park(vec![("s7".into(), 1000.0, v(7))], usize::MAX)
            .unwrap();
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
    fn keys_whose_hashes_meet_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let mut idle: Idle<V> = Idle::new(dir.path(), Box::new(h));
        assert_eq!(h("a1"), h("b1"));
        // b1 meets a1 in the map of recent records and goes to the index on disk.
        idle.park(
            vec![("a1".into(), 1.0, v(1)), ("b1".into(), 2.0, v(2))],
            usize::MAX,
        )
        .unwrap();
        assert_eq!(idle.index.run_sizes(), vec![1]);
        idle.park(vec![("c1".into(), 3.0, v(3))], 0).unwrap();
        assert_eq!(idle.len(), 3);
        assert_eq!(idle.take("b1").unwrap(), Some(v(2)));
        assert_eq!(idle.take("b1").unwrap(), None);
        assert_eq!(idle.take("d1").unwrap(), None);
        assert_eq!(idle.take("a1").unwrap(), Some(v(1)));
        assert_eq!(idle.take("c1").unwrap(), Some(v(3)));
        assert!(idle.is_empty());
    }

    #[test]
    fn at_most_a_few_runs_stay_open_and_each_is_the_file_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = (0..40)
            .map(|i| {
                let p = dir.path().join(format!("run-{i}"));
                std::fs::write(&p, format!("run {i}")).unwrap();
                p
            })
            .collect();
        let mut open = OpenRuns::default();
        for round in 0..3 {
            for (i, p) in paths.iter().enumerate().rev() {
                let mut text = String::new();
                let mut f = open.get(i as u32, p).unwrap();
                f.seek(SeekFrom::Start(0)).unwrap();
                f.read_to_string(&mut text).unwrap();
                assert_eq!(text, format!("run {i}"), "round {round}");
                assert!(open.0.len() <= OPEN_RUNS);
            }
        }
        open.close(0);
        assert!(open.0.iter().all(|(id, _)| *id != 0));
        assert_eq!(open.0.len(), OPEN_RUNS - 1);
    }

    #[test]
    fn many_runs_keep_the_index_small_and_find_every_session() {
        let dir = tempfile::tempdir().unwrap();
        let mut idle: Idle<V> = Idle::new(
            dir.path(),
            Box::new(|s: &str| {
                s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |a, b| {
                    (a ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
                })
            }),
        );
        // Forty runs of 500 sessions; every third session of each comes back and goes to
        // disk again later, so the index holds stale pairs its merges drop.
        let mut back = Vec::new();
        for k in 0..40u32 {
            let run: Vec<_> = (k * 500..(k + 1) * 500)
                .map(|i| (format!("s{i}").into_boxed_str(), f64::from(i), v(i)))
                .collect();
            idle.park(run, 4096).unwrap();
            for i in (k * 500..(k + 1) * 500).step_by(3) {
                assert_eq!(idle.take(&format!("s{i}")).unwrap(), Some(v(i)), "{i}");
                back.push(i);
            }
            if k % 2 == 1 {
                let again: Vec<_> = back
                    .drain(..)
                    .map(|i| (format!("s{i}").into_boxed_str(), 1e6 + f64::from(i), v(i)))
                    .collect();
                idle.park(again, 4096).unwrap();
            }
        }
        assert_eq!(idle.len(), 20_000);
        // Far less than the 25 bytes a session a hash map of them took.
        assert!(
            idle.index_bytes() < 20_000 * 4,
            "{} bytes",
            idle.index_bytes()
        );
        let sizes = idle.index.run_sizes();
        assert!(sizes.len() <= crate::hashruns::MAX_RUNS, "{sizes:?}");
        assert!(sizes.iter().sum::<usize>() > 10_000, "on disk: {sizes:?}");
        assert!(idle.recent_bytes() <= 4096 * 2, "{}", idle.recent_bytes());
        let mut got = Vec::new();
        idle.due(
            |_| true,
            |name, t, x| {
                got.push((name.to_string(), t, x));
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(got.len(), 20_000);
        let mut names: Vec<u32> = got.iter().map(|g| g.0[1..].parse().unwrap()).collect();
        names.sort_unstable();
        assert!(names.iter().copied().eq(0..20_000));
        assert!(got.iter().all(|(n, _, x)| *x == v(n[1..].parse().unwrap())));
        assert!(idle.is_empty());
    }
}
