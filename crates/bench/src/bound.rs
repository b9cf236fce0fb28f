//! The capacity bound: the highest session rate *any* server could sustain for a workload on
//! a modelled drive with a memory budget (zero CPU cost, perfect use of memory), so that every
//! measured capacity can be read as a fraction of it. The derivation is in docs/bench.md,
//! section "The capacity bound".
//!
//! Pure: the caller passes the catalog, the sessions, the client classes, the drive preset and
//! the budget; nothing here reads a file or a clock.
//!
//! The model in one paragraph. At rate λ (the load tool's `--rate`) session i starts at
//! G_i / λ, where G_i is the sum of the session list's gaps up to i. Every request is a *step*:
//! its new bytes b (watched bytes not requested earlier in the session, clipped to the file)
//! are consumed when the request starts, and the step lasts τ seconds until the next request
//! starts (pacing, or the transfer at the client's link bandwidth). A server reading a step's
//! stream in pieces of P ≥ b bytes positions the head b/P times per step and holds (P − b)/2
//! unconsumed bytes on average; minimizing positionings under a memory budget gives the
//! square-root rule P = κ·√(b/τ) (thesis Eq. 4.4), floored at b. Bytes read again by a later
//! session of the same file are disk-free when the interval between the two reads is kept in
//! memory (Dan & Sitaram interval caching, per byte between consecutive readers), at a cost
//! of bytes × gap byte-seconds; the cheapest intervals are admitted first. Disk time per
//! second is positionings × t_pos + bytes / R; the bound is the largest λ at which it is ≤ 1.
//! t_pos is the cheaper of a read at an independent place and a read in a sweep serving one
//! read of each of the N streams active at λ (`vodkit_disk::model::sweep`: a server that
//! orders its reads by head position seeks shorter), so the bound stays an upper bound for
//! servers that sweep.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
pub use vodkit_disk::model::{disk_terms, DiskTerms};
use vodkit_prefetch::memory::ranges::{merge, subtract};
use vodkit_workload::model::{Catalog, ClientClass, Session};

/// A measured capacity may exceed the bound by this fraction before it is called an error
/// (the search's own precision and the model's discretization).
pub const TOLERANCE: f64 = 0.02;

/// Interval-memory shares tried between 0 and all of the usable budget (steps of 5%).
pub const SPLIT_STEPS: u32 = 20;

/// The memory the bound may use: the budget less the reserve kept for the kernel and others.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MemoryTerms {
    pub budget_bytes: u64,
    pub reserve_bytes: u64,
}

impl MemoryTerms {
    /// The memory manager's reserve for `budget_bytes`: max(64 MiB, 5%), at most half.
    pub fn for_budget(budget_bytes: u64) -> MemoryTerms {
        MemoryTerms {
            budget_bytes,
            reserve_bytes: vodkit_prefetch::memory::default_reserve(budget_bytes),
        }
    }

    pub fn usable_bytes(&self) -> u64 {
        self.budget_bytes.saturating_sub(self.reserve_bytes)
    }
}

/// One request's new bytes and how long its step lasts (0 = consumed instantly).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Step {
    bytes: u64,
    tau: f64,
}

/// Bytes of a step that an earlier session read too: `dgap` is the difference of the two
/// sessions' cumulative gaps, `doff` the difference of the two reads' offsets in their
/// sessions (s), so the reads lie `dgap / λ + doff` seconds apart.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Reuse {
    step: usize,
    bytes: u64,
    dgap: f64,
    doff: f64,
    /// The earlier reader's offset in its own session when it read the bytes, s: the
    /// later session had started by then when `dgap / λ ≤ lead_off`.
    lead_off: f64,
}

/// What a server is granted to know of later readers when it keeps bytes for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Foresight {
    /// Every later reader of every byte, however far ahead (the bound).
    Full,
    /// Only readers that have already started: a byte is kept for a later session only
    /// when that session had arrived by the time the earlier one read the byte (online
    /// interval caching, Dan & Sitaram). Still knows how far each viewer reads.
    StartedFollowers,
}

impl Foresight {
    /// Whether `r` may be kept at rate `lambda`.
    fn allows(self, r: &Reuse, lambda: f64) -> bool {
        match self {
            Foresight::Full => true,
            Foresight::StartedFollowers => r.dgap / lambda <= r.lead_off,
        }
    }
}

/// A session list reduced to what the bound needs; independent of rate, drive and memory.
#[derive(Debug, Clone)]
pub struct Workload {
    sessions: usize,
    /// Sum of all arrival gaps: the list lasts `gap_sum / λ` seconds at rate λ.
    gap_sum: f64,
    steps: Vec<Step>,
    reuses: Vec<Reuse>,
    /// Watched bytes of all sessions (union of each session's ranges, clipped to the files).
    watched_bytes: u64,
    /// Σ τ over all steps: stream-seconds of the list (Little's law turns it into N).
    stream_seconds: f64,
    /// Most common session bit rate, kbit/s (0 when no session names one).
    ref_bitrate_kbps: u32,
    /// Step classes `(bytes, τ bits) → count` without any cache hit.
    classes: HashMap<(u64, u64), u64>,
    /// Σ n²/(2·link) over all requests of n bytes: byte-seconds of response bytes not yet
    /// delivered over the client's link (0 with unlimited links).
    transfer_byte_seconds: f64,
}

/// Last reader of a byte segment `[start, end)` of one file.
#[derive(Debug, Clone, Copy)]
struct Reader {
    end: u64,
    gap: f64,
    off: f64,
}

/// Record that a session (cumulative gap `gap`, offset `off`) reads `[a, b)` of a file whose
/// readers so far are `map`; returns the overlaps with earlier readers as
/// `(bytes, their gap, their offset)`.
fn read_range(
    map: &mut BTreeMap<u64, Reader>,
    a: u64,
    b: u64,
    gap: f64,
    off: f64,
) -> Vec<(u64, f64, f64)> {
    let mut hits = Vec::new();
    let mut keys: Vec<u64> = Vec::new();
    if let Some((&s, r)) = map.range(..a).next_back() {
        if r.end > a {
            keys.push(s);
        }
    }
    keys.extend(map.range(a..b).map(|(&s, _)| s));
    for s in keys {
        let Some(r) = map.remove(&s) else { continue };
        let (x, y) = (s.max(a), r.end.min(b));
        if y > x {
            hits.push((y - x, r.gap, r.off));
        }
        if s < a {
            map.insert(
                s,
                Reader {
                    end: a,
                    gap: r.gap,
                    off: r.off,
                },
            );
        }
        if r.end > b {
            map.insert(
                b,
                Reader {
                    end: r.end,
                    gap: r.gap,
                    off: r.off,
                },
            );
        }
    }
    map.insert(a, Reader { end: b, gap, off });
    hits
}

/// Add `[a, b)` to a sorted, disjoint range list.
fn insert_range(seen: &mut Vec<(u64, u64)>, a: u64, b: u64) {
    seen.push((a, b));
    *seen = merge(std::mem::take(seen));
}

/// Reduce a session list to steps and reuses. `classes` are the workload's client classes
/// (their bandwidth paces unpaced requests); with none, every link counts as unlimited.
pub fn prepare(
    catalog: &Catalog,
    sessions: &[Session],
    classes: &[ClientClass],
) -> Result<Workload, String> {
    prepare_after(catalog, sessions, classes, 0)
}

/// [`prepare`] for `sessions[history..]`, after `sessions[..history]` have been read: the
/// history's sessions count for nothing themselves, but the later sessions may reuse what
/// they read (as a bench point is judged after its fast-forward's history, with the
/// intervals it left in memory).
pub fn prepare_after(
    catalog: &Catalog,
    sessions: &[Session],
    classes: &[ClientClass],
    history: usize,
) -> Result<Workload, String> {
    let history = history.min(sessions.len().saturating_sub(1));
    let mut files: HashMap<&str, (u64, u32)> = HashMap::new();
    for r in catalog.titles.iter().flat_map(|t| &t.renditions) {
        for f in &r.files {
            files.insert(f.path.as_str(), (f.size_bytes, r.bitrate_kbps));
        }
    }
    let links: HashMap<&str, f64> = classes
        .iter()
        .map(|c| {
            let rate = if c.bandwidth_bps == 0 {
                f64::INFINITY
            } else {
                c.bandwidth_bps as f64 / 8.0
            };
            (c.name.as_str(), rate)
        })
        .collect();
    let mut readers: HashMap<String, BTreeMap<u64, Reader>> = HashMap::new();
    let mut w = Workload {
        sessions: sessions.len() - history,
        gap_sum: 0.0,
        steps: Vec::new(),
        reuses: Vec::new(),
        watched_bytes: 0,
        stream_seconds: 0.0,
        ref_bitrate_kbps: 0,
        classes: HashMap::new(),
        transfer_byte_seconds: 0.0,
    };
    let mut bitrates: BTreeMap<u32, u64> = BTreeMap::new();
    // Cumulative gap of the whole list, history included: where each reader lies.
    let mut gaps = 0.0;
    for (index, s) in sessions.iter().enumerate() {
        s.check_gap_schedule()
            .map_err(|e| format!("capacity bound: {e}"))?;
        let counted = index >= history;
        gaps += s.gap;
        if counted {
            w.gap_sum += s.gap;
        }
        let link = if links.is_empty() {
            f64::INFINITY
        } else {
            *links.get(s.class.as_str()).ok_or_else(|| {
                format!(
                    "capacity bound: session id {}: client class `{}` is not in workload.json",
                    s.id, s.class
                )
            })?
        };
        // Each request's file, clipped range and start offset within the session.
        let mut reqs: Vec<(&str, u64, u64, f64)> = Vec::with_capacity(s.requests.len());
        let mut off = 0.0;
        let mut prev_len = 0u64;
        for (i, r) in s.requests.iter().enumerate() {
            let path = r.path.trim_start_matches('/');
            let (size, kbps) = *files.get(path).ok_or_else(|| {
                format!(
                    "capacity bound: session id {}: {} is not a file of the catalog",
                    s.id, r.path
                )
            })?;
            if i == 0 {
                if counted {
                    *bitrates.entry(s.bitrate_kbps.unwrap_or(kbps)).or_insert(0) += 1;
                }
            } else {
                off += r.pacing_s.max(prev_len as f64 / link);
            }
            let (a, b) = r.span(size);
            if link.is_finite() && counted {
                // The response's bytes leave memory as the link delivers them: n/2 held on
                // average for n/link seconds.
                let n = (b - a) as f64;
                w.transfer_byte_seconds += n * n / (2.0 * link);
            }
            reqs.push((path, a, b, off));
            prev_len = b - a;
        }
        let mut seen: HashMap<&str, Vec<(u64, u64)>> = HashMap::new();
        for (i, &(path, a, b, off)) in reqs.iter().enumerate() {
            let tau = match reqs.get(i + 1) {
                Some(next) => next.3 - off,
                None => s.requests[i].pacing_s.max((b - a) as f64 / link),
            };
            // Whole microseconds, so that steps differing only by rounding share a class.
            let tau = (tau * 1e6).round() / 1e6;
            let mine = seen.entry(path).or_default();
            let pieces = subtract(a, b, mine);
            let new: u64 = pieces.iter().map(|(x, y)| y - x).sum();
            if !counted {
                // A history session only leaves its readers behind.
                insert_range(mine, a, b);
                let map = readers.entry(path.to_string()).or_default();
                for (x, y) in pieces {
                    read_range(map, x, y, gaps, off);
                }
                continue;
            }
            w.stream_seconds += tau;
            if new == 0 {
                continue;
            }
            insert_range(mine, a, b);
            let step = w.steps.len();
            w.steps.push(Step { bytes: new, tau });
            w.watched_bytes += new;
            let map = readers.entry(path.to_string()).or_default();
            for (x, y) in pieces {
                for (bytes, gap, their_off) in read_range(map, x, y, gaps, off) {
                    w.reuses.push(Reuse {
                        step,
                        bytes,
                        dgap: gaps - gap,
                        doff: off - their_off,
                        lead_off: their_off,
                    });
                }
            }
        }
    }
    if w.watched_bytes == 0 {
        return Err("capacity bound: the sessions request no bytes".into());
    }
    if w.gap_sum <= 0.0 {
        return Err("capacity bound: the sessions' gaps sum to zero (no arrival schedule)".into());
    }
    w.ref_bitrate_kbps = bitrates
        .iter()
        .max_by_key(|(k, n)| (**n, std::cmp::Reverse(**k)))
        .map_or(0, |(k, _)| *k);
    for st in &w.steps {
        *w.classes.entry((st.bytes, st.tau.to_bits())).or_insert(0) += 1;
    }
    Ok(w)
}

/// Disk and memory figures at one rate with one memory split.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evaluation {
    /// Fraction of time the drive is busy (positioning + transfer).
    pub utilization: f64,
    /// Share of the utilization spent positioning.
    pub positioning_share: f64,
    /// Bytes served from kept intervals over the whole list.
    pub hit_bytes: f64,
    /// Bytes read from disk over the whole list.
    pub disk_bytes: f64,
    /// Square-root-rule scale: a step of b bytes lasting τ s reads max(b, κ·√(b/τ)) bytes
    /// per positioning (infinite when memory is not the limit).
    pub kappa: f64,
    /// Memory given to kept intervals (the rest holds unconsumed prefetch), bytes.
    pub interval_bytes: f64,
}

/// Steps after cache hits, grouped by (bytes, τ), with the hits applied incrementally as
/// more intervals are admitted.
struct Classes {
    counts: HashMap<(u64, u64), u64>,
    saved: HashMap<usize, u64>,
}

impl Classes {
    fn save(&mut self, w: &Workload, step: usize, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let st = w.steps[step];
        let old = self.saved.get(&step).copied().unwrap_or(0);
        let new = (old + bytes).min(st.bytes);
        let key = |left: u64| (left, st.tau.to_bits());
        if let Some(c) = self.counts.get_mut(&key(st.bytes - old)) {
            *c -= 1;
            if *c == 0 {
                self.counts.remove(&key(st.bytes - old));
            }
        }
        if new < st.bytes {
            *self.counts.entry(key(st.bytes - new)).or_insert(0) += 1;
        }
        self.saved.insert(step, new);
    }

    /// (positionings, disk bytes, κ) over the whole list with `budget` byte-seconds of
    /// unconsumed prefetch: Σ (κ·√(bτ) − bτ) over steps reading more than one request's
    /// bytes stays within 2 × budget.
    fn disk(&self, budget: f64) -> (f64, f64, f64) {
        let mut bytes = 0.0;
        // (θ = √(bτ), count) for steps that last; instant steps are read in one piece with
        // no memory held, so they cost transfer only.
        let mut lasting: Vec<(f64, f64)> = Vec::with_capacity(self.counts.len());
        for (&(b, tau_bits), &n) in &self.counts {
            let tau = f64::from_bits(tau_bits);
            bytes += b as f64 * n as f64;
            if tau > 0.0 {
                lasting.push(((b as f64 * tau).sqrt(), n as f64));
            }
        }
        lasting.sort_by(|x, y| x.0.total_cmp(&y.0));
        let cap = 2.0 * budget;
        let (mut a1, mut a2) = (0.0, 0.0);
        let mut inactive: f64 = lasting.iter().map(|x| x.1).sum();
        let mut kappa = f64::INFINITY;
        for &(theta, n) in &lasting {
            // At κ = θ the steps so far are active (P > b) and hold κ·A1 − A2.
            if theta * a1 - a2 > cap {
                kappa = (cap + a2) / a1;
                break;
            }
            a1 += n * theta;
            a2 += n * theta * theta;
            inactive -= n;
        }
        if kappa.is_infinite() && a1 > 0.0 && cap.is_finite() {
            kappa = (cap + a2) / a1;
        }
        let active = if a1 > 0.0 { a1 / kappa } else { 0.0 };
        (inactive + active, bytes, kappa)
    }
}

/// Utilization at rate `lambda` with the best split of `usable_bytes` between kept
/// intervals and unconsumed prefetch (shares 0, 1/steps, ..., 1 of it to intervals).
pub fn evaluate(
    w: &Workload,
    disk: &DiskTerms,
    usable_bytes: f64,
    lambda: f64,
    steps: u32,
) -> Evaluation {
    evaluate_with(w, disk, usable_bytes, lambda, steps, Foresight::Full)
}

/// [`evaluate`] keeping only the intervals `foresight` allows.
pub fn evaluate_with(
    w: &Workload,
    disk: &DiskTerms,
    usable_bytes: f64,
    lambda: f64,
    steps: u32,
    foresight: Foresight,
) -> Evaluation {
    let steps = steps.max(1);
    let per_s = lambda / w.gap_sum;
    // Bytes on their way to clients are in memory whatever the server does.
    let usable_bytes = (usable_bytes - in_transfer_bytes(w, lambda)).max(0.0);
    let mut order: Vec<(f64, usize)> = w
        .reuses
        .iter()
        .enumerate()
        .filter(|(_, r)| foresight.allows(r, lambda))
        .map(|(i, r)| ((r.dgap / lambda + r.doff).max(0.0), i))
        .collect();
    order.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    let mut cls = Classes {
        counts: w.classes.clone(),
        saved: HashMap::new(),
    };
    let (mut next, mut partial, mut used, mut hits) = (0usize, 0u64, 0.0f64, 0.0f64);
    let mut best: Option<Evaluation> = None;
    for k in 0..=steps {
        let interval = usable_bytes * f64::from(k) / f64::from(steps);
        // Byte-seconds over the list's duration: time-averaged bytes × gap_sum / λ.
        let cap = interval / per_s;
        while next < order.len() {
            let (gap, i) = order[next];
            let r = w.reuses[i];
            let left = r.bytes - partial;
            let cost = left as f64 * gap;
            if used + cost <= cap {
                used += cost;
                hits += left as f64;
                cls.save(w, r.step, left);
                next += 1;
                partial = 0;
            } else {
                // (1 + 1e-12) absorbs the rounding of `used` so an exact fit is not lost.
                let take = (((cap - used) / gap * (1.0 + 1e-12)).floor() as u64).min(left);
                used += take as f64 * gap;
                hits += take as f64;
                cls.save(w, r.step, take);
                partial += take;
                break;
            }
        }
        let prefetch = (usable_bytes - interval).max(0.0);
        let (positionings, bytes, kappa) = cls.disk(prefetch / per_s);
        let pos_s = positionings * positioning_at(w, disk, lambda);
        let xfer_s = bytes / disk.transfer_bytes_s;
        let utilization = per_s * (pos_s + xfer_s);
        let e = Evaluation {
            utilization,
            positioning_share: if pos_s + xfer_s > 0.0 {
                pos_s / (pos_s + xfer_s)
            } else {
                0.0
            },
            hit_bytes: hits,
            disk_bytes: bytes,
            kappa,
            interval_bytes: interval,
        };
        if best.is_none_or(|b| e.utilization < b.utilization) {
            best = Some(e);
        }
    }
    best.unwrap_or(Evaluation {
        utilization: f64::INFINITY,
        positioning_share: 0.0,
        hit_bytes: 0.0,
        disk_bytes: 0.0,
        kappa: 0.0,
        interval_bytes: 0.0,
    })
}

/// t_pos at rate `lambda`: a sweep serves at most one read of each stream active at once
/// (two reads of one stream in a sweep would be one), so at most N reads; the more reads a
/// sweep serves, the shorter its seeks, so N reads give the cheapest positioning.
pub fn positioning_at(w: &Workload, disk: &DiskTerms, lambda: f64) -> f64 {
    disk.positioning_for(lambda / w.gap_sum * w.stream_seconds)
}

/// Time-averaged bytes of responses not yet delivered over the clients' links at rate
/// `lambda` (Little's law over the list's byte-seconds).
pub fn in_transfer_bytes(w: &Workload, lambda: f64) -> f64 {
    w.transfer_byte_seconds * lambda / w.gap_sum
}

/// The bound and the figures that explain it (bench.json `bound`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CapacityBound {
    /// Highest sustainable rate, in the load tool's `--rate` unit (sessions/s).
    pub bound_rate: f64,
    pub drive: String,
    /// Fraction of the modelled surface the file set occupies (placed at the outer edge).
    pub span_fraction: f64,
    /// t_pos: expected positioning per read at an independent place, ms.
    pub positioning_ms: f64,
    /// t_pos of a read in a sweep serving one read per stream at the bound, ms, when that is
    /// cheaper than `positioning_ms` (the bound then counts it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep_positioning_ms: Option<f64>,
    /// R: zoned transfer rate over the span, MB/s (10^6 bytes).
    pub transfer_mb_s: f64,
    pub memory_bytes: u64,
    pub reserve_bytes: u64,
    /// M_int: memory holding kept intervals at the best split.
    pub interval_memory_bytes: u64,
    /// M_pf: memory holding unconsumed prefetch at the best split.
    pub prefetch_memory_bytes: u64,
    /// M_x: memory holding response bytes on their way over the clients' links at the
    /// bound (not available to intervals or prefetch).
    #[serde(default)]
    pub transfer_memory_bytes: u64,
    /// N: streams active on average at the bound (Little's law).
    pub streams_at_bound: f64,
    /// Mean session duration (sum of its steps), s.
    pub mean_session_s: f64,
    pub sessions: usize,
    /// Most common session bit rate, kbit/s.
    pub ref_bitrate_kbps: u32,
    /// Square-root-rule read size of a stream at the reference bit rate, bytes (`null`
    /// when memory is not the limit); a stream never reads less than one request's bytes.
    pub prefetch_bytes_at_ref: Option<f64>,
    /// Share of watched bytes served from kept intervals.
    pub hit_fraction: f64,
    /// Disk throughput at the bound, MB/s (10^6 bytes).
    pub disk_mb_s: f64,
    /// Share of disk time spent positioning at the bound.
    pub positioning_share: f64,
    /// vodkit's memory manager replayed on the same workload, drive terms and budget
    /// (`vodkit_sim::replay`): its capacity and hits, to read a measured gap to the bound
    /// as memory policy or serving path. Absent when not computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager_replay: Option<vodkit_sim::replay::ReplayResult>,
    /// The bound again for a server that keeps bytes only for sessions already started
    /// ([`Foresight::StartedFollowers`]): what is left of it without guessing who comes
    /// next, sessions/s. Absent in reports written before it was computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_followers_rate: Option<f64>,
    /// Share of watched bytes served from kept intervals at that rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_followers_hit_fraction: Option<f64>,
}

/// The largest λ at which the best split keeps the drive at most fully busy (bisection on
/// the utilization, which grows with λ).
pub fn bound(
    w: &Workload,
    disk: &DiskTerms,
    memory: &MemoryTerms,
    drive: &str,
) -> Result<CapacityBound, String> {
    if !(disk.positioning_s >= 0.0 && disk.transfer_bytes_s > 0.0) {
        return Err(format!(
            "capacity bound: drive terms t_pos {} s, R {} bytes/s are not usable",
            disk.positioning_s, disk.transfer_bytes_s
        ));
    }
    let usable = memory.usable_bytes() as f64;
    let rate = saturating_rate(w, disk, usable, Foresight::Full)?;
    let e = evaluate(w, disk, usable, rate.max(f64::MIN_POSITIVE), SPLIT_STEPS);
    let started = saturating_rate(w, disk, usable, Foresight::StartedFollowers)?;
    let started_hits = evaluate_with(
        w,
        disk,
        usable,
        started.max(f64::MIN_POSITIVE),
        SPLIT_STEPS,
        Foresight::StartedFollowers,
    )
    .hit_bytes;
    let per_s = rate / w.gap_sum;
    let ref_rate = f64::from(w.ref_bitrate_kbps) * 1000.0 / 8.0;
    Ok(CapacityBound {
        bound_rate: rate,
        drive: drive.to_string(),
        span_fraction: disk.span_fraction,
        positioning_ms: disk.positioning_s * 1000.0,
        sweep_positioning_ms: Some(positioning_at(w, disk, rate.max(f64::MIN_POSITIVE)))
            .filter(|&t| t < disk.positioning_s)
            .map(|t| t * 1000.0),
        transfer_mb_s: disk.transfer_bytes_s / 1e6,
        memory_bytes: memory.budget_bytes,
        reserve_bytes: memory.reserve_bytes,
        interval_memory_bytes: e.interval_bytes.round() as u64,
        prefetch_memory_bytes: (usable - in_transfer_bytes(w, rate) - e.interval_bytes)
            .max(0.0)
            .round() as u64,
        transfer_memory_bytes: in_transfer_bytes(w, rate).round() as u64,
        streams_at_bound: per_s * w.stream_seconds,
        mean_session_s: w.stream_seconds / w.sessions.max(1) as f64,
        sessions: w.sessions,
        ref_bitrate_kbps: w.ref_bitrate_kbps,
        prefetch_bytes_at_ref: (e.kappa.is_finite() && ref_rate > 0.0)
            .then(|| e.kappa * ref_rate.sqrt()),
        hit_fraction: e.hit_bytes / w.watched_bytes as f64,
        disk_mb_s: per_s * e.disk_bytes / 1e6,
        positioning_share: e.positioning_share,
        manager_replay: None,
        started_followers_rate: Some(started),
        started_followers_hit_fraction: Some(started_hits / w.watched_bytes as f64),
    })
}

/// The largest λ at which the best split with `foresight` keeps the drive at most fully
/// busy: doubling, then 60 bisection steps (the utilization grows with λ).
pub fn saturating_rate(
    w: &Workload,
    disk: &DiskTerms,
    usable: f64,
    foresight: Foresight,
) -> Result<f64, String> {
    let util = |l: f64| evaluate_with(w, disk, usable, l, SPLIT_STEPS, foresight).utilization;
    let mut hi = 1.0;
    let mut doublings = 0;
    while util(hi) <= 1.0 {
        hi *= 2.0;
        doublings += 1;
        if doublings > 200 {
            return Err("capacity bound: no rate saturates the drive".into());
        }
    }
    let mut lo = 0.0;
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if util(mid) <= 1.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

/// The bound for a bench run: the workload on the emulated `preset` drive whose image of
/// `image_bytes` stands for the whole surface and holds `fileset_bytes` of files, with a
/// `memory_bytes` budget.
pub fn for_testbed(
    w: &Workload,
    preset: vodkit_disk::model::Preset,
    fileset_bytes: u64,
    image_bytes: u64,
    memory_bytes: u64,
) -> Result<CapacityBound, String> {
    let disk = testbed_terms(preset, fileset_bytes, image_bytes)?;
    bound(
        w,
        &disk,
        &MemoryTerms::for_budget(memory_bytes),
        preset.name(),
    )
}

/// The drive terms of the emulated `preset` drive whose image of `image_bytes` stands for
/// the whole surface and holds `fileset_bytes` of files at its outer edge.
pub fn testbed_terms(
    preset: vodkit_disk::model::Preset,
    fileset_bytes: u64,
    image_bytes: u64,
) -> Result<DiskTerms, String> {
    if image_bytes == 0 || fileset_bytes == 0 {
        return Err("capacity bound: empty file set or image".into());
    }
    let f = (fileset_bytes as f64 / image_bytes as f64).min(1.0);
    disk_terms(&preset.spec(), f)
}

/// vodkit's memory manager replayed on the workload (`vodkit_sim::replay`) with reads as
/// large as its budget share, on `disk` with `memory_bytes`: the highest rate at which
/// the drive is at most fully busy, searched from `guess` sessions/s.
pub fn manager_replay(
    catalog: &Catalog,
    sessions: &[Session],
    classes: &[ClientClass],
    disk: DiskTerms,
    memory_bytes: u64,
    guess: f64,
    history_bytes: u64,
) -> Result<vodkit_sim::replay::ReplayResult, String> {
    use vodkit_sim::replay::{capacity, Prefetch, ReplayConfig, ReplayWorkload};
    let w = ReplayWorkload::prepare(catalog, sessions, classes)?.after_history(history_bytes);
    let cfg = ReplayConfig {
        memory: vodkit_prefetch::memory::MemoryConfig::for_budget(memory_bytes),
        disk,
        prefetch: Prefetch::Budget,
        order: vodkit_prefetch::IoOrder::default(),
        queue_wait_s: vodkit_sim::replay::DEFAULT_QUEUE_WAIT_S,
    };
    capacity(&w, &cfg, guess)
        .ok_or_else(|| "memory replay: no rate leaves the drive idle enough".into())
}

/// `measured / bound`, or a one-line error when the measured capacity exceeds the bound by
/// more than [`TOLERANCE`] (then the measurement or the bound is wrong).
pub fn check_fraction(measured: f64, bound: f64) -> Result<f64, String> {
    if !(bound > 0.0 && bound.is_finite()) {
        return Err(format!(
            "capacity bound {bound} sessions/s is not a positive rate"
        ));
    }
    if !(measured >= 0.0 && measured.is_finite()) {
        return Err(format!(
            "measured capacity {measured} sessions/s is not a non-negative rate"
        ));
    }
    let fraction = measured / bound;
    if fraction > 1.0 + TOLERANCE {
        return Err(format!(
            "measured capacity {measured:.3} sessions/s exceeds the capacity bound {bound:.3} sessions/s by {:.1}% (more than {:.0}%): the measurement or the bound is wrong",
            (fraction - 1.0) * 100.0,
            TOLERANCE * 100.0
        ));
    }
    Ok(fraction)
}

#[cfg(test)]
mod tests;
