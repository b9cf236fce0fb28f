//! Running programs under the preload shim: its library in `LD_PRELOAD`, with a daemon to talk to.
//!
//! Used by `vodkit preload` and meant for the benchmark runner: [`Preload::start`] finds
//! or starts a daemon, [`Preload::apply`] adds the library to a child's environment.

use crate::daemon::{socket, Daemon, DaemonConfig, MetricsSnapshot};
use crate::library;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

/// Why running under the library could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum PreloadError {
    #[error("cannot write the preload shim's library: {0}")]
    Library(std::io::Error),
    #[error("cannot start the prefetch daemon on {path}: {source}")]
    Daemon {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The socket path used when none is given: `$XDG_RUNTIME_DIR/vodkit-prefetchd.sock`, or
/// `/tmp/vodkit-prefetchd-UID.sock`.
pub fn default_socket() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("vodkit-prefetchd.sock"),
        // SAFETY: getuid has no preconditions.
        None => std::env::temp_dir().join(format!("vodkit-prefetchd-{}.sock", unsafe {
            libc::getuid()
        })),
    }
}

/// Whether a daemon answers on `socket`.
pub fn daemon_listening(socket: &Path) -> bool {
    socket::connect(socket).is_ok()
}

/// The library plus the daemon it reports to.
pub struct Preload {
    library: PathBuf,
    socket: PathBuf,
    timeout_ms: Option<u64>,
    /// The daemon started by [`Preload::start`], when none was running yet.
    daemon: Option<Daemon>,
}

impl Preload {
    /// Use the daemon listening at `socket` (none is started; the library fails open if
    /// nobody listens there).
    pub fn attach(socket: impl Into<PathBuf>) -> Result<Preload, PreloadError> {
        Ok(Preload {
            library: library::path().map_err(PreloadError::Library)?,
            socket: socket.into(),
            timeout_ms: None,
            daemon: None,
        })
    }

    /// Use the daemon at `config.socket`, starting one in this process with `config` when
    /// none listens there yet. The started daemon stops when the `Preload` is dropped.
    pub fn start(config: DaemonConfig) -> Result<Preload, PreloadError> {
        let mut p = Preload::attach(config.socket.clone())?;
        if !daemon_listening(&config.socket) {
            let path = config.socket.clone();
            p.daemon = Some(
                Daemon::start(config).map_err(|source| PreloadError::Daemon { path, source })?,
            );
        }
        Ok(p)
    }

    /// Bound the library's wait for the daemon (its default is 10 s).
    pub fn with_timeout_ms(mut self, ms: u64) -> Preload {
        self.timeout_ms = Some(ms);
        self
    }

    /// Path of the shared object.
    pub fn library(&self) -> &Path {
        &self.library
    }

    /// The daemon socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The daemon this `Preload` started, if it started one.
    pub fn daemon(&self) -> Option<&Daemon> {
        self.daemon.as_ref()
    }

    /// Environment variables a child needs: `LD_PRELOAD` (the library first, then whatever
    /// `LD_PRELOAD` held) and the socket; the timeout when one was set.
    pub fn env(&self) -> Vec<(OsString, OsString)> {
        let mut preload = OsString::from(self.library.as_os_str());
        if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
            preload.push(":");
            preload.push(old);
        }
        let mut env = vec![
            (OsString::from("LD_PRELOAD"), preload),
            (
                OsString::from(library::ENV_SOCKET),
                OsString::from(self.socket.as_os_str()),
            ),
        ];
        if let Some(ms) = self.timeout_ms {
            env.push((
                OsString::from(library::ENV_TIMEOUT_MS),
                OsString::from(ms.to_string()),
            ));
        }
        env
    }

    /// Add the library to `cmd`'s environment.
    pub fn apply<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        cmd.envs(self.env())
    }

    /// A command for `program` with the library preloaded.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        self.apply(&mut cmd);
        cmd
    }

    /// A command rewriter for launchers that take one (the bench's `CommandWrap`): it adds
    /// the library to every command it is given. The `Preload`, and so the daemon it
    /// started, lives as long as the returned closure.
    pub fn into_wrap(self) -> impl Fn(Command) -> Result<Command, String> + Send + Sync + 'static {
        move |mut cmd: Command| {
            self.apply(&mut cmd);
            Ok(cmd)
        }
    }

    /// Stop the daemon this `Preload` started and return its final counters.
    pub fn finish(mut self) -> Option<MetricsSnapshot> {
        self.daemon.take().map(Daemon::stop)
    }
}

/// Run `cmd` to completion under `preload`. SIGINT/SIGTERM received meanwhile are passed
/// on to the child; the caller gets control back to clean up once the child exits.
pub fn run_command(preload: &Preload, mut cmd: Command) -> std::io::Result<ExitStatus> {
    crate::signals::catch_termination();
    preload.apply(&mut cmd);
    let mut child = cmd.spawn()?;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if let Some(sig) = crate::signals::take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child.id() as libc::pid_t, sig) };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
