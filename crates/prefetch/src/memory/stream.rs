//! The manager's ledger of streams: one viewer's positions in one file, each file's streams
//! ordered by position, and what the manager learns of the audience (arrivals, viewing depth).

use crate::policy::FileId;
use crate::Map;

/// Opaque stream handle.
pub type StreamId = u64;

#[derive(Clone, Debug)]
pub(super) struct Stream {
    pub(super) file: FileId,
    pub(super) client: Option<u64>,
    pub(super) file_size: u64,
    /// Bytes below this were consumed (sent, or asked past).
    pub(super) consumed_to: u64,
    /// Bytes below this were decided (dropped or kept).
    pub(super) released_to: u64,
    /// End of the furthest read made for this stream.
    pub(super) prefetched_to: u64,
    /// Length of its last read: what its next read will need.
    pub(super) last_read: u64,
    /// Bit rate (the file's, from the caller): how fast playback consumes.
    pub(super) kbps: u32,
    /// How fast it actually asks (kbit/s): running mean of the progress between its
    /// requests over the time between them. A player filling its buffer asks faster than
    /// its bit rate.
    pub(super) rate_kbps: f64,
    /// Offset and time of the request its rate is measured from (requests less than 50 ms
    /// apart, such as the parallel ranges of one player, count as one).
    pub(super) asked_at: u64,
    pub(super) asked_s: f64,
    pub(super) weight: f64,
    /// Whether `weight` counts in the pool's shares now (not idle).
    pub(super) weighted: bool,
    /// Running mean of the seconds between this stream's requests.
    pub(super) gap_s: f64,
    pub(super) last_s: f64,
    /// The viewer's connection closed: it gives up its read-ahead after `min_idle_s`
    /// unless it asks again.
    pub(super) closed: bool,
}

impl Stream {
    pub(super) fn unconsumed(&self) -> u64 {
        self.prefetched_to.saturating_sub(self.consumed_to)
    }

    /// What the stream has in memory now: unconsumed prefetch and sent bytes within the
    /// drop lag.
    pub(super) fn resident(&self) -> u64 {
        self.unconsumed() + self.consumed_to.saturating_sub(self.released_to)
    }

    /// What the stream holds of the budget: the larger of its unconsumed prefetch and its
    /// next read (its last read's size, none once it reached the end of the file), plus the
    /// bytes it sent but has not released yet (within the drop lag).
    pub(super) fn held(&self) -> u64 {
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
pub(super) struct Pos {
    pub(super) consumed: u64,
    pub(super) prefetched: u64,
}

/// The streams of one file and its kept ranges. Positions are also ordered by consumed
/// offset, so that the questions asked on every request (is a follower close behind, which
/// stream is the last) cost a lookup instead of a pass over every viewer of the file — a
/// popular title has thousands.
#[derive(Clone, Debug, Default)]
pub(super) struct FileState {
    pub(super) pos: Map<StreamId, Pos>,
    /// `(consumed, id)` of every stream in `pos`; among equal offsets the older stream
    /// (smaller id) comes first.
    pub(super) order: std::collections::BTreeSet<(u64, StreamId)>,
    /// Sorted, disjoint kept `[start, end)` ranges.
    pub(super) kept: Vec<(u64, u64)>,
    /// The file's size, as its latest request gave it.
    pub(super) size: u64,
}

impl FileState {
    pub(super) fn add(&mut self, id: StreamId, consumed: u64, prefetched: u64) {
        self.pos.insert(
            id,
            Pos {
                consumed,
                prefetched,
            },
        );
        self.order.insert((consumed, id));
    }

    pub(super) fn set(&mut self, id: StreamId, consumed: u64, prefetched: u64) {
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

    pub(super) fn remove(&mut self, id: StreamId) {
        if let Some(p) = self.pos.remove(&id) {
            self.order.remove(&(p.consumed, id));
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.pos.is_empty()
    }

    /// `(consumed, id)` of the streams consumed to an offset in `[lo, hi]`, lowest first.
    pub(super) fn consumed_within(
        &self,
        lo: u64,
        hi: u64,
    ) -> impl DoubleEndedIterator<Item = (u64, StreamId)> + '_ {
        let range = (lo <= hi).then_some((lo, StreamId::MIN)..=(hi, StreamId::MAX));
        range.into_iter().flat_map(|r| self.order.range(r)).copied()
    }

    /// The stream other than `except` furthest behind: `(consumed, id)`.
    pub(super) fn last_other(&self, except: StreamId) -> Option<(u64, StreamId)> {
        self.order.iter().copied().find(|&(_, id)| id != except)
    }

    /// Every stream with its position, furthest behind first.
    pub(super) fn each(&self) -> impl Iterator<Item = (StreamId, &Pos)> + '_ {
        self.order
            .iter()
            .filter_map(|(_, id)| self.pos.get(id).map(|p| (*id, p)))
    }
}

/// When viewers of one file arrive (streams opened at its beginning).
#[derive(Clone, Copy, Debug)]
pub(super) struct Arrivals {
    pub(super) last_s: f64,
    /// Running mean of the seconds between arrivals (`None` after the first).
    pub(super) gap_s: Option<f64>,
}

impl Arrivals {
    /// Seconds until the next viewer is expected: the usual gap, or longer when it has
    /// already been longer than that since the last one.
    pub(super) fn expected_gap_s(&self, now_s: f64) -> Option<f64> {
        self.gap_s.map(|g| g.max(now_s - self.last_s))
    }
}

/// Buckets of a [`Reach`] table: viewing depth in thousandths of the title.
const REACH_BUCKETS: usize = 1000;
/// The survival table is rebuilt after this many stream ends.
const REACH_REFRESH: u32 = 64;

/// Where streams ended, as a survival function of viewing depth measured as the share of
/// the title consumed: the share of viewers still watching at a given depth. Viewers leave
/// a title at a share of its length (thesis Fig. 3.4 gives the distribution: most stop in
/// the first fifth, a fifth watch to the end), so a depth in bytes means little across
/// titles of different lengths, and one table serves every title. Counts halve every few
/// thousand ends, so the table follows a changing audience.
#[derive(Clone, Debug, Default)]
pub(super) struct Reach {
    counts: Vec<f64>,
    total: f64,
    survival: Vec<f64>,
    since: u32,
}

/// The bucket holding depth `offset` of a `file_size`-byte title.
fn reach_bucket(offset: u64, file_size: u64) -> usize {
    if file_size == 0 {
        return REACH_BUCKETS - 1;
    }
    let share = offset as f64 / file_size as f64;
    ((share * REACH_BUCKETS as f64) as usize).min(REACH_BUCKETS - 1)
}

impl Reach {
    /// Notes a stream that ended after consuming `consumed` bytes of a `file_size`-byte title.
    pub(super) fn ended_at(&mut self, consumed: u64, file_size: u64) {
        if self.counts.is_empty() {
            self.counts = vec![0.0; REACH_BUCKETS];
        }
        self.counts[reach_bucket(consumed, file_size)] += 1.0;
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

    /// Share of ended streams that consumed beyond the bucket holding depth `offset` of a
    /// `file_size`-byte title (1 before any stream ended).
    pub(super) fn survival(&self, offset: u64, file_size: u64) -> f64 {
        self.survival
            .get(reach_bucket(offset, file_size))
            .copied()
            .unwrap_or(1.0)
    }

    /// Share of ended streams that reached the bucket holding depth `offset`.
    pub(super) fn reached(&self, offset: u64, file_size: u64) -> f64 {
        match reach_bucket(offset, file_size) {
            0 => 1.0,
            i => self.survival.get(i - 1).copied().unwrap_or(1.0),
        }
    }

    /// The first byte of the bucket after the one holding `offset`.
    pub(super) fn next_bucket_start(offset: u64, file_size: u64) -> u64 {
        let i = reach_bucket(offset, file_size) as u64 + 1;
        let b = (file_size as u128 * i as u128).div_ceil(REACH_BUCKETS as u128) as u64;
        b.max(offset + 1)
    }

    /// Whether any stream has ended yet.
    pub(super) fn is_known(&self) -> bool {
        !self.survival.is_empty()
    }
}

/// A stream opened this close to the start of its file is a new viewer of it (an arrival).
pub(super) const ARRIVAL_BYTES: u64 = 64 << 10;
/// Files without an arrival for this long are forgotten.
pub(super) const ARRIVALS_TTL_S: f64 = 3600.0;
