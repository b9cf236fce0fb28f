//! Memory replay: a workload's session list played at a session rate through the memory
//! manager `vodkit serve` uses ([`MemoryManager`]), on a drive reduced to its positioning
//! time and zoned transfer rate ([`DiskTerms`], the capacity bound's terms). It answers, for
//! the manager, the question the capacity bound answers for a perfect server: which share
//! of the requested bytes comes from memory, how much the disk reads, and the highest rate
//! at which the drive is at most as busy as a server's is at capacity. Comparing the two
//! separates what the memory policy loses from what the serving path loses
//! (docs/simulate.md, "Memory replay").
//!
//! The model, in the engine's terms: a request whose bytes are all resident is a hit;
//! otherwise the engine reads from the request's offset `max(len, prefetch)` bytes, where
//! the prefetch is the policy's size cut to the stream's share of the budget
//! ([`MemoryManager::prefetch_cap`]); the read costs one positioning plus its missing bytes
//! at the transfer rate and completes at once. The positioning follows the server's read
//! order ([`ReplayConfig::order`]): in arrival order a read lies at an independent place; in
//! sweeps (`vodkit serve`'s default) it is the bound's term for a sweep serving the reads a
//! queue holds at capacity ([`queued_reads`]; the bound assumes one read of each session in
//! progress). At capacity a read waits [`ReplayConfig::queue_wait_s`] in the queue on
//! average, which caps how busy the drive may be. The response is consumed
//! when the client's link has carried it; after its last response the viewer's connection
//! closes ([`MemoryManager::closed`], as `vodkit serve` reports it). Page residency is exactly what was read minus what
//! the manager dropped: the kernel never evicts, so the replay also reports the peak of
//! resident bytes against the budget the manager promised to respect.
//!
//! Pure and deterministic: no clock, no file, no randomness.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use vodkit_disk::model::DiskTerms;
use vodkit_prefetch::memory::{Drop, MemoryConfig, MemoryManager};
use vodkit_prefetch::policy::{ChainKind, FileId, Policy, ReadContext, DEFAULT_BITRATE_KBPS};
use vodkit_prefetch::{IoOrder, PolicySpec};
use vodkit_workload::model::{Catalog, ClientClass, Session};
use vodkit_workload::order::MinEntry;

/// One request of a replayed session.
#[derive(Clone, Debug, PartialEq)]
struct Req {
    file: FileId,
    start: u64,
    end: u64,
    /// Seconds after the session's start.
    at_s: f64,
    /// Seconds the client's link needs for the response (0 = unlimited).
    transfer_s: f64,
}

#[derive(Clone, Debug, PartialEq)]
struct Sess {
    /// Cumulative arrival gap: the session starts at `gap / rate`.
    gap: f64,
    kbps: u32,
    reqs: Vec<Req>,
}

/// A session list reduced to what the replay needs; independent of rate, drive and memory.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayWorkload {
    sessions: Vec<Sess>,
    sizes: Vec<u64>,
    /// Longest session (last request's offset plus its transfer), s.
    longest_s: f64,
    /// Requested bytes the memory sees before the measured window starts (a bench's
    /// fast-forward history); 0: one longest session.
    history_bytes: u64,
}

impl ReplayWorkload {
    /// On-demand sessions of `sessions` over the files of `catalog`; `classes` give the
    /// clients' link rates (none: unlimited links). Live viewers have no file requests and
    /// are left out.
    pub fn prepare(
        catalog: &Catalog,
        sessions: &[Session],
        classes: &[ClientClass],
    ) -> Result<ReplayWorkload, String> {
        let mut ids: HashMap<&str, (FileId, u64, u32)> = HashMap::new();
        let mut sizes = Vec::new();
        for r in catalog.titles.iter().flat_map(|t| &t.renditions) {
            for f in &r.files {
                let id = sizes.len() as FileId;
                sizes.push(f.size_bytes);
                ids.insert(f.path.as_str(), (id, f.size_bytes, r.bitrate_kbps));
            }
        }
        let links: HashMap<&str, f64> = classes
            .iter()
            .map(|c| (c.name.as_str(), c.bandwidth_bps as f64 / 8.0))
            .collect();
        let mut out = Vec::with_capacity(sessions.len());
        let (mut gap, mut longest) = (0.0f64, 0.0f64);
        for s in sessions {
            s.check_gap_schedule()
                .map_err(|e| format!("memory replay: {e}"))?;
            gap += s.gap;
            if s.live.is_some() || s.requests.is_empty() {
                continue;
            }
            let link = links.get(s.class.as_str()).copied().unwrap_or(0.0);
            let mut reqs = Vec::with_capacity(s.requests.len());
            let (mut at, mut prev_transfer) = (0.0f64, 0.0f64);
            let mut kbps = s.bitrate_kbps;
            for (i, r) in s.requests.iter().enumerate() {
                let path = r.path.trim_start_matches('/');
                let &(file, size, file_kbps) = ids.get(path).ok_or_else(|| {
                    format!(
                        "memory replay: session id {}: {} is not a file of the catalog",
                        s.id, r.path
                    )
                })?;
                kbps.get_or_insert(file_kbps);
                let (start, end) = r.span(size);
                let transfer_s = if link > 0.0 {
                    (end - start) as f64 / link
                } else {
                    0.0
                };
                if i > 0 {
                    at += r.pacing_s.max(prev_transfer);
                }
                prev_transfer = transfer_s;
                if end > start {
                    reqs.push(Req {
                        file,
                        start,
                        end,
                        at_s: at,
                        transfer_s,
                    });
                }
            }
            longest = longest.max(at + prev_transfer);
            out.push(Sess {
                gap,
                kbps: kbps.unwrap_or(DEFAULT_BITRATE_KBPS),
                reqs,
            });
        }
        if out.iter().all(|s| s.reqs.is_empty()) {
            return Err("memory replay: the sessions request no bytes".into());
        }
        Ok(ReplayWorkload {
            sessions: out,
            sizes,
            longest_s: longest,
            history_bytes: 0,
        })
    }

    /// Measure only after the memory has seen `bytes` of requests (and one longest
    /// session), as a bench point is judged after its fast-forward's history.
    pub fn after_history(mut self, bytes: u64) -> ReplayWorkload {
        self.history_bytes = bytes;
        self
    }

    /// When the measured window starts at `rate`: one longest session after the first
    /// arrival, or once the history's bytes have been requested if later; at most half of
    /// the arrivals' span.
    fn measured_from_s(&self, rate: f64) -> f64 {
        let end_s = self.arrivals_s(rate);
        let requested: u64 = self
            .sessions
            .iter()
            .flat_map(|s| &s.reqs)
            .map(|r| r.end - r.start)
            .sum();
        let history_s = if requested > 0 && end_s > 0.0 {
            self.history_bytes as f64 / (requested as f64 / end_s)
        } else {
            0.0
        };
        self.longest_s.max(history_s).min(0.5 * end_s)
    }

    /// Seconds the arrivals last at `rate` sessions/s.
    fn arrivals_s(&self, rate: f64) -> f64 {
        self.sessions.last().map_or(0.0, |s| s.gap / rate)
    }
}

/// How large the engine's reads are.
#[derive(Clone, Debug, PartialEq)]
pub enum Prefetch {
    /// As large as the stream's share of the budget allows (what `auto` starts from).
    Budget,
    /// A prefetch policy's size (non-adaptive: `auto` gets no observations here), still cut
    /// to the stream's share.
    Policy(PolicySpec),
    /// A server that knows where each viewer will stop: reads as large as the share, but
    /// never past the last byte the session will ask for. Not a real server's option; it
    /// measures what viewers who leave early cost the others.
    Oracle,
}

/// Everything a replay needs besides the workload and the rate.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayConfig {
    pub memory: MemoryConfig,
    pub disk: DiskTerms,
    pub prefetch: Prefetch,
    /// The order the server's device queue serves reads in, which sets what a read's
    /// positioning costs.
    pub order: IoOrder,
    /// Mean seconds a read may wait in the drive's queue at capacity. A drive that serves
    /// reads of `S` seconds with this wait is `2W/(S + 2W)` busy (an M/D/1 queue), the
    /// capacity is the rate that keeps it at most that busy, and a sweep orders the reads
    /// such a queue holds ([`queued_reads`]). `f64::INFINITY`: no queueing (a read of
    /// every session in progress waits at once, the bound's sweep; capacity at a full
    /// drive).
    pub queue_wait_s: f64,
}

/// The mean queueing wait of a read at capacity by default: the `pace:2s` criterion's
/// viewers tolerate about this much (docs/simulate.md, "Queueing").
pub const DEFAULT_QUEUE_WAIT_S: f64 = 0.5;

/// Reads pending at once (waiting or being served) at a drive `utilization` busy, as in an
/// M/D/1 queue: ρ + ρ²/(2(1 − ρ)); unbounded at 1. The sweep's positioning depends on how
/// many reads it can order, and a queue holds this many, not one per session in progress.
pub fn queued_reads(utilization: f64) -> f64 {
    let rho = utilization.clamp(0.0, 1.0);
    if rho >= 1.0 {
        return f64::INFINITY;
    }
    rho + rho * rho / (2.0 * (1.0 - rho))
}

impl ReplayConfig {
    /// How busy the drive may be when its reads take `service_s` each on average and wait
    /// [`ReplayConfig::queue_wait_s`] in its queue (M/D/1: W = ρS/(2(1 − ρ))).
    pub fn busy_limit(&self, service_s: f64) -> f64 {
        let w = self.queue_wait_s;
        if !w.is_finite() || service_s <= 0.0 {
            return 1.0;
        }
        let w = w.max(0.0);
        2.0 * w / (service_s + 2.0 * w)
    }

    /// The positioning a read costs with `open` sessions in progress and reads of
    /// `service_s` on average, s.
    fn positioning_s(&self, open: usize, service_s: f64) -> f64 {
        match self.order {
            IoOrder::Sweep => {
                let pending = queued_reads(self.busy_limit(service_s)).min(open.max(1) as f64);
                self.disk.positioning_for(pending.max(1.0))
            }
            IoOrder::Fifo | IoOrder::Deadline => self.disk.positioning_s,
        }
    }
}

/// What a replay at one rate measured over its steady window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplayResult {
    /// The manager's retention ([`vodkit_prefetch::memory::RetentionSpec`]).
    #[serde(default)]
    pub retention: String,
    /// The read order replayed ([`ReplayConfig::order`]).
    #[serde(default)]
    pub order: String,
    /// Sessions/s.
    pub rate: f64,
    /// The measured window: from one longest session after the first arrival to the last
    /// arrival, s.
    pub window_s: f64,
    pub requested_bytes: u64,
    /// Requested bytes that were resident when asked for.
    pub hit_bytes: u64,
    pub hit_fraction: f64,
    /// Bytes and reads that reached the drive.
    pub disk_bytes: u64,
    pub disk_reads: u64,
    pub mean_read_bytes: f64,
    /// Mean positioning charged per read, ms ([`ReplayConfig::order`]).
    #[serde(default)]
    pub mean_positioning_ms: f64,
    /// The busy fraction the drive may reach with this window's mean read
    /// ([`ReplayConfig::busy_limit`]); the capacity is the highest rate within it.
    #[serde(default = "full")]
    pub busy_limit: f64,
    /// The mean queue wait at capacity that set [`ReplayResult::busy_limit`], s
    /// ([`ReplayConfig::queue_wait_s`]; absent: no queueing).
    #[serde(default)]
    pub queue_wait_s: Option<f64>,
    /// Drive busy time over the window (1 = saturated).
    pub utilization: f64,
    pub disk_mb_s: f64,
    /// Highest resident bytes (read minus dropped) and the manager's usable budget.
    pub peak_resident_bytes: u64,
    pub usable_bytes: u64,
    /// Bytes the manager kept for followers and served from them (whole run).
    pub interval_hit_bytes: u64,
    /// Drops skipped because a stream claimed the range again by the time it was carried out.
    pub claimed_bytes: u64,
    /// Mean over the window's reads of the cap the budget allowed, bytes.
    pub mean_cap_bytes: f64,
    /// The manager's levels averaged over the window (sampled once a second): unconsumed
    /// read-ahead, kept intervals, consumed-cache, streams and those taking a pool share.
    pub mean_unconsumed_bytes: f64,
    pub mean_kept_bytes: f64,
    pub mean_cached_bytes: f64,
    pub mean_streams: f64,
    pub mean_weighted_streams: f64,
    /// Bytes read from disk for a stream and never requested by it (read-ahead of viewers
    /// who left), as a share of the bytes read.
    pub unrequested_read_fraction: f64,
    /// Shares of the window's sized reads that the budget cut and that the survival of
    /// viewing depth cut (the manager's `capped_reads` and `survival_cut_reads`,
    /// [`vodkit_prefetch::memory::MemoryTotals`]).
    #[serde(default)]
    pub capped_read_fraction: f64,
    #[serde(default)]
    pub survival_cut_fraction: f64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Request,
    Consumed,
}

/// What happens to a session's request; the heap keys it by time and a sequence number.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Event {
    kind: Kind,
    session: usize,
    req: usize,
}

/// What the replay tracks of one session's stream of one file.
#[derive(Default)]
struct Side {
    /// The manager's stream.
    id: u64,
    /// Bytes the session asked of the file so far (the chain's length for the policy).
    chain_bytes: u64,
    /// Whether the engine read for it inside the measured window; then the furthest byte
    /// read for it and the furthest it asked for since.
    read_in_window: bool,
    read_to: u64,
    asked_to: u64,
}

/// Resident byte ranges per file: what was read and not dropped.
#[derive(Default)]
struct Residency {
    files: HashMap<FileId, BTreeMap<u64, u64>>,
    bytes: u64,
    peak: u64,
}

impl Residency {
    /// Resident bytes of `[a, b)`.
    fn covered(&self, file: FileId, a: u64, b: u64) -> u64 {
        let Some(m) = self.files.get(&file) else {
            return 0;
        };
        let mut n = 0;
        let from = m.range(..=a).next_back().map_or(a, |(&s, _)| s);
        for (&s, &e) in m.range(from..b) {
            let (x, y) = (s.max(a), e.min(b));
            if y > x {
                n += y - x;
            }
        }
        n
    }

    fn add(&mut self, file: FileId, a: u64, b: u64) {
        let missing = (b - a) - self.covered(file, a, b);
        let m = self.files.entry(file).or_default();
        let (mut lo, mut hi) = (a, b);
        let from = m.range(..=a).next_back().map_or(a, |(&s, _)| s);
        let touching: Vec<(u64, u64)> = m
            .range(from..=b)
            .filter(|(&s, &e)| e >= a && s <= b)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in touching {
            m.remove(&s);
            lo = lo.min(s);
            hi = hi.max(e);
        }
        m.insert(lo, hi);
        self.bytes += missing;
        self.peak = self.peak.max(self.bytes);
    }

    fn remove(&mut self, file: FileId, a: u64, b: u64) {
        let gone = self.covered(file, a, b);
        let Some(m) = self.files.get_mut(&file) else {
            return;
        };
        let from = m.range(..=a).next_back().map_or(a, |(&s, _)| s);
        let touching: Vec<(u64, u64)> = m
            .range(from..b)
            .filter(|(_, &e)| e > a)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in touching {
            m.remove(&s);
            if s < a {
                m.insert(s, a);
            }
            if e > b {
                m.insert(b, e);
            }
        }
        self.bytes -= gone;
    }
}

/// Replays `w` at `rate` sessions/s.
pub fn replay(w: &ReplayWorkload, cfg: &ReplayConfig, rate: f64) -> ReplayResult {
    replay_traced(w, cfg, rate, &mut |_| {})
}

/// One request of the replay's stream, as it reached the manager.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TracedRequest {
    /// Seconds since the first arrival.
    pub t: f64,
    pub file: FileId,
    pub start: u64,
    pub end: u64,
    pub file_size: u64,
}

/// [`replay`], handing every request to `sink` in the order the manager sees them.
pub fn replay_traced(
    w: &ReplayWorkload,
    cfg: &ReplayConfig,
    rate: f64,
    sink: &mut dyn FnMut(TracedRequest),
) -> ReplayResult {
    let mut m = MemoryManager::new(cfg.memory.clone());
    let mut policy: Option<Box<dyn Policy>> = match &cfg.prefetch {
        Prefetch::Budget | Prefetch::Oracle => None,
        Prefetch::Policy(spec) => Some(spec.build()),
    };
    let mut res = Residency::default();
    let mut heap = BinaryHeap::new();
    let mut seq = 0u64;
    for (i, s) in w.sessions.iter().enumerate() {
        if let Some(r) = s.reqs.first() {
            let ev = Event {
                kind: Kind::Request,
                session: i,
                req: 0,
            };
            heap.push(MinEntry::new((s.gap / rate + r.at_s, seq), ev));
            seq += 1;
        }
    }
    let end_s = w.arrivals_s(rate);
    let from_s = w.measured_from_s(rate);
    let mut out = ReplayResult {
        retention: cfg.memory.retention.to_string(),
        order: cfg.order.name().to_string(),
        queue_wait_s: cfg.queue_wait_s.is_finite().then_some(cfg.queue_wait_s),
        rate,
        window_s: end_s - from_s,
        usable_bytes: cfg.memory.usable_bytes(),
        ..Default::default()
    };
    let mut busy_s = 0.0;
    let mut positioning_sum = 0.0;
    // Running mean of a read's service time, which sets how long a queue the drive holds.
    let mut service_s = cfg.disk.positioning_s + (1u64 << 20) as f64 / cfg.disk.transfer_bytes_s;
    // Sessions between their first request and their last response's delivery.
    let mut open = 0usize;
    let mut cap_sum = 0.0;
    let mut next_expire = 1.0;
    let mut claimed = 0u64;
    let (mut samples, mut levels) = (0.0f64, [0.0f64; 5]);
    // The manager's cut counters when the window began (its first sample).
    let (mut cut0, mut capped0, mut sized0) = (0u64, 0u64, 0u64);
    let mut sides: HashMap<(usize, FileId), Side> = HashMap::new();
    while let Some(MinEntry {
        key: (now, _),
        value: ev,
    }) = heap.pop()
    {
        if now > end_s {
            break;
        }
        while next_expire <= now {
            let drops = m.expire(next_expire);
            apply(&m, &mut res, drops, &mut claimed);
            if next_expire >= from_s {
                let t = m.totals();
                if samples == 0.0 {
                    (cut0, capped0, sized0) = (t.survival_cut_reads, t.capped_reads, t.sized_reads);
                }
                samples += 1.0;
                levels[0] += t.unconsumed_bytes as f64;
                levels[1] += t.kept_bytes as f64;
                levels[2] += t.consumed_cached_bytes as f64;
                levels[3] += t.streams as f64;
                levels[4] += t.weighted_streams as f64;
            }
            next_expire += 1.0;
        }
        let s = &w.sessions[ev.session];
        let r = &s.reqs[ev.req];
        let size = w.sizes[r.file as usize];
        let counted = now >= from_s;
        match ev.kind {
            Kind::Request => {
                if ev.req == 0 {
                    open += 1;
                }
                sink(TracedRequest {
                    t: now,
                    file: r.file,
                    start: r.start,
                    end: r.end,
                    file_size: size,
                });
                let client = Some(ev.session as u64);
                let (id, drops) = m.request(r.file, client, r.start, r.end, size, s.kbps, now);
                apply(&m, &mut res, drops, &mut claimed);
                let side = sides.entry((ev.session, r.file)).or_default();
                side.id = id;
                let len = r.end - r.start;
                let resident = res.covered(r.file, r.start, r.end);
                if resident < len {
                    let ctx = ReadContext {
                        file: r.file,
                        offset: r.start,
                        len,
                        file_size: size,
                        bitrate_kbps: Some(s.kbps),
                        chain_bytes: side.chain_bytes,
                        chain_kind: ChainKind::default(),
                        now_s: now,
                    };
                    let wanted = match (&mut policy, &cfg.prefetch) {
                        (Some(p), _) => p.prefetch_bytes(&ctx),
                        (None, Prefetch::Oracle) => s
                            .reqs
                            .iter()
                            .filter(|q| q.file == r.file)
                            .map(|q| q.end)
                            .max()
                            .unwrap_or(r.end)
                            .saturating_sub(r.start),
                        (None, _) => u64::MAX,
                    };
                    let cap = m.prefetch_cap(id);
                    let positioning = cfg.positioning_s(open, service_s);
                    m.set_positioning_bytes((positioning * cfg.disk.transfer_bytes_s) as u64);
                    let prefetch = m.capped_prefetch(id, wanted, len);
                    let read_len = ctx.read_len(prefetch);
                    let (a, b) = (r.start, r.start + read_len);
                    let missing = read_len - res.covered(r.file, a, b);
                    res.add(r.file, a, b);
                    let drops = m.read(id, a, b);
                    apply(&m, &mut res, drops, &mut claimed);
                    let took = positioning + missing as f64 / cfg.disk.transfer_bytes_s;
                    service_s += (took - service_s) / SERVICE_MEAN_READS;
                    if counted {
                        out.disk_reads += 1;
                        out.disk_bytes += missing;
                        positioning_sum += positioning;
                        busy_s += took;
                        cap_sum += cap.min(1 << 40) as f64;
                        side.read_in_window = true;
                        side.read_to = side.read_to.max(b);
                    }
                }
                side.chain_bytes += len;
                if counted {
                    out.requested_bytes += len;
                    out.hit_bytes += resident;
                    if side.read_in_window {
                        side.asked_to = side.asked_to.max(r.end);
                    }
                }
                let consumed = Event {
                    kind: Kind::Consumed,
                    ..ev
                };
                heap.push(MinEntry::new((now + r.transfer_s, seq), consumed));
                seq += 1;
                if let Some(next) = s.reqs.get(ev.req + 1) {
                    let ev = Event {
                        kind: Kind::Request,
                        session: ev.session,
                        req: ev.req + 1,
                    };
                    heap.push(MinEntry::new((s.gap / rate + next.at_s, seq), ev));
                    seq += 1;
                }
            }
            Kind::Consumed => {
                if let Some(id) = sides.get(&(ev.session, r.file)).map(|x| x.id) {
                    let drops = m.consumed(id, r.end, now);
                    apply(&m, &mut res, drops, &mut claimed);
                }
                if ev.req + 1 == s.reqs.len() {
                    // The viewer's last response is through: its player closes the
                    // connection, which `vodkit serve` tells the manager.
                    m.closed(ev.session as u64);
                    open = open.saturating_sub(1);
                }
            }
        }
    }
    let t = m.totals();
    out.hit_fraction = ratio(out.hit_bytes as f64, out.requested_bytes as f64);
    out.mean_read_bytes = ratio(out.disk_bytes as f64, out.disk_reads as f64);
    out.mean_positioning_ms = 1e3 * ratio(positioning_sum, out.disk_reads as f64);
    out.mean_cap_bytes = ratio(cap_sum, out.disk_reads as f64);
    out.utilization = ratio(busy_s, out.window_s);
    out.busy_limit = if out.disk_reads > 0 {
        cfg.busy_limit(busy_s / out.disk_reads as f64)
    } else {
        1.0
    };
    out.disk_mb_s = ratio(out.disk_bytes as f64 / 1e6, out.window_s);
    out.peak_resident_bytes = res.peak;
    out.interval_hit_bytes = t.interval_hit_bytes;
    out.claimed_bytes = claimed;
    let unrequested: u64 = sides
        .values()
        .filter(|x| x.read_in_window)
        .map(|x| x.read_to.saturating_sub(x.asked_to))
        .sum();
    out.unrequested_read_fraction = ratio(unrequested as f64, out.disk_bytes as f64);
    let per = |x: f64| ratio(x, samples);
    out.mean_unconsumed_bytes = per(levels[0]);
    out.mean_kept_bytes = per(levels[1]);
    out.mean_cached_bytes = per(levels[2]);
    out.mean_streams = per(levels[3]);
    out.mean_weighted_streams = per(levels[4]);
    let sized = t.sized_reads.saturating_sub(sized0) as f64;
    out.capped_read_fraction = ratio(t.capped_reads.saturating_sub(capped0) as f64, sized);
    out.survival_cut_fraction = ratio(t.survival_cut_reads.saturating_sub(cut0) as f64, sized);
    out
}

/// Reads over which the running mean service time is taken.
const SERVICE_MEAN_READS: f64 = 256.0;

fn full() -> f64 {
    1.0
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// Carries out the manager's drops on the residency, except ranges a stream claims again
/// (the engine's dropper skips those too).
fn apply(m: &MemoryManager, res: &mut Residency, drops: Vec<Drop>, claimed: &mut u64) {
    for d in drops {
        if m.claims(d.file, d.start, d.end) {
            *claimed += d.end - d.start;
        } else {
            res.remove(d.file, d.start, d.end);
        }
    }
}

/// The highest rate at which the replayed drive is at most as busy as its queue allows
/// ([`ReplayResult::busy_limit`]; bisection to 1%), with the replay at that rate; `None`
/// when even `lo` passes it.
pub fn capacity(w: &ReplayWorkload, cfg: &ReplayConfig, guess: f64) -> Option<ReplayResult> {
    let busy = |r: f64| replay(w, cfg, r);
    let within = |r: &ReplayResult| r.utilization <= r.busy_limit;
    let mut lo = guess.max(1e-3);
    let mut at_lo = busy(lo);
    while !within(&at_lo) {
        lo /= 2.0;
        if lo < 1e-3 {
            return None;
        }
        at_lo = busy(lo);
    }
    let mut hi = lo * 2.0;
    let mut doublings = 0;
    while within(&busy(hi)) {
        lo = hi;
        hi *= 2.0;
        doublings += 1;
        if doublings > 30 {
            return None;
        }
    }
    while hi - lo > 0.01 * lo {
        let mid = 0.5 * (lo + hi);
        if within(&busy(mid)) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(busy(lo))
}

pub mod export;

#[cfg(test)]
mod tests;
