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
//! What to keep of consumed bytes is the *retention* ([`retention`], chosen by
//! [`MemoryConfig::retention`]): the rules above are the default, `followers+greedy-dual`;
//! others drop the followers, admit only valuable prefixes, or evict in FIFO, LRU, SIEVE or
//! S3-FIFO order ([`order`]). The ledger (stream positions, `memory/stream.rs`), the budget rules
//! here and the consumed-cache (`memory/cache.rs`) are the same whatever the retention, so the
//! server, the preload daemon and the memory replay differ only in that value.
//!
//! Pure: no clock, no file. The caller passes times and executes the drops; the engine
//! ([`crate::engine`]) does so for `vodkit serve` and `vodkit prefetchd`.

mod cache;
pub mod order;
pub mod ranges;
pub mod retention;
mod stream;

use crate::policy::FileId;
use crate::Map;
use cache::ConsumedCache;
pub(crate) use ranges::merge;
use ranges::{admit_smallest, subtract};
pub use ranges::{page_aligned, Drop};
pub use retention::{Retention, RetentionSpec};
use serde::{Deserialize, Serialize};
pub use stream::StreamId;
use stream::{Arrivals, FileState, Reach, Stream, ARRIVALS_TTL_S, ARRIVAL_BYTES};

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
    /// What the manager keeps of consumed bytes ([`retention`]).
    #[serde(default)]
    pub retention: RetentionSpec,
    /// Whether reads stop where viewers are likely to have left
    /// ([`MemoryManager::set_positioning_bytes`]): a read runs as far as its viewer is
    /// worth the transfer, from the survival of viewing depth, not always to the stream's
    /// share of the budget.
    #[serde(default = "yes")]
    pub survival_reads: bool,
}

fn yes() -> bool {
    true
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
            retention: RetentionSpec::default(),
            survival_reads: true,
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
    /// Reads cut where their viewer was likely to have left ([`MemoryManager::survival_len`];
    /// total).
    #[serde(default)]
    pub survival_cut_reads: u64,
    /// Bytes released but still resident, held by socket buffers (now).
    #[serde(default)]
    pub unreleased_bytes: u64,
    /// Bytes of the budget the rest of the process holds in its own memory (the live
    /// origin's window; now).
    #[serde(default)]
    pub other_bytes: u64,
    /// Streams that ended, by ttl or by a jump (total).
    pub ended_streams: u64,
    /// Reads sized by [`MemoryManager::capped_prefetch`] and the sum of the caps the budget
    /// allowed them, bytes (totals; a cap counts at most 1 TiB): their ratio is the mean
    /// cap, what the budget let a read be before the request's own length and the survival
    /// cut.
    #[serde(default)]
    pub sized_reads: u64,
    #[serde(default)]
    pub cap_bytes: u64,
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
    /// Consumed bytes no follower is kept for, in the retention's order.
    cache: ConsumedCache,
    /// Consumed ranges the retention did not admit to the cache: dropped at the next trim.
    refused: Vec<Drop>,
    /// How far viewers get into a file: where streams ended (consumed position), in
    /// [`REACH_BUCKET`] buckets, and the survival table derived from it.
    reach: Reach,
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
    /// What one positioning costs, in bytes the drive could transfer meanwhile
    /// ([`MemoryManager::set_positioning_bytes`]); 0 while unknown.
    positioning_bytes: u64,
    next_id: StreamId,
    totals: MemoryTotals,
}

impl MemoryManager {
    pub fn new(cfg: MemoryConfig) -> Self {
        MemoryManager {
            cache: ConsumedCache::new(cfg.retention),
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
            refused: Vec::new(),
            reach: Reach::default(),
            horizon_bytes: 0,
            predicted_horizon_bytes: 0,
            horizon_at_s: f64::NEG_INFINITY,
            arrivals: Map::default(),
            unreleased_bytes: 0,
            other_bytes: 0,
            positioning_bytes: 0,
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
        self.cache.remove(file, start, end, true);
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
            self.cache.remove(file, start, end, true);
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
    ///
    /// The result is then cut where the stream's viewer is no longer worth the transfer
    /// ([`MemoryManager::survival_len`]) when the caller told the manager what a positioning
    /// costs.
    pub fn capped_prefetch(&mut self, id: StreamId, wanted: u64, len: u64) -> u64 {
        let cap = self.prefetch_cap(id);
        self.totals.sized_reads += 1;
        self.totals.cap_bytes = self.totals.cap_bytes.saturating_add(cap.min(1 << 40));
        let capped = if wanted <= cap || wanted <= len {
            wanted
        } else {
            self.note_capped();
            if len == 0 {
                cap
            } else {
                let up = cap.div_ceil(len).saturating_mul(len);
                if up <= self.free_for(id) {
                    up.min(wanted)
                } else {
                    (cap / len).max(1) * len
                }
            }
        };
        match self.streams.get(&id) {
            Some(s) if self.cfg.survival_reads => {
                let offset = s.consumed_to;
                let cut = self.survival_len(offset, s.file_size, capped, len);
                if cut < capped {
                    self.totals.survival_cut_reads += 1;
                }
                cut
            }
            _ => capped,
        }
    }

    /// Tells the manager what one positioning of the drive costs, as the bytes it could
    /// transfer in that time (positioning seconds × transfer rate). Reading more at once
    /// saves positionings; reading bytes the viewer leaves before wastes transfer. With the
    /// price of both known, [`MemoryManager::capped_prefetch`] stops a read where the
    /// survival of viewing depth says the rest is not worth it. 0 turns that off.
    pub fn set_positioning_bytes(&mut self, bytes: u64) {
        self.positioning_bytes = bytes;
    }

    /// The length of a read from `offset` (of a `file_size`-byte file, at most `wanted`, at
    /// least `len`) that costs the least drive time per byte its viewer will consume: the
    /// read costs one positioning plus its bytes, and a byte at depth `x` is consumed by
    /// the share of the viewers at `offset` still watching at `x` (the survival of viewing
    /// depth, [`Reach`]). With everyone watching to the end the whole of `wanted` wins;
    /// where many leave, the marginal byte's chance of being watched falls below the
    /// read's cost per watched byte and the read stops there. Rounded up to whole requests
    /// of `len` bytes, as [`MemoryManager::capped_prefetch`]'s cut is.
    pub fn survival_len(&self, offset: u64, file_size: u64, wanted: u64, len: u64) -> u64 {
        let p = self.positioning_bytes as f64;
        let end = wanted.min(file_size.saturating_sub(offset));
        if p <= 0.0 || !self.reach.is_known() || end <= len {
            return wanted;
        }
        let here = self.reach.reached(offset, file_size);
        if here <= 0.0 {
            return wanted;
        }
        let mut r = len;
        let mut used = len as f64;
        let (mut best, mut best_r) = ((p + r as f64) / used, r);
        while r < end {
            let x = offset + r;
            let step = (Reach::next_bucket_start(x, file_size) - x).min(end - r);
            used += step as f64 * (self.reach.reached(x, file_size) / here).min(1.0);
            r += step;
            let cost = (p + r as f64) / used;
            if cost < best {
                (best, best_r) = (cost, r);
            }
        }
        if best_r >= end {
            return wanted;
        }
        let whole = if len == 0 {
            best_r
        } else {
            best_r.div_ceil(len).saturating_mul(len)
        };
        whole.min(wanted)
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
        drops.append(&mut self.refused);
        while let Some(d) = self.cache.pop(0) {
            drops.push(d);
        }
        drops
    }

    /// Whether the manager still has streams, kept or cached ranges in `file`.
    pub fn tracks(&self, file: FileId) -> bool {
        self.files.contains_key(&file) || self.cache.has(file)
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
        let in_cache = self.cache.overlaps(file, start, end);
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
        t.consumed_cached_bytes = self.cache.bytes();
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
        let fs = self.files.entry(file).or_default();
        fs.size = file_size;
        fs.add(id, start, start);
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
        for (a, b) in self.cache.within(file, start, leader_pos) {
            if !self.can_keep(b - a) {
                break;
            }
            self.cache.remove(file, a, b, false);
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
        let intervals = self.cache.retention().keeps_intervals();
        let follower =
            intervals && leader_pos.is_some_and(|pos| self.has_follower(file, leader, pos, to));
        let anticipated = intervals && !abandoned && !follower && self.anticipates(file, leader);
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

    /// Offers consumed `[from, to)` of `file` to the consumed-cache; a range the retention
    /// does not admit is dropped at the next trim.
    fn cache(&mut self, file: FileId, from: u64, to: u64) {
        let value = self.cache_value(file, from);
        if !self.cache.offer(file, from, to, value) {
            self.refused.push(Drop {
                file,
                start: from,
                end: to,
            });
        }
    }

    /// What keeping consumed bytes of `file` from `offset` is worth, per byte and second:
    /// how often the file gets a new viewer (its arrival rate) times the share of viewers
    /// who read that far (the survival of viewing depth). Popular titles' beginnings
    /// score highest; the long tail and the ends of titles few watch to score lowest.
    fn cache_value(&self, file: FileId, offset: u64) -> f64 {
        let size = self.files.get(&file).map_or(0, |f| f.size);
        let reach = if size == 0 {
            1.0
        } else {
            self.reach.survival(offset, size)
        };
        let gap = self
            .arrivals
            .get(&file)
            .and_then(|a| a.gap_s)
            .unwrap_or(ARRIVALS_TTL_S)
            .max(1e-3);
        reach / gap
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
        let mut gone = std::mem::take(&mut self.refused);
        if self.cache.bytes() > 0 {
            let room = self.cache_room();
            while self.cache.bytes() > room {
                let Some(d) = self.cache.pop(room) else { break };
                gone.push(d);
            }
        }
        for d in gone {
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
        self.reach.ended_at(consumed, s.file_size);
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
        if !self.cache.retention().keeps_intervals() {
            return;
        }
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

#[cfg(test)]
mod tests;
