//! iostat-style system metrics per interval, from `/proc`: per block device reads/s, MB/s,
//! average read size, milliseconds per transaction (busy time / transactions, seed 001 §5),
//! utilization and queue length; CPU shares; memory and page cache (also of one memory
//! cgroup); network bytes. [`Sampler`] turns successive snapshots into [`Sample`]s that a
//! bench run collects as a [`TimeSeries`].

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

/// Cumulative counters of one block device (one `/proc/diskstats` line).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskCounters {
    pub reads: u64,
    pub sectors_read: u64,
    pub writes: u64,
    pub sectors_written: u64,
    pub in_flight: u64,
    /// Milliseconds with at least one request in flight.
    pub busy_ms: u64,
    /// Milliseconds of request time summed over requests (queue-length integral).
    pub weighted_ms: u64,
}

/// Parse `/proc/diskstats` text into counters by device name.
pub fn parse_diskstats(text: &str) -> BTreeMap<String, DiskCounters> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 14 {
                return None;
            }
            let n = |i: usize| f[i].parse::<u64>().unwrap_or(0);
            Some((
                f[2].to_string(),
                DiskCounters {
                    reads: n(3),
                    sectors_read: n(5),
                    writes: n(7),
                    sectors_written: n(9),
                    in_flight: n(11),
                    busy_ms: n(12),
                    weighted_ms: n(13),
                },
            ))
        })
        .collect()
}

/// Cumulative CPU time in clock ticks (the `cpu` line of `/proc/stat`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuCounters {
    pub user: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub other: u64,
}

impl CpuCounters {
    fn total(&self) -> u64 {
        self.user + self.system + self.idle + self.iowait + self.other
    }
}

/// Parse the aggregate `cpu` line of `/proc/stat`.
pub fn parse_stat(text: &str) -> CpuCounters {
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return CpuCounters::default();
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let g = |i: usize| v.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal
    CpuCounters {
        user: g(0) + g(1),
        system: g(2) + g(5) + g(6),
        idle: g(3),
        iowait: g(4),
        other: g(7),
    }
}

/// Memory figures from `/proc/meminfo`, bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemorySample {
    pub total: u64,
    pub free: u64,
    pub available: u64,
    /// Page cache (`Cached`, without swap cache) plus `Buffers`.
    pub page_cache: u64,
    pub dirty: u64,
}

/// Parse `/proc/meminfo`.
pub fn parse_meminfo(text: &str) -> MemorySample {
    let kb = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    MemorySample {
        total: kb("MemTotal"),
        free: kb("MemFree"),
        available: kb("MemAvailable"),
        page_cache: kb("Cached") + kb("Buffers"),
        dirty: kb("Dirty"),
    }
}

/// Parse `/proc/net/dev` into (received, transmitted) bytes by interface.
pub fn parse_netdev(text: &str) -> BTreeMap<String, (u64, u64)> {
    text.lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let v: Vec<u64> = rest
                .split_whitespace()
                .map(|x| x.parse().unwrap_or(0))
                .collect();
            (v.len() >= 9).then(|| (name.trim().to_string(), (v[0], v[8])))
        })
        .collect()
}

/// One device over one interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiskSample {
    pub device: String,
    pub reads_per_s: f64,
    /// MiB/s read.
    pub read_mb_s: f64,
    /// Average read size, KiB.
    pub avg_read_kb: f64,
    pub writes_per_s: f64,
    pub write_mb_s: f64,
    /// Busy milliseconds per completed transaction (read or write).
    pub ms_per_transaction: f64,
    /// Fraction of the interval with a request in flight.
    pub utilization: f64,
    /// Average number of requests in flight.
    pub queue_len: f64,
}

/// CPU shares over one interval (fractions of all CPUs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuSample {
    pub user: f64,
    pub system: f64,
    pub iowait: f64,
    pub idle: f64,
}

/// Usage of the watched memory cgroup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CgroupSample {
    pub usage_bytes: u64,
    pub cache_bytes: u64,
}

/// Everything measured over one interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the sampler started, at the end of the interval.
    pub t: f64,
    /// Length of the interval, s.
    pub interval: f64,
    pub disks: Vec<DiskSample>,
    pub cpu: CpuSample,
    pub memory: MemorySample,
    pub cgroup: Option<CgroupSample>,
    /// Bytes/s received and sent over all interfaces except loopback.
    pub net_rx_bytes_s: f64,
    pub net_tx_bytes_s: f64,
    /// Same over loopback (load tests on one machine).
    pub lo_rx_bytes_s: f64,
    pub lo_tx_bytes_s: f64,
}

/// A run's samples, as stored by the bench runner.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeSeries {
    pub samples: Vec<Sample>,
}

#[derive(Debug, Clone)]
struct Snapshot {
    at: Instant,
    disks: BTreeMap<String, DiskCounters>,
    cpu: CpuCounters,
    net: BTreeMap<String, (u64, u64)>,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn snapshot() -> Snapshot {
    Snapshot {
        at: Instant::now(),
        disks: parse_diskstats(&read("/proc/diskstats")),
        cpu: parse_stat(&read("/proc/stat")),
        net: parse_netdev(&read("/proc/net/dev")),
    }
}

/// What to watch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SamplerConfig {
    /// Device names (`loop0`, `sda`); empty = every device with activity.
    pub devices: Vec<String>,
    /// A memory cgroup directory to report (e.g. a [`crate::memory::MemoryBudget`]'s).
    pub cgroup: Option<PathBuf>,
}

/// Turns successive `/proc` snapshots into per-interval samples.
#[derive(Debug)]
pub struct Sampler {
    cfg: SamplerConfig,
    start: Instant,
    prev: Snapshot,
}

impl Sampler {
    /// Start sampling; fails if a named device does not exist.
    pub fn new(cfg: SamplerConfig) -> Result<Self, String> {
        let first = snapshot();
        for d in &cfg.devices {
            if !first.disks.contains_key(d) {
                return Err(format!("device `{d}` is not in /proc/diskstats"));
            }
        }
        Ok(Sampler {
            cfg,
            start: first.at,
            prev: first,
        })
    }

    /// Measure the interval since the previous call (or since [`Sampler::new`]).
    pub fn sample(&mut self) -> Sample {
        let now = snapshot();
        let s = diff(
            &self.prev,
            &now,
            &self.cfg,
            now.at.duration_since(self.start).as_secs_f64(),
        );
        self.prev = now;
        let mut s = s;
        s.memory = parse_meminfo(&read("/proc/meminfo"));
        s.cgroup = self.cfg.cgroup.as_ref().map(|dir| cgroup_sample(dir));
        s
    }
}

fn cgroup_sample(dir: &std::path::Path) -> CgroupSample {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let stat = read("memory.stat").unwrap_or_default();
    let field = |name: &str| {
        stat.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0u64)
    };
    let usage = read("memory.usage_in_bytes")
        .or_else(|| read("memory.current"))
        .unwrap_or_default();
    let cache = if stat.contains("total_cache ") {
        field("total_cache")
    } else {
        field("file")
    };
    CgroupSample {
        usage_bytes: usage.trim().parse().unwrap_or(0),
        cache_bytes: cache,
    }
}

fn diff(a: &Snapshot, b: &Snapshot, cfg: &SamplerConfig, t: f64) -> Sample {
    let secs = b.at.duration_since(a.at).as_secs_f64().max(1e-6);
    let disks = b
        .disks
        .iter()
        .filter(|(name, _)| {
            if cfg.devices.is_empty() {
                true
            } else {
                cfg.devices.contains(name)
            }
        })
        .filter_map(|(name, now)| {
            let was = a.disks.get(name).copied().unwrap_or_default();
            let d = |x: u64, y: u64| x.saturating_sub(y) as f64;
            let (reads, writes) = (d(now.reads, was.reads), d(now.writes, was.writes));
            let busy = d(now.busy_ms, was.busy_ms);
            if cfg.devices.is_empty() && reads + writes == 0.0 && busy == 0.0 {
                return None;
            }
            let read_bytes = d(now.sectors_read, was.sectors_read) * 512.0;
            Some(DiskSample {
                device: name.clone(),
                reads_per_s: reads / secs,
                read_mb_s: read_bytes / 1_048_576.0 / secs,
                avg_read_kb: if reads > 0.0 {
                    read_bytes / 1024.0 / reads
                } else {
                    0.0
                },
                writes_per_s: writes / secs,
                write_mb_s: d(now.sectors_written, was.sectors_written) * 512.0
                    / 1_048_576.0
                    / secs,
                ms_per_transaction: if reads + writes > 0.0 {
                    busy / (reads + writes)
                } else {
                    0.0
                },
                utilization: (busy / 1000.0 / secs).min(1.0),
                queue_len: d(now.weighted_ms, was.weighted_ms) / 1000.0 / secs,
            })
        })
        .collect();
    let total = b.cpu.total().saturating_sub(a.cpu.total()).max(1) as f64;
    let share = |x: u64, y: u64| x.saturating_sub(y) as f64 / total;
    let cpu = CpuSample {
        user: share(b.cpu.user, a.cpu.user),
        system: share(b.cpu.system, a.cpu.system),
        iowait: share(b.cpu.iowait, a.cpu.iowait),
        idle: share(b.cpu.idle, a.cpu.idle),
    };
    let rate = |lo: bool, rx: bool| {
        b.net
            .iter()
            .filter(|(n, _)| (n.as_str() == "lo") == lo)
            .map(|(n, now)| {
                let was = a.net.get(n).copied().unwrap_or(*now);
                let (x, y) = if rx { (now.0, was.0) } else { (now.1, was.1) };
                x.saturating_sub(y) as f64
            })
            .sum::<f64>()
            / secs
    };
    Sample {
        t,
        interval: secs,
        disks,
        cpu,
        memory: MemorySample::default(),
        cgroup: None,
        net_rx_bytes_s: rate(false, true),
        net_tx_bytes_s: rate(false, false),
        lo_rx_bytes_s: rate(true, true),
        lo_tx_bytes_s: rate(true, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const DISK_A: &str = "   7       0 loop0 100 0 2048 500 10 0 80 40 0 400 540 0 0 0 0\n   8       0 sda 5 0 40 2 0 0 0 0 0 3 2 0 0 0 0\n";
    const DISK_B: &str = "   7       0 loop0 300 0 6144 900 30 0 240 60 1 900 1500 0 0 0 0\n   8       0 sda 5 0 40 2 0 0 0 0 0 3 2 0 0 0 0\n";

    #[test]
    fn disk_deltas_give_iostat_figures() {
        let at = Instant::now();
        let a = Snapshot {
            at,
            disks: parse_diskstats(DISK_A),
            cpu: CpuCounters::default(),
            net: BTreeMap::new(),
        };
        let b = Snapshot {
            at: at + Duration::from_secs(1),
            disks: parse_diskstats(DISK_B),
            cpu: CpuCounters::default(),
            net: BTreeMap::new(),
        };
        let s = diff(&a, &b, &SamplerConfig::default(), 1.0);
        assert_eq!(s.disks.len(), 1, "idle sda must be left out");
        let d = &s.disks[0];
        assert_eq!(d.device, "loop0");
        assert!((d.reads_per_s - 200.0).abs() < 1e-9);
        assert!((d.read_mb_s - 4096.0 * 512.0 / 1_048_576.0).abs() < 1e-9);
        assert!((d.avg_read_kb - 4096.0 * 512.0 / 1024.0 / 200.0).abs() < 1e-9);
        assert!((d.ms_per_transaction - 500.0 / 220.0).abs() < 1e-9);
        assert!((d.utilization - 0.5).abs() < 1e-9);
        assert!((d.queue_len - 0.96).abs() < 1e-9);
    }

    #[test]
    fn cpu_memory_and_network_parse() {
        let c = parse_stat("cpu  10 5 20 60 5 0 0 0 0 0\ncpu0 1 1 1 1 1 0 0 0 0 0\n");
        assert_eq!((c.user, c.system, c.idle, c.iowait), (15, 20, 60, 5));
        let m = parse_meminfo("MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    500 kB\nBuffers:          10 kB\nCached:          300 kB\nSwapCached:        0 kB\nDirty:             4 kB\n");
        assert_eq!(m.page_cache, 310 * 1024);
        assert_eq!(m.total, 1000 * 1024);
        let n = parse_netdev("Inter-|   Receive\n face |bytes packets\n    lo: 100 1 0 0 0 0 0 0 200 2 0 0 0 0 0 0\n  eth0: 5 1 0 0 0 0 0 0 7 1 0 0 0 0 0 0\n");
        assert_eq!(n["lo"], (100, 200));
        assert_eq!(n["eth0"], (5, 7));
    }

    #[test]
    fn live_sampler_reports_named_devices_only() {
        let first = parse_diskstats(&read("/proc/diskstats"));
        let Some(name) = first.keys().next().cloned() else {
            eprintln!("SKIPPED: /proc/diskstats lists no devices");
            return;
        };
        let mut s = Sampler::new(SamplerConfig {
            devices: vec![name.clone()],
            cgroup: None,
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let sample = s.sample();
        assert_eq!(sample.disks.len(), 1);
        assert_eq!(sample.disks[0].device, name);
        assert!(sample.memory.total > 0);
        assert!(Sampler::new(SamplerConfig {
            devices: vec!["no-such-disk".into()],
            cgroup: None
        })
        .is_err());
    }
}
