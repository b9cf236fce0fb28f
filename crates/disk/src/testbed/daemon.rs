//! Running an emulated disk in a background process so a command-line `up` can return:
//! [`spawn`] starts the given command (the CLI re-invokes itself with a hidden subcommand)
//! detached in its own session and waits until the device is mounted; [`serve`] is what
//! that background process runs: bring the device up, mark it ready, wait for SIGTERM,
//! tear it down.

use super::{io, load_state, state_dir, Config, Error, State, Testbed};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Start `program args…` (which must end up calling [`serve`] with `cfg`) in the
/// background and wait up to `timeout` for the device to be ready.
pub fn spawn(
    program: &Path,
    args: &[String],
    cfg: &Config,
    timeout: Duration,
) -> Result<State, Error> {
    super::preflight()?;
    if super::system::mount_at(&cfg.mount).is_some() {
        return Err(Error::Input(format!(
            "{} is already a mount point",
            cfg.mount.display()
        )));
    }
    let dir = state_dir(&cfg.state_root, &cfg.mount);
    std::fs::create_dir_all(&dir).map_err(io(format!("{}", dir.display())))?;
    let log_path = dir.join("daemon.log");
    let log = std::fs::File::create(&log_path).map_err(io(format!("{}", log_path.display())))?;
    let log2 = log.try_clone().map_err(io("daemon.log"))?;
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null()).stdout(log).stderr(log2);
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: setsid is async-signal-safe; it detaches the child from our terminal so
        // it survives the shell that ran `up`.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().map_err(io(format!("{}", program.display())))?;
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(st) =
            load_state(&cfg.state_root, &cfg.mount).filter(|s| s.ready && s.pid == child.id())
        {
            return Ok(st);
        }
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            let why = match super::system::said_lines(&text).next_back() {
                Some(last) => last.to_string(),
                None => format!("exited with {status}"),
            };
            return Err(Error::Tool(format!("device server failed: {why}")));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let _ = super::down(&cfg.state_root, &cfg.mount);
            return Err(Error::Tool(format!(
                "device not ready after {}s",
                timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Body of the background process: serve the device until SIGTERM, SIGINT or SIGHUP.
pub fn serve(cfg: &Config) -> Result<(), Error> {
    // Block the stop signals in every thread (the FUSE thread inherits the mask) and
    // wait for them synchronously.
    // SAFETY: sigset manipulation on a local, zero-initialised set.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let mut bed = Testbed::up(cfg)?;
    bed.mark_daemon()?;
    eprintln!(
        "serving {} ({}) on /dev/{} mounted at {}",
        bed.state().image.display(),
        bed.state().preset,
        bed.state().loop_device,
        bed.state().mount.display()
    );
    if let Some(q) = &bed.state().queue {
        eprintln!("{}", q.line());
    }
    let mut sig: libc::c_int = 0;
    // SAFETY: waits on the set built above.
    unsafe { libc::sigwait(&set, &mut sig) };
    eprintln!("signal {sig}: tearing down");
    bed.down()
}
