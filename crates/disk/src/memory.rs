//! Memory budgets for a server under test: run a command inside a memory cgroup whose limit
//! covers its anonymous memory *and* the page cache it fills, so "a server with 4 GB"
//! (thesis 4.5.1) can be reproduced on a machine with much more memory.
//!
//! cgroup v1 (`memory.limit_in_bytes`, as on this project's test machines) and v2
//! (`memory.max`) are both handled; the budget cgroup is created below the caller's own
//! memory cgroup and removed afterwards. Needs root (or a delegated cgroup).

use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

/// Errors of memory budgets.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Unsupported(String),
    /// The I/O error is part of the message (one line), not a separate error source.
    #[error("{context}: {cause}")]
    Io {
        context: String,
        cause: std::io::Error,
    },
}

pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |cause| Error::Io { context, cause }
}

pub use vodkit_cgroup::CgroupVersion;

/// One reading of a budget cgroup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryUsage {
    /// Seconds since the budget was created.
    pub t: f64,
    /// Charged memory, page cache included, bytes.
    pub usage_bytes: u64,
    /// Page cache part of it, bytes.
    pub cache_bytes: u64,
    /// Anonymous memory part of it, bytes.
    pub anon_bytes: u64,
}

/// A memory cgroup with a limit.
#[derive(Debug)]
pub struct MemoryBudget {
    dir: PathBuf,
    version: CgroupVersion,
    limit: u64,
    created: Instant,
}

/// Locate the caller's memory cgroup directory and the interface version.
pub fn own_memory_cgroup() -> Result<(PathBuf, CgroupVersion), Error> {
    own_cgroup("memory", "memory.limit_in_bytes")
}

/// The caller's cgroup directory for `controller` and the interface version: on cgroup v1
/// the controller's own hierarchy (recognised by `v1_file`), else the v2 hierarchy that
/// offers the controller ([`vodkit_cgroup::own`]).
pub(crate) fn own_cgroup(
    controller: &str,
    v1_file: &str,
) -> Result<(PathBuf, CgroupVersion), Error> {
    vodkit_cgroup::own(controller, v1_file).map_err(Error::Unsupported)
}

/// Create the cgroup directory `dir` (a permission error says that root is needed).
pub(crate) fn create_cgroup_dir(dir: &Path) -> Result<(), Error> {
    std::fs::create_dir(dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => Error::Unsupported(format!(
            "cannot create {}: permission denied (needs root)",
            dir.display()
        )),
        _ => Error::Io {
            context: format!("{}", dir.display()),
            cause: e,
        },
    })
}

impl MemoryBudget {
    /// Create a budget cgroup named `name` with `limit` bytes below the caller's cgroup.
    pub fn create(name: &str, limit: u64) -> Result<Self, Error> {
        let (parent, version) = own_memory_cgroup()?;
        let dir = parent.join(name);
        create_cgroup_dir(&dir)?;
        let budget = MemoryBudget {
            dir,
            version,
            limit,
            created: Instant::now(),
        };
        let (file, value) = match version {
            CgroupVersion::V1 => ("memory.limit_in_bytes", limit.to_string()),
            CgroupVersion::V2 => ("memory.max", limit.to_string()),
        };
        std::fs::write(budget.dir.join(file), &value)
            .map_err(io(format!("{}/{file}", budget.dir.display())))?;
        if version == CgroupVersion::V2 {
            // Keep the budget honest: no swapping the overflow out.
            let _ = std::fs::write(budget.dir.join("memory.swap.max"), "0");
        }
        Ok(budget)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn version(&self) -> CgroupVersion {
        self.version
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// File a process joins the budget through.
    pub fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Make `cmd` join the budget between fork and exec, so the program and everything it
    /// starts are charged from the first byte (use this to start a server under test).
    pub fn confine(&self, cmd: &mut Command) -> Result<(), Error> {
        confine_to(&self.procs_file(), cmd)
    }

    /// Move process `pid` into the budget (its existing children stay where they are).
    pub fn add(&self, pid: u32) -> Result<(), Error> {
        std::fs::write(self.procs_file(), pid.to_string())
            .map_err(io(format!("{}", self.procs_file().display())))
    }

    /// Current usage.
    pub fn usage(&self) -> MemoryUsage {
        let read = |f: &str| std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
        let stat = read("memory.stat");
        let field = |name: &str| {
            stat.lines()
                .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0u64)
        };
        let (usage_file, cache, anon) = match self.version {
            CgroupVersion::V1 => (
                "memory.usage_in_bytes",
                field("total_cache"),
                field("total_rss"),
            ),
            CgroupVersion::V2 => ("memory.current", field("file"), field("anon")),
        };
        MemoryUsage {
            t: self.created.elapsed().as_secs_f64(),
            usage_bytes: read(usage_file).trim().parse().unwrap_or(0),
            cache_bytes: cache,
            anon_bytes: anon,
        }
    }

    /// Highest usage the kernel recorded, page cache included (None where not offered).
    pub fn peak_bytes(&self) -> Option<u64> {
        let file = match self.version {
            CgroupVersion::V1 => "memory.max_usage_in_bytes",
            CgroupVersion::V2 => "memory.peak",
        };
        std::fs::read_to_string(self.dir.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Kill what is left inside and remove the cgroup.
    pub fn remove(self) -> Result<(), Error> {
        empty_and_remove(&self.dir)
    }
}

/// Kill every process left in the cgroup at `dir` (one we created) and remove it.
pub(crate) fn empty_and_remove(dir: &Path) -> Result<(), Error> {
    let procs_file = dir.join("cgroup.procs");
    for _ in 0..50 {
        let procs = std::fs::read_to_string(&procs_file).unwrap_or_default();
        let pids: Vec<i32> = procs
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            // SAFETY: killing processes placed in a cgroup this crate created for them.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::remove_dir(dir).map_err(io(format!("{}", dir.display())))
}

/// What [`run`] observed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    pub limit_bytes: u64,
    pub cgroup: PathBuf,
    pub version: CgroupVersion,
    /// Exit code of the command (None if killed by a signal).
    pub exit_code: Option<i32>,
    /// The signal that killed the command (None if it exited).
    #[serde(default)]
    pub signal: Option<i32>,
    /// Highest charged memory (kernel's record where available, else sampled).
    pub peak_bytes: u64,
    /// Highest page cache seen in the samples.
    pub peak_cache_bytes: u64,
    pub samples: Vec<MemoryUsage>,
}

impl RunReport {
    /// The status a shell gives the command: its exit code, or 128 + the signal that
    /// killed it.
    pub fn shell_status(&self) -> i32 {
        match (self.exit_code, self.signal) {
            (Some(code), _) => code,
            (None, Some(sig)) => 128 + sig,
            (None, None) => 128,
        }
    }
}

/// The signals [`run`] passes on to the command: stopping the supervisor stops what it runs.
pub const FORWARDED: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// Run `argv` inside a fresh budget of `limit` bytes, sampling usage every `interval`;
/// `on_sample` sees each sample as it is taken. The cgroup is removed afterwards.
///
/// While the command runs, SIGTERM, SIGINT and SIGHUP sent to this process are passed on
/// to it ([`FORWARDED`]; not those the kernel sent to the terminal's whole foreground
/// process group, which the command received itself), and the run ends when the command
/// does. The signals are blocked in the calling thread for the run: call this from a
/// process's only thread, or one whose other threads block them too.
pub fn run(
    limit: u64,
    argv: &[String],
    interval: Duration,
    mut on_sample: impl FnMut(&MemoryUsage),
) -> Result<RunReport, Error> {
    let (prog, args) = argv
        .split_first()
        .ok_or_else(|| Error::Unsupported("no command given".into()))?;
    let name = format!("vodkit-run-{}", std::process::id());
    let budget = MemoryBudget::create(&name, limit)?;
    let signals = Signals::block();
    let result = run_in(&budget, &signals, prog, args, interval, &mut on_sample);
    drop(signals);
    let peak_kernel = budget.peak_bytes();
    let cgroup = budget.dir().to_path_buf();
    let version = budget.version();
    budget.remove()?;
    let (status, samples) = result?;
    let sampled_peak = samples.iter().map(|s| s.usage_bytes).max().unwrap_or(0);
    use std::os::unix::process::ExitStatusExt;
    Ok(RunReport {
        limit_bytes: limit,
        cgroup,
        version,
        exit_code: status.code(),
        signal: status.signal(),
        peak_bytes: peak_kernel.unwrap_or(sampled_peak),
        peak_cache_bytes: samples.iter().map(|s| s.cache_bytes).max().unwrap_or(0),
        samples,
    })
}

/// The forwarded signals and SIGCHLD, blocked in this thread so they are taken one by one
/// with `sigtimedwait`; the previous mask comes back on drop.
struct Signals {
    set: libc::sigset_t,
    old: libc::sigset_t,
}

impl Signals {
    fn block() -> Signals {
        // SAFETY: sigset manipulation on local, zero-initialised sets; pthread_sigmask only
        // changes this thread's mask.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in FORWARDED.into_iter().chain([libc::SIGCHLD]) {
                libc::sigaddset(&mut set, s);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            Signals { set, old }
        }
    }

    /// The next forwarded signal and whether this process alone was sent it, or SIGCHLD,
    /// waiting at most `timeout`; `None` when none came.
    fn wait(&self, timeout: Duration) -> Option<(libc::c_int, bool)> {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: waits on the set built in `block`, writing into a zeroed siginfo_t.
        let (sig, info) = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            (libc::sigtimedwait(&self.set, &mut info, &ts), info)
        };
        // The kernel sends terminal signals (Ctrl-C, hang-up) to the whole foreground
        // process group, the command included: passing them on would deliver them twice.
        (sig > 0).then_some((sig, info.si_code != libc::SI_KERNEL))
    }

    /// Make `cmd` start with the mask this process had before [`Signals::block`].
    fn restore_in(&self, cmd: &mut Command) {
        let old = self.old;
        // SAFETY: pthread_sigmask is async-signal-safe; it runs in the child before exec.
        unsafe {
            cmd.pre_exec(move || {
                libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
                Ok(())
            });
        }
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        // What came after the command ended has no one to go to; drop it rather than act
        // on it when unblocked (a SIGTERM then would end this process before it reports).
        while self.wait(Duration::ZERO).is_some() {}
        // SAFETY: restores the mask saved in `block` for this thread.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

fn run_in(
    budget: &MemoryBudget,
    signals: &Signals,
    prog: &str,
    args: &[String],
    interval: Duration,
    on_sample: &mut impl FnMut(&MemoryUsage),
) -> Result<(ExitStatus, Vec<MemoryUsage>), Error> {
    let mut cmd = Command::new(prog);
    cmd.args(args);
    signals.restore_in(&mut cmd);
    budget.confine(&mut cmd)?;
    let mut child = cmd.spawn().map_err(io(prog.to_string()))?;
    let pid = child.id() as libc::pid_t;
    let mut samples = Vec::new();
    let mut next_sample = Instant::now();
    loop {
        if Instant::now() >= next_sample {
            let s = budget.usage();
            on_sample(&s);
            samples.push(s);
            next_sample = Instant::now() + interval;
        }
        if let Some(status) = child.try_wait().map_err(io(prog.to_string()))? {
            return Ok((status, samples));
        }
        match signals.wait(next_sample.saturating_duration_since(Instant::now())) {
            Some((sig, true)) if FORWARDED.contains(&sig) => {
                // SAFETY: signalling our own child, which has not been reaped (try_wait
                // above saw it running, and only this loop reaps it).
                unsafe { libc::kill(pid, sig) };
            }
            _ => {}
        }
    }
}

/// Drop the page cache of one file (`posix_fadvise(DONTNEED)`), e.g. before a run that must
/// read it from disk. Dirty pages are written first.
pub fn evict_file(path: &Path) -> Result<(), Error> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).map_err(io(format!("{}", path.display())))?;
    f.sync_all().map_err(io(format!("{}", path.display())))?;
    // SAFETY: valid fd; the advice only affects caching.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(Error::Io {
            context: format!("{}", path.display()),
            cause: std::io::Error::from_raw_os_error(rc),
        });
    }
    Ok(())
}

/// Make `cmd` join the cgroup whose `cgroup.procs` file is `procs` between fork and exec
/// (for callers that keep only the path, e.g. a command wrapper that outlives a borrow).
pub fn confine_to(procs: &Path, cmd: &mut Command) -> Result<(), Error> {
    let procs = CString::new(procs.to_string_lossy().as_bytes())
        .map_err(|_| Error::Unsupported("cgroup path contains NUL".into()))?;
    // SAFETY: only async-signal-safe calls (open, write, close) run in the child.
    unsafe {
        cmd.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
            libc::close(fd);
            if ok {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    Ok(())
}
