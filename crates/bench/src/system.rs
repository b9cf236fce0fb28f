//! Adapters to `vodkit-disk`: the /proc sampler running on a background thread while a
//! point runs (summarised over the steady-state window: disk, machine-wide CPU busy and
//! iowait, the cores used by the server, the load generator and the disk emulator, the
//! window's two halves and the emulated drive's own counters), and the memory budget (memory cgroup, page cache included) that server commands join
//! before they start.

use crate::child::CommandWrap;
use crate::experiment::{Sampler, SystemFigures};
use crate::point::{DiskMetrics, ProcessCores};
use std::collections::HashMap;
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
type ProcSamples = Arc<Mutex<Vec<(SystemTime, RoleTicks)>>>;
type DeviceSamples = Arc<Mutex<Vec<(SystemTime, DeviceCounters)>>>;
use vodkit_disk::testbed::fusedev::DeviceCounters;

/// Samples /proc once a second on a thread while a point runs.
pub struct ProcSampler {
    /// The block devices the file set is read from: one, or each origin's drive of a
    /// cluster (their figures are summed; utilization is their mean).
    pub devices: Vec<String>,
    pub cgroup: Option<PathBuf>,
    /// The emulated drive's control file, read with every sample for its counters.
    pub device_control: Option<PathBuf>,
    samples: Samples,
    procs: ProcSamples,
    counters: DeviceSamples,
    /// `ListenOverflows` when the point started.
    overflows_at_start: Option<u64>,
    watch: Watch,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ProcSampler {
    /// Watch the devices holding `roots` (one, or each origin's drive of a cluster), and the
    /// budget's cgroup when given.
    pub fn for_roots(roots: &[PathBuf], cgroup: Option<PathBuf>) -> ProcSampler {
        ProcSampler {
            devices: roots.iter().filter_map(|r| device_of(r)).collect(),
            cgroup,
            device_control: None,
            samples: Arc::default(),
            procs: Arc::default(),
            counters: Arc::default(),
            overflows_at_start: None,
            watch: Watch::default(),
            stop: Arc::default(),
            thread: None,
        }
    }
}

impl Sampler for ProcSampler {
    fn watch_server(&mut self, pids: &[u32]) {
        self.watch.server = pids.to_vec();
    }

    fn watch_balancer(&mut self, pids: &[u32]) {
        self.watch.balancer = pids.to_vec();
    }

    fn start(&mut self) -> Result<(), String> {
        let cfg = sys::SamplerConfig {
            devices: self.devices.clone(),
            cgroup: self.cgroup.clone(),
        };
        let mut sampler = sys::Sampler::new(cfg)?;
        self.samples.lock().map_err(|e| e.to_string())?.clear();
        self.overflows_at_start = read_listen_overflows();
        // The load generator runs on the thread that starts the sampler (the bench runs
        // the load right after), plus its named worker threads.
        self.watch.load_tid = Some(current_tid());
        self.watch.disk = self.devices.first().and_then(|d| disk_emulator_of(d));
        let watch = self.watch.clone();
        {
            let mut procs = self.procs.lock().map_err(|e| e.to_string())?;
            procs.clear();
            procs.push((SystemTime::now(), role_ticks(&watch)));
        }
        let control = self.device_control.clone();
        let read_counters = move || device_counters(control.as_ref()?);
        {
            let mut c = self.counters.lock().map_err(|e| e.to_string())?;
            c.clear();
            c.extend(read_counters().map(|r| (SystemTime::now(), r)));
        }
        self.stop.store(false, Ordering::SeqCst);
        let (samples, procs, stop) = (self.samples.clone(), self.procs.clone(), self.stop.clone());
        let counters = self.counters.clone();
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
                let ticks = role_ticks(&watch);
                if let Ok(mut v) = procs.lock() {
                    v.push((SystemTime::now(), ticks));
                }
                if let Some(c) = read_counters() {
                    if let Ok(mut v) = counters.lock() {
                        v.push((SystemTime::now(), c));
                    }
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
        let mut figures = summarise(&picked, &self.devices);
        if let Some((a, b)) = window {
            let mid = a + b.duration_since(a).unwrap_or_default() / 2;
            let (first, second): (Vec<&(SystemTime, sys::Sample)>, Vec<_>) = all
                .iter()
                .filter(|(at, _)| *at > a && *at <= b + Duration::from_millis(500))
                .partition(|(at, _)| *at <= mid);
            let disk = |half: &[&(SystemTime, sys::Sample)]| {
                let v: Vec<&sys::Sample> = half.iter().map(|(_, s)| s).collect();
                summarise(&v, &self.devices).disk.map(|d| d.mb_s)
            };
            figures.halves_disk_mb_s = disk(&first).zip(disk(&second)).map(|(x, y)| [x, y]);
        }
        let cache = |s: &sys::Sample| {
            s.cgroup
                .as_ref()
                .map_or(s.memory.page_cache, |c| c.cache_bytes)
        };
        figures.page_cache_bytes = [
            picked.first().map(|s| cache(s)),
            picked.last().map(|s| cache(s)),
        ];
        let counters = self.counters.lock().map_err(|e| e.to_string())?;
        figures.device = device_window(&counters, window);
        figures.listen_overflows = self
            .overflows_at_start
            .zip(read_listen_overflows())
            .map(|(a, b)| b.saturating_sub(a));
        let procs = self.procs.lock().map_err(|e| e.to_string())?;
        figures.cores = window_cores(&procs, window, clock_ticks());
        if self.devices.len() > 1 {
            figures.notes.push(per_drive(&picked, &self.devices));
        }
        if self.devices.is_empty() {
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

/// The emulated drive's figures over the window (whole run when `None`), from the last
/// reading at or before its start to the last at or before its end.
pub fn device_window(
    readings: &[(SystemTime, DeviceCounters)],
    window: Option<(SystemTime, SystemTime)>,
) -> Option<crate::point::DeviceFigures> {
    let (first, last) = match window {
        None => (readings.first(), readings.last()),
        Some((a, b)) => (
            readings
                .iter()
                .rev()
                .find(|(at, _)| *at <= a)
                .or(readings.first()),
            readings
                .iter()
                .rev()
                .find(|(at, _)| *at <= b + Duration::from_millis(500)),
        ),
    };
    let ((t0, a), (t1, b)) = (first?, last?);
    let secs = t1.duration_since(*t0).ok()?.as_secs_f64();
    crate::point::DeviceFigures::between(a, b, secs)
}

/// The report note on a cluster's drives, one per origin: each drive's read MB/s and how
/// busy it was over the samples.
fn per_drive(samples: &[&sys::Sample], devices: &[String]) -> String {
    let parts: Vec<String> = devices
        .iter()
        .enumerate()
        .map(|(k, dev)| {
            let d = summarise(samples, std::slice::from_ref(dev))
                .disk
                .unwrap_or_default();
            format!(
                "drive {} ({dev}) {:.1} MB/s, {:.0}% busy",
                k + 1,
                d.mb_s,
                100.0 * d.utilization
            )
        })
        .collect();
    format!("each origin's own drive: {}", parts.join("; "))
}

/// Disk and CPU figures over a set of samples (time-weighted; read size per transaction).
///
/// CPU busy is user + nice + system + irq + softirq + steal over all jiffies, which is
/// `1 − idle − iowait` of `/proc/stat`'s shares: a core waiting in iowait is idle, however
/// much of a disk-bound run that is. iowait is reported beside it.
pub fn summarise(samples: &[&sys::Sample], devices: &[String]) -> SystemFigures {
    let secs: f64 = samples.iter().map(|s| s.interval).sum();
    if secs <= 0.0 {
        return SystemFigures::default();
    }
    let weighted = |f: &dyn Fn(&sys::CpuSample) -> f64| {
        samples.iter().map(|s| f(&s.cpu) * s.interval).sum::<f64>() / secs
    };
    let busy = weighted(&|c| (1.0 - c.idle - c.iowait).max(0.0));
    let iowait = weighted(&|c| c.iowait);
    let disk = (!devices.is_empty()).then(|| {
        let rows: Vec<(f64, &sys::DiskSample)> = samples
            .iter()
            .flat_map(|s| {
                s.disks
                    .iter()
                    .filter(|d| devices.contains(&d.device))
                    .map(move |d| (s.interval, d))
            })
            .collect();
        let reads: f64 = rows.iter().map(|(i, d)| d.reads_per_s * i).sum();
        let writes: f64 = rows.iter().map(|(i, d)| d.writes_per_s * i).sum();
        let mib: f64 = rows.iter().map(|(i, d)| d.read_mb_s * i).sum();
        let busy_ms: f64 = rows.iter().map(|(i, d)| d.utilization * i * 1000.0).sum();
        let used = devices
            .iter()
            .filter(|dev| {
                rows.iter()
                    .any(|(_, d)| &d.device == *dev && d.utilization > 0.0)
            })
            .count();
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
            // The mean over the drives in use (a single origin leaves a cluster's others idle).
            utilization: busy_ms / 1000.0 / secs / used.max(1) as f64,
        }
    });
    let cgroup: Vec<&sys::CgroupSample> =
        samples.iter().filter_map(|s| s.cgroup.as_ref()).collect();
    let server_memory = (!cgroup.is_empty()).then(|| crate::point::ServerMemory {
        peak_bytes: cgroup.iter().map(|c| c.usage_bytes).max().unwrap_or(0),
        peak_cache_bytes: cgroup.iter().map(|c| c.cache_bytes).max().unwrap_or(0),
        peak_other_bytes: cgroup
            .iter()
            .map(|c| c.usage_bytes.saturating_sub(c.cache_bytes))
            .max()
            .unwrap_or(0),
    });
    SystemFigures {
        disk,
        cpu_busy: Some(busy),
        cpu_iowait: Some(iowait),
        cores: ProcessCores::default(),
        server_memory,
        listen_overflows: None,
        halves_disk_mb_s: None,
        page_cache_bytes: [None, None],
        device: None,
        notes: Vec::new(),
    }
}

/// `TcpExtListenOverflows` of a `/proc/net/netstat` text: pairs of lines, field names then
/// values, per protocol prefix.
pub fn listen_overflows(netstat: &str) -> Option<u64> {
    let mut lines = netstat.lines();
    while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
        let (Some(("TcpExt", names)), Some(("TcpExt", values))) =
            (names.split_once(':'), values.split_once(':'))
        else {
            continue;
        };
        let at = names
            .split_whitespace()
            .position(|n| n == "ListenOverflows")?;
        return values.split_whitespace().nth(at)?.parse().ok();
    }
    None
}

fn read_listen_overflows() -> Option<u64> {
    listen_overflows(&std::fs::read_to_string("/proc/net/netstat").ok()?)
}

/// Name prefix of the load generator's worker threads (crates/load/src/engine.rs names
/// them `vodkit-load-N`).
const LOAD_THREAD_PREFIX: &str = "vodkit-load";
/// Name prefix of the FUSE session threads of an emulated disk served in this process
/// (the fuser crate names them `fuser-N`).
const FUSE_THREAD_PREFIX: &str = "fuser-";

/// The fields of `/proc/PID/stat` (or `/proc/PID/task/TID/stat`) the sampler uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    pub comm: String,
    pub ppid: u32,
    /// User and system time in clock ticks; for a process, of all its threads (live and
    /// exited).
    pub utime: u64,
    pub stime: u64,
}

impl ProcStat {
    pub fn ticks(&self) -> u64 {
        self.utime + self.stime
    }
}

/// Parse one `stat` line (proc(5)); `None` when it is not one. The command name may hold
/// spaces and parentheses, so the fields are counted from its last `)`.
pub fn parse_proc_stat(text: &str) -> Option<ProcStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3 (state), so field n is rest[n - 3].
    let field = |n: usize| -> Option<u64> { rest.get(n - 3)?.parse().ok() };
    Some(ProcStat {
        comm,
        ppid: u32::try_from(field(4)?).ok()?,
        utime: field(14)?,
        stime: field(15)?,
    })
}

fn read_proc_stat(path: &Path) -> Option<ProcStat> {
    parse_proc_stat(&std::fs::read_to_string(path).ok()?)
}

/// Clock ticks per second of the /proc times.
pub fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}

fn current_tid() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() as u32 }
}

/// Every process on the machine, by pid.
pub fn all_processes() -> HashMap<u32, ProcStat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return HashMap::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            Some((
                pid,
                read_proc_stat(&PathBuf::from(format!("/proc/{pid}/stat")))?,
            ))
        })
        .collect()
}

/// Kill every process of the trees rooted at `roots` with `SIGKILL`, as a machine dies:
/// no connection is closed cleanly. Returns how many were signalled.
pub fn kill_trees(roots: &[u32]) -> usize {
    let procs = all_processes();
    let tree = tree_ticks(&procs, roots);
    let mut n = 0;
    for &pid in tree.keys() {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            continue;
        };
        // SAFETY: kill takes no pointers; a pid that has gone meanwhile gets ESRCH.
        if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
            n += 1;
        }
    }
    n
}

/// CPU ticks of each of `roots` and of all their descendants, by pid.
pub fn tree_ticks(procs: &HashMap<u32, ProcStat>, roots: &[u32]) -> HashMap<u32, u64> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (pid, st) in procs {
        children.entry(st.ppid).or_default().push(*pid);
    }
    let mut out = HashMap::new();
    let mut todo: Vec<u32> = roots.to_vec();
    while let Some(pid) = todo.pop() {
        let Some(st) = procs.get(&pid) else { continue };
        if out.insert(pid, st.ticks()).is_none() {
            todo.extend(children.get(&pid).into_iter().flatten());
        }
    }
    out
}

/// CPU ticks of the threads of process `pid` whose name starts with `prefix`, and of the
/// thread `also` whatever its name, by thread id.
fn thread_ticks(pid: u32, prefix: &str, also: Option<u32>) -> HashMap<u32, u64> {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return HashMap::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let tid: u32 = e.file_name().to_str()?.parse().ok()?;
            let st = read_proc_stat(&e.path().join("stat"))?;
            (st.comm.starts_with(prefix) || Some(tid) == also).then_some((tid, st.ticks()))
        })
        .collect()
}

/// Where the emulated disk behind a loop device is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskEmulator {
    /// By FUSE threads of this process (the bench's own testbed).
    InProcess,
    /// By a `vodkit hdd up` daemon.
    Daemon(u32),
}

/// The server of the emulated disk attached as `device` (`loop3`): the testbed's state
/// file lies in the directory above the FUSE image the loop device reads, and names the
/// serving process. `None` for any other device.
pub fn disk_emulator_of(device: &str) -> Option<DiskEmulator> {
    use vodkit_disk::testbed;
    let backing = std::fs::read_to_string(format!("/sys/block/{device}/loop/backing_file"));
    let next_to_image = backing.ok().and_then(|b| {
        let dir = Path::new(b.trim()).parent()?.parent()?.to_path_buf();
        let text = std::fs::read_to_string(dir.join("state.json")).ok()?;
        serde_json::from_str::<testbed::State>(&text).ok()
    });
    let state = next_to_image.or_else(|| {
        testbed::list_states(Path::new(testbed::DEFAULT_STATE_ROOT))
            .into_iter()
            .find(|s| s.loop_device == device)
    })?;
    if state.loop_device != device {
        return None;
    }
    Some(if state.pid == std::process::id() {
        DiskEmulator::InProcess
    } else {
        DiskEmulator::Daemon(state.pid)
    })
}

/// Whose CPU the sampler measures.
#[derive(Debug, Clone, Default)]
struct Watch {
    /// Roots of the server's process trees.
    server: Vec<u32>,
    /// Roots of a cluster balancer's process trees.
    balancer: Vec<u32>,
    /// The thread running the load generator's coordinator.
    load_tid: Option<u32>,
    disk: Option<DiskEmulator>,
}

/// Cumulative CPU ticks of each watched role at one instant, by process or thread id;
/// `None` for a role that is not watched.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoleTicks {
    pub server: Option<HashMap<u32, u64>>,
    pub load: Option<HashMap<u32, u64>>,
    pub disk_emulator: Option<HashMap<u32, u64>>,
    pub balancer: Option<HashMap<u32, u64>>,
}

fn role_ticks(w: &Watch) -> RoleTicks {
    let me = std::process::id();
    let procs = (!w.server.is_empty()
        || !w.balancer.is_empty()
        || matches!(w.disk, Some(DiskEmulator::Daemon(_))))
    .then(all_processes);
    let tree = |roots: &[u32]| procs.as_ref().map(|p| tree_ticks(p, roots));
    RoleTicks {
        server: if w.server.is_empty() {
            None
        } else {
            tree(&w.server)
        },
        load: w
            .load_tid
            .map(|tid| thread_ticks(me, LOAD_THREAD_PREFIX, Some(tid))),
        disk_emulator: match w.disk {
            Some(DiskEmulator::InProcess) => Some(thread_ticks(me, FUSE_THREAD_PREFIX, None)),
            Some(DiskEmulator::Daemon(pid)) => tree(&[pid]),
            None => None,
        },
        balancer: (!w.balancer.is_empty())
            .then(|| tree(&w.balancer))
            .flatten(),
    }
}

/// Cores used between two readings of the same ids: what each id present at the end
/// gained since the start (an id born in between counts from zero; one missing at the
/// end counts nothing — [`window_cores`] passes each id's last reading instead).
pub fn cores_between(
    a: &HashMap<u32, u64>,
    b: &HashMap<u32, u64>,
    secs: f64,
    ticks_per_s: f64,
) -> f64 {
    let ticks: u64 = b
        .iter()
        .map(|(id, now)| now.saturating_sub(a.get(id).copied().unwrap_or(0)))
        .sum();
    ticks as f64 / ticks_per_s / secs
}

/// Cores used by each role over the steady-state window (whole run when `None`), from the
/// readings just before it starts to the last one in it.
pub fn window_cores(
    readings: &[(SystemTime, RoleTicks)],
    window: Option<(SystemTime, SystemTime)>,
    ticks_per_s: f64,
) -> ProcessCores {
    let (first, last) = match window {
        None => (readings.first(), readings.last()),
        Some((a, b)) => {
            let end = b + Duration::from_millis(500);
            (
                readings
                    .iter()
                    .rev()
                    .find(|(at, _)| *at <= a)
                    .or(readings.first()),
                readings.iter().rev().find(|(at, _)| *at <= end),
            )
        }
    };
    let (Some((t0, a)), Some((t1, b))) = (first, last) else {
        return ProcessCores::default();
    };
    let secs = t1.duration_since(*t0).map_or(0.0, |d| d.as_secs_f64());
    if secs < 0.5 {
        return ProcessCores::default();
    }
    // Each id's latest ticks up to the last reading: a thread that ended inside the window
    // (the load generator's workers when the run stops with the window) keeps what it used.
    let inside: Vec<&RoleTicks> = readings
        .iter()
        .filter(|(at, _)| at > t0 && at <= t1)
        .map(|(_, r)| r)
        .collect();
    let latest = |pick: &dyn Fn(&RoleTicks) -> &Option<HashMap<u32, u64>>| {
        pick(b).as_ref().map(|_| {
            let mut m: HashMap<u32, u64> = HashMap::new();
            for r in &inside {
                for (&id, &t) in pick(r).iter().flatten() {
                    let e = m.entry(id).or_insert(0);
                    *e = (*e).max(t);
                }
            }
            m
        })
    };
    let role = |x: &Option<HashMap<u32, u64>>, y: Option<HashMap<u32, u64>>| match (x, y) {
        (Some(x), Some(y)) => Some(cores_between(x, &y, secs, ticks_per_s)),
        _ => None,
    };
    ProcessCores {
        server: role(&a.server, latest(&|r| &r.server)),
        load: role(&a.load, latest(&|r| &r.load)),
        disk_emulator: role(&a.disk_emulator, latest(&|r| &r.disk_emulator)),
        balancer: role(&a.balancer, latest(&|r| &r.balancer)),
        balancer_per_gbit_s: None,
    }
}

/// The budget every server start of a bench runs in — a memory cgroup (page cache
/// included), a CPU quota, or both; removed when dropped.
pub struct Budget {
    inner: Option<vodkit_disk::memory::MemoryBudget>,
    cpu: Option<vodkit_disk::cpu::CpuQuota>,
}

impl Budget {
    /// The budget for `memory` bytes and `cpus` cores; `None` when neither is asked for.
    pub fn create(memory: Option<u64>, cpus: Option<f64>) -> Result<Option<Budget>, String> {
        // One name per budget, also for several benches in one process (tests in parallel).
        static BUDGETS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = BUDGETS.fetch_add(1, Ordering::SeqCst);
        let name = format!("vodkit-bench-{}-{n}", std::process::id());
        let mut b = Budget {
            inner: None,
            cpu: None,
        };
        if let Some(limit) = memory {
            b.inner = Some(
                vodkit_disk::memory::MemoryBudget::create(&name, limit)
                    .map_err(|e| format!("memory budget: {e}"))?,
            );
        }
        if let Some(cores) = cpus {
            // On failure `b` drops and removes the memory cgroup made above.
            b.cpu = Some(
                vodkit_disk::cpu::CpuQuota::create(&name, cores)
                    .map_err(|e| format!("CPU quota: {e}"))?,
            );
        }
        Ok((b.inner.is_some() || b.cpu.is_some()).then_some(b))
    }

    /// The memory cgroup, where the budget has one.
    pub fn cgroup_dir(&self) -> Option<PathBuf> {
        self.inner.as_ref().map(|b| b.dir().to_path_buf())
    }

    /// The memory the budget's cgroup holds now (page cache included), and its limit.
    pub fn memory_now(&self) -> Option<(vodkit_disk::memory::MemoryUsage, u64)> {
        self.inner.as_ref().map(|b| (b.usage(), b.limit()))
    }

    /// The CPU quota's cgroup, where the budget has one.
    pub fn cpu_cgroup_dir(&self) -> Option<PathBuf> {
        self.cpu.as_ref().map(|c| c.dir().to_path_buf())
    }

    /// A command wrap that moves the server into the budget's cgroups before it execs.
    pub fn wrap(&self) -> Option<CommandWrap> {
        let procs: Vec<PathBuf> = self
            .inner
            .as_ref()
            .map(|b| b.procs_file())
            .into_iter()
            .chain(self.cpu.as_ref().map(|c| c.procs_file()))
            .collect();
        Some(Box::new(move |mut cmd: std::process::Command| {
            for p in &procs {
                vodkit_disk::memory::confine_to(p, &mut cmd).map_err(|e| e.to_string())?;
            }
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
        if let Some(c) = self.cpu.take() {
            if let Err(e) = c.remove() {
                tracing::warn!("removing the CPU quota cgroup: {e}");
            }
        }
    }
}

/// The emulated hard disk from `vodkit-disk`, brought up in this process for the bench and
/// taken down when dropped. The image (and so the file set written on it) is kept.
pub struct HddTestbed {
    bed: Option<vodkit_disk::testbed::Testbed>,
    preset: vodkit_disk::model::Preset,
    size: u64,
    image: PathBuf,
    pub mount: PathBuf,
}

impl HddTestbed {
    /// Bring up `preset` with a `size`-byte image at `image`, mounted at `mount`.
    pub fn up(
        preset: vodkit_disk::model::Preset,
        image: &Path,
        mount: &Path,
        size: u64,
    ) -> Result<HddTestbed, String> {
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
            preset,
            size,
            image: image.to_path_buf(),
            mount: mount.to_path_buf(),
        })
    }

    /// `n` drives holding what this one holds, one per origin of a cluster: this drive is
    /// taken down (so its file system is clean), its image copied (sparse) beside it as
    /// `NAME-2`, `NAME-3`, …, and every drive brought up again, each mounted at this
    /// mount point's name with the same suffix. Each copy is a drive of its own: its own
    /// FUSE server, loop device, queue and page-cache pages, with the same layout.
    pub fn replicate(mut self, n: usize) -> Result<DriveSet, String> {
        let (preset, size) = (self.preset, self.size);
        let (image, mount) = (self.image.clone(), self.mount.clone());
        if let Some(b) = self.bed.take() {
            b.down()
                .map_err(|e| format!("taking the emulated disk down to copy it: {e}"))?;
        }
        let suffixed = |p: &Path, k: usize| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            let name = name.unwrap_or_default();
            let name = match name.rsplit_once('.') {
                Some((stem, ext)) => format!("{stem}-{k}.{ext}"),
                None => format!("{name}-{k}"),
            };
            p.with_file_name(name)
        };
        let mut drives = vec![HddTestbed::up(preset, &image, &mount, size)?];
        for k in 2..=n {
            let copy = suffixed(&image, k);
            let status = std::process::Command::new("cp")
                .arg("--sparse=always")
                .arg(&image)
                .arg(&copy)
                .status()
                .map_err(|e| format!("copying {} for origin {k}: {e}", image.display()))?;
            if !status.success() {
                return Err(format!(
                    "copying {} to {} for origin {k}: cp {status}",
                    image.display(),
                    copy.display()
                ));
            }
            drives.push(HddTestbed::up(preset, &copy, &suffixed(&mount, k), size)?);
        }
        Ok(DriveSet { drives })
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
    fn set_timing(&mut self, scale: f64) -> Result<(), String> {
        let bed = self.bed.as_ref().ok_or("the emulated disk is down")?;
        let command = vodkit_disk::testbed::Control::timing(scale)?;
        vodkit_disk::testbed::control(bed.state(), command).map_err(|e| e.to_string())
    }
    fn device_control(&self) -> Option<PathBuf> {
        self.bed.as_ref().map(|b| b.state().control_path())
    }
    fn wait_quiet(&mut self, max: Duration) -> Result<Option<f64>, String> {
        let control = self.device_control().ok_or("the emulated disk is down")?;
        wait_quiet_on(&[control], max)
    }
}

/// An emulated drive's counters, from its control file.
fn device_counters(control: &std::path::Path) -> Option<DeviceCounters> {
    let text = std::fs::read_to_string(control).ok()?;
    serde_json::from_str::<DeviceCounters>(&text).ok()
}

/// [`crate::experiment::wait_until_quiet`] on the drives of these control files.
fn wait_quiet_on(controls: &[PathBuf], max: Duration) -> Result<Option<f64>, String> {
    let activity = || {
        controls
            .iter()
            .map(|c| device_counters(c).map(|d| (d.reads, d.in_flight)))
            .collect()
    };
    crate::experiment::wait_until_quiet(activity, max).map(Some)
}

/// One emulated drive per origin of a cluster entry, each holding the same file set
/// ([`HddTestbed::replicate`]). The drives run on one clock: timing and caches change for all.
pub struct DriveSet {
    pub drives: Vec<HddTestbed>,
}

impl DriveSet {
    /// The directory `dir` of the file set on each drive, in origin order.
    pub fn roots(&self, dir: &str) -> Vec<PathBuf> {
        self.drives.iter().map(|d| d.mount.join(dir)).collect()
    }
}

impl crate::experiment::Testbed for DriveSet {
    fn describe(&self) -> String {
        let each: Vec<String> = self.drives.iter().map(|d| d.describe()).collect();
        format!(
            "{} drives, one per origin: {}",
            self.drives.len(),
            each.join("; ")
        )
    }
    fn drop_caches(&mut self) -> Option<String> {
        crate::experiment::drop_page_cache().err()
    }
    fn set_timing(&mut self, scale: f64) -> Result<(), String> {
        self.drives.iter_mut().try_for_each(|d| d.set_timing(scale))
    }
    /// The first drive's counters: the device figures are the first origin's.
    fn device_control(&self) -> Option<PathBuf> {
        self.drives.first().and_then(|d| d.device_control())
    }
    fn wait_quiet(&mut self, max: Duration) -> Result<Option<f64>, String> {
        let controls: Vec<PathBuf> = self
            .drives
            .iter()
            .filter_map(|d| d.device_control())
            .collect();
        wait_quiet_on(&controls, max)
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
        let f = summarise(&[&a, &b], &["vdz".into()]);
        let d = f.disk.unwrap();
        assert!((d.mb_s - 52.4288).abs() < 1e-9, "{}", d.mb_s);
        assert!((d.avg_read_kib - 1024.0).abs() < 1e-9);
        assert!((d.ms_per_transaction - 10.0).abs() < 1e-9);
        assert!((d.utilization - 0.5).abs() < 1e-9);
        assert!((f.cpu_busy.unwrap() - 0.25).abs() < 1e-9);
        assert_eq!(f.cpu_iowait, Some(0.0));
        assert!(summarise(&[&a], &[]).disk.is_none());
        assert_eq!(f.server_memory, None, "no cgroup, no server memory");
    }

    #[test]
    fn server_memory_is_the_peak_of_the_budget_cgroup() {
        let mut a = sample(1.0, 0.5, 0.0, 0.0, 0.0);
        let mut b = a.clone();
        a.cgroup = Some(sys::CgroupSample {
            usage_bytes: 900,
            cache_bytes: 800,
        });
        b.cgroup = Some(sys::CgroupSample {
            usage_bytes: 700,
            cache_bytes: 400,
        });
        let m = summarise(&[&a, &b], &[]).server_memory.unwrap();
        assert_eq!(
            (m.peak_bytes, m.peak_cache_bytes, m.peak_other_bytes),
            (900, 800, 300)
        );
    }

    /// CPU shares between two `/proc/stat` texts, as `vodkit_disk::sys` computes them.
    fn cpu_between(before: &str, after: &str) -> sys::CpuSample {
        let (a, b) = (sys::parse_stat(before), sys::parse_stat(after));
        let total = |c: &sys::CpuCounters| c.user + c.system + c.idle + c.iowait + c.other;
        let all = (total(&b) - total(&a)) as f64;
        let share = |x: u64, y: u64| (x - y) as f64 / all;
        sys::CpuSample {
            user: share(b.user, a.user),
            system: share(b.system, a.system),
            iowait: share(b.iowait, a.iowait),
            idle: share(b.idle, a.idle),
        }
    }

    #[test]
    fn listen_overflows_are_read_from_the_tcpext_lines() {
        let text = "TcpExt: SyncookiesSent SyncookiesRecv ListenOverflows ListenDrops\n\
                    TcpExt: 0 0 410694 410694\n\
                    IpExt: InNoRoutes ListenOverflows\n\
                    IpExt: 0 7\n";
        assert_eq!(listen_overflows(text), Some(410694));
        // IpExt first, then TcpExt: the TcpExt pair is found.
        let swapped = "IpExt: InNoRoutes\nIpExt: 3\nTcpExt: ListenOverflows\nTcpExt: 12\n";
        assert_eq!(listen_overflows(swapped), Some(12));
        assert_eq!(listen_overflows("TcpExt: Other\nTcpExt: 1\n"), None);
        assert_eq!(listen_overflows(""), None);
    }

    #[test]
    fn iowait_is_not_busy() {
        // Two cores over 10 s at 100 Hz (2000 jiffies): 0.30 cores busy (300 jiffies over
        // user 200, nice 50, system 25, irq 5, softirq 10, steal 10), 0.84 cores in iowait
        // (840), the rest idle (860). The old figure, 1 − idle, said 57%.
        let before = "cpu  1000 100 500 90000 3000 10 20 5 0 0\n";
        let after = "cpu  1200 150 525 90860 3840 15 30 15 0 0\n";
        let mut s = sample(10.0, 0.0, 0.0, 0.0, 0.0);
        s.cpu = cpu_between(before, after);
        let f = summarise(&[&s], &["vdz".into()]);
        let busy = f.cpu_busy.unwrap();
        let iowait = f.cpu_iowait.unwrap();
        assert!((busy - 0.15).abs() < 1e-9, "busy {busy}");
        assert!((iowait - 0.42).abs() < 1e-9, "iowait {iowait}");
        let one_minus_idle = 1.0 - s.cpu.idle;
        assert!((one_minus_idle - 0.57).abs() < 1e-9, "{one_minus_idle}");
        assert!(
            busy < one_minus_idle / 3.0,
            "busy {busy} vs 1 − idle {one_minus_idle}"
        );
    }

    #[test]
    fn stat_lines_parse_whatever_the_command_name() {
        let line = "4242 (nginx: worker (x) 1) S 4200 4200 4200 0 -1 4194624 \
                    10 0 0 0 123 45 6 7 20 0 1 0 100 1000 50\n";
        let st = parse_proc_stat(line).unwrap();
        assert_eq!(st.comm, "nginx: worker (x) 1");
        assert_eq!((st.ppid, st.utime, st.stime), (4200, 123, 45));
        assert_eq!(st.ticks(), 168);
        assert!(parse_proc_stat("4242 (short) S 1").is_none());
        assert!(parse_proc_stat("no stat here").is_none());
    }

    #[test]
    fn a_tree_is_its_roots_and_their_descendants() {
        let p = |ppid, ticks| ProcStat {
            comm: "x".into(),
            ppid,
            utime: ticks,
            stime: 0,
        };
        let procs: HashMap<u32, ProcStat> = [
            (1, p(0, 1)),
            (10, p(1, 5)),
            (11, p(10, 7)),
            (12, p(10, 9)),
            (13, p(11, 2)),
            (20, p(1, 100)),
            (30, p(0, 1000)),
        ]
        .into_iter()
        .collect();
        let t = tree_ticks(&procs, &[10, 30]);
        let mut ids: Vec<_> = t.keys().copied().collect();
        ids.sort();
        assert_eq!(ids, [10, 11, 12, 13, 30]);
        assert_eq!(t.values().sum::<u64>(), 5 + 7 + 9 + 2 + 1000);
        assert!(tree_ticks(&procs, &[99]).is_empty());
    }

    #[test]
    fn window_cores_count_new_ids_and_skip_unwatched_roles() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let at = |s: u64| t0 + Duration::from_secs(s);
        let map = |v: &[(u32, u64)]| Some(v.iter().copied().collect::<HashMap<u32, u64>>());
        // The reading at `s` seconds: the ticks of each thread of the server, the load and
        // the balancer (no disk emulator).
        let reading =
            |s: u64, server: &[(u32, u64)], load: &[(u32, u64)], balancer: &[(u32, u64)]| {
                let ticks = RoleTicks {
                    server: map(server),
                    load: map(load),
                    disk_emulator: None,
                    balancer: map(balancer),
                };
                (at(s), ticks)
            };
        let readings = vec![
            reading(0, &[(1, 0)], &[(7, 0)], &[(40, 0)]),
            reading(1, &[(1, 100)], &[(7, 10)], &[(40, 50)]),
            // Worker 2 appears, 1 keeps going; load thread 7 ended after its last reading
            // (it keeps its 10 ticks, gained before the window), worker 8 appears.
            reading(3, &[(1, 300), (2, 100)], &[(8, 20)], &[(40, 150)]),
            reading(9, &[(1, 900)], &[], &[(40, 450)]),
        ];
        // Window 1 s .. 3 s: 2 s, server 200 + 100 ticks, load 20 new ticks.
        let c = window_cores(&readings, Some((at(1), at(3))), 100.0);
        assert!((c.server.unwrap() - 1.5).abs() < 1e-9, "{c:?}");
        assert!((c.load.unwrap() - 0.1).abs() < 1e-9, "{c:?}");
        assert_eq!(c.disk_emulator, None);
        // The balancer's tree is a role of its own: 100 ticks over 2 s.
        assert!((c.balancer.unwrap() - 0.5).abs() < 1e-9, "{c:?}");
        // Window 1 s .. 9 s: worker 8 and server thread 2 end before the last reading and
        // keep what they used (20 and 100 ticks); server thread 1 gains 800.
        let c = window_cores(&readings, Some((at(1), at(9))), 100.0);
        assert!((c.server.unwrap() - 900.0 / 800.0).abs() < 1e-9, "{c:?}");
        assert!((c.load.unwrap() - 20.0 / 800.0).abs() < 1e-9, "{c:?}");
        // Too short a window says nothing.
        assert!(window_cores(&readings[..1], None, 100.0).is_empty());
    }

    /// Kills and reaps the child when dropped, also when an assertion fails.
    struct Spinner(std::process::Child);
    impl Drop for Spinner {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn a_busy_child_uses_cpu() {
        let child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        let spin = Spinner(child);
        let pid = spin.0.id();
        let started = std::time::Instant::now();
        let before = tree_ticks(&all_processes(), &[pid]);
        assert!(before.contains_key(&pid), "child {pid} not found in /proc");
        std::thread::sleep(Duration::from_millis(500));
        let after = tree_ticks(&all_processes(), &[pid]);
        let secs = started.elapsed().as_secs_f64();
        drop(spin);
        let cores = cores_between(&before, &after, secs, clock_ticks());
        assert!(
            cores > 0.0 && cores <= 1.5,
            "a spinning shell used {cores} cores"
        );
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
