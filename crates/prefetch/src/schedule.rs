//! Read ordering in a device's queue: which pending read the device's one worker serves
//! next (`--io-order` of `vodkit serve` and `vodkit prefetchd`).
//!
//! - [`IoOrder::Fifo`]: arrival order;
//! - [`IoOrder::Deadline`]: earliest deadline first, where a read's deadline is when the
//!   client that asked for it runs dry ([`Deadlines`]);
//! - [`IoOrder::Sweep`]: SCAN-EDF: reads are served in head-position order, one sweep per
//!   round (the elevator: a round serves the reads ahead of the head in its direction, the
//!   next round turns back), so the head never moves backwards within a round. A read
//!   whose deadline the sweep would miss, and which could still be served in time if it
//!   went now, goes first and starts a new round there. The default: on the emulated
//!   WD Red it serves more viewers than arrival order (docs/results/io-order/report.md).
//!
//! A read's [`Place`] on the device comes from [`crate::placement`] (the physical byte when
//! the filesystem tells, else the inode and offset).
//!
//! Pure: no clock and no file. The caller passes the time, each read's deadline and an
//! estimate of a read's service time; the engine ([`crate::engine`]) does so for its
//! per-device workers, the tests with a simulated drive.

use crate::policy::FileId;
use crate::Map;
use serde::{Deserialize, Serialize};
use strum::{Display, EnumString, IntoStaticStr, VariantNames};

/// How a device's queue orders its pending reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[derive(Display, EnumString, IntoStaticStr, VariantNames)]
#[strum(serialize_all = "lowercase", parse_err_ty = String, parse_err_fn = unknown_order)]
pub enum IoOrder {
    /// Arrival order.
    Fifo,
    /// Earliest deadline first (arrival order among equal deadlines).
    Deadline,
    /// Head-position order within rounds, deadlines permitting (SCAN-EDF).
    #[default]
    Sweep,
}

impl IoOrder {
    pub fn name(self) -> &'static str {
        self.into()
    }
}

fn unknown_order(s: &str) -> String {
    vodkit_units::unknown_choice("read order", s, IoOrder::VARIANTS)
}

/// Where a read lies on its device, ordered as the head meets them in an ascending sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Place {
    /// The byte on the device (from the filesystem's extent map).
    Physical(u64),
    /// The device byte is unknown: the file's inode and the offset in it (a filesystem
    /// allocates files made one after the other near each other). Orders after every
    /// physical place.
    Logical { ino: u64, offset: u64 },
}

impl Place {
    /// Where the head is after reading `len` bytes from here.
    pub fn after(self, len: u64) -> Place {
        match self {
            Place::Physical(p) => Place::Physical(p.saturating_add(len)),
            Place::Logical { ino, offset } => Place::Logical {
                ino,
                offset: offset.saturating_add(len),
            },
        }
    }
}

/// One pending read as the queue sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Read {
    /// Its place on the device.
    pub place: Place,
    /// Bytes it reads.
    pub len: u64,
    /// Engine-clock second its client runs dry (`f64::INFINITY`: no deadline).
    pub deadline_s: f64,
    /// Engine-clock second it was queued.
    pub queued_s: f64,
}

/// Longest a read waits, in engine-clock seconds, before it goes ahead of the order
/// (deadline and sweep): clients give up on a request after some seconds whatever their
/// buffer holds (players and the workloads' requests after 10 s), so a read whose deadline
/// is far away, or already past, still may not wait behind round after round.
pub const MAX_WAIT_S: f64 = 4.0;

/// A read the queue chose.
#[derive(Debug)]
pub struct Pick<T> {
    pub read: Read,
    pub item: T,
    /// The sweep round it belongs to (the sweep order; 0 in the others).
    pub round: u64,
    /// The sweep took it out of head order to meet its deadline (it starts a round).
    pub urgent: bool,
}

struct Entry<T> {
    read: Read,
    seq: u64,
    item: T,
}

/// A device's pending reads, served one at a time in an [`IoOrder`].
pub struct Queue<T> {
    order: IoOrder,
    pending: Vec<Entry<T>>,
    next_seq: u64,
    /// Where the last read served left the head (`None`: nothing served yet).
    head: Option<Place>,
    /// Where the last read served began: a descending round goes on below it.
    front: Option<Place>,
    /// The current round sweeps towards higher places.
    ascending: bool,
    round: u64,
    max_wait_s: f64,
}

impl<T> Queue<T> {
    pub fn new(order: IoOrder) -> Queue<T> {
        Queue {
            order,
            pending: Vec::new(),
            next_seq: 0,
            head: None,
            front: None,
            ascending: true,
            round: 0,
            max_wait_s: MAX_WAIT_S,
        }
    }

    /// The longest a read waits before it goes first (deadline and sweep orders);
    /// `f64::INFINITY`: never.
    pub fn with_max_wait(mut self, max_wait_s: f64) -> Queue<T> {
        self.max_wait_s = max_wait_s;
        self
    }

    pub fn order(&self) -> IoOrder {
        self.order
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Where the last read served left the head.
    pub fn head(&self) -> Option<Place> {
        self.head
    }

    /// Queues a read.
    pub fn push(&mut self, read: Read, item: T) {
        self.pending.push(Entry {
            read,
            seq: self.next_seq,
            item,
        });
        self.next_seq += 1;
    }

    /// Updates the deadlines of the pending reads (a later request may need a queued read
    /// sooner): `f` gets each item and its deadline and returns the new one.
    pub fn refresh_deadlines(&mut self, mut f: impl FnMut(&T, f64) -> f64) {
        for e in &mut self.pending {
            e.read.deadline_s = f(&e.item, e.read.deadline_s);
        }
    }

    /// Takes the read to serve next at `now_s`. `cost(from, read)` estimates the seconds
    /// `read` takes with the head at `from` (`None`: unknown); only the sweep asks it.
    pub fn pick(
        &mut self,
        now_s: f64,
        cost: impl Fn(Option<Place>, &Read) -> f64,
    ) -> Option<Pick<T>> {
        if self.pending.is_empty() {
            return None;
        }
        let (i, urgent) = match (self.order, self.overdue(now_s)) {
            (IoOrder::Fifo, _) => (self.oldest(), false),
            (IoOrder::Deadline, Some(i)) => (i, false),
            (IoOrder::Deadline, None) => (self.earliest(), false),
            (IoOrder::Sweep, Some(i)) => {
                // It goes now, and a new round (same direction) starts at it.
                self.round += 1;
                (i, true)
            }
            (IoOrder::Sweep, None) => self.sweep_pick(now_s, &cost),
        };
        let e = self.pending.remove(i);
        self.head = Some(e.read.place.after(e.read.len));
        self.front = Some(e.read.place);
        Some(Pick {
            read: e.read,
            item: e.item,
            round: if self.order == IoOrder::Sweep {
                self.round
            } else {
                0
            },
            urgent,
        })
    }

    /// The read queued longest, if it has waited more than the longest wait.
    fn overdue(&self, now_s: f64) -> Option<usize> {
        let i = self.oldest();
        let e = self.pending.get(i)?;
        (now_s - e.read.queued_s > self.max_wait_s).then_some(i)
    }

    fn oldest(&self) -> usize {
        (0..self.pending.len())
            .min_by_key(|&i| self.pending[i].seq)
            .unwrap_or(0)
    }

    fn earliest(&self) -> usize {
        (0..self.pending.len())
            .min_by(|&a, &b| {
                let (x, y) = (&self.pending[a], &self.pending[b]);
                x.read
                    .deadline_s
                    .total_cmp(&y.read.deadline_s)
                    .then(x.seq.cmp(&y.seq))
            })
            .unwrap_or(0)
    }

    /// Whether `p` lies ahead of the head in the current round's direction: at or past
    /// the end of the last read going up, at or before its start going down.
    fn ahead(&self, p: Place) -> bool {
        match (self.head, self.front) {
            (Some(h), _) if self.ascending => p >= h,
            (_, Some(f)) if !self.ascending => p <= f,
            _ => true,
        }
    }

    /// Indices of the pending reads in the order the sweep would serve them from here:
    /// the rest of this round, then the next round (the other direction).
    fn sweep_order(&self) -> Vec<usize> {
        let (mut this, mut next): (Vec<usize>, Vec<usize>) =
            (0..self.pending.len()).partition(|&i| self.ahead(self.pending[i].read.place));
        let key = |i: &usize| (self.pending[*i].read.place, self.pending[*i].seq);
        this.sort_by_key(key);
        next.sort_by_key(key);
        if self.ascending {
            next.reverse();
        } else {
            this.reverse();
        }
        this.extend(next);
        this
    }

    fn sweep_pick(
        &mut self,
        now_s: f64,
        cost: &impl Fn(Option<Place>, &Read) -> f64,
    ) -> (usize, bool) {
        if !self.pending.iter().any(|e| self.ahead(e.read.place)) {
            // Nothing left ahead: the round ends and the head turns back.
            self.ascending = !self.ascending;
            self.round += 1;
        }
        let order = self.sweep_order();
        // Serving in sweep order, which reads would finish after their deadline although
        // going now would meet it?
        let (mut t, mut at) = (now_s, self.head);
        let mut endangered: Option<usize> = None;
        for &i in &order {
            let r = &self.pending[i].read;
            t += cost(at, r);
            at = Some(r.place.after(r.len));
            let in_time_now = now_s + cost(self.head, r) <= r.deadline_s;
            if t > r.deadline_s && in_time_now {
                let sooner = endangered.is_none_or(|j| {
                    let o = &self.pending[j];
                    r.deadline_s
                        .total_cmp(&o.read.deadline_s)
                        .then(self.pending[i].seq.cmp(&o.seq))
                        .is_lt()
                });
                if sooner {
                    endangered = Some(i);
                }
            }
        }
        match endangered {
            Some(i) if Some(&i) != order.first() => {
                // It goes now, and a new round (same direction) starts at it.
                self.round += 1;
                (i, true)
            }
            _ => (order[0], false),
        }
    }
}

/// How far ahead of a stream's end a request may start and still continue it (a player
/// that skips a little, or two viewers' streams told apart by position).
pub const STREAM_REACH: u64 = 64 << 20;

/// Streams not asked for this long are forgotten (thesis 5.3's chain gap).
const STREAM_IDLE_S: f64 = crate::chain::CHAIN_WINDOW_S;

/// When each stream's client runs dry, from what it has been sent and its bit rate.
///
/// A stream is a client's run of requests through a file (or, without a client key, a run
/// of requests through a file told apart by position, as the preload daemon sees them).
/// Its client is taken to play from the stream's first byte, starting when it first asked,
/// at the file's bit rate: everything before a request's offset was sent, so the client
/// holds `offset − played` bytes and runs dry at `start + (offset − first) / rate`. A
/// request whose client should already have run dry (it stalled, or paused) restarts the
/// stream's clock there: its deadline is now.
#[derive(Debug, Clone)]
pub struct Deadlines {
    streams: Map<(Option<u64>, FileId), Vec<Playback>>,
    count: usize,
    max_streams: usize,
    last_expiry_s: f64,
}

#[derive(Debug, Clone, Copy)]
struct Playback {
    /// Offset and engine-clock second playback is counted from.
    first: u64,
    start_s: f64,
    /// End of the furthest request.
    end: u64,
    last_s: f64,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines::new(100_000)
    }
}

impl Deadlines {
    /// At most `max_streams` tracked (beyond it the idlest are forgotten).
    pub fn new(max_streams: usize) -> Deadlines {
        Deadlines {
            streams: Map::default(),
            count: 0,
            max_streams: max_streams.max(1),
            last_expiry_s: 0.0,
        }
    }

    /// Streams tracked.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Notes that `client` (`None`: unknown) asks for `[offset, end)` of `file` at `now_s`,
    /// the file playing at `bytes_per_s`; returns when the client runs dry if the request
    /// is not served (never before `now_s`).
    pub fn request(
        &mut self,
        client: Option<u64>,
        file: FileId,
        offset: u64,
        end: u64,
        bytes_per_s: f64,
        now_s: f64,
    ) -> f64 {
        self.expire(now_s);
        let list = self.streams.entry((client, file)).or_default();
        let found = list
            .iter_mut()
            .filter(|p| {
                p.first <= offset
                    && offset <= p.end.saturating_add(STREAM_REACH)
                    && now_s - p.last_s <= STREAM_IDLE_S
            })
            .min_by_key(|p| p.end.abs_diff(offset));
        let deadline = match found {
            Some(p) => {
                let dry = if bytes_per_s > 0.0 {
                    p.start_s + (offset - p.first) as f64 / bytes_per_s
                } else {
                    f64::INFINITY
                };
                if dry < now_s {
                    // The client ran dry already (a stall, a pause): it plays on from here.
                    p.first = offset;
                    p.start_s = now_s;
                }
                p.end = p.end.max(end);
                p.last_s = now_s;
                dry.max(now_s)
            }
            None => {
                list.push(Playback {
                    first: offset,
                    start_s: now_s,
                    end,
                    last_s: now_s,
                });
                self.count += 1;
                now_s
            }
        };
        if self.count > self.max_streams {
            self.last_expiry_s = f64::MIN;
            self.expire(now_s);
        }
        deadline
    }

    /// Forgets idle streams (at most about once a second, or at once when over the limit).
    fn expire(&mut self, now_s: f64) {
        if now_s - self.last_expiry_s < 1.0 {
            return;
        }
        self.last_expiry_s = now_s;
        let mut idle = STREAM_IDLE_S;
        loop {
            let mut count = 0;
            self.streams.retain(|_, list| {
                list.retain(|p| now_s - p.last_s <= idle);
                count += list.len();
                !list.is_empty()
            });
            self.count = count;
            if self.count <= self.max_streams || idle <= 0.0 {
                break;
            }
            idle = if idle > 0.5 { idle / 2.0 } else { -1.0 };
        }
    }
}

#[cfg(test)]
mod tests;
