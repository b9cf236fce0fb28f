//! The launcher the bench uses: nginx and Apache as child processes with generated
//! configs, `url:` servers as they are, vodkit through a [`VodkitStarter`] supplied by the
//! caller; the memory budget applied as a command wrapper when available. A `+preload`
//! server gets its own prefetch daemon, started before it inside the same budget (so the
//! pages the daemon reads count against the server's memory) and stopped after it.

pub use crate::child::CommandWrap;
use crate::experiment::{Launcher, Running, StartError};
use crate::preload::{PreloadDaemon, PreloadKit};
use crate::readahead;
use crate::sut::{Base, IoMode, Sut};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use vodkit_peers::launch::{self as peers, PeerError, PeerSetup};
use vodkit_peers::process::ServerProcess;
use vodkit_peers::TlsFiles;
use vodkit_prefetch::budget::MemorySetting;
use vodkit_prefetch::PolicySpec;
use vodkit_server::admission::AdmissionPolicy;

/// What a `vodkit:IO:POLICY` entry asks of the server it starts.
pub struct VodkitLaunch<'a> {
    /// `--io` of the server.
    pub io: IoMode,
    /// `--prefetch` of the server.
    pub policy: &'a PolicySpec,
    /// `--memory` of the server (`None`: its default).
    pub memory: Option<MemorySetting>,
    /// `--admission` of the server (`None`: its default).
    pub admission: Option<AdmissionPolicy>,
    /// The file set it serves.
    pub root: &'a Path,
    /// Where its logs and `stats.jsonl` go.
    pub run_dir: &'a Path,
    /// The memory budget's command wrapper, when the run has one.
    pub budget: Option<&'a CommandWrap>,
    /// Serve HTTPS with these files (`+tls`; the server's URL stays `http://`, the launcher
    /// rewrites it).
    pub tls: Option<&'a TlsFiles>,
    /// Accept live streams (`--ingest`), for workloads with live viewers.
    pub live: Option<&'a crate::live::LiveOrigin>,
    /// `--threads` of the server, its event loops (`+workers:N`; `None`: one per CPU).
    pub threads: Option<usize>,
    /// `--open-file-cache` of the server (`None`: its default).
    pub open_files: Option<usize>,
    /// `--large-folios` of the server (`None`: its default).
    pub large_folios: Option<bool>,
    /// `--io-order` of the server (`None`: its default).
    pub order: Option<vodkit_prefetch::IoOrder>,
    /// Another vodkit build to run (`+bin:PATH`; `None`: the starter's own).
    pub exe: Option<&'a Path>,
    /// Require signed URLs (`+sign`): `--secure-link` with this run's secret.
    pub signing: Option<&'a UrlSigning>,
    /// Speak HTTP/2 (`+h2`): `--http2` with `tls`, else `--h2c`.
    pub http2: bool,
}

/// `+sign`: a throwaway secret for signed URLs, written to `run_dir/secure-link.key` for the
/// server (the load generator gets it from [`Running::url_secret`]).
pub struct UrlSigning {
    pub key_file: PathBuf,
    pub secret: vodkit_securelink::Secret,
}

/// How long the readiness probe's signed URL stays valid.
const PROBE_TTL_S: u64 = 24 * 3600;

impl UrlSigning {
    /// A fresh random secret (32 hex digits) in `run_dir`.
    pub fn create(run_dir: &Path) -> Result<UrlSigning, StartError> {
        use std::io::Read as _;
        let mut bytes = [0u8; 16];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut bytes))
            .map_err(|e| StartError::Failed(format!("/dev/urandom: {e}")))?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let key_file = run_dir.join("secure-link.key");
        std::fs::write(&key_file, format!("{hex}\n"))
            .map_err(|e| StartError::Failed(format!("writing {}: {e}", key_file.display())))?;
        let secret = vodkit_securelink::Secret::new(hex)
            .ok_or_else(|| StartError::Failed("empty secret".into()))?;
        Ok(UrlSigning { key_file, secret })
    }

    /// `path` signed (MD5 form, which nginx and vodkit both check) for the readiness probe.
    pub fn probe_path(&self, path: &str) -> String {
        let signer = vodkit_securelink::Signer {
            secret: self.secret.clone(),
            form: vodkit_securelink::Form::Md5,
            ttl_s: PROBE_TTL_S,
        };
        signer.sign_target(path, vodkit_securelink::unix_now())
    }
}

/// Starts the vodkit server for a `vodkit:IO:POLICY` entry.
pub trait VodkitStarter {
    /// Starts one server as `launch` asks.
    fn start(&mut self, launch: &VodkitLaunch<'_>) -> Result<Box<dyn Running>, StartError>;
}

/// A server under test whose clients need something from the run: for HTTPS, `inner`'s
/// URL with the `https` scheme and the CA the load generator must trust; for signed URLs,
/// the secret it signs with.
struct ClientNeeds {
    inner: Box<dyn Running>,
    ca: Option<PathBuf>,
    secret: Option<vodkit_securelink::Secret>,
}

/// `inner` with what its clients need (as it is when they need nothing).
fn client_needs(
    inner: Box<dyn Running>,
    ca: Option<PathBuf>,
    secret: Option<vodkit_securelink::Secret>,
) -> Box<dyn Running> {
    if ca.is_none() && secret.is_none() {
        return inner;
    }
    Box::new(ClientNeeds { inner, ca, secret })
}

impl Running for ClientNeeds {
    fn base_url(&self) -> String {
        let url = self.inner.base_url();
        match (url.strip_prefix("http://"), &self.ca) {
            (Some(rest), Some(_)) => format!("https://{rest}"),
            _ => url,
        }
    }
    fn pids(&self) -> Vec<u32> {
        self.inner.pids()
    }
    fn prefetch_series(&self) -> Vec<(f64, u64)> {
        self.inner.prefetch_series()
    }
    fn tls_ca(&self) -> Option<PathBuf> {
        self.ca.clone()
    }
    fn url_secret(&self) -> Option<vodkit_securelink::Secret> {
        self.secret.clone()
    }
    fn notes(&self) -> Vec<String> {
        self.inner.notes()
    }
    fn set_clock_rate(&self, rate: f64) -> Result<bool, String> {
        self.inner.set_clock_rate(rate)
    }
    fn stop(self: Box<Self>) -> Result<Vec<String>, String> {
        self.inner.stop()
    }
}

/// A throwaway CA and a certificate for localhost/127.0.0.1 in `run_dir/tls` (the key
/// never leaves the run directory).
pub fn run_certificates(run_dir: &Path) -> Result<TlsFiles, StartError> {
    let files = vodkit_server::tls::selfsigned::write_dir(&run_dir.join("tls"))
        .map_err(StartError::Failed)?;
    Ok(TlsFiles {
        cert: files.cert,
        key: files.key,
        ca: files.ca,
    })
}

/// Launches every kind of server under test on this machine.
pub struct LocalLauncher {
    pub root: PathBuf,
    /// Each start gets a fresh numbered directory under this one.
    pub run_base: PathBuf,
    /// A file of the set, requested to check readiness.
    pub probe_path: String,
    pub workers: usize,
    pub budget: Option<CommandWrap>,
    /// `Err(reason)` while `+preload` servers cannot run here.
    pub preload: Result<PreloadKit, String>,
    /// `Err(reason)` while the vodkit server is not available.
    pub vodkit: Result<Box<dyn VodkitStarter>, String>,
    /// Every server is started as a live origin for this ingest (workloads with live
    /// viewers); `None`: none is.
    pub live: Option<crate::live::LiveOrigin>,
    starts: u32,
}

impl LocalLauncher {
    pub fn new(root: PathBuf, run_base: PathBuf, probe_path: String) -> LocalLauncher {
        LocalLauncher {
            root,
            run_base,
            probe_path,
            workers: peers::cores(),
            budget: None,
            preload: Err("no preload shim configured for this run".into()),
            vodkit: Err("no vodkit server configured for this run".into()),
            live: None,
            starts: 0,
        }
    }

    fn next_run_dir(&mut self, sut: &Sut) -> PathBuf {
        self.starts += 1;
        let safe: String = sut
            .label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.run_base.join(format!("{:03}-{safe}", self.starts))
    }
}

struct PeerRunning {
    process: ServerProcess,
    daemon: Option<PreloadDaemon>,
}

impl Running for PeerRunning {
    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.process.port)
    }
    fn pids(&self) -> Vec<u32> {
        let daemon = self.daemon.as_ref().map(|d| d.pid());
        std::iter::once(self.process.pid()).chain(daemon).collect()
    }
    fn set_clock_rate(&self, rate: f64) -> Result<bool, String> {
        match &self.daemon {
            Some(d) => d.set_clock_rate(rate).map(|()| true),
            None => Ok(false),
        }
    }
    fn stop(self: Box<Self>) -> Result<Vec<String>, String> {
        let this = *self;
        // The server first: it must not outlive the daemon it reports to.
        let mut lines = this
            .process
            .stop(Duration::from_secs(15))
            .map_err(|e| e.to_string())?;
        if let Some(d) = this.daemon {
            lines.extend(d.stop());
        }
        Ok(lines)
    }
}

/// A server running with the device's queue settings changed (`+readahead`); the previous
/// settings come back when it stops.
struct Tuned {
    inner: Box<dyn Running>,
    applied: readahead::Applied,
}

/// `inner`, with `applied` (if any) restored when it stops.
fn tuned(inner: Box<dyn Running>, applied: Option<readahead::Applied>) -> Box<dyn Running> {
    match applied {
        Some(applied) => Box::new(Tuned { inner, applied }),
        None => inner,
    }
}

impl Running for Tuned {
    fn base_url(&self) -> String {
        self.inner.base_url()
    }
    fn pids(&self) -> Vec<u32> {
        self.inner.pids()
    }
    fn prefetch_series(&self) -> Vec<(f64, u64)> {
        self.inner.prefetch_series()
    }
    fn tls_ca(&self) -> Option<PathBuf> {
        self.inner.tls_ca()
    }
    fn url_secret(&self) -> Option<vodkit_securelink::Secret> {
        self.inner.url_secret()
    }
    fn notes(&self) -> Vec<String> {
        let mut notes = self.inner.notes();
        notes.push(self.applied.describe());
        notes
    }
    fn set_clock_rate(&self, rate: f64) -> Result<bool, String> {
        self.inner.set_clock_rate(rate)
    }
    fn stop(self: Box<Self>) -> Result<Vec<String>, String> {
        let lines = self.inner.stop()?;
        self.applied.restore()?;
        Ok(lines)
    }
}

struct External(String);

impl Running for External {
    fn base_url(&self) -> String {
        self.0.trim_end_matches('/').to_string()
    }
    fn stop(self: Box<Self>) -> Result<Vec<String>, String> {
        Ok(Vec::new())
    }
}

fn peer_error(e: PeerError) -> StartError {
    match e {
        PeerError::Missing(..) => StartError::Unavailable(e.to_string()),
        other => StartError::Failed(other.to_string()),
    }
}

impl Launcher for LocalLauncher {
    fn available(&self, sut: &Sut) -> Result<(), String> {
        match &sut.base {
            Base::Nginx if peers::nginx_program().is_none() => {
                return Err(crate::setup::missing_peer(&crate::setup::NGINX))
            }
            Base::Apache if peers::apache_program().is_none() => {
                return Err(crate::setup::missing_peer(&crate::setup::APACHE))
            }
            Base::Vodkit { .. } => {
                if let Err(why) = &self.vodkit {
                    return Err(why.clone());
                }
            }
            _ => {}
        }
        if sut.preload.is_some() {
            if let Err(why) = &self.preload {
                return Err(why.clone());
            }
        }
        if sut.readahead.is_some() {
            readahead::queue_dir(&self.root)?;
        }
        Ok(())
    }

    fn start(&mut self, sut: &Sut) -> Result<Box<dyn Running>, StartError> {
        let run_dir = self.next_run_dir(sut);
        std::fs::create_dir_all(&run_dir)
            .map_err(|e| StartError::Failed(format!("creating {}: {e}", run_dir.display())))?;
        let ra = match &sut.readahead {
            Some(r) => Some(readahead::apply(&self.root, r).map_err(StartError::Failed)?),
            None => None,
        };
        let workers = sut.workers.unwrap_or(self.workers);
        if let Some(o) = self
            .live
            .as_ref()
            .filter(|o| !o.prefix.trim_matches('/').is_empty())
        {
            // A disk-based origin starts each point with an empty live directory, as
            // vodkit's in-memory window does: the source deletes segments that leave its
            // window but not the last window of a point, which piled up over the points.
            let dir = self.root.join(o.prefix.trim_matches('/'));
            match std::fs::remove_dir_all(&dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(StartError::Failed(format!(
                        "clearing the live directory {}: {e}",
                        dir.display()
                    )))
                }
                _ => {}
            }
        }
        let live_extra = match (&self.live, &sut.base) {
            (Some(o), Base::Nginx) => Some(
                vodkit_peers::nginx::live_origin_directives(&o.prefix, &o.token, 64 << 20)
                    .map_err(StartError::Failed)?,
            ),
            (Some(o), Base::Apache) => Some(
                vodkit_peers::apache::live_origin_directives(
                    &o.prefix,
                    &o.token,
                    64 << 20,
                    &run_dir,
                )
                .map_err(StartError::Failed)?,
            ),
            _ => None,
        };
        let signing = match sut.sign {
            true if self.live.is_some() && sut.base == Base::Nginx => {
                return Err(StartError::Unavailable(
                    "nginx+sign with live viewers: its secure_link check would refuse the live source's unsigned uploads".into(),
                ))
            }
            true => Some(UrlSigning::create(&run_dir)?),
            false => None,
        };
        let probe_path = match &signing {
            Some(s) => s.probe_path(&self.probe_path),
            None => self.probe_path.clone(),
        };
        let mut server_extra = live_extra.unwrap_or_default();
        if let (Base::Nginx, Some(s)) = (&sut.base, &signing) {
            let secret = String::from_utf8_lossy(s.secret.as_bytes());
            server_extra.push_str(
                &vodkit_peers::nginx::secure_link_directives(&secret)
                    .map_err(StartError::Failed)?,
            );
        }
        if let (Base::Nginx, Some(n)) = (&sut.base, sut.open_files) {
            server_extra.push_str(&vodkit_peers::nginx::open_file_cache_directives(n));
        }
        let setup = PeerSetup {
            aio_threads: sut.aio_threads,
            http2: sut.h2,
            server_extra: Some(server_extra.as_str()).filter(|s| !s.is_empty()),
            writable: self.live.as_ref().map(|o| o.prefix.as_str()),
            ..PeerSetup::new(&self.root, &run_dir, &probe_path, workers)
        };
        let budget = self.budget.as_ref();
        let tls = match sut.tls {
            true => Some(run_certificates(&run_dir)?),
            false => None,
        };
        let daemon = match &sut.preload {
            Some(policy) => {
                let kit = self
                    .preload
                    .as_ref()
                    .map_err(|why| StartError::Unavailable(why.clone()))?;
                let d = kit
                    .start_daemon_from(
                        sut.bin.as_deref(),
                        policy,
                        sut.memory,
                        sut.order,
                        &run_dir,
                        budget,
                    )
                    .map_err(StartError::Failed)?;
                Some(d)
            }
            None => None,
        };
        let wrap = |cmd: Command| -> Result<Command, String> {
            let cmd = match &daemon {
                Some(d) => d.apply(cmd),
                None => cmd,
            };
            match budget {
                Some(b) => b(cmd),
                None => Ok(cmd),
            }
        };
        let process = match (&sut.base, &tls) {
            (Base::Nginx, None) => peers::start_nginx(&setup, &wrap).map_err(peer_error)?,
            (Base::Nginx, Some(t)) => {
                vodkit_peers::start_nginx_tls(&setup, t, &wrap).map_err(peer_error)?
            }
            (Base::Apache, None) => peers::start_apache(&setup, &wrap).map_err(peer_error)?,
            (Base::Apache, Some(t)) => {
                vodkit_peers::start_apache_tls(&setup, t, &wrap).map_err(peer_error)?
            }
            (Base::Url { url }, _) => return Ok(Box::new(External(url.clone()))),
            (Base::Vodkit { io, policy }, tls) => {
                let starter = self
                    .vodkit
                    .as_mut()
                    .map_err(|why| StartError::Unavailable(why.clone()))?;
                let inner = starter.start(&VodkitLaunch {
                    io: *io,
                    policy,
                    memory: sut.memory,
                    admission: sut.admission,
                    root: &self.root,
                    run_dir: &run_dir,
                    budget: self.budget.as_ref(),
                    tls: tls.as_ref(),
                    live: self.live.as_ref(),
                    open_files: sut.open_files,
                    threads: sut.workers,
                    large_folios: sut.large_folios,
                    order: sut.order,
                    exe: sut.bin.as_deref(),
                    signing: signing.as_ref(),
                    http2: sut.h2,
                })?;
                let ca = tls.as_ref().map(|t| t.ca.clone());
                let inner = client_needs(inner, ca, signing.map(|s| s.secret));
                return Ok(tuned(inner, ra));
            }
        };
        record_cgroups(
            &run_dir,
            [(process.name.as_str(), process.pid())]
                .into_iter()
                .chain(daemon.as_ref().map(|d| ("prefetchd", d.pid()))),
        );
        let peer: Box<dyn Running> = Box::new(PeerRunning { process, daemon });
        let peer = client_needs(peer, tls.map(|t| t.ca), signing.map(|s| s.secret));
        Ok(tuned(peer, ra))
    }
}

/// Name of the run-directory file listing each started process with its cgroup.
pub const CGROUPS_FILE: &str = "cgroups.txt";

/// The memory cgroup in a `/proc/PID/cgroup` text: the `memory` controller's line (cgroup
/// v1), else the unified hierarchy's (v2).
pub fn memory_cgroup(proc_cgroup: &str) -> Option<&str> {
    let v1 = proc_cgroup.lines().find_map(|l| {
        let (_, rest) = l.split_once(':')?;
        let (controllers, path) = rest.split_once(':')?;
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then_some(path)
    });
    v1.or_else(|| proc_cgroup.lines().find_map(|l| l.strip_prefix("0::")))
}

/// Write `NAME PID CGROUP` for each process into the run directory, so a run shows which
/// memory budget its server (and daemon) ran in. Best effort: a note, not a result.
fn record_cgroups<'a>(run_dir: &Path, procs: impl Iterator<Item = (&'a str, u32)>) {
    let text: String = procs
        .map(|(name, pid)| {
            let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            let path = memory_cgroup(&cg).unwrap_or("?");
            format!("{name} {pid} {path}\n")
        })
        .collect();
    if let Err(e) = std::fs::write(run_dir.join(CGROUPS_FILE), text) {
        tracing::debug!("{}: {e}", run_dir.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_cgroup_is_read_from_v1_and_v2_listings() {
        let v1 = "9:name=systemd:/\n4:memory:/x/vodkit-bench-7\n1:cpu,cpuacct:/\n0::/\n";
        assert_eq!(memory_cgroup(v1), Some("/x/vodkit-bench-7"));
        assert_eq!(
            memory_cgroup("0::/user.slice/vodkit-bench-7\n"),
            Some("/user.slice/vodkit-bench-7")
        );
        assert_eq!(memory_cgroup("3:cpu:/\n"), None);
    }
}
