//! The measured run of `vodkit simulate --validate` (also `vodkit bench --scenario
//! validate`): a small `netflix-2014` workload served by an in-process `vodkit serve`
//! (`asap` I/O, a fixed prefetch policy, access log) from the emulated hard disk, replayed
//! by `vodkit load`; the device's own busy accounting and the engine's outstanding
//! prefetched bytes are measured, the access log is turned into chains, and the pure
//! [`vodkit_sim::validate::compare`] simulates those chains.
//!
//! Needs root, `/dev/fuse` and the testbed's tools. The emulated disk is always taken
//! down again, also when a step fails.

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use vodkit_disk::model::Preset;
use vodkit_disk::testbed::{self, Testbed};
use vodkit_prefetch::PolicySpec;
use vodkit_sim::validate::{self, DriveModelCheck, Measured, Validation};
use vodkit_sim::{Capacity, ModelConfig, Trace};
use vodkit_workload::fileset;
use vodkit_workload::model::{Catalog, Session};
use vodkit_workload::WorkloadDir;

use super::shrink::{self, ShrinkLimits};

/// What the validation run does.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Working directory: workload, image, mount point, access log, chains, report.
    pub dir: PathBuf,
    pub seed: u64,
    /// Sessions generated (before those left without requests are dropped).
    pub sessions: u64,
    /// Titles in the catalog (many, so sessions rarely share a file).
    pub titles: u32,
    /// Sessions arrive (Poisson) over about this many seconds.
    pub arrivals_s: f64,
    pub limits: ShrinkLimits,
    /// Drive preset of the emulated disk and of the model's t_max / s_max.
    pub preset: Preset,
    /// The fixed policy (default [`PolicySpec::default`]).
    pub policy: PolicySpec,
    /// `read_ahead_kb` to set on the emulated device; `None` (default) keeps the kernel's.
    /// 0 does not make the disk read what the policy asks for: the kernel then splits the
    /// engine's reads into single pages (docs/simulate.md).
    pub read_ahead_kb: Option<u64>,
}

impl RunOptions {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        RunOptions {
            dir: dir.into(),
            seed: 1,
            sessions: 60,
            titles: 3000,
            arrivals_s: 60.0,
            limits: ShrinkLimits {
                session_s: 80.0,
                max_end: 48 << 20,
                margin: 8 << 20,
            },
            preset: Preset::Hitachi5k3000,
            policy: PolicySpec::default(),
            read_ahead_kb: None,
        }
    }
}

/// Everything a validation run found (`validate.json`).
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    pub preset: String,
    pub policy: String,
    /// `read_ahead_kb` of the emulated device during the run.
    pub read_ahead_kb: u64,
    pub t_max_mb_s: f64,
    pub s_max_per_s: f64,
    pub sessions: usize,
    pub requests: usize,
    pub files: usize,
    pub fileset_bytes: u64,
    pub image_bytes: u64,
    pub load_elapsed_s: f64,
    pub requests_completed: u64,
    pub requests_failed: u64,
    pub device_reads: u64,
    pub device_seeks: u64,
    /// The engine's own totals at the end of the replay: reads issued, bytes they covered,
    /// bytes of those not already in memory.
    pub engine_reads: u64,
    pub engine_read_bytes: u64,
    pub engine_disk_bytes: u64,
    /// Prefetched bytes found gone from memory when requested (the model assumes none;
    /// another process dropping the page cache during the run causes them), and how
    /// many such evictions.
    pub engine_evicted_bytes: u64,
    pub engine_evictions: u64,
    pub chains: usize,
    pub measured: Measured,
    pub validation: Validation,
    /// The same simulated reads through the emulated drive's own timing model.
    pub drive_model: Option<DriveModelCheck>,
}

fn step<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}

fn epoch_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The shrunk workload, written to `dir/workload`.
struct Workload {
    dir: WorkloadDir,
    catalog: Catalog,
    sessions: Vec<Session>,
}

fn prepare_workload(o: &RunOptions, note: &mut dyn FnMut(&str)) -> Result<Workload, String> {
    let full = o.dir.join("workload-full");
    let sets: Vec<(String, String)> = [
        ("titles", o.titles.to_string()),
        ("sessions", o.sessions.to_string()),
        ("drives", "1".to_string()),
        (
            "arrival_rate",
            (o.sessions as f64 / o.arrivals_s).to_string(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let line = vodkit_workload::netflix::new_workload(o.seed, 1.0, &sets, &full)?;
    note(&line);
    let full = WorkloadDir::new(full);
    let all = full.sessions().map_err(|e| e.to_string())?;
    let catalog = full.catalog().map_err(|e| e.to_string())?;
    let meta = full
        .meta()
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("{}: missing", full.meta_path().display()))?;
    let sessions = shrink::shrink_sessions(&all, &o.limits, 1.0);
    let catalog = shrink::shrink_catalog(&catalog, &sessions, o.limits.margin);
    let dir = WorkloadDir::new(o.dir.join("workload"));
    let written = dir
        .write_catalog(&catalog)
        .and_then(|()| dir.write_sessions(&sessions))
        .and_then(|()| dir.write_meta(&meta));
    written.map_err(step(&dir.root().display().to_string()))?;
    let files = dir.root().join("files.csv");
    std::fs::write(&files, file_table(&catalog)).map_err(step(&files.display().to_string()))?;
    Ok(Workload {
        dir,
        catalog,
        sessions,
    })
}

/// `files.csv` of the shrunk catalog; every file is on the one emulated drive.
fn file_table(catalog: &Catalog) -> String {
    let mut s = String::from("file,bitrate_kbps,media,size_bytes,drive\n");
    for r in catalog.titles.iter().flat_map(|t| &t.renditions) {
        for f in &r.files {
            s += &format!(
                "{},{},{},{},hdd\n",
                f.path,
                r.bitrate_kbps,
                vodkit_workload::netflix::media_name(r.media),
                f.size_bytes
            );
        }
    }
    s
}

/// Run the whole validation. `note` receives progress lines.
pub fn run(o: &RunOptions, note: &mut dyn FnMut(&str)) -> Result<RunReport, String> {
    let spec = o.policy.clone();
    let PolicySpec::Fixed {
        bytes: prefetch_bytes,
    } = spec
    else {
        return Err(format!(
            "policy {}: validation runs a fixed policy",
            o.policy
        ));
    };
    let capacity = Capacity::of_preset(o.preset);
    let mut o = o.clone();
    // Files keep at least one prefetch past the last byte requested.
    o.limits.margin = o.limits.margin.max(prefetch_bytes);
    let o = &o;
    testbed::preflight().map_err(|e| format!("emulated disk: {e}"))?;
    std::fs::create_dir_all(&o.dir).map_err(step(&o.dir.display().to_string()))?;
    let w = prepare_workload(o, note)?;
    let bytes = shrink::catalog_bytes(&w.catalog);
    // Data fills about two thirds of the image, which stands for the whole platter.
    let image_bytes = ((bytes as f64 * 1.5) as u64 + (256 << 20)).next_multiple_of(1 << 20);
    note(&format!(
        "workload: {} sessions, {} requests, {} files, {:.0} MB; image {:.1} GiB ({})",
        w.sessions.len(),
        w.sessions.iter().map(|s| s.requests.len()).sum::<usize>(),
        w.catalog
            .titles
            .iter()
            .map(|t| t.renditions.len())
            .sum::<usize>(),
        bytes as f64 / 1e6,
        image_bytes as f64 / (1u64 << 30) as f64,
        o.preset
    ));
    let mount = o.dir.join("mnt");
    std::fs::create_dir_all(&mount).map_err(step(&mount.display().to_string()))?;
    let image = o.dir.join("hdd.img");
    let _ = std::fs::remove_file(&image);
    let mut cfg = testbed::Config::new(o.preset, image_bytes, &image, &mount);
    cfg.reformat = true;
    // A state directory of its own: tools that clean up devices listed under the shared
    // default (/run/vodkit/hdd) must not take this one down mid-run.
    cfg.state_root = o.dir.join("hdd-state");
    let tb = Testbed::up(&cfg).map_err(|e| format!("emulated disk up: {e}"))?;
    let measured = set_read_ahead(&tb, o.read_ahead_kb)
        .and_then(|ra| serve_and_load(o, &w, &tb, &mount, note).map(|(m, l)| (m, l, ra)));
    let down = tb.down().map_err(|e| format!("emulated disk down: {e}"));
    let _ = std::fs::remove_file(&image);
    let (measured, load, read_ahead_kb) = measured?;
    down?;

    let log = o.dir.join("access.log");
    let trace_dir = o.dir.join("trace");
    let trace = chains_of(&log, &w.dir.root().join("files.csv"), &trace_dir)?;
    note(&format!(
        "access log: {} chains -> {}",
        trace.chains.len(),
        trace_dir.join("chains.csv").display()
    ));
    let model = ModelConfig::new(capacity);
    let validation = validate::compare(&trace, model, &spec, &measured)?;
    let drive = o.preset.spec();
    let drive_model = validate::against_drive_model(&trace, model, &spec, &drive).ok();
    Ok(RunReport {
        preset: o.preset.to_string(),
        policy: o.policy.to_string(),
        read_ahead_kb,
        t_max_mb_s: capacity.t_max_mb_s,
        s_max_per_s: capacity.s_max_per_s,
        sessions: w.sessions.len(),
        requests: w.sessions.iter().map(|s| s.requests.len()).sum(),
        files: w.catalog.titles.iter().map(|t| t.renditions.len()).sum(),
        fileset_bytes: bytes,
        image_bytes,
        load_elapsed_s: load.elapsed_s,
        requests_completed: load.completed,
        requests_failed: load.failed,
        device_reads: measured.reads,
        device_seeks: load.seeks,
        engine_reads: load.engine.reads,
        engine_read_bytes: load.engine.read_bytes,
        engine_disk_bytes: load.engine.disk_bytes,
        engine_evicted_bytes: load.engine.prefetch.evicted_bytes,
        engine_evictions: load.engine.prefetch.evictions,
        chains: trace.chains.len(),
        measured,
        validation,
        drive_model,
    })
}

/// Set the device's `read_ahead_kb` once it is mounted (the kernel recomputes it from the
/// queue limits while the loop device is set up, so a value given before is lost) and
/// return the value in force.
fn set_read_ahead(tb: &Testbed, kb: Option<u64>) -> Result<u64, String> {
    let dev = &tb.state().loop_device;
    let now = match kb {
        Some(kb) => {
            let tuning = testbed::QueueTuning {
                read_ahead_kb: Some(kb),
                ..Default::default()
            };
            testbed::queue::apply(dev, &tuning)
        }
        None => testbed::queue::read(dev),
    }
    .map_err(|e| format!("{dev}: {e}"))?;
    match kb {
        Some(kb) if now.read_ahead_kb != kb => Err(format!(
            "{dev}: read_ahead_kb is {} after setting {kb}",
            now.read_ahead_kb
        )),
        _ => Ok(now.read_ahead_kb),
    }
}

/// What the load run reported.
struct LoadSummary {
    elapsed_s: f64,
    completed: u64,
    failed: u64,
    seeks: u64,
    engine: vodkit_prefetch::Stats,
}

/// Write the file set, drop caches, serve and replay; device counters around the replay.
fn serve_and_load(
    o: &RunOptions,
    w: &Workload,
    tb: &Testbed,
    mount: &Path,
    note: &mut dyn FnMut(&str),
) -> Result<(Measured, LoadSummary), String> {
    let started = Instant::now();
    let opts = fileset::CreateOptions {
        layout: None,
        progress: false,
        backing_image: vodkit_disk::testbed::image_behind(mount),
    };
    fileset::create(&w.catalog, mount, &opts).map_err(|e| format!("file set: {e}"))?;
    note(&format!(
        "file set written in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    testbed::system::drop_caches().map_err(|e| e.to_string())?;

    let mut server = vodkit_server::ServerConfig::new(mount);
    server.listen = ([127, 0, 0, 1], 0).into();
    server.access_log = Some(o.dir.join("access.log"));
    server.io.mode = vodkit_prefetch::IoMode::Asap;
    server.io.prefetch = o.policy.clone();
    server.io.stats_every = None;
    server.worker_threads = 2;
    let _ = std::fs::remove_file(o.dir.join("access.log"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(step("server runtime"))?;
    let handle = runtime
        .block_on(vodkit_server::Server::bind(server))
        .map_err(step("server"))?;
    let target = vodkit_load::Target::parse(&format!("http://{}", handle.local_addr()), false)
        .map_err(|e| e.0)?;
    let mut load = vodkit_load::LoadConfig::new(target, w.sessions.clone(), 1.0);
    if let Some(meta) = w.dir.meta().map_err(|e| e.to_string())? {
        load.apply_meta(&meta);
    }
    load.workers = Some(1);
    load.source = w.dir.sessions_path().display().to_string();

    let state = tb.state();
    let before = testbed::counters(state).map_err(|e| e.to_string())?;
    let start_s = epoch_s();
    note("replaying sessions ...");
    let peak = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let outcome = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                let held = shrink::outstanding_prefetch(&handle.stats().prefetch.prefetch);
                peak.fetch_max(held, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let r = vodkit_load::run(load, vodkit_load::CancellationToken::new());
        done.store(true, Ordering::Relaxed);
        r
    });
    let engine = handle.stats().prefetch;
    runtime.block_on(handle.shutdown());
    drop(runtime);
    let end_s = epoch_s();
    let after = testbed::counters(state).map_err(|e| e.to_string())?;
    let run = outcome.map_err(|e| format!("load: {e}"))?;
    let r = &run.results;
    let failed = r.requests.timed_out + r.requests.errors.values().sum::<u64>();
    note(&format!(
        "load: {} requests completed, {failed} failed, {:.0} s",
        r.requests.completed, r.run.elapsed_s
    ));
    Ok((
        Measured {
            start_s,
            end_s,
            read_bytes: after.read_bytes - before.read_bytes,
            reads: after.reads - before.reads,
            busy_s: after.busy_secs - before.busy_secs,
            peak_memory_bytes: Some(peak.load(Ordering::Relaxed)),
        },
        LoadSummary {
            elapsed_s: r.run.elapsed_s,
            completed: r.requests.completed,
            failed,
            seeks: after.seeks - before.seeks,
            engine,
        },
    ))
}

/// Chains of the server's access log (written to `out/chains.csv`), as a trace.
fn chains_of(log: &Path, files_csv: &Path, out: &Path) -> Result<Trace, String> {
    let table = vodkit_trace::FileTable::from_csv(files_csv)?;
    let file = std::fs::File::open(log).map_err(step(&log.display().to_string()))?;
    let opts = vodkit_trace::AnalyzeOptions {
        format: vodkit_trace::LogFormat::Vodkit,
        ..Default::default()
    };
    let mut sink = vodkit_trace::output::DirSink::create(out, true, false)
        .map_err(step(&out.display().to_string()))?;
    vodkit_trace::analyze(BufReader::new(file), table, &opts, &mut sink)
        .map_err(step(&log.display().to_string()))?;
    sink.finish().map_err(step(&out.display().to_string()))?;
    Trace::load(&out.join("chains.csv"), files_csv)
}

fn pct(e: Option<f64>) -> String {
    e.map_or("n/a".into(), |e| format!("{:+.1}%", e * 100.0))
}

/// The report as text lines.
pub fn summary_text(r: &RunReport) -> String {
    let v = &r.validation;
    let mut s = format!(
        "validation: {} on {} (t_max {:.1} MB/s, s_max {:.1} seeks/s, read_ahead_kb {}), {} sessions, {} chains, {:.0} s window\n",
        r.policy, r.preset, r.t_max_mb_s, r.s_max_per_s, r.read_ahead_kb, r.sessions, r.chains, v.window_s
    );
    s += &format!(
        "disk utilization: measured {:.2}% (device busy {:.1} s, {} reads, {} seeks, {:.0} MB), simulated {:.2}% ({} reads, {:.0} MB): error {:+.1}%\n",
        v.measured_util * 100.0,
        r.measured.busy_s,
        r.measured.reads,
        r.device_seeks,
        r.measured.read_bytes as f64 / 1e6,
        v.simulated_util * 100.0,
        v.simulated_reads,
        v.simulated_read_bytes as f64 / 1e6,
        v.util_error * 100.0
    );
    s += &format!(
        "prefetch memory: measured peak {:.1} MB outstanding; simulated peak {:.1} MB outstanding (error {}), {:.1} MB in whole buffers (model; error {})\n",
        v.measured_memory_bytes.unwrap_or(0) as f64 / 1e6,
        v.simulated_outstanding_bytes as f64 / 1e6,
        pct(v.outstanding_error),
        v.simulated_memory_bytes as f64 / 1e6,
        pct(v.memory_error),
    );
    s += &format!(
        "engine: {} reads covering {:.0} MB, {:.0} MB of them not in memory before; {:.0} MB of prefetched data evicted before use ({} evictions)\n",
        r.engine_reads,
        r.engine_read_bytes as f64 / 1e6,
        r.engine_disk_bytes as f64 / 1e6,
        r.engine_evicted_bytes as f64 / 1e6,
        r.engine_evictions
    );
    if let Some(d) = &r.drive_model {
        s += &format!(
            "simulated reads through the drive model: busiest minute {:.2}% vs linear {:.2}% ({:+.1}%)\n",
            d.drive_model_max_util * 100.0,
            d.linear_max_util * 100.0,
            d.max_util_error * 100.0
        );
    }
    s
}
