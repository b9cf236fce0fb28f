//! Pure, deterministic hard-disk timing model.
//!
//! A [`Drive`] has one actuator: it serves one request at a time, each costing positioning
//! (seek by distance plus rotational latency) and transfer (at the rate of the zones it
//! crosses). A request that starts exactly where the previous one ended continues without
//! positioning. Optional features: seeded random rotational latency instead of the average,
//! an on-drive read-ahead segment filled while the drive is idle (and, like a real drive's
//! segmented cache, several segments kept for the streams the head left), and command
//! queueing that serves the queued request with the shortest positioning time first (SPTF).
//!
//! Addresses are byte offsets in a span the caller chooses (the drive's own capacity by
//! default, or an emulated image that stands for the whole platter); offset / span is the
//! position on the surface. All times are seconds.

pub mod capacity;
pub mod preset;
pub mod seek;
pub mod spec;
pub mod sweep;
pub mod zones;

pub use capacity::{
    capacity, disk_terms, expected_random_mb_s, s_max_from, sequential_mb_s, DiskCapacity,
    DiskTerms,
};
pub use preset::{preset, Preset, PRESET_NAMES};
pub use seek::SeekCurve;
pub use spec::{DriveSpec, Published};
pub use sweep::{sweep_seek_ms, SweepTerms};
pub use zones::{ZoneProfile, MIB};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// How rotational latency is charged after a seek.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Rotation {
    /// Always half a revolution.
    Average,
    /// Uniform in `[0, one revolution)`, from a seeded generator.
    Random { seed: u64 },
}

/// How queued requests are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Queueing {
    /// In arrival order.
    Fifo,
    /// Shortest positioning time first among the oldest `depth` waiting requests.
    Sptf { depth: usize },
}

/// Behaviour switches of a [`Drive`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DriveOptions {
    pub rotation: Rotation,
    pub queueing: Queueing,
    /// Size of the on-drive read-ahead segment in bytes (0 = off).
    pub readahead_bytes: u64,
    /// Cache segments (with read-ahead on): when the head seeks away, the segment it leaves
    /// is kept, up to `segments - 1` of them, least recently used dropped first; a read that
    /// lies wholly in a kept segment is served from the cache. 1 = only the current one.
    #[serde(default = "one_segment")]
    pub segments: usize,
}

fn one_segment() -> usize {
    1
}

impl Default for DriveOptions {
    fn default() -> Self {
        DriveOptions {
            rotation: Rotation::Average,
            queueing: Queueing::Fifo,
            readahead_bytes: 0,
            segments: 1,
        }
    }
}

/// One read (or modelled write) request.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Byte offset within the span.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// Arrival time, s.
    pub arrival: f64,
}

/// How a request was served.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Service {
    /// Offset of the request served.
    pub offset: u64,
    /// When the actuator started on it, s.
    pub start: f64,
    /// Seek time, s (0 for a sequential continuation or a segment hit).
    pub seek: f64,
    /// Rotational latency, s.
    pub rotation: f64,
    /// Media transfer time, s.
    pub transfer: f64,
    /// Bytes served from the read-ahead segment.
    pub cached_bytes: u64,
    /// When it completed, s.
    pub finish: f64,
}

impl Service {
    /// Time the actuator spent on the request, s.
    pub fn busy(&self) -> f64 {
        self.seek + self.rotation + self.transfer
    }
}

/// A drive with a head position and a clock.
#[derive(Debug, Clone)]
pub struct Drive {
    spec: DriveSpec,
    opts: DriveOptions,
    span: f64,
    /// Byte offset just past the last transfer.
    head: u64,
    /// Start of the data held in the read-ahead segment (valid up to `head` + prefetch).
    segment_start: u64,
    /// Segments the head left, most recently used first (`[start, end)` byte ranges).
    kept: std::collections::VecDeque<(u64, u64)>,
    busy_until: f64,
    rng: ChaCha8Rng,
}

impl Drive {
    /// A drive at rest with its head at offset 0; addresses span the real capacity.
    pub fn new(spec: DriveSpec, opts: DriveOptions) -> Self {
        let span = spec.capacity_bytes as f64;
        let seed = match opts.rotation {
            Rotation::Random { seed } => seed,
            Rotation::Average => 0,
        };
        Drive {
            spec,
            opts,
            span,
            head: 0,
            segment_start: 0,
            kept: std::collections::VecDeque::new(),
            busy_until: 0.0,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// Let `span_bytes` of addresses stand for the whole surface (an emulated image
    /// smaller than the drive still sees every zone and full-stroke seeks).
    pub fn with_span(mut self, span_bytes: u64) -> Self {
        self.span = span_bytes.max(1) as f64;
        self
    }

    pub fn spec(&self) -> &DriveSpec {
        &self.spec
    }

    pub fn options(&self) -> &DriveOptions {
        &self.opts
    }

    /// Where the head is (byte offset just past the last transfer).
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Sequential transfer rate (bytes/s) at byte offset `offset`.
    pub fn rate_at(&self, offset: u64) -> f64 {
        self.spec.zones.rate_at(offset as f64 / self.span)
    }

    /// Seek time (s) for moving the head `distance` bytes.
    pub fn seek_time(&self, distance: u64) -> f64 {
        self.spec.seek.ms(distance as f64 / self.span) / 1000.0
    }

    /// Half a revolution, s.
    pub fn half_rotation(&self) -> f64 {
        spec::half_rotation_ms(self.spec.rpm) / 1000.0
    }

    /// Media transfer time (s) of `len` bytes starting at `offset`.
    pub fn transfer_time(&self, offset: u64, len: u64) -> f64 {
        let from = offset as f64 / self.span;
        let to = (offset + len) as f64 / self.span;
        self.spec.zones.transfer_secs(from, to, self.span)
    }

    /// Service time (s) of `req` with the head at `head`, average rotation, no segment:
    /// the pure function the simulator uses.
    pub fn service_time(&self, head: u64, offset: u64, len: u64) -> f64 {
        let positioning = if offset == head {
            0.0
        } else {
            self.seek_time(offset.abs_diff(head)) + self.half_rotation()
        };
        positioning + self.transfer_time(offset, len)
    }

    /// Serve one request at or after `arrival` (single actuator: it waits for the previous
    /// one) and move the head. This is what the emulated device calls per read.
    pub fn access(&mut self, offset: u64, len: u64, arrival: f64) -> Service {
        let start = arrival.max(self.busy_until);
        if self.kept_hit(offset, len) {
            // From a kept segment: no positioning, no media transfer; the head and the
            // current segment's idle read-ahead carry on undisturbed.
            return Service {
                offset,
                start,
                seek: 0.0,
                rotation: 0.0,
                transfer: 0.0,
                cached_bytes: len,
                finish: start,
            };
        }
        let prefetched = self.prefetched_bytes(start);
        let cached_end = self.head + prefetched;
        let hit =
            self.opts.readahead_bytes > 0 && offset >= self.segment_start && offset < cached_end;
        let (seek, rotation, cached_bytes, media_from) = if hit {
            let cached = (offset + len).min(cached_end) - offset;
            (0.0, 0.0, cached, offset + cached)
        } else if offset == self.head || (prefetched > 0 && offset == cached_end) {
            (0.0, 0.0, 0, offset)
        } else {
            let from = cached_end;
            self.keep_segment(self.segment_start, cached_end);
            (
                self.seek_time(offset.abs_diff(from)),
                self.rotational_latency(),
                0,
                offset,
            )
        };
        let transfer = self.transfer_time(media_from, offset + len - media_from);
        let finish = start + seek + rotation + transfer;
        self.busy_until = finish;
        self.head = offset + len;
        self.segment_start = if hit { self.segment_start } else { offset };
        if self.opts.readahead_bytes > 0
            && self.head - self.segment_start > self.opts.readahead_bytes
        {
            self.segment_start = self.head - self.opts.readahead_bytes;
        }
        Service {
            offset,
            start,
            seek,
            rotation,
            transfer,
            cached_bytes,
            finish,
        }
    }

    /// Whether `[offset, offset + len)` lies wholly in a kept segment (which then becomes the
    /// most recently used).
    fn kept_hit(&mut self, offset: u64, len: u64) -> bool {
        let found = self
            .kept
            .iter()
            .position(|&(a, b)| a <= offset && offset + len <= b);
        if let Some(i) = found {
            if let Some(seg) = self.kept.remove(i) {
                self.kept.push_front(seg);
            }
        }
        found.is_some()
    }

    /// The head leaves the current segment `[start, end)`: keep it if there is room.
    fn keep_segment(&mut self, start: u64, end: u64) {
        let room = self.opts.segments.saturating_sub(1);
        if self.opts.readahead_bytes == 0 || room == 0 || end <= start {
            return;
        }
        self.kept.retain(|&(a, b)| b <= start || end <= a);
        self.kept.push_front((start, end));
        self.kept.truncate(room);
    }

    /// Bytes read ahead into the segment while idle until `now`.
    fn prefetched_bytes(&self, now: f64) -> u64 {
        if self.opts.readahead_bytes == 0 || now <= self.busy_until {
            return 0;
        }
        let room = self.opts.readahead_bytes;
        let rate = self.rate_at(self.head);
        (((now - self.busy_until) * rate) as u64).min(room)
    }

    fn rotational_latency(&mut self) -> f64 {
        let period = 2.0 * self.half_rotation();
        match self.opts.rotation {
            Rotation::Average => period / 2.0,
            Rotation::Random { .. } => self.rng.random::<f64>() * period,
        }
    }

    /// Serve a whole request stream in the configured queueing order; returns one
    /// [`Service`] per request in the order they were served.
    pub fn serve(&mut self, requests: &[Request]) -> Vec<Service> {
        let mut pending: Vec<Request> = requests.to_vec();
        pending.sort_by(|a, b| a.arrival.total_cmp(&b.arrival));
        let mut done = Vec::with_capacity(pending.len());
        while !pending.is_empty() {
            let now = self.busy_until.max(pending[0].arrival);
            let pick = match self.opts.queueing {
                Queueing::Fifo => 0,
                Queueing::Sptf { depth } => self.shortest_positioning(&pending, now, depth.max(1)),
            };
            let r = pending.remove(pick);
            done.push(self.access(r.offset, r.len, r.arrival));
        }
        done
    }

    /// Index of the waiting request (among the oldest `depth` arrived by `now`) that the
    /// head reaches soonest; ties go to the oldest.
    fn shortest_positioning(&self, pending: &[Request], now: f64, depth: usize) -> usize {
        let waiting = pending
            .iter()
            .take(depth)
            .take_while(|r| r.arrival <= now)
            .count()
            .max(1);
        (0..waiting)
            .min_by(|&a, &b| {
                let cost = |r: &Request| self.service_time(self.head, r.offset, 0);
                cost(&pending[a])
                    .total_cmp(&cost(&pending[b]))
                    .then(a.cmp(&b))
            })
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests;
