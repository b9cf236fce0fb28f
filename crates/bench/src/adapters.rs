//! Thin adapters from the bench's traits to the other vodkit crates: the load generator
//! (`vodkit-load`) as the [`LoadDriver`], the vodkit origin (`vodkit-server`) started
//! in-process or as a `vodkit serve` child process under the memory budget, and the
//! prefetch daemon of a `+preload` server (`vodkit prefetchd` as a child under the same
//! budget, with the preload library from `vodkit-preload`).

pub use crate::child::{built_vodkit, set_clock_rate, ENV_VODKIT};
use crate::child::{memory_arg, vodkit_error_line, EXITED_DURING_RUN};
use crate::experiment::{LoadDriver, LoadOutcome, Running, StartError};
use crate::launch::{VodkitLaunch, VodkitStarter};
use crate::point::{ClientMetrics, EngineCounters, EngineFigures};
pub use crate::preload::{PreloadDaemon, PreloadKit, DAEMON_METRICS, DAEMON_PROMETHEUS};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use vodkit_peers::process::{free_port, http_get, ServerProcess, StartSpec};
use vodkit_prefetch::PolicySpec;
use vodkit_workload::model::{Request, Session, WorkloadMeta};
use vodkit_workload::WorkloadDir;

/// How long the load's signed URLs stay valid (`+sign`): longer than any run.
const SIGN_TTL_S: u64 = 24 * 3600;

/// Replays a generated workload directory (sessions.jsonl, workload.json, warmup.jsonl).
pub struct WorkloadLoad {
    pub sessions: Vec<Session>,
    pub meta: Option<WorkloadMeta>,
    pub warmup: Vec<Request>,
    /// Cap on each point's run time (None: the whole session list).
    pub max_duration: Option<Duration>,
    pub max_sessions: Option<usize>,
    /// Show the load generator's live status line.
    pub live_status: bool,
    /// How each point starts (`Auto` unless a test asks for a cold start).
    pub warm_start: vodkit_load::WarmStart,
    /// The CA an `https://` server's certificate chains to (set per server by the
    /// runner); `None` with an https URL (a `url:` server): any certificate is accepted.
    pub tls_ca: Option<PathBuf>,
    /// The secret a `+sign` server checks URLs with (set per server by the runner); the
    /// load signs every URL with it. `None`: unsigned.
    pub url_secret: Option<vodkit_securelink::Secret>,
    /// The viewers speak HTTP/2 to the next runs' server (`+h2`, set per server by the
    /// runner).
    pub http2: bool,
    /// The live source for workloads with live viewers (each point publishes its streams
    /// to the server under test); `None` refuses such workloads.
    pub live_feed: Option<crate::live::PushFeed>,
    /// Where servers accept the live streams.
    pub live_origin: crate::live::LiveOrigin,
    /// Probe sessions per point (`vodkit load --probe`); the point is judged on the
    /// probes' quality where the criterion looks at quality.
    pub probes: Option<vodkit_load::probe::Probes>,
    /// Sessions play their titles as adaptive players (`vodkit bench --player`).
    pub players: Option<vodkit_load::player::PlayerConfig>,
    /// Ends a point's run early when the bench is interrupted ([`crate::interrupt`]).
    pub stop: vodkit_load::CancellationToken,
    /// End each point's run once its failure under this criterion is certain
    /// ([`crate::early`]); `None`: every point runs its whole window.
    pub early_stop: Option<crate::search::Criterion>,
    /// The schedule seconds of history the last fast-forward played: the next run resumes
    /// after them (taken by it).
    resume_after: Option<f64>,
    /// What to do at the middle of each run's judged part (a cluster origin's kill; set per
    /// server by the runner), with failed requests retried once.
    kill: Option<std::sync::Arc<dyn Fn() + Send + Sync>>,
}

impl WorkloadLoad {
    /// Read the workload directory written by `vodkit workload new`.
    pub fn open(dir: &Path) -> Result<WorkloadLoad, String> {
        let dir = WorkloadDir::open(dir).map_err(|e| e.to_string())?;
        let sessions = dir.sessions().map_err(|e| e.to_string())?;
        let meta = dir.meta().map_err(|e| e.to_string())?;
        let warmup = dir
            .warmup(meta.as_ref().map(|m| m.measurement.warmup_chunks))
            .map_err(|e| e.to_string())?;
        Ok(WorkloadLoad {
            meta,
            warmup,
            ..WorkloadLoad::of(sessions)
        })
    }

    /// `sessions` with no workload metadata, no warm-up and no caps.
    pub fn of(sessions: Vec<Session>) -> WorkloadLoad {
        WorkloadLoad {
            sessions,
            meta: None,
            warmup: Vec::new(),
            max_duration: None,
            max_sessions: None,
            live_status: false,
            warm_start: vodkit_load::WarmStart::Auto,
            tls_ca: None,
            url_secret: None,
            http2: false,
            live_feed: None,
            live_origin: crate::live::LiveOrigin::bench(),
            probes: None,
            players: None,
            stop: vodkit_load::CancellationToken::new(),
            early_stop: None,
            resume_after: None,
            kill: None,
        }
    }

    /// The session list a run at `rate` uses after a history of `history_s` schedule
    /// seconds: long enough for the history and the point (repeated where it is not).
    fn sessions_after(&self, rate: f64, history_s: f64) -> Vec<Session> {
        let point_s = self.max_duration.map_or_else(
            || self.sessions.iter().map(|s| s.gap).sum::<f64>() / rate,
            |d| d.as_secs_f64(),
        );
        crate::warmup::cover(&self.sessions, rate, history_s + point_s)
    }

    /// The load configuration of a run at `rate` over `sessions` (no TLS yet).
    fn config(
        &self,
        target: vodkit_load::Target,
        sessions: Vec<Session>,
        rate: f64,
    ) -> vodkit_load::LoadConfig {
        let mut config = vodkit_load::LoadConfig::new(target, sessions, rate);
        if let Some(meta) = &self.meta {
            config.apply_meta(meta);
        }
        if self.http2 {
            config.http = vodkit_load::HttpVersion::Http2;
        }
        config.sign = self
            .url_secret
            .clone()
            .map(|secret| vodkit_securelink::Signer {
                secret,
                form: vodkit_securelink::Form::Md5,
                ttl_s: SIGN_TTL_S,
            });
        config
    }

    /// The TLS client for `target` (an `https://` server), with the run's CA.
    fn tls_client(
        &self,
        target: &vodkit_load::Target,
    ) -> Result<Option<vodkit_load::TlsClient>, String> {
        if !target.tls {
            return Ok(None);
        }
        let trust = match &self.tls_ca {
            Some(ca) => vodkit_load::Trust::Ca(ca.clone()),
            None => vodkit_load::Trust::Insecure,
        };
        vodkit_load::TlsClient::new(trust, &target.name)
            .map(Some)
            .map_err(|e| e.to_string())
    }

    /// Play every session as an adaptive player. The warm-up list names the synthetic
    /// file set's paths, which a media set does not have, so it is dropped (the players'
    /// manifests and first segments warm the server instead). A player chooses its own
    /// requests from the first segment on, so the run starts cold (no `--warm-start`).
    pub fn set_players(&mut self, config: vodkit_load::player::PlayerConfig) {
        self.players = Some(config);
        self.warmup.clear();
        self.warm_start = vodkit_load::WarmStart::Off;
    }

    /// The first request path of the workload (used to probe server readiness).
    pub fn probe_path(&self) -> Option<String> {
        self.sessions
            .iter()
            .flat_map(|s| s.requests.first())
            .map(|r| r.path.clone())
            .next()
    }
}

/// Convert the load generator's results into the bench's client figures.
pub fn client_metrics(r: &vodkit_load::Results) -> ClientMetrics {
    let errors: u64 = r.requests.errors.values().sum();
    let mut qos = serde_json::json!({
        "acceptable_sessions_fraction": r.qos.acceptable_sessions_fraction,
        "rebuffer_ratio": r.qos.rebuffer_ratio,
        "startup_delay_p90_ms": r.qos.startup_delay_ms.p90,
        "ttlb_p99_ms": r.latency_ms.ttlb.p99,
    });
    if let Some(v) = &r.qos.live {
        qos["live"] = serde_json::json!({
            "viewers": v.sessions,
            "unstalled_viewers": v.unstalled_sessions,
            "stalls": v.stalls,
            "latency_to_edge_s_p50": v.latency_to_edge_s_p50,
            "skipped_segments": v.skipped_segments,
        });
    }
    if let Some(a) = &r.qos.abr {
        qos["abr"] = serde_json::json!({
            "players": a.sessions,
            "mean_bitrate_kbps": a.mean_bitrate_kbps,
            "switches": a.switches,
            "stalls": a.stalls,
            "stall_s": a.stall_s,
            "unstalled_players": a.unstalled_sessions,
            "kept_bitrate_players": a.kept_bitrate_sessions,
            "reference_kbps": a.reference_kbps,
            "aborted_segments": a.aborted_segments,
            "seeks": a.seeks,
            "startup_ms_p50": a.startup_ms.p50,
            "startup_ms_p90": a.startup_ms.p90,
        });
    }
    // Judge quality on the probes where the run has them (seed 004 §3.1): the share of
    // sessions that completed and played without a stall (players: and kept their bit
    // rate), of those the point judged.
    let judged = r.probes.as_ref().map_or(&r.sessions, |p| &p.sessions);
    if let Some(p) = &r.probes {
        qos["probes"] = serde_json::json!({
            "sessions": p.sessions.started,
            "failed": p.sessions.failed,
            "acceptable_sessions_fraction": p.qos.acceptable_sessions_fraction,
            "startup_delay_p90_ms": p.qos.startup_delay_ms.p90,
            "rebuffer_events": p.qos.rebuffer_events,
        });
    }
    // Sessions the end of the point cut short with nothing against them are not judged.
    let judged_n = judged.started.saturating_sub(judged.cut_clean);
    let acceptable_fraction = (judged_n > 0).then(|| judged.played_clean as f64 / judged_n as f64);
    ClientMetrics {
        sessions: r.sessions.completed + r.sessions.failed,
        failed_sessions: r.sessions.failed,
        failure_fraction: r.sessions.failure_fraction,
        requests: r.requests.completed + r.requests.timed_out + errors,
        timed_out_requests: r.requests.timed_out,
        throughput_mb_s: r.throughput_mb_s,
        steady_s: (r.run.steady_window_s[1] - r.run.steady_window_s[0]).max(0.0),
        refused_sessions: r.sessions.refused,
        goodput_fraction: r.sessions.goodput_fraction,
        refusal_p99_ms: r.latency_ms.refusal.p99,
        qos: Some(qos),
        acceptable_fraction,
        lag_p95_s: (r.sessions.lag_sessions > 0).then_some(r.sessions.lag_p95_s),
        stopped_early: None,
    }
}

impl LoadDriver for WorkloadLoad {
    fn set_tls_ca(&mut self, ca: Option<PathBuf>) {
        self.tls_ca = ca;
    }

    fn set_url_secret(&mut self, secret: Option<vodkit_securelink::Secret>) {
        self.url_secret = secret;
    }

    fn set_kill(&mut self, kill: Option<std::sync::Arc<dyn Fn() + Send + Sync>>) {
        self.kill = kill;
    }

    fn set_http2(&mut self, on: bool) {
        self.http2 = on;
    }

    fn fast_forward(
        &mut self,
        base_url: &str,
        rate: f64,
        ff: crate::warmup::FastForward,
        budget: Option<u64>,
    ) -> Result<crate::warmup::History, String> {
        self.resume_after = None;
        if self.players.is_some() {
            return Err("adaptive players start their titles from the beginning and cannot resume mid-session".into());
        }
        if crate::live::LiveDemand::of(&self.sessions).is_some() {
            return Err("the workload has live viewers, whose live source is not sped up".into());
        }
        let plan = crate::warmup::plan(ff, &self.sessions, rate, budget);
        let target = vodkit_load::Target::parse(base_url, false).map_err(|e| e.to_string())?;
        let sessions = self.sessions_after(rate, plan.window_s);
        let fast = crate::warmup::sped_up(&sessions, ff.speed);
        let mut config = self.config(target.clone(), fast, rate * ff.speed);
        config.tls = self.tls_client(&target)?;
        for link in config.links.values_mut() {
            *link = crate::warmup::sped_up_link(*link, ff.speed);
        }
        config.duration = Some(crate::warmup::run_cap(plan.window_s, ff.speed));
        config.progress = self.live_status;
        config.source = format!(
            "vodkit bench fast-forward: {:.0} s of history at {rate} sessions/s, {}× faster",
            plan.window_s, ff.speed
        );
        let started = std::time::Instant::now();
        let run = vodkit_load::run(config, self.stop.clone()).map_err(|e| e.to_string())?;
        let r = &run.results;
        let delivered_mb: f64 = r.timeseries.iter().map(|s| s.mb_per_s).sum();
        let asked_mb = plan.demand_bytes_per_s * plan.window_s / 1e6;
        self.resume_after = Some(plan.window_s);
        Ok(crate::warmup::History {
            speed: ff.speed,
            window_s: plan.window_s,
            wall_s: started.elapsed().as_secs_f64(),
            sessions: r.run.sessions_started,
            delivered_mb,
            delivered_fraction: (asked_mb > 0.0).then(|| delivered_mb / asked_mb),
            server_clock: false,
            drain_s: None,
        })
    }

    fn run(&mut self, base_url: &str, rate: f64, _repeat: u32) -> Result<LoadOutcome, String> {
        let target = vodkit_load::Target::parse(base_url, false).map_err(|e| e.to_string())?;
        let resume = self.resume_after.take();
        let sessions = match resume {
            Some(h) => self.sessions_after(rate, h),
            None => self.sessions.clone(),
        };
        let mut config = self.config(target.clone(), sessions, rate);
        config.tls = self.tls_client(&target)?;
        config.duration = self.max_duration;
        match resume {
            // After a history, the point resumes the viewers it left playing; the history
            // replaced the warm-up requests.
            Some(h) => {
                config.warm_start = vodkit_load::WarmStart::Seconds(h);
                config.max_sessions = self.max_sessions.map(|n| {
                    n + crate::warmup::resumed(&config.sessions, rate, h)
                        .first()
                        .map_or(0, |&(i, _)| i)
                });
            }
            None => {
                config.warmup = self.warmup.clone();
                // Every point is measured at its rate's steady concurrency from its first
                // second: a cold start spends the longest session below the load it is
                // meant to measure.
                config.warm_start = self.warm_start;
                config.max_sessions = self.max_sessions;
            }
        }
        // A point of fixed length whose list ends early runs its tail below the rate.
        let ran_out = config.duration.and_then(|d| {
            let last = config.schedule().last().copied()? - config.warm_horizon();
            crate::warmup::ran_out_note(last, d.as_secs_f64(), rate)
        });
        // The judged part runs from when the run settles to its end.
        let kill_at_s = self.kill.as_ref().map(|action| {
            let end = config.duration.map_or_else(
                || config.span_s() - config.warm_horizon(),
                |d| d.as_secs_f64(),
            );
            let at_s = crate::failover::kill_at_s(config.settle_s(), end);
            config.retry = true;
            config.timed.push(vodkit_load::Timed {
                at_s,
                action: action.clone(),
            });
            at_s
        });
        config.progress = self.live_status;
        config.source = format!("vodkit bench at {rate} sessions/s");
        let stopped: Arc<Mutex<Option<crate::early::EarlyStop>>> = Arc::default();
        // A point with a kill runs to its end: its failover figures cover the whole window.
        let early_stop = self.early_stop.filter(|_| self.kill.is_none());
        config.watch = early_stop.map(|criterion| {
            let stopped = stopped.clone();
            vodkit_load::Watch {
                lag_limit_s: crate::early::lag_limit_s(&criterion),
                decide: Arc::new(move |t: &vodkit_load::Tally| {
                    let Some(why) = crate::early::certain_failure(&criterion, t) else {
                        return false;
                    };
                    if let Ok(mut s) = stopped.lock() {
                        s.get_or_insert(crate::early::EarlyStop { at_s: t.t_s, why });
                    }
                    true
                }),
            }
        });
        config.probes = self.probes;
        config.player = self.players.clone();
        let feed = match (
            crate::live::LiveDemand::of(&self.sessions),
            self.live_feed.as_ref(),
        ) {
            (None, _) => None,
            (Some(_), None) => {
                return Err("the workload has live viewers but this run has no live source".into())
            }
            (Some(d), Some(feed)) => {
                let streams = d.streams(rate);
                config.live.prefix = self.live_origin.prefix.clone();
                config.live.streams = Some(streams);
                Some(
                    feed.start(base_url, &self.live_origin, streams, d.bitrate_kbps)
                        .map_err(|e| format!("live source: {e}"))?,
                )
            }
        };
        let run = vodkit_load::run(config, self.stop.clone()).map_err(|e| e.to_string());
        let mut notes = feed.map(|f| f.stop()).unwrap_or_default();
        notes.extend(ran_out);
        let run = run?;
        let end = SystemTime::now();
        let r = &run.results;
        // The run's clock starts after warm-up; place the window on the wall clock from the end.
        let t0 = end - Duration::from_secs_f64(r.run.elapsed_s.max(0.0));
        // The system figures start when the run has settled, as the judged sessions do.
        let [a, b] = r.run.steady_window_s;
        let a = a.max(r.run.settle_s);
        let steady = (b > a).then(|| {
            (
                t0 + Duration::from_secs_f64(a.max(0.0)),
                t0 + Duration::from_secs_f64(b),
            )
        });
        let samples: Vec<(u64, f64)> = r.timeseries.iter().map(|s| (s.t_s, s.mb_per_s)).collect();
        let mut client = client_metrics(r);
        client.stopped_early = stopped.lock().ok().and_then(|mut s| s.take());
        Ok(LoadOutcome {
            client,
            steady,
            notes,
            halves_mb_s: crate::warmup::delivered_halves(&samples, a, b),
            kill_at_s,
            sessions: if kill_at_s.is_some() {
                run.sessions.iter().map(crate::failover::fate_of).collect()
            } else {
                Vec::new()
            },
            retried_requests: r.run.retried_requests,
            recovered_requests: r.run.recovered_requests,
        })
    }
}

/// Runs the vodkit origin in this process (no memory budget possible; used by tests).
pub struct InProcessVodkit {
    runtime: tokio::runtime::Runtime,
}

impl InProcessVodkit {
    pub fn new() -> std::io::Result<InProcessVodkit> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        Ok(InProcessVodkit { runtime })
    }
}

struct InProcessRunning {
    handle: Option<vodkit_server::ServerHandle>,
    url: String,
    runtime: tokio::runtime::Handle,
}

impl Running for InProcessRunning {
    fn base_url(&self) -> String {
        self.url.clone()
    }
    fn stop(mut self: Box<Self>) -> Result<Vec<String>, String> {
        if let Some(h) = self.handle.take() {
            self.runtime.block_on(h.shutdown());
        }
        Ok(Vec::new())
    }
}

impl VodkitStarter for InProcessVodkit {
    fn start(&mut self, launch: &VodkitLaunch<'_>) -> Result<Box<dyn Running>, StartError> {
        if launch.budget.is_some() {
            return Err(StartError::Failed(
                "an in-process vodkit server cannot run under a memory budget or CPU quota".into(),
            ));
        }
        if let Some(exe) = launch.exe {
            return Err(StartError::Failed(format!(
                "+bin:{}: another build runs as a child process, and this run serves vodkit in-process (run `vodkit bench`)",
                exe.display()
            )));
        }
        let mut config = vodkit_server::ServerConfig::new(launch.root);
        config.listen = "127.0.0.1:0".parse().expect("literal address");
        config.io = vodkit_server::IoSettings {
            mode: launch.io,
            prefetch: launch.policy.clone(),
            memory: launch.memory.unwrap_or_default(),
            large_folios: launch
                .large_folios
                .unwrap_or(vodkit_server::IoSettings::default().large_folios),
            order: launch.order.unwrap_or_default(),
            ..Default::default()
        };
        config.admission = launch.admission.unwrap_or(config.admission);
        config.ingest = match launch.live {
            Some(o) => {
                let mut i = vodkit_server::live::IngestConfig::new(&o.prefix, &o.token);
                i.spill = Some(vodkit_server::live::SpillConfig {
                    dir: spill_dir(launch.root, o)?,
                    max_bytes: 8 << 30,
                });
                Some(i)
            }
            None => None,
        };
        config.access_log = Some(launch.run_dir.join("access.log"));
        config.idle_timeout = Duration::from_secs(3600);
        config.tls = launch
            .tls
            .map(|t| vodkit_server::tls::TlsSettings::new(&t.cert, &t.key));
        config.http2 = launch.http2.then(vodkit_server::H2Settings::default);
        config.secure_link = launch.signing.map(|s| vodkit_server::SecureLink {
            secret: s.secret.clone(),
            prefix: "/".into(),
        });
        let handle = self
            .runtime
            .block_on(vodkit_server::Server::bind(config))
            .map_err(|e| StartError::Failed(format!("vodkit server: {e}")))?;
        let url = format!("http://{}", handle.local_addr());
        Ok(Box::new(InProcessRunning {
            handle: Some(handle),
            url,
            runtime: self.runtime.handle().clone(),
        }))
    }
}

/// The live window's spill directory: the same directory on the testbed's disk where
/// nginx and Apache write their segments (`root/PREFIX`), so every origin's live window
/// overflows to the same disk (created here; the launcher empties it before each start).
fn spill_dir(root: &Path, o: &crate::live::LiveOrigin) -> Result<PathBuf, StartError> {
    let dir = root.join(o.prefix.trim_matches('/'));
    std::fs::create_dir_all(&dir)
        .map_err(|e| StartError::Failed(format!("creating {}: {e}", dir.display())))?;
    Ok(dir)
}

/// Runs `vodkit serve` as a child process (so a memory budget can apply to it).
pub struct ChildVodkit {
    /// The vodkit binary (the CLI passes its own executable).
    pub exe: PathBuf,
    /// catalog.json for bit-rate-aware policies.
    pub catalog: Option<PathBuf>,
    /// A file of the set, requested to check readiness.
    pub probe_path: String,
}

impl VodkitStarter for ChildVodkit {
    fn start(&mut self, launch: &VodkitLaunch<'_>) -> Result<Box<dyn Running>, StartError> {
        let VodkitLaunch {
            run_dir,
            budget,
            tls,
            ..
        } = *launch;
        let port = free_port().map_err(|e| StartError::Failed(e.to_string()))?;
        let mut cmd = Command::new(launch.exe.unwrap_or(&self.exe));
        cmd.arg("serve").arg("--root").arg(launch.root);
        cmd.args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--io",
            launch.io.name(),
            "--idle-timeout",
            "3600s",
        ]);
        // The child parses its argv like any `vodkit serve`; the text is the policy's own.
        if !matches!(launch.policy, PolicySpec::None) {
            cmd.arg("--prefetch").arg(launch.policy.to_string());
        }
        if let Some(m) = launch.memory {
            cmd.args(["--memory", &memory_arg(m)]);
        }
        if let Some(a) = launch.admission {
            cmd.arg("--admission").arg(a.to_string());
        }
        if let Some(n) = launch.open_files {
            cmd.arg("--open-file-cache").arg(n.to_string());
        }
        if let Some(o) = launch.live {
            cmd.args(["--ingest", &o.prefix, "--ingest-token", &o.token]);
            let spill = spill_dir(launch.root, o)?;
            cmd.arg("--ingest-spill").arg(spill);
        }
        if let Some(c) = &self.catalog {
            cmd.arg("--catalog").arg(c);
        }
        if let Some(n) = launch.threads {
            cmd.arg("--threads").arg(n.to_string());
        }
        if let Some(on) = launch.large_folios {
            cmd.arg("--large-folios").arg(if on { "on" } else { "off" });
        }
        if let Some(o) = launch.order {
            cmd.arg("--io-order").arg(o.name());
        }
        cmd.arg("--access-log").arg(run_dir.join("access.log"));
        if let Some(s) = launch.signing {
            cmd.arg("--secure-link").arg(&s.key_file);
        }
        if let Some(t) = tls {
            cmd.arg("--tls-cert")
                .arg(&t.cert)
                .arg("--tls-key")
                .arg(&t.key);
        }
        if launch.http2 {
            cmd.arg(if tls.is_some() { "--http2" } else { "--h2c" });
        }
        // The prefetch size plot polls the admin listener's `/stats` document.
        let admin_port = free_port().map_err(|e| StartError::Failed(e.to_string()))?;
        cmd.args(["--admin", &format!("127.0.0.1:{admin_port}")]);
        let cmd = match budget {
            Some(b) => b(cmd).map_err(StartError::Failed)?,
            None => cmd,
        };
        let probe_path = match launch.signing {
            Some(s) => s.probe_path(&self.probe_path),
            None => self.probe_path.clone(),
        };
        let spec = StartSpec {
            name: "vodkit",
            port,
            run_dir,
            // vodkit logs to stderr, which the process supervision reads already.
            error_log: run_dir.join("vodkit.stdout"),
            is_error: vodkit_error_line,
            probe_path: &probe_path,
            timeout: Duration::from_secs(20),
        };
        let process = match tls {
            None => ServerProcess::start(cmd, spec),
            Some(t) => ServerProcess::start_tls(cmd, spec, t),
        }
        .map_err(|e| StartError::Failed(e.to_string()))?;
        Ok(Box::new(ChildRunning {
            process,
            stats: StatsPoller::start(admin_port, STATS_EVERY, run_dir.join("stats.jsonl")),
            admin_port,
        }))
    }
}

/// Interval between two reads of the child server's `/stats`: the engine's figures of a
/// point come from the first and last reading within its judged window.
const STATS_EVERY: Duration = Duration::from_secs(2);

struct ChildRunning {
    process: ServerProcess,
    stats: StatsPoller,
    admin_port: u16,
}

/// Reads a `vodkit serve` admin listener's `/stats` every interval on its own thread and
/// keeps the prefetch size series (the size of the highest bit-rate class the policy has
/// seen, in bytes, at the seconds since the start); every document read is also appended
/// to the run's `stats.jsonl` (`{"t": seconds, "stats": {...}}` per line), the engine's
/// and memory manager's counters over the run, for diagnosis. The engine's counters are
/// kept with the wall-clock time of each reading ([`StatsPoller::engine_window`]).
struct StatsPoller {
    stop: Arc<AtomicBool>,
    series: Arc<Mutex<Vec<(f64, u64)>>>,
    counters: Arc<Mutex<Vec<(SystemTime, EngineCounters)>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StatsPoller {
    fn start(admin_port: u16, every: Duration, log: std::path::PathBuf) -> StatsPoller {
        let stop = Arc::new(AtomicBool::new(false));
        let series = Arc::new(Mutex::new(Vec::new()));
        let counters = Arc::new(Mutex::new(Vec::new()));
        let (stop2, series2, counters2) = (stop.clone(), series.clone(), counters.clone());
        let thread = std::thread::Builder::new()
            .name("vodkit-stats".into())
            .spawn(move || {
                let started = std::time::Instant::now();
                let mut tick = 1u32;
                while !stop2.load(Ordering::Relaxed) {
                    let due = every * tick;
                    let elapsed = started.elapsed();
                    if elapsed < due {
                        std::thread::sleep((due - elapsed).min(Duration::from_millis(200)));
                        continue;
                    }
                    // A server still starting or already stopping has no point to give.
                    if let Ok((200, body)) = http_get(admin_port, "/stats") {
                        let at = SystemTime::now();
                        let stats: Option<vodkit_server::metrics::Stats> =
                            serde_json::from_slice(&body).ok();
                        if let Some(bytes) = stats.as_ref().and_then(prefetch_size) {
                            let mut s = series2.lock().unwrap_or_else(|e| e.into_inner());
                            s.push((due.as_secs_f64(), bytes));
                        }
                        if let Some(st) = &stats {
                            let mut c = counters2.lock().unwrap_or_else(|e| e.into_inner());
                            c.push((at, EngineCounters::from(&st.prefetch)));
                        }
                        append_stats(&log, due.as_secs_f64(), &body);
                    }
                    // The next tick after now: a slow answer skips ticks instead of
                    // bunching the following reads together.
                    let done = started.elapsed().as_nanos() / every.as_nanos().max(1);
                    tick = u32::try_from(done).unwrap_or(u32::MAX - 1).max(tick) + 1;
                }
            })
            .ok();
        StatsPoller {
            stop,
            series,
            counters,
            thread,
        }
    }

    /// The engine's figures between the first and the last reading within `window`;
    /// `None` when they span less than a third of it (too few readings to judge by).
    fn engine_window(&self, (from, to): (SystemTime, SystemTime)) -> Option<EngineFigures> {
        let c = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        let inside: Vec<_> = c.iter().filter(|(t, _)| *t >= from && *t <= to).collect();
        let (first, last) = (inside.first()?, inside.last()?);
        let secs = last.0.duration_since(first.0).ok()?.as_secs_f64();
        let window = to.duration_since(from).ok()?.as_secs_f64();
        if secs < window / 3.0 {
            return None;
        }
        let readings: Vec<&EngineCounters> = inside.iter().map(|(_, c)| c).collect();
        EngineFigures::over(&readings, secs)
    }

    fn series(&self) -> Vec<(f64, u64)> {
        self.series
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for StatsPoller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Appends one `/stats` document to `log` as a line; a failure to write loses only the
/// diagnosis, never the run.
fn append_stats(log: &std::path::Path, t: f64, body: &[u8]) {
    use std::io::Write as _;
    let Ok(stats) = serde_json::from_slice::<serde_json::Value>(body) else {
        return;
    };
    let line = serde_json::json!({ "t": t, "stats": stats });
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
    {
        let _ = writeln!(f, "{line}");
    }
}

/// The prefetch size in a `/stats` document: the current size of the highest bit-rate class
/// the policy has seen; `None` before the policy has sized anything (or for a body that is
/// not a `/stats` document).
fn prefetch_size(stats: &vodkit_server::metrics::Stats) -> Option<u64> {
    stats.prefetch.policy.classes.last().map(|c| c.bytes)
}

impl Running for ChildRunning {
    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.process.port)
    }
    fn pids(&self) -> Vec<u32> {
        vec![self.process.pid()]
    }
    fn prefetch_series(&self) -> Vec<(f64, u64)> {
        self.stats.series()
    }
    fn set_clock_rate(&self, rate: f64) -> Result<bool, String> {
        set_clock_rate(self.admin_port, rate).map(|()| true)
    }
    fn engine_window(&self, window: (SystemTime, SystemTime)) -> Option<EngineFigures> {
        self.stats.engine_window(window)
    }
    fn stop(mut self: Box<Self>) -> Result<Vec<String>, String> {
        let died = self.process.exited().ok().flatten();
        let mut lines = self
            .process
            .stop(Duration::from_secs(40))
            .map_err(|e| e.to_string())?;
        if let Some(status) = died {
            lines.insert(0, died_line(status));
        }
        Ok(lines)
    }
}

/// The line for a `vodkit serve` that exited before the bench stopped it: a SIGKILL
/// nobody sent is, under a memory budget, the cgroup's OOM killer (it ended a `--io direct`
/// server at its budget, and the point only showed failed sessions).
fn died_line(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    let why = match status.signal() {
        Some(libc::SIGKILL) => "; killed (SIGKILL): under a memory budget, the cgroup's OOM killer",
        _ => "",
    };
    format!("vodkit serve: {EXITED_DURING_RUN} ({status}){why}")
}

#[cfg(test)]
mod tests {
    use super::{died_line, prefetch_size, StatsPoller};
    use vodkit_prefetch::policy::ClassSize;

    fn stats_json(classes: &[(u32, u64)]) -> Vec<u8> {
        let mut stats = vodkit_server::metrics::Stats::default();
        stats.prefetch.policy.classes = classes
            .iter()
            .map(|&(bitrate_kbps, bytes)| ClassSize {
                bitrate_kbps,
                bytes,
            })
            .collect();
        serde_json::to_vec_pretty(&stats).unwrap()
    }

    /// A server killed with SIGKILL mid-run is named as probably OOM-killed; one that
    /// exited on its own is reported with its status only.
    #[test]
    fn a_server_that_died_during_the_run_is_reported_with_the_likely_cause() {
        use std::os::unix::process::ExitStatusExt;
        let killed = died_line(std::process::ExitStatus::from_raw(libc::SIGKILL));
        assert!(killed.contains("exited during the run"), "{killed}");
        assert!(killed.contains("OOM killer"), "{killed}");
        let exited = died_line(std::process::ExitStatus::from_raw(1 << 8));
        assert!(exited.contains("exit status: 1"), "{exited}");
        assert!(!exited.contains("OOM"), "{exited}");
    }

    #[test]
    fn the_prefetch_size_is_the_highest_class_of_the_stats_document() {
        let parse = |b: &[u8]| serde_json::from_slice(b).unwrap();
        let body = stats_json(&[(419, 3_150_000), (1676, 6_290_000)]);
        assert_eq!(prefetch_size(&parse(&body)), Some(6_290_000));
        assert_eq!(prefetch_size(&parse(&stats_json(&[]))), None);
    }

    #[test]
    fn the_poller_reads_stats_from_the_admin_port() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            // Each reading finds the engine 10 requests of 1000 bytes further, 6 of them
            // from memory, and one 4000-byte read.
            for (n, mut s) in listener.incoming().flatten().enumerate() {
                let mut stats: vodkit_server::metrics::Stats =
                    serde_json::from_slice(&stats_json(&[(419, 2 << 20)])).unwrap();
                let n = n as u64;
                stats.prefetch.requested_bytes = 10_000 * n;
                stats.prefetch.memory_bytes = 6_000 * n;
                stats.prefetch.reads = n;
                stats.prefetch.read_bytes = 4_000 * n;
                let body = serde_json::to_vec(&stats).unwrap();
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf);
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(head.as_bytes());
                let _ = s.write_all(&body);
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("stats.jsonl");
        let from = std::time::SystemTime::now();
        let poller = StatsPoller::start(port, std::time::Duration::from_millis(50), log.clone());
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        // Readings continue every 50 ms: wait until there are two and they span a third of
        // the window since the start (a busy machine can delay the first one).
        let mut to = std::time::SystemTime::now();
        while (poller.series().len() < 2 || poller.engine_window((from, to)).is_none())
            && std::time::Instant::now() < until
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
            to = std::time::SystemTime::now();
        }
        let series = poller.series();
        assert!(series.len() >= 2, "{series:?}");
        // Points lie on the 50 ms ticks (which ones depends on how busy the machine is).
        for (t, bytes) in &series {
            assert_eq!(*bytes, 2 << 20);
            let ticks = t / 0.05;
            assert!(
                ticks >= 1.0 && (ticks - ticks.round()).abs() < 1e-6,
                "{series:?}"
            );
        }
        assert!(series[1].0 > series[0].0);
        // The engine's figures between the readings within a window.
        let e = poller.engine_window((from, to)).expect("engine figures");
        assert!((e.hit_fraction - 0.6).abs() < 1e-9, "{e:?}");
        assert!((e.mean_read_bytes - 4000.0).abs() < 1e-9, "{e:?}");
        assert!(poller.engine_window((from, from)).is_none());
        drop(poller);
        // Every document read is in the run's log, one JSON line each.
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert!(lines.len() >= series.len(), "{lines:?}");
        assert!(lines[0]["t"].as_f64().unwrap() > 0.0);
        assert!(lines[0]["stats"]["prefetch"].is_object(), "{}", lines[0]);
    }
}
