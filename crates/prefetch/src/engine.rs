//! The engine: detects misses and performs (enlarged, serialized) reads (Linux).
//!
//! For every request the caller hands over an open file and a byte range. The engine
//! checks the range's residency ([`crate::residency`]); if it is all in memory the call
//! returns at once. Otherwise the miss is read according to the [`IoMode`]
//! (seed 001 §5):
//!
//! | mode | who reads | how much |
//! |---|---|---|
//! | `vanilla` | a shared thread pool | exactly the request |
//! | `serialized` | one worker per device | exactly the request |
//! | `prefetch` | a shared thread pool | the policy's prefetch size |
//! | `asap` | one worker per device | the policy's prefetch size |
//! | `direct` | one worker per device | the policy's prefetch size, `O_DIRECT` into the buffer pool |
//!
//! A device's worker serves its queue in arrival order, or by deadline or head position
//! ([`EngineConfig::order`], [`crate::schedule`]).
//!
//! Reads are blocking `pread`s into a reusable buffer (never readahead or
//! `POSIX_FADV_WILLNEED`, which the kernel may truncate); the bytes land in the page
//! cache and the caller then sends them with `sendfile`. Reads stop at end of file. With
//! [`EngineConfig::large_folios`] (off by default) a read's whole aligned 2 MiB ranges are
//! read instead as large page-cache folios, which `sendfile` sends with less CPU, and
//! prefetches end on those boundaries ([`crate::folio`]).
//! In `direct` mode "in memory" means "in the engine's buffer pool" ([`crate::direct`]):
//! reads bypass the page cache, and the caller sends the bytes from the pool's chunks
//! ([`Engine::fetch_direct`]).
//!
//! Callers: an async server awaits [`Engine::ensure_resident`] (the worker completes a
//! oneshot channel); a synchronous daemon calls [`Engine::ensure_resident_blocking`].
//! Both report per call how many requested bytes were in memory and how many were not.

use crate::chain::ChainPosition;
use crate::device::DeviceMap;
use crate::direct::{self, BufferPool, Chunk, PoolConfig, Slice};
use crate::ledger::{Ledger, LedgerConfig};
use crate::memory::{self, MemoryConfig, MemoryManager, StreamId};
use crate::placement::Placement;
use crate::policy::{FileId, Observation, Policy, PolicySpec, ReadContext};
use crate::residency::{self, Probe};
use crate::schedule::{Deadlines, IoOrder, Place, Queue, Read};
use crate::service::{SPLIT_HEAD_BYTES, SPLIT_MIN_REST_BYTES};
use crate::stats::{DeviceStats, DropStats, Stats};
use crossbeam_channel::{Receiver, Sender};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use strum::{Display, EnumString, IntoStaticStr, VariantNames};
use tokio::sync::oneshot;

/// How misses are read (seed 001 §5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[derive(Display, EnumString, IntoStaticStr, VariantNames)]
#[strum(serialize_all = "lowercase", parse_err_ty = String, parse_err_fn = unknown_mode)]
pub enum IoMode {
    Vanilla,
    Serialized,
    Prefetch,
    #[default]
    Asap,
    /// `asap` with `O_DIRECT` reads into the engine's buffer pool (no page cache).
    Direct,
}

impl IoMode {
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// One worker per device (rather than the shared pool).
    pub fn serializes(self) -> bool {
        matches!(self, IoMode::Serialized | IoMode::Asap | IoMode::Direct)
    }

    /// Reads are enlarged to the policy's prefetch size.
    pub fn prefetches(self) -> bool {
        matches!(self, IoMode::Prefetch | IoMode::Asap | IoMode::Direct)
    }
}

fn unknown_mode(s: &str) -> String {
    vodkit_units::unknown_choice("I/O mode", s, IoMode::VARIANTS)
}

/// Engine settings.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub mode: IoMode,
    pub policy: PolicySpec,
    pub probe: Probe,
    pub devices: DeviceMap,
    /// Threads of the shared pool (`vanilla`, `prefetch`).
    pub pool_threads: usize,
    /// Largest single `pread`; longer reads are issued as consecutive pieces.
    pub max_read_bytes: u64,
    pub ledger: LedgerConfig,
    /// How often (seconds) accounting deltas are fed to the policy.
    pub observe_every_s: f64,
    /// `false`: before an enlarged read (`prefetch`, `asap`), mark the file
    /// `POSIX_FADV_RANDOM` so the kernel adds no readahead of its own and the policy alone
    /// decides what is read. The advice applies to the caller's open file description
    /// (its later `sendfile` misses get no readahead either).
    pub kernel_readahead: bool,
    /// Every this many seconds (0 = never) a background thread checks pending prefetched
    /// ranges for eviction, so eviction times are dated when the pages went rather than
    /// when a viewer asked for them ([`Engine::sweep_now`]).
    pub sweep_every_s: f64,
    /// Most ranges checked per sweep.
    pub sweep_limit: usize,
    /// The prefetch-aware memory manager ([`crate::memory`]): `None` leaves the page cache
    /// to the kernel and prefetch sizes to the policy alone. `direct` mode always runs it
    /// (the budget detected as for `--memory auto` when `None`), with no drop lag.
    pub memory: Option<MemoryConfig>,
    /// `direct` mode: read with `O_DIRECT` (`false`: buffered `pread`, dropping the pages
    /// after each read, as when a filesystem refuses `O_DIRECT`).
    pub o_direct: bool,
    /// Page-cache reads of the prefetching modes (without kernel readahead) of popular files
    /// read whole aligned folios as large page-cache folios, and their prefetches end on
    /// folio boundaries ([`crate::folio`]); `false` (the default): `pread`s only (4 KiB
    /// pages). Off by default until it is a measured gain: docs/results/folio/report.md.
    pub large_folios: bool,
    /// The order a device's worker serves its queued reads in (serializing modes only):
    /// sweeps by head position (the default), earliest deadline first, or arrival order
    /// ([`crate::schedule`]).
    pub order: IoOrder,
    /// Engine-clock seconds a queued read waits at most before it goes ahead of the
    /// deadline and sweep orders ([`crate::schedule::MAX_WAIT_S`] by default).
    pub max_wait_s: f64,
    /// Page-cache reads of a range that is partly resident read again the resident runs
    /// inside it that are shorter than half a positioning's worth of transfer (dropping
    /// them first), so the drive sees one read instead of one per missing piece
    /// ([`crate::residency::runs_to_reread`]); `false`: skip every resident page.
    pub reread_resident_runs: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            mode: IoMode::Asap,
            policy: PolicySpec::default(),
            probe: Probe::Auto,
            devices: DeviceMap::new(),
            pool_threads: 16,
            max_read_bytes: 64 << 20,
            ledger: LedgerConfig::default(),
            observe_every_s: 1.0,
            kernel_readahead: false,
            sweep_every_s: 1.0,
            sweep_limit: 4096,
            memory: None,
            o_direct: true,
            large_folios: false,
            order: IoOrder::default(),
            max_wait_s: crate::schedule::MAX_WAIT_S,
            reread_resident_runs: true,
        }
    }
}

/// One request to make resident.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReadRequest {
    pub offset: u64,
    pub len: u64,
    /// Bit rate of the file (from a [`crate::BitrateMap`]); `None` = policy default.
    pub bitrate_kbps: Option<u32>,
    /// Position in the client's chain (from a [`crate::ChainTracker`]); `None` = a
    /// chain's first request, starting elsewhere than offset zero.
    pub chain: Option<ChainPosition>,
    /// Who reads (a session or connection key) for the memory manager's streams; `None`:
    /// streams are told apart by position.
    pub client: Option<u64>,
    /// What the caller's own `stat` of the file said this request (an open-file cache
    /// checks it anyway); `None`: the engine asks the kernel (`statx`).
    pub file: Option<FileFacts>,
}

/// A file's device, inode and size as the caller knows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileFacts {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
}

impl FileFacts {
    /// What `statx` says of `file` (for callers that have no stat of their own).
    pub fn of(file: &File) -> io::Result<FileFacts> {
        let meta = file.metadata()?;
        Ok(FileFacts {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
        })
    }

    /// The engine's identity of the file ([`file_id`]).
    pub fn id(&self) -> FileId {
        file_id(self.dev, self.ino)
    }
}

/// What one call did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReadOutcome {
    /// Requested bytes after clipping to the file.
    pub requested: u64,
    /// Of those, bytes already in memory.
    pub from_memory: u64,
    /// Of those, bytes that were not in memory (read from disk by this call).
    pub from_disk: u64,
    /// Bytes the read covered (0 for a hit): the request or the prefetch size.
    pub read_bytes: u64,
    /// Seconds waiting in the queue before the read started.
    pub queued_s: f64,
    /// Seconds the read took.
    pub read_s: f64,
    /// Engine-clock time ([`Engine::now_s`]) the read started and ended.
    pub started_s: f64,
    pub finished_s: f64,
    /// The miss fell inside a read already queued or running and waited for it (then
    /// `read_bytes` and the timings are that read's).
    pub joined: bool,
    /// Device (queue) the read went to.
    pub device: Option<Arc<str>>,
    /// The memory manager's stream for this request (pass it to [`Engine::consumed`]).
    pub stream: Option<StreamId>,
}

/// What [`Engine::fetch_direct`] did, and where the bytes are.
#[derive(Clone, Debug, Default)]
pub struct DirectOutcome {
    pub outcome: ReadOutcome,
    /// Pieces of the buffer pool's chunks covering the request, in order (empty for an
    /// empty request). Holding them keeps the chunks' memory.
    pub slices: Vec<Slice>,
}

/// A miss being read; finish with [`Pending::wait`] or [`Pending::wait_blocking`].
pub struct Pending {
    rx: oneshot::Receiver<io::Result<ReadDone>>,
    outcome: ReadOutcome,
    /// The request's `[start, end)` (for `direct` slices).
    range: (u64, u64),
}

impl Pending {
    pub async fn wait(self) -> io::Result<ReadOutcome> {
        let Pending { rx, outcome, .. } = self;
        let done = rx.await.map_err(|_| worker_gone())?;
        Ok(finish(outcome, done?))
    }

    /// Blocks the calling thread; do not call from inside an async runtime.
    pub fn wait_blocking(self) -> io::Result<ReadOutcome> {
        let Pending { rx, outcome, .. } = self;
        let done = rx.blocking_recv().map_err(|_| worker_gone())?;
        Ok(finish(outcome, done?))
    }

    /// [`Pending::wait`] with the buffer pool's slices of the request (`direct` mode).
    pub async fn wait_direct(self) -> io::Result<DirectOutcome> {
        let Pending { rx, outcome, range } = self;
        let done = rx.await.map_err(|_| worker_gone())?;
        finish_direct(outcome, done?, range)
    }

    /// [`Pending::wait_blocking`] with the buffer pool's slices (`direct` mode).
    pub fn wait_direct_blocking(self) -> io::Result<DirectOutcome> {
        let Pending { rx, outcome, range } = self;
        let done = rx.blocking_recv().map_err(|_| worker_gone())?;
        finish_direct(outcome, done?, range)
    }
}

fn finish_direct(
    outcome: ReadOutcome,
    done: ReadDone,
    range: (u64, u64),
) -> io::Result<DirectOutcome> {
    let slices = direct::slices_for(&done.chunks, range.0, range.1).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "direct read ended before {} (the file is shorter than expected)",
                range.1
            ),
        )
    })?;
    Ok(DirectOutcome {
        outcome: finish(outcome, done),
        slices,
    })
}

fn finish(outcome: ReadOutcome, done: ReadDone) -> ReadOutcome {
    ReadOutcome {
        read_bytes: done.bytes,
        queued_s: done.queued_s,
        read_s: done.read_s,
        started_s: done.started_s,
        finished_s: done.finished_s,
        ..outcome
    }
}

/// Result of [`Engine::begin`].
pub enum Begin {
    /// Everything was in memory (or there was nothing to read).
    Ready(ReadOutcome),
    /// A read was queued.
    Pending(Pending),
}

impl Begin {
    /// The outcome, awaiting the read if one was queued.
    pub async fn wait(self) -> io::Result<ReadOutcome> {
        match self {
            Begin::Ready(o) => Ok(o),
            Begin::Pending(p) => p.wait().await,
        }
    }

    /// [`Begin::wait`], blocking the calling thread.
    pub fn wait_blocking(self) -> io::Result<ReadOutcome> {
        match self {
            Begin::Ready(o) => Ok(o),
            Begin::Pending(p) => p.wait_blocking(),
        }
    }
}

fn worker_gone() -> io::Error {
    io::Error::other("prefetch engine shut down before the read finished")
}

#[derive(Clone)]
struct ReadDone {
    bytes: u64,
    queued_s: f64,
    read_s: f64,
    started_s: f64,
    finished_s: f64,
    /// `direct` mode: the pool's chunks covering the read, in order.
    chunks: Vec<Arc<Chunk>>,
}

/// Who reads a miss: the engine's workers, or the caller on the engine's word
/// ([`Engine::plan`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reader {
    Engine,
    Caller,
}

/// [`Begin`] with the pool's slices of a `direct` hit.
enum Started {
    Ready(ReadOutcome, Vec<Slice>),
    Pending(Pending),
}

struct Job {
    file: Arc<File>,
    file_id: FileId,
    file_size: u64,
    /// `st_dev` of the file (the `direct` pool's alignment).
    dev: u64,
    offset: u64,
    requested_end: u64,
    read_len: u64,
    device: Arc<str>,
    enqueued_s: f64,
    id: u64,
    stream: Option<StreamId>,
    /// Read whole folios of this size as large folios.
    folio: Option<u64>,
    /// Inode of the file (its place on the device when the extent map is unknown).
    ino: u64,
    /// When the first client waiting for it runs dry ([`SharedDeadline`]).
    deadline: SharedDeadline,
}

/// A queued read's deadline (engine-clock seconds), lowered by misses that join the read.
/// Stored as the bits of a non-negative `f64`, whose order the bits keep.
#[derive(Clone, Default)]
struct SharedDeadline(Arc<AtomicU64>);

impl SharedDeadline {
    fn new(s: f64) -> SharedDeadline {
        SharedDeadline(Arc::new(AtomicU64::new(s.max(0.0).to_bits())))
    }

    fn lower_to(&self, s: f64) {
        self.0.fetch_min(s.max(0.0).to_bits(), Ordering::Relaxed);
    }

    fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
}

/// A queued or running read that later misses inside its range can wait for.
struct Inflight {
    id: u64,
    start: u64,
    end: u64,
    waiters: Vec<oneshot::Sender<io::Result<ReadDone>>>,
    /// Requests that joined the read: `[start, end)` ranges to mark as used.
    joined: Vec<(u64, u64)>,
    deadline: SharedDeadline,
}

#[derive(Default)]
struct DeviceState {
    reads: u64,
    read_bytes: u64,
    disk_bytes: u64,
    inflight: u64,
    queued: u64,
    busy_since: f64,
    busy_s: f64,
    busy_at_observe: f64,
    recent_busy: f64,
    /// Queue waits (s) of the reads started since the last observation (at most
    /// [`MAX_WAITS`]), and their 90th percentile over the last interval.
    waits: Vec<f64>,
    recent_wait_s: f64,
    /// Reads that failed in a row (0 after a read that worked).
    failed_in_a_row: u32,
    /// Reads that finished after their deadline.
    late_reads: u64,
    /// Queue waits of all reads started, summed, s.
    wait_s: f64,
    /// What a read of this device costs, from the reads it served.
    service: crate::service::ServiceFit,
}

/// Queue waits kept per device and observation interval.
const MAX_WAITS: usize = 4096;

impl DeviceState {
    fn busy_until(&self, now: f64) -> f64 {
        if self.inflight > 0 {
            self.busy_s + (now - self.busy_since)
        } else {
            self.busy_s
        }
    }
}

#[derive(Default)]
struct Counters {
    requests: u64,
    hits: u64,
    misses: u64,
    requested_bytes: u64,
    memory_bytes: u64,
    missed_bytes: u64,
    reads: u64,
    read_bytes: u64,
    read_errors: u64,
    disk_bytes: u64,
    joined: u64,
}

struct State {
    policy: Box<dyn Policy>,
    ledger: Ledger,
    counters: Counters,
    devices: BTreeMap<Arc<str>, DeviceState>,
    device_names: HashMap<u64, Arc<str>>,
    inflight: crate::Map<FileId, Vec<Inflight>>,
    next_job: u64,
    /// Files with prefetched ranges in the ledger, for sweeps: (file, size).
    swept_files: HashMap<FileId, (Weak<File>, u64)>,
    pending: Observation,
    last_observe_s: f64,
    memory: Option<MemoryManager>,
    /// Files the memory manager may still drop pages of: (file, size).
    memory_files: HashMap<FileId, (Arc<File>, u64)>,
    /// Drops decided and not yet carried out.
    drops: Vec<memory::Drop>,
    /// When each stream's client runs dry (ordered queues only).
    deadlines: Deadlines,
}

/// Files whose advised descriptor [`Shared::advise_random`] remembers (then it starts over).
const ADVISED_FILES: usize = 4096;

struct Shared {
    mode: IoMode,
    /// How device workers order their queues (`Fifo` for the shared pool).
    order: IoOrder,
    max_wait_s: f64,
    probe: Probe,
    max_read_bytes: u64,
    /// [`EngineConfig::reread_resident_runs`].
    reread_resident_runs: bool,
    observe_every_s: f64,
    kernel_readahead: bool,
    /// The folio size the page-cache reads build ([`EngineConfig::large_folios`]), when
    /// they may (for popular files: [`crate::folio::POPULAR_STREAMS`]).
    folio: Option<u64>,
    sweep_limit: usize,
    device_map: DeviceMap,
    /// The clock policies see ([`Engine::now_s`]).
    clock: crate::clock::Clock,
    state: Mutex<State>,
    /// `direct` mode's buffer pool.
    pool: Option<BufferPool>,
    /// The descriptor last given `POSIX_FADV_RANDOM`, per file: a descriptor the caller
    /// keeps open and passes again (an open-file cache) is advised once, not per request.
    /// The `Weak` keeps the `Arc`'s allocation, so another descriptor cannot take its
    /// address while it is remembered.
    advised: Mutex<crate::Map<FileId, std::sync::Weak<File>>>,
    /// Drops whose pages stayed resident (a `sendfile` still held them in a socket buffer),
    /// retried by the sweeper: (drop, file, size, attempts so far).
    retries: Mutex<Vec<RetryDrop>>,
    /// What the drops achieved: see [`DropStats`].
    drop_stats: DropCounters,
    /// The dropper thread's queue (page-cache mode with a memory manager): drops are
    /// carried out there, never on a device worker (ASAP's one reader would stand idle
    /// through every `POSIX_FADV_DONTNEED`) nor on a caller's event loop.
    dropper: Option<crossbeam_channel::Sender<DropBatch>>,
}

/// Work for the dropper thread: drops to carry out, or a request to say when everything
/// queued before it is done.
enum DropBatch {
    Drops(Vec<PendingDrop>),
    Settle(crossbeam_channel::Sender<()>),
}

/// Atomic counters behind [`DropStats`].
#[derive(Default)]
struct DropCounters {
    issued: AtomicU64,
    unheld: AtomicU64,
    stuck: AtomicU64,
    gave_up: AtomicU64,
    claimed: AtomicU64,
}

impl Shared {
    fn now(&self) -> f64 {
        self.clock.now()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Turn the kernel's readahead off on `file` (`POSIX_FADV_RANDOM`) when the policy
    /// alone decides what is read — once per descriptor: the advice stays on it.
    fn advise_random(&self, fid: FileId, file: &Arc<File>) {
        if self.kernel_readahead || !self.mode.prefetches() {
            return;
        }
        {
            let mut seen = self.advised.lock().unwrap_or_else(|p| p.into_inner());
            if seen
                .get(&fid)
                .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(file)))
            {
                return;
            }
            if seen.len() >= ADVISED_FILES {
                seen.clear();
            }
            seen.insert(fid, Arc::downgrade(file));
        }
        // SAFETY: advisory call on a descriptor the Arc keeps open.
        unsafe {
            libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM);
        }
    }

    /// Carries out the memory manager's drops: `POSIX_FADV_DONTNEED` on whole pages (on
    /// the dropper thread when there is one), or in `direct` mode the release of the
    /// pool's chunks covering them.
    fn carry_out(&self, drops: Vec<PendingDrop>) {
        if drops.is_empty() {
            return;
        }
        if let (None, Some(tx)) = (&self.pool, &self.dropper) {
            match tx.send(DropBatch::Drops(drops)) {
                Ok(()) => return,
                // The thread is gone (shutdown): drop here.
                Err(crossbeam_channel::SendError(DropBatch::Drops(d))) => {
                    return self.carry_out_now(d)
                }
                Err(_) => return,
            }
        }
        self.carry_out_now(drops);
    }

    /// The drops of `drops` no stream wants again by now: between the manager's decision
    /// and the dropper thread's turn, a viewer may have started reading the range (it
    /// would lose the pages it is about to be sent). Those count as claimed.
    fn unclaimed(&self, drops: Vec<PendingDrop>) -> Vec<PendingDrop> {
        let st = self.lock();
        let Some(m) = &st.memory else {
            return drops;
        };
        let (wanted, free): (Vec<_>, Vec<_>) = drops
            .into_iter()
            .partition(|(d, _)| m.claims(d.file, d.start, d.end));
        let claimed: u64 = wanted.iter().map(|(d, _)| d.end - d.start).sum();
        self.drop_stats
            .claimed
            .fetch_add(claimed, Ordering::Relaxed);
        free.into_iter()
            .map(|(d, held)| match &held {
                Some((_, size)) => (self.widened(m, d, *size), held),
                None => (d, held),
            })
            .collect()
    }

    /// `d` widened to whole large folios when large folios are read for its file
    /// ([`MemoryManager::widened`]); otherwise `d`.
    fn widened(&self, m: &MemoryManager, d: memory::Drop, file_size: u64) -> memory::Drop {
        match self.folio {
            Some(unit) if popular(m, d.file) => m.widened(d, unit, file_size),
            _ => d,
        }
    }

    fn carry_out_now(&self, drops: Vec<PendingDrop>) {
        match &self.pool {
            Some(pool) => {
                for (d, _) in drops {
                    pool.release(d.file, d.start, d.end);
                }
            }
            None => {
                let c = &self.drop_stats;
                let stuck = carry_out(drops.into_iter().filter_map(|(d, held)| {
                    let bytes = d.end.saturating_sub(d.start);
                    c.issued.fetch_add(bytes, Ordering::Relaxed);
                    if held.is_none() {
                        c.unheld.fetch_add(bytes, Ordering::Relaxed);
                    }
                    held.map(|(f, size)| (d, f, size, 0, 0))
                }));
                let left: u64 = stuck.iter().map(|x| x.4).sum();
                c.stuck.fetch_add(left, Ordering::Relaxed);
                self.queue_retries(stuck, false);
            }
        }
    }

    /// Queues drops that stayed resident and tells the manager what the queue holds;
    /// `always`: also when nothing new came (the sweeper's retries may have emptied it).
    fn queue_retries(&self, stuck: Vec<RetryDrop>, always: bool) {
        if stuck.is_empty() && !always {
            return;
        }
        let held = {
            let mut r = self.retries.lock().unwrap_or_else(|p| p.into_inner());
            r.extend(stuck);
            // Bounded: the oldest give up (their pages age out through the kernel).
            let excess = r.len().saturating_sub(MAX_RETRIES);
            r.drain(..excess);
            r.iter().map(|x| x.4).sum::<u64>()
        };
        // What socket buffers still hold of released pages takes memory the manager must
        // not hand out again.
        if let Some(m) = &mut self.lock().memory {
            m.set_unreleased(held);
        }
    }

    /// Drops again what stayed resident, up to [`DROP_ATTEMPTS`] times each.
    fn retry_drops(&self) {
        let due = std::mem::take(&mut *self.retries.lock().unwrap_or_else(|p| p.into_inner()));
        if due.is_empty() {
            if let Some(m) = &mut self.lock().memory {
                m.set_unreleased(0);
            }
            return;
        }
        let due: Vec<_> = {
            let st = self.lock();
            let (due, out): (Vec<_>, Vec<_>) = due.into_iter().partition(|x| x.3 < DROP_ATTEMPTS);
            let gave_up: u64 = out.iter().map(|(d, ..)| d.end - d.start).sum();
            self.drop_stats
                .gave_up
                .fetch_add(gave_up, Ordering::Relaxed);
            let (claimed, due): (Vec<_>, Vec<_>) = due.into_iter().partition(|(d, ..)| {
                st.memory
                    .as_ref()
                    .is_some_and(|m| m.claims(d.file, d.start, d.end))
            });
            let claimed: u64 = claimed.iter().map(|(d, ..)| d.end - d.start).sum();
            self.drop_stats
                .claimed
                .fetch_add(claimed, Ordering::Relaxed);
            match &st.memory {
                Some(m) => due
                    .into_iter()
                    .map(|(d, f, size, n, left)| (self.widened(m, d, size), f, size, n, left))
                    .collect(),
                None => due,
            }
        };
        let stuck = carry_out(due.into_iter());
        self.queue_retries(stuck, true);
    }
}

/// Whether large folios are read for `file` ([`crate::folio::POPULAR_STREAMS`]), and so
/// whether its drops widen to whole folios (widening elsewhere would drop bytes the
/// manager no longer tracks but a later viewer may find resident).
fn popular(m: &MemoryManager, file: FileId) -> bool {
    m.streams_on(file) >= crate::folio::POPULAR_STREAMS
}

/// The dropper thread: carries out drop batches until the engine is gone.
fn spawn_dropper(shared: std::sync::Weak<Shared>, rx: crossbeam_channel::Receiver<DropBatch>) {
    let spawned = std::thread::Builder::new()
        .name("vodkit-prefetch-drop".into())
        .spawn(move || {
            while let Ok(batch) = rx.recv() {
                match batch {
                    DropBatch::Drops(d) => match shared.upgrade() {
                        Some(s) => {
                            let d = s.unclaimed(d);
                            s.carry_out_now(d)
                        }
                        None => return,
                    },
                    DropBatch::Settle(ack) => {
                        let _ = ack.send(());
                    }
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("no dropper thread ({e}): drops are carried out inline");
    }
}

/// A drop and, when still held, its file and size.
type PendingDrop = (memory::Drop, Option<(Arc<File>, u64)>);

/// A drop being carried out: the range, its file and size, the attempts so far, and the
/// bytes of it still resident after the last attempt.
type RetryDrop = (memory::Drop, Arc<File>, u64, u8, u64);

impl State {
    /// Feeds the accumulated deltas to the policy about once per `every` seconds.
    fn maybe_observe(&mut self, now: f64, every: f64) {
        let dt = now - self.last_observe_s;
        if dt < every || dt <= 0.0 {
            return;
        }
        let mut busy_total = 0.0;
        for d in self.devices.values_mut() {
            let busy = d.busy_until(now);
            let delta = busy - d.busy_at_observe;
            d.recent_busy = (delta / dt).clamp(0.0, 1.0);
            d.busy_at_observe = busy;
            d.recent_wait_s = if d.waits.is_empty() {
                // No read started: none waited, or the one running holds up the rest
                // for the whole interval (and longer, if it did before).
                if d.queued > d.inflight {
                    d.recent_wait_s + dt
                } else {
                    0.0
                }
            } else {
                d.waits.sort_unstable_by(f64::total_cmp);
                let i = (d.waits.len() * 9 / 10).min(d.waits.len() - 1);
                d.waits[i]
            };
            d.waits.clear();
            busy_total += delta;
        }
        let n = self.devices.len().max(1) as f64;
        let mut obs = std::mem::take(&mut self.pending);
        obs.now_s = now;
        obs.disk_time_s = busy_total;
        obs.busy_s = busy_total / n;
        obs.budget_per_sqrt_kbps = self
            .memory
            .as_ref()
            .and_then(MemoryManager::pool_per_weight);
        self.policy.observe(&obs);
        self.ledger.expire(now);
        self.last_observe_s = now;
        if let Some(m) = &mut self.memory {
            let drops = m.expire(now);
            self.drops.extend(drops);
        }
    }

    /// Takes the pending drops with their files (if still held); forgets files the manager
    /// is done with.
    fn take_drops(&mut self) -> Vec<PendingDrop> {
        let drops = std::mem::take(&mut self.drops);
        let out = drops
            .into_iter()
            .map(|d| {
                let file = self.memory_files.get(&d.file).cloned();
                (d, file)
            })
            .collect();
        if let Some(m) = &self.memory {
            if self.memory_files.len() > 64 {
                self.memory_files.retain(|f, _| m.tracks(*f));
            }
            if self.memory_files.len() > MAX_HELD_FILES {
                // Too many descriptors held for the consumed-cache: keep the files of
                // active streams; the others' cached pages age out through the kernel.
                self.memory_files.retain(|f, _| m.has_streams(*f));
            }
        }
        out
    }
}

/// The prefetch engine. Cheap to share behind an `Arc`; dropping it stops the workers
/// after they finish the reads already queued.
pub struct Engine {
    shared: Arc<Shared>,
    pool: Mutex<Option<Sender<Job>>>,
    stop_sweeper: Mutex<Option<Sender<()>>>,
    queues: Mutex<HashMap<Arc<str>, Sender<Job>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("mode", &self.shared.mode)
            .finish()
    }
}

/// Folds device and inode into one file identity.
pub fn file_id(dev: u64, ino: u64) -> FileId {
    dev.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ ino
}

impl Engine {
    pub fn new(cfg: EngineConfig) -> Engine {
        let memory = match (cfg.mode, cfg.memory.clone()) {
            // The pool needs the manager's decisions; a `write` copies the bytes, so a
            // chunk may go as soon as it is sent (no drop lag).
            (IoMode::Direct, m) => Some(MemoryConfig {
                drop_lag_bytes: 0,
                ..m.unwrap_or_else(|| {
                    let (b, source) = crate::budget::detect(None);
                    tracing::info!(
                        "--io direct runs the memory manager: budget {} ({})",
                        bytesize::ByteSize(b),
                        source.name()
                    );
                    MemoryConfig::for_budget(b)
                })
            }),
            (_, m) => m,
        };
        let pool = memory
            .as_ref()
            .filter(|_| cfg.mode == IoMode::Direct)
            .map(|m| {
                BufferPool::new(PoolConfig {
                    o_direct: cfg.o_direct,
                    max_read_bytes: cfg.max_read_bytes.max(4096),
                    ..PoolConfig::new(m.usable_bytes())
                })
            });
        let (dropper_tx, dropper_rx) = if memory.is_some() && pool.is_none() {
            let (tx, rx) = crossbeam_channel::unbounded();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let shared = Arc::new(Shared {
            mode: cfg.mode,
            order: if cfg.mode.serializes() {
                cfg.order
            } else {
                IoOrder::Fifo
            },
            max_wait_s: cfg.max_wait_s,
            probe: cfg.probe,
            max_read_bytes: cfg.max_read_bytes.max(4096),
            reread_resident_runs: cfg.reread_resident_runs,
            observe_every_s: cfg.observe_every_s,
            kernel_readahead: cfg.kernel_readahead,
            folio: (cfg.large_folios
                && cfg.mode.prefetches()
                && cfg.mode != IoMode::Direct
                && !cfg.kernel_readahead)
                .then(crate::folio::huge_folio_bytes)
                .flatten(),
            sweep_limit: cfg.sweep_limit,
            device_map: cfg.devices.clone(),
            clock: crate::clock::Clock::new(),
            state: Mutex::new(State {
                policy: cfg.policy.build(),
                ledger: Ledger::new(cfg.ledger.clone()),
                counters: Counters::default(),
                devices: BTreeMap::new(),
                device_names: HashMap::new(),
                inflight: crate::Map::default(),
                next_job: 0,
                swept_files: HashMap::new(),
                pending: Observation::default(),
                last_observe_s: 0.0,
                memory: memory.map(MemoryManager::new),
                memory_files: HashMap::new(),
                drops: Vec::new(),
                deadlines: Deadlines::default(),
            }),
            pool,
            advised: Mutex::new(crate::Map::default()),
            retries: Mutex::new(Vec::new()),
            drop_stats: DropCounters::default(),
            dropper: dropper_tx,
        });
        if let Some(rx) = dropper_rx {
            spawn_dropper(Arc::downgrade(&shared), rx);
        }
        let engine = Engine {
            shared,
            pool: Mutex::new(None),
            stop_sweeper: Mutex::new(None),
            queues: Mutex::new(HashMap::new()),
            threads: Mutex::new(Vec::new()),
        };
        if !cfg.mode.serializes() {
            let (tx, rx) = crossbeam_channel::unbounded();
            for i in 0..cfg.pool_threads.max(1) {
                engine.spawn(format!("vodkit-pool-{i}"), rx.clone());
            }
            *engine.pool.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
        }
        if cfg.sweep_every_s > 0.0 {
            engine.spawn_sweeper(std::time::Duration::from_secs_f64(cfg.sweep_every_s));
        }
        engine
    }

    pub fn mode(&self) -> IoMode {
        self.shared.mode
    }

    /// The order device workers serve their queues in.
    pub fn order(&self) -> IoOrder {
        self.shared.order
    }

    /// Seconds since the engine started (the clock policies see).
    pub fn now_s(&self) -> f64 {
        self.shared.now()
    }

    /// Run the engine's clock `rate` times faster than real time from now on (1: real time);
    /// a bench's fast-forward plays a workload's history this much faster.
    pub fn set_clock_rate(&self, rate: f64) -> Result<(), String> {
        self.shared.clock.set_rate(rate)
    }

    /// The engine clock's rate (1: real time).
    pub fn clock_rate(&self) -> f64 {
        self.shared.clock.rate()
    }

    /// Tells the memory manager how many bytes of its budget the rest of the process holds
    /// in its own memory (the live origin's window), so it hands out only the rest; no-op
    /// without a manager.
    pub fn set_other_memory(&self, bytes: u64) {
        if let Some(m) = &mut self.shared.lock().memory {
            m.set_other(bytes);
        }
    }

    fn spawn(&self, name: String, rx: Receiver<Job>) {
        let shared = self.shared.clone();
        let ordered = self.shared.mode.serializes() && self.shared.order != IoOrder::Fifo;
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                if ordered {
                    ordered_worker(shared, rx)
                } else {
                    worker(shared, rx)
                }
            })
            .expect("spawning an I/O worker thread");
        self.threads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(handle);
    }

    fn spawn_sweeper(&self, every: std::time::Duration) {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let shared = self.shared.clone();
        let handle = std::thread::Builder::new()
            .name("vodkit-prefetch-sweep".into())
            .spawn(move || {
                while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(every)
                {
                    sweep(&shared);
                    let drops = {
                        let now = shared.now();
                        let mut st = shared.lock();
                        st.maybe_observe(now, shared.observe_every_s);
                        st.take_drops()
                    };
                    shared.carry_out(drops);
                    shared.retry_drops();
                }
            })
            .expect("spawning the sweeper thread");
        self.threads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(handle);
        *self.stop_sweeper.lock().unwrap_or_else(|p| p.into_inner()) = Some(stop);
    }

    /// The connection behind memory-manager stream key `client` closed (see
    /// [`MemoryManager::closed`]).
    pub fn closed(&self, client: u64) {
        if let Some(m) = self.shared.lock().memory.as_mut() {
            m.closed(client);
        }
    }

    /// Checks pending prefetched ranges for eviction now; returns how many were found
    /// (partly) evicted. The background sweeper calls this every `sweep_every_s`.
    pub fn sweep_now(&self) -> usize {
        sweep(&self.shared)
    }

    fn queue_for(&self, device: &Arc<str>) -> Option<Sender<Job>> {
        if !self.shared.mode.serializes() {
            return self.pool.lock().unwrap_or_else(|p| p.into_inner()).clone();
        }
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = queues.get(device) {
            return Some(tx.clone());
        }
        let (tx, rx) = crossbeam_channel::unbounded();
        self.spawn(format!("vodkit-io-{device}"), rx);
        queues.insert(device.clone(), tx.clone());
        Some(tx)
    }

    /// Checks the request and queues a read if anything is missing.
    pub fn begin(&self, file: &Arc<File>, req: &ReadRequest) -> io::Result<Begin> {
        self.begin_with(file, req, None)
    }

    /// The caller sent everything of `stream` below `end` ([`ReadOutcome::stream`]): the
    /// memory manager may drop it (or keep it for a following stream). A no-op without a
    /// memory manager.
    pub fn consumed(&self, stream: Option<StreamId>, end: u64) {
        let Some(stream) = stream else { return };
        let now = self.shared.now();
        let drops = {
            let mut st = self.shared.lock();
            let Some(m) = &mut st.memory else { return };
            let d = m.consumed(stream, end, now);
            st.drops.extend(d);
            st.take_drops()
        };
        self.shared.carry_out(drops);
    }

    /// The memory manager's figures (`None` without one).
    pub fn memory(&self) -> Option<memory::MemoryTotals> {
        self.shared
            .lock()
            .memory
            .as_ref()
            .map(MemoryManager::totals)
    }

    /// Accounts a read its caller already served from memory (a preload library's note of
    /// a resident read): counted exactly like a hit of [`Engine::begin`], so the ledger
    /// and the policy see the whole access stream, but without a residency check.
    pub fn note_resident(&self, file: &Arc<File>, req: &ReadRequest) -> io::Result<ReadOutcome> {
        // Nothing is missing, so nothing is read: the outcome is ready.
        self.begin_with(file, req, Some(0))?.wait_blocking()
    }

    /// Sizes a miss its caller found and reads itself (the preload library in the daemon's
    /// `prefetch` mode): the request is accounted as a miss of [`Engine::begin`] (the
    /// caller's residency check is trusted), the engine's policy sizes it (capped by the memory manager), and
    /// the planned read is recorded as if the engine had made it, so the ledger, the memory
    /// manager and the policy's observations see the same stream as in the other modes
    /// (only disk time is missing: the caller's read is not timed). Returns the outcome
    /// with `read_bytes` = bytes to read from `req.offset` (0 for an empty request).
    pub fn plan(&self, file: &Arc<File>, req: &ReadRequest) -> io::Result<ReadOutcome> {
        if self.shared.pool.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "plan: a caller cannot read into the `direct` buffer pool",
            ));
        }
        match self.start(file, req, Some(req.len), Reader::Caller)? {
            Started::Ready(o, _) => Ok(o),
            // The miss lies inside a read the engine already runs: once it is done the
            // caller's read finds the bytes in memory.
            Started::Pending(p) => p.wait_blocking(),
        }
    }

    /// [`Engine::begin`] with the missing byte count known (`Some`) or to be checked.
    fn begin_with(
        &self,
        file: &Arc<File>,
        req: &ReadRequest,
        known_missing: Option<u64>,
    ) -> io::Result<Begin> {
        Ok(
            match self.start(file, req, known_missing, Reader::Engine)? {
                Started::Ready(o, _) => Begin::Ready(o),
                Started::Pending(p) => Begin::Pending(p),
            },
        )
    }

    fn require_direct(&self) -> io::Result<()> {
        if self.shared.pool.is_none() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "fetch_direct needs the `direct` I/O mode (this engine runs `{}`)",
                    self.shared.mode
                ),
            ));
        }
        Ok(())
    }

    /// `direct` mode: brings `[offset, offset + len)` into the buffer pool (reading it with
    /// `O_DIRECT` on the device's worker if needed) and returns the slices holding it.
    pub async fn fetch_direct(
        &self,
        file: &Arc<File>,
        req: ReadRequest,
    ) -> io::Result<DirectOutcome> {
        match self.begin_direct(file, &req)? {
            Ok(done) => Ok(done),
            Err(p) => p.wait_direct().await,
        }
    }

    /// [`Engine::fetch_direct`], blocking the calling thread.
    pub fn fetch_direct_blocking(
        &self,
        file: &Arc<File>,
        req: ReadRequest,
    ) -> io::Result<DirectOutcome> {
        self.begin_direct(file, &req)?
            .or_else(Pending::wait_direct_blocking)
    }

    /// The start of a `direct` fetch: the slices now, or the read to wait for.
    fn begin_direct(
        &self,
        file: &Arc<File>,
        req: &ReadRequest,
    ) -> io::Result<Result<DirectOutcome, Pending>> {
        self.require_direct()?;
        Ok(match self.start(file, req, None, Reader::Engine)? {
            Started::Ready(outcome, slices) => Ok(DirectOutcome { outcome, slices }),
            Started::Pending(p) => Err(p),
        })
    }

    /// The `direct` buffer pool's figures (`None` in the other modes).
    pub fn direct(&self) -> Option<direct::DirectStats> {
        self.shared.pool.as_ref().map(BufferPool::stats)
    }

    /// Checks the request (page cache, or the pool in `direct` mode) and queues a read if
    /// anything is missing.
    fn start(
        &self,
        file: &Arc<File>,
        req: &ReadRequest,
        known_missing: Option<u64>,
        reader: Reader,
    ) -> io::Result<Started> {
        let facts = match req.file {
            Some(f) => f,
            None => FileFacts::of(file)?,
        };
        let (fid, size) = (facts.id(), facts.size);
        let len = req.len.min(size.saturating_sub(req.offset));
        if len == 0 {
            return Ok(Started::Ready(ReadOutcome::default(), Vec::new()));
        }
        // The caller's descriptor too, not only the reads': a `sendfile` that meets pages
        // gone since their read would otherwise start the kernel's readahead
        // (`read_ahead_kb`, 8 MiB on a 6.17+ kernel's rotational disk) — bytes no budget
        // accounts for, which push prefetched pages out of a memory cgroup.
        self.shared.advise_random(fid, file);
        let pool = self.shared.pool.as_ref();
        let mut hit_slices = Vec::new();
        let checked = match (known_missing, pool) {
            (Some(m), _) => Ok(m),
            (None, Some(pool)) => {
                let found = pool.lookup(fid, req.offset, req.offset + len);
                hit_slices = found.slices.unwrap_or_default();
                Ok(len - found.covered.min(len))
            }
            (None, None) => {
                residency::check(file, req.offset, len, size, self.shared.probe).map(|r| r.missing)
            }
        };
        let missing = match checked {
            Ok(m) => m.min(len),
            Err(e) => {
                tracing::debug!("residency check failed, treating as a miss: {e}");
                len
            }
        };
        let now = self.shared.now();
        let mut st = self.shared.lock();
        let stream = st.memory.as_mut().map(|m| {
            let kbps = req
                .bitrate_kbps
                .unwrap_or(crate::policy::DEFAULT_BITRATE_KBPS);
            let (id, drops) = m.request(
                fid,
                req.client,
                req.offset,
                req.offset + len,
                size,
                kbps,
                now,
            );
            (id, drops)
        });
        let stream = stream.map(|(id, drops)| {
            st.drops.extend(drops);
            if pool.is_none() {
                st.memory_files
                    .entry(fid)
                    .or_insert_with(|| (file.clone(), size));
            }
            id
        });
        // When this request's client runs dry (every request tells how far it was sent),
        // for ordered queues and the late-read count of every device queue.
        let deadline_s = if !self.shared.mode.serializes() {
            f64::INFINITY
        } else {
            let kbps = req
                .bitrate_kbps
                .unwrap_or(crate::policy::DEFAULT_BITRATE_KBPS);
            st.deadlines.request(
                req.client,
                fid,
                req.offset,
                req.offset + len,
                f64::from(kbps) * 125.0,
                now,
            )
        };
        let c = &mut st.counters;
        c.requests += 1;
        c.requested_bytes += len;
        c.memory_bytes += len - missing;
        c.missed_bytes += missing;
        st.pending.requested_bytes += len;
        let effect = st
            .ledger
            .record_request(fid, req.offset, req.offset + len, now, |a, b| {
                // Only the prefetched parts of the request count as evicted, so ask about
                // exactly those bytes (a request may also run past its prefetch).
                if missing == 0 {
                    return 0;
                }
                match pool {
                    Some(pool) => pool.missing(fid, a, b),
                    None => residency::check(file, a, b - a, size, self.shared.probe)
                        .map(|r| r.missing)
                        .unwrap_or(0),
                }
            });
        st.pending.evicted_bytes += effect.evicted_bytes;
        st.pending.evictions += effect.evictions;
        st.pending.eviction_time_s += effect.eviction_time_s;
        let mut outcome = ReadOutcome {
            requested: len,
            from_memory: len - missing,
            from_disk: missing,
            stream,
            ..Default::default()
        };
        if missing == 0 {
            st.counters.hits += 1;
            st.maybe_observe(now, self.shared.observe_every_s);
            let drops = st.take_drops();
            drop(st);
            self.shared.carry_out(drops);
            return Ok(Started::Ready(outcome, hit_slices));
        }
        st.counters.misses += 1;
        let end = req.offset + len;
        if let Some(read) = st.inflight.get_mut(&fid).and_then(|reads| {
            reads
                .iter_mut()
                .find(|r| r.start <= req.offset && end <= r.end)
        }) {
            // A read already queued or running covers this miss: wait for it.
            let (reply, rx) = oneshot::channel();
            read.waiters.push(reply);
            read.joined.push((req.offset, end));
            read.deadline.lower_to(deadline_s);
            st.counters.joined += 1;
            outcome.joined = true;
            st.maybe_observe(now, self.shared.observe_every_s);
            let drops = st.take_drops();
            drop(st);
            self.shared.carry_out(drops);
            return Ok(Started::Pending(Pending {
                rx,
                outcome,
                range: (req.offset, end),
            }));
        }
        let chain = req.chain.unwrap_or(ChainPosition {
            bytes: 0,
            kind: Default::default(),
        });
        let ctx = ReadContext {
            file: fid,
            offset: req.offset,
            len,
            file_size: size,
            bitrate_kbps: req.bitrate_kbps,
            chain_bytes: chain.bytes,
            chain_kind: chain.kind,
            now_s: now,
        };
        let mut prefetch = if self.shared.mode.prefetches() {
            st.policy.prefetch_bytes(&ctx)
        } else {
            0
        };
        let folio = self
            .shared
            .folio
            .filter(|_| st.memory.as_ref().is_none_or(|m| popular(m, fid)));
        if let Some(folio) = folio {
            // A prefetch spanning a folio ends on a folio boundary, so the chain's next
            // read starts on one and reads whole large folios.
            let read_end = req.offset + ctx.read_len(prefetch);
            if read_end > end {
                prefetch =
                    crate::folio::aligned_end(req.offset, end, read_end, size, folio) - req.offset;
            }
        }
        if stream.is_some() && st.memory.is_some() {
            // Budget-driven sizing: never more than this stream's share of the budget, and
            // not past where its viewer is likely to have left, at the price of a
            // positioning the file's device has shown.
            let device = self.device_name(&mut st, facts.dev);
            let positioning = st
                .devices
                .get(&device)
                .map_or(0, |d| d.service.positioning_bytes());
            if let (Some(m), Some(id)) = (&mut st.memory, stream) {
                m.set_positioning_bytes(positioning);
                prefetch = m.capped_prefetch(id, prefetch, len);
            }
        }
        let read_len = clip_at_queued(&st, fid, req.offset, end, ctx.read_len(prefetch));
        if reader == Reader::Caller {
            // The caller reads now, on the engine's word: account the read as the engine's
            // own (the ledger dates its prefetch, the memory manager counts it), untimed.
            st.ledger
                .record_read(fid, req.offset, end, req.offset + read_len, now);
            if st.ledger.tracks(fid) {
                st.swept_files
                    .entry(fid)
                    .or_insert_with(|| (Arc::downgrade(file), size));
            }
            if let (Some(m), Some(id)) = (&mut st.memory, stream) {
                let drops = m.read(id, req.offset, req.offset + read_len);
                st.drops.extend(drops);
            }
            st.maybe_observe(now, self.shared.observe_every_s);
            let drops = st.take_drops();
            drop(st);
            self.shared.carry_out(drops);
            outcome.read_bytes = read_len;
            return Ok(Started::Ready(outcome, Vec::new()));
        }
        let device = self.device_name(&mut st, facts.dev);
        let dev = st.devices.entry(device.clone()).or_default();
        dev.queued += 1;
        let id = st.next_job;
        st.next_job += 1;
        let (reply, rx) = oneshot::channel();
        let deadline = SharedDeadline::new(deadline_s);
        st.inflight.entry(fid).or_default().push(Inflight {
            id,
            start: req.offset,
            end: req.offset + read_len,
            waiters: vec![reply],
            joined: Vec::new(),
            deadline: deadline.clone(),
        });
        st.maybe_observe(now, self.shared.observe_every_s);
        let drops = st.take_drops();
        drop(st);
        self.shared.carry_out(drops);
        outcome.device = Some(device.clone());
        let job = Job {
            file: file.clone(),
            file_id: fid,
            file_size: size,
            dev: facts.dev,
            offset: req.offset,
            requested_end: req.offset + len,
            read_len,
            device: device.clone(),
            enqueued_s: now,
            id,
            stream,
            folio,
            ino: facts.ino,
            deadline,
        };
        let sent = self.queue_for(&device).map(|tx| tx.send(job).is_ok());
        if sent != Some(true) {
            let mut st = self.shared.lock();
            take_inflight(&mut st, fid, id);
            if let Some(d) = st.devices.get_mut(&device) {
                d.queued = d.queued.saturating_sub(1);
            }
            return Err(worker_gone());
        }
        Ok(Started::Pending(Pending {
            rx,
            outcome,
            range: (req.offset, end),
        }))
    }

    fn device_name(&self, st: &mut State, dev: u64) -> Arc<str> {
        st.device_names
            .entry(dev)
            .or_insert_with(|| Arc::from(self.shared.device_map.name_for(dev)))
            .clone()
    }

    /// Waits until every drop handed to the dropper thread so far has been carried out
    /// (tests that look at the page cache; shutdown).
    pub fn settle_drops(&self) {
        if let Some(tx) = &self.shared.dropper {
            let (ack, done) = crossbeam_channel::bounded(1);
            if tx.send(DropBatch::Settle(ack)).is_ok() {
                let _ = done.recv_timeout(std::time::Duration::from_secs(30));
            }
        }
    }

    /// The name of the block device `file` lies on, as the engine's statistics name it
    /// (`loop3`, `sda`, or the `--device` override).
    pub fn device_of(&self, file: &File) -> Arc<str> {
        use std::os::unix::fs::MetadataExt as _;
        let dev = file.metadata().map(|m| m.dev()).unwrap_or(0);
        let mut st = self.shared.lock();
        self.device_name(&mut st, dev)
    }

    /// What the device of `file` is doing, for admission control: how busy it has been
    /// recently (0..=1, over the policy's last observation interval), how many reads wait
    /// for it and how long they waited lately; zeros for a device the engine has not read
    /// from. `streams` is left 0: the caller knows its streams.
    pub fn device_load(&self, file: &File) -> crate::admission::DeviceLoad {
        let name = self.device_of(file);
        let st = self.shared.lock();
        st.devices
            .get(&name)
            .map_or_else(Default::default, |d| crate::admission::DeviceLoad {
                busy: d.recent_busy,
                streams: 0,
                queued: d.queued,
                wait_s: d.recent_wait_s,
            })
    }

    /// Whether `file`'s device is failing as a whole: its last [`FAILING_READS`] reads all
    /// failed (a bad sector fails one read now and then; a dead device fails them all).
    pub fn device_failing(&self, file: &File) -> bool {
        let name = self.device_of(file);
        let st = self.shared.lock();
        st.devices
            .get(&name)
            .is_some_and(|d| d.failed_in_a_row >= FAILING_READS)
    }

    /// Residency of a range without counting it or reading anything (e.g. to decide
    /// whether a `sendfile` may block).
    pub fn probe(&self, file: &File, offset: u64, len: u64) -> io::Result<residency::Residency> {
        let size = file.metadata()?.len();
        residency::check(file, offset, len, size, self.shared.probe)
    }

    /// Makes `[offset, offset + len)` resident, awaiting the read if needed.
    pub async fn ensure_resident(
        &self,
        file: &Arc<File>,
        req: ReadRequest,
    ) -> io::Result<ReadOutcome> {
        self.begin(file, &req)?.wait().await
    }

    /// Makes `[offset, offset + len)` resident, blocking the calling thread.
    pub fn ensure_resident_blocking(
        &self,
        file: &Arc<File>,
        req: ReadRequest,
    ) -> io::Result<ReadOutcome> {
        self.begin(file, &req)?.wait_blocking()
    }

    /// A snapshot of the accounting.
    pub fn stats(&self) -> Stats {
        let now = self.shared.now();
        let mut st = self.shared.lock();
        st.maybe_observe(now, self.shared.observe_every_s);
        let c = &st.counters;
        let mut s = Stats {
            uptime_s: now,
            mode: self.shared.mode.name().into(),
            requests: c.requests,
            hits: c.hits,
            misses: c.misses,
            requested_bytes: c.requested_bytes,
            memory_bytes: c.memory_bytes,
            missed_bytes: c.missed_bytes,
            reads: c.reads,
            read_bytes: c.read_bytes,
            read_errors: c.read_errors,
            joined: c.joined,
            disk_bytes: c.disk_bytes,
            prefetch: st.ledger.totals().clone(),
            policy: st.policy.current(),
            memory: st.memory.as_ref().map(MemoryManager::totals),
            direct: self.shared.pool.as_ref().map(BufferPool::stats),
            drops: DropStats {
                issued_bytes: self.shared.drop_stats.issued.load(Ordering::Relaxed),
                unheld_bytes: self.shared.drop_stats.unheld.load(Ordering::Relaxed),
                stuck_bytes: self.shared.drop_stats.stuck.load(Ordering::Relaxed),
                gave_up_bytes: self.shared.drop_stats.gave_up.load(Ordering::Relaxed),
                claimed_bytes: self.shared.drop_stats.claimed.load(Ordering::Relaxed),
            },
            ..Default::default()
        };
        for (name, d) in &st.devices {
            let busy = d.busy_until(now);
            let service = d.service.terms();
            s.disk_time_s += busy;
            s.devices.push(DeviceStats {
                device: name.to_string(),
                reads: d.reads,
                read_bytes: d.read_bytes,
                disk_bytes: d.disk_bytes,
                busy_s: busy,
                busy_fraction: if now > 0.0 { busy / now } else { 0.0 },
                recent_busy_fraction: d.recent_busy,
                queue_depth: d.queued,
                late_reads: d.late_reads,
                wait_s: d.wait_s,
                positioning_ms: service.map(|(p, _)| p * 1e3),
                transfer_mb_s: service.map(|(_, r)| r / 1e6),
            });
        }
        s.derive();
        s
    }

    /// Logs [`crate::StatsLog`] lines through `tracing` every `every` until the engine
    /// is dropped.
    pub fn spawn_logger(self: &Arc<Self>, every: std::time::Duration) {
        let weak = Arc::downgrade(self);
        let _ = std::thread::Builder::new()
            .name("vodkit-prefetch-log".into())
            .spawn(move || {
                let mut log = crate::StatsLog::new();
                loop {
                    std::thread::sleep(every);
                    let Some(engine) = weak.upgrade() else { break };
                    tracing::info!("{}", log.line(&engine.stats()));
                }
            });
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop_sweeper
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        self.pool.lock().unwrap_or_else(|p| p.into_inner()).take();
        self.queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

fn worker(shared: Arc<Shared>, rx: Receiver<Job>) {
    let mut buf: Vec<u8> = Vec::new();
    for job in rx {
        run_job(&shared, &mut buf, job);
    }
}

/// A device's worker that orders its queue ([`EngineConfig::order`]): it takes every read
/// queued so far and serves the one the order picks, estimating a read's service time
/// from the device's recent reads.
fn ordered_worker(shared: Arc<Shared>, rx: Receiver<Job>) {
    let mut buf: Vec<u8> = Vec::new();
    let mut queue: Queue<Job> = Queue::new(shared.order).with_max_wait(shared.max_wait_s);
    let mut placement = Placement::new();
    // Running mean of the seconds a read takes here.
    let mut read_s = 0.0f64;
    let mut enqueue = |queue: &mut Queue<Job>, job: Job| {
        let place = match shared.order {
            IoOrder::Sweep => placement.place(&job.file, job.file_id, job.ino, job.offset),
            _ => Place::Logical {
                ino: job.ino,
                offset: job.offset,
            },
        };
        let read = Read {
            place,
            len: job.read_len,
            deadline_s: job.deadline.get(),
            queued_s: job.enqueued_s,
        };
        queue.push(read, job);
    };
    loop {
        if queue.is_empty() {
            match rx.recv() {
                Ok(job) => enqueue(&mut queue, job),
                // The engine is gone and everything queued was served.
                Err(_) => return,
            }
        }
        while let Ok(job) = rx.try_recv() {
            enqueue(&mut queue, job);
        }
        queue.refresh_deadlines(|job, _| job.deadline.get());
        let estimate = read_s;
        let Some(pick) = queue.pick(shared.now(), |_, _| estimate) else {
            continue;
        };
        let started = shared.now();
        run_job(&shared, &mut buf, pick.item);
        let took = (shared.now() - started).max(0.0);
        read_s = if read_s > 0.0 {
            0.8 * read_s + 0.2 * took
        } else {
            took
        };
    }
}

fn run_job(shared: &Shared, buf: &mut Vec<u8>, job: Job) {
    let started = shared.now();
    // A resident run inside the read is worth reading again when its transfer costs less
    // than what skipping it costs the drive: a short seek forward and the rotation to the
    // next missing byte, about half of a positioning at an independent place.
    let reread_up_to;
    {
        let mut st = shared.lock();
        let d = st.devices.entry(job.device.clone()).or_default();
        reread_up_to = d.service.positioning_bytes() / 2;
        if d.inflight == 0 {
            d.busy_since = started;
        }
        d.inflight += 1;
        let wait = (started - job.enqueued_s).max(0.0);
        d.wait_s += wait;
        if d.waits.len() < MAX_WAITS {
            d.waits.push(wait);
        }
    }
    let result: io::Result<Served> = match &shared.pool {
        Some(pool) => {
            let end = job.offset + job.read_len;
            pool.fill(
                &job.file,
                job.file_id,
                job.dev,
                job.offset,
                end,
                job.file_size,
            )
            .map(|f| {
                let n = covered_from(&f.chunks, job.offset, end) - job.offset;
                Served {
                    n,
                    disk: f.read_bytes,
                    chunks: f.chunks,
                    split: None,
                }
            })
        }
        None => {
            // Pages of the read range not yet cached: what this read really takes from
            // disk.
            let not_cached = residency::check(
                &job.file,
                job.offset,
                job.read_len,
                job.file_size,
                shared.probe,
            )
            .map(|r| r.missing)
            .unwrap_or(job.read_len);
            shared.advise_random(job.file_id, &job.file);
            let reread = if shared.reread_resident_runs
                && job.folio.is_none()
                && reread_up_to > 0
                && not_cached > 0
                && not_cached < job.read_len
            {
                let end = (job.offset + job.read_len).min(job.file_size);
                residency::drop_runs_to_reread(&job.file, job.offset, end, reread_up_to)
                    .unwrap_or_else(|e| {
                        tracing::debug!("resident runs of {}..{end}: {e}", job.offset);
                        0
                    })
            } else {
                0
            };
            let not_cached = (not_cached + reread).min(job.read_len);
            let whole_miss = not_cached == job.read_len
                && job.folio.is_none()
                && job.read_len >= SPLIT_HEAD_BYTES + SPLIT_MIN_REST_BYTES;
            if whole_miss {
                read_split(shared, &job, buf).map(|(n, split)| Served {
                    n,
                    disk: n,
                    chunks: Vec::new(),
                    split,
                })
            } else {
                read_window(
                    &job.file,
                    job.offset,
                    job.read_len,
                    job.folio,
                    shared.max_read_bytes,
                    buf,
                )
                .map(|n| Served {
                    n,
                    disk: not_cached.min(n),
                    chunks: Vec::new(),
                    split: None,
                })
            }
        }
    };
    let finished = shared.now();
    let mut st = shared.lock();
    let d = st.devices.entry(job.device.clone()).or_default();
    d.inflight -= 1;
    d.queued = d.queued.saturating_sub(1);
    if d.inflight == 0 {
        d.busy_s += finished - d.busy_since;
    }
    if finished > job.deadline.get() {
        d.late_reads += 1;
    }
    let reply = match result {
        Ok(Served {
            n,
            disk,
            chunks,
            split,
        }) => {
            d.failed_in_a_row = 0;
            if d.inflight == 0 && shared.clock.real_time_since(started) {
                // A read alone on its device, timed at real time: its time is its service
                // time.
                match split {
                    Some(s) => d.service.add_split(s.head, s.head_s, s.rest, s.rest_s),
                    None if disk > 0 => d.service.add(disk, finished - started),
                    None => {}
                }
            }
            d.reads += 1;
            d.read_bytes += n;
            d.disk_bytes += disk;
            st.counters.reads += 1;
            st.counters.read_bytes += n;
            st.counters.disk_bytes += disk;
            st.pending.disk_bytes += disk;
            st.ledger.record_read(
                job.file_id,
                job.offset,
                job.requested_end,
                job.offset + n,
                started,
            );
            if let (Some(m), Some(id)) = (&mut st.memory, job.stream) {
                let drops = m.read(id, job.offset, job.offset + n);
                st.drops.extend(drops);
            }
            Ok(ReadDone {
                bytes: n,
                queued_s: started - job.enqueued_s,
                read_s: finished - started,
                started_s: started,
                finished_s: finished,
                chunks,
            })
        }
        Err(e) => {
            d.failed_in_a_row = d.failed_in_a_row.saturating_add(1);
            st.counters.read_errors += 1;
            Err(e)
        }
    };
    if st.ledger.tracks(job.file_id) {
        st.swept_files
            .entry(job.file_id)
            .or_insert_with(|| (Arc::downgrade(&job.file), job.file_size));
    }
    let read = take_inflight(&mut st, job.file_id, job.id);
    if let (Some(r), Ok(_)) = (&read, &reply) {
        // Misses that joined this read are served by it: their bytes count as used.
        for &(a, b) in &r.joined {
            st.ledger
                .record_request(job.file_id, a, b, finished, |_, _| 0);
        }
    }
    st.maybe_observe(finished, shared.observe_every_s);
    let drops = st.take_drops();
    drop(st);
    shared.carry_out(drops);
    // Callers may have gone away (client disconnected); that is fine.
    for waiter in read.map(|r| r.waiters).unwrap_or_default() {
        let copy = match &reply {
            Ok(d) => Ok(d.clone()),
            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
        };
        let _ = waiter.send(copy);
    }
}

/// Most files held open for the memory manager's later drops.
const MAX_HELD_FILES: usize = 4096;

/// Failed reads in a row after which a device counts as failing as a whole
/// ([`Engine::device_failing`]).
pub const FAILING_READS: u32 = 3;

/// End of the contiguous coverage of `chunks` (sorted) from `offset`, at most `end`.
fn covered_from(chunks: &[Arc<Chunk>], offset: u64, end: u64) -> u64 {
    let mut at = offset;
    for c in chunks {
        if c.start() <= at && c.end() > at {
            at = c.end();
        }
    }
    at.min(end)
}

/// Most drops waiting for a retry.
const MAX_RETRIES: usize = 65_536;
/// Times a drop is retried (once a sweep, about a second apart).
const DROP_ATTEMPTS: u8 = 30;

/// Drops pages the memory manager released (`POSIX_FADV_DONTNEED`, whole pages only);
/// returns the drops whose pages stayed resident (the kernel does not drop a page a socket
/// buffer still references), with their attempt counts raised, for a later retry.
fn carry_out(drops: impl Iterator<Item = RetryDrop>) -> Vec<RetryDrop> {
    let page = residency::page_size();
    let mut stuck = Vec::new();
    for (d, file, size, attempts, _) in drops {
        let Some((a, b)) = memory::page_aligned(d.start, d.end, size, page) else {
            continue;
        };
        // SAFETY: advisory call on a descriptor the Arc keeps open.
        let rc = unsafe {
            libc::posix_fadvise(
                file.as_raw_fd(),
                a as libc::off_t,
                (b - a) as libc::off_t,
                libc::POSIX_FADV_DONTNEED,
            )
        };
        if rc != 0 {
            tracing::debug!("dropping {a}..{b}: posix_fadvise failed ({rc})");
            continue;
        }
        let left = residency::check(&file, a, b - a, size, Probe::Auto)
            .map(|r| r.resident())
            .unwrap_or(0);
        if left > 0 {
            stuck.push((d, file, size, attempts + 1, left));
        }
    }
    stuck
}

/// One sweep: checks pending prefetched ranges and dates the evicted ones.
fn sweep(shared: &Shared) -> usize {
    let checks: Vec<_> = {
        let mut st = shared.lock();
        let State {
            ledger,
            swept_files,
            ..
        } = &mut *st;
        swept_files.retain(|f, (w, _)| ledger.tracks(*f) && w.strong_count() > 0);
        ledger
            .sweep_targets(shared.sweep_limit)
            .into_iter()
            .filter_map(|t| {
                let (w, size) = swept_files.get(&t.file)?;
                Some((t, w.upgrade()?, *size))
            })
            .collect()
    };
    let gone: Vec<_> = checks
        .into_iter()
        .filter(|(t, f, size)| match &shared.pool {
            Some(pool) => pool.missing(t.file, t.start, t.end) > 0,
            None => residency::check(f, t.start, t.end - t.start, *size, shared.probe)
                .map(|r| r.missing > 0)
                .unwrap_or(false),
        })
        .map(|(t, _, _)| t)
        .collect();
    let now = shared.now();
    let mut st = shared.lock();
    for t in &gone {
        st.ledger.mark_gone(t.file, t.record, now);
    }
    gone.len()
}

/// The read length for `[offset, offset + read_len)`, shortened so that its prefetch stops
/// where a read of the same file already queued or running begins (two viewers' or one
/// player's parallel requests): that range is being read anyway. Never below the request's
/// own `end`.
fn clip_at_queued(st: &State, file: FileId, offset: u64, end: u64, read_len: u64) -> u64 {
    st.inflight
        .get(&file)
        .into_iter()
        .flatten()
        .map(|r| r.start)
        .filter(|&s| s >= end && s < offset + read_len)
        .min()
        .map_or(read_len, |s| s - offset)
}

/// Removes a read from the in-flight table.
fn take_inflight(st: &mut State, file: FileId, id: u64) -> Option<Inflight> {
    let reads = st.inflight.get_mut(&file)?;
    let i = reads.iter().position(|r| r.id == id)?;
    let read = reads.swap_remove(i);
    if reads.is_empty() {
        st.inflight.remove(&file);
    }
    Some(read)
}

/// What a device read served.
struct Served {
    /// Bytes covered from the offset.
    n: u64,
    /// Bytes really taken from disk.
    disk: u64,
    /// `direct` mode: the pool's chunks covering the read.
    chunks: Vec<Arc<Chunk>>,
    /// The read's own timing of its positioning and transfer.
    split: Option<Split>,
}

/// A read timed in two parts ([`crate::service::ServiceFit::add_split`]).
struct Split {
    head: u64,
    head_s: f64,
    rest: u64,
    rest_s: f64,
}

/// Reads a range that is wholly missing from memory as a short head and the rest, timing
/// each: the head pays the positioning, the rest follows on the device at its transfer
/// rate, so the read measures both ([`crate::service`]). The device sees the same bytes in
/// the same order as one `pread`. Returns the bytes read and the timing (none when the
/// file ended inside the head).
fn read_split(shared: &Shared, job: &Job, buf: &mut Vec<u8>) -> io::Result<(u64, Option<Split>)> {
    let max = shared.max_read_bytes;
    let t0 = shared.now();
    let head = read_range(&job.file, job.offset, SPLIT_HEAD_BYTES, max, buf)?;
    let t1 = shared.now();
    if head < SPLIT_HEAD_BYTES {
        return Ok((head, None));
    }
    let rest = read_range(&job.file, job.offset + head, job.read_len - head, max, buf)?;
    let t2 = shared.now();
    let split = Split {
        head,
        head_s: t1 - t0,
        rest,
        rest_s: t2 - t1,
    };
    Ok((head + rest, Some(split)))
}

/// Reads `[offset, offset + len)` into the page cache: its whole aligned folios as large
/// folios ([`crate::folio::populate`]) when `folio` is given, the rest — or all of it when
/// the mapping fails — with [`read_range`]; returns the bytes read (short at end of file).
fn read_window(
    file: &File,
    offset: u64,
    len: u64,
    folio: Option<u64>,
    max_piece: u64,
    buf: &mut Vec<u8>,
) -> io::Result<u64> {
    let Some(folio) = folio else {
        return read_range(file, offset, len, max_piece, buf);
    };
    let mut done = 0;
    for (i, (a, b)) in crate::folio::split(offset, offset + len, folio)
        .into_iter()
        .enumerate()
    {
        if a >= b {
            continue;
        }
        let n = if i == 1 {
            match crate::folio::populate(file, a, b - a) {
                Ok(()) => b - a,
                Err(e) => {
                    tracing::debug!("large-folio read of {a}..{b} failed ({e}): pread instead");
                    read_range(file, a, b - a, max_piece, buf)?
                }
            }
        } else {
            read_range(file, a, b - a, max_piece, buf)?
        };
        done += n;
        if n < b - a {
            break;
        }
    }
    Ok(done)
}

/// Blocking `pread`s of `[offset, offset + len)` into `buf`, at most `max_piece` bytes
/// per call; returns the bytes read (short at end of file).
fn read_range(
    file: &File,
    offset: u64,
    len: u64,
    max_piece: u64,
    buf: &mut Vec<u8>,
) -> io::Result<u64> {
    let piece = len.min(max_piece) as usize;
    if buf.len() < piece {
        buf.resize(piece, 0);
    }
    let mut done = 0u64;
    while done < len {
        let want = ((len - done) as usize).min(piece);
        match file.read_at(&mut buf[..want], offset + done) {
            Ok(0) => break,
            Ok(n) => done += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}
