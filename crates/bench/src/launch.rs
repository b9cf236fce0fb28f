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

/// A server under test with what the run arranged around it: for HTTPS, `inner`'s URL
/// with the `https` scheme and the CA the load generator must trust; for signed URLs, the
/// secret it signs with; with the device's queue settings changed (`+readahead`), the
/// previous settings, which come back when it stops.
struct Arranged {
    inner: Box<dyn Running>,
    ca: Option<PathBuf>,
    secret: Option<vodkit_securelink::Secret>,
    applied: Option<readahead::Applied>,
}

/// `inner` with what its clients need and `applied` (if any) restored when it stops (as
/// it is when there is none of these).
fn arranged(
    inner: Box<dyn Running>,
    ca: Option<PathBuf>,
    secret: Option<vodkit_securelink::Secret>,
    applied: Option<readahead::Applied>,
) -> Box<dyn Running> {
    if ca.is_none() && secret.is_none() && applied.is_none() {
        return inner;
    }
    Box::new(Arranged {
        inner,
        ca,
        secret,
        applied,
    })
}

impl Running for Arranged {
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
    fn balancer_pids(&self) -> Vec<u32> {
        self.inner.balancer_pids()
    }
    fn prefetch_series(&self) -> Vec<(f64, u64)> {
        self.inner.prefetch_series()
    }
    fn tls_ca(&self) -> Option<PathBuf> {
        self.ca.clone().or_else(|| self.inner.tls_ca())
    }
    fn url_secret(&self) -> Option<vodkit_securelink::Secret> {
        self.secret.clone().or_else(|| self.inner.url_secret())
    }
    fn notes(&self) -> Vec<String> {
        let mut notes = self.inner.notes();
        notes.extend(self.applied.as_ref().map(readahead::Applied::describe));
        notes
    }
    fn set_clock_rate(&self, rate: f64) -> Result<bool, String> {
        self.inner.set_clock_rate(rate)
    }
    fn failover(&self) -> Option<crate::failover::Kill> {
        self.inner.failover()
    }
    fn engine_window(
        &self,
        window: (std::time::SystemTime, std::time::SystemTime),
    ) -> Option<crate::point::EngineFigures> {
        self.inner.engine_window(window)
    }
    fn stop(self: Box<Self>) -> Result<Vec<String>, String> {
        let lines = self.inner.stop()?;
        if let Some(applied) = self.applied {
            applied.restore()?;
        }
        Ok(lines)
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
    /// The memory budget and CPU quota each origin of a cluster entry gets for itself (the
    /// run's `--memory` and `--server-cpus`): every origin runs in its own cgroups, like a
    /// machine of its own. `None`: origins share the run's budget (`budget`).
    pub origin_budget: Option<(Option<u64>, Option<f64>)>,
    /// The root each origin of a cluster entry serves, in origin order: each on a drive of
    /// its own where the testbed has one per origin; origins past the list serve `root`.
    pub origin_roots: Vec<PathBuf>,
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
            origin_budget: None,
            origin_roots: Vec::new(),
            starts: 0,
        }
    }

    /// A cluster entry: its origins (each this entry's server, in its own budget when
    /// [`LocalLauncher::origin_budget`] says so), then the balancer in front of them on a
    /// loopback port; the load reaches only the balancer.
    fn start_cluster(
        &mut self,
        sut: &Sut,
        shape: crate::sut::ClusterSut,
    ) -> Result<Box<dyn Running>, StartError> {
        use vodkit_peers::cluster::{self, launch as lb, BalancerSpec};
        let run_dir = self.next_run_dir(sut);
        let mut cluster = ClusterRunning {
            balancer: None,
            origins: Vec::new(),
            budgets: Vec::new(),
            stats: None,
            engines: std::sync::Mutex::new(Vec::new()),
            live_from: shape.origins - shape.live,
            kill: None,
        };
        for k in 0..shape.origins {
            let budget = match self.origin_budget {
                Some((memory, cpus)) => crate::system::Budget::create(memory, cpus)
                    .map_err(|e| StartError::Failed(format!("origin {}: {e}", k + 1)))?,
                None => None,
            };
            let own = budget.as_ref().and_then(|b| b.wrap());
            let swapped = own.is_some();
            let shared = match own {
                Some(w) => self.budget.replace(w),
                None => None,
            };
            let origin = sut.origin(&format!("{}-{}", sut.label, cluster::origin_name(k)));
            // Where the origin's access log will be (every server writes `access.log` in
            // its run directory).
            let log = self.run_dir_of(self.starts + 1, &origin).join("access.log");
            let own_root = self.origin_roots.get(k).cloned();
            let shared_root = own_root.map(|r| std::mem::replace(&mut self.root, r));
            let started = self.start(&origin);
            if let Some(r) = shared_root {
                self.root = r;
            }
            if swapped {
                self.budget = shared;
            }
            // On an error `cluster` drops, stopping the origins already started.
            let started = started?;
            if shape.failover && k == 0 {
                if started.pids().is_empty() {
                    return Err(StartError::Unavailable(
                        "`:failover` kills an origin's processes, and this run's origins run inside the bench".into(),
                    ));
                }
                let pids = started.pids();
                cluster.kill = Some(crate::failover::Kill::new(
                    cluster::origin_name(k),
                    std::sync::Arc::new(move || {
                        crate::system::kill_trees(&pids);
                    }),
                    log,
                ));
            }
            cluster.origins.push(started);
            cluster.budgets.extend(budget);
        }
        let list: Vec<String> = cluster
            .origins
            .iter()
            .map(|o| {
                let url = o.base_url();
                url.strip_prefix("http://")
                    .unwrap_or(&url)
                    .trim_end_matches('/')
                    .to_string()
            })
            .collect();
        let apart = shape.origins - shape.live;
        let origins = cluster::parse_origins(&list[..apart].join(","))
            .map_err(|e| StartError::Failed(format!("the cluster's origins: {e}")))?;
        let port = vodkit_peers::free_port()
            .map_err(|e| StartError::Failed(format!("a port for the balancer: {e}")))?;
        let mut spec = BalancerSpec::new(
            origins,
            shape.route,
            std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        );
        spec.balance_factor = shape.balance_factor;
        if shape.live > 0 {
            let live = cluster::parse_origins(&list[apart..].join(","))
                .map_err(|e| StartError::Failed(format!("the cluster's live origins: {e}")))?;
            let prefix = self.live.as_ref().map_or("/live/", |o| o.prefix.as_str());
            spec.split_live(prefix, live).map_err(StartError::Failed)?;
        }
        let dir = run_dir.join("balancer");
        let process =
            lb::start(shape.balancer, &spec, &dir, &self.probe_path).map_err(peer_error)?;
        record_cgroups(
            &run_dir,
            [(process.name.as_str(), process.pid())].into_iter(),
        );
        if shape.balancer == lb::Balancer::Haproxy {
            cluster.stats = Some(vodkit_peers::cluster::haproxy::stats_socket(&dir));
        }
        cluster.balancer = Some(process);
        Ok(Box::new(cluster))
    }

    fn next_run_dir(&mut self, sut: &Sut) -> PathBuf {
        self.starts += 1;
        self.run_dir_of(self.starts, sut)
    }

    /// The run directory of the `start`-th server started, `sut`.
    fn run_dir_of(&self, start: u32, sut: &Sut) -> PathBuf {
        let safe = file_name_part(&sut.label, &['-']);
        self.run_base.join(format!("{start:03}-{safe}"))
    }
}

/// `label` as part of a file name: every character but ASCII letters, digits and those in
/// `keep` written as `_`.
pub(crate) fn file_name_part(label: &str, keep: &[char]) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || keep.contains(&c);
    label
        .chars()
        .map(|c| if safe(c) { c } else { '_' })
        .collect()
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

/// A cluster entry running: its origins and the balancer in front of them.
struct ClusterRunning {
    balancer: Option<ServerProcess>,
    origins: Vec<Box<dyn Running>>,
    /// Each origin's own memory budget and CPU quota (removed after the origins stop).
    budgets: Vec<crate::system::Budget>,
    /// HAProxy's stats socket, for the per-origin figures.
    stats: Option<PathBuf>,
    /// Each origin's prefetch-engine figures over the last judged window (vodkit origins).
    engines: std::sync::Mutex<Vec<Option<crate::point::EngineFigures>>>,
    /// The first live origin's index (`origins.len()`: none serves only live paths).
    live_from: usize,
    /// `:failover`: the first origin, killed in the middle of the point.
    kill: Option<crate::failover::Kill>,
}

impl Running for ClusterRunning {
    fn base_url(&self) -> String {
        match &self.balancer {
            Some(b) => format!("http://127.0.0.1:{}", b.port),
            None => String::new(),
        }
    }
    fn pids(&self) -> Vec<u32> {
        self.origins.iter().flat_map(|o| o.pids()).collect()
    }
    fn balancer_pids(&self) -> Vec<u32> {
        self.balancer.iter().map(|b| b.pid()).collect()
    }
    fn failover(&self) -> Option<crate::failover::Kill> {
        self.kill.clone()
    }
    fn engine_window(
        &self,
        window: (std::time::SystemTime, std::time::SystemTime),
    ) -> Option<crate::point::EngineFigures> {
        // Kept per origin for the notes; the cluster as a whole has no single engine.
        let figures: Vec<_> = self
            .origins
            .iter()
            .map(|o| o.engine_window(window))
            .collect();
        *self.engines.lock().unwrap_or_else(|p| p.into_inner()) = figures;
        None
    }
    fn notes(&self) -> Vec<String> {
        let mut notes: Vec<String> = self.origins.iter().flat_map(|o| o.notes()).collect();
        let engines = self.engines.lock().unwrap_or_else(|p| p.into_inner());
        let hits: Vec<String> = engines
            .iter()
            .enumerate()
            .filter_map(|(k, f)| {
                let f = f.as_ref()?;
                let name = match k.checked_sub(self.live_from) {
                    Some(live) => vodkit_peers::cluster::live_origin_name(live),
                    None => vodkit_peers::cluster::origin_name(k),
                };
                Some(format!(
                    "{name} {:.0}% of bytes from memory, reads of {:.0} KiB",
                    100.0 * f.hit_fraction,
                    f.mean_read_bytes / 1024.0
                ))
            })
            .collect();
        if !hits.is_empty() {
            notes.push(format!(
                "origins' engines (steady state): {}",
                hits.join("; ")
            ));
        }
        drop(engines);
        // Each origin's own budget, read as the point ends (the run's cgroup holds none of
        // them): is its memory full, and how much of it is page cache.
        let memory: Vec<String> = self
            .budgets
            .iter()
            .enumerate()
            .filter_map(|(k, b)| {
                let (now, limit) = b.memory_now()?;
                Some(format!(
                    "{} {} ({} page cache) of {}",
                    vodkit_peers::cluster::origin_name(k),
                    bytesize::ByteSize(now.usage_bytes),
                    bytesize::ByteSize(now.cache_bytes),
                    bytesize::ByteSize(limit)
                ))
            })
            .collect();
        if !memory.is_empty() {
            notes.push(format!("origins' memory at the end: {}", memory.join("; ")));
        }
        let stats = self
            .stats
            .as_deref()
            .map(vodkit_peers::cluster::launch::haproxy_stats);
        match stats {
            Some(Ok(stats)) => notes.push(origin_balance(&stats)),
            Some(Err(e)) => notes.push(format!("per-origin figures unavailable: {e}")),
            None => {}
        }
        notes
    }
    fn set_clock_rate(&self, rate: f64) -> Result<bool, String> {
        let mut any = false;
        for o in &self.origins {
            any |= o.set_clock_rate(rate)?;
        }
        Ok(any)
    }
    fn stop(mut self: Box<Self>) -> Result<Vec<String>, String> {
        let mut lines = Vec::new();
        if let Some(b) = self.balancer.take() {
            lines.extend(b.stop(Duration::from_secs(15)).map_err(|e| e.to_string())?);
        }
        let killed = self.kill.as_ref().and_then(|k| k.killed_at()).is_some();
        for (k, o) in std::mem::take(&mut self.origins).into_iter().enumerate() {
            match o.stop() {
                // The origin `:failover` killed died on purpose, not of its budget.
                Ok(l) if killed && k == 0 => lines.extend(l.into_iter().map(|line| {
                    if line.contains(crate::child::EXITED_DURING_RUN) {
                        format!(
                            "{}: killed by the bench in the middle of the point (`:failover`)",
                            vodkit_peers::cluster::origin_name(0)
                        )
                    } else {
                        line
                    }
                })),
                Ok(l) => lines.extend(l),
                // The killed origin cannot stop cleanly; that is the point.
                Err(_) if killed && k == 0 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(lines)
    }
}

impl Drop for ClusterRunning {
    fn drop(&mut self) {
        // Origins before their budgets' cgroups are removed.
        self.balancer.take();
        for o in std::mem::take(&mut self.origins) {
            let _ = o.stop();
        }
    }
}

/// The report note on how the balancer spread the load: each origin's share of the
/// sessions and bytes, and the busiest origin's bytes over the mean (1.00: even).
pub fn origin_balance(stats: &[vodkit_peers::cluster::launch::OriginStat]) -> String {
    let sessions: u64 = stats.iter().map(|o| o.sessions).sum();
    let bytes: u64 = stats.iter().map(|o| o.bytes_out).sum();
    let share = |part: u64, whole: u64| {
        if whole == 0 {
            0.0
        } else {
            100.0 * part as f64 / whole as f64
        }
    };
    let parts: Vec<String> = stats
        .iter()
        .map(|o| {
            format!(
                "{} {} sessions ({:.0}%), {:.1} MB ({:.0}%), {}",
                o.name,
                o.sessions,
                share(o.sessions, sessions),
                o.bytes_out as f64 / 1e6,
                share(o.bytes_out, bytes),
                o.status
            )
        })
        .collect();
    let mean = bytes as f64 / stats.len().max(1) as f64;
    let max = stats.iter().map(|o| o.bytes_out).max().unwrap_or(0) as f64;
    let imbalance = if mean > 0.0 { max / mean } else { 0.0 };
    format!(
        "origins (from HAProxy): {}; busiest origin {imbalance:.2}x the mean bytes",
        parts.join("; ")
    )
}

impl Launcher for LocalLauncher {
    fn available(&self, sut: &Sut) -> Result<(), String> {
        if let Some(shape) = sut.cluster {
            let missing = match shape.balancer {
                vodkit_peers::cluster::launch::Balancer::Haproxy => {
                    vodkit_peers::cluster::launch::haproxy_program().is_none()
                }
                vodkit_peers::cluster::launch::Balancer::Nginx => peers::nginx_program().is_none(),
            };
            if missing {
                return Err(format!(
                    "{} is not installed (Debian: apt-get install {0})",
                    shape.balancer.as_str()
                ));
            }
            return self.available(&sut.origin(&sut.label));
        }
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
        if let Some(shape) = sut.cluster {
            return self.start_cluster(sut, shape);
        }
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
            (Base::Nginx, t) => {
                peers::start_nginx_with(&setup, t.as_ref(), &wrap).map_err(peer_error)?
            }
            (Base::Apache, t) => {
                peers::start_apache_with(&setup, t.as_ref(), &wrap).map_err(peer_error)?
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
                return Ok(arranged(inner, ca, signing.map(|s| s.secret), ra));
            }
        };
        record_cgroups(
            &run_dir,
            [(process.name.as_str(), process.pid())]
                .into_iter()
                .chain(daemon.as_ref().map(|d| ("prefetchd", d.pid()))),
        );
        let peer: Box<dyn Running> = Box::new(PeerRunning { process, daemon });
        Ok(arranged(
            peer,
            tls.map(|t| t.ca),
            signing.map(|s| s.secret),
            ra,
        ))
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
    fn the_balance_note_shows_each_origins_share() {
        use vodkit_peers::cluster::launch::OriginStat;
        let stat = |name: &str, sessions, mb: u64| OriginStat {
            name: name.into(),
            status: "UP".into(),
            sessions,
            bytes_out: mb * 1_000_000,
        };
        let note = origin_balance(&[stat("o1", 30, 300), stat("o2", 10, 100)]);
        assert!(
            note.contains("o1 30 sessions (75%), 300.0 MB (75%), UP"),
            "{note}"
        );
        assert!(note.contains("o2 10 sessions (25%)"), "{note}");
        assert!(
            note.ends_with("busiest origin 1.50x the mean bytes"),
            "{note}"
        );
        assert!(origin_balance(&[stat("o1", 0, 0)]).contains("0.00x"));
    }

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
