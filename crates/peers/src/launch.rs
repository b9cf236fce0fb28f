//! Starting the unmodified peers (nginx, Apache): write the generated config into the run
//! directory, start the program (through an optional command wrap such as a preload library
//! or a memory budget) on a free loopback port, and wait until it serves.

use crate::process::{find_program, free_port, ProcessError, ServerProcess, StartSpec};
use crate::PeerConfig;
use crate::{apache, nginx};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Turns the plain server command into the one actually run (memory budget, preload shim,
/// extra environment). [`no_wrap`] runs it as is.
pub type Wrap<'a> = &'a dyn Fn(Command) -> Result<Command, String>;

/// How a peer is started: [`start_nginx`] or [`start_apache`].
pub type StartPeer = fn(&PeerSetup<'_>, Wrap<'_>) -> Result<ServerProcess, PeerError>;

/// Where and how a peer serves.
pub struct PeerSetup<'a> {
    /// The file-set root the server serves.
    pub root: &'a Path,
    /// A fresh directory for config, logs, pid and temp files.
    pub run_dir: &'a Path,
    /// Path to request to check readiness.
    pub probe_path: &'a str,
    pub workers: usize,
    /// nginx only: `aio threads` with this many pool threads per worker, so that file reads
    /// and `sendfile` run in nginx's thread pool instead of blocking a worker's event loop.
    pub aio_threads: Option<usize>,
    /// nginx only: HTTP/2 on the listener (`listen … http2`; with TLS, negotiated by ALPN).
    pub http2: bool,
    /// Directives added to the config: nginx's `server` block (e.g. the preload daemon's
    /// admission recipe, `vodkit_preload::daemon::admit::nginx_directives`), the end of
    /// Apache's main config (e.g. [`crate::apache::live_origin_directives`]).
    pub server_extra: Option<&'a str>,
    /// A directory under the root the server's workers write to (a live origin's prefix,
    /// such as `/live/`): created, and handed to the user the workers run as.
    pub writable: Option<&'a str>,
    /// nginx only: the access log's `log_format` (default: the trace format,
    /// [`crate::nginx::ACCESS_LOG_FORMAT`]), e.g. `combined` plus `$request_time` and
    /// `"$http_range"` to test log readers against a real server.
    pub log_format: Option<&'a str>,
}

impl<'a> PeerSetup<'a> {
    /// `workers` processes serving `root`, with no thread pool and no extra directives.
    pub fn new(root: &'a Path, run_dir: &'a Path, probe_path: &'a str, workers: usize) -> Self {
        PeerSetup {
            root,
            run_dir,
            probe_path,
            workers,
            aio_threads: None,
            http2: false,
            server_extra: None,
            writable: None,
            log_format: None,
        }
    }
}

/// Why a peer could not be started.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("{0} is not installed (Debian: apt-get install {1}); skipped")]
    Missing(&'static str, &'static str),
    #[error("{0}")]
    Wrap(String),
    #[error(transparent)]
    Process(#[from] ProcessError),
    #[error("writing the {what} config in {dir}: {source}")]
    Config {
        what: &'static str,
        dir: PathBuf,
        source: std::io::Error,
    },
}

/// The nginx binary, if installed.
pub fn nginx_program() -> Option<PathBuf> {
    find_program("nginx")
}

/// The Apache binary, if installed (Debian names it apache2).
pub fn apache_program() -> Option<PathBuf> {
    find_program("apache2").or_else(|| find_program("httpd"))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Number of online CPUs (one worker per core).
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

const START_TIMEOUT: Duration = Duration::from_secs(20);

fn write_config(what: &'static str, dir: &Path, path: &Path, text: &str) -> Result<(), PeerError> {
    std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::write(path, text))
        .map_err(|source| PeerError::Config {
            what,
            dir: dir.to_path_buf(),
            source,
        })
}

/// Creates `rel` under `root` (a [`PeerSetup::writable`] directory) and, when the workers
/// drop to `owner` (user, group), gives it to them.
fn make_writable(root: &Path, rel: &str, owner: Option<(&str, &str)>) -> Result<(), PeerError> {
    let dir = root.join(rel.trim_start_matches('/'));
    let fail = |source: std::io::Error| PeerError::Config {
        what: "writable directory",
        dir: dir.clone(),
        source,
    };
    std::fs::create_dir_all(&dir).map_err(fail)?;
    if let Some((user, group)) = owner {
        let (uid, gid) = ids_of(user, group).ok_or_else(|| {
            fail(std::io::Error::other(format!(
                "no user {user} or group {group} to give it to"
            )))
        })?;
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).map_err(fail)?;
    }
    Ok(())
}

/// The uid of `user` and the gid of `group` from the system's databases.
fn ids_of(user: &str, group: &str) -> Option<(u32, u32)> {
    let uid = nix::unistd::User::from_name(user).ok()??.uid;
    let gid = nix::unistd::Group::from_name(group).ok()??.gid;
    Some((uid.as_raw(), gid.as_raw()))
}

/// A peer ready to launch: its rendered config and the command that runs it.
struct Prepared<'t> {
    name: &'static str,
    port: u16,
    conf_path: PathBuf,
    config: String,
    error_log: PathBuf,
    is_error: fn(&str) -> bool,
    cmd: Command,
    /// HTTPS only: the readiness probe uses TLS.
    tls: Option<&'t crate::tls::TlsFiles>,
}

impl<'t> Prepared<'t> {
    /// The peer configured by `cfg`, listening on `port`, started by `cmd`.
    fn of<C: PeerConfig>(
        cfg: &C,
        port: u16,
        cmd: Command,
        tls: Option<&'t crate::tls::TlsFiles>,
    ) -> Prepared<'t> {
        Prepared {
            name: C::NAME,
            port,
            conf_path: cfg.conf_path(),
            config: cfg.render(),
            error_log: cfg.error_log(),
            is_error: C::IS_ERROR_LINE,
            cmd,
            tls,
        }
    }
}

/// Write the config, wrap the command, start it and wait until it serves.
fn launch(
    setup: &PeerSetup<'_>,
    p: Prepared<'_>,
    wrap: Wrap<'_>,
) -> Result<ServerProcess, PeerError> {
    write_config(p.name, setup.run_dir, &p.conf_path, &p.config)?;
    let cmd = wrap(p.cmd).map_err(PeerError::Wrap)?;
    let spec = StartSpec {
        name: p.name,
        port: p.port,
        run_dir: setup.run_dir,
        error_log: p.error_log,
        is_error: p.is_error,
        probe_path: setup.probe_path,
        timeout: START_TIMEOUT,
    };
    Ok(match p.tls {
        None => ServerProcess::start(cmd, spec)?,
        Some(files) => ServerProcess::start_tls(cmd, spec, files)?,
    })
}

/// Start nginx with a generated config.
pub fn start_nginx(setup: &PeerSetup<'_>, wrap: Wrap<'_>) -> Result<ServerProcess, PeerError> {
    start_nginx_with(setup, None, wrap)
}

/// `path` made absolute against the working directory: the generated configs are read by
/// servers that resolve relative paths against their own prefix (nginx `-p`, Apache's
/// `ServerRoot`), so a relative `--out` would be doubled or misplaced.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// `files` with every path made [`absolute`].
fn absolute_files(files: &crate::tls::TlsFiles) -> crate::tls::TlsFiles {
    crate::tls::TlsFiles {
        cert: absolute(&files.cert),
        key: absolute(&files.key),
        ca: absolute(&files.ca),
    }
}

/// [`start_nginx`], serving HTTPS only (TLS 1.3, sendfile on) with the certificate of `tls`
/// when given.
pub fn start_nginx_with(
    setup: &PeerSetup<'_>,
    tls: Option<&crate::tls::TlsFiles>,
    wrap: Wrap<'_>,
) -> Result<ServerProcess, PeerError> {
    let program = nginx_program().ok_or(PeerError::Missing("nginx", "nginx"))?;
    let port = free_port().map_err(ProcessError::from)?;
    if let Some(rel) = setup.writable {
        // Workers run as root when the runner is (`as_root`), else as the runner.
        make_writable(setup.root, rel, None)?;
    }
    let cfg = nginx::NginxSetup {
        root: absolute(setup.root),
        run_dir: absolute(setup.run_dir),
        port,
        workers: setup.workers,
        aio_threads: setup.aio_threads,
        http2: setup.http2,
        server_extra: setup.server_extra.unwrap_or_default().to_string(),
        log_format: setup.log_format.map(str::to_string),
        as_root: is_root(),
        nofile: nginx::nofile_target(),
        tls: tls.map(absolute_files),
    };
    let mut cmd = Command::new(program);
    cmd.arg("-p")
        .arg(&cfg.run_dir)
        .arg("-c")
        .arg(cfg.conf_path())
        .args(["-e", "stderr"]);
    launch(setup, Prepared::of(&cfg, port, cmd, tls), wrap)
}

/// Start Apache (event MPM) with a generated config.
pub fn start_apache(setup: &PeerSetup<'_>, wrap: Wrap<'_>) -> Result<ServerProcess, PeerError> {
    start_apache_with(setup, None, wrap)
}

/// [`start_apache`], serving HTTPS only (mod_ssl, TLS 1.3) with the certificate of `tls`
/// when given.
pub fn start_apache_with(
    setup: &PeerSetup<'_>,
    tls: Option<&crate::tls::TlsFiles>,
    wrap: Wrap<'_>,
) -> Result<ServerProcess, PeerError> {
    let program = apache_program().ok_or(PeerError::Missing("apache", "apache2"))?;
    let port = free_port().map_err(ProcessError::from)?;
    let drop_to = is_root().then(|| ("nobody".to_string(), "nogroup".to_string()));
    if let Some(rel) = setup.writable {
        let owner = drop_to.as_ref().map(|(u, g)| (u.as_str(), g.as_str()));
        make_writable(setup.root, rel, owner)?;
        make_writable(setup.run_dir, apache::DAV_DIR, owner)?;
    }
    let cfg = apache::ApacheSetup {
        root: absolute(setup.root),
        run_dir: absolute(setup.run_dir),
        port,
        processes: setup.workers,
        drop_to,
        extra: setup.server_extra.unwrap_or_default().to_string(),
        tls: tls.map(absolute_files),
    };
    let mut cmd = Command::new(program);
    cmd.arg("-f").arg(cfg.conf_path()).arg("-DFOREGROUND");
    launch(setup, Prepared::of(&cfg, port, cmd, tls), wrap)
}

/// The identity wrap: run the server as is.
pub fn no_wrap(cmd: Command) -> Result<Command, String> {
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_come_from_the_user_and_group_databases() {
        assert_eq!(ids_of("root", "root"), Some((0, 0)));
        assert_eq!(ids_of("no-such-user-here", "root"), None);
        assert_eq!(ids_of("root", "no-such-group-here"), None);
    }
}
