//! Prefetch-aware memory: what the server keeps in the page cache, and how large a stream's
//! prefetch may be.
//!
//! The kernel's LRU works against a prefetching server: bytes already sent are touched
//! twice (read, then `sendfile`) and promoted, while bytes prefetched and not yet sent wait
//! on the inactive list and are evicted first. The [`MemoryManager`] makes the opposite
//! choice explicitly (the open problem of thesis 6.2.4: keep data nobody will read again out
//! of the cache without losing read-ahead data before its viewer asks for it):
//!
//! - it keeps a ledger of every active stream: how far the client has consumed (sent or
//!   asked past) and how far the engine has read ahead — the *unconsumed* prefetch;
//! - **consumed bytes are dropped first** (the caller runs `POSIX_FADV_DONTNEED` on the
//!   returned [`Drop`] ranges) unless *interval caching* keeps them: another active stream of
//!   the same file follows this one closely enough that the bytes between them (the
//!   interval) fit the interval budget. Intervals are admitted smallest first until their
//!   bytes fill `interval_share` of the budget (Dan & Sitaram); the largest admitted gap is
//!   the *horizon*. Popular titles have short intervals and stay cached; the long tail
//!   leaves memory as soon as the budget needs its room. A follower need not be there yet:
//!   from the times viewers arrived at a file's beginning, the manager predicts the
//!   interval to the next viewer behind the file's last stream (its bit rate × the usual
//!   gap between arrivals) and keeps that much of what the last stream sent, with the
//!   budget real intervals leave (Dan & Sitaram's intervals for a predicted follower; the
//!   capacity bound counts such re-reads by later sessions as hits too). Consumed bytes that are not kept
//!   wait in a consumed-cache, least valuable dropped first (GreedyDual on the file's
//!   arrival rate × the share of viewers who read that deep), only while the budget has room beyond
//!   kept intervals and every stream's unconsumed prefetch and next read (so a working set
//!   that fits, such as a cached benchmark's, stays cached; a disk-bound one is dropped as
//!   soon as it is sent);
//! - **prefetch sizes are bounded by the budget**: Σ (stream prefetch caps) + kept interval
//!   bytes never exceeds `budget − reserve`; the prefetch pool is shared among the active
//!   streams in proportion to the square root of how fast each consumes — its bit rate,
//!   or faster while its player fills a buffer (thesis 4.3, Eq. 4.4 per stream; the
//!   capacity bound's square-root rule) — so no prefetch is evicted before it
//!   is requested (Bhatia et al.'s no-eviction sizing, thesis ch. 2).
//!
//! Streams are identified by a client key and a file when the caller knows the client
//! (`vodkit serve`: the session id or client address), or by position when it does not (the
//! preload daemon): a request continues the anonymous stream of its file whose position it
//! lies just ahead of, within `reach_bytes`.
//!
//! Pure: no clock, no file. The caller passes times and executes the drops; the engine
//! ([`crate::engine`]) does so for `vodkit serve` and `vodkit prefetchd`.

use crate::policy::FileId;
use crate::Map;
use serde::{Deserialize, Serialize};

const MIB: u64 = 1 << 20;

/// Settings of the memory manager.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryConfig {
    /// The memory the server may fill with file data (bytes).
    pub budget_bytes: u64,
    /// Kept free of the server's data: the kernel's, the process's and other files' share.
    pub reserve_bytes: u64,
    /// Largest share of `budget − reserve` that kept intervals may take.
    pub interval_share: f64,
    /// Consumed bytes this close behind a stream's position are left alone: pages a
    /// `sendfile` still has in flight cannot be dropped yet.
    pub drop_lag_bytes: u64,
    /// Most bytes of the streams' next reads the consumed-cache leaves room for.
    #[serde(default = "default_read_headroom")]
    pub read_headroom_bytes: u64,
    /// A stream not seen for this long has ended (thesis 5.3's 40 s chain gap).
    pub stream_ttl_s: f64,
    /// Anonymous streams: largest forward jump that continues a stream.
    pub reach_bytes: u64,
    /// Most streams tracked; beyond it the oldest are released.
    pub max_streams: usize,
    /// A stream quiet for longer than this many of its usual gaps between requests (and at
    /// least `min_idle_s`) stops taking a share of the prefetch pool until it asks again: a
    /// viewer who left should not shrink everyone else's prefetch for `stream_ttl_s`.
    pub idle_factor: f64,
    pub min_idle_s: f64,
}

/// 32 MiB: a few reads of the largest sizes `auto` picks.
fn default_read_headroom() -> u64 {
    32 * MIB
}

impl MemoryConfig {
    /// The defaults for a budget: the reserve is the larger of 64 MiB and 5% of it (at most
    /// half the budget).
    pub fn for_budget(budget_bytes: u64) -> Self {
        MemoryConfig {
            budget_bytes,
            reserve_bytes: default_reserve(budget_bytes),
            interval_share: 0.5,
            drop_lag_bytes: 0,
            read_headroom_bytes: default_read_headroom(),
            stream_ttl_s: crate::chain::CHAIN_WINDOW_S,
            reach_bytes: 64 * MIB,
            max_streams: 100_000,
            idle_factor: 2.5,
            min_idle_s: 5.0,
        }
    }

    /// Bytes the manager hands out: `budget − reserve`.
    pub fn usable_bytes(&self) -> u64 {
        self.budget_bytes.saturating_sub(self.reserve_bytes)
    }
}

/// The reserve for a budget: max(64 MiB, 5%), never more than half the budget.
pub fn default_reserve(budget_bytes: u64) -> u64 {
    (64 * MIB).max(budget_bytes / 20).min(budget_bytes / 2)
}

/// A range to drop from the page cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drop {
    pub file: FileId,
    pub start: u64,
    pub end: u64,
}

/// Opaque stream handle.
pub type StreamId = u64;

/// Running totals and current levels.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryTotals {
    pub budget_bytes: u64,
    pub reserve_bytes: u64,
    /// Streams active now.
    pub streams: u64,
    /// Of those, streams taking a share of the prefetch pool (not quiet, not closed).
    #[serde(default)]
    pub weighted_streams: u64,
    /// Prefetched, not yet consumed, over all streams (now).
    pub unconsumed_bytes: u64,
    /// Consumed bytes kept for a following stream (now).
    pub kept_bytes: u64,
    /// Largest admitted interval (bytes between a stream and its follower).
    pub horizon_bytes: u64,
    /// Largest admitted interval predicted behind a file's last stream (for a viewer not
    /// there yet).
    #[serde(default)]
    pub predicted_horizon_bytes: u64,
    /// The prefetch pool: usable bytes not held by kept intervals (now).
    pub prefetch_pool_bytes: u64,
    /// Consumed (or abandoned) bytes handed back for dropping (total).
    pub dropped_bytes: u64,
    pub drops: u64,
    /// Consumed bytes still cached, waiting to be dropped when the budget needs room (now).
    pub consumed_cached_bytes: u64,
    /// Bytes a stream consumed from another stream's kept interval (total).
    pub interval_hit_bytes: u64,
    /// Reads whose prefetch the budget cut short (total).
    pub capped_reads: u64,
    /// Bytes released but still resident, held by socket buffers (now).
    #[serde(default)]
    pub unreleased_bytes: u64,
    /// Bytes of the budget the rest of the process holds in its own memory (the live
    /// origin's window; now).
    #[serde(default)]
    pub other_bytes: u64,
    /// Streams that ended, by ttl or by a jump (total).
    pub ended_streams: u64,
}

#[derive(Clone, Debug)]
struct Stream {
    file: FileId,
    client: Option<u64>,
    file_size: u64,
    /// Bytes below this were consumed (sent, or asked past).
    consumed_to: u64,
    /// Bytes below this were decided (dropped or kept).
    released_to: u64,
    /// End of the furthest read made for this stream.
    prefetched_to: u64,
    /// Length of its last read: what its next read will need.
    last_read: u64,
    /// Bit rate (the file's, from the caller): how fast playback consumes.
    kbps: u32,
    /// How fast it actually asks (kbit/s): running mean of the progress between its
    /// requests over the time between them. A player filling its buffer asks faster than
    /// its bit rate.
    rate_kbps: f64,
    /// Offset and time of the request its rate is measured from (requests less than 50 ms
    /// apart, such as the parallel ranges of one player, count as one).
    asked_at: u64,
    asked_s: f64,
    weight: f64,
    /// Whether `weight` counts in the pool's shares now (not idle).
    weighted: bool,
    /// Running mean of the seconds between this stream's requests.
    gap_s: f64,
    last_s: f64,
    /// The viewer's connection closed: it gives up its read-ahead after `min_idle_s`
    /// unless it asks again.
    closed: bool,
}

impl Stream {
    fn unconsumed(&self) -> u64 {
        self.prefetched_to.saturating_sub(self.consumed_to)
    }

    /// What the stream has in memory now: unconsumed prefetch and sent bytes within the
    /// drop lag.
    fn resident(&self) -> u64 {
        self.unconsumed() + self.consumed_to.saturating_sub(self.released_to)
    }

    /// What the stream holds of the budget: the larger of its unconsumed prefetch and its
    /// next read (its last read's size, none once it reached the end of the file), plus the
    /// bytes it sent but has not released yet (within the drop lag).
    fn held(&self) -> u64 {
        let next = if self.consumed_to >= self.file_size {
            0
        } else {
            self.last_read
        };
        self.unconsumed().max(next) + self.consumed_to.saturating_sub(self.released_to)
    }
}

/// A stream's positions, mirrored in its file's state so per-file questions (followers,
/// read-ahead ranges, intervals) are answered from the file alone.
#[derive(Clone, Copy, Debug)]
struct Pos {
    consumed: u64,
    prefetched: u64,
}

/// The streams of one file and its kept ranges. Positions are also ordered by consumed
/// offset, so that the questions asked on every request (is a follower close behind, which
/// stream is the last) cost a lookup instead of a pass over every viewer of the file — a
/// popular title has thousands.
#[derive(Clone, Debug, Default)]
struct FileState {
    pos: Map<StreamId, Pos>,
    /// `(consumed, id)` of every stream in `pos`; among equal offsets the older stream
    /// (smaller id) comes first.
    order: std::collections::BTreeSet<(u64, StreamId)>,
    /// Sorted, disjoint kept `[start, end)` ranges.
    kept: Vec<(u64, u64)>,
}

impl FileState {
    fn add(&mut self, id: StreamId, consumed: u64, prefetched: u64) {
        self.pos.insert(
            id,
            Pos {
                consumed,
                prefetched,
            },
        );
        self.order.insert((consumed, id));
    }

    fn set(&mut self, id: StreamId, consumed: u64, prefetched: u64) {
        let Some(p) = self.pos.get_mut(&id) else {
            return;
        };
        if p.consumed != consumed {
            self.order.remove(&(p.consumed, id));
            self.order.insert((consumed, id));
        }
        p.consumed = consumed;
        p.prefetched = prefetched;
    }

    fn remove(&mut self, id: StreamId) {
        if let Some(p) = self.pos.remove(&id) {
            self.order.remove(&(p.consumed, id));
        }
    }

    fn is_empty(&self) -> bool {
        self.pos.is_empty()
    }

    /// `(consumed, id)` of the streams consumed to an offset in `[lo, hi]`, lowest first.
    fn consumed_within(
        &self,
        lo: u64,
        hi: u64,
    ) -> impl DoubleEndedIterator<Item = (u64, StreamId)> + '_ {
        let range = (lo <= hi).then_some((lo, StreamId::MIN)..=(hi, StreamId::MAX));
        range.into_iter().flat_map(|r| self.order.range(r)).copied()
    }

    /// The stream other than `except` furthest behind: `(consumed, id)`.
    fn last_other(&self, except: StreamId) -> Option<(u64, StreamId)> {
        self.order.iter().copied().find(|&(_, id)| id != except)
    }

    /// Every stream with its position, furthest behind first.
    fn each(&self) -> impl Iterator<Item = (StreamId, &Pos)> + '_ {
        self.order
            .iter()
            .filter_map(|(_, id)| self.pos.get(id).map(|p| (*id, p)))
    }
}

/// The memory manager (see the module doc).
#[derive(Clone, Debug)]
pub struct MemoryManager {
    cfg: MemoryConfig,
    streams: Map<StreamId, Stream>,
    keyed: Map<(u64, FileId), StreamId>,
    /// Every stream of each client (a connection closing marks them all).
    by_client: Map<u64, Vec<StreamId>>,
    files: Map<FileId, FileState>,
    weights: f64,
    kept_bytes: u64,
    /// Σ over streams of [`Stream::unconsumed`] and of [`Stream::held`], kept up to date
    /// by [`MemoryManager::update`] (they are asked for on every request).
    unconsumed_total: u64,
    held_total: u64,
    /// Σ [`Stream::resident`] over all streams.
    resident_total: u64,
    /// Consumed-cache: (priority, sequence, start) → (file, end), least valuable first
    /// (priorities are non-negative `f64` bits, which sort like the numbers).
    cached: std::collections::BTreeMap<(u64, u64, u64), (FileId, u64)>,
    /// Per file: start → (end, priority, sequence) of its consumed-cache ranges.
    cached_index: Map<FileId, std::collections::BTreeMap<u64, (u64, u64, u64)>>,
    /// GreedyDual's inflation value: the priority of the last range evicted. A range
    /// cached now gets this plus its value, so ranges nobody comes back for age out.
    cache_floor: f64,
    /// How far viewers get into a file: where streams ended (consumed position), in
    /// [`REACH_BUCKET`] buckets, and the survival table derived from it.
    reach: Reach,
    cached_bytes: u64,
    cache_seq: u64,
    horizon_bytes: u64,
    /// Largest admitted interval predicted behind a file's last stream.
    predicted_horizon_bytes: u64,
    horizon_at_s: f64,
    /// Per file: when viewers started reading it from its beginning.
    arrivals: Map<FileId, Arrivals>,
    /// Bytes the manager let go that are still resident: a drop the kernel could not carry
    /// out because a socket buffer still references the pages (a `sendfile` in flight).
    unreleased_bytes: u64,
    /// What the rest of the process holds of the budget ([`MemoryManager::set_other`]).
    other_bytes: u64,
    next_id: StreamId,
    totals: MemoryTotals,
}

/// When viewers of one file arrive (streams opened at its beginning).
#[derive(Clone, Copy, Debug)]
struct Arrivals {
    last_s: f64,
    /// Running mean of the seconds between arrivals (`None` after the first).
    gap_s: Option<f64>,
}

impl Arrivals {
    /// Seconds until the next viewer is expected: the usual gap, or longer when it has
    /// already been longer than that since the last one.
    fn expected_gap_s(&self, now_s: f64) -> Option<f64> {
        self.gap_s.map(|g| g.max(now_s - self.last_s))
    }
}

/// Width of a [`Reach`] bucket.
const REACH_BUCKET: u64 = 256 << 10;
/// Buckets tracked; streams that end further count in the last one.
const REACH_BUCKETS: usize = 1024;
/// The survival table is rebuilt after this many stream ends.
const REACH_REFRESH: u32 = 64;

/// Where streams ended, as a survival function of viewing depth: the share of streams
/// that consumed more than a given offset. Counts halve every few thousand ends, so the
/// table follows a changing audience.
#[derive(Clone, Debug, Default)]
struct Reach {
    counts: Vec<f64>,
    total: f64,
    survival: Vec<f64>,
    since: u32,
}

impl Reach {
    fn ended_at(&mut self, consumed: u64) {
        if self.counts.is_empty() {
            self.counts = vec![0.0; REACH_BUCKETS];
        }
        let i = ((consumed / REACH_BUCKET) as usize).min(REACH_BUCKETS - 1);
        self.counts[i] += 1.0;
        self.total += 1.0;
        if self.total > 4096.0 {
            self.counts.iter_mut().for_each(|c| *c *= 0.5);
            self.total *= 0.5;
        }
        self.since += 1;
        if self.since >= REACH_REFRESH || self.survival.is_empty() {
            self.since = 0;
            let mut left = self.total;
            self.survival = self
                .counts
                .iter()
                .map(|c| {
                    left -= c;
                    (left / self.total).clamp(0.0, 1.0)
                })
                .collect();
        }
    }

    /// Share of ended streams that consumed beyond the bucket holding `offset` (1 before
    /// any stream ended).
    fn survival(&self, offset: u64) -> f64 {
        let i = ((offset / REACH_BUCKET) as usize).min(REACH_BUCKETS - 1);
        self.survival.get(i).copied().unwrap_or(1.0)
    }
}

/// A stream opened this close to the start of its file is a new viewer of it (an arrival).
const ARRIVAL_BYTES: u64 = 64 << 10;
/// Files without an arrival for this long are forgotten.
const ARRIVALS_TTL_S: f64 = 3600.0;

impl MemoryManager {
    pub fn new(cfg: MemoryConfig) -> Self {
        MemoryManager {
            cfg,
            streams: Map::default(),
            keyed: Map::default(),
            by_client: Map::default(),
            files: Map::default(),
            weights: 0.0,
            kept_bytes: 0,
            unconsumed_total: 0,
            held_total: 0,
            resident_total: 0,
            cached: Default::default(),
            cached_index: Map::default(),
            cached_bytes: 0,
            cache_seq: 0,
            cache_floor: 0.0,
            reach: Reach::default(),
            horizon_bytes: 0,
            predicted_horizon_bytes: 0,
            horizon_at_s: f64::NEG_INFINITY,
            arrivals: Map::default(),
            unreleased_bytes: 0,
            other_bytes: 0,
            next_id: 1,
            totals: MemoryTotals::default(),
        }
    }

    pub fn config(&self) -> &MemoryConfig {
        &self.cfg
    }

    /// A request of `[start, end)` of `file` (size `file_size`) at `now_s`, by `client` if
    /// known. Returns the stream it belongs to and the ranges to drop now: what the stream
    /// consumed before this request (or what a stream left behind by jumping elsewhere).
    #[allow(clippy::too_many_arguments)]
    pub fn request(
        &mut self,
        file: FileId,
        client: Option<u64>,
        start: u64,
        end: u64,
        file_size: u64,
        bitrate_kbps: u32,
        now_s: f64,
    ) -> (StreamId, Vec<Drop>) {
        let mut drops = Vec::new();
        let found = match client {
            Some(c) => self.keyed.get(&(c, file)).copied(),
            None => self.anonymous_match(file, start),
        };
        let id = match found {
            Some(id) if self.continues(id, start) => id,
            Some(id) => {
                // A jump: the old position's bytes are no longer this stream's.
                self.end_stream(id, &mut drops);
                self.open(file, client, start, file_size, bitrate_kbps, now_s)
            }
            None => self.open(file, client, start, file_size, bitrate_kbps, now_s),
        };
        let mut rejoin = 0.0;
        let mut reweigh = 0.0;
        self.update(id, |s| {
            let gap = now_s - s.last_s;
            if gap > 0.05 {
                s.gap_s = 0.7 * s.gap_s + 0.3 * gap;
            }
            let asked_gap = now_s - s.asked_s;
            if asked_gap > 0.05 && start > s.asked_at {
                let kbps = (start - s.asked_at) as f64 * 8.0 / 1000.0 / asked_gap;
                s.rate_kbps = 0.5 * s.rate_kbps + 0.5 * kbps;
                let w = weight_at(s.kbps, s.rate_kbps);
                if s.weighted {
                    reweigh = w - s.weight;
                }
                s.weight = w;
            }
            if asked_gap > 0.05 {
                s.asked_at = start;
                s.asked_s = now_s;
            }
            if !s.weighted {
                s.weighted = true;
                rejoin = s.weight;
            }
            s.last_s = now_s;
            s.closed = false;
            s.file_size = file_size;
            s.consumed_to = s.consumed_to.max(start);
            s.prefetched_to = s.prefetched_to.max(start);
        });
        self.weights = (self.weights + rejoin + reweigh).max(0.0);
        // Cached consumed bytes asked for again are in use, not waiting to be dropped.
        self.uncache(file, start, end);
        self.release(id, now_s, &mut drops);
        self.trim(&mut drops);
        (id, drops)
    }

    /// The stream sent everything below `end` (explicit consumption, `vodkit serve`).
    pub fn consumed(&mut self, id: StreamId, end: u64, now_s: f64) -> Vec<Drop> {
        let mut drops = Vec::new();
        let known = self.update(id, |s| {
            s.consumed_to = s.consumed_to.max(end.min(s.file_size));
            s.prefetched_to = s.prefetched_to.max(s.consumed_to);
            s.last_s = now_s;
        });
        if known {
            self.release(id, now_s, &mut drops);
            if self
                .streams
                .get(&id)
                .is_some_and(|s| s.consumed_to >= s.file_size)
            {
                // Sent to the end of the file: nothing more to read for it.
                self.end_stream(id, &mut drops);
            }
            self.trim(&mut drops);
        }
        drops
    }

    /// The engine read `[start, end)` for stream `id`; returns consumed-cache ranges to drop
    /// to make room for it.
    pub fn read(&mut self, id: StreamId, start: u64, end: u64) -> Vec<Drop> {
        let mut drops = Vec::new();
        let reach = self.cfg.reach_bytes;
        let known = self.update(id, |s| {
            if start <= s.prefetched_to.max(s.consumed_to) + reach {
                s.prefetched_to = s.prefetched_to.max(end.min(s.file_size));
                s.last_read = end.saturating_sub(start);
            }
        });
        if let (true, Some(file)) = (known, self.streams.get(&id).map(|s| s.file)) {
            self.uncache(file, start, end);
            self.trim(&mut drops);
        }
        drops
    }

    /// A quiet stream (a viewer who left, or paused) gives up what it read ahead and did
    /// not consume: kept for a follower if one is close, else dropped. Held by a viewer who
    /// is gone, those bytes would shut every other stream out of the prefetch pool until the
    /// ttl; a viewer who comes back reads them again.
    fn give_up_read_ahead(&mut self, id: StreamId, now_s: f64, drops: &mut Vec<Drop>) {
        // What it sent within the drop lag is long out of the socket by now.
        if let Some(sent) = self.streams.get(&id).map(|s| s.consumed_to) {
            self.release_to(id, sent, now_s, drops);
        }
        let Some((file, from, to)) = self
            .streams
            .get(&id)
            .map(|s| (s.file, s.consumed_to, s.prefetched_to.min(s.file_size)))
        else {
            return;
        };
        if from >= to {
            return;
        }
        self.decide(file, id, from, to, true, drops);
        self.update(id, |s| {
            s.prefetched_to = s.consumed_to;
            s.last_read = 0;
        });
    }

    /// Changes stream `id` with `f`, keeping the unconsumed and held totals; false for an
    /// unknown stream.
    fn update(&mut self, id: StreamId, f: impl FnOnce(&mut Stream)) -> bool {
        let Some(s) = self.streams.get_mut(&id) else {
            return false;
        };
        let (u0, h0, r0) = (s.unconsumed(), s.held(), s.resident());
        let (c0, p0) = (s.consumed_to, s.prefetched_to);
        debug_assert!(self.held_total >= h0);
        f(s);
        let (u1, h1, r1) = (s.unconsumed(), s.held(), s.resident());
        let (c1, p1, file) = (s.consumed_to, s.prefetched_to, s.file);
        self.unconsumed_total = self.unconsumed_total - u0 + u1;
        self.held_total = self.held_total - h0 + h1;
        self.resident_total = self.resident_total - r0 + r1;
        if (c0, p0) != (c1, p1) {
            if let Some(fs) = self.files.get_mut(&file) {
                fs.set(id, c1, p1);
            }
        }
        true
    }

    /// Largest prefetch (bytes from the stream's position) the budget allows stream `id`:
    /// its √rate share of the prefetch pool.
    pub fn prefetch_cap(&self, id: StreamId) -> u64 {
        if !self.streams.contains_key(&id) {
            return self.prefetch_pool();
        }
        self.share(id).min(self.free_for(id))
    }

    /// The prefetch pool less what the other streams have resident (unconsumed prefetch,
    /// sent bytes within the drop lag) and this stream's own lag: the most stream `id` may
    /// hold ahead of its position so that Σ resident + kept stays within the usable budget
    /// even while shares shrink.
    fn free_for(&self, id: StreamId) -> u64 {
        let own = self.streams.get(&id).map_or(0, Stream::unconsumed);
        let others = self.resident_total.saturating_sub(own);
        self.prefetch_pool().saturating_sub(others)
    }

    /// The prefetch pool per unit of √kbps over the active streams (`None` without
    /// streams): a stream at `k` kbps gets this × √k.
    pub fn pool_per_weight(&self) -> Option<f64> {
        (self.weights > 0.0).then(|| SAWTOOTH * self.prefetch_pool() as f64 / self.weights)
    }

    /// Stream `id`'s √rate share of the prefetch pool.
    fn share(&self, id: StreamId) -> u64 {
        match self.streams.get(&id) {
            Some(s) if self.weights > 0.0 => {
                (SAWTOOTH * self.prefetch_pool() as f64 * s.weight / self.weights) as u64
            }
            _ => self.prefetch_pool(),
        }
    }

    /// The cap a stream at `kbps` would get if one more stream of that rate joined now
    /// (what the bound-derived start of `auto` uses).
    pub fn share_for(&self, kbps: u32) -> u64 {
        let w = weight(kbps);
        (SAWTOOTH * self.prefetch_pool() as f64 * w / (self.weights + w)) as u64
    }

    /// Budget-driven sizing of one miss: a policy's `wanted` prefetch for stream `id`, cut
    /// to its [`MemoryManager::prefetch_cap`] unless the request's own `len` is larger
    /// (a request is always read whole); counts the cut.
    ///
    /// A cut prefetch is a whole number of requests of `len` bytes (the prefetch runs from
    /// the request's offset): rounded up to the next request's end when the free pool holds
    /// it, else down (at least the request itself). Players ask in equal steps, so the
    /// stream's next miss then starts where a request starts. A cut anywhere else leaves
    /// part of a request resident, and that request is a miss all the same: its read
    /// positions the head for the rest of a request plus a prefetch shortened by the
    /// leftover, which at 256 MiB made reads 30% smaller than the caps (memory replay,
    /// docs/simulate.md).
    pub fn capped_prefetch(&mut self, id: StreamId, wanted: u64, len: u64) -> u64 {
        let cap = self.prefetch_cap(id);
        if wanted <= cap || wanted <= len {
            return wanted;
        }
        self.note_capped();
        if len == 0 {
            return cap;
        }
        let up = cap.div_ceil(len).saturating_mul(len);
        if up <= self.free_for(id) {
            up.min(wanted)
        } else {
            (cap / len).max(1) * len
        }
    }

    /// Notes that a read was cut short by [`MemoryManager::prefetch_cap`].
    fn note_capped(&mut self) {
        self.totals.capped_reads += 1;
    }

    /// The caller's count of bytes this manager released that are still resident (drops
    /// waiting for a socket buffer to let go of their pages): they take memory like any
    /// other, so they come off what the manager hands out.
    pub fn set_unreleased(&mut self, bytes: u64) {
        self.unreleased_bytes = bytes;
    }

    /// The bytes of the budget the rest of the process holds in its own memory — the live
    /// origin's window of segments, which sits in the same cgroup as the page cache: the
    /// manager hands out only what is left. Without it a mixed live and on-demand server
    /// planned prefetches for the whole budget while the window held half of it, and the
    /// kernel evicted 3–13% of what was prefetched (matrix cell MUH).
    pub fn set_other(&mut self, bytes: u64) {
        self.other_bytes = bytes;
    }

    /// `budget − reserve`, less the bytes released and still held by socket buffers and
    /// the bytes the rest of the process holds.
    fn usable(&self) -> u64 {
        self.cfg
            .usable_bytes()
            .saturating_sub(self.unreleased_bytes)
            .saturating_sub(self.other_bytes)
    }

    /// Usable bytes not held by kept intervals.
    pub fn prefetch_pool(&self) -> u64 {
        self.usable().saturating_sub(self.kept_bytes)
    }

    /// The connection of `client`'s streams closed (a viewer who left, most often): they
    /// stop taking a share of the prefetch pool at once, and end after `min_idle_s` unless
    /// they ask again (a player that reconnects).
    pub fn closed(&mut self, client: u64) {
        let ids = self.by_client.get(&client).cloned().unwrap_or_default();
        let mut unweighted = 0.0;
        for id in ids {
            self.update(id, |s| {
                s.closed = true;
                // No next read to reserve room for unless it asks again.
                s.last_read = 0;
                if s.weighted {
                    s.weighted = false;
                    unweighted += s.weight;
                }
            });
        }
        self.weights = (self.weights - unweighted).max(0.0);
    }

    /// Ends streams idle for `stream_ttl_s` and recomputes the horizon; returns the ranges
    /// to drop. Call about once a second.
    pub fn expire(&mut self, now_s: f64) -> Vec<Drop> {
        let mut drops = Vec::new();
        let ttl = self.cfg.stream_ttl_s;
        let mut idle: Vec<StreamId> = self
            .streams
            .iter()
            .filter(|(_, s)| now_s - s.last_s >= ttl)
            .map(|(&id, _)| id)
            .collect();
        idle.sort_unstable();
        for id in idle {
            self.end_stream(id, &mut drops);
        }
        let (factor, min_idle) = (self.cfg.idle_factor, self.cfg.min_idle_s);
        let mut unweighted = 0.0;
        let mut gone_quiet = Vec::new();
        let mut left = Vec::new();
        for (&id, s) in self.streams.iter_mut() {
            if s.closed && now_s - s.last_s > min_idle {
                // The viewer's connection closed and it has not come back: it left. Its
                // stream ends now rather than at the ttl, so that nobody keeps bytes for
                // it as a follower that will never read them.
                left.push(id);
            } else if s.weighted && now_s - s.last_s > (factor * s.gap_s).max(min_idle) {
                s.weighted = false;
                unweighted += s.weight;
                gone_quiet.push(id);
            }
        }
        self.weights = (self.weights - unweighted).max(0.0);
        left.sort_unstable();
        for id in left {
            self.end_stream(id, &mut drops);
        }
        gone_quiet.sort_unstable();
        for id in gone_quiet {
            self.give_up_read_ahead(id, now_s, &mut drops);
        }
        self.refresh_horizon(now_s, true);
        self.release_stale_kept(now_s);
        self.arrivals
            .retain(|_, a| now_s - a.last_s < ARRIVALS_TTL_S);
        self.trim(&mut drops);
        drops
    }

    /// Ends every stream (shutdown, end of a simulation).
    pub fn end_all(&mut self) -> Vec<Drop> {
        let mut drops = Vec::new();
        let mut ids: Vec<StreamId> = self.streams.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            self.end_stream(id, &mut drops);
        }
        while let Some(d) = self.pop_cached() {
            drops.push(d);
        }
        drops
    }

    /// Whether the manager still has streams, kept or cached ranges in `file`.
    pub fn tracks(&self, file: FileId) -> bool {
        self.files.contains_key(&file) || self.cached_index.contains_key(&file)
    }

    /// Whether any byte of `[start, end)` of `file` is wanted again: some stream's unsent
    /// read-ahead (or bytes within its drop lag), a kept interval, or the consumed-cache. A
    /// drop retried later must not take those.
    pub fn claims(&self, file: FileId, start: u64, end: u64) -> bool {
        let lag = self.cfg.drop_lag_bytes;
        let in_streams = self.files.get(&file).is_some_and(|fs| {
            fs.each().any(|(_, p)| {
                p.consumed.saturating_sub(lag) < end && start < p.prefetched.max(p.consumed)
            }) || fs.kept.iter().any(|&(a, b)| a < end && start < b)
        });
        let in_cache = self.cached_index.get(&file).is_some_and(|idx| {
            idx.range(..end)
                .next_back()
                .is_some_and(|(_, &(b, _, _))| b > start)
        });
        in_streams || in_cache
    }

    /// `d` widened to whole `unit`s (the page cache's large folios) on each side where
    /// the added bytes are claimed by no one ([`MemoryManager::claims`]), not past
    /// `file_size`. The kernel drops only folios a drop covers whole, so without this a
    /// folio that straddles two drops would stay resident after both; with it, the later
    /// of the two takes it.
    pub fn widened(&self, d: Drop, unit: u64, file_size: u64) -> Drop {
        if unit == 0 {
            return d;
        }
        let a = d.start / unit * unit;
        let b = d.end.div_ceil(unit).saturating_mul(unit).min(file_size);
        Drop {
            file: d.file,
            start: if a < d.start && !self.claims(d.file, a, d.start) {
                a
            } else {
                d.start
            },
            end: if b > d.end && !self.claims(d.file, d.end, b) {
                b
            } else {
                d.end
            },
        }
    }

    /// The number of streams reading `file` now.
    pub fn streams_on(&self, file: FileId) -> usize {
        self.files.get(&file).map_or(0, |f| f.pos.len())
    }

    /// Whether `file` has active streams.
    pub fn has_streams(&self, file: FileId) -> bool {
        self.files.get(&file).is_some_and(|f| !f.is_empty())
    }

    /// Current levels and totals.
    pub fn totals(&self) -> MemoryTotals {
        let mut t = self.totals.clone();
        t.budget_bytes = self.cfg.budget_bytes;
        t.reserve_bytes = self.cfg.reserve_bytes;
        t.streams = self.streams.len() as u64;
        t.weighted_streams = self.streams.values().filter(|s| s.weighted).count() as u64;
        t.unconsumed_bytes = self.unconsumed_total;
        t.kept_bytes = self.kept_bytes;
        t.horizon_bytes = self.horizon_bytes;
        t.predicted_horizon_bytes = self.predicted_horizon_bytes;
        t.unreleased_bytes = self.unreleased_bytes;
        t.other_bytes = self.other_bytes;
        t.prefetch_pool_bytes = self.prefetch_pool();
        t.consumed_cached_bytes = self.cached_bytes;
        t
    }

    fn open(
        &mut self,
        file: FileId,
        client: Option<u64>,
        start: u64,
        file_size: u64,
        kbps: u32,
        now_s: f64,
    ) -> StreamId {
        if self.streams.len() >= self.cfg.max_streams {
            // Over the bound: release the least recently seen stream. Its drops are lost
            // (the bytes age out of the cache normally).
            if let Some((&old, _)) = self
                .streams
                .iter()
                .min_by(|a, b| a.1.last_s.total_cmp(&b.1.last_s))
            {
                let mut ignored = Vec::new();
                self.end_stream(old, &mut ignored);
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        let w = weight(kbps);
        self.streams.insert(
            id,
            Stream {
                file,
                client,
                file_size,
                consumed_to: start,
                released_to: start,
                prefetched_to: start,
                last_read: 0,
                kbps,
                rate_kbps: f64::from(kbps),
                asked_at: start,
                asked_s: now_s,
                weight: w,
                weighted: true,
                gap_s: INITIAL_GAP_S,
                last_s: now_s,
                closed: false,
            },
        );
        self.weights += w;
        if let Some(c) = client {
            self.keyed.insert((c, file), id);
            self.by_client.entry(c).or_default().push(id);
        }
        self.files.entry(file).or_default().add(id, start, start);
        if start < ARRIVAL_BYTES {
            self.arrivals
                .entry(file)
                .and_modify(|a| {
                    let gap = (now_s - a.last_s).max(0.0);
                    a.gap_s = Some(a.gap_s.map_or(gap, |g| 0.7 * g + 0.3 * gap));
                    a.last_s = now_s;
                })
                .or_insert(Arrivals {
                    last_s: now_s,
                    gap_s: None,
                });
        }
        self.refresh_horizon(now_s, false);
        self.adopt(file, id, start);
        id
    }

    /// A new stream at `start` of `file` follows the streams ahead of it: consumed bytes
    /// still cached between it and its nearest leader become that interval's kept bytes
    /// (the leader's sent bytes the follower will read next), while they fit.
    fn adopt(&mut self, file: FileId, follower: StreamId, start: u64) {
        let Some(leader_pos) = self.files.get(&file).and_then(|fs| {
            let hi = start.saturating_add(self.horizon_bytes);
            fs.consumed_within(start.saturating_add(1), hi)
                .find(|&(_, id)| id != follower)
                .map(|(c, _)| c)
        }) else {
            return;
        };
        let ranges: Vec<(u64, u64)> = self
            .cached_index
            .get(&file)
            .map(|idx| {
                idx.range(..leader_pos)
                    .map(|(&a, &(b, _, _))| (a.max(start), b.min(leader_pos)))
                    .filter(|(a, b)| a < b)
                    .collect()
            })
            .unwrap_or_default();
        for (a, b) in ranges {
            if !self.can_keep(b - a) {
                break;
            }
            self.uncache(file, a, b);
            self.keep(file, a, b);
        }
    }

    /// Whether a request at `start` continues stream `id` (forward, within reach).
    fn continues(&self, id: StreamId, start: u64) -> bool {
        self.streams.get(&id).is_some_and(|s| {
            start >= s.released_to
                && start <= s.prefetched_to.max(s.consumed_to) + self.cfg.reach_bytes
        })
    }

    /// The anonymous stream of `file` that `start` continues: the one whose position is
    /// closest at or below `start` within reach.
    fn anonymous_match(&self, file: FileId, start: u64) -> Option<StreamId> {
        let fs = self.files.get(&file)?;
        // The closest at or below `start`; among equals the oldest.
        let anonymous = fs
            .consumed_within(start.saturating_sub(self.cfg.reach_bytes), start)
            .rev()
            .filter(|(_, id)| self.streams.get(id).is_some_and(|s| s.client.is_none()));
        let mut best: Option<(u64, StreamId)> = None;
        for (c, id) in anonymous {
            match best {
                Some((b, _)) if c < b => break,
                _ => best = Some((c, id)),
            }
        }
        best.map(|(_, id)| id)
    }

    /// Decides the bytes stream `id` consumed since the last decision, up to `drop_lag`
    /// behind its position.
    fn release(&mut self, id: StreamId, now_s: f64, drops: &mut Vec<Drop>) {
        let Some(s) = self.streams.get(&id) else {
            return;
        };
        let upto = if s.consumed_to >= s.file_size {
            s.file_size
        } else {
            s.consumed_to.saturating_sub(self.cfg.drop_lag_bytes)
        };
        self.release_to(id, upto, now_s, drops);
    }

    /// Decides stream `id`'s sent bytes below `upto` not decided yet.
    fn release_to(&mut self, id: StreamId, upto: u64, now_s: f64, drops: &mut Vec<Drop>) {
        let Some((file, from)) = self.streams.get(&id).map(|s| (s.file, s.released_to)) else {
            return;
        };
        if upto <= from {
            return;
        }
        self.update(id, |s| s.released_to = upto);
        self.refresh_horizon(now_s, false);
        self.decide(file, id, from, upto, false, drops);
    }

    /// Keeps `[from, to)` of `file`, consumed (or, `abandoned`, read and never to be
    /// consumed) by `leader`, if a follower within the horizon will read it. Otherwise
    /// consumed bytes go to the consumed-cache and abandoned ones are dropped at once, except
    /// bytes other streams have read ahead and not consumed yet.
    fn decide(
        &mut self,
        file: FileId,
        leader: StreamId,
        from: u64,
        to: u64,
        abandoned: bool,
        drops: &mut Vec<Drop>,
    ) {
        if from >= to {
            return;
        }
        // Bytes already kept for someone else now count as consumed by this stream.
        let was_kept = self.unkeep(file, from, to);
        self.totals.interval_hit_bytes += was_kept;
        let leader_pos = self.streams.get(&leader).map(|s| s.consumed_to);
        let follower = leader_pos.is_some_and(|pos| self.has_follower(file, leader, pos, to));
        let anticipated = !abandoned && !follower && self.anticipates(file, leader);
        if (follower || anticipated) && self.can_keep(to - from) {
            self.keep(file, from, to);
            if anticipated {
                // Only the predicted interval behind the last stream is worth keeping.
                let now = self.streams.get(&leader).map_or(0.0, |s| s.last_s);
                self.release_kept_behind_tail(file, now);
            }
            return;
        }
        // Read-ahead nobody will consume is still worth its cache slot while another
        // stream of the file has not passed it (a viewer of the same title that found it
        // resident and reads on): it waits with the sent bytes, dropped only for room.
        let wanted = abandoned
            && self
                .files
                .get(&file)
                .is_some_and(|fs| fs.last_other(leader).is_some_and(|(c, _)| c < to));
        if !abandoned || wanted {
            self.cache(file, from, to);
            return;
        }
        let guarded = self.guarded_ranges(file, leader);
        for (a, b) in subtract(from, to, &guarded) {
            self.totals.dropped_bytes += b - a;
            self.totals.drops += 1;
            drops.push(Drop {
                file,
                start: a,
                end: b,
            });
        }
    }

    /// Adds consumed `[from, to)` of `file` to the consumed-cache (newest).
    fn cache(&mut self, file: FileId, from: u64, to: u64) {
        if from >= to {
            return;
        }
        self.uncache(file, from, to);
        self.cache_seq += 1;
        let prio = (self.cache_floor + self.cache_value(file, from)).to_bits();
        self.cached.insert((prio, self.cache_seq, from), (file, to));
        self.cached_index
            .entry(file)
            .or_default()
            .insert(from, (to, prio, self.cache_seq));
        self.cached_bytes += to - from;
    }

    /// Removes `[from, to)` of `file` from the consumed-cache (not dropped: in use again).
    fn uncache(&mut self, file: FileId, from: u64, to: u64) {
        let Some(idx) = self.cached_index.get_mut(&file) else {
            return;
        };
        let hit: Vec<(u64, u64, u64, u64)> = idx
            .range(..to)
            .rev()
            .take_while(|(_, (end, _, _))| *end > from)
            .map(|(&a, &(b, prio, seq))| (a, b, prio, seq))
            .collect();
        for (a, b, prio, seq) in hit {
            idx.remove(&a);
            self.cached.remove(&(prio, seq, a));
            self.cached_bytes -= b - a;
            // Keep the parts outside [from, to), with their priority.
            for (x, y) in [(a, from.min(b)), (to.max(a), b)] {
                if x < y {
                    idx.insert(x, (y, prio, seq));
                    self.cached.insert((prio, seq, x), (file, y));
                    self.cached_bytes += y - x;
                }
            }
        }
        if idx.is_empty() {
            self.cached_index.remove(&file);
        }
    }

    /// What keeping consumed bytes of `file` from `offset` is worth, per byte and second:
    /// how often the file gets a new viewer (its arrival rate) times the share of viewers
    /// who read that far (the survival of viewing depth). Popular titles' beginnings
    /// score highest; the long tail and the ends of titles few watch to score lowest.
    fn cache_value(&self, file: FileId, offset: u64) -> f64 {
        let gap = self
            .arrivals
            .get(&file)
            .and_then(|a| a.gap_s)
            .unwrap_or(ARRIVALS_TTL_S)
            .max(1e-3);
        self.reach.survival(offset) / gap
    }

    /// Removes the least valuable consumed-cache range (the oldest among equals) and raises
    /// the floor to its priority.
    fn pop_cached(&mut self) -> Option<Drop> {
        let (&(prio, seq, start), &(file, end)) = self.cached.iter().next()?;
        self.cached.remove(&(prio, seq, start));
        self.cache_floor = self.cache_floor.max(f64::from_bits(prio));
        if let Some(idx) = self.cached_index.get_mut(&file) {
            idx.remove(&start);
            if idx.is_empty() {
                self.cached_index.remove(&file);
            }
        }
        self.cached_bytes -= end - start;
        Some(Drop { file, start, end })
    }

    /// Room the consumed-cache may use: the usable budget less kept intervals, what the
    /// streams have resident (unconsumed prefetch, bytes within the drop lag) and room for
    /// their next reads — at most `read_headroom_bytes` of it: reads are serialized per
    /// device, so only a few run at once, and [`MemoryManager::read`] trims the cache as
    /// each completes. Reserving every open stream's next read would leave a busy server
    /// (hundreds of streams) no cache at all.
    fn cache_room(&self) -> u64 {
        let next_reads = self.held_total.saturating_sub(self.resident_total);
        self.usable()
            .saturating_sub(self.kept_bytes)
            .saturating_sub(self.resident_total)
            .saturating_sub(next_reads.min(self.cfg.read_headroom_bytes))
    }

    /// Drops the oldest consumed-cache ranges until the cache fits its room; never the
    /// bytes some stream has read ahead and not consumed.
    fn trim(&mut self, drops: &mut Vec<Drop>) {
        if self.cached_bytes == 0 {
            return;
        }
        let room = self.cache_room();
        while self.cached_bytes > room {
            let Some(d) = self.pop_cached() else { break };
            let guarded = self.guarded_ranges(d.file, StreamId::MAX);
            for (a, b) in subtract(d.start, d.end, &guarded) {
                self.totals.dropped_bytes += b - a;
                self.totals.drops += 1;
                drops.push(Drop {
                    file: d.file,
                    start: a,
                    end: b,
                });
            }
        }
    }

    /// Another stream of `file` behind `leader` (at `pos`) that will still read below `to`,
    /// within the horizon.
    fn has_follower(&self, file: FileId, leader: StreamId, pos: u64, to: u64) -> bool {
        let Some(fs) = self.files.get(&file) else {
            return false;
        };
        // consumed ≤ pos, consumed < to and pos − consumed ≤ horizon.
        to > 0
            && fs
                .consumed_within(pos.saturating_sub(self.horizon_bytes), pos.min(to - 1))
                .any(|(_, id)| id != leader)
    }

    /// The interval to the next viewer of `file` expected behind its last stream `tail`
    /// (bytes `tail` consumes before that viewer arrives), if the file has arrivals to
    /// predict from.
    fn predicted_interval(&self, file: FileId, tail: &Stream, now_s: f64) -> Option<u64> {
        let gap = self.arrivals.get(&file)?.expected_gap_s(now_s)?;
        Some((f64::from(tail.kbps) * 125.0 * gap) as u64)
    }

    /// Whether `leader` is the last stream of `file` (none behind it) and the next viewer
    /// expected behind it is within the horizon: Dan & Sitaram's interval caching for a
    /// follower that has not arrived yet (the interval to it is predicted from the file's
    /// arrivals). What it consumes is kept until that viewer comes; bytes further behind
    /// it than the predicted interval are let go by [`MemoryManager::expire`].
    fn anticipates(&self, file: FileId, leader: StreamId) -> bool {
        let (Some(fs), Some(s)) = (self.files.get(&file), self.streams.get(&leader)) else {
            return false;
        };
        let is_tail = fs.last_other(leader).is_none_or(|(c, _)| c > s.consumed_to);
        is_tail
            && self
                .predicted_interval(file, s, s.last_s)
                .is_some_and(|i| i > 0 && i <= self.predicted_horizon_bytes)
    }

    /// Kept ranges behind the last stream of each file further than the interval to the
    /// next expected viewer go to the consumed-cache: no follower will read them from
    /// memory.
    fn release_stale_kept(&mut self, now_s: f64) {
        let files: Vec<FileId> = self
            .files
            .iter()
            .filter(|(_, fs)| !fs.kept.is_empty())
            .map(|(&f, _)| f)
            .collect();
        for file in files {
            self.release_kept_behind_tail(file, now_s);
        }
    }

    /// [`MemoryManager::release_stale_kept`] for one file: what lies further behind its
    /// last stream than the predicted interval to the next viewer (when that is within the
    /// horizon; otherwise everything behind it, and everything once no stream is left).
    fn release_kept_behind_tail(&mut self, file: FileId, now_s: f64) {
        let Some(fs) = self.files.get(&file) else {
            return;
        };
        let tail = fs.order.first().and_then(|(_, id)| self.streams.get(id));
        let keep_from = match tail {
            None => u64::MAX,
            Some(t) => {
                let allow = self
                    .predicted_interval(file, t, now_s)
                    .filter(|&i| i <= self.predicted_horizon_bytes)
                    .unwrap_or(0);
                t.consumed_to.saturating_sub(allow)
            }
        };
        let stale: Vec<(u64, u64)> = fs
            .kept
            .iter()
            .filter(|&&(a, _)| a < keep_from)
            .map(|&(a, b)| (a, b.min(keep_from)))
            .collect();
        for (a, b) in stale {
            self.unkeep(file, a, b);
            self.cache(file, a, b);
        }
    }

    /// Other streams' unconsumed read-ahead ranges in `file`: never dropped.
    fn guarded_ranges(&self, file: FileId, except: StreamId) -> Vec<(u64, u64)> {
        let Some(fs) = self.files.get(&file) else {
            return Vec::new();
        };
        let mut v: Vec<(u64, u64)> = fs
            .each()
            .filter(|(id, _)| *id != except)
            .map(|(_, p)| {
                (
                    p.consumed.saturating_sub(self.cfg.drop_lag_bytes),
                    p.prefetched,
                )
            })
            .filter(|(a, b)| a < b)
            .collect();
        v.sort_unstable();
        v
    }

    /// Whether `n` more kept bytes fit: within the interval share, and within what the
    /// streams' unconsumed prefetch leaves of the usable budget.
    fn can_keep(&self, n: u64) -> bool {
        let usable = self.usable();
        let share = (usable as f64 * self.cfg.interval_share) as u64;
        // What the streams have resident (unconsumed prefetch, bytes within the drop lag)
        // counts too; their next reads' reservations do not (they would shut intervals out
        // whenever many streams are open).
        self.kept_bytes + n <= share && self.kept_bytes + n + self.resident_total <= usable
    }

    fn keep(&mut self, file: FileId, from: u64, to: u64) {
        let fs = self.files.entry(file).or_default();
        let before: u64 = fs.kept.iter().map(|(a, b)| b - a).sum();
        fs.kept.push((from, to));
        fs.kept = merge(std::mem::take(&mut fs.kept));
        let after: u64 = fs.kept.iter().map(|(a, b)| b - a).sum();
        self.kept_bytes += after - before;
    }

    /// Removes `[from, to)` from the kept ranges; returns the bytes removed.
    fn unkeep(&mut self, file: FileId, from: u64, to: u64) -> u64 {
        let Some(fs) = self.files.get_mut(&file) else {
            return 0;
        };
        let removed = crate::ledger::cut(&mut fs.kept, from, to);
        self.kept_bytes -= removed;
        removed
    }

    /// Ends stream `id`: everything it read or consumed and has not released is decided
    /// (kept for a follower or dropped); kept ranges of its file that no remaining stream
    /// will read are dropped.
    fn end_stream(&mut self, id: StreamId, drops: &mut Vec<Drop>) {
        let Some(s) = self.streams.get(&id).cloned() else {
            return;
        };
        let consumed = s.consumed_to.max(s.released_to);
        self.decide(s.file, id, s.released_to, consumed, false, drops);
        let read_to = s.prefetched_to.min(s.file_size).max(consumed);
        self.decide(s.file, id, consumed, read_to, true, drops);
        if let Some(gone) = self.streams.remove(&id) {
            self.unconsumed_total -= gone.unconsumed();
            self.held_total -= gone.held();
            self.resident_total -= gone.resident();
        }
        if s.weighted {
            self.weights = (self.weights - s.weight).max(0.0);
        }
        if self.streams.is_empty() {
            self.weights = 0.0;
        }
        if let Some(c) = s.client {
            if self.keyed.get(&(c, s.file)) == Some(&id) {
                self.keyed.remove(&(c, s.file));
            }
            if let Some(ids) = self.by_client.get_mut(&c) {
                ids.retain(|&x| x != id);
                if ids.is_empty() {
                    self.by_client.remove(&c);
                }
            }
        }
        self.totals.ended_streams += 1;
        self.reach.ended_at(consumed);
        let Some(fs) = self.files.get_mut(&s.file) else {
            return;
        };
        fs.remove(id);
        // Kept ranges are useful only to a stream that has not passed them, or to the
        // viewer expected behind the last one.
        self.release_kept_behind_tail(s.file, s.last_s);
        if self
            .files
            .get(&s.file)
            .is_some_and(|fs| fs.is_empty() && fs.kept.is_empty())
        {
            self.files.remove(&s.file);
        }
    }

    /// Dan & Sitaram: admit the intervals between consecutive streams of each file,
    /// smallest first, while their bytes fit `interval_share` of the usable budget; the
    /// largest admitted gap is the horizon. Recomputed at most once a second unless forced.
    fn refresh_horizon(&mut self, now_s: f64, force: bool) {
        if !force && self.streams.len() > 256 && now_s - self.horizon_at_s < 1.0 {
            return;
        }
        self.horizon_at_s = now_s;
        let budget = (self.usable() as f64 * self.cfg.interval_share) as u64;
        let mut gaps: Vec<u64> = Vec::new();
        let mut predicted: Vec<u64> = Vec::new();
        for (&file, fs) in &self.files {
            let mut pos = fs.order.iter().map(|&(c, _)| c);
            if let Some(mut prev) = pos.next() {
                for c in pos {
                    gaps.push(c - prev);
                    prev = c;
                }
            }
            // The interval to the viewer expected behind the last stream.
            let tail = fs.order.first().and_then(|(_, id)| self.streams.get(id));
            if let Some(i) = tail.and_then(|t| self.predicted_interval(file, t, now_s)) {
                predicted.push(i);
            }
        }
        // Followers that are there come first; the budget they leave goes to the
        // intervals predicted for followers still to come.
        let (horizon, used) = admit_smallest(gaps, budget, 0);
        let (predicted_horizon, _) = admit_smallest(predicted, budget, used);
        self.predicted_horizon_bytes = predicted_horizon;
        self.horizon_bytes = horizon;
    }
}

/// Admits `gaps` smallest first while their sum stays within `budget` (after `used`);
/// returns the largest admitted gap (0: none) and the budget used.
fn admit_smallest(mut gaps: Vec<u64>, budget: u64, mut used: u64) -> (u64, u64) {
    gaps.sort_unstable();
    let mut largest = 0;
    for g in gaps {
        if used + g > budget {
            break;
        }
        used += g;
        largest = g;
    }
    (largest, used)
}

/// Shares of the prefetch pool sum to this many pools. A stream's unconsumed prefetch is a
/// sawtooth from its read size down to zero, on average half of it, and streams are not in
/// step, so reads of twice the even share fit on average (the capacity bound's assumption,
/// docs/bench.md). The hard limit stays: a read never takes more than the other streams'
/// actual unconsumed bytes leave of the pool, so the budget is never exceeded.
const SAWTOOTH: f64 = 2.0;

/// A new stream's assumed gap between requests (a paced player's 512 KiB request at
/// youtube-2011's 419 kbit/s lasts 10 s).
const INITIAL_GAP_S: f64 = 10.0;

/// A stream's share weight: √bit rate (thesis 4.3).
fn weight(kbps: u32) -> f64 {
    f64::from(kbps.max(1)).sqrt()
}

/// Most a stream's request rate raises its weight over its bit rate's: a client on an
/// unlimited link asks as fast as the disk answers, and the bound reads such steps in one
/// piece rather than giving them memory.
const MAX_RATE_FACTOR: f64 = 8.0;

/// The weight of a stream of bit rate `kbps` that asks at `rate_kbps`: the square root of
/// how fast it consumes (thesis Eq. 4.4 per stream: the read size that minimises
/// positionings for the memory is ∝ √(bytes per second)), never below its bit rate's.
fn weight_at(kbps: u32, rate_kbps: f64) -> f64 {
    let floor = f64::from(kbps.max(1));
    rate_kbps.clamp(floor, MAX_RATE_FACTOR * floor).sqrt()
}

/// Sorted, merged copy of `v` (overlapping or touching ranges joined).
pub(crate) fn merge(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (a, b) in v {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// `[from, to)` minus the sorted ranges `holes`.
fn subtract(from: u64, to: u64, holes: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = from;
    for &(a, b) in &merge(holes.to_vec()) {
        if b <= at || a >= to {
            continue;
        }
        if a > at {
            out.push((at, a.min(to)));
        }
        at = at.max(b);
        if at >= to {
            break;
        }
    }
    if at < to {
        out.push((at, to));
    }
    out
}

/// Page-aligned part of a drop: whole pages only, except that a range reaching the end of
/// the file takes its last partial page too.
pub fn page_aligned(start: u64, end: u64, file_size: u64, page: u64) -> Option<(u64, u64)> {
    let a = start.div_ceil(page) * page;
    let b = if end >= file_size {
        file_size.div_ceil(page) * page
    } else {
        end / page * page
    };
    (a < b).then_some((a, b))
}

#[cfg(test)]
mod tests;
