//! The emulated hard disk: a FUSE-served image delayed by the drive model, attached as a
//! loop device with direct I/O, formatted ext4 and mounted, so unmodified programs read
//! it through the whole kernel path (page cache, readahead, scheduler, queue limits).
//!
//! Linux only, needs root, `/dev/fuse`, `losetup`, `mkfs.ext4` and `mount`; the FUSE
//! device is mounted with mount(2) ([`system::mount_fuse`]), so `fusermount3` is not
//! needed. [`Testbed::up`] brings a device up inside the calling process; [`daemon`] runs
//! it in a background process for the CLI; [`down`] tears down a device by mount point,
//! including what a crashed process left behind.

pub mod daemon;
pub mod extents;
pub mod faults;
pub mod fusedev;
pub mod queue;
pub mod system;

pub use extents::{file_extents, Extent};
pub use faults::{Control, FaultPlan};
pub use fusedev::DeviceCounters;
pub use queue::{AppliedQueue, DiskDefaults, KernelVersion, QueueSettings, QueueTuning};

use crate::model::{Drive, DriveOptions, Preset};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Errors of the testbed; `Input` is the caller's mistake, the rest are the system's.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Input(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    Tool(String),
    /// The I/O error is part of the message (one line), not a separate error source.
    #[error("{context}: {cause}")]
    Io {
        context: String,
        cause: std::io::Error,
    },
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |cause| Error::Io { context, cause }
}

/// Where device state lives unless told otherwise.
pub const DEFAULT_STATE_ROOT: &str = "/run/vodkit/hdd";

/// Where on the modelled platter the image lies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// The image stands for the whole platter: every zone, full-stroke seeks across it.
    #[default]
    Platter,
    /// The image is the drive's first `size` bytes, like a partition of that size at the
    /// outer edge: outer-zone rates and seeks no longer than the image.
    Start,
}

/// Everything needed to bring one emulated disk up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Drive preset.
    pub preset: Preset,
    /// Image size in bytes.
    pub size: u64,
    /// Where the image lies on the platter (default: it stands for all of it).
    #[serde(default)]
    pub placement: Placement,
    /// Sparse backing file on the real disk (created if missing, grown if smaller).
    pub image: PathBuf,
    /// Where the ext4 file system is mounted.
    pub mount: PathBuf,
    pub drive: DriveOptions,
    /// Delay writes by the model too (off: populating a file set runs at host speed).
    pub model_writes: bool,
    /// Modelled host turnaround in microseconds: how long after a read completes the
    /// request it causes reaches the drive (0: at once, so the drive never idles between
    /// one program's dependent reads and never reads ahead then).
    #[serde(default)]
    pub host_gap_us: u64,
    pub faults: FaultPlan,
    /// Queue settings given by the user; each one left `None` gets the default of a real
    /// rotational disk of the preset on the running kernel ([`queue::rotational_defaults`]).
    /// The queue is always marked rotational.
    pub tuning: QueueTuning,
    /// Run mkfs even if the image already holds an ext4 file system.
    pub reformat: bool,
    /// Directory for state files and the FUSE mount point.
    pub state_root: PathBuf,
}

impl Config {
    pub fn new(
        preset: Preset,
        size: u64,
        image: impl Into<PathBuf>,
        mount: impl Into<PathBuf>,
    ) -> Self {
        Config {
            preset,
            size,
            placement: Placement::Platter,
            image: image.into(),
            mount: mount.into(),
            drive: DriveOptions::default(),
            model_writes: false,
            host_gap_us: 0,
            faults: FaultPlan::default(),
            tuning: QueueTuning::default(),
            reformat: false,
            state_root: PathBuf::from(DEFAULT_STATE_ROOT),
        }
    }

    /// A device whose image, mount point and state all live in `dir` (`disk.img`, `mnt`,
    /// `state`): one directory to remove afterwards, as tests and throwaway runs want.
    pub fn in_dir(preset: Preset, size: u64, dir: &Path) -> Self {
        let mut cfg = Config::new(preset, size, dir.join("disk.img"), dir.join("mnt"));
        cfg.state_root = dir.join("state");
        cfg
    }

    fn validate(&self) -> Result<(), Error> {
        if self.size < 64 << 20 || !self.size.is_multiple_of(4096) {
            return Err(Error::Input(format!(
                "size {} must be a multiple of 4 KiB and at least 64 MiB",
                self.size
            )));
        }
        Ok(())
    }
}

/// What a running device looks like on disk (`state.json` in its state directory).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    pub mount: PathBuf,
    pub image: PathBuf,
    pub fuse_dir: PathBuf,
    /// Loop device name, e.g. `loop3`.
    pub loop_device: String,
    pub direct_io: bool,
    pub preset: Preset,
    pub size: u64,
    /// Process serving the FUSE file system.
    pub pid: u32,
    /// Whether that process is a device daemon (`vodkit hdd up`), which `down` may stop
    /// with SIGTERM; an in-process testbed's owner is never signalled.
    #[serde(default)]
    pub daemon: bool,
    pub ready: bool,
    /// Queue settings applied at `up` and where they came from (absent in state files of
    /// earlier versions).
    #[serde(default)]
    pub queue: Option<AppliedQueue>,
}

impl State {
    /// Path of the device's control file.
    pub fn control_path(&self) -> PathBuf {
        self.fuse_dir.join(fusedev::CONTROL_NAME)
    }
}

/// State directory of the device mounted at `mount`: the path with `/` turned into `_`
/// and every other byte except letters, digits, `.` and `-` written as `%xx`, so distinct
/// mount points never share a directory.
pub fn state_dir(state_root: &Path, mount: &Path) -> PathBuf {
    let mut flat = String::new();
    for b in mount.as_os_str().as_encoded_bytes() {
        match b {
            b'/' => flat.push('_'),
            b if b.is_ascii_alphanumeric() || *b == b'.' || *b == b'-' => flat.push(*b as char),
            b => flat.push_str(&format!("%{b:02x}")),
        }
    }
    let dir = state_root.join(flat.trim_start_matches('_'));
    // Devices brought up by earlier versions used a lossier name; keep finding them.
    let legacy = legacy_state_dir(state_root, mount);
    if !dir.exists() && legacy.join("state.json").exists() {
        return legacy;
    }
    dir
}

fn legacy_state_dir(state_root: &Path, mount: &Path) -> PathBuf {
    let flat: String = mount
        .to_string_lossy()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    state_root.join(flat.trim_start_matches('_'))
}

/// Read the state of the device at `mount`, if one was brought up.
pub fn load_state(state_root: &Path, mount: &Path) -> Option<State> {
    let text = std::fs::read_to_string(state_dir(state_root, mount).join("state.json")).ok()?;
    serde_json::from_str(&text).ok()
}

/// All devices with a state file under `state_root`.
pub fn list_states(state_root: &Path) -> Vec<State> {
    let Ok(entries) = std::fs::read_dir(state_root) else {
        return Vec::new();
    };
    let mut states: Vec<State> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("state.json")).ok())
        .filter_map(|t| serde_json::from_str(&t).ok())
        .collect();
    states.sort_by(|a, b| a.mount.cmp(&b.mount));
    states
}

fn save_state(dir: &Path, state: &State) -> Result<(), Error> {
    let tmp = dir.join("state.json.tmp");
    let text = serde_json::to_string_pretty(state).map_err(|e| Error::Tool(e.to_string()))?;
    std::fs::write(&tmp, text).map_err(io(format!("{}", tmp.display())))?;
    std::fs::rename(&tmp, dir.join("state.json")).map_err(io("state.json"))
}

/// Refuse early, in one line, when this machine cannot host the testbed.
pub fn preflight() -> Result<(), Error> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Error::Unsupported(
            "the emulated disk needs root (FUSE mount, loop device, mkfs)".into(),
        ));
    }
    if !Path::new("/dev/fuse").exists() {
        return Err(Error::Unsupported(
            "/dev/fuse is missing (load the fuse module)".into(),
        ));
    }
    if !Path::new("/dev/loop-control").exists() {
        return Err(Error::Unsupported(
            "/dev/loop-control is missing (load the loop module)".into(),
        ));
    }
    for tool in ["losetup", "mkfs.ext4", "mount"] {
        if !system::have_tool(tool) {
            return Err(Error::Unsupported(format!("{tool} not found on PATH")));
        }
    }
    Ok(())
}

/// A running emulated disk owned by this process.
pub struct Testbed {
    state: State,
    dir: PathBuf,
    session: Option<fuser::BackgroundSession>,
}

impl Testbed {
    /// Bring a device up in this process: backing file, FUSE server (a background
    /// thread), loop device, ext4, mount, queue settings, state file.
    pub fn up(cfg: &Config) -> Result<Testbed, Error> {
        cfg.validate()?;
        preflight()?;
        if system::mount_at(&cfg.mount).is_some() {
            return Err(Error::Input(format!(
                "{} is already a mount point",
                cfg.mount.display()
            )));
        }
        let dir = state_dir(&cfg.state_root, &cfg.mount);
        if let Some(old) = load_state(&cfg.state_root, &cfg.mount) {
            if pid_alive(old.pid) {
                return Err(Error::Input(format!(
                    "a device for {} is already served by pid {}",
                    cfg.mount.display(),
                    old.pid
                )));
            }
            down(&cfg.state_root, &cfg.mount)?;
        }
        let fuse_dir = dir.join("fuse");
        std::fs::create_dir_all(&fuse_dir).map_err(io(format!("{}", fuse_dir.display())))?;
        std::fs::create_dir_all(&cfg.mount).map_err(io(format!("{}", cfg.mount.display())))?;
        let backing = open_backing(&cfg.image, cfg.size)?;
        let fresh = cfg.reformat || !has_ext4(&backing);

        let spec = cfg.preset.spec();
        let drive = match cfg.placement {
            Placement::Platter => Drive::new(spec, cfg.drive).with_span(cfg.size),
            Placement::Start => Drive::new(spec, cfg.drive),
        };
        let fs = fusedev::DiskFs::new(
            backing,
            cfg.size,
            drive,
            cfg.faults.clone(),
            cfg.model_writes,
        )
        .with_host_gap(std::time::Duration::from_micros(cfg.host_gap_us));
        let mut fuse_cfg = fuser::Config::default();
        fuse_cfg.n_threads = Some(fusedev::SESSION_THREADS);
        // This process mounts the device itself (root, mount(2)) and hands the descriptor to
        // the FUSE server; it unmounts it again in `teardown`.
        let fd = system::mount_fuse(&fuse_dir, "vodkit-hdd")?;
        let session = fuser::Session::from_fd(fs, fd, fuser::SessionACL::Owner, fuse_cfg)
            .and_then(fuser::Session::spawn)
            .map_err(|e| {
                let _ = system::unmount(&fuse_dir);
                Error::Tool(format!("FUSE server at {}: {e}", fuse_dir.display()))
            })?;
        let mut bed = Testbed {
            state: State {
                mount: cfg.mount.clone(),
                image: cfg.image.clone(),
                fuse_dir: fuse_dir.clone(),
                loop_device: String::new(),
                direct_io: false,
                preset: cfg.preset,
                size: cfg.size,
                pid: std::process::id(),
                daemon: false,
                ready: false,
                queue: None,
            },
            dir,
            session: Some(session),
        };
        if let Err(e) = bed.attach_and_mount(cfg, fresh) {
            let _ = bed.teardown();
            return Err(e);
        }
        Ok(bed)
    }

    fn attach_and_mount(&mut self, cfg: &Config, fresh: bool) -> Result<(), Error> {
        let image = self.state.fuse_dir.join(fusedev::IMAGE_NAME);
        let image_s = image.to_string_lossy().to_string();
        let dev = system::run("losetup", &["--find", "--show", "--direct-io=on", &image_s])?
            .trim()
            .to_string();
        self.state.loop_device = dev.trim_start_matches("/dev/").to_string();
        let name = self.state.loop_device.clone();
        self.state.direct_io = std::fs::read_to_string(format!("/sys/block/{name}/loop/dio"))
            .map(|s| s.trim() == "1")
            .unwrap_or(false);
        if !self.state.direct_io {
            tracing::warn!(
                "{dev}: direct I/O refused by the kernel; the FUSE side still bypasses its cache"
            );
        }
        // The defaults of a real rotational disk of the preset on this kernel, the user's
        // settings winning, fitted to what the loop device accepts.
        let defaults = queue::rotational_defaults(cfg.preset.name(), KernelVersion::running()?);
        let plan = queue::plan(&defaults, &cfg.tuning, &queue::read(&name)?);
        let mut tuning = plan.tuning.clone();
        tuning.rotational = Some(true);
        queue::apply(&name, &tuning)?;
        if fresh {
            system::run(
                "mkfs.ext4",
                &[
                    "-F",
                    "-q",
                    "-m",
                    "0",
                    "-L",
                    "vodkit-hdd",
                    "-E",
                    "lazy_itable_init=0,lazy_journal_init=0,nodiscard",
                    &dev,
                ],
            )?;
        }
        let mnt = cfg.mount.to_string_lossy().to_string();
        system::run("mount", &["-t", "ext4", "-o", "noatime", &dev, &mnt])?;
        // Opening and mounting the device resets some queue settings (read_ahead_kb among
        // them), so the tuning is applied again once the filesystem is mounted.
        let now = queue::apply(&name, &tuning)?;
        self.state.queue = Some(AppliedQueue::new(defaults, &plan, &now));
        self.state.ready = true;
        save_state(&self.dir, &self.state)
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    /// Record that this process is a device daemon that `down` may signal.
    pub fn mark_daemon(&mut self) -> Result<(), Error> {
        self.state.daemon = true;
        save_state(&self.dir, &self.state)
    }

    /// Unmount, detach and stop serving; removes the state directory.
    pub fn down(mut self) -> Result<(), Error> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<(), Error> {
        let mut first_error = None;
        if system::mount_at(&self.state.mount).is_some_and(|m| m.fstype == "ext4") {
            if let Err(e) = system::unmount(&self.state.mount) {
                first_error.get_or_insert(e);
            }
        }
        detach_loops(&self.state.fuse_dir.join(fusedev::IMAGE_NAME));
        if let Some(session) = self.session.take() {
            // The mount is this process's own: once it is gone the server's threads read
            // ENODEV and end. A mount that will not go has its connection aborted instead.
            if let Err(e) = system::unmount(&self.state.fuse_dir) {
                tracing::warn!("FUSE unmount: {e}");
                system::abort_fuse_connection(&self.state.fuse_dir);
            }
            if let Err(e) = session.join() {
                tracing::warn!("FUSE server: {e}");
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if self.session.is_some() {
            let _ = self.teardown();
        }
    }
}

fn open_backing(path: &Path, size: u64) -> Result<std::fs::File, Error> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io(format!("{}", parent.display())))?;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(io(format!("{}", path.display())))?;
    let len = file
        .metadata()
        .map_err(io(format!("{}", path.display())))?
        .len();
    if len > size {
        return Err(Error::Input(format!(
            "{} is {len} bytes, larger than the requested size {size}",
            path.display()
        )));
    }
    if len < size {
        check_room(path, &file, size)?;
        file.set_len(size)
            .map_err(io(format!("{}", path.display())))?;
    }
    Ok(file)
}

/// The image is sparse, but what is written into it takes room on the file system that
/// holds it: refuse to create or grow an image that file system could not fill, before
/// a file set runs it out of space halfway.
fn check_room(path: &Path, file: &std::fs::File, size: u64) -> Result<(), Error> {
    use std::os::unix::fs::MetadataExt as _;
    let allocated = file
        .metadata()
        .map_err(io(format!("{}", path.display())))?
        .blocks()
        * 512;
    let needed = size.saturating_sub(allocated);
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let free = free_bytes(dir).map_err(io(format!("{}", dir.display())))?;
    if needed > free {
        return Err(Error::Input(format!(
            "{}: a {} emulated disk may need {} more on the file system of {}, which has {} free; \
             use a smaller workload (--scale) or a smaller image",
            path.display(),
            bytesize::ByteSize::b(size).display().iec(),
            bytesize::ByteSize::b(needed).display().iec(),
            dir.display(),
            bytesize::ByteSize::b(free).display().iec()
        )));
    }
    Ok(())
}

/// Bytes unprivileged writers may still write on the file system holding `path`.
pub fn free_bytes(path: &Path) -> std::io::Result<u64> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::other("path contains NUL"))?;
    // SAFETY: statvfs is plain data; all-zero is a valid value to be overwritten.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a writable statvfs.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// The sparse image behind the emulated disk (of the default state root) whose file
/// system holds `path`, if any: writing under `path` also takes room where that image lies.
pub fn image_behind(path: &Path) -> Option<PathBuf> {
    let path = std::fs::canonicalize(path)
        .or_else(|_| {
            path.parent()
                .map_or(Ok(path.to_path_buf()), std::fs::canonicalize)
        })
        .ok()?;
    list_states(Path::new(DEFAULT_STATE_ROOT))
        .into_iter()
        .find(|s| path.starts_with(&s.mount))
        .map(|s| s.image)
}

/// Whether the backing file starts with an ext2/3/4 superblock (magic 0xEF53 at 1080).
fn has_ext4(file: &std::fs::File) -> bool {
    use std::os::unix::fs::FileExt;
    let mut magic = [0u8; 2];
    file.read_exact_at(&mut magic, 1024 + 56).is_ok() && magic == [0x53, 0xEF]
}

fn detach_loops(image: &Path) {
    for dev in system::loops_backed_by(image) {
        if let Err(e) = system::run("losetup", &["-d", &format!("/dev/{dev}")]) {
            tracing::warn!("{e}");
        }
    }
}

/// Whether process `pid` exists.
pub fn pid_alive(pid: u32) -> bool {
    // A zombie (exited, not yet reaped by its parent) no longer serves anything.
    let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('Z')))
        .unwrap_or(false);
    // SAFETY: signal 0 only checks for existence and permission.
    pid != 0 && !zombie && unsafe { libc::kill(pid as libc::pid_t, 0) } == 0
}

/// Tear down the device mounted at `mount`, whether its server is alive (asked to stop)
/// or dead (its leftovers are released): ext4 unmounted, loop detached, FUSE unmounted,
/// state removed. Returns what was done, one item per step.
pub fn down(state_root: &Path, mount: &Path) -> Result<Vec<String>, Error> {
    let mut done = Vec::new();
    let dir = state_dir(state_root, mount);
    let state = load_state(state_root, mount);
    if let Some(st) = &state {
        if st.daemon && st.pid != std::process::id() && pid_alive(st.pid) {
            // SAFETY: sending SIGTERM to the daemon recorded in the state file.
            unsafe { libc::kill(st.pid as libc::pid_t, libc::SIGTERM) };
            if wait_gone(st.pid, 30.0) {
                done.push(format!("stopped server pid {}", st.pid));
            } else {
                unsafe { libc::kill(st.pid as libc::pid_t, libc::SIGKILL) };
                wait_gone(st.pid, 5.0);
                done.push(format!("killed unresponsive server pid {}", st.pid));
            }
        }
    }
    let fuse_dir = state
        .as_ref()
        .map(|s| s.fuse_dir.clone())
        .unwrap_or_else(|| dir.join("fuse"));
    let image = fuse_dir.join(fusedev::IMAGE_NAME);
    // A dead server would make every request on its connection hang or fail; abort it.
    if system::mount_at(&fuse_dir).is_some() {
        system::abort_fuse_connection(&fuse_dir);
    }
    if let Some(m) = system::mount_at(mount) {
        let ours = m.fstype == "ext4" && (m.source.contains("/dev/loop") || state.is_some());
        if ours {
            system::unmount(mount)?;
            done.push(format!("unmounted {}", mount.display()));
        }
    }
    for dev in system::loops_backed_by(&image) {
        system::run("losetup", &["-d", &format!("/dev/{dev}")])?;
        done.push(format!("detached /dev/{dev}"));
    }
    if system::mount_at(&fuse_dir).is_some() {
        system::unmount(&fuse_dir)?;
        done.push(format!("unmounted FUSE at {}", fuse_dir.display()));
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(io(format!("{}", dir.display())))?;
    }
    Ok(done)
}

fn wait_gone(pid: u32, secs: f64) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_secs_f64(secs);
    while std::time::Instant::now() < until {
        if !pid_alive(pid) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    !pid_alive(pid)
}

/// Send one control command to a running device (encoded as its one-line wire text).
pub fn control(state: &State, command: Control) -> Result<(), Error> {
    let path = state.control_path();
    std::fs::write(&path, format!("{command}\n")).map_err(|e| match e.raw_os_error() {
        Some(libc::EINVAL) => Error::Input(format!(
            "control command `{command}` refused (see `vodkit hdd tune --help`)"
        )),
        _ => Error::Io {
            context: format!("{}", path.display()),
            cause: e,
        },
    })
}

/// Counters of a running device.
pub fn counters(state: &State) -> Result<DeviceCounters, Error> {
    let path = state.control_path();
    let text = std::fs::read_to_string(&path).map_err(io(format!("{}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| Error::Tool(format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_its_file_system_cannot_fill_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk.img");
        let e = open_backing(&path, 1 << 50).unwrap_err().to_string();
        assert!(e.contains("--scale") && e.contains("free"), "{e}");
        // Nothing was grown.
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        // A small one is fine.
        let f = open_backing(&path, 64 << 20).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 64 << 20);
    }

    #[test]
    fn placement_defaults_to_the_whole_platter_also_for_older_state() {
        let c = Config::new(Preset::WdRed, 1 << 30, "/tmp/i", "/tmp/m");
        assert_eq!(c.placement, Placement::Platter);
        let mut json = serde_json::to_value(&c).unwrap();
        json.as_object_mut().unwrap().remove("placement");
        let back: Config = serde_json::from_value(json).unwrap();
        assert_eq!(back.placement, Placement::Platter);
        let start = Config {
            placement: Placement::Start,
            ..c
        };
        let json = serde_json::to_string(&start).unwrap();
        assert!(json.contains("\"placement\":\"start\""), "{json}");
    }

    #[test]
    fn config_validation_names_the_problem() {
        let small = Config::new(Preset::WdRed, 1 << 20, "/tmp/x.img", "/tmp/x");
        assert!(matches!(small.validate(), Err(Error::Input(m)) if m.contains("64 MiB")));
        let odd = Config::new(Preset::WdRed, (1 << 30) + 1, "/tmp/x.img", "/tmp/x");
        assert!(odd.validate().is_err());
        assert!(Config::new(Preset::Hp10k, 1 << 30, "/tmp/x.img", "/tmp/x")
            .validate()
            .is_ok());
    }

    #[test]
    fn state_dirs_are_distinct_per_mount_point() {
        let root = Path::new("/run/x");
        let a = state_dir(root, Path::new("/mnt/a b"));
        let b = state_dir(root, Path::new("/mnt/a/b"));
        let c = state_dir(root, Path::new("/mnt/a_b"));
        assert_eq!(a, Path::new("/run/x/mnt_a%20b"));
        assert_eq!(b, Path::new("/run/x/mnt_a_b"));
        assert_eq!(c, Path::new("/run/x/mnt_a%5fb"));
        assert_eq!(
            state_dir(root, Path::new("/var/tmp/vk-1")),
            Path::new("/run/x/var_tmp_vk-1")
        );
    }

    #[test]
    fn down_with_nothing_up_does_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let steps = down(tmp.path(), &tmp.path().join("never-mounted")).unwrap();
        assert!(steps.is_empty(), "{steps:?}");
        assert!(list_states(tmp.path()).is_empty());
    }

    #[test]
    fn live_and_exited_processes() {
        assert!(pid_alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        // Exited but not yet reaped: a zombie counts as gone.
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!pid_alive(child.id()));
        child.wait().unwrap();
        assert!(!pid_alive(0));
    }
}
