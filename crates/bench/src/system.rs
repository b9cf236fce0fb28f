//! Adapters to `vodkit-disk`: the /proc sampler running on a background thread while a
//! point runs (summarised over the steady-state window), and the memory budget (memory
//! cgroup, page cache included) that server commands join before they start.

use crate::experiment::{Sampler, SystemFigures};
use crate::launch::CommandWrap;
use crate::point::DiskMetrics;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};
use vodkit_disk::sys;

/// The /proc/diskstats name of the device holding `path` (None for tmpfs/overlay).
pub fn device_of(path: &Path) -> Option<String> {
    let dev = std::fs::metadata(path).ok()?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    if major == 0 {
        return None;
    }
    let node = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"))
        .canonicalize()
        .ok()?;
    node.file_name().map(|n| n.to_string_lossy().into_owned())
}

type Samples = Arc<Mutex<Vec<(SystemTime, sys::Sample)>>>;

/// Samples /proc once a second on a thread while a point runs.
pub struct ProcSampler {
    pub device: Option<String>,
    pub cgroup: Option<PathBuf>,
    samples: Samples,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ProcSampler {
    /// Watch the device holding `root` (and the budget's cgroup when given).
    pub fn for_root(root: &Path, cgroup: Option<PathBuf>) -> ProcSampler {
        ProcSampler {
            device: device_of(root),
            cgroup,
            samples: Arc::default(),
            stop: Arc::default(),
            thread: None,
        }
    }
}

impl Sampler for ProcSampler {
    fn start(&mut self) -> Result<(), String> {
        let cfg = sys::SamplerConfig {
            devices: self.device.iter().cloned().collect(),
            cgroup: self.cgroup.clone(),
        };
        let mut sampler = sys::Sampler::new(cfg)?;
        self.samples.lock().map_err(|e| e.to_string())?.clear();
        self.stop.store(false, Ordering::SeqCst);
        let (samples, stop) = (self.samples.clone(), self.stop.clone());
        self.thread = Some(std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                for _ in 0..10 {
                    std::thread::sleep(Duration::from_millis(100));
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                }
                let s = sampler.sample();
                if let Ok(mut v) = samples.lock() {
                    v.push((SystemTime::now(), s));
                }
            }
        }));
        Ok(())
    }

    fn finish(
        &mut self,
        window: Option<(SystemTime, SystemTime)>,
    ) -> Result<SystemFigures, String> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join()
                .map_err(|_| "sampler thread panicked".to_string())?;
        }
        let all = self.samples.lock().map_err(|e| e.to_string())?;
        let picked: Vec<&sys::Sample> = all
            .iter()
            .filter(|(at, _)| {
                window.is_none_or(|(a, b)| *at > a && *at <= b + Duration::from_millis(500))
            })
            .map(|(_, s)| s)
            .collect();
        let mut figures = summarise(&picked, self.device.as_deref());
        if self.device.is_none() {
            figures
                .notes
                .push("the file set is not on a block device: no disk figures".into());
        }
        if picked.is_empty() {
            figures
                .notes
                .push("no system samples fell in the steady-state window".into());
        }
        Ok(figures)
    }
}

/// Disk and CPU figures over a set of samples (time-weighted; read size per transaction).
pub fn summarise(samples: &[&sys::Sample], device: Option<&str>) -> SystemFigures {
    let secs: f64 = samples.iter().map(|s| s.interval).sum();
    if secs <= 0.0 {
        return SystemFigures::default();
    }
    let cpu = samples
        .iter()
        .map(|s| (1.0 - s.cpu.idle) * s.interval)
        .sum::<f64>()
        / secs;
    let disk = device.map(|dev| {
        let rows: Vec<(f64, &sys::DiskSample)> = samples
            .iter()
            .flat_map(|s| {
                s.disks
                    .iter()
                    .filter(|d| d.device == dev)
                    .map(move |d| (s.interval, d))
            })
            .collect();
        let reads: f64 = rows.iter().map(|(i, d)| d.reads_per_s * i).sum();
        let writes: f64 = rows.iter().map(|(i, d)| d.writes_per_s * i).sum();
        let mib: f64 = rows.iter().map(|(i, d)| d.read_mb_s * i).sum();
        let busy_ms: f64 = rows.iter().map(|(i, d)| d.utilization * i * 1000.0).sum();
        DiskMetrics {
            mb_s: mib * 1.048576 / secs,
            reads_per_s: reads / secs,
            ms_per_transaction: if reads + writes > 0.0 {
                busy_ms / (reads + writes)
            } else {
                0.0
            },
            avg_read_kib: if reads > 0.0 {
                mib * 1024.0 / reads
            } else {
                0.0
            },
            utilization: busy_ms / 1000.0 / secs,
        }
    });
    SystemFigures {
        disk,
        cpu_util: Some(cpu),
        notes: Vec::new(),
    }
}

/// A memory budget shared by every server start of a bench; removed when dropped.
pub struct Budget {
    inner: Option<vodkit_disk::memory::MemoryBudget>,
}

impl Budget {
    pub fn create(limit: u64) -> Result<Budget, String> {
        let name = format!("vodkit-bench-{}", std::process::id());
        let b = vodkit_disk::memory::MemoryBudget::create(&name, limit)
            .map_err(|e| format!("memory budget: {e}"))?;
        Ok(Budget { inner: Some(b) })
    }

    pub fn cgroup_dir(&self) -> Option<PathBuf> {
        self.inner.as_ref().map(|b| b.dir().to_path_buf())
    }

    /// A command wrap that moves the server into the budget before it execs.
    pub fn wrap(&self) -> Option<CommandWrap> {
        let procs = self.inner.as_ref()?.procs_file();
        Some(Box::new(move |mut cmd: std::process::Command| {
            vodkit_disk::memory::confine_to(&procs, &mut cmd).map_err(|e| e.to_string())?;
            Ok(cmd)
        }))
    }
}

impl Drop for Budget {
    fn drop(&mut self) {
        if let Some(b) = self.inner.take() {
            if let Err(e) = b.remove() {
                tracing::warn!("removing the memory budget cgroup: {e}");
            }
        }
    }
}

/// The emulated hard disk from `vodkit-disk`, brought up in this process for the bench and
/// taken down when dropped. The image (and so the file set written on it) is kept.
pub struct HddTestbed {
    bed: Option<vodkit_disk::testbed::Testbed>,
    preset: String,
    size: u64,
    pub mount: PathBuf,
}

impl HddTestbed {
    /// Bring up `preset` with a `size`-byte image at `image`, mounted at `mount`.
    pub fn up(preset: &str, image: &Path, mount: &Path, size: u64) -> Result<HddTestbed, String> {
        let size = size.div_ceil(4096) * 4096;
        // A bench killed earlier leaves its device mounted with nobody serving it: clear it.
        let state_root = Path::new(vodkit_disk::testbed::DEFAULT_STATE_ROOT);
        if let Some(old) = vodkit_disk::testbed::load_state(state_root, mount) {
            if !vodkit_disk::testbed::pid_alive(old.pid) {
                vodkit_disk::testbed::down(state_root, mount).map_err(|e| {
                    format!("clearing a stale emulated disk at {}: {e}", mount.display())
                })?;
            }
        }
        let cfg = vodkit_disk::testbed::Config::new(preset, size.max(64 << 20), image, mount);
        let bed = vodkit_disk::testbed::Testbed::up(&cfg)
            .map_err(|e| format!("emulated disk {preset}: {e}"))?;
        Ok(HddTestbed {
            bed: Some(bed),
            preset: preset.into(),
            size,
            mount: mount.to_path_buf(),
        })
    }

    /// Image size for a file set of `bytes`: room for ext4 and some slack.
    pub fn image_size_for(bytes: u64) -> u64 {
        (bytes + bytes / 4 + (256 << 20)).div_ceil(4096) * 4096
    }
}

impl crate::experiment::Testbed for HddTestbed {
    fn describe(&self) -> String {
        let dev = self
            .bed
            .as_ref()
            .map(|b| b.state().loop_device.clone())
            .unwrap_or_default();
        format!(
            "emulated {} disk ({dev}, {} image)",
            self.preset,
            bytesize::ByteSize(self.size)
        )
    }
    fn drop_caches(&mut self) -> Option<String> {
        crate::experiment::drop_page_cache().err()
    }
}

impl Drop for HddTestbed {
    fn drop(&mut self) {
        if let Some(b) = self.bed.take() {
            if let Err(e) = b.down() {
                tracing::warn!("taking the emulated disk down: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(interval: f64, idle: f64, reads: f64, mib: f64, util: f64) -> sys::Sample {
        sys::Sample {
            t: 0.0,
            interval,
            disks: vec![sys::DiskSample {
                device: "vdz".into(),
                reads_per_s: reads,
                read_mb_s: mib,
                avg_read_kb: 0.0,
                writes_per_s: 0.0,
                write_mb_s: 0.0,
                ms_per_transaction: 0.0,
                utilization: util,
                queue_len: 0.0,
            }],
            cpu: sys::CpuSample {
                user: 1.0 - idle,
                system: 0.0,
                iowait: 0.0,
                idle,
            },
            memory: Default::default(),
            cgroup: None,
            net_rx_bytes_s: 0.0,
            net_tx_bytes_s: 0.0,
            lo_rx_bytes_s: 0.0,
            lo_tx_bytes_s: 0.0,
        }
    }

    #[test]
    fn summary_is_time_weighted_and_per_transaction() {
        // 1 s at 100 reads/s of 1 MiB, fully busy; 1 s idle.
        let a = sample(1.0, 0.5, 100.0, 100.0, 1.0);
        let b = sample(1.0, 1.0, 0.0, 0.0, 0.0);
        let f = summarise(&[&a, &b], Some("vdz"));
        let d = f.disk.unwrap();
        assert!((d.mb_s - 52.4288).abs() < 1e-9, "{}", d.mb_s);
        assert!((d.avg_read_kib - 1024.0).abs() < 1e-9);
        assert!((d.ms_per_transaction - 10.0).abs() < 1e-9);
        assert!((d.utilization - 0.5).abs() < 1e-9);
        assert!((f.cpu_util.unwrap() - 0.25).abs() < 1e-9);
        assert!(summarise(&[&a], None).disk.is_none());
    }

    #[test]
    fn root_device_is_found_for_a_block_backed_path() {
        // The target dir lives on a real filesystem in CI and here.
        let here = std::env::current_dir().unwrap();
        match device_of(&here) {
            Some(d) => assert!(
                std::fs::read_to_string("/proc/diskstats")
                    .unwrap()
                    .contains(&d),
                "{d}"
            ),
            None => eprintln!(
                "NOTE: {} is not on a block device; nothing to check",
                here.display()
            ),
        }
    }
}
