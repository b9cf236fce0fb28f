//! The run: raise the descriptor limit, warm the server up, start sessions open-loop at
//! their arrival times, sample live counters once a second, and collect every session's
//! record when the last one ends (or the run is stopped).

use crate::config::{InputError, LoadConfig};
use crate::http::{Ask, Conn, Progress};
use crate::netns::{KernelLinks, LinkMode, Route};
use crate::record::SessionRecord;
use crate::results::{Results, Sample};
use crate::session::{self, Live, Plan, Shared};
use crate::status::StatusLine;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A run that could not take place at all (individual request failures are results).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("cannot start the load runtime: {0}")]
    Runtime(std::io::Error),
    /// Kernel shaping was asked for but cannot be set up here.
    #[error("{0}")]
    Kernel(String),
    /// `--start-at` had already passed when the run was ready to start.
    #[error("--start-at was {0:.1} s ago when the run was ready: the shards would not start together (give a later time)")]
    StartPassed(f64),
}

/// Everything a run produced: the summary and the raw per-session records.
#[derive(Debug)]
pub struct Run {
    pub results: Results,
    pub sessions: Vec<SessionRecord>,
}

/// Run a load test on threads of its own: one single-threaded tokio runtime per core
/// (or `config.workers`), sessions dealt round-robin to them. Like wrk's threads, each
/// worker owns its sockets and timers outright, so a response never wakes another
/// thread. `stop` ends the run early; sessions still active are recorded as cancelled.
pub fn run(config: LoadConfig, stop: CancellationToken) -> Result<Run, LoadError> {
    config.validate()?;
    crate::steady::check(&config)?;
    let workers = config
        .workers
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
        .max(1);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(LoadError::Runtime)?;
    runtime.block_on(async move {
        let (shared, plans, prep) = prepare(&config, &stop).await?;
        let mut shards: Vec<Vec<Plan>> = (0..workers).map(|_| Vec::new()).collect();
        for (k, plan) in plans.into_iter().enumerate() {
            shards[k % workers].push(plan);
        }
        let sampler = Sampler::start(&shared, config.status_line());
        let mut receivers = Vec::with_capacity(workers);
        for (k, shard) in shards.into_iter().enumerate() {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("vodkit-load-{k}"))
                .spawn(move || {
                    let records = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => rt.block_on(launch(shard, shared)),
                        Err(e) => {
                            tracing::error!("load worker {k} has no runtime: {e}");
                            shared.cancel.cancel();
                            Vec::new()
                        }
                    };
                    let _ = tx.send(records);
                })
                .map_err(LoadError::Runtime)?;
            receivers.push(rx);
        }
        let mut sessions = Vec::new();
        for rx in receivers {
            sessions.extend(rx.await.unwrap_or_default());
        }
        sessions.sort_by_key(|s| s.index);
        Ok(finish(&config, &shared, sessions, sampler, prep).await)
    })
}

/// Run a load test on the caller's tokio runtime (all sessions spawned onto it).
pub async fn run_async(config: LoadConfig, stop: CancellationToken) -> Result<Run, LoadError> {
    config.validate()?;
    crate::steady::check(&config)?;
    let (shared, plans, prep) = prepare(&config, &stop).await?;
    let sampler = Sampler::start(&shared, config.status_line());
    let sessions = launch(plans, shared.clone()).await;
    Ok(finish(&config, &shared, sessions, sampler, prep).await)
}

/// What was set up before the clock started.
struct Prep {
    warmed: u64,
    fd_limit: u64,
    /// Namespaces of kernel shaping; deleted when the run is finished with them.
    _kernel: Option<KernelLinks>,
}

/// Raise the descriptor limit, hook Ctrl-C, warm up, start the clock and plan sessions.
async fn prepare(
    config: &LoadConfig,
    stop: &CancellationToken,
) -> Result<(Arc<Shared>, Vec<Plan>, Prep), LoadError> {
    let fd_limit = raise_nofile_limit();
    if config.stop_on_interrupt {
        let stop = stop.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                stop.cancel();
            }
        });
        // Let the handler register before namespaces exist, so Ctrl-C ends the run
        // (and deletes them) instead of killing the process.
        tokio::task::yield_now().await;
    }
    let kernel = kernel_links(config).await?;
    let warmed = warm_up(config, stop).await;
    if let Some(at) = config.start_at {
        // Shards start their clocks at the same wall time; a second late is tolerated.
        match at.duration_since(std::time::SystemTime::now()) {
            Ok(wait) => {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.cancelled() => {}
                }
            }
            Err(e) if e.duration() > Duration::from_secs(1) => {
                return Err(LoadError::StartPassed(e.duration().as_secs_f64()));
            }
            Err(_) => {}
        }
    }
    let shared = Arc::new(Shared {
        addr: config.target.addr,
        host: config.target.host.clone(),
        verify: config.verify,
        t0: Instant::now(),
        live: Live::default(),
        cancel: stop.child_token(),
        tls: run_tls(config),
        http2: config.http == crate::config::HttpVersion::Http2,
        sign: config.sign.clone(),
        live_view: config.live.clone(),
        retry: config.retry,
        watch: crate::watcher::Watcher::of(config),
    });
    for t in &config.timed {
        let (cancel, action, at) = (shared.cancel.clone(), t.action.clone(), t.at_s.max(0.0));
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs_f64(at)) => {
                    let _ = tokio::task::spawn_blocking(move || action()).await;
                }
                _ = cancel.cancelled() => {}
            }
        });
    }
    if let Some(d) = config.duration {
        let cancel = shared.cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(d).await;
            cancel.cancel();
        });
    }
    if let Some(p) = &config.probes {
        let (steady_from, span) = (crate::steady::probe_start_s(config), config.span_s());
        if config.duration.is_some() && steady_from + p.length_s > span {
            eprintln!(
                "vodkit load: --probe: steady state begins at {steady_from:.0} s (the longest session; \
                 --warm-start auto begins it once the run has settled), too late for {:.0} s probes in a {span:.0} s run; \
                 they start at {steady_from:.0} s and may not run",
                p.length_s
            );
        }
    }
    // The whole run's schedule (a warm start moves it into the past and trims sessions
    // already playing), numbered in arrival order; this run keeps its shard's part.
    let player = config.player.clone().map(Arc::new);
    let mut plans: Vec<Plan> = crate::steady::schedule(config)
        .into_iter()
        .enumerate()
        .filter(|(_, s)| s.owned_by(config))
        .map(|(index, s)| {
            let mut link = config
                .links
                .get(&s.session.class)
                .copied()
                .unwrap_or_default();
            let route = kernel.as_ref().and_then(|k| k.route(&s.session.class));
            let link_bps = link.bandwidth_bps;
            if route.is_some() {
                link.bandwidth_bps = 0;
            }
            Plan {
                index,
                session: s.session,
                arrival: s.arrival,
                link,
                link_bps,
                route,
                player: player.clone(),
                prefilled: s.prefilled,
                probe: s.probe,
            }
        })
        .collect();
    plans.sort_by(|a, b| a.arrival.total_cmp(&b.arrival));
    Ok((
        shared,
        plans,
        Prep {
            warmed,
            fd_limit,
            _kernel: kernel,
        },
    ))
}

/// Set up kernel shaping when asked for (and say so on stderr); `None` in user mode.
async fn kernel_links(config: &LoadConfig) -> Result<Option<KernelLinks>, LoadError> {
    if config.link_mode != LinkMode::Kernel {
        return Ok(None);
    }
    let links =
        KernelLinks::create(&config.links, config.target.addr.port()).map_err(LoadError::Kernel)?;
    for class in &links.classes {
        reachable(&class.route, &config.target.host).await?;
    }
    if links.classes.is_empty() {
        eprintln!(
            "vodkit load: --link kernel: no client class has a bandwidth limit; nothing to shape"
        );
    } else {
        let mut sessions = std::collections::HashMap::new();
        for s in &config.sessions[..config.schedule().len()] {
            *sessions.entry(s.class.as_str()).or_insert(0) += 1;
        }
        eprintln!("vodkit load: {}", links.describe(&sessions));
    }
    Ok(Some(links))
}

/// Start each planned session at its arrival time (plans are in arrival order) and
/// collect their records.
async fn launch(plans: Vec<Plan>, shared: Arc<Shared>) -> Vec<SessionRecord> {
    let mut handles = Vec::with_capacity(plans.len());
    for plan in plans {
        let at = shared.t0 + crate::config::secs(plan.arrival);
        tokio::select! {
            _ = tokio::time::sleep_until(at) => {}
            _ = shared.cancel.cancelled() => break,
        }
        handles.push(tokio::spawn(session::run(plan, shared.clone())));
    }
    let mut sessions = Vec::with_capacity(handles.len());
    for h in handles {
        match h.await {
            Ok(record) => sessions.push(record),
            Err(e) => tracing::error!("a session task ended abnormally: {e}"),
        }
    }
    sessions
}

async fn finish(
    config: &LoadConfig,
    shared: &Arc<Shared>,
    sessions: Vec<SessionRecord>,
    sampler: Sampler,
    prep: Prep,
) -> Run {
    let elapsed = shared.t0.elapsed().as_secs_f64();
    let timeseries = sampler.stop().await;
    let mut results = Results::build(
        config,
        &sessions,
        timeseries,
        elapsed,
        prep.warmed,
        prep.fd_limit,
    );
    results.run.retried_requests = shared.live.retried_requests.load(Ordering::Relaxed);
    results.run.recovered_requests = shared.live.recovered_requests.load(Ordering::Relaxed);
    Run { results, sessions }
}

/// The once-a-second sampling task.
struct Sampler {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Vec<Sample>>,
}

impl Sampler {
    fn start(shared: &Arc<Shared>, progress: Option<bool>) -> Sampler {
        let stop = CancellationToken::new();
        let task = tokio::spawn(sample(shared.clone(), progress, stop.clone()));
        Sampler { stop, task }
    }

    async fn stop(self) -> Vec<Sample> {
        self.stop.cancel();
        self.task.await.unwrap_or_default()
    }
}

/// Fetch the warm-up requests over a few connections, unmeasured. Returns how many
/// completed.
async fn warm_up(config: &LoadConfig, stop: &CancellationToken) -> u64 {
    if config.warmup.is_empty() {
        return 0;
    }
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(config.warmup.clone());
    let mut workers = Vec::new();
    for _ in 0..config.warmup_connections.max(1) {
        let (next, done, requests) = (next.clone(), done.clone(), requests.clone());
        let (addr, host, stop) = (config.target.addr, config.target.host.clone(), stop.clone());
        let tls = run_tls(config);
        let http2 = config.http == crate::config::HttpVersion::Http2;
        let sign = config.sign.clone();
        let connector = tls.as_ref().map(crate::tls::TlsClient::viewer);
        workers.push(tokio::spawn(async move {
            let sink = AtomicU64::new(0);
            let mut conn: Option<Conn> = None;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(req) = requests.get(i) else { break };
                if stop.is_cancelled() {
                    break;
                }
                if conn.is_none() {
                    conn = match (Conn::open(addr, None).await, &tls, &connector) {
                        (Ok(c), Some(t), Some(k)) => c.secure(t, k).await.ok(),
                        (c, _, _) => c.ok(),
                    };
                    if http2 {
                        conn = match conn {
                            Some(c) => c.into_h2(None).await.ok(),
                            None => None,
                        };
                    }
                }
                let Some(c) = conn.as_mut() else { continue };
                let ask = Ask {
                    path: &req.path,
                    range: req.range,
                    host: &host,
                    session_id: 0,
                    verify: false,
                    sign: sign.as_ref(),
                };
                let mut progress = Progress::default();
                let limit = crate::config::secs(req.timeout_s.max(1.0));
                match tokio::time::timeout(
                    limit,
                    crate::http::exchange(c, &ask, None, &sink, &mut progress, None),
                )
                .await
                {
                    Ok(Ok(d)) => {
                        done.fetch_add(1, Ordering::Relaxed);
                        if !d.reusable {
                            conn = None;
                        }
                    }
                    _ => conn = None,
                }
            }
        }));
    }
    for w in workers {
        let _ = w.await;
    }
    done.load(Ordering::Relaxed)
}

/// Once a second: record a time-series sample and refresh the status line.
async fn sample(
    shared: Arc<Shared>,
    progress: Option<bool>,
    stop: CancellationToken,
) -> Vec<Sample> {
    let mut status = StatusLine::new(progress);
    let mut series = Vec::new();
    let mut tick =
        tokio::time::interval_at(shared.t0 + Duration::from_secs(1), Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let live = &shared.live;
    let (mut bytes, mut reqs, mut fails) = (0u64, 0u64, 0u64);
    loop {
        let finishing = tokio::select! {
            _ = tick.tick() => false,
            _ = stop.cancelled() => true,
        };
        let elapsed = shared.t0.elapsed().as_secs_f64();
        let now_bytes = live.bytes.load(Ordering::Relaxed);
        let now_reqs = live.completed_requests.load(Ordering::Relaxed);
        let now_fails = live.failed_sessions.load(Ordering::Relaxed);
        let s = Sample {
            t_s: elapsed.round() as u64,
            active_sessions: live.active_sessions.load(Ordering::Relaxed),
            requests_per_s: (now_reqs - reqs) as f64,
            mb_per_s: (now_bytes - bytes) as f64 / 1e6,
            failures: now_fails - fails,
        };
        (bytes, reqs, fails) = (now_bytes, now_reqs, now_fails);
        if finishing {
            status.finish();
            return series;
        }
        status.show(elapsed, &s, now_fails);
        series.push(s);
        if shared.watch.as_ref().is_some_and(|w| w.decide(elapsed)) {
            shared.cancel.cancel();
        }
    }
}

/// Check that the server answers TCP connections from a class's namespace; a server bound
/// to 127.0.0.1 only does not, and every session of the class would fail to connect.
async fn reachable(route: &Route, host: &str) -> Result<(), LoadError> {
    let addr = route.addr;
    let probe = async {
        let socket = route.socket(None).await?;
        socket.connect(addr).await
    };
    match tokio::time::timeout(Duration::from_secs(3), probe).await {
        Ok(Ok(_)) => Ok(()),
        outcome => {
            let why = match outcome {
                Ok(Err(e)) => e.to_string(),
                _ => "no answer within 3 s".into(),
            };
            Err(LoadError::Kernel(format!(
                "--link kernel: the server ({host}) is not reachable from the client namespace at {addr} ({why}); \
                 it must listen on 0.0.0.0:{port} (e.g. `vodkit serve --listen 0.0.0.0:{port}`, nginx `listen {port};`)",
                port = addr.port()
            )))
        }
    }
}

/// Raise the soft descriptor limit to the hard limit; returns the new soft limit.
pub fn raise_nofile_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        if lim.rlim_cur < lim.rlim_max {
            let want = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                return want.rlim_cur;
            }
        }
        lim.rlim_cur
    }
}

/// The run's TLS client: offering only `h2` in ALPN when the viewers speak HTTP/2.
fn run_tls(config: &LoadConfig) -> Option<crate::tls::TlsClient> {
    let tls = config.tls.as_ref()?;
    Some(match config.http {
        crate::config::HttpVersion::Http2 => tls.for_http2(),
        crate::config::HttpVersion::Http11 => tls.clone(),
    })
}
