//! `--io direct`: `O_DIRECT` reads into an aligned, budgeted buffer pool the server owns,
//! sent from that memory with `write`/`writev` — no page cache at all (seed 003; Linux).
//!
//! The pool holds, per file, non-overlapping [`Chunk`]s in a map ordered by offset. A
//! chunk is one aligned heap allocation of at most [`SEGMENT_BYTES`] holding the bytes of
//! `[start, start + len)` of one file; it is reference-counted (`Arc`), so the pool and any
//! number of connections (two viewers of one title inside an interval) share it. A read of
//! `[start, end)` ([`BufferPool::fill`]) rounds the range out to the device's logical block
//! size (at least 4096 bytes), reads only the parts no chunk covers yet, with one `preadv`
//! per gap into consecutive chunks (so the device sees one large request, not one per
//! chunk), and hands back every chunk covering the range in order.
//!
//! Memory: every chunk's allocation is counted from the moment it is reserved until its
//! last `Arc` goes, and a reservation that would take the total past the capacity (the
//! memory manager's usable budget) first evicts chunks nobody but the pool holds, least
//! recently used first, then waits for connections to let go of theirs; so the pool never
//! holds more than its capacity. Normally eviction is not needed: the engine mirrors the
//! memory manager ([`crate::memory`]) — where the manager drops a range (its `Drop` list),
//! [`BufferPool::release`] marks it, and a chunk whose whole range has been released leaves
//! the pool; kept intervals and the consumed-cache stay, exactly as pages would in the page
//! cache.
//!
//! Reads open a second descriptor of the file with `O_DIRECT` (re-opening
//! `/proc/self/fd/N`: `fcntl(F_SETFL)` would change the server's own open file
//! description). A filesystem that refuses `O_DIRECT` (`EINVAL`) gets buffered `preadv`
//! instead, with a one-line warning per device, and the pages that read cached are dropped
//! again (`POSIX_FADV_DONTNEED`).

use crate::memory::merge;
use crate::policy::FileId;
use serde::{Deserialize, Serialize};
use std::alloc::Layout;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Smallest alignment of offsets, lengths and buffers (many devices with 512-byte logical
/// blocks still want page-aligned buffers for `O_DIRECT` on some filesystems).
pub const MIN_ALIGN: u64 = 4096;

/// Largest chunk: a read is split into chunks of this size (rounded up to the alignment),
/// so memory is given back in pieces as a stream advances, as pages would be.
pub const SEGMENT_BYTES: u64 = 256 << 10;

/// Most iovecs per `preadv` (`IOV_MAX` on Linux is 1024).
const MAX_IOVECS: usize = 512;

/// How long a read waits for connections to let go of chunks when the pool is full.
pub const ROOM_WAIT: Duration = Duration::from_secs(2);

/// Pool figures (in [`crate::Stats`] as `direct`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DirectStats {
    /// Bytes allocated to chunks now (the pool's and those only connections still hold).
    pub pool_bytes: u64,
    /// The most the pool may allocate: the memory manager's usable budget.
    pub capacity_bytes: u64,
    /// Chunks allocated now.
    pub chunks: u64,
    /// Chunks in the pool's map now (the rest are held only by connections).
    pub pooled_chunks: u64,
    /// Reads made with `O_DIRECT` (total).
    pub direct_reads: u64,
    /// Reads made with buffered `pread` because `O_DIRECT` was refused or switched off.
    pub fallback_reads: u64,
    /// Bytes those reads transferred from the files (total).
    pub read_bytes: u64,
    /// Bytes of chunks freed because the memory manager dropped their ranges (total).
    pub released_bytes: u64,
    /// Bytes of chunks evicted to make room for a read (total; should stay near zero).
    pub evicted_bytes: u64,
    /// Reads that had to wait for connections to let go of chunks (total).
    pub room_waits: u64,
}

/// A buffer aligned for `O_DIRECT`, zero-filled when allocated.
///
/// Page-aligned buffers are anonymous mappings of their own (`mmap`/`munmap`), so the
/// process's resident memory is exactly what the pool counts: from the allocator's heap,
/// freed chunks stayed in malloc's per-thread arenas, and a `--io direct` server at its
/// 512 MiB budget (a 448 MiB pool) reached 509 MiB of anonymous memory and was killed by
/// its cgroup's OOM killer. Larger alignments (a device with blocks above the
/// page size) come from the global allocator.
struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
    mapped: bool,
}

// SAFETY: the buffer owns its allocation exclusively; shared access only reads it.
unsafe impl Send for AlignedBuf {}
// SAFETY: as above: `&AlignedBuf` gives only read access to initialized bytes.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// `size` zeroed bytes at an `align`-aligned address (`size` > 0, `align` a power of
    /// two).
    fn zeroed(size: usize, align: usize) -> io::Result<AlignedBuf> {
        let layout = Layout::from_size_align(size.max(1), align)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let no_memory = || {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("direct buffer pool: cannot allocate {size} bytes"),
            )
        };
        if align as u64 <= crate::residency::page_size() {
            // SAFETY: a fresh private anonymous mapping (no address hint, no descriptor);
            // the kernel returns page-aligned, zero-filled memory or MAP_FAILED.
            let raw = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    layout.size(),
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if raw == libc::MAP_FAILED {
                return Err(no_memory());
            }
            let ptr = NonNull::new(raw.cast::<u8>()).ok_or_else(no_memory)?;
            return Ok(AlignedBuf {
                ptr,
                layout,
                mapped: true,
            });
        }
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(no_memory)?;
        Ok(AlignedBuf {
            ptr,
            layout,
            mapped: false,
        })
    }

    fn len(&self) -> usize {
        self.layout.size()
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr points to `layout.size()` initialized (zeroed, then read into) bytes
        // owned by self; the borrow of self keeps them alive and unaliased by writers.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }

    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.mapped {
            // SAFETY: ptr and size are exactly the mapping `zeroed` created, unmapped once.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.layout.size()) };
        } else {
            // SAFETY: ptr was returned by alloc_zeroed with exactly this layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
        }
    }
}

/// The pool's memory accounting, shared with every chunk so a chunk gives its bytes back
/// whenever its last reference goes.
#[derive(Debug, Default)]
struct Usage {
    bytes: AtomicU64,
    chunks: AtomicU64,
}

impl Usage {
    /// Adds `n` bytes if the total stays within `cap`.
    fn try_reserve(&self, n: u64, cap: u64) -> bool {
        self.bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                (b + n <= cap).then_some(b + n)
            })
            .is_ok()
    }

    fn unreserve(&self, n: u64) {
        self.bytes.fetch_sub(n, Ordering::AcqRel);
    }
}

/// Bytes `[start, start + len)` of one file in one aligned allocation.
pub struct Chunk {
    file: FileId,
    start: u64,
    len: usize,
    align: u64,
    buf: AlignedBuf,
    usage: Arc<Usage>,
}

impl Chunk {
    pub fn file(&self) -> FileId {
        self.file
    }

    /// File offset of the first byte.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// File offset just past the last valid byte.
    pub fn end(&self) -> u64 {
        self.start + self.len as u64
    }

    /// Valid bytes (less than the allocation at end of file).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes allocated (a multiple of the alignment).
    pub fn allocated(&self) -> usize {
        self.buf.len()
    }

    /// The file's bytes `[start, end)`.
    pub fn bytes(&self) -> &[u8] {
        &self.buf.as_slice()[..self.len]
    }

    /// Address of the allocation (tests check its alignment).
    pub fn addr(&self) -> usize {
        self.buf.ptr.as_ptr() as usize
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        self.usage.unreserve(self.buf.len() as u64);
        self.usage.chunks.fetch_sub(1, Ordering::AcqRel);
    }
}

impl fmt::Debug for Chunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chunk")
            .field("file", &self.file)
            .field("start", &self.start)
            .field("len", &self.len)
            .field("allocated", &self.buf.len())
            .finish()
    }
}

/// Part of a chunk: the bytes a response sends from it.
#[derive(Clone, Debug)]
pub struct Slice {
    pub chunk: Arc<Chunk>,
    /// Byte positions within the chunk.
    pub range: Range<usize>,
}

impl Slice {
    pub fn bytes(&self) -> &[u8] {
        &self.chunk.bytes()[self.range.clone()]
    }

    pub fn len(&self) -> usize {
        self.range.len()
    }

    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }
}

/// The slices of `chunks` (sorted by start) covering `[start, end)` in order; `None` if
/// they leave a hole.
pub fn slices_for(chunks: &[Arc<Chunk>], start: u64, end: u64) -> Option<Vec<Slice>> {
    let mut out = Vec::new();
    let mut at = start;
    for c in chunks {
        if at >= end {
            break;
        }
        if c.end() <= at || c.start() > at {
            if c.start() > at {
                return None;
            }
            continue;
        }
        let to = end.min(c.end());
        out.push(Slice {
            chunk: c.clone(),
            range: (at - c.start()) as usize..(to - c.start()) as usize,
        });
        at = to;
    }
    (at >= end).then_some(out)
}

/// Round `x` down / up to a multiple of `a` (a power of two).
pub fn align_down(x: u64, a: u64) -> u64 {
    x & !(a - 1)
}

pub fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

/// The aligned span to read for `[start, end)` of a file of `file_size` bytes: the start
/// rounded down, the end rounded up, never past the block holding the last byte.
pub fn aligned_span(start: u64, end: u64, file_size: u64, align: u64) -> (u64, u64) {
    let a = align_down(start, align);
    let b = align_up(end.min(file_size), align).min(align_up(file_size, align));
    (a, b.max(a))
}

/// What [`BufferPool::fill`] did.
#[derive(Debug, Default)]
pub struct Filled {
    /// Every chunk covering the range, in order (those already pooled and the new ones).
    pub chunks: Vec<Arc<Chunk>>,
    /// Bytes read from the file (0 when the pool already held everything).
    pub read_bytes: u64,
    /// Reads issued with `O_DIRECT` and with buffered `pread`.
    pub direct_reads: u64,
    pub fallback_reads: u64,
}

/// Coverage of a range by pooled chunks.
#[derive(Debug, Default)]
pub struct Lookup {
    /// Bytes of the range the pool holds.
    pub covered: u64,
    /// The slices covering the whole range, when it is complete.
    pub slices: Option<Vec<Slice>>,
}

struct Entry {
    chunk: Arc<Chunk>,
    /// Parts of the chunk the memory manager dropped (sorted, merged).
    released: Vec<(u64, u64)>,
    /// Last use, for eviction (larger is more recent).
    used: u64,
}

#[derive(Default)]
struct Inner {
    files: HashMap<FileId, BTreeMap<u64, Entry>>,
    seq: u64,
    pooled: u64,
}

impl Inner {
    /// The entries overlapping `[a, b)` of `file`, in order.
    fn overlapping(&mut self, file: FileId, a: u64, b: u64) -> Vec<&mut Entry> {
        let Some(map) = self.files.get_mut(&file).filter(|_| a < b) else {
            return Vec::new();
        };
        let first = map
            .range(..=a)
            .next_back()
            .filter(|(_, e)| e.chunk.end() > a)
            .map(|(&s, _)| s)
            .unwrap_or(a);
        map.range_mut(first..b)
            .map(|(_, e)| e)
            .filter(|e| e.chunk.end() > a)
            .collect()
    }

    fn remove(&mut self, file: FileId, start: u64) -> Option<Entry> {
        let map = self.files.get_mut(&file)?;
        let e = map.remove(&start);
        if map.is_empty() {
            self.files.remove(&file);
        }
        if e.is_some() {
            self.pooled -= 1;
        }
        e
    }
}

/// Settings of the pool.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Most bytes allocated at once.
    pub capacity_bytes: u64,
    /// `false`: read with buffered `pread` (dropping the pages after), as when a
    /// filesystem refuses `O_DIRECT`.
    pub o_direct: bool,
    /// Largest single `preadv` (rounded down to the alignment).
    pub max_read_bytes: u64,
    /// Where `/sys/dev/block` is (tests point it elsewhere).
    pub sysfs: PathBuf,
    /// How long a read waits for room when connections hold the whole capacity.
    pub room_wait: Duration,
}

impl PoolConfig {
    pub fn new(capacity_bytes: u64) -> Self {
        PoolConfig {
            capacity_bytes,
            o_direct: true,
            max_read_bytes: 64 << 20,
            sysfs: PathBuf::from("/sys/dev/block"),
            room_wait: ROOM_WAIT,
        }
    }
}

/// The aligned, budgeted buffer pool (see the module doc).
pub struct BufferPool {
    cfg: PoolConfig,
    usage: Arc<Usage>,
    inner: Mutex<Inner>,
    aligns: Mutex<HashMap<u64, u64>>,
    warned: Mutex<HashSet<u64>>,
    direct_reads: AtomicU64,
    fallback_reads: AtomicU64,
    read_bytes: AtomicU64,
    released_bytes: AtomicU64,
    evicted_bytes: AtomicU64,
    room_waits: AtomicU64,
}

impl fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferPool")
            .field("capacity", &self.cfg.capacity_bytes)
            .field("in_use", &self.in_use())
            .finish()
    }
}

impl BufferPool {
    pub fn new(cfg: PoolConfig) -> Self {
        BufferPool {
            cfg,
            usage: Arc::default(),
            inner: Mutex::default(),
            aligns: Mutex::default(),
            warned: Mutex::default(),
            direct_reads: AtomicU64::new(0),
            fallback_reads: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
            released_bytes: AtomicU64::new(0),
            evicted_bytes: AtomicU64::new(0),
            room_waits: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn capacity(&self) -> u64 {
        self.cfg.capacity_bytes
    }

    /// Bytes allocated to chunks now.
    pub fn in_use(&self) -> u64 {
        self.usage.bytes.load(Ordering::Acquire)
    }

    pub fn stats(&self) -> DirectStats {
        let pooled = self.lock().pooled;
        DirectStats {
            pool_bytes: self.in_use(),
            capacity_bytes: self.cfg.capacity_bytes,
            chunks: self.usage.chunks.load(Ordering::Acquire),
            pooled_chunks: pooled,
            direct_reads: self.direct_reads.load(Ordering::Relaxed),
            fallback_reads: self.fallback_reads.load(Ordering::Relaxed),
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            released_bytes: self.released_bytes.load(Ordering::Relaxed),
            evicted_bytes: self.evicted_bytes.load(Ordering::Relaxed),
            room_waits: self.room_waits.load(Ordering::Relaxed),
        }
    }

    /// The alignment for files on `st_dev`: its logical block size, at least [`MIN_ALIGN`].
    pub fn alignment(&self, st_dev: u64) -> u64 {
        let mut aligns = self.aligns.lock().unwrap_or_else(|p| p.into_inner());
        *aligns
            .entry(st_dev)
            .or_insert_with(|| logical_block_size(&self.cfg.sysfs, st_dev).max(MIN_ALIGN))
    }

    /// How much of `[start, end)` of `file` the pool holds, and its slices when it holds
    /// all of it (the chunks count as used).
    pub fn lookup(&self, file: FileId, start: u64, end: u64) -> Lookup {
        if start >= end {
            return Lookup {
                covered: 0,
                slices: Some(Vec::new()),
            };
        }
        let mut inner = self.lock();
        inner.seq += 1;
        let seq = inner.seq;
        let chunks: Vec<Arc<Chunk>> = inner
            .overlapping(file, start, end)
            .into_iter()
            .map(|e| {
                e.used = seq;
                e.chunk.clone()
            })
            .collect();
        drop(inner);
        let covered = chunks
            .iter()
            .map(|c| c.end().min(end) - c.start().max(start))
            .sum();
        let slices = if covered == end - start {
            slices_for(&chunks, start, end)
        } else {
            None
        };
        Lookup { covered, slices }
    }

    /// Bytes of `[start, end)` of `file` the pool does not hold.
    pub fn missing(&self, file: FileId, start: u64, end: u64) -> u64 {
        if start >= end {
            return 0;
        }
        let mut inner = self.lock();
        let covered: u64 = inner
            .overlapping(file, start, end)
            .iter()
            .map(|e| e.chunk.end().min(end) - e.chunk.start().max(start))
            .sum();
        (end - start).saturating_sub(covered)
    }

    /// The memory manager dropped `[start, end)` of `file`: chunks whose whole range has now
    /// been dropped leave the pool (their memory goes when no connection holds them).
    /// The range is widened to whole blocks, so the alignment padding of a read does not
    /// keep its chunk forever.
    pub fn release(&self, file: FileId, start: u64, end: u64) {
        let mut gone = Vec::new();
        let mut inner = self.lock();
        let mut done = Vec::new();
        for e in inner.overlapping(file, start, end) {
            let c = &e.chunk;
            let a = align_down(start, c.align).max(c.start());
            let b = align_up(end, c.align).min(c.end());
            if a >= b {
                continue;
            }
            e.released.push((a, b));
            e.released = merge(std::mem::take(&mut e.released));
            if e.released.first() == Some(&(c.start(), c.end())) {
                done.push(c.start());
            }
        }
        for s in done {
            if let Some(e) = inner.remove(file, s) {
                self.released_bytes
                    .fetch_add(e.chunk.allocated() as u64, Ordering::Relaxed);
                gone.push(e);
            }
        }
        drop(inner);
        // Chunks are dropped here, outside the lock.
        drop(gone);
    }

    /// Forgets every chunk of `file` (e.g. the file changed).
    pub fn forget(&self, file: FileId) {
        let mut inner = self.lock();
        let gone = inner.files.remove(&file);
        if let Some(m) = &gone {
            inner.pooled -= m.len() as u64;
        }
        drop(inner);
        drop(gone);
    }

    /// Makes `[start, end)` of `file` (identity `id`, size `file_size`, on device `st_dev`)
    /// resident in the pool: reads what no chunk covers yet and returns every chunk
    /// covering the range, clipped to the file.
    pub fn fill(
        &self,
        file: &File,
        id: FileId,
        st_dev: u64,
        start: u64,
        end: u64,
        file_size: u64,
    ) -> io::Result<Filled> {
        let align = self.alignment(st_dev);
        let (a, b) = aligned_span(start, end, file_size, align);
        if a >= b {
            return Ok(Filled::default());
        }
        // Chunks already there (held, so they cannot be evicted meanwhile) and the gaps.
        let (mut chunks, gaps) = {
            let mut inner = self.lock();
            inner.seq += 1;
            let seq = inner.seq;
            let mut have = Vec::new();
            let mut gaps = Vec::new();
            let mut at = a;
            for e in inner.overlapping(id, a, b) {
                e.used = seq;
                let c = &e.chunk;
                if c.start() > at {
                    gaps.push((at, c.start()));
                }
                at = at.max(c.end());
                have.push(c.clone());
            }
            if at < b {
                gaps.push((at, b));
            }
            // Nothing to read at or past end of file; a gap may start at the unaligned
            // end of a chunk read when the file was shorter (it has grown since).
            let gaps: Vec<(u64, u64)> = gaps
                .into_iter()
                .filter(|&(x, y)| x < y && x < file_size)
                .map(|(x, y)| (align_down(x, align), y))
                .collect();
            (have, gaps)
        };
        let mut out = Filled::default();
        if gaps.is_empty() {
            out.chunks = chunks;
            return Ok(out);
        }
        let need: u64 = gaps.iter().map(|&(x, y)| y - x).sum();
        self.reserve(need)?;
        let mut reserved = need;
        let mut direct_fd: Option<io::Result<OwnedFd>> = None;
        let mut fresh = Vec::new();
        for (x, y) in gaps {
            let r = self.read_gap(
                file,
                &mut direct_fd,
                (id, st_dev, align),
                x,
                y,
                file_size,
                &mut reserved,
            );
            match r {
                Ok((got, direct)) => {
                    out.read_bytes += got.iter().map(|c| c.len as u64).sum::<u64>();
                    if direct {
                        out.direct_reads += 1;
                    } else {
                        out.fallback_reads += 1;
                    }
                    fresh.extend(got);
                }
                Err(e) => {
                    self.usage.unreserve(reserved);
                    return Err(e);
                }
            }
        }
        self.usage.unreserve(reserved);
        self.direct_reads
            .fetch_add(out.direct_reads, Ordering::Relaxed);
        self.fallback_reads
            .fetch_add(out.fallback_reads, Ordering::Relaxed);
        self.read_bytes.fetch_add(out.read_bytes, Ordering::Relaxed);
        let fresh: Vec<Arc<Chunk>> = fresh.into_iter().map(Arc::new).collect();
        self.insert(&fresh);
        chunks.extend(fresh);
        chunks.sort_by_key(|c| c.start());
        out.chunks = chunks;
        Ok(out)
    }

    /// Puts new chunks into the map (skipping any that would overlap a pooled one: only a
    /// file that grew can cause that, and the bytes are still handed to the caller).
    fn insert(&self, fresh: &[Arc<Chunk>]) {
        let mut inner = self.lock();
        inner.seq += 1;
        let seq = inner.seq;
        for c in fresh {
            if c.is_empty() || !inner.overlapping(c.file, c.start(), c.end()).is_empty() {
                continue;
            }
            inner.files.entry(c.file).or_default().insert(
                c.start(),
                Entry {
                    chunk: c.clone(),
                    released: Vec::new(),
                    used: seq,
                },
            );
            inner.pooled += 1;
        }
    }

    /// Reserves `n` bytes: evicts chunks only the pool holds (least recently used first)
    /// when needed, then waits up to `room_wait` for connections to let go of theirs.
    fn reserve(&self, n: u64) -> io::Result<()> {
        let cap = self.cfg.capacity_bytes;
        if n > cap {
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("direct buffer pool: a read of {n} bytes exceeds its capacity of {cap}"),
            ));
        }
        let deadline = Instant::now() + self.cfg.room_wait;
        let mut waited = false;
        loop {
            if self.usage.try_reserve(n, cap) {
                return Ok(());
            }
            let short = (self.in_use() + n).saturating_sub(cap);
            self.evict(short);
            if self.usage.try_reserve(n, cap) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::OutOfMemory,
                    format!(
                        "direct buffer pool full: {} of {cap} bytes held by connections",
                        self.in_use()
                    ),
                ));
            }
            if !waited {
                self.room_waits.fetch_add(1, Ordering::Relaxed);
                waited = true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Evicts at least `bytes` of chunks nobody but the pool holds, least recently used
    /// first (as many as there are).
    fn evict(&self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let mut inner = self.lock();
        let mut idle: Vec<(u64, FileId, u64, u64)> = inner
            .files
            .iter()
            .flat_map(|(&f, m)| {
                m.values()
                    .filter(|e| Arc::strong_count(&e.chunk) == 1)
                    .map(move |e| (e.used, f, e.chunk.start(), e.chunk.allocated() as u64))
            })
            .collect();
        idle.sort_unstable();
        let mut freed = 0;
        let mut gone = Vec::new();
        for (_, f, s, size) in idle {
            if freed >= bytes {
                break;
            }
            if let Some(e) = inner.remove(f, s) {
                freed += size;
                gone.push(e);
            }
        }
        drop(inner);
        self.evicted_bytes.fetch_add(freed, Ordering::Relaxed);
        drop(gone);
    }

    /// Reads the aligned gap `[x, y)` into new chunks (already reserved: `reserved` is
    /// lowered by what they take). Returns the chunks and whether `O_DIRECT` was used.
    #[allow(clippy::too_many_arguments)]
    fn read_gap(
        &self,
        file: &File,
        direct_fd: &mut Option<io::Result<OwnedFd>>,
        (id, st_dev, align): (FileId, u64, u64),
        x: u64,
        y: u64,
        file_size: u64,
        reserved: &mut u64,
    ) -> io::Result<(Vec<Chunk>, bool)> {
        let seg = align_up(SEGMENT_BYTES, align);
        let mut bufs = Vec::new();
        let mut at = x;
        while at < y {
            let size = seg.min(y - at);
            bufs.push(AlignedBuf::zeroed(size as usize, align as usize)?);
            at += size;
        }
        // The bytes to read: up to the end of file, but whole blocks for O_DIRECT.
        let want = (y.min(file_size) - x) as usize;
        let piece = align_down(self.cfg.max_read_bytes.max(align), align) as usize;
        let mut used_direct = false;
        let mut got = None;
        if self.cfg.o_direct {
            let fd = direct_fd.get_or_insert_with(|| open_direct(file));
            match fd {
                Ok(fd) => {
                    let aligned_want = align_up(want as u64, align) as usize;
                    match read_into(fd.as_raw_fd(), x, &mut bufs, aligned_want, piece) {
                        Ok(n) => {
                            used_direct = true;
                            got = Some(n.min(want));
                        }
                        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                            self.warn_fallback(st_dev, &e);
                        }
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => {
                    let e = io::Error::new(e.kind(), e.to_string());
                    self.warn_fallback(st_dev, &e);
                }
            }
        }
        let n = match got {
            Some(n) => n,
            None => {
                let n = read_into(file.as_raw_fd(), x, &mut bufs, want, piece)?;
                // Buffered reads leave pages in the cache: this mode keeps none.
                // SAFETY: advisory call on the caller's open descriptor.
                unsafe {
                    libc::posix_fadvise(
                        file.as_raw_fd(),
                        x as libc::off_t,
                        (y - x) as libc::off_t,
                        libc::POSIX_FADV_DONTNEED,
                    );
                }
                n
            }
        };
        let mut chunks = Vec::with_capacity(bufs.len());
        let mut at = x;
        for buf in bufs {
            let size = buf.len() as u64;
            *reserved -= size;
            self.usage.chunks.fetch_add(1, Ordering::AcqRel);
            let valid = (x + n as u64).saturating_sub(at).min(size);
            let chunk = Chunk {
                file: id,
                start: at,
                len: valid as usize,
                align,
                buf,
                usage: self.usage.clone(),
            };
            at += size;
            if valid > 0 {
                chunks.push(chunk);
            }
        }
        Ok((chunks, used_direct))
    }

    fn warn_fallback(&self, st_dev: u64, e: &io::Error) {
        let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        if warned.insert(st_dev) {
            tracing::warn!(
                "--io direct: O_DIRECT refused on device {}:{} ({e}); reading with buffered pread and dropping the pages",
                libc::major(st_dev),
                libc::minor(st_dev)
            );
        }
    }
}

/// Opens a second descriptor of `file` with `O_DIRECT` (a new open file description, so
/// the caller's descriptor keeps its flags).
pub fn open_direct(file: &File) -> io::Result<OwnedFd> {
    open_direct_path(Path::new(&format!("/proc/self/fd/{}", file.as_raw_fd())))
}

/// Opens `path` read-only with `O_DIRECT`.
pub fn open_direct_path(path: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)?;
    Ok(OwnedFd::from(file))
}

/// `preadv` of `want` bytes at `offset` into consecutive buffers, `piece` bytes per call at
/// most; returns the bytes read (short at end of file).
fn read_into(
    fd: RawFd,
    offset: u64,
    bufs: &mut [AlignedBuf],
    want: usize,
    piece: usize,
) -> io::Result<usize> {
    let total: usize = bufs.iter().map(AlignedBuf::len).sum();
    let want = want.min(total);
    let mut done = 0usize;
    while done < want {
        let mut iov: Vec<libc::iovec> = Vec::new();
        let mut skip = done;
        let mut bytes = 0usize;
        let limit = piece.min(want - done);
        for b in bufs.iter_mut() {
            let l = b.len();
            if skip >= l {
                skip -= l;
                continue;
            }
            let take = (l - skip).min(limit - bytes);
            // SAFETY: skip < l, so the pointer stays inside the buffer's allocation.
            let base = unsafe { b.as_mut_ptr().add(skip) };
            iov.push(libc::iovec {
                iov_base: base.cast(),
                iov_len: take,
            });
            skip = 0;
            bytes += take;
            if bytes >= limit || iov.len() >= MAX_IOVECS {
                break;
            }
        }
        // SAFETY: every iovec points into a live buffer borrowed mutably for this call,
        // with a length inside that buffer.
        let n = unsafe {
            libc::preadv(
                fd,
                iov.as_ptr(),
                iov.len() as libc::c_int,
                (offset + done as u64) as libc::off_t,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            break;
        }
        done += n as usize;
    }
    Ok(done.min(want))
}

/// The logical block size of the device holding files on `st_dev` (512 if unknown; a
/// partition's comes from its disk).
pub fn logical_block_size(sysfs: &Path, st_dev: u64) -> u64 {
    let (maj, min) = (libc::major(st_dev), libc::minor(st_dev));
    let Ok(dir) = std::fs::canonicalize(sysfs.join(format!("{maj}:{min}"))) else {
        return 512;
    };
    [dir.join("queue"), dir.join("../queue")]
        .iter()
        .find_map(|q| {
            std::fs::read_to_string(q.join("logical_block_size"))
                .ok()?
                .trim()
                .parse::<u64>()
                .ok()
        })
        .filter(|b| b.is_power_of_two())
        .unwrap_or(512)
}

#[cfg(test)]
mod tests;
