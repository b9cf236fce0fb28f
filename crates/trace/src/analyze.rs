//! The analyzer: one streaming pass over a log that builds every session's chains, closes
//! a session once no later request could still join its chains, and feeds the closed
//! session to the chain, phase and session statistics and to the caller's sink.
//!
//! Memory: one small record per open chain fragment and per file of an open session, not
//! per request. A session is closed when the log's clock (latest completion seen) is more
//! than `window + max_service` past its last completion; a request served for longer than
//! `max_service` could have joined a chain already closed (such requests are counted).
//! When the open sessions would pass their share of the memory limit, those idle longest
//! are spilled to disk (the `idle` module) and read back if a request for one arrives; the
//! sessions a sweep closes are sorted by name within a budget too (the `spill` module), so
//! what is held stays bounded whatever the log's length, and every output is the same as
//! with nothing spilled.
//!
//! Threads: chains are built per (session, file), so the open sessions are partitioned by
//! a hash of the session key over `threads` partitions, each fed its requests in log
//! order in batches. The calling thread reads the log's clock and decides when sessions are
//! swept; every sweep is broadcast to all partitions with that clock, so each closes what
//! one thread would close at that point. The closed sessions of a sweep are then taken in
//! the order of their names, as one thread takes them, and the statistics and the sink see
//! them on the calling thread: every output is the same for any number of threads.

use std::collections::VecDeque;

use hashbrown::hash_table::HashTable;
use std::hash::BuildHasher;
use std::io::{BufRead, Read, Write};
use std::path::PathBuf;
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::Arc;

use vodkit_workload::order::{MergeKey, MinEntry};

use compact_str::CompactString;

use crate::cacheline;
use crate::chain::{ChainBuilder, ChainRec, CHAIN_WINDOW_S};
use crate::chainstats::{ChainStatsBuilder, ChainSummary};
use crate::files::{FileInfo, FileTable};
pub use crate::idle::SpillSummary;
use crate::idle::{Idle, Park};
use crate::offsets::Offsets;
use crate::parse::{LogFormat, ReadSummary};
use crate::phase::{session_phases, Phase, PhaseParams, PhaseStatsBuilder, PhaseSummary};
use crate::read::{read_requests, ReadOptions, Requests, IN_FLIGHT_SHARE};
use crate::record::LogRequest;
use crate::resident::{resident_bytes, small_pages_under, Budget};
use crate::runfile;
use crate::sessions::{ParallelTracker, SessionStatsBuilder, SessionSummary};
use crate::spill::{Merged, Record, Runs};

#[derive(Clone, Debug)]
pub struct AnalyzeOptions {
    pub format: LogFormat,
    /// Threads parsing the log, and partitions building chains (each on a thread of its
    /// own when more than one; one: everything on the calling thread); the result is the
    /// same for any number.
    pub threads: usize,
    /// Adjacent requests this close in time join a chain (thesis: 40 s).
    pub window_s: f64,
    /// Longest service time a request may have and still join a chain closed before it
    /// completed.
    pub max_service_s: f64,
    pub phase: PhaseParams,
    /// CCDF breakpoints for the power-law fit (bytes).
    pub breakpoints: Vec<f64>,
    /// Probabilities for survival growth factors.
    pub probabilities: Vec<f64>,
    /// Leave sessions that start this close to the end of the log out of the session and
    /// phase statistics (thesis 5.1.2 drops the last hour); their chains are still written.
    pub exclude_tail_s: f64,
    /// Memory for the analysis's state: the open sessions get half of it (split evenly over
    /// the partitions) and past it the ones idle longest are spilled to `spill_dir`.
    pub memory_bytes: usize,
    /// Where spilled sessions go (a temporary directory made there when first needed).
    pub spill_dir: PathBuf,
    /// Seed of the hash of session names, which picks a session's partition and its place
    /// in the partition's table. Random by default, so that no log can be written to make
    /// its names collide; the results do not depend on it.
    pub hash_seed: u64,
}

/// The chain lengths the statistics keep in memory get one part in this many of
/// [`AnalyzeOptions::memory_bytes`]; past it they go to sorted runs on disk.
const CHAIN_LENGTHS_SHARE: usize = 16;

/// The file table keeps in memory at most one part in this many of
/// [`AnalyzeOptions::memory_bytes`]; past it the files go to disk until looked up again.
const FILE_TABLE_SHARE: usize = 8;

/// Each of the two copies of the sizeless files' furthest bytes read (the calling thread's
/// and the one as of the sweep being merged) keeps in memory at most one part in this many
/// of [`AnalyzeOptions::memory_bytes`]; past it their pages go to disk until used again.
const OFFSETS_SHARE: usize = 64;

/// Default of [`AnalyzeOptions::memory_bytes`] (`--memory`).
pub const MEMORY_BYTES: usize = 512 << 20;

impl AnalyzeOptions {
    /// Bytes the file table keeps in memory ([`FileTable::bound`]): an eighth of
    /// [`AnalyzeOptions::memory_bytes`]. A table read before the analysis
    /// ([`FileTable::from_csv_within`]) should be read within it too.
    pub fn file_table_bytes(&self) -> usize {
        self.memory_bytes / FILE_TABLE_SHARE
    }

    /// Fit the process's memory to the limit before anything large is allocated: under a
    /// small `--memory` it maps its memory in small pages from then on. [`analyze`] does
    /// so itself; a caller that reads a file table or opens the log first calls this
    /// before, since pages already huge stay so.
    pub fn prepare_process(&self) {
        small_pages_under(self.memory_bytes);
    }
}

impl Default for AnalyzeOptions {
    fn default() -> Self {
        AnalyzeOptions {
            format: LogFormat::Auto,
            threads: 1,
            window_s: CHAIN_WINDOW_S,
            max_service_s: 3600.0,
            phase: PhaseParams::default(),
            breakpoints: vec![1e6, 2e8],
            probabilities: vec![0.45],
            exclude_tail_s: 0.0,
            memory_bytes: MEMORY_BYTES,
            spill_dir: std::env::temp_dir(),
            hash_seed: std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), 0u64),
        }
    }
}

/// One closed session as the analyzer hands it to a [`SessionSink`].
pub struct ClosedSession<'a> {
    /// The session's key in the log.
    pub name: &'a str,
    /// Its chains, ordered by start time.
    pub chains: &'a [ChainRec],
    /// Its phases.
    pub phases: &'a [Phase],
    /// The file table the chains' `file` fields index.
    pub files: &'a FileTable,
}

/// Receives every closed session (and, when it asks for them, every request as it is read).
pub trait SessionSink {
    fn session(&mut self, s: &ClosedSession<'_>) -> std::io::Result<()>;

    /// Whether [`SessionSink::request`] should be called.
    fn wants_requests(&self) -> bool {
        false
    }

    /// One analyzed request, in the order the analysis reads them.
    fn request(&mut self, _r: &LogRequest<'_>) -> std::io::Result<()> {
        Ok(())
    }

    /// A warning about the pass, given at most once: what it holds passed
    /// [`AnalyzeOptions::memory_bytes`]. Printed on stderr unless the sink takes it.
    fn warning(&mut self, message: &str) {
        eprintln!("warning: {message}");
    }
}

/// A sink that ignores sessions.
pub struct NoSink;

impl SessionSink for NoSink {
    fn session(&mut self, _: &ClosedSession<'_>) -> std::io::Result<()> {
        Ok(())
    }
}

/// Everything a pass found.
#[derive(Debug)]
pub struct Analysis {
    pub read: ReadSummary,
    pub chains: ChainSummary,
    pub phases: PhaseSummary,
    pub sessions: SessionSummary,
    /// Sessions with a request within the chain window of the log's end (maybe cut off).
    pub open_at_end: u64,
    /// Sessions seen again after they had been closed (counted as new sessions).
    pub reopened: u64,
    /// Requests served for longer than `max_service_s`.
    pub long_service: u64,
    pub excluded_tail: u64,
    /// Most sessions open at once, spilled ones included.
    pub peak_open_sessions: usize,
    /// Most bytes the open sessions held in memory at once (an estimate, measured when
    /// sessions are closed, every minute of log time; the index of spilled ones included).
    pub peak_open_bytes: u64,
    /// What was spilled to keep the open sessions within their memory.
    pub spill: SpillSummary,
    /// Bytes the file table and the analysis's per-file state hold at the end (an estimate;
    /// the table keeps an eighth of the limit in memory and about a byte and a half for
    /// each file it let go to disk, the sizeless files' greatest offsets a sixty-fourth
    /// each in pages).
    pub file_table_bytes: u64,
    /// Bytes the chain and session statistics and the closed sessions' keys hold at the end
    /// (an estimate; the chain lengths and the keys stay within their budgets, the rest is a
    /// fixed set of bins).
    pub statistics_bytes: u64,
    /// Bytes of chain lengths written to disk past their budget (a sixteenth of
    /// `--memory`).
    pub statistics_spilled_bytes: u64,
    pub files: FileTable,
}

/// Requests per batch handed to a partition, at most ([`batch_len`]): the batches queued
/// to the partitions get the share of the limit the blocks being read and parsed get
/// ([`IN_FLIGHT_SHARE`]), and fit it at this size from 512 MiB up.
const BATCH: usize = 4096;
/// Requests per batch at least, however small `--memory`.
const MIN_BATCH: usize = 256;
/// Batches queued to a partition at most.
const QUEUED: usize = 8;
/// Requests gathered before the partition of a one-thread analysis adds them.
const INLINE_BATCH: usize = 64;
/// How many requests ahead of the one being added a partition fetches what that request
/// will touch into the cache.
const AHEAD: usize = 8;
/// Sweeps sent to the partitions and not yet merged, at most.
const LAG: usize = 8;
/// Log seconds between sweeps.
const SWEEP_EVERY_S: f64 = 60.0;
/// The flag beside a file's greatest end offset in [`State`]'s `max_end`: it grew since the
/// last sweep.
const GREW: u64 = 1 << 63;
/// Share of `--memory` (per partition, divided among them) for the closed sessions' name
/// hashes held before a sorted run of them goes to disk.
const CLOSED_KEYS_SHARE: usize = 64;

#[derive(Default)]
struct OpenSession {
    /// The session's chains, with each file's parallel-request tracker beside them.
    chains: ChainBuilder<ParallelTracker>,
    first_recv: f64,
    last_done: f64,
}

impl OpenSession {
    /// Bytes it holds (an estimate), its key `name` included.
    fn bytes(&self, name: &str) -> usize {
        name.len() + std::mem::size_of::<OpenSession>() + self.chains.bytes()
    }
}

impl Park for OpenSession {
    fn put(&self, w: &mut Vec<u8>) -> std::io::Result<()> {
        runfile::put_f64(w, self.first_recv)?;
        runfile::put_f64(w, self.last_done)?;
        self.chains.put_with(w, |w, p| p.put(w))
    }

    fn get(r: &mut &[u8]) -> std::io::Result<OpenSession> {
        let first_recv = runfile::get_f64(r)?;
        let last_done = runfile::get_f64(r)?;
        let chains = ChainBuilder::get_with(r, ParallelTracker::get)?;
        Ok(OpenSession {
            chains,
            first_recv,
            last_done,
        })
    }
}

/// An open session in its partition's table, by name: aligned to a cache line and 128
/// bytes long, so the two lines fetched ahead of its lookup hold all of it.
#[repr(align(64))]
struct Entry(CompactString, OpenSession);

/// The run's hash of session names: picks a session's partition and remembers it once
/// closed. Seeded by [`AnalyzeOptions::hash_seed`] and the process's random shared seed.
#[derive(Clone, Copy)]
struct NameHash(u64, &'static foldhash::SharedSeed);

impl NameHash {
    fn new(seed: u64) -> Self {
        NameHash(seed, foldhash::SharedSeed::global_random())
    }

    fn of(&self, s: &str) -> u64 {
        foldhash::fast::SeedableRandomState::with_seed(self.0, self.1).hash_one(s)
    }

    /// [`table_hash`] of an open session, for its partition's table to grow or shrink by.
    fn rehash(&self, e: &Entry) -> u64 {
        table_hash(self.of(&e.0))
    }
}

/// Where a partition's table places a session of [`NameHash`] `h`: the bits that choosing
/// the partition (`h % partitions`) left free.
fn table_hash(h: u64) -> u64 {
    h.rotate_left(32)
}

/// A closed session's [`NameHash`]. A partition keeps one per session it closed, in sorted
/// runs spilled past their budget, and counts the distinct ones at the end: a session
/// seen again after it was closed is a new session under a name already counted, so the
/// sessions reopened are the sessions opened less the distinct names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ClosedKey(u64);

impl MergeKey for ClosedKey {
    fn merge_cmp(&self, other: &ClosedKey) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}

impl Record for ClosedKey {
    fn bytes(&self) -> usize {
        std::mem::size_of::<ClosedKey>()
    }

    fn write(&self, w: &mut impl Write) -> std::io::Result<()> {
        runfile::put_u64(w, self.0)
    }

    fn read(r: &mut impl Read) -> std::io::Result<Option<ClosedKey>> {
        Ok(runfile::first8(r)?.map(|b| ClosedKey(u64::from_le_bytes(b))))
    }
}

/// Distinct keys of runs merged in order.
fn distinct(mut keys: Merged<ClosedKey>) -> std::io::Result<u64> {
    let (mut n, mut last) = (0, None);
    while let Some(k) = keys.next_record()? {
        if last != Some(k) {
            n += 1;
            last = Some(k);
        }
    }
    Ok(n)
}

/// A session closed by a sweep, as its partition hands it back.
#[derive(Clone, Debug, PartialEq)]
struct Closing {
    name: Box<str>,
    /// Its chains, ordered by start time.
    chains: Vec<ChainRec>,
    /// Most parallel requests, per file.
    parallel: Vec<u32>,
    first_recv: f64,
}

impl Closing {
    fn of(name: Box<str>, s: OpenSession) -> Closing {
        Closing {
            parallel: s.chains.extras().map(|p| p.1.max).collect(),
            first_recv: s.first_recv,
            chains: s.chains.finish(),
            name,
        }
    }
}

/// The sessions a sweep closes are taken in the order of their names.
impl MergeKey for Closing {
    fn merge_cmp(&self, other: &Closing) -> std::cmp::Ordering {
        self.name.cmp(&other.name)
    }
}

impl Record for Closing {
    fn bytes(&self) -> usize {
        std::mem::size_of::<Closing>()
            + self.name.len()
            + self.chains.len() * std::mem::size_of::<ChainRec>()
            + self.parallel.len() * 4
    }

    fn write(&self, w: &mut impl Write) -> std::io::Result<()> {
        let too_long = "a session too large to spill";
        runfile::put_f64(w, self.first_recv)?;
        runfile::put_bytes(w, self.name.as_bytes(), too_long)?;
        runfile::put_seq(w, &self.parallel, too_long, |w, p| runfile::put_u32(w, *p))?;
        runfile::put_seq(w, &self.chains, too_long, |w, c| {
            runfile::put_u32(w, c.file)?;
            runfile::put_u64(w, c.start)?;
            runfile::put_u64(w, c.bytes)?;
            runfile::put_u32(w, c.requests)?;
            runfile::put_f64(w, c.t0)?;
            runfile::put_f64(w, c.t1)?;
            runfile::put_u64(w, c.sent)?;
            runfile::put_kind(w, c.kind)
        })
    }

    fn read(r: &mut impl Read) -> std::io::Result<Option<Closing>> {
        let Some(first_recv) = runfile::first8(r)? else {
            return Ok(None);
        };
        let name = String::from_utf8(runfile::get_bytes(r)?).map_err(std::io::Error::other)?;
        let parallel = runfile::get_seq(r, runfile::get_u32)?;
        let chains = runfile::get_seq(r, |r| {
            Ok(ChainRec {
                file: runfile::get_u32(r)?,
                start: runfile::get_u64(r)?,
                bytes: runfile::get_u64(r)?,
                requests: runfile::get_u32(r)?,
                t0: runfile::get_f64(r)?,
                t1: runfile::get_f64(r)?,
                sent: runfile::get_u64(r)?,
                kind: runfile::get_kind(r)?,
            })
        })?;
        Ok(Some(Closing {
            name: name.into_boxed_str(),
            chains,
            parallel,
            first_recv: f64::from_le_bytes(first_recv),
        }))
    }
}

/// What one partition did at one sweep.
#[derive(Default)]
struct Swept {
    /// The sessions it closed, by name.
    closed: Option<Merged<Closing>>,
    /// Sessions open before the sweep (spilled ones included), and the bytes they held in
    /// memory.
    open: usize,
    held: usize,
    /// Sessions closed so far, and the bytes their name hashes hold in memory (the rest are
    /// on disk).
    closed_sessions: u64,
    closed_key_bytes: usize,
    /// At the last sweep: sessions with a request within the chain window of the log's end,
    /// the request statistics, the sessions reopened and what was spilled.
    open_at_end: u64,
    last: Option<(SessionStatsBuilder, u64, SpillSummary)>,
    /// The first spill error since the sweep before.
    err: Option<std::io::Error>,
}

/// The open sessions of the clients whose names hash to one partition.
struct Partition {
    window_s: f64,
    /// A session is closed once the clock is this far past its last completion.
    horizon_s: f64,
    /// By name, held inline up to 24 bytes (no heap block to compare on a lookup), placed
    /// by [`table_hash`].
    open: HashTable<Entry>,
    /// Bytes the open sessions in memory hold ([`OpenSession::bytes`], kept up to date).
    held: usize,
    /// Past this (with the spilled sessions' index), the sessions idle longest are spilled:
    /// this partition's part of the analysis's [`Budget`], as of its last sweep or spill.
    budget: usize,
    shared: Arc<Budget>,
    /// This partition's number, for the figure it reports to `shared`.
    number: usize,
    /// What the open sessions held when the process's memory was last read at a spill: it
    /// is read again only once they hold a sixteenth of the budget more or less, so a share
    /// that rises with the sessions cannot have it read at every request.
    read_at: usize,
    /// Open sessions spilled to disk.
    idle: Idle<OpenSession>,
    /// Where the sessions a sweep closes are sorted when they pass `budget / 4`.
    spill_dir: PathBuf,
    /// Run files and bytes of those sorts.
    closing_spill: SpillSummary,
    err: Option<std::io::Error>,
    /// Hashes of closed sessions' names ([`NameHash`]), one per session closed.
    closed: Runs<ClosedKey>,
    closed_sessions: u64,
    /// Sessions opened (a name seen again after its session closed opens another).
    opened: u64,
    /// Request statistics only ([`SessionStatsBuilder::on_request`]).
    requests: SessionStatsBuilder,
    names: NameHash,
}

impl Partition {
    fn new(opts: &AnalyzeOptions, shared: Arc<Budget>, number: usize) -> Self {
        let partitions = opts.threads.max(1);
        let names = NameHash::new(opts.hash_seed);
        Partition {
            window_s: opts.window_s,
            horizon_s: opts.window_s + opts.max_service_s,
            open: HashTable::new(),
            held: 0,
            budget: shared.partition(),
            shared,
            number,
            read_at: 0,
            idle: Idle::new(&opts.spill_dir, Box::new(move |s: &str| names.of(s))),
            spill_dir: opts.spill_dir.clone(),
            closing_spill: SpillSummary::default(),
            err: None,
            closed: Runs::new(
                &opts.spill_dir,
                (opts.memory_bytes / CLOSED_KEYS_SHARE / partitions).max(1),
            ),
            closed_sessions: 0,
            opened: 0,
            requests: SessionStatsBuilder::default(),
            names,
        }
    }

    /// The open session called `name`, whose [`NameHash`] is `hash`.
    fn find(&self, hash: u64, name: &str) -> Option<&OpenSession> {
        self.open
            .find(table_hash(hash), |Entry(k, _)| k == name)
            .map(|Entry(_, s)| s)
    }

    /// Bring into the cache what adding a request of session `name` (of [`NameHash`]
    /// `hash`) for `file` will touch: the session, which looking it up loads, and its entry
    /// for the file.
    fn prefetch(&self, hash: u64, name: &str, file: u32) {
        if let Some(s) = self.find(hash, name) {
            s.chains.prefetch(file);
        }
    }

    /// Bring into the cache the slot where a session of [`NameHash`] `hash` most likely
    /// sits, before [`Partition::prefetch`] looks it up: the table's first probe for the
    /// hash (hashbrown starts at the hash's low bits), which holds the session unless a
    /// collision moved it further on. Only a hint: a wrong guess costs a wasted fetch.
    fn prefetch_slot(&self, hash: u64) {
        let buckets = self.open.num_buckets();
        if buckets == 0 {
            return;
        }
        let first = table_hash(hash) as usize & (buckets - 1);
        if let Some(e) = self.open.get_bucket(first) {
            cacheline::prefetch(e);
        }
    }

    /// What [`Partition::prefetch`] could not ask for before the file entry was in the
    /// cache: the fragments it keeps on the heap.
    fn prefetch_fragments(&self, hash: u64, name: &str, file: u32) {
        if let Some(s) = self.find(hash, name) {
            s.chains.prefetch_fragments(file);
        }
    }

    /// Add a request for `file`, of which the file table knows `info`; `hash` is the
    /// [`NameHash`] of its session.
    fn add(&mut self, file: u32, info: &FileInfo, r: &LogRequest<'_>, hash: u64) {
        self.requests.on_request(r, info);
        let name: &str = &r.session;
        let at = table_hash(hash);
        let names = self.names;
        let mut grown = 0;
        let s = match self.open.find_mut(at, |Entry(k, _)| k == name) {
            Some(Entry(_, s)) => s,
            None => {
                let back = if self.idle.is_empty() {
                    None
                } else {
                    self.idle.take(name).unwrap_or_else(|e| {
                        self.err.get_or_insert(e);
                        None
                    })
                };
                let s = match back {
                    Some(s) => s,
                    None => {
                        self.opened += 1;
                        OpenSession {
                            first_recv: r.recv_s(),
                            last_done: r.done_s,
                            ..OpenSession::default()
                        }
                    }
                };
                grown += s.bytes(name);
                let entry = self
                    .open
                    .insert_unique(at, Entry(CompactString::from(name), s), |e| names.rehash(e));
                &mut entry.into_mut().1
            }
        };
        // The tracker lives in the file's entry: the builder's growth counts it.
        let (chain_grown, parallel) = s.chains.add(file, r, self.window_s);
        parallel.add(r);
        grown += chain_grown;
        s.first_recv = s.first_recv.min(r.recv_s());
        s.last_done = s.last_done.max(r.done_s);
        self.held += grown;
        if self.held > self.budget.saturating_sub(self.idle.index_bytes()) {
            self.spill_idle();
        }
    }

    /// Spill the sessions idle longest until those in memory hold half the budget.
    fn spill_idle(&mut self) {
        let index = self.idle.index_bytes();
        // Past an error, or when the index alone nearly fills the budget, keep everything.
        let room = |budget: usize| Some(budget.saturating_sub(index)).filter(|r| *r >= budget / 8);
        if self.err.is_some() || room(self.budget).is_none_or(|r| self.held <= r) {
            return;
        }
        // The sessions are at their peak: what the process leaves them now.
        if self.held.abs_diff(self.read_at) > self.budget / 16 {
            self.read_at = self.held;
            self.shared
                .at_peak(self.number, self.held + index, resident_bytes());
            self.budget = self.shared.partition();
        }
        let Some(room) = room(self.budget).filter(|r| self.held > *r) else {
            return;
        };
        let mut ages: Vec<(f64, &str)> = self
            .open
            .iter()
            .map(|Entry(k, s)| (s.last_done, &**k))
            .collect();
        ages.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)));
        let mut free = self.held - room / 2;
        let names = self.names;
        let mut keys = Vec::new();
        for (_, k) in ages {
            if free == 0 {
                break;
            }
            free = free.saturating_sub(self.find(names.of(k), k).map_or(0, |s| s.bytes(k)));
            keys.push(Box::<str>::from(k));
        }
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            let found = self
                .open
                .find_entry(table_hash(names.of(&k)), |Entry(n, _)| *n == *k);
            if let Ok(entry) = found {
                let (Entry(k, s), _) = entry.remove();
                self.held -= s.bytes(&k);
                out.push((k.into_string().into_boxed_str(), s.last_done, s));
            }
        }
        // The index's latest part stays a hash map within an eighth of the budget.
        if let Err(e) = self.idle.park(out, self.budget / 8) {
            self.err.get_or_insert(e);
        }
        self.open.shrink_to_fit(|e| names.rehash(e));
    }

    /// Close the sessions that can no longer change at `clock` (all of them when `last`).
    fn sweep(&mut self, clock: f64, last: bool) -> Swept {
        let mut out = Swept {
            open: self.open.len() + self.idle.len(),
            ..Swept::default()
        };
        let (horizon, window, names) = (self.horizon_s, self.window_s, self.names);
        let mut closing: Runs<Closing> = Runs::new(&self.spill_dir, (self.budget / 4).max(1));
        let mut result = Ok(());
        let (mut held, mut gone, mut count) = (0, 0, 0);
        let closed = &mut self.closed;
        // One pass: what every open session holds, which are near the end, which close. A
        // closing session goes to `closing` at once, so the last sweep, which closes every
        // session, never holds them twice.
        self.open.retain(|Entry(k, s)| {
            let b = s.bytes(k);
            held += b;
            if last && s.last_done + window >= clock {
                out.open_at_end += 1;
            }
            let close = last || s.last_done + horizon < clock;
            if close {
                gone += b;
                count += 1;
                if result.is_ok() {
                    let name = Box::from(k.as_str());
                    result = closed
                        .push(ClosedKey(names.of(&name)))
                        .and_then(|()| closing.push(Closing::of(name, std::mem::take(s))));
                }
            }
            !close
        });
        out.held = held + self.idle.index_bytes();
        self.held = held - gone;
        self.closed_sessions += count;
        if result.is_ok() && !self.idle.is_empty() {
            let (closed, open_at_end) = (&mut self.closed, &mut out.open_at_end);
            let count = &mut self.closed_sessions;
            result = self.idle.due(
                |t| last || t + horizon < clock,
                |name, t, s| {
                    if last && t + window >= clock {
                        *open_at_end += 1;
                    }
                    *count += 1;
                    closed.push(ClosedKey(names.of(&name)))?;
                    closing.push(Closing::of(name, s))
                },
            );
        }
        match result.and_then(|()| closing.finish()) {
            Ok(m) => {
                self.closing_spill.runs += m.runs as u64;
                self.closing_spill.bytes += m.spilled;
                out.closed = Some(m);
            }
            Err(e) => {
                self.err.get_or_insert(e);
            }
        }
        // The share the process's memory leaves the sessions now; spilled down to it at once
        // when it shrank.
        self.budget = self.shared.partition();
        if !last && self.held > self.budget.saturating_sub(self.idle.index_bytes()) {
            self.spill_idle();
        }
        self.shared
            .report(self.number, self.held + self.idle.index_bytes());
        out.closed_sessions = self.closed_sessions;
        out.closed_key_bytes = self.closed.held();
        if last {
            let keys = std::mem::replace(&mut self.closed, Runs::new(&self.spill_dir, 1));
            let mut spill = self.idle.stats;
            spill.add(&self.closing_spill);
            spill.add(&SpillSummary {
                runs: keys.runs() as u64,
                bytes: keys.spilled,
                ..SpillSummary::default()
            });
            let reopened = match keys.finish().and_then(distinct) {
                Ok(names) => self.opened.saturating_sub(names),
                Err(e) => {
                    self.err.get_or_insert(e);
                    0
                }
            };
            out.last = Some((std::mem::take(&mut self.requests), reopened, spill));
        }
        out.err = self.err.take();
        out
    }
}

/// A request on its way to a partition.
struct Queued {
    file: u32,
    info: FileInfo,
    /// The request without its names.
    r: LogRequest<'static>,
    /// Where its session's name lies in [`Batch::names`].
    name: (u32, u32),
    /// [`NameHash`] of the session's name.
    hash: u64,
}

/// Requests on their way to a partition, and the sweep to run after them.
#[derive(Default)]
struct Batch {
    reqs: Vec<Queued>,
    /// The session names, spans of which the requests hold.
    names: String,
    sweep: Option<(f64, bool)>,
}

impl Batch {
    fn with_capacity(requests: usize) -> Batch {
        Batch {
            reqs: Vec::with_capacity(requests),
            names: String::with_capacity(requests * 16),
            sweep: None,
        }
    }

    fn push(&mut self, file: u32, info: FileInfo, r: &LogRequest<'_>, hash: u64) {
        let at = self.names.len() as u32;
        self.names.push_str(&r.session);
        self.reqs.push(Queued {
            file,
            info,
            r: r.with_names("", ""),
            name: (at, r.session.len() as u32),
            hash,
        });
    }

    fn name(&self, q: &Queued) -> &str {
        let (at, len) = q.name;
        &self.names[at as usize..(at + len) as usize]
    }

    /// Feed the requests to `p`, then sweep if asked. What the request [`AHEAD`] places on
    /// will touch (its session and file entry) is fetched into the cache while this one is
    /// added, so the cache misses of several requests overlap instead of following one
    /// another: with more open sessions than the caches hold, they are most of the time.
    fn run(&self, p: &mut Partition) -> Option<Swept> {
        for (i, q) in self.reqs.iter().enumerate() {
            if let Some(next) = self.reqs.get(i + 2 * AHEAD) {
                p.prefetch_slot(next.hash);
            }
            if let Some(next) = self.reqs.get(i + AHEAD) {
                p.prefetch(next.hash, self.name(next), next.file);
            }
            if let Some(next) = self.reqs.get(i + AHEAD / 2) {
                p.prefetch_fragments(next.hash, self.name(next), next.file);
            }
            p.add(q.file, &q.info, &q.r.with_names(self.name(q), ""), q.hash);
        }
        self.sweep.map(|(clock, last)| p.sweep(clock, last))
    }

    fn clear(&mut self) {
        self.reqs.clear();
        self.names.clear();
        self.sweep = None;
    }
}

/// The partitions: one on the calling thread, or several on threads of their own.
enum Workers {
    /// The partition, and the requests gathered for it (added at [`INLINE_BATCH`] and
    /// before every sweep).
    Inline(Box<Partition>, Batch),
    Threads {
        feed: Vec<SyncSender<Batch>>,
        back: Vec<Receiver<Swept>>,
        /// The batch being filled for each partition.
        filling: Vec<Batch>,
        /// Requests per batch ([`batch_len`]).
        batch: usize,
        /// What each partition swept and the merge has not taken yet.
        inbox: Vec<VecDeque<Swept>>,
        /// Batches the partitions have added, emptied, to be filled again: a new one would
        /// cost its pages afresh (a batch is about 600 KiB).
        emptied: Receiver<Batch>,
    },
}

/// An emptied batch to fill, or a new one of `len` requests when none is back yet.
fn refill(emptied: &Receiver<Batch>, len: usize) -> Batch {
    emptied
        .try_recv()
        .unwrap_or_else(|_| Batch::with_capacity(len))
}

/// Requests per batch when `partitions` partitions each have [`QUEUED`] batches queued, one
/// being added and one being filled, within `bytes` in all (a request and its session's
/// name); from [`MIN_BATCH`] to [`BATCH`].
fn batch_len(partitions: usize, bytes: usize) -> usize {
    let per_request = std::mem::size_of::<Queued>() + 16;
    (bytes / (partitions.max(1) * (QUEUED + 2) * per_request)).clamp(MIN_BATCH, BATCH)
}

/// A sweep as the calling thread decided it.
struct Pending {
    clock: f64,
    last: bool,
    /// Files whose greatest end offset grew since the sweep before, with the new value.
    grown: Vec<(u32, u64)>,
    /// Files in the table, and the bytes it and the calling thread's per-file state hold.
    files: usize,
    file_bytes: usize,
}

/// Takes the swept sessions in the order of one thread and feeds the statistics and sink.
struct Merge<'s> {
    opts: AnalyzeOptions,
    /// Greatest end offset read per file, as of the sweep being merged.
    max_end: Offsets,
    chain_stats: ChainStatsBuilder,
    phase_stats: PhaseStatsBuilder,
    session_stats: SessionStatsBuilder,
    sink: &'s mut dyn SessionSink,
    err: Option<std::io::Error>,
    reopened: u64,
    excluded_tail: u64,
    open_at_end: u64,
    peak_open: usize,
    peak_open_bytes: usize,
    spill: SpillSummary,
    /// Latest [`Analysis::file_table_bytes`] and [`Analysis::statistics_bytes`].
    file_bytes: usize,
    statistics_bytes: usize,
    /// Whether [`SessionSink::warning`] was given.
    warned: bool,
}

impl Merge<'_> {
    fn sweep(&mut self, files: &FileTable, p: Pending, parts: Vec<Swept>) {
        // Sized by the files that grew, which the sweep's decision fixed: the same for any
        // threads.
        for (f, end) in p.grown {
            *self.max_end.slot(f as usize) = end;
        }
        // Sessions only open between sweeps: the most open at once is the most before one.
        self.peak_open = self
            .peak_open
            .max(parts.iter().map(|s| s.open).sum::<usize>());
        self.peak_open_bytes = self
            .peak_open_bytes
            .max(parts.iter().map(|s| s.held).sum::<usize>());
        let held = parts.iter().map(|s| s.held).sum::<usize>();
        let closed_sessions = parts.iter().map(|s| s.closed_sessions).sum::<u64>();
        let closed_key_bytes = parts.iter().map(|s| s.closed_key_bytes).sum::<usize>();
        let mut streams = Vec::with_capacity(parts.len());
        for s in parts {
            self.open_at_end += s.open_at_end;
            if let Some((requests, reopened, spill)) = s.last {
                self.session_stats.merge_requests(requests);
                self.reopened += reopened;
                self.spill.add(&spill);
            }
            if let Some(e) = s.err {
                self.err.get_or_insert(e);
            }
            streams.extend(s.closed);
        }
        if let Err(e) = self.close_in_order(files, streams, p.last, p.clock) {
            self.err.get_or_insert(e);
        }
        self.file_bytes = p.file_bytes + self.max_end.bytes();
        self.statistics_bytes =
            self.chain_stats.bytes() + self.session_stats.bytes() + closed_key_bytes;
        self.check_memory(p.files, held, closed_sessions);
    }

    /// Say once when what the pass holds, or the whole process's resident memory, passes
    /// the memory limit: the open sessions stay within their share, the chain lengths within
    /// their sixteenth, the closed sessions' keys within their sixty-fourth, the file
    /// table's names within an eighth and the sizeless files' greatest offsets within a
    /// sixty-fourth each, but what the rest of the process holds is only made room for.
    fn check_memory(&mut self, files: usize, held: usize, closed: u64) {
        if self.warned {
            return;
        }
        let total = held + self.file_bytes + self.statistics_bytes;
        let resident = resident_bytes().unwrap_or(0);
        let limit = self.opts.memory_bytes;
        if total <= limit && resident <= limit {
            return;
        }
        self.warned = true;
        let size = |n: usize| vodkit_units::human_size(n as u64);
        self.sink.warning(&format!(
            "the analysis holds about {}, and the process {} resident, past --memory {}: \
             open sessions {}, file table {} ({files} files), statistics {} ({} chains, \
             {closed} sessions closed); the file table keeps an eighth of the limit in \
             memory and the rest on disk, and the rest of the process (buffers, each \
             thread's allocator) only shrinks the open sessions' share, down to a quarter of \
             the limit",
            size(total),
            size(resident),
            size(limit),
            size(held),
            size(self.file_bytes),
            size(self.statistics_bytes),
            self.chain_stats.chains(),
        ));
    }

    /// Close the sessions of every partition's stream (each ordered by name), in the order
    /// of their names, as one thread orders them.
    fn close_in_order(
        &mut self,
        files: &FileTable,
        mut streams: Vec<Merged<Closing>>,
        at_end: bool,
        clock: f64,
    ) -> std::io::Result<()> {
        // The partitions' heads in a heap, smallest name first (names never repeat across
        // partitions: a session's partition is its name's hash).
        let mut heads = std::collections::BinaryHeap::with_capacity(streams.len());
        for (i, m) in streams.iter_mut().enumerate() {
            if let Some(c) = m.next_record()? {
                heads.push(MinEntry::new((c, i), ()));
            }
        }
        while let Some(MinEntry { key: (c, i), .. }) = heads.pop() {
            if let Some(next) = streams[i].next_record()? {
                heads.push(MinEntry::new((next, i), ()));
            }
            self.close(files, c, at_end, clock);
        }
        Ok(())
    }

    fn close(&mut self, files: &FileTable, s: Closing, at_end: bool, clock: f64) {
        let chains = s.chains;
        let phases = session_phases(&chains, files, &self.opts.phase);
        for c in &chains {
            self.chain_stats.add(c, &files.get(c.file));
        }
        let excluded = at_end
            && self.opts.exclude_tail_s > 0.0
            && s.first_recv >= clock - self.opts.exclude_tail_s;
        if excluded {
            self.excluded_tail += 1;
        } else {
            self.phase_stats
                .add_session(&chains, &phases, files, &self.opts.phase);
            let max_end = &mut self.max_end;
            self.session_stats
                .add_session(&chains, &s.parallel, files, |f| {
                    files.get(f).size_bytes.or_else(|| max_end.get(f as usize))
                });
        }
        if self.err.is_none() {
            let closed = ClosedSession {
                name: &s.name,
                chains: &chains,
                phases: &phases,
                files,
            };
            if let Err(e) = self.sink.session(&closed) {
                self.err = Some(e);
            }
        }
    }
}

/// The calling thread's part: the log's clock, the file table, routing and sweeps.
struct State<'s> {
    max_service_s: f64,
    files: FileTable,
    /// By file whose size the table does not know (the statistics take its greatest end
    /// offset for it): that offset, with [`GREW`] set when it grew since the last sweep
    /// (one word, so a request reads one cache line of them), in pages within a
    /// sixty-fourth of the limit; none when the table knows every size.
    max_end: Offsets,
    /// Files whose greatest end offset grew since the last sweep.
    grown: Vec<u32>,
    clock: f64,
    next_sweep: f64,
    long_service: u64,
    /// The sink's [`SessionSink::wants_requests`], asked once.
    requests_out: bool,
    names: NameHash,
    /// The open sessions' share of the memory limit, set before every sweep.
    budget: Arc<Budget>,
    workers: Workers,
    pending: VecDeque<Pending>,
    merge: Merge<'s>,
}

impl Requests for &mut State<'_> {
    fn take(&mut self, r: &LogRequest<'_>) {
        self.add(r);
    }

    fn ahead(&mut self, r: &LogRequest<'_>) {
        self.files.prefetch(r.file);
    }
}

fn worker_gone() -> std::io::Error {
    std::io::Error::other("an analysis thread stopped early")
}

impl State<'_> {
    fn add(&mut self, r: &LogRequest<'_>) {
        if self.requests_out && self.merge.err.is_none() {
            if let Err(e) = self.merge.sink.request(r) {
                self.merge.err = Some(e);
            }
        }
        let (file, info) = self.files.intern_info(r.file);
        if info.size_bytes.is_none() {
            self.grew(file, r.end());
        }
        if r.service_s > self.max_service_s {
            self.long_service += 1;
        }
        if r.done_s > self.clock {
            self.clock = r.done_s;
        }
        match &mut self.workers {
            Workers::Inline(p, b) => {
                b.push(file, info, r, self.names.of(&r.session));
                if b.reqs.len() >= INLINE_BATCH {
                    b.run(p);
                    b.clear();
                }
            }
            Workers::Threads {
                feed,
                filling,
                batch,
                emptied,
                ..
            } => {
                let hash = self.names.of(&r.session);
                let i = (hash % feed.len() as u64) as usize;
                let b = &mut filling[i];
                b.push(file, info, r, hash);
                if b.reqs.len() >= *batch {
                    let full = std::mem::replace(b, refill(emptied, *batch));
                    if feed[i].send(full).is_err() && self.merge.err.is_none() {
                        self.merge.err = Some(worker_gone());
                    }
                }
            }
        }
        if self.clock >= self.next_sweep {
            self.sweep(false);
            self.next_sweep = self.clock + SWEEP_EVERY_S;
        }
    }

    /// `file`, whose size is not known, was read up to `end`.
    fn grew(&mut self, file: u32, end: u64) {
        let slot = self.max_end.slot(file as usize);
        // Past 2^63 - 1 an offset is the same to the statistics (a file that size).
        let end = end.min(!GREW);
        if end > *slot & !GREW {
            if *slot & GREW == 0 {
                self.grown.push(file);
            }
            *slot = end | GREW;
        }
    }

    /// Close the sessions that can no longer change (all of them at the end of the log).
    fn sweep(&mut self, last: bool) {
        self.budget.lower(resident_bytes());
        let grown = self
            .grown
            .drain(..)
            .map(|f| {
                let slot = self.max_end.slot(f as usize);
                *slot &= !GREW;
                (f, *slot)
            })
            .collect();
        let p = Pending {
            clock: self.clock,
            last,
            grown,
            files: self.files.len(),
            file_bytes: self.files.bytes()
                + self.max_end.bytes()
                + self.grown.capacity() * std::mem::size_of::<u32>(),
        };
        match &mut self.workers {
            Workers::Inline(part, b) => {
                b.run(part);
                b.clear();
                let s = part.sweep(p.clock, last);
                self.merge.sweep(&self.files, p, vec![s]);
            }
            Workers::Threads {
                feed,
                filling,
                batch,
                emptied,
                ..
            } => {
                for (tx, b) in feed.iter().zip(filling.iter_mut()) {
                    let mut b = std::mem::replace(b, refill(emptied, *batch));
                    b.sweep = Some((p.clock, last));
                    if tx.send(b).is_err() && self.merge.err.is_none() {
                        self.merge.err = Some(worker_gone());
                    }
                }
                self.pending.push_back(p);
                self.drain(if last { 0 } else { LAG });
            }
        }
    }

    /// Merge the sweeps every partition has finished, in order, waiting until at most
    /// `keep` are left.
    fn drain(&mut self, keep: usize) {
        let Workers::Threads { back, inbox, .. } = &mut self.workers else {
            return;
        };
        loop {
            for (rx, q) in back.iter().zip(inbox.iter_mut()) {
                q.extend(rx.try_iter());
            }
            while !self.pending.is_empty() && inbox.iter().all(|q| !q.is_empty()) {
                let parts = inbox.iter_mut().filter_map(VecDeque::pop_front).collect();
                if let Some(p) = self.pending.pop_front() {
                    self.merge.sweep(&self.files, p, parts);
                }
            }
            if self.pending.len() <= keep {
                return;
            }
            for (rx, q) in back.iter().zip(inbox.iter_mut()) {
                if q.is_empty() {
                    match rx.recv() {
                        Ok(s) => q.push_back(s),
                        Err(_) => {
                            if self.merge.err.is_none() {
                                self.merge.err = Some(worker_gone());
                            }
                            self.pending.clear();
                            return;
                        }
                    }
                }
            }
        }
    }
}

/// Analyze a log. `files` is the file table (empty when unknown); `sink` receives every
/// session as it closes. Only I/O errors (reading the log, or from the sink) fail.
pub fn analyze<R: BufRead + Send>(
    input: R,
    mut files: FileTable,
    opts: &AnalyzeOptions,
    sink: &mut dyn SessionSink,
) -> std::io::Result<Analysis> {
    files.bound(opts.file_table_bytes(), &opts.spill_dir);
    let partitions = opts.threads.max(1);
    opts.prepare_process();
    let budget = Arc::new(Budget::new(opts.memory_bytes, partitions));
    std::thread::scope(|s| {
        let workers = if partitions == 1 {
            Workers::Inline(
                Box::new(Partition::new(opts, budget.clone(), 0)),
                Batch::with_capacity(INLINE_BATCH),
            )
        } else {
            let batch = batch_len(partitions, opts.memory_bytes / IN_FLIGHT_SHARE);
            let mut feed = Vec::new();
            let mut back = Vec::new();
            let (emptied_tx, emptied) = channel::<Batch>();
            for number in 0..partitions {
                let (tx, rx) = sync_channel::<Batch>(QUEUED);
                let (done_tx, done_rx): (Sender<Swept>, Receiver<Swept>) = channel();
                feed.push(tx);
                back.push(done_rx);
                let shared = budget.clone();
                let emptied_tx = emptied_tx.clone();
                s.spawn(move || {
                    let mut part = Partition::new(opts, shared, number);
                    for mut b in rx {
                        if let Some(swept) = b.run(&mut part) {
                            if done_tx.send(swept).is_err() {
                                return;
                            }
                        }
                        b.clear();
                        // Gone only when the analysis is over.
                        let _ = emptied_tx.send(b);
                    }
                });
            }
            Workers::Threads {
                filling: (0..partitions)
                    .map(|_| Batch::with_capacity(batch))
                    .collect(),
                batch,
                inbox: (0..partitions).map(|_| VecDeque::new()).collect(),
                feed,
                back,
                emptied,
            }
        };
        let mut st = State {
            max_service_s: opts.max_service_s,
            max_end: Offsets::new(&opts.spill_dir, opts.memory_bytes / OFFSETS_SHARE),
            grown: Vec::new(),
            files,
            clock: f64::NEG_INFINITY,
            next_sweep: f64::NEG_INFINITY,
            long_service: 0,
            requests_out: sink.wants_requests(),
            names: NameHash::new(opts.hash_seed),
            budget: budget.clone(),
            workers,
            pending: VecDeque::new(),
            merge: Merge {
                opts: opts.clone(),
                max_end: Offsets::new(&opts.spill_dir, opts.memory_bytes / OFFSETS_SHARE),
                chain_stats: ChainStatsBuilder::new(
                    &opts.spill_dir,
                    (opts.memory_bytes / CHAIN_LENGTHS_SHARE).max(1),
                ),
                phase_stats: PhaseStatsBuilder::default(),
                session_stats: SessionStatsBuilder::default(),
                sink,
                err: None,
                reopened: 0,
                excluded_tail: 0,
                open_at_end: 0,
                peak_open: 0,
                peak_open_bytes: 0,
                spill: SpillSummary::default(),
                file_bytes: 0,
                statistics_bytes: 0,
                warned: false,
            },
        };
        // With partitions on threads of their own, `threads` threads parse beside them
        // (the calling thread hands the requests over).
        let read_opts = ReadOptions {
            format: opts.format,
            threads: if partitions > 1 { partitions + 1 } else { 1 },
            in_flight_bytes: opts.memory_bytes / IN_FLIGHT_SHARE,
            ..Default::default()
        };
        let read = read_requests(input, &read_opts, &mut st)?;
        st.sweep(true);
        let State {
            files,
            long_service,
            workers,
            merge: mut m,
            max_end: mut ends,
            ..
        } = st;
        // The partitions' threads end when their feed closes.
        drop(workers);
        if let Some(e) = m.err.take() {
            return Err(e);
        }
        if let Some(e) = ends.take_error().or_else(|| m.max_end.take_error()) {
            return Err(e);
        }
        if let Some(e) = files.error() {
            return Err(std::io::Error::other(e.to_string()));
        }
        let statistics_spilled_bytes = m.chain_stats.spilled_bytes();
        Ok(Analysis {
            read,
            chains: m
                .chain_stats
                .finish(&opts.breakpoints, &opts.probabilities)?,
            phases: m.phase_stats.finish(&opts.phase),
            sessions: m.session_stats.finish(),
            open_at_end: m.open_at_end,
            reopened: m.reopened,
            long_service,
            excluded_tail: m.excluded_tail,
            peak_open_sessions: m.peak_open,
            peak_open_bytes: m.peak_open_bytes as u64,
            spill: m.spill,
            file_table_bytes: m.file_bytes as u64,
            statistics_bytes: m.statistics_bytes as u64,
            statistics_spilled_bytes,
            files,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RequestKind;
    use std::path::Path;

    #[test]
    fn batches_in_flight_keep_within_their_bytes_down_to_the_smallest_batch() {
        let per_request = std::mem::size_of::<Queued>() + 16;
        // The default limit's sixteenth holds full batches on two and four partitions.
        assert_eq!(batch_len(2, MEMORY_BYTES / IN_FLIGHT_SHARE), BATCH);
        assert_eq!(batch_len(4, MEMORY_BYTES / IN_FLIGHT_SHARE), BATCH);
        assert_eq!(batch_len(2, 0), MIN_BATCH);
        for partitions in [2usize, 3, 8] {
            for mib in [1usize, 2, 8, 16] {
                let bytes = mib << 20;
                let n = batch_len(partitions, bytes);
                assert!((MIN_BATCH..=BATCH).contains(&n));
                let held = partitions * (QUEUED + 2) * n * per_request;
                if n > MIN_BATCH {
                    assert!(held <= bytes, "{partitions} {mib}: {held}");
                }
                if n < BATCH {
                    assert!(held + partitions * (QUEUED + 2) * per_request > bytes);
                }
            }
        }
    }

    /// Requests of 200 sessions over 7 files: each session comes back every 25-45 s with
    /// a few requests, adjacent or not, some open-ended, some on a named connection; a
    /// session is closed when idle for 100 s and a few return after that.
    fn requests() -> Vec<(String, u32, LogRequest<'static>)> {
        let mut out = Vec::new();
        for step in 0..40u64 {
            for i in 0..200u64 {
                if (step + i) % 5 == 0 || (i % 9 == 0 && (10..16).contains(&step)) {
                    continue;
                }
                let t = 1000.0 + step as f64 * (25.0 + (i % 21) as f64) + i as f64 * 0.01;
                for k in 0..1 + (i + step) % 3 {
                    let offset = (step * 3 + k) * 1000 + if (i + k) % 4 == 0 { 500 } else { 0 };
                    out.push((
                        format!("s{i}"),
                        (i % 7) as u32,
                        LogRequest {
                            done_s: t + k as f64 * 0.1,
                            service_s: 0.05 * (k + 1) as f64,
                            session: "".into(),
                            file: "",
                            offset,
                            extent: 1000,
                            kind: if k == 2 {
                                RequestKind::Open
                            } else {
                                RequestKind::Chunk
                            },
                            bytes_sent: 1000,
                            conn: (i % 3 == 0).then_some(k),
                        },
                    ));
                }
            }
        }
        out.sort_by(|a, b| a.2.done_s.total_cmp(&b.2.done_s));
        out
    }

    type Swept1 = (Vec<Closing>, usize, u64);

    /// What one partition closes at every sweep (every 60 s and at the end), in the order
    /// the merge takes it, for a memory limit; the sessions reopened, what was spilled and
    /// the run files the closing sessions were sorted in.
    fn closings(memory: usize, dir: &Path) -> (Vec<Swept1>, u64, SpillSummary, usize) {
        let opts = AnalyzeOptions {
            max_service_s: 60.0,
            memory_bytes: memory,
            spill_dir: dir.to_path_buf(),
            ..Default::default()
        };
        let mut p = Partition::new(&opts, Arc::new(Budget::new(opts.memory_bytes, 1)), 0);
        let mut out = Vec::new();
        let mut next = f64::NEG_INFINITY;
        let reqs = requests();
        let mut sorted_runs = 0;
        let mut take = |s: Swept| {
            assert!(s.err.is_none(), "{:?}", s.err);
            let mut m = s.closed.unwrap();
            sorted_runs += m.runs;
            let mut closed = Vec::new();
            while let Some(c) = m.next_record().unwrap() {
                closed.push(c);
            }
            let last = s.last.map(|l| (l.1, l.2));
            ((closed, s.open, s.open_at_end), last)
        };
        for (name, file, r) in &reqs {
            p.add(
                *file,
                &FileInfo::default(),
                &r.with_names(name, ""),
                p.names.of(name),
            );
            if r.done_s >= next {
                out.push(take(p.sweep(r.done_s, false)).0);
                next = r.done_s + 60.0;
            }
        }
        let clock = reqs.last().unwrap().2.done_s;
        let (last, end) = take(p.sweep(clock, true));
        out.push(last);
        let (reopened, spill) = end.unwrap();
        (out, reopened, spill, sorted_runs)
    }

    #[test]
    fn an_open_session_fills_two_whole_cache_lines() {
        // The look-ahead fetches an entry's first two lines: they must be all of it.
        assert_eq!(std::mem::align_of::<Entry>(), 64);
        assert_eq!(std::mem::size_of::<Entry>(), 128);
    }

    #[test]
    fn sessions_spilled_reloaded_and_merged_back_close_as_if_kept_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let (want, reopened, none, sorted) = closings(usize::MAX, dir.path());
        assert_eq!((none, sorted), (SpillSummary::default(), 0));
        assert!(reopened > 0, "sessions return after closing");
        assert!(want.iter().filter(|s| !s.0.is_empty()).count() > 3);
        let closed: usize = want.iter().map(|s| s.0.len()).sum();
        for memory in [40_000, 200_000] {
            let (got, again, spill, sorted) = closings(memory, dir.path());
            assert!(
                spill.sessions > 0 && spill.reloaded > 0,
                "{memory}: {spill:?}"
            );
            // The sessions closing at once were sorted on disk at the smallest limit.
            assert!(sorted > 0 || memory > 40_000, "{memory}: {sorted} runs");
            assert!(spill.runs > 0 && spill.bytes > 0, "{memory}: {spill:?}");
            assert_eq!(again, reopened);
            assert_eq!(got.len(), want.len());
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    g == w,
                    "memory {memory}, sweep {i}: {} closed, want {}",
                    g.0.len(),
                    w.0.len()
                );
            }
            assert_eq!(closed, got.iter().map(|s| s.0.len()).sum::<usize>());
        }
        // Every run file and directory is gone.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
