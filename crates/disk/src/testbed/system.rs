//! Thin wrappers over the system tools and kernel interfaces the testbed drives: running a
//! command with its error as one line, `/proc/self/mountinfo`, loop devices, caches.

use super::Error;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Run `prog args…`, returning stdout; a failure carries the tool's first stderr line.
pub fn run(prog: &str, args: &[&str]) -> Result<String, Error> {
    let out = Command::new(prog)
        .args(args)
        .output()
        .map_err(|e| Error::Tool(format!("{prog}: cannot run: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let first = said_lines(&err).next().unwrap_or("failed");
        return Err(Error::Tool(format!("{prog} {}: {first}", args.join(" "))));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The lines of a tool's output that say something: trimmed, blank ones left out.
pub fn said_lines(text: &str) -> impl DoubleEndedIterator<Item = &str> {
    text.lines().map(str::trim).filter(|l| !l.is_empty())
}

/// Whether `prog` can be found on `PATH`.
pub fn have_tool(prog: &str) -> bool {
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|d| d.join(prog).is_file()))
        .unwrap_or(false)
}

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone)]
pub struct MountEntry {
    pub dir: PathBuf,
    pub fstype: String,
    /// `major:minor` of the mounted device.
    pub dev: String,
    pub source: String,
}

/// Mount points currently mounted.
pub fn mounts() -> Vec<MountEntry> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split(' ').collect();
            let dash = fields.iter().position(|f| *f == "-")?;
            Some(MountEntry {
                dir: PathBuf::from(unescape(fields.get(4)?)),
                fstype: fields.get(dash + 1)?.to_string(),
                dev: fields.get(2)?.to_string(),
                source: unescape(fields.get(dash + 2)?),
            })
        })
        .collect()
}

/// The mount at `dir`, if any (the last one when mounts are stacked).
pub fn mount_at(dir: &Path) -> Option<MountEntry> {
    mounts().into_iter().rfind(|m| m.dir == dir)
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v as char);
                i += 4;
                continue;
            }
        }
        out.push(b[i] as char);
        i += 1;
    }
    out
}

/// Loop devices (`loopN`) whose backing file is `file`.
pub fn loops_backed_by(file: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    let want = file.to_string_lossy().to_string();
    entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("loop"))
        .filter(|n| {
            std::fs::read_to_string(format!("/sys/block/{n}/loop/backing_file"))
                .map(|b| b.trim().trim_end_matches(" (deleted)") == want)
                .unwrap_or(false)
        })
        .collect()
}

/// Unmount `dir`, falling back to a lazy unmount if it is busy.
pub fn unmount(dir: &Path) -> Result<(), Error> {
    let c = std::ffi::CString::new(dir.as_os_str().to_string_lossy().as_bytes())
        .map_err(|_| Error::Tool(format!("bad path {}", dir.display())))?;
    // SAFETY: plain system calls on a NUL-terminated path.
    let rc = unsafe { libc::umount2(c.as_ptr(), 0) };
    if rc == 0 {
        return Ok(());
    }
    let rc = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::Tool(format!(
            "umount {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        )))
    }
}

/// Mount the kernel's FUSE file system at `dir` with mount(2) directly, as root, without
/// `fusermount3`: `/dev/fuse` is opened and its descriptor named in the mount data
/// (`fd=N,rootmode=40000,user_id=0,group_id=0`; nosuid, nodev, noatime). Returns that
/// descriptor: the FUSE server reads the kernel's requests from it, and the mount lives
/// until [`unmount`] (or until the descriptor and every user of the mount are gone).
pub fn mount_fuse(dir: &Path, fsname: &str) -> Result<std::os::fd::OwnedFd, Error> {
    use std::os::fd::AsRawFd;
    let device = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| Error::Unsupported(format!("/dev/fuse: {e} (load the fuse module)")))?;
    let cstr = |what: &str, s: &str| {
        std::ffi::CString::new(s).map_err(|_| Error::Input(format!("{what} `{s}` contains NUL")))
    };
    let source = cstr("file system name", fsname)?;
    let target = cstr("mount point", &dir.to_string_lossy())?;
    let data = cstr(
        "mount data",
        &format!(
            "fd={},rootmode=40000,user_id=0,group_id=0",
            device.as_raw_fd()
        ),
    )?;
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOATIME;
    // SAFETY: source, target, the type and data are NUL-terminated strings that outlive the
    // call; the fuse file system reads `data` as a string; `device` stays open across it.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            c"fuse".as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(Error::Tool(format!(
            "mount(2) of FUSE at {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        )));
    }
    Ok(device.into())
}

/// Write back dirty pages and drop the clean page cache, dentries and inodes of the whole
/// machine (`sync; echo 3 > /proc/sys/vm/drop_caches`). Needs root.
pub fn drop_caches() -> Result<(), Error> {
    // SAFETY: sync(2) has no arguments and cannot fail.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3\n")
        .map_err(|e| Error::Tool(format!("/proc/sys/vm/drop_caches: {e} (needs root)")))
}

/// Abort the FUSE connection mounted at `dir`, so nothing waits on a dead server.
pub fn abort_fuse_connection(dir: &Path) {
    let Some(m) = mount_at(dir).filter(|m| m.fstype.starts_with("fuse")) else {
        return;
    };
    // The connection directory is named after the minor number of the mount's device.
    if let Some(minor) = m.dev.split(':').nth(1) {
        let _ = std::fs::write(format!("/sys/fs/fuse/connections/{minor}/abort"), "1");
    }
}
