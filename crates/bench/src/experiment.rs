//! The procedure behind each data point, over small traits so that each part of the
//! testbed (file set and disk, servers, load generator, system sampler) can be swapped:
//!
//! 1. drop the page cache (the testbed knows how),
//! 2. start the server under test (under its memory budget),
//! 3. with a fast-forward, play the session list's preceding window faster
//!    ([`crate::warmup`]) so the server's memory is at steady state,
//! 4. start the system sampler, run the load at the rate (resuming the history's viewers;
//!    the load generator reports the steady-state window from the point it settled, ramps
//!    excluded),
//! 5. summarise disk and CPU (machine-wide busy and iowait, and cores used by the server,
//!    the load generator and the disk emulator) and the device's counters over that window,
//!    judge its two halves for steadiness, stop the server, collect its error lines.
//!
//! [`run_bench`] runs the capacity search for every server and assembles the report.

use crate::point::{ClientMetrics, DeviceFigures, DiskMetrics, PointMetrics, ProcessCores};
use crate::report::{self, BenchReport, ServerReport};
use crate::search::{self, Criterion, Observation, Oracle, SearchPlan, Trial};
use crate::sut::Sut;
use std::time::SystemTime;

/// What the load generator reports for one run.
#[derive(Debug, Clone, Default)]
pub struct LoadOutcome {
    pub client: ClientMetrics,
    /// Steady-state window as wall-clock times (start, end).
    pub steady: Option<(SystemTime, SystemTime)>,
    /// What a reader of the point should know about the run (e.g. a live source's failed
    /// publishes).
    pub notes: Vec<String>,
    /// Delivered MB/s in the two halves of the steady-state window.
    pub halves_mb_s: Option<[f64; 2]>,
    /// With a kill set ([`LoadDriver::set_kill`]): when it was due (seconds of the run's
    /// clock), how every session ended, and the requests retried.
    pub kill_at_s: Option<f64>,
    pub sessions: Vec<crate::failover::SessionFate>,
    pub retried_requests: u64,
    pub recovered_requests: u64,
}

/// Runs the workload's sessions against a server at a rate (sessions/s).
pub trait LoadDriver {
    fn run(&mut self, base_url: &str, rate: f64, repeat: u32) -> Result<LoadOutcome, String>;
    /// The CA to trust for the next runs' `https://` URL (`+tls` servers); `None`: none.
    fn set_tls_ca(&mut self, _ca: Option<std::path::PathBuf>) {}
    /// The secret to sign the next runs' URLs with (`+sign` servers); `None`: unsigned.
    fn set_url_secret(&mut self, _secret: Option<vodkit_securelink::Secret>) {}
    /// Do `kill` at the middle of the next runs' judged part, and retry a failed request
    /// once on a fresh connection as a player does (`None`: neither). Drivers that cannot
    /// ignore it (the point then says the origin was not killed).
    fn set_kill(&mut self, _kill: Option<std::sync::Arc<dyn Fn() + Send + Sync>>) {}
    /// Speak HTTP/2 to the next runs' server (`+h2` servers).
    fn set_http2(&mut self, _on: bool) {}
    /// Play the history before a point at `rate` `ff.speed` times faster
    /// ([`crate::warmup`]), and make the next [`LoadDriver::run`] resume after it. `Err`:
    /// why no history was played (the run then starts as without one).
    fn fast_forward(
        &mut self,
        _base_url: &str,
        _rate: f64,
        _ff: crate::warmup::FastForward,
        _budget: Option<u64>,
    ) -> Result<crate::warmup::History, String> {
        Err("this load driver cannot play a history".into())
    }
}

/// Disk and CPU figures over a window.
#[derive(Debug, Clone, Default)]
pub struct SystemFigures {
    pub disk: Option<DiskMetrics>,
    /// Machine-wide busy share of all cores, iowait not counted (see [`PointMetrics`]).
    pub cpu_busy: Option<f64>,
    /// Machine-wide iowait share of all cores.
    pub cpu_iowait: Option<f64>,
    /// Cores used by the server, the load generator and the disk emulator, where known.
    pub cores: ProcessCores,
    /// The server's budget cgroup, where the run has one.
    pub server_memory: Option<crate::point::ServerMemory>,
    /// SYNs the kernel dropped because a listen queue was full (`TcpExtListenOverflows`),
    /// over the whole point, where `/proc/net/netstat` is readable.
    pub listen_overflows: Option<u64>,
    /// Disk MB/s in the two halves of the window.
    pub halves_disk_mb_s: Option<[f64; 2]>,
    /// The page cache at the window's start and end (the budget cgroup's, else the
    /// machine's).
    pub page_cache_bytes: [Option<u64>; 2],
    /// The emulated drive's own counters over the window.
    pub device: Option<DeviceFigures>,
    pub notes: Vec<String>,
}

/// Samples system metrics while a point runs.
pub trait Sampler {
    /// The processes that make up the server under test (roots of process trees), told
    /// before each `start`; empty when not known. Samplers that do not measure processes
    /// ignore it.
    fn watch_server(&mut self, _pids: &[u32]) {}
    /// The processes of a cluster's load balancer, told before each `start` (empty for
    /// other servers); measured apart from the server's.
    fn watch_balancer(&mut self, _pids: &[u32]) {}
    fn start(&mut self) -> Result<(), String>;
    /// Stop sampling and summarise the steady-state window (whole run when `None`).
    fn finish(&mut self, window: Option<(SystemTime, SystemTime)>)
        -> Result<SystemFigures, String>;
}

/// A sampler for when none is available; it says so in every point's notes.
pub struct NoSampler(pub String);

impl Sampler for NoSampler {
    fn start(&mut self) -> Result<(), String> {
        Ok(())
    }
    fn finish(&mut self, _: Option<(SystemTime, SystemTime)>) -> Result<SystemFigures, String> {
        Ok(SystemFigures {
            notes: vec![self.0.clone()],
            ..Default::default()
        })
    }
}

/// A started server under test.
pub trait Running {
    fn base_url(&self) -> String;
    /// Processes that make up the server (roots of their process trees: the main process,
    /// whose workers are its descendants, and any helper such as a prefetch daemon); empty
    /// when it runs inside this process or elsewhere.
    fn pids(&self) -> Vec<u32> {
        Vec::new()
    }
    /// A cluster's load balancer processes (roots of their trees), not among [`Running::pids`].
    fn balancer_pids(&self) -> Vec<u32> {
        Vec::new()
    }
    /// The origin to kill in the middle of each point (`cluster:…:failover`).
    fn failover(&self) -> Option<crate::failover::Kill> {
        None
    }
    /// Prefetch size over time, for servers that adapt it.
    fn prefetch_series(&self) -> Vec<(f64, u64)> {
        Vec::new()
    }
    /// The CA that signed an HTTPS server's certificate (`+tls`); `None`: plain HTTP.
    fn tls_ca(&self) -> Option<std::path::PathBuf> {
        None
    }
    /// The secret a server that requires signed URLs checks them with (`+sign`); `None`:
    /// it takes unsigned URLs.
    fn url_secret(&self) -> Option<vodkit_securelink::Secret> {
        None
    }
    /// What the launcher changed on the machine for this server (report notes), e.g. the
    /// device's queue settings.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    /// Run the server's prefetch clock `rate` times faster than real time (1: real time).
    /// `Ok(false)`: it has no such clock (nginx, Apache).
    fn set_clock_rate(&self, _rate: f64) -> Result<bool, String> {
        Ok(false)
    }
    /// What the server's prefetch engine counted within `window` (wall-clock times), for
    /// servers that report it (`vodkit serve`).
    fn engine_window(
        &self,
        _window: (SystemTime, SystemTime),
    ) -> Option<crate::point::EngineFigures> {
        None
    }
    /// Stop the server; returns the error-log lines it left.
    fn stop(self: Box<Self>) -> Result<Vec<String>, String>;
}

/// Why a server could not be started.
#[derive(Debug, Clone)]
pub enum StartError {
    /// The server cannot run here (not installed, dependency not available yet): skip it.
    Unavailable(String),
    /// It should run but failed: a runtime error for this server.
    Failed(String),
}

/// Starts servers under test.
pub trait Launcher {
    /// Check up front whether `sut` can run here at all.
    fn available(&self, sut: &Sut) -> Result<(), String>;
    fn start(&mut self, sut: &Sut) -> Result<Box<dyn Running>, StartError>;
}

/// The file set's home: plain directory or emulated disk.
pub trait Testbed {
    fn describe(&self) -> String;
    /// Empty the page cache before a point; returns a note when it could not.
    fn drop_caches(&mut self) -> Option<String>;
    /// Run the emulated drive's clock `scale` times faster (1: real time). `Err`: why not
    /// (no emulated drive).
    fn set_timing(&mut self, _scale: f64) -> Result<(), String> {
        Err("the testbed has no emulated drive".into())
    }
    /// The emulated drive's control file (its counters), where there is one.
    fn device_control(&self) -> Option<std::path::PathBuf> {
        None
    }
    /// Waits until the emulated drive has nothing to do: no request in flight and none
    /// arriving for [`QUIET_S`], at most `max`. `Ok(Some(s))`: quiet after `s` seconds;
    /// `Ok(None)`: nothing to wait for (no emulated drive); `Err`: still busy at `max`.
    fn wait_quiet(&mut self, _max: std::time::Duration) -> Result<Option<f64>, String> {
        Ok(None)
    }
}

/// Longest wait for a fast-forward's backlog to drain before the judged run.
pub const DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// How long an emulated drive must receive no request to count as quiet.
pub const QUIET_S: f64 = 0.25;

/// Polls in a row (20 ms apart) with the counters unreadable before the wait gives up.
const UNREADABLE_POLLS: u32 = 50;

/// Polls drives' counters (`read` gives each drive's reads so far and requests in
/// flight, `None` when unreadable) until no drive has a request in flight and no read
/// count moved for [`QUIET_S`]; at most `max`. Returns the seconds waited.
pub fn wait_until_quiet(
    mut read: impl FnMut() -> Option<Vec<(u64, u64)>>,
    max: std::time::Duration,
) -> Result<f64, String> {
    let started = std::time::Instant::now();
    let step = std::time::Duration::from_millis(20);
    let mut last: Option<Vec<(u64, u64)>> = None;
    let mut quiet_since: Option<std::time::Instant> = None;
    let mut unreadable = 0;
    loop {
        // A reading that fails once (the control file read while it changed, by a device
        // that does not keep one text per reader) counts as busy; only a drive whose
        // counters stay unreadable for a second ends the wait.
        let Some(now) = read() else {
            unreadable += 1;
            if unreadable >= UNREADABLE_POLLS {
                return Err("the emulated drive's counters could not be read".into());
            }
            quiet_since = None;
            last = None;
            std::thread::sleep(step);
            continue;
        };
        unreadable = 0;
        let idle = now.iter().all(|&(_, in_flight)| in_flight == 0)
            && last
                .as_ref()
                .is_some_and(|l| l.iter().map(|c| c.0).eq(now.iter().map(|c| c.0)));
        if idle {
            let since = *quiet_since.get_or_insert_with(std::time::Instant::now);
            if since.elapsed().as_secs_f64() >= QUIET_S {
                return Ok(started.elapsed().as_secs_f64());
            }
        } else {
            quiet_since = None;
        }
        if started.elapsed() >= max {
            return Err(format!(
                "the emulated drive was still busy after {:.0} s",
                max.as_secs_f64()
            ));
        }
        last = Some(now);
        std::thread::sleep(step);
    }
}

/// A plain directory on whatever disk it lives on.
pub struct PlainDisk;

impl Testbed for PlainDisk {
    fn describe(&self) -> String {
        "plain disk (no emulation)".into()
    }
    fn drop_caches(&mut self) -> Option<String> {
        drop_page_cache().err()
    }
}

/// `sync; echo 3 > /proc/sys/vm/drop_caches` (needs root).
pub fn drop_page_cache() -> Result<(), String> {
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").map_err(|e| {
        format!("page cache not dropped before the point ({e}); results include a warm cache")
    })
}

/// How many times the machine's page cache has been dropped since boot (`drop_pagecache`
/// of `/proc/vmstat`); `None` where the kernel does not count them.
pub fn page_cache_drops() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/vmstat").ok()?;
    vmstat_field(&text, "drop_pagecache")
}

/// The value of `name` in a `/proc/vmstat` text (`name value` lines).
pub fn vmstat_field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (key, value) = l.split_once(' ')?;
        (key == name).then(|| value.trim().parse().ok())?
    })
}

/// The note of a point during which another process dropped the machine's page cache.
pub fn outside_drop_note(drops: u64) -> String {
    format!(
        "another process dropped the machine's page cache {drops} time(s) during this point (drop_pagecache of /proc/vmstat): the memory the history filled did not carry into the judged window, which restarted cold; the point is not at steady state"
    )
}

/// The pieces of one bench, borrowed for the run.
pub struct Rig<'a> {
    pub testbed: &'a mut dyn Testbed,
    pub launcher: &'a mut dyn Launcher,
    pub load: &'a mut dyn LoadDriver,
    pub sampler: &'a mut dyn Sampler,
}

/// Error that ends one server's search.
#[derive(Debug, Clone)]
pub struct PointError(pub StartError);

struct ServerOracle<'r, 'a> {
    rig: &'r mut Rig<'a>,
    sut: &'r Sut,
    stop: &'r vodkit_load::CancellationToken,
    fast_forward: Option<crate::warmup::FastForward>,
    budget: Option<u64>,
}

impl ServerOracle<'_, '_> {
    fn interrupted(&self) -> Result<(), PointError> {
        if self.stop.is_cancelled() {
            Err(PointError(StartError::Failed(
                crate::interrupt::INTERRUPTED.into(),
            )))
        } else {
            Ok(())
        }
    }
}

impl Oracle for ServerOracle<'_, '_> {
    type Detail = PointMetrics;
    type Error = PointError;

    fn measure(
        &mut self,
        rate: f64,
        repeat: u32,
    ) -> Result<(Observation, PointMetrics), PointError> {
        self.interrupted()?;
        let mut m = PointMetrics::default();
        if let Some(note) = self.rig.testbed.drop_caches() {
            m.notes.push(note);
        }
        // Drops after this one are another process's: they empty the memory the history
        // fills and the judged window is meant to start with.
        let drops_before = page_cache_drops();
        let server = self.rig.launcher.start(self.sut).map_err(PointError)?;
        let url = server.base_url();
        self.rig.load.set_tls_ca(server.tls_ca());
        self.rig.load.set_url_secret(server.url_secret());
        self.rig.load.set_http2(self.sut.h2);
        if let Some(ff) = self.fast_forward {
            let played = play_history(
                self.rig.testbed,
                server.as_ref(),
                self.rig.load,
                &url,
                rate,
                ff,
                self.budget,
            );
            match played {
                Ok((history, notes)) => {
                    m.fast_forward = history;
                    m.notes.extend(notes);
                }
                Err(e) => {
                    let _ = server.stop();
                    return Err(PointError(StartError::Failed(e)));
                }
            }
            self.interrupted()?;
        }
        let kill = server.failover();
        self.rig.load.set_kill(kill.as_ref().map(|k| k.action()));
        self.rig.sampler.watch_server(&server.pids());
        self.rig.sampler.watch_balancer(&server.balancer_pids());
        let sampling = self.rig.sampler.start();
        let load = self.rig.load.run(&url, rate, repeat);
        m.outside_cache_drops = drops_before
            .zip(page_cache_drops())
            .map(|(a, b)| b.saturating_sub(a));
        let figures = match sampling {
            Ok(()) => self
                .rig
                .sampler
                .finish(load.as_ref().ok().and_then(|l| l.steady)),
            Err(e) => Err(e),
        };
        m.prefetch_size = server.prefetch_series();
        m.engine = load
            .as_ref()
            .ok()
            .and_then(|l| l.steady)
            .and_then(|w| server.engine_window(w));
        m.notes.extend(server.notes());
        // Read before the origins stop: the killed origin's log is as it left it.
        let on_killed = kill.as_ref().map(|k| {
            let ids = crate::failover::sessions_in_log(&k.access_log);
            (k.origin.clone(), k.killed_at().is_some(), ids)
        });
        let stopped = server.stop();
        // A point cut short by a signal says nothing about the rate: drop it.
        self.interrupted()?;
        let load =
            load.map_err(|e| PointError(StartError::Failed(format!("load at rate {rate}: {e}"))))?;
        m.client = load.client;
        m.notes.extend(load.notes);
        if let Some((origin, killed, ids)) = on_killed {
            let at = load.kill_at_s.filter(|_| killed);
            match ids {
                Ok(ids) => {
                    let mut f = crate::failover::tally(&origin, at, &ids, &load.sessions);
                    f.retried_requests = load.retried_requests;
                    f.recovered_requests = load.recovered_requests;
                    m.notes.push(crate::failover::note(&f));
                    m.failover = Some(f);
                }
                Err(e) => m.notes.push(format!(
                    "failover: the killed origin's sessions are unknown: {e}"
                )),
            }
        }
        if let Some(n) = m.outside_cache_drops.filter(|&n| n > 0) {
            m.notes.push(outside_drop_note(n));
        }
        match figures {
            Ok(f) => {
                // A point stopped early has no second half to compare.
                let halves = load
                    .halves_mb_s
                    .filter(|_| m.client.stopped_early.is_none());
                if let (Some(d), Some(k)) = (halves, f.halves_disk_mb_s) {
                    let window_s = load
                        .steady
                        .and_then(|(a, b)| b.duration_since(a).ok())
                        .map_or(0.0, |w| w.as_secs_f64());
                    let half = |i: usize| crate::warmup::Half {
                        seconds: window_s / 2.0,
                        delivered_mb_s: d[i],
                        disk_mb_s: k[i],
                    };
                    let mut st =
                        crate::warmup::Steadiness::judge([half(0), half(1)], f.page_cache_bytes);
                    // A window that restarted cold is not steady, however alike its halves.
                    st.steady &= m.outside_cache_drops.unwrap_or(0) == 0;
                    m.steadiness = Some(st);
                }
                m.device = f.device;
                m.disk = f.disk;
                m.cpu_busy = f.cpu_busy;
                m.cpu_iowait = f.cpu_iowait;
                m.cores = f.cores.with_delivery(m.client.throughput_mb_s);
                m.server_memory = f.server_memory;
                m.listen_overflows = f.listen_overflows;
                m.notes.extend(f.notes);
            }
            Err(e) => m.notes.push(format!("system metrics unavailable: {e}")),
        }
        match stopped {
            Ok(lines) => m.server_errors = lines,
            Err(e) => m.notes.push(format!("stopping the server: {e}")),
        }
        Ok((m.observation(), m))
    }
}

/// Settings of one bench run.
pub struct BenchSettings {
    pub workload: String,
    pub memory_bytes: Option<u64>,
    pub plan: SearchPlan,
    /// The plan for a cluster of N origins where it is not `plan`: each origin has a drive
    /// and a budget of its own, so a plan drawn from the bound is drawn from N times it.
    pub cluster_plans: Vec<(usize, SearchPlan)>,
    pub criterion: Criterion,
    pub repeat: u32,
    /// Cancelled when the run is interrupted ([`crate::interrupt`]): the point under way
    /// is dropped and no other starts.
    pub stop: vodkit_load::CancellationToken,
    /// The history played before every point ([`crate::warmup`]); `None`: none.
    pub fast_forward: Option<crate::warmup::FastForward>,
}

/// Progress callbacks (the CLI draws bars; tests ignore them).
pub trait Progress {
    fn server_started(&mut self, _sut: &Sut, _index: usize, _total: usize) {}
    fn point(&mut self, _sut: &Sut, _trial: &Trial<PointMetrics>) {}
    fn server_done(&mut self, _report: &ServerReport) {}
}

/// Progress that shows nothing.
pub struct Quiet;
impl Progress for Quiet {}

/// Search every server's capacity and build the report (not yet written to disk).
pub fn run_bench(
    settings: &BenchSettings,
    suts: &[Sut],
    rig: &mut Rig<'_>,
    progress: &mut dyn Progress,
) -> BenchReport {
    let mut rep = report::new_report(
        &settings.workload,
        &rig.testbed.describe(),
        settings.memory_bytes,
        &settings.criterion.to_string(),
        &settings.plan,
        settings.repeat.max(1),
    );
    for (i, sut) in suts.iter().enumerate() {
        progress.server_started(sut, i, suts.len());
        let started = std::time::Instant::now();
        let mut server = match rig.launcher.available(sut) {
            Err(why) => ServerReport::not_measured(sut, report::SKIPPED, why),
            Ok(()) => {
                let mut oracle = ServerOracle {
                    rig,
                    sut,
                    stop: &settings.stop,
                    fast_forward: settings.fast_forward,
                    budget: settings.memory_bytes,
                };
                let origins = sut.cluster.map_or(1, |c| c.origins);
                let plan = settings
                    .cluster_plans
                    .iter()
                    .find(|(n, _)| *n == origins)
                    .map_or(&settings.plan, |(_, p)| p);
                let outcome = search::search(
                    &mut oracle,
                    plan,
                    settings.criterion,
                    settings.repeat,
                    |t| progress.point(sut, t),
                );
                match outcome {
                    Ok(out) => ServerReport::from_search(sut, &out),
                    Err(PointError(StartError::Unavailable(why))) => {
                        ServerReport::not_measured(sut, report::SKIPPED, why)
                    }
                    Err(PointError(StartError::Failed(why))) => {
                        ServerReport::not_measured(sut, report::FAILED, why)
                    }
                }
            }
        };
        server.wall_s = Some(started.elapsed().as_secs_f64());
        progress.server_done(&server);
        rep.servers.push(server);
    }
    if let Some(ff) = settings.fast_forward {
        rep.notes.push(format!(
            "fast-forward {ff}: before every point the session list's preceding window (two longest sessions, at least {} memory budgets of requested bytes) was played {}× faster on a drive and prefetch clock running as fast, and the point resumed its viewers (docs/bench.md, \"Fast-forward\")",
            ff.fill, ff.speed
        ));
    }
    for s in &rep.servers {
        rep.notes.extend(unsteady_note(s));
        rep.notes.extend(early_stop_note(s));
        rep.notes.extend(no_clock_note(s));
        rep.notes.extend(shortfall_note(s));
        rep.notes.extend(overflow_note(s));
        rep.notes.extend(queue_note(s));
    }
    let errs: usize = rep
        .servers
        .iter()
        .flat_map(|s| &s.points)
        .map(|p| p.metrics.server_errors.len())
        .sum();
    if errs > 0 {
        rep.notes.push(format!(
            "servers logged {errs} error lines during the runs; see each point's server_errors"
        ));
    }
    rep
}

/// A server whose points' histories ran without a prefetch clock, once per server.
fn no_clock_note(s: &ServerReport) -> Option<String> {
    s.points
        .iter()
        .any(|p| {
            p.metrics
                .notes
                .iter()
                .any(|n| n == crate::warmup::NO_CLOCK_NOTE)
        })
        .then(|| format!("{}: {}", s.sut, crate::warmup::NO_CLOCK_NOTE))
}

/// The device queue settings a server ran with when the launcher changed them
/// ([`crate::readahead::SET_NOTE`]), once per server.
fn queue_note(s: &ServerReport) -> Option<String> {
    let note = s
        .points
        .iter()
        .flat_map(|p| &p.metrics.notes)
        .find(|n| n.starts_with(crate::readahead::SET_NOTE))?;
    Some(format!("{}: {note}", s.sut))
}

/// Where the kernel dropped connections of a server's points because a listen queue was
/// full: those clients' SYNs were retried after a second or more, which the criterion then
/// reads as slow start-ups or timeouts that the server's own figures do not show.
pub fn overflow_note(s: &ServerReport) -> Option<String> {
    let hit: Vec<String> = s
        .points
        .iter()
        .filter_map(|p| {
            let n = p.metrics.listen_overflows.filter(|&n| n > 0)?;
            Some(format!(
                "{n} at {:.2}/s ({})",
                p.rate,
                if p.passed { "passed" } else { "failed" }
            ))
        })
        .collect();
    (!hit.is_empty()).then(|| {
        format!(
            "{}: the kernel dropped connections because a listen queue was full (TcpExt ListenOverflows, machine-wide): {}",
            s.sut,
            hit.join(", ")
        )
    })
}

/// What a server's search stopping on a delivery shortfall means, with who was busy at the
/// point that fell short.
pub fn shortfall_note(s: &ServerReport) -> Option<String> {
    let f = s.shortfall?;
    let point = s.points.iter().find(|p| p.short && p.rate == f.rate);
    let busy = point
        .map(|p| {
            let c = &p.metrics.cores;
            let core = |v: Option<f64>| v.map_or("–".to_string(), |x| format!("{x:.2}"));
            format!(
                " (CPU busy {}, cores server {} / load generator {})",
                p.metrics
                    .cpu_busy
                    .map_or("–".to_string(), |b| format!("{:.0}%", b * 100.0)),
                core(c.server),
                core(c.load)
            )
        })
        .unwrap_or_default();
    Some(format!(
        "{}: at {:.2} sessions/s the clients received {:.0}% of the throughput per session/s of the lower points{busy} — the criterion passed, but the offered load was not delivered, so the search stopped there and the capacity is a lower bound set by the testbed (docs/bench.md, \"Delivery shortfall\")",
        s.sut,
        f.rate,
        f.delivered_fraction * 100.0
    ))
}

/// Play the history before a judged point: the drive's clock and the server's scaled,
/// the load's window played, both clocks back to real time. Returns what the history did
/// (`None` when the load driver could not play one) and notes for the point. An error is a
/// clock that could not be put back: the judged run would be wrong.
pub fn play_history(
    testbed: &mut dyn Testbed,
    server: &dyn Running,
    load: &mut dyn LoadDriver,
    url: &str,
    rate: f64,
    ff: crate::warmup::FastForward,
    budget: Option<u64>,
) -> Result<(Option<crate::warmup::History>, Vec<String>), String> {
    let mut notes = Vec::new();
    let timed = match testbed.set_timing(ff.speed) {
        Ok(()) => true,
        Err(e) => {
            notes.push(format!(
                "fast-forward: the drive's clock was not scaled ({e}); the history played at real disk speed"
            ));
            false
        }
    };
    let clock = match server.set_clock_rate(ff.speed) {
        Ok(set) => set,
        Err(e) => {
            notes.push(format!("fast-forward: the server's clock was not set: {e}"));
            false
        }
    };
    let played = load.fast_forward(url, rate, ff, budget);
    // The history ends with its own queued reads done, still at its speed: a sped-up
    // history can leave a backlog (reads for viewers that are gone) that at real speed
    // would delay the judged run's first seconds, which no steady server has.
    let drain = if timed && played.is_ok() {
        match testbed.wait_quiet(DRAIN_LIMIT) {
            Ok(waited) => waited,
            Err(e) => {
                notes.push(format!(
                    "fast-forward: {e}; the point started with a backlog"
                ));
                Some(DRAIN_LIMIT.as_secs_f64())
            }
        }
    } else {
        None
    };
    let mut restore = Vec::new();
    if clock {
        if let Err(e) = server.set_clock_rate(1.0) {
            restore.push(format!("the server's clock: {e}"));
        }
    }
    if timed {
        if let Err(e) = testbed.set_timing(1.0) {
            restore.push(format!("the drive's clock: {e}"));
        }
    }
    if !restore.is_empty() {
        return Err(format!(
            "fast-forward: could not return to real time ({})",
            restore.join("; ")
        ));
    }
    match played {
        Ok(mut h) => {
            h.server_clock = clock;
            h.drain_s = drain;
            if !clock {
                notes.push(crate::warmup::NO_CLOCK_NOTE.into());
            }
            Ok((Some(h), notes))
        }
        Err(e) => {
            notes.push(format!("fast-forward: no history played: {e}"));
            Ok((None, notes))
        }
    }
}

/// The report's note on a server's points that were ended once their failure was certain,
/// listing them.
pub fn early_stop_note(s: &crate::report::ServerReport) -> Option<String> {
    let listed = listed_points(s, "; ", |p| {
        let e = p.metrics.client.stopped_early.as_ref()?;
        Some(format!("{:.2}/s {}", p.rate, e.describe()))
    })?;
    Some(format!(
        "{}: points ended once their failure was certain (docs/bench.md, \"Early stop\"): {listed}",
        s.sut
    ))
}

/// `describe`'s text for each of `s`'s points it describes, joined by `sep`; `None` when
/// it describes none.
fn listed_points(
    s: &crate::report::ServerReport,
    sep: &str,
    describe: impl Fn(&crate::report::PointRecord) -> Option<String>,
) -> Option<String> {
    let listed: Vec<String> = s.points.iter().filter_map(describe).collect();
    (!listed.is_empty()).then(|| listed.join(sep))
}

/// The report's note on a server's passing points that were not steady, listing them.
pub fn unsteady_note(s: &crate::report::ServerReport) -> Option<String> {
    let listed = listed_points(s, ", ", |p| {
        let st = p.metrics.steadiness.filter(|st| p.passed && !st.steady)?;
        Some(format!("{:.2}/s ({})", p.rate, st.describe()))
    })?;
    Some(format!(
        "{}: passing points not at steady state (the judged window's halves differ by more than {:.0}% in disk MB/s or {:.0} points in memory share): {listed}",
        s.sut,
        crate::warmup::DISK_TOLERANCE * 100.0,
        crate::warmup::SHARE_TOLERANCE * 100.0,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::PointRecord;

    #[test]
    fn a_drive_is_quiet_once_nothing_is_in_flight_and_no_read_arrives() {
        use std::time::Duration;
        // Busy for the first ten polls (reads moving, one in flight), then still.
        let mut polls = 0u64;
        let waited = wait_until_quiet(
            || {
                polls += 1;
                let reads = polls.min(10);
                Some(vec![(reads, u64::from(polls < 10)), (7, 0)])
            },
            Duration::from_secs(5),
        )
        .unwrap();
        assert!(polls >= 10 + (QUIET_S / 0.02) as u64, "{polls} polls");
        assert!(waited >= QUIET_S, "{waited}");
        // A read count that keeps moving is never quiet, though nothing is in flight
        // at the instant of each poll.
        let mut n = 0u64;
        let busy = wait_until_quiet(
            || {
                n += 1;
                Some(vec![(n, 0)])
            },
            Duration::from_millis(400),
        );
        assert!(busy.unwrap_err().contains("still busy"));
        // Counters that stay unreadable end the wait with an error after a second.
        let t = std::time::Instant::now();
        let e = wait_until_quiet(|| None, Duration::from_secs(5)).unwrap_err();
        assert!(e.contains("could not be read"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        // A reading that fails now and then while the drive is busy does not end the
        // wait early: it still lasts until the drive has been still.
        let mut polls = 0u64;
        let waited = wait_until_quiet(
            || {
                polls += 1;
                if polls.is_multiple_of(3) && polls < 30 {
                    return None;
                }
                Some(vec![(polls.min(30), u64::from(polls < 30))])
            },
            Duration::from_secs(5),
        )
        .unwrap();
        assert!(polls >= 30 + (QUIET_S / 0.02) as u64, "{polls} polls");
        assert!(waited >= QUIET_S, "{waited}");
    }

    #[test]
    fn page_cache_drops_are_read_from_vmstat() {
        let text = "nr_free_pages 12\ndrop_pagecache 86\ndrop_slab 87\n";
        assert_eq!(vmstat_field(text, "drop_pagecache"), Some(86));
        assert_eq!(vmstat_field(text, "drop_slab"), Some(87));
        assert_eq!(vmstat_field(text, "drop"), None);
        assert_eq!(vmstat_field("drop_pagecache x\n", "drop_pagecache"), None);
    }

    #[test]
    fn points_stopped_early_are_noted_with_when_and_why() {
        let sut = crate::sut::parse_one("nginx").unwrap();
        let mut s = ServerReport::not_measured(&sut, report::MEASURED, String::new());
        let point = |rate: f64, stopped: Option<(f64, &str)>| PointRecord {
            rate,
            repeat: 0,
            passed: stopped.is_none() && rate < 5.0,
            short: false,
            metrics: PointMetrics {
                client: ClientMetrics {
                    stopped_early: stopped.map(|(at_s, why)| crate::early::EarlyStop {
                        at_s,
                        why: why.into(),
                    }),
                    ..ClientMetrics::default()
                },
                ..PointMetrics::default()
            },
        };
        s.points = vec![point(4.0, None), point(6.0, None)];
        assert_eq!(early_stop_note(&s), None);
        s.points
            .push(point(12.0, Some((8.6, "judged sessions failed: 2"))));
        s.points
            .push(point(9.0, Some((21.0, "steady requests timed out: 1"))));
        assert_eq!(
            early_stop_note(&s).unwrap(),
            "nginx: points ended once their failure was certain (docs/bench.md, \"Early stop\"): \
             12.00/s stopped at 9 s: failure certain (judged sessions failed: 2); \
             9.00/s stopped at 21 s: failure certain (steady requests timed out: 1)"
        );
    }

    #[test]
    fn listen_queue_overflows_are_noted_per_point() {
        let sut = crate::sut::parse_one("nginx").unwrap();
        let mut s = ServerReport::not_measured(&sut, report::FAILED, "test".into());
        let point = |rate: f64, passed: bool, overflows: Option<u64>| PointRecord {
            rate,
            repeat: 0,
            passed,
            short: false,
            metrics: PointMetrics {
                listen_overflows: overflows,
                ..PointMetrics::default()
            },
        };
        s.points = vec![point(10.0, true, Some(0)), point(20.0, true, None)];
        assert_eq!(overflow_note(&s), None);
        s.points.push(point(30.0, false, Some(42)));
        let note = overflow_note(&s).unwrap();
        assert!(note.starts_with("nginx: "), "{note}");
        assert!(note.ends_with("42 at 30.00/s (failed)"), "{note}");
    }
}
