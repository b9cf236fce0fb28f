//! Daemon counters: what the library reported (per call, per outcome) next to the shared
//! engine's accounting (hits, misses, reads, disk time, prefetch evictions, policy
//! sizes) — the same figures `vodkit serve` reports. Exposed as a JSON snapshot
//! (`vodkit prefetchd --metrics FILE`).

use super::config::DaemonConfig;
use crate::protocol::{Op, Request};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use vodkit_prefetch::{IoMode, ReadOutcome, Stats};

#[derive(Default)]
pub(crate) struct Metrics {
    pub connections: AtomicU64,
    pub requests: AtomicU64,
    pub requested_bytes: AtomicU64,
    pub by_op: [AtomicU64; 6],
    pub not_regular: AtomicU64,
    pub tracked: AtomicU64,
    pub prefetch_here: AtomicU64,
    pub planned_bytes: AtomicU64,
    pub with_bitrate: AtomicU64,
    pub engine_calls: AtomicU64,
    pub already_resident: AtomicU64,
    pub read_errors: AtomicU64,
    pub bad_messages: AtomicU64,
    pub resident_notes: AtomicU64,
    pub noted_bytes: AtomicU64,
}

/// What became of the misses the library reported.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ModeCounts {
    /// Handed to the engine to read (`serialized`, `asap`).
    pub engine: u64,
    /// Of those, found resident by the time the engine looked (another read got them).
    pub already_resident: u64,
    /// Sized here and read by the library (`prefetch`).
    pub prefetch_in_library: u64,
    /// Only recorded (`vanilla`).
    pub tracked_only: u64,
    /// The descriptor was not a regular file (nothing done).
    pub not_regular: u64,
}

/// A point-in-time copy of the counters.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MetricsSnapshot {
    pub socket: String,
    pub mode: IoMode,
    pub policy: String,
    pub per_device: bool,
    /// The `--catalog` giving bit rates, and how many files it lists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catalog: Option<String>,
    pub catalog_files: usize,
    pub uptime_s: f64,
    pub connections: u64,
    /// Misses reported by the library.
    pub requests: u64,
    pub requests_by_call: BTreeMap<Op, u64>,
    /// Bytes the applications asked for in those misses.
    pub requested_bytes: u64,
    /// Notes of reads the library found resident (not answered; fed to the engine's
    /// accounting so the policy sees hits as `vodkit serve`'s does), and their bytes.
    pub resident_notes: u64,
    pub noted_bytes: u64,
    /// Misses on files the catalog gives a bit rate for.
    pub misses_with_bitrate: u64,
    pub outcomes: ModeCounts,
    /// Bytes the library was told to read itself (`prefetch` mode).
    pub planned_bytes: u64,
    pub read_errors: u64,
    pub bad_messages: u64,
    /// `/admit` (nginx's `auth_request`): the admission policy, and the new streams it
    /// let through and refused.
    pub admission: String,
    pub streams_admitted: u64,
    pub streams_refused: u64,
    /// The engine's accounting (reads, disk time, per-device queues, policy state; in
    /// `prefetch` mode the policy sizes the library's reads through the engine too).
    pub engine: Stats,
}

const OPS: [Op; 6] = [
    Op::Read,
    Op::Pread,
    Op::Readv,
    Op::Sendfile,
    Op::CopyFileRange,
    Op::Splice,
];

impl Metrics {
    pub(crate) fn note_request(&self, req: &Request) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.requested_bytes.fetch_add(req.len, Ordering::Relaxed);
        let i = usize::from(req.op.to_wire()) - 1;
        self.by_op[i].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn note_resident(&self, req: &Request) {
        self.resident_notes.fetch_add(1, Ordering::Relaxed);
        self.noted_bytes.fetch_add(req.len, Ordering::Relaxed);
    }

    pub(crate) fn note_outcome(&self, o: &ReadOutcome) {
        self.engine_calls.fetch_add(1, Ordering::Relaxed);
        if o.from_disk == 0 {
            self.already_resident.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn snapshot(
        &self,
        config: &DaemonConfig,
        uptime: Duration,
        engine: Stats,
    ) -> MetricsSnapshot {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MetricsSnapshot {
            socket: config.socket.display().to_string(),
            mode: config.mode,
            policy: config.policy.to_string(),
            per_device: config.per_device,
            catalog: config
                .bitrates
                .as_ref()
                .map(|r| r.source().display().to_string()),
            catalog_files: config.bitrates.as_ref().map_or(0, |r| r.len()),
            uptime_s: uptime.as_secs_f64(),
            connections: get(&self.connections),
            requests: get(&self.requests),
            requests_by_call: OPS
                .iter()
                .zip(&self.by_op)
                .map(|(op, n)| (*op, get(n)))
                .filter(|(_, n)| *n > 0)
                .collect(),
            requested_bytes: get(&self.requested_bytes),
            resident_notes: get(&self.resident_notes),
            noted_bytes: get(&self.noted_bytes),
            misses_with_bitrate: get(&self.with_bitrate),
            outcomes: ModeCounts {
                engine: get(&self.engine_calls),
                already_resident: get(&self.already_resident),
                prefetch_in_library: get(&self.prefetch_here),
                tracked_only: get(&self.tracked),
                not_regular: get(&self.not_regular),
            },
            planned_bytes: get(&self.planned_bytes),
            read_errors: get(&self.read_errors),
            bad_messages: get(&self.bad_messages),
            admission: config.admission.to_string(),
            // Counted by the `/admit` gate; the daemon fills them in.
            streams_admitted: 0,
            streams_refused: 0,
            engine,
        }
    }
}
