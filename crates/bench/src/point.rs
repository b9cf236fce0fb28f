//! What one data point (one server, one rate, one repeat) measured: client results over the
//! steady-state window, disk and CPU behaviour from the system sampler, and the server's
//! own error lines.

use serde::{Deserialize, Serialize};

/// The memory of the server's budget cgroup over the steady-state window: the page cache
/// it is charged and everything else (its processes' anonymous memory, kernel objects).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct ServerMemory {
    /// Highest sampled `memory.current`.
    pub peak_bytes: u64,
    /// Highest sampled page cache (`file` of `memory.stat`).
    pub peak_cache_bytes: u64,
    /// Highest sampled usage other than page cache (mostly the processes' RSS).
    pub peak_other_bytes: u64,
}

/// Disk behaviour over the steady-state window (iostat-style, seed 001 §5).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct DiskMetrics {
    pub mb_s: f64,
    pub reads_per_s: f64,
    /// Busy time divided by transactions (ms).
    pub ms_per_transaction: f64,
    pub avg_read_kib: f64,
    /// Fraction of time the device was busy (0..1).
    pub utilization: f64,
}

/// The emulated drive's own counters over the steady-state window (its control file).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct DeviceFigures {
    /// Reads that moved the head, per second.
    pub positionings_per_s: f64,
    /// Bytes read per positioning (KiB); `None` without positionings.
    pub kib_per_positioning: Option<f64>,
    /// Share of the time the modelled drive was busy (0..1).
    pub busy_fraction: f64,
}

impl DeviceFigures {
    /// The figures between two readings of the counters `secs` real seconds apart.
    pub fn between(
        a: &vodkit_disk::testbed::fusedev::DeviceCounters,
        b: &vodkit_disk::testbed::fusedev::DeviceCounters,
        secs: f64,
    ) -> Option<DeviceFigures> {
        if secs <= 0.0 {
            return None;
        }
        let seeks = b.seeks.saturating_sub(a.seeks);
        let bytes = b.read_bytes.saturating_sub(a.read_bytes);
        Some(DeviceFigures {
            positionings_per_s: seeks as f64 / secs,
            kib_per_positioning: (seeks > 0).then(|| bytes as f64 / seeks as f64 / 1024.0),
            busy_fraction: ((b.busy_secs - a.busy_secs) / secs).max(0.0),
        })
    }
}

/// The prefetch engine's own counters at one moment (`vodkit serve`'s `/stats`): what
/// [`EngineFigures`] takes the difference of.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EngineCounters {
    pub requested_bytes: u64,
    /// Requested bytes that were in memory when asked for.
    pub memory_bytes: u64,
    pub reads: u64,
    /// Bytes of the ranges the engine read, and those of them that were not resident (the
    /// rest the kernel found in the page cache and did not ask the drive for).
    pub read_bytes: u64,
    pub disk_bytes: u64,
    /// Seconds reads waited in the devices' queues, summed.
    pub wait_s: f64,
    /// The device with the most reads, with what a positioning and the transfer cost on it
    /// as the engine learned them from its reads (levels, not counts).
    pub busiest: Option<vodkit_prefetch::stats::DeviceStats>,
    /// The memory manager's totals and levels, when the engine runs one.
    pub memory: Option<vodkit_prefetch::memory::MemoryTotals>,
}

impl From<&vodkit_prefetch::Stats> for EngineCounters {
    fn from(s: &vodkit_prefetch::Stats) -> Self {
        EngineCounters {
            requested_bytes: s.requested_bytes,
            memory_bytes: s.memory_bytes,
            reads: s.reads,
            read_bytes: s.read_bytes,
            disk_bytes: s.disk_bytes,
            wait_s: s.devices.iter().map(|d| d.wait_s).sum(),
            busiest: s.devices.iter().max_by_key(|d| d.reads).cloned(),
            memory: s.memory.clone(),
        }
    }
}

/// What the server's engine counted over the judged window, in the memory replay's terms
/// (docs/simulate.md): the share of requested bytes that were resident when asked for —
/// prefetched bytes a viewer then asks for count, as in the replay — and the mean read.
/// This, not 1 − disk / delivered bytes (which counts every prefetch as disk traffic), is
/// what the replay's hits predict.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct EngineFigures {
    pub hit_fraction: f64,
    pub mean_read_bytes: f64,
    /// Seconds between the two readings (a part of the judged window).
    pub seconds: f64,
    /// The engine's learned positioning at the later reading, ms (the replay's sweep term
    /// is what it prices a read with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub positioning_ms: Option<f64>,
    /// The mean time a read waited in its device's queue, ms (the replay prices the drive's
    /// capacity at a mean wait: `--queue-wait`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_wait_ms: Option<f64>,
    /// The engine's learned transfer rate at the later reading, MB/s (the replay reads at
    /// the drive's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_mb_s: Option<f64>,
    /// What sized the reads, from the memory manager's counters (absent without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sizing: Option<ReadSizing>,
    /// Reads the engine issued per second over the window: with the drive's positionings a
    /// second, how many requests a read became on the drive (the replay prices one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reads_per_s: Option<f64>,
    /// Share of the bytes of the engine's read ranges that were already resident: a
    /// buffered read skips them, so a read with resident pieces reaches the drive as
    /// several requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resident_read_fraction: Option<f64>,
}

/// What the memory manager let a window's reads be, in the memory replay's terms
/// ([`vodkit_sim::replay::ReplayResult`]'s `mean_cap_bytes`, `capped_read_fraction`,
/// `survival_cut_fraction` and levels): the mean cap its budget allowed a read, the shares
/// of reads cut by the budget and by the survival of viewing depth, and its levels averaged
/// over the window's readings. Where the run's reads are shorter than the replay's, these
/// say whether the budget (fewer bytes a stream: more streams, more held by intervals or
/// socket buffers) or the cut (a cheaper positioning) made them so.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct ReadSizing {
    pub mean_cap_bytes: f64,
    pub capped_fraction: f64,
    pub survival_cut_fraction: f64,
    /// Streams taking a share of the prefetch pool.
    pub weighted_streams: f64,
    /// The prefetch pool (usable bytes not held by kept intervals), bytes.
    pub pool_bytes: f64,
    /// Consumed bytes kept for following streams, bytes.
    pub kept_bytes: f64,
    /// Released bytes still held by socket buffers, bytes.
    pub unreleased_bytes: f64,
}

impl ReadSizing {
    /// The sizing between the first and the last of `readings` (in time order), levels
    /// averaged over all of them; `None` without the manager's counters or without a read
    /// it sized in between.
    fn over(readings: &[&EngineCounters]) -> Option<ReadSizing> {
        let a = readings.first()?.memory.as_ref()?;
        let b = readings.last()?.memory.as_ref()?;
        let sized = b
            .sized_reads
            .checked_sub(a.sized_reads)
            .filter(|&n| n > 0)? as f64;
        let share = |x: u64, y: u64| y.saturating_sub(x) as f64 / sized;
        let levels: Vec<_> = readings.iter().filter_map(|r| r.memory.as_ref()).collect();
        let mean = |f: fn(&vodkit_prefetch::memory::MemoryTotals) -> u64| {
            levels.iter().map(|t| f(t) as f64).sum::<f64>() / levels.len() as f64
        };
        Some(ReadSizing {
            mean_cap_bytes: share(a.cap_bytes, b.cap_bytes),
            capped_fraction: share(a.capped_reads, b.capped_reads),
            survival_cut_fraction: share(a.survival_cut_reads, b.survival_cut_reads),
            weighted_streams: mean(|t| t.weighted_streams),
            pool_bytes: mean(|t| t.prefetch_pool_bytes),
            kept_bytes: mean(|t| t.kept_bytes),
            unreleased_bytes: mean(|t| t.unreleased_bytes),
        })
    }
}

impl EngineFigures {
    /// The figures over `readings` (in time order) spanning `secs`: differences between the
    /// first and the last, levels averaged over all; `None` when nothing was requested or
    /// read between them.
    pub fn over(readings: &[&EngineCounters], secs: f64) -> Option<EngineFigures> {
        let (a, b) = (*readings.first()?, *readings.last()?);
        let requested = b.requested_bytes.checked_sub(a.requested_bytes)?;
        let memory = b.memory_bytes.checked_sub(a.memory_bytes)?;
        let reads = b.reads.checked_sub(a.reads)?;
        let read = b.read_bytes.checked_sub(a.read_bytes)?;
        if requested == 0 || reads == 0 || secs <= 0.0 {
            return None;
        }
        Some(EngineFigures {
            hit_fraction: memory.min(requested) as f64 / requested as f64,
            mean_read_bytes: read as f64 / reads as f64,
            seconds: secs,
            positioning_ms: b.busiest.as_ref().and_then(|d| d.positioning_ms),
            queue_wait_ms: (b.wait_s >= a.wait_s)
                .then(|| (b.wait_s - a.wait_s) / reads as f64 * 1e3),
            transfer_mb_s: b.busiest.as_ref().and_then(|d| d.transfer_mb_s),
            sizing: ReadSizing::over(readings),
            reads_per_s: Some(reads as f64 / secs),
            resident_read_fraction: b
                .disk_bytes
                .checked_sub(a.disk_bytes)
                .filter(|_| read > 0)
                .map(|disk| 1.0 - disk.min(read) as f64 / read as f64),
        })
    }
}

/// CPU time used by the processes of a point over the steady-state window, in cores
/// (CPU-seconds per second; 1.0 is one core fully busy). `None` where not known.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct ProcessCores {
    /// The server under test: its main process with all threads and all descendant
    /// processes (nginx and Apache workers), plus a `+preload` server's prefetch daemon.
    pub server: Option<f64>,
    /// The load generator (its threads in the bench process).
    pub load: Option<f64>,
    /// The disk emulator serving the emulated drive (its FUSE threads, in the bench process
    /// or in the `vodkit hdd up` daemon).
    pub disk_emulator: Option<f64>,
    /// A cluster's load balancer (HAProxy or nginx with its workers); its origins are the
    /// `server`.
    pub balancer: Option<f64>,
    /// The balancer's cores per Gbit/s the clients received ([`per_gbit_s`]), to size it.
    pub balancer_per_gbit_s: Option<f64>,
}

impl ProcessCores {
    pub fn is_empty(&self) -> bool {
        self.server.is_none()
            && self.load.is_none()
            && self.disk_emulator.is_none()
            && self.balancer.is_none()
    }

    /// Fill [`ProcessCores::balancer_per_gbit_s`] from the throughput delivered (MB/s).
    pub fn with_delivery(mut self, throughput_mb_s: f64) -> ProcessCores {
        self.balancer_per_gbit_s = self.balancer.and_then(|c| per_gbit_s(c, throughput_mb_s));
        self
    }
}

/// Cores per Gbit/s: `cores` over a delivery of `throughput_mb_s` (MB = 10^6 bytes); `None`
/// when nothing was delivered.
pub fn per_gbit_s(cores: f64, throughput_mb_s: f64) -> Option<f64> {
    let gbit_s = throughput_mb_s * 8.0 / 1000.0;
    (gbit_s > 0.0).then(|| cores / gbit_s)
}

/// Client-side results of the load generator (steady state only).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ClientMetrics {
    pub sessions: u64,
    pub failed_sessions: u64,
    pub failure_fraction: f64,
    pub requests: u64,
    pub timed_out_requests: u64,
    /// Bytes of completed responses per second (MB = 10^6 bytes).
    pub throughput_mb_s: f64,
    /// Length of the steady-state window the figures cover (s).
    pub steady_s: f64,
    /// Sessions turned away with `503` (not in `sessions`: neither completed nor failed).
    #[serde(default)]
    pub refused_sessions: u64,
    /// Sessions that played to the end without a stall, per session offered (refused ones
    /// included): goodput = rate × this.
    #[serde(default)]
    pub goodput_fraction: f64,
    /// 99th percentile of the time to a `503` refusal (ms; 0 without refusals).
    #[serde(default)]
    pub refusal_p99_ms: f64,
    /// QoS figures from the load generator, passed through as it reports them.
    pub qos: Option<serde_json::Value>,
    /// Fraction of the judged sessions (the probes where the run has them) that completed
    /// and played without a stall, as the quality criterion reads it.
    pub acceptable_fraction: Option<f64>,
    /// 95th percentile of how far completed sessions fell behind their own pace (s;
    /// `vodkit load`'s `sessions.lag_p95_s`), as the pace criterion reads it.
    pub lag_p95_s: Option<f64>,
    /// The run was ended once its failure was certain ([`crate::early`]): the point fails,
    /// and the figures cover the part that ran.
    pub stopped_early: Option<crate::early::EarlyStop>,
}

/// Everything measured at one data point.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PointMetrics {
    pub client: ClientMetrics,
    pub disk: Option<DiskMetrics>,
    /// Machine-wide CPU busy time: (user + nice + system + irq + softirq + steal) over all
    /// jiffies of all cores (0..1). Time idle with I/O outstanding (iowait) is not busy.
    pub cpu_busy: Option<f64>,
    /// Machine-wide share of all cores' time spent in iowait (0..1).
    pub cpu_iowait: Option<f64>,
    /// CPU used by the server, the load generator and the disk emulator, in cores.
    #[serde(default, skip_serializing_if = "ProcessCores::is_empty")]
    pub cores: ProcessCores,
    /// Result files written before `cpu_busy`: 1 − idle, which counts iowait as busy (an
    /// upper bound of `cpu_busy`). Read from old files, never written.
    #[serde(default, skip_serializing)]
    pub cpu_util: Option<f64>,
    /// The server's budget cgroup (runs with `--memory`; sampled once a second).
    pub server_memory: Option<ServerMemory>,
    /// Connections the kernel refused during the point because a listen queue was full
    /// (`TcpExtListenOverflows` of `/proc/net/netstat`, machine-wide): each one is a client
    /// whose SYN is retried after 1, 3, 7 s, so a server that accepts too slowly shows up
    /// here before it shows up in the client's timeouts.
    pub listen_overflows: Option<u64>,
    /// Prefetch size over time (seconds since start, bytes) for adaptive policies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefetch_size: Vec<(f64, u64)>,
    /// Error-log lines the server left behind during this point.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_errors: Vec<String>,
    /// Things about this point a reader should know (e.g. caches could not be dropped).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The history played before the point ([`crate::warmup`]).
    pub fast_forward: Option<crate::warmup::History>,
    /// The judged window's two halves compared.
    pub steadiness: Option<crate::warmup::Steadiness>,
    /// The emulated drive's counters over the window.
    pub device: Option<DeviceFigures>,
    /// Times another process dropped the machine's page cache between the bench's own
    /// drop before the point and the end of its judged run (`drop_pagecache` of
    /// `/proc/vmstat`; `None` where the kernel does not count them). Above zero, the point
    /// did not start from the memory its history filled.
    pub outside_cache_drops: Option<u64>,
    /// The server's engine over the judged window (servers that report it).
    pub engine: Option<EngineFigures>,
    /// A cluster origin killed in the middle of the point (`cluster:…:failover`).
    pub failover: Option<crate::failover::FailoverFigures>,
}

impl PointMetrics {
    /// The point as the capacity search judges it. A session refused with `503` was not
    /// served: it counts against the rate like a failed one, so a server that turns
    /// viewers away (admission control) has the capacity it serves, not the rate offered
    /// to it; its goodput is reported apart (`goodput_fraction`).
    pub fn observation(&self) -> crate::search::Observation {
        let c = &self.client;
        let offered = c.sessions + c.refused_sessions;
        let not_served = c.failed_sessions + c.refused_sessions;
        crate::search::Observation {
            sessions: offered,
            failure_fraction: if c.refused_sessions > 0 {
                not_served as f64 / offered as f64
            } else {
                c.failure_fraction
            },
            failed_sessions: not_served,
            timed_out_requests: c.timed_out_requests,
            acceptable_fraction: c.acceptable_fraction,
            lag_p95_s: c.lag_p95_s,
            throughput_mb_s: c.throughput_mb_s,
            stopped_early: c.stopped_early.is_some(),
        }
    }
}

/// Average of several points' figures (used at the capacity rate across repeats).
pub fn mean_of(points: &[&PointMetrics]) -> Option<PointMetrics> {
    let n = points.len();
    if n == 0 {
        return None;
    }
    let avg =
        |f: &dyn Fn(&PointMetrics) -> f64| points.iter().map(|p| f(p)).sum::<f64>() / n as f64;
    let mean_count =
        |f: &dyn Fn(&PointMetrics) -> u64| points.iter().map(|p| f(p)).sum::<u64>() / n as u64;
    let most = |f: &dyn Fn(&PointMetrics) -> u64| points.iter().map(|p| f(p)).max().unwrap_or(0);
    let avg_opt = |f: &dyn Fn(&PointMetrics) -> Option<f64>| {
        let v: Vec<f64> = points.iter().filter_map(|p| f(p)).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let disk = avg_opt(&|p| p.disk.map(|d| d.mb_s)).map(|mb_s| DiskMetrics {
        mb_s,
        reads_per_s: avg_opt(&|p| p.disk.map(|d| d.reads_per_s)).unwrap_or(0.0),
        ms_per_transaction: avg_opt(&|p| p.disk.map(|d| d.ms_per_transaction)).unwrap_or(0.0),
        avg_read_kib: avg_opt(&|p| p.disk.map(|d| d.avg_read_kib)).unwrap_or(0.0),
        utilization: avg_opt(&|p| p.disk.map(|d| d.utilization)).unwrap_or(0.0),
    });
    Some(PointMetrics {
        client: ClientMetrics {
            sessions: mean_count(&|p| p.client.sessions),
            failed_sessions: most(&|p| p.client.failed_sessions),
            failure_fraction: avg(&|p| p.client.failure_fraction),
            requests: mean_count(&|p| p.client.requests),
            timed_out_requests: most(&|p| p.client.timed_out_requests),
            throughput_mb_s: avg(&|p| p.client.throughput_mb_s),
            steady_s: avg(&|p| p.client.steady_s),
            refused_sessions: mean_count(&|p| p.client.refused_sessions),
            goodput_fraction: avg(&|p| p.client.goodput_fraction),
            refusal_p99_ms: points
                .iter()
                .map(|p| p.client.refusal_p99_ms)
                .fold(0.0, f64::max),
            qos: points[0].client.qos.clone(),
            acceptable_fraction: avg_opt(&|p| p.client.acceptable_fraction),
            lag_p95_s: points
                .iter()
                .filter_map(|p| p.client.lag_p95_s)
                .reduce(f64::max),
            stopped_early: points.iter().find_map(|p| p.client.stopped_early.clone()),
        },
        disk,
        cpu_busy: avg_opt(&|p| p.cpu_busy),
        cpu_iowait: avg_opt(&|p| p.cpu_iowait),
        cores: ProcessCores {
            server: avg_opt(&|p| p.cores.server),
            load: avg_opt(&|p| p.cores.load),
            disk_emulator: avg_opt(&|p| p.cores.disk_emulator),
            balancer: avg_opt(&|p| p.cores.balancer),
            balancer_per_gbit_s: None,
        }
        .with_delivery(avg(&|p| p.client.throughput_mb_s)),
        cpu_util: avg_opt(&|p| p.cpu_util),
        server_memory: points
            .iter()
            .filter_map(|p| p.server_memory)
            .max_by_key(|m| m.peak_bytes),
        listen_overflows: points.iter().filter_map(|p| p.listen_overflows).max(),
        prefetch_size: points[0].prefetch_size.clone(),
        server_errors: points
            .iter()
            .flat_map(|p| p.server_errors.clone())
            .collect(),
        notes: Vec::new(),
        fast_forward: points[0].fast_forward.clone(),
        steadiness: points[0].steadiness,
        device: avg_opt(&|p| p.device.map(|d| d.positionings_per_s)).map(|pos| DeviceFigures {
            positionings_per_s: pos,
            kib_per_positioning: avg_opt(&|p| p.device.and_then(|d| d.kib_per_positioning)),
            busy_fraction: avg_opt(&|p| p.device.map(|d| d.busy_fraction)).unwrap_or(0.0),
        }),
        outside_cache_drops: points.iter().filter_map(|p| p.outside_cache_drops).max(),
        engine: avg_opt(&|p| p.engine.map(|e| e.hit_fraction)).map(|hit_fraction| EngineFigures {
            hit_fraction,
            mean_read_bytes: avg_opt(&|p| p.engine.map(|e| e.mean_read_bytes)).unwrap_or(0.0),
            seconds: avg_opt(&|p| p.engine.map(|e| e.seconds)).unwrap_or(0.0),
            positioning_ms: avg_opt(&|p| p.engine.and_then(|e| e.positioning_ms)),
            queue_wait_ms: avg_opt(&|p| p.engine.and_then(|e| e.queue_wait_ms)),
            transfer_mb_s: avg_opt(&|p| p.engine.and_then(|e| e.transfer_mb_s)),
            // A level of one repeat's window, not a count to average.
            sizing: points.iter().find_map(|p| p.engine.and_then(|e| e.sizing)),
            reads_per_s: avg_opt(&|p| p.engine.and_then(|e| e.reads_per_s)),
            resident_read_fraction: avg_opt(&|p| p.engine.and_then(|e| e.resident_read_fraction)),
        }),
        // Each point's own; the points list keeps them.
        failover: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_says_what_sized_its_reads() {
        use vodkit_prefetch::memory::MemoryTotals;
        const MIB: u64 = 1 << 20;
        // Three readings: 40 reads sized in between with caps of 2 MiB on average, 30 cut
        // by the budget and 4 by survival; the levels move between readings.
        let reading = |sized, cap_mib, capped, cut, streams, pool_mib| EngineCounters {
            requested_bytes: 1000 * MIB + sized * MIB,
            memory_bytes: 500 * MIB + sized * MIB / 2,
            reads: sized,
            read_bytes: sized * MIB,
            disk_bytes: sized * MIB * 3 / 4,
            busiest: Some(vodkit_prefetch::stats::DeviceStats {
                transfer_mb_s: Some(100.0 + sized as f64),
                ..Default::default()
            }),
            memory: Some(MemoryTotals {
                sized_reads: sized,
                cap_bytes: cap_mib * MIB,
                capped_reads: capped,
                survival_cut_reads: cut,
                weighted_streams: streams,
                prefetch_pool_bytes: pool_mib * MIB,
                kept_bytes: 10 * MIB,
                unreleased_bytes: MIB,
                ..Default::default()
            }),
            ..Default::default()
        };
        let r = [
            reading(10, 20, 5, 1, 90, 100),
            reading(30, 60, 20, 2, 100, 110),
            reading(50, 100, 35, 5, 110, 120),
        ];
        let refs: Vec<&EngineCounters> = r.iter().collect();
        let e = EngineFigures::over(&refs, 10.0).expect("figures");
        assert_eq!(e.transfer_mb_s, Some(150.0));
        // 40 reads in 10 s; of their 40 MiB, 30 came from the drive.
        assert_eq!(e.reads_per_s, Some(4.0));
        assert_eq!(e.resident_read_fraction, Some(0.25));
        let z = e.sizing.expect("sizing");
        assert_eq!(z.mean_cap_bytes, 2.0 * MIB as f64);
        assert_eq!((z.capped_fraction, z.survival_cut_fraction), (0.75, 0.1));
        assert_eq!(z.weighted_streams, 100.0);
        assert_eq!(z.pool_bytes, 110.0 * MIB as f64);
        assert_eq!(
            (z.kept_bytes, z.unreleased_bytes),
            (10.0 * MIB as f64, MIB as f64)
        );
        // Without the manager's counters, or without a read sized in between, no sizing.
        let plain: Vec<EngineCounters> = r
            .iter()
            .map(|c| EngineCounters {
                memory: None,
                ..c.clone()
            })
            .collect();
        let plain: Vec<&EngineCounters> = plain.iter().collect();
        assert_eq!(
            EngineFigures::over(&plain, 10.0).expect("figures").sizing,
            None
        );
        assert_eq!(ReadSizing::over(&[&r[0], &r[0]]), None);
    }

    #[test]
    fn refused_sessions_count_against_the_rate() {
        // (sessions served, failed, refused, failure fraction) observed as (sessions,
        // failed, failure fraction).
        for (given, want) in [
            ((60, 0, 40, 0.0), (100, 40, 0.4)),
            ((60, 3, 0, 0.05), (60, 3, 0.05)),
        ] {
            let mut p = PointMetrics::default();
            let c = &mut p.client;
            (c.sessions, c.failed_sessions, c.refused_sessions) = (given.0, given.1, given.2);
            c.failure_fraction = given.3;
            let o = p.observation();
            assert_eq!(
                (o.sessions, o.failed_sessions),
                (want.0, want.1),
                "{given:?}"
            );
            assert!((o.failure_fraction - want.2).abs() < 1e-12, "{given:?}");
        }
    }

    fn point(tput: f64, disk: Option<f64>) -> PointMetrics {
        PointMetrics {
            client: ClientMetrics {
                throughput_mb_s: tput,
                sessions: 10,
                ..Default::default()
            },
            disk: disk.map(|mb_s| DiskMetrics {
                mb_s,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn mean_averages_present_figures_only() {
        let a = point(10.0, Some(4.0));
        let b = point(20.0, None);
        let m = mean_of(&[&a, &b]).unwrap();
        assert_eq!(m.client.throughput_mb_s, 15.0);
        assert_eq!(m.disk.unwrap().mb_s, 4.0);
        assert!(mean_of(&[]).is_none());
    }

    #[test]
    fn old_cpu_util_is_read_but_not_written_and_new_figures_round_trip() {
        let old: PointMetrics =
            serde_json::from_str(r#"{"client":{"sessions":1,"failed_sessions":0,"failure_fraction":0.0,"requests":1,"timed_out_requests":0,"throughput_mb_s":1.0,"steady_s":1.0},"cpu_util":0.95}"#)
                .unwrap();
        assert_eq!(old.cpu_util, Some(0.95));
        assert_eq!(old.cpu_busy, None);
        let json = serde_json::to_string(&old).unwrap();
        assert!(
            !json.contains("cpu_util") && !json.contains("cores"),
            "{json}"
        );

        let mut a = point(1.0, None);
        a.cpu_busy = Some(0.2);
        a.cpu_iowait = Some(0.6);
        a.cores.server = Some(0.5);
        let mut b = point(1.0, None);
        b.cpu_busy = Some(0.4);
        b.cores.server = Some(1.5);
        b.cores.load = Some(0.1);
        let back: PointMetrics = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(back, a);
        let m = mean_of(&[&a, &b]).unwrap();
        assert!((m.cpu_busy.unwrap() - 0.3).abs() < 1e-12);
        assert_eq!(m.cpu_iowait, Some(0.6));
        assert_eq!(m.cores.server, Some(1.0));
        assert_eq!(m.cores.load, Some(0.1));
        assert_eq!(m.cores.disk_emulator, None);
        assert_eq!(m.cores.balancer, None);
        assert_eq!(m.cores.balancer_per_gbit_s, None);
    }

    #[test]
    fn balancer_cores_per_gbit_s_follow_the_delivery() {
        // 125 MB/s is 1 Gbit/s.
        assert_eq!(per_gbit_s(0.5, 125.0), Some(0.5));
        assert_eq!(per_gbit_s(0.5, 0.0), None);
        let mut a = point(125.0, None);
        a.cores.balancer = Some(0.2);
        a.cores = a.cores.with_delivery(a.client.throughput_mb_s);
        assert_eq!(a.cores.balancer_per_gbit_s, Some(0.2));
        let mut b = point(375.0, None);
        b.cores.balancer = Some(0.6);
        // The mean's figure is its mean cores over its mean delivery (2 Gbit/s).
        let m = mean_of(&[&a, &b]).unwrap();
        assert!((m.cores.balancer.unwrap() - 0.4).abs() < 1e-12);
        assert!((m.cores.balancer_per_gbit_s.unwrap() - 0.2).abs() < 1e-12);
        let back: PointMetrics = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(back, a);
        // A point without a balancer writes neither figure.
        let json = serde_json::to_string(&point(1.0, None)).unwrap();
        assert!(!json.contains("balancer"), "{json}");
    }
}
