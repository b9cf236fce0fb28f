//! `vodkit bench` end to end: check the request, assemble the rig (file set, testbed,
//! launcher, load driver, sampler), run the search for every server with progress, write
//! the report files and return the terminal table. The CLI only maps flags onto
//! [`BenchRequest`] and errors onto exit codes.

use crate::adapters::{ChildVodkit, InProcessVodkit, WorkloadLoad};
use crate::experiment::{run_bench, BenchSettings, PlainDisk, Progress, Rig, Testbed};
use crate::launch::LocalLauncher;
use crate::point::PointMetrics;
use crate::report::{self, BenchReport, ServerReport};
use crate::search::{Criterion, SearchPlan, Trial};
use crate::sut::Sut;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::time::Duration;
use vodkit_workload::WorkloadDir;

/// Input problem (exit 2) or runtime failure (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Runtime(String),
}

/// Where the testbed comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum TestbedChoice {
    Plain,
    Hdd(vodkit_disk::model::Preset),
}

impl TestbedChoice {
    pub fn parse(s: &str) -> Result<TestbedChoice, String> {
        match s {
            "plain" => Ok(TestbedChoice::Plain),
            _ => match s.strip_prefix("hdd:") {
                Some(p) if !p.is_empty() => p
                    .parse()
                    .map(TestbedChoice::Hdd)
                    .map_err(|e| format!("--testbed `{s}`: {e}")),
                _ => Err(format!(
                    "--testbed `{s}`: expected plain or hdd:PRESET (e.g. hdd:wd-red)"
                )),
            },
        }
    }
}

impl std::str::FromStr for TestbedChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<TestbedChoice, String> {
        TestbedChoice::parse(s)
    }
}

/// The `--testbed` words back: `plain` or `hdd:PRESET` (what a reader types to rerun it).
impl std::fmt::Display for TestbedChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TestbedChoice::Plain => f.write_str("plain"),
            TestbedChoice::Hdd(p) => write!(f, "hdd:{p}"),
        }
    }
}

/// Adaptive players instead of replayed byte ranges (`vodkit bench --player`): every
/// session plays its title from a real media set, which the bench writes in place of the
/// synthetic file set (`vodkit fileset create --media`'s library call).
#[derive(Debug, Clone, PartialEq)]
pub struct BenchPlayers {
    pub config: vodkit_load::player::PlayerConfig,
    /// The media set's packaging; it must carry the players' manifests.
    pub format: vodkit_media::package::MediaFormat,
}

impl BenchPlayers {
    /// Players of `config` on a media set in `format`; refused when the packaging has no
    /// manifest of the players' protocol.
    pub fn new(
        config: vodkit_load::player::PlayerConfig,
        format: vodkit_media::package::MediaFormat,
    ) -> Result<BenchPlayers, String> {
        let ok = match config.protocol {
            vodkit_load::player::Protocol::Dash => format.has_dash(),
            vodkit_load::player::Protocol::Hls => format.has_hls(),
        };
        if !ok {
            return Err(format!(
                "--media {format}: has no {} manifest for --player",
                match config.protocol {
                    vodkit_load::player::Protocol::Dash => "DASH",
                    vodkit_load::player::Protocol::Hls => "HLS",
                }
            ));
        }
        Ok(BenchPlayers { config, format })
    }

    /// The media set's directory name (beside or instead of `files`).
    pub fn dir_name(&self) -> String {
        format!("media-{}", self.format)
    }

    /// The manifest the readiness probe fetches: the first title's.
    pub fn probe_path(&self, catalog: &vodkit_workload::model::Catalog) -> Option<String> {
        let t = catalog.titles.first()?;
        Some(format!(
            "/{}/{}",
            vodkit_media::package::title_dir(t.id),
            match self.config.protocol {
                vodkit_load::player::Protocol::Dash => "manifest.mpd",
                vodkit_load::player::Protocol::Hls => "master.m3u8",
            }
        ))
    }
}

/// Everything `vodkit bench` was asked to do.
#[derive(Debug, Clone)]
pub struct BenchRequest {
    pub workload: PathBuf,
    /// File-set root; `None` means create it from the workload.
    pub root: Option<PathBuf>,
    /// The servers under test, parsed from `--sut` by the caller ([`crate::sut::parse_list`]).
    pub suts: Vec<Sut>,
    pub testbed: TestbedChoice,
    /// Memory budget of each server, page cache included (bytes).
    pub memory: Option<u64>,
    /// CPU quota of each server, in cores (`--server-cpus`).
    pub server_cpus: Option<f64>,
    /// `--search` as given: its defaults come from the workload's rate guess, so it is
    /// read once the workload is ([`SearchPlan::parse`]); checked here for the error.
    pub search: Option<String>,
    pub criterion: Criterion,
    /// Probe sessions per point (`--probe N,LEN`), judged by the `quality` criterion.
    pub probes: Option<vodkit_load::probe::Probes>,
    /// Adaptive players on a real media set (`--player`, `--media`).
    pub players: Option<BenchPlayers>,
    pub repeat: u32,
    /// Longest load run per data point.
    pub point_duration: Option<Duration>,
    /// The history played before every point (`--fast-forward`).
    pub fast_forward: crate::warmup::FastForwardChoice,
    /// End each point once its failure is certain ([`crate::early`]; `--no-early-stop`
    /// turns it off).
    pub early_stop: bool,
    pub out: PathBuf,
    /// The vodkit binary used to start `vodkit serve` children.
    pub vodkit_exe: Option<PathBuf>,
    /// Draw progress on stderr.
    pub progress: bool,
}

impl BenchRequest {
    /// A request for `suts` over `workload`, writing into `out`, with every other choice at
    /// its default: plain disk, no budget, the default search, `strict`, one repeat.
    pub fn new(workload: &Path, suts: Vec<Sut>, out: &Path) -> BenchRequest {
        BenchRequest {
            workload: workload.to_path_buf(),
            root: None,
            suts,
            testbed: TestbedChoice::Plain,
            memory: None,
            server_cpus: None,
            search: None,
            criterion: Criterion::Strict,
            probes: None,
            players: None,
            repeat: 1,
            point_duration: None,
            fast_forward: Default::default(),
            early_stop: true,
            out: out.to_path_buf(),
            vodkit_exe: None,
            progress: false,
        }
    }
}

/// Checked form of a request.
pub struct Checked {
    pub suts: Vec<Sut>,
    pub testbed: TestbedChoice,
    pub memory: Option<u64>,
    pub server_cpus: Option<f64>,
    pub criterion: Criterion,
    pub plan_text: Option<String>,
}

/// Validate flags without touching the machine.
pub fn check_request(req: &BenchRequest) -> Result<Checked, RunError> {
    if req.repeat == 0 {
        return Err(RunError::Usage("--repeat must be at least 1".into()));
    }
    if let Some(s) = &req.search {
        SearchPlan::parse(s, &SearchPlan::failure_free_around(1.0)).map_err(RunError::Usage)?;
    }
    if !WorkloadDir::new(&req.workload).sessions_path().is_file() {
        return Err(RunError::Usage(format!(
            "--workload {}: no {} there (create one with `vodkit workload new`)",
            req.workload.display(),
            vodkit_workload::dir::SESSIONS
        )));
    }
    if let Some(c) = req.server_cpus {
        vodkit_disk::cpu::quota_us(c)
            .map_err(|e| RunError::Usage(format!("--server-cpus: {e}")))?;
    }
    if let Some(r) = &req.root {
        if !r.is_dir() {
            return Err(RunError::Usage(format!(
                "--root {}: not a directory",
                r.display()
            )));
        }
    }
    Ok(Checked {
        suts: req.suts.clone(),
        testbed: req.testbed.clone(),
        memory: req.memory,
        server_cpus: req.server_cpus,
        criterion: req.criterion,
        plan_text: req.search.clone(),
    })
}

/// A rough capacity guess in sessions/s from the workload: the rate at which the offered
/// load reaches `target_mb_s`.
pub fn rate_guess(load: &WorkloadLoad, target_mb_s: f64) -> f64 {
    let per_session_mb = (crate::warmup::mean_session_bytes(&load.sessions) / 1e6).max(0.01);
    (target_mb_s / per_session_mb).max(0.05)
}

/// Progress on stderr: a spinner for the running point, one line per finished point.
pub struct BarProgress {
    bar: ProgressBar,
    /// Print lines even when stderr is not a terminal.
    verbose: bool,
}

impl BarProgress {
    pub fn new(enabled: bool) -> BarProgress {
        let bar = if enabled {
            ProgressBar::new_spinner()
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        BarProgress {
            bar,
            verbose: enabled,
        }
    }

    pub fn message(&self, m: String) {
        self.bar.set_message(m);
    }

    pub fn line(&self, m: String) {
        if self.bar.is_hidden() {
            if self.verbose {
                eprintln!("{m}");
            }
        } else {
            self.bar.println(m);
        }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Progress for BarProgress {
    fn server_started(&mut self, sut: &Sut, index: usize, total: usize) {
        self.bar
            .set_message(format!("server {}/{total}: {sut} — starting", index + 1));
    }
    fn point(&mut self, sut: &Sut, t: &Trial<PointMetrics>) {
        let c = &t.detail.client;
        self.line(format!(
            "  {sut} repeat {} rate {:.3}/s: {} — {} steady sessions, {:.1} MB/s, {:.2}% failed, {} timeouts",
            t.repeat + 1,
            t.rate,
            match (t.passed, c.requests) {
                (true, _) if t.short => "SHORT (load not delivered)",
                (true, _) => "pass",
                // Sessions may all outlast the steady window of a failing point; it is
                // "no data" only when nothing was even requested.
                (false, 0) if c.stopped_early.is_none() => "NO DATA",
                (false, _) => "FAIL",
            },
            c.sessions,
            c.throughput_mb_s,
            c.failure_fraction * 100.0,
            c.timed_out_requests
        ));
        if let Some(e) = &c.stopped_early {
            self.line(format!("      {}", e.describe()));
        }
        if let Some(h) = &t.detail.fast_forward {
            self.line(format!(
                "      fast-forward: {:.0} s of history in {:.0} s ({:.0} MB delivered{}{})",
                h.window_s,
                h.wall_s,
                h.delivered_mb,
                h.delivered_fraction.map_or(String::new(), |f| format!(
                    ", {:.0}% of what it asked",
                    f * 100.0
                )),
                if h.server_clock {
                    ", server clock sped up"
                } else {
                    ""
                }
            ));
        }
        if let Some(st) = &t.detail.steadiness {
            self.line(format!(
                "      halves: {} — {}",
                st.describe(),
                if st.steady { "steady" } else { "NOT STEADY" }
            ));
        }
        if let Some(d) = &t.detail.device {
            self.line(format!(
                "      drive: {:.1} positionings/s, {} KiB/positioning, {:.0}% busy",
                d.positionings_per_s,
                d.kib_per_positioning
                    .map_or("–".into(), |k| format!("{k:.0}")),
                d.busy_fraction * 100.0
            ));
        }
        if let Some(e) = &t.detail.engine {
            self.line(format!(
                "      engine: {:.0}% of requested bytes in memory, reads of {:.2} MiB, positioning {}, queue wait {}",
                e.hit_fraction * 100.0,
                e.mean_read_bytes / 1048576.0,
                e.positioning_ms.map_or("–".into(), |ms| format!("{ms:.1} ms")),
                e.queue_wait_ms.map_or("–".into(), |ms| format!("{ms:.0} ms")),
            ));
        }
        if let Some(m) = t.detail.server_memory {
            self.line(format!(
                "      server cgroup peak {:.0} MiB ({:.0} MiB page cache, {:.0} MiB other)",
                m.peak_bytes as f64 / 1048576.0,
                m.peak_cache_bytes as f64 / 1048576.0,
                m.peak_other_bytes as f64 / 1048576.0
            ));
        }
        for l in t
            .detail
            .server_errors
            .iter()
            .filter(|l| l.contains(crate::child::EXITED_DURING_RUN))
        {
            self.line(format!("      {l}"));
        }
        if let Some(n) = t.detail.listen_overflows.filter(|&n| n > 0) {
            self.line(format!(
                "      {n} connections dropped by the kernel: listen queue full (SYNs retried after 1 s or more)"
            ));
        }
        if c.refused_sessions > 0 {
            self.line(format!(
                "      {} refused with 503 (p99 {:.0} ms); goodput {:.3} sessions/s played without a stall",
                c.refused_sessions,
                c.refusal_p99_ms,
                t.rate * c.goodput_fraction
            ));
        }
        self.bar
            .set_message(format!("{sut}: searching (last rate {:.3}/s)", t.rate));
    }
    fn server_done(&mut self, r: &ServerReport) {
        let what = match (r.max_failure_free_rate, &r.reason) {
            (Some(x), _) => format!("max failure-free rate {x:.3} sessions/s"),
            (None, Some(why)) => format!("{}: {why}", r.status),
            (None, None) => r.status.clone(),
        };
        self.line(format!("{}: {what}", r.sut));
    }
}

/// Bring up the testbed for `choice` and make sure the workload's file set is on it.
/// Returns the testbed and the roots to serve: one, or with `drives` > 1 on an emulated
/// disk one per drive (each origin of a cluster reads its own drive holding the same set).
///
/// `extra_room`: bytes of free space the image needs besides the file set (a disk-based
/// live origin's segments).
pub fn place(
    choice: &TestbedChoice,
    workload: &Path,
    root_override: Option<&Path>,
    players: Option<&BenchPlayers>,
    extra_room: u64,
    drives: usize,
    progress: &BarProgress,
) -> Result<(Box<dyn Testbed>, Vec<PathBuf>), RunError> {
    let (placed, root) = place_one(
        choice,
        workload,
        root_override,
        players,
        extra_room,
        progress,
    )?;
    let bed = match placed {
        Placed::Hdd(bed) if drives > 1 => bed,
        Placed::Hdd(bed) => return Ok((bed, vec![root])),
        Placed::Other(bed) => return Ok((bed, vec![root])),
    };
    progress.message(format!("copying the emulated disk for {drives} origins"));
    let dir = root
        .strip_prefix(&bed.mount)
        .map_err(|_| RunError::Runtime(format!("{} is not on the emulated disk", root.display())))?
        .to_string_lossy()
        .into_owned();
    let set = (*bed).replicate(drives).map_err(RunError::Runtime)?;
    let roots = set.roots(&dir);
    Ok((Box::new(set), roots))
}

/// What [`place_one`] brought up: the emulated disk (which a cluster replicates), or
/// another testbed.
enum Placed {
    Hdd(Box<crate::system::HddTestbed>),
    Other(Box<dyn Testbed>),
}

fn place_one(
    choice: &TestbedChoice,
    workload: &Path,
    root_override: Option<&Path>,
    players: Option<&BenchPlayers>,
    extra_room: u64,
    progress: &BarProgress,
) -> Result<(Placed, PathBuf), RunError> {
    // A media set lives apart from the synthetic files, on an image of its own (encoded
    // rates overshoot the ladder a little: a quarter more room).
    let (dir, image, mnt, room) = match players {
        None => ("files".to_string(), "hdd.img", "hdd-mnt", 1.0),
        Some(p) => (p.dir_name(), "hdd-media.img", "hdd-media-mnt", 1.25),
    };
    let (testbed, root) = match (choice, root_override) {
        (TestbedChoice::Plain, Some(r)) => {
            return Ok((Placed::Other(Box::new(PlainDisk)), r.to_path_buf()))
        }
        (TestbedChoice::Plain, None) => (Placed::Other(Box::new(PlainDisk)), workload.join(&dir)),
        (TestbedChoice::Hdd(_), Some(_)) => {
            return Err(RunError::Usage(
                "--root cannot be combined with --testbed hdd:…; the bench writes the file set onto the emulated disk".into(),
            ))
        }
        (TestbedChoice::Hdd(preset), None) => {
            let catalog = crate::prepare::catalog(workload).map_err(RunError::Usage)?;
            let bytes = (crate::prepare::fileset_bytes(&catalog) as f64 * room) as u64;
            let size = crate::system::HddTestbed::image_size_for(bytes) + extra_room;
            progress.message(format!("bringing up the emulated {preset} disk"));
            let bed = crate::system::HddTestbed::up(*preset, &workload.join(image), &workload.join(mnt), size)
                .map_err(RunError::Runtime)?;
            let root = bed.mount.join(&dir);
            (Placed::Hdd(Box::new(bed)), root)
        }
    };
    let catalog = crate::prepare::catalog(workload).map_err(RunError::Usage)?;
    if let Some(p) = players {
        progress.message(format!("writing the {} media set (ffmpeg)", p.format));
        let opts = vodkit_media::MediaOptions::new(p.format);
        vodkit_media::create(&catalog, &root, &opts)
            .map_err(|e| RunError::Runtime(format!("media set: {e}")))?;
        return Ok((testbed, root));
    }
    crate::prepare::write_fileset(&catalog, &root, |done, total| {
        progress.message(format!(
            "writing file set {} / {}",
            bytesize::ByteSize(done),
            bytesize::ByteSize(total)
        ))
    })
    .map_err(|e| RunError::Runtime(format!("file set: {e}")))?;
    Ok((testbed, root))
}

/// The capacity bound of a run on `choice` over `workload` (catalog.json) and the sessions
/// `load` replays, with `memory` (else this machine's total RAM), and notes for the report.
/// `None` on a plain disk (no drive model) or when it cannot be computed (the note says why).
pub fn capacity_bound(
    choice: &TestbedChoice,
    workload: &Path,
    load: &WorkloadLoad,
    memory: Option<u64>,
) -> (Option<crate::bound::CapacityBound>, Vec<String>) {
    capacity_bound_after(choice, workload, load, memory, None)
}

/// [`capacity_bound`] judged after the history a fast-forward plays before every point:
/// the bound over the sessions after `fill` budgets of requested bytes (whose intervals
/// they may reuse), the memory replay measured once that many bytes were requested.
pub fn capacity_bound_after(
    choice: &TestbedChoice,
    workload: &Path,
    load: &WorkloadLoad,
    memory: Option<u64>,
    history: Option<crate::warmup::FastForward>,
) -> (Option<crate::bound::CapacityBound>, Vec<String>) {
    let TestbedChoice::Hdd(preset) = choice else {
        return (
            None,
            vec!["capacity bound: not applicable (plain disk, no drive model)".into()],
        );
    };
    let mut notes = Vec::new();
    let memory = match memory {
        Some(m) => m,
        None => {
            let total = std::fs::read_to_string("/proc/meminfo")
                .map(|t| vodkit_disk::sys::parse_meminfo(&t).total)
                .unwrap_or(0);
            notes.push(format!(
                "capacity bound computed with this machine's total RAM ({}): no --memory budget was given",
                bytesize::ByteSize(total)
            ));
            total
        }
    };
    let classes = match &load.meta {
        Some(m) => m.client_classes.clone(),
        None => {
            notes.push(
                "capacity bound: no workload.json, so every client link counts as unlimited".into(),
            );
            Vec::new()
        }
    };
    let computed = crate::prepare::catalog(workload).and_then(|catalog| {
        let fileset = crate::prepare::fileset_bytes(&catalog);
        let image = crate::system::HddTestbed::image_size_for(fileset).max(64 << 20);
        let history_bytes = history.map_or(0.0, |ff| ff.fill * memory as f64);
        let per_session = crate::warmup::mean_session_bytes(&load.sessions);
        let history_sessions = if per_session > 0.0 {
            (history_bytes / per_session).ceil() as usize
        } else {
            0
        };
        let w =
            crate::bound::prepare_after(&catalog, &load.sessions, &classes, history_sessions)?;
        if history_sessions > 0 {
            notes.push(format!(
                "capacity bound and memory replay judged after the same history as the points: the bound over the sessions after the first {history_sessions} (about {} of requests, whose intervals it may reuse), the replay measured once that much was requested",
                bytesize::ByteSize(history_bytes as u64)
            ));
        }
        let mut b = crate::bound::for_testbed(&w, *preset, fileset, image, memory)?;
        let disk = crate::bound::testbed_terms(*preset, fileset, image)?;
        match crate::bound::manager_replay(
            &catalog,
            &load.sessions,
            &classes,
            disk,
            memory,
            b.bound_rate / 2.0,
            history_bytes as u64,
        ) {
            Ok(r) => b.manager_replay = Some(r),
            Err(e) => notes.push(format!("memory replay not computed: {e}")),
        }
        Ok(b)
    });
    match computed {
        Ok(b) => {
            notes.push(bound_note(&b));
            if let Some(r) = &b.manager_replay {
                notes.push(replay_note(r, b.bound_rate, b.hit_fraction));
            }
            (Some(b), notes)
        }
        Err(e) => {
            notes.push(format!("capacity bound not computed: {e}"));
            (None, notes)
        }
    }
}

/// One line describing a bound for the report's notes.
pub fn bound_note(b: &crate::bound::CapacityBound) -> String {
    format!(
        "capacity bound {:.2} sessions/s (any server, docs/bench.md): {} over {:.0}% of the surface, t_pos {:.1} ms{}, R {:.0} MB/s; {} budget − {} reserve = {} prefetch + {} intervals + {} in transfer to clients; {:.0} streams, {:.0}% hits, {:.0} MB/s from disk",
        b.bound_rate,
        b.drive,
        b.span_fraction * 100.0,
        b.positioning_ms,
        b.sweep_positioning_ms
            .map_or(String::new(), |t| format!(" ({t:.1} ms in sweeps)")),
        b.transfer_mb_s,
        bytesize::ByteSize(b.memory_bytes),
        bytesize::ByteSize(b.reserve_bytes),
        bytesize::ByteSize(b.prefetch_memory_bytes),
        bytesize::ByteSize(b.interval_memory_bytes),
        bytesize::ByteSize(b.transfer_memory_bytes),
        b.streams_at_bound,
        b.hit_fraction * 100.0,
        b.disk_mb_s,
    ) + &started_followers_note(b)
}

/// "; X sessions/s (Y% of it) keeping bytes only for sessions already started": the bound
/// without foresight of who comes next, when computed.
fn started_followers_note(b: &crate::bound::CapacityBound) -> String {
    match (b.started_followers_rate, b.started_followers_hit_fraction) {
        (Some(rate), Some(hits)) if b.bound_rate > 0.0 => format!(
            "; {rate:.2} sessions/s ({:.0}% of it) with {:.0}% hits keeping bytes only for sessions already started",
            100.0 * rate / b.bound_rate,
            100.0 * hits
        ),
        _ => String::new(),
    }
}

/// One line describing the memory manager's replay next to the bound it is read against.
pub fn replay_note(
    r: &vodkit_sim::replay::ReplayResult,
    bound_rate: f64,
    bound_hits: f64,
) -> String {
    format!(
        "memory replay (vodkit's memory manager on the bound's drive terms and budget, reads as large as its budget share, {}, {} with the drive at most {:.0}% busy, no CPU; docs/simulate.md): {:.2} sessions/s = {:.0}% of the bound, {:.0}% hits (requested bytes resident when asked, its own read-ahead included), {:.0}% of the requested bytes not read from disk (the bound: {:.0}% from kept intervals), reads of {} on average at {:.1} ms positioning, {:.0} MB/s from disk, peak resident {} of {} usable",
        match r.order.as_str() {
            "sweep" => "in sweeps",
            "deadline" => "by deadline",
            _ => "in arrival order",
        },
        match r.queue_wait_s {
            Some(w) => format!("reads waiting {w} s in the drive's queue on average"),
            None => "no queueing".to_string(),
        },
        100.0 * r.busy_limit,
        r.rate,
        100.0 * r.rate / bound_rate,
        100.0 * r.hit_fraction,
        100.0 * (1.0 - r.disk_bytes as f64 / r.requested_bytes.max(1) as f64),
        100.0 * bound_hits,
        bytesize::ByteSize(r.mean_read_bytes as u64),
        r.mean_positioning_ms,
        r.disk_mb_s,
        bytesize::ByteSize(r.peak_resident_bytes),
        bytesize::ByteSize(r.usable_bytes)
    )
}

/// One bench run over one workload: what a `vodkit bench` request and a scenario cell
/// have in common.
pub struct RunSetup<'a> {
    pub workload: &'a Path,
    /// File-set root to serve as is; `None`: write the file set onto the testbed.
    pub root: Option<&'a Path>,
    pub testbed: &'a TestbedChoice,
    pub memory: Option<u64>,
    /// CPU quota of each server (and its preload daemon), in cores.
    pub server_cpus: Option<f64>,
    pub suts: &'a [Sut],
    /// Longest load run per data point (`None`: the whole session list).
    pub point: Option<Duration>,
    /// The offered load (MB/s) the first rate guess aims at.
    pub guess_mb_s: f64,
    /// The search plan, given the rate guess and the capacity bound when known (sessions/s).
    pub plan: &'a dyn Fn(f64, Option<f64>) -> Result<SearchPlan, String>,
    pub criterion: Criterion,
    pub repeat: u32,
    /// Servers' run directories go under this one.
    pub run_base: PathBuf,
    /// The vodkit binary for `vodkit serve` and `vodkit prefetchd` children; `None`: the
    /// vodkit origin runs in this process (no memory budget possible).
    pub vodkit_exe: Option<&'a Path>,
    /// Prefix of progress messages (a cell's label).
    pub label: &'a str,
    /// Probe sessions per point (`--probe`).
    pub probes: Option<vodkit_load::probe::Probes>,
    /// Adaptive players on a real media set (`--player`).
    pub players: Option<&'a BenchPlayers>,
    /// After the servers, time a sequential read of the requested files (up to 2 GiB) on the
    /// testbed, while the file set is still in place.
    pub sequential_read: bool,
    /// The history played before every point ([`crate::warmup`]); `Auto` resolves it from
    /// the testbed, the budget and the CPU quota.
    pub fast_forward: crate::warmup::FastForwardChoice,
    /// End each point once its failure under the criterion is certain ([`crate::early`]).
    pub early_stop: bool,
}

/// A finished run: the report (servers carry their fraction of the bound), the bound, and
/// what the caller may still need (the sessions replayed, the root served).
pub struct Ran {
    pub report: BenchReport,
    pub bound: Option<crate::bound::CapacityBound>,
    pub load: WorkloadLoad,
    pub root: PathBuf,
    /// The sequential read (MB/s) when [`RunSetup::sequential_read`] asked for it, or why it
    /// could not be measured.
    pub sequential: Option<Result<f64, String>>,
}

/// Why a run did not start, and how its servers are reported: `skipped` (this machine
/// cannot host it) or `failed`.
#[derive(Debug)]
pub struct NotRun {
    pub error: RunError,
    pub status: &'static str,
}

impl NotRun {
    fn skipped(error: RunError) -> NotRun {
        NotRun {
            error,
            status: report::SKIPPED,
        }
    }
    fn failed(error: RunError) -> NotRun {
        NotRun {
            error,
            status: report::FAILED,
        }
    }
}

/// Assemble the rig for `setup` (testbed and file set, load driver, capacity bound,
/// launcher, memory budget, sampler) and run the search for every server.
pub fn run_workload(setup: &RunSetup<'_>, progress: &mut BarProgress) -> Result<Ran, NotRun> {
    let say = |what: &str| match setup.label {
        "" => what.to_string(),
        l => format!("{l}: {what}"),
    };
    // A file set that cannot be placed skips the servers; sessions that cannot be read
    // fail the run (after placing, so a missing catalog is reported first).
    let load = WorkloadLoad::open(setup.workload);
    let room = load
        .as_ref()
        .map_or(0, |l| crate::live::image_room(&l.sessions));
    // Each origin of a cluster entry reads a drive of its own.
    let drives = setup
        .suts
        .iter()
        .filter_map(|s| s.cluster.map(|c| c.origins))
        .max()
        .unwrap_or(1);
    let (mut testbed, roots) = place(
        setup.testbed,
        setup.workload,
        setup.root,
        setup.players,
        room,
        drives,
        progress,
    )
    .map_err(NotRun::skipped)?;
    let root = roots[0].clone();
    let mut load = load.map_err(|e| NotRun::failed(RunError::Usage(e)))?;
    load.max_duration = setup.point;
    if let Some(p) = setup.players {
        load.set_players(p.config.clone());
    }
    progress.message(say("computing the capacity bound"));
    let fast_forward = setup.fast_forward.resolve(
        matches!(setup.testbed, TestbedChoice::Hdd(_)),
        setup.memory,
        setup.server_cpus,
    );
    let (bound, mut bound_notes) = capacity_bound_after(
        setup.testbed,
        setup.workload,
        &load,
        setup.memory,
        fast_forward,
    );
    if bound.is_some() && setup.players.is_some() {
        bound_notes.push(
            "players: the capacity bound and the memory replay are computed from the workload's byte ranges at its nominal bit rates, while the players fetch the encoded media set at the rates the Players table shows; read % of bound as approximate"
                .into(),
        );
    }
    load.probes = setup.probes;
    // Readiness is checked on a file of the set: the first title's manifest (players), the
    // first request, else (live viewers only) the catalog's first file.
    let players_probe = setup.players.and_then(|p| {
        let c = crate::prepare::catalog(setup.workload).ok()?;
        p.probe_path(&c)
    });
    let probe = players_probe
        .or_else(|| load.probe_path())
        .or_else(|| {
            let c = crate::prepare::catalog(setup.workload).ok()?;
            let f = c.titles.first()?.renditions.first()?.files.first()?;
            Some(format!("/{}", f.path))
        })
        .unwrap_or_else(|| "/".into());
    let plan = (setup.plan)(
        rate_guess(&load, setup.guess_mb_s),
        bound.as_ref().map(|b| b.bound_rate),
    )
    .map_err(|e| NotRun::failed(RunError::Usage(e)))?;
    let mut launcher = LocalLauncher::new(root.clone(), setup.run_base.clone(), probe.clone());
    let dir = WorkloadDir::new(setup.workload);
    let catalog = dir.existing_catalog();
    launcher.vodkit = match setup.vodkit_exe {
        Some(exe) => Ok(Box::new(ChildVodkit {
            exe: exe.to_path_buf(),
            catalog: catalog.clone(),
            probe_path: probe,
        })),
        None => InProcessVodkit::new()
            .map(|v| Box::new(v) as Box<dyn crate::launch::VodkitStarter>)
            .map_err(|e| e.to_string()),
    };
    if setup.suts.iter().any(|s| s.preload.is_some()) {
        // The daemon gets the same bit rates as `vodkit serve --catalog`.
        launcher.preload =
            crate::preload::PreloadKit::locate(setup.vodkit_exe).map(|kit| match &catalog {
                Some(c) => kit.with_catalog(c.clone(), root.clone()),
                None => kit,
            });
    }
    let budget = crate::system::Budget::create(setup.memory, setup.server_cpus)
        .map_err(|e| NotRun::skipped(RunError::Runtime(e)))?;
    launcher.budget = budget.as_ref().and_then(|b| b.wrap());
    launcher.origin_budget = Some((setup.memory, setup.server_cpus));
    // Live viewers: every server is a live origin and every point runs a live source.
    if crate::live::LiveDemand::of(&load.sessions).is_some() {
        launcher.live = Some(load.live_origin.clone());
        load.live_feed = Some(crate::live::PushFeed::default());
    }
    let mut sampler =
        crate::system::ProcSampler::for_roots(&roots, budget.as_ref().and_then(|b| b.cgroup_dir()));
    launcher.origin_roots = roots;
    sampler.device_control = testbed.device_control();
    // A cluster of N origins has N drives and budgets: its plan is drawn from N times the
    // rate guess and the bound.
    let mut cluster_plans: Vec<(usize, SearchPlan)> = Vec::new();
    for n in setup
        .suts
        .iter()
        .filter_map(|s| s.cluster.map(|c| c.origins))
    {
        if n > 1 && cluster_plans.iter().all(|(m, _)| *m != n) {
            let guess = rate_guess(&load, setup.guess_mb_s) * n as f64;
            let p = (setup.plan)(guess, bound.as_ref().map(|b| b.bound_rate * n as f64))
                .map_err(|e| NotRun::failed(RunError::Usage(e)))?;
            cluster_plans.push((n, p));
        }
    }
    let settings = BenchSettings {
        fast_forward,
        workload: setup.workload.display().to_string(),
        memory_bytes: setup.memory,
        plan,
        cluster_plans,
        criterion: setup.criterion,
        repeat: setup.repeat,
        stop: crate::interrupt::token(),
    };
    load.stop = crate::interrupt::token();
    load.early_stop = setup.early_stop.then_some(setup.criterion);
    let mut rig = Rig {
        testbed: testbed.as_mut(),
        launcher: &mut launcher,
        load: &mut load,
        sampler: &mut sampler,
    };
    let mut rep = run_bench(&settings, setup.suts, &mut rig, progress);
    drop(budget);
    if let Some(c) = setup.server_cpus {
        for s in &mut rep.servers {
            s.cpu_quota = Some(c);
        }
        rep.notes.push(format!(
            "each server (with its preload daemon) ran under a CPU quota of {c} cores (cpu cgroup, CFS bandwidth; docs/bench.md \"CPU quota\"): its capacity measures CPU per viewer, not what the machine can deliver"
        ));
    }
    if let Some(b) = &bound {
        report::set_fractions(&mut rep.servers, b.bound_rate);
    }
    rep.notes.extend(bound_notes);
    // The testbed (and the file set on it) stays up until this function returns.
    let sequential = setup.sequential_read.then(|| {
        progress.message(say("sequential read of the requested files"));
        let wanted: std::collections::HashSet<String> = load
            .sessions
            .iter()
            .flat_map(|s| &s.requests)
            .map(|r| r.path.trim_start_matches('/').to_string())
            .collect();
        crate::prepare::catalog(setup.workload)
            .and_then(|c| crate::prepare::sequential_read_mb_s(&c, &root, &wanted, 2 << 30))
    });
    drop(testbed);
    Ok(Ran {
        report: rep,
        bound,
        load,
        root,
        sequential,
    })
}

/// Run the request and write bench.json, report.md and report.html into `out`.
pub fn run(req: &BenchRequest) -> Result<(BenchReport, String), RunError> {
    let checked = check_request(req)?;
    create_out(&req.out)?;
    let mut progress = BarProgress::new(req.progress);
    let plan = |guess: f64, bound: Option<f64>| match &checked.plan_text {
        Some(t) => SearchPlan::parse(t, &SearchPlan::default_for(guess, bound)),
        None => Ok(SearchPlan::default_for(guess, bound)),
    };
    let setup = RunSetup {
        workload: &req.workload,
        root: req.root.as_deref(),
        testbed: &checked.testbed,
        memory: checked.memory,
        server_cpus: checked.server_cpus,
        suts: &checked.suts,
        point: req.point_duration,
        guess_mb_s: 20.0,
        plan: &plan,
        criterion: checked.criterion,
        repeat: req.repeat,
        run_base: req.out.join("runs"),
        vodkit_exe: req.vodkit_exe.as_deref(),
        label: "",
        probes: req.probes,
        players: req.players.as_ref(),
        sequential_read: false,
        fast_forward: req.fast_forward,
        early_stop: req.early_stop,
    };
    let ran = run_workload(&setup, &mut progress);
    progress.finish();
    let mut ran = ran.map_err(|n| n.error)?;
    if let Some(b) = &ran.bound {
        report::apply_bound(&mut ran.report, b);
    }
    finish(&mut ran.report, &req.out)
}

/// Create the output directory `out` before any work, so that a directory that cannot be
/// written fails the command at once rather than after its points.
pub fn create_out(out: &Path) -> Result<(), RunError> {
    std::fs::create_dir_all(out)
        .map_err(|e| RunError::Runtime(format!("--out {}: {e}", out.display())))
}

/// Write the report files and return the terminal table with the file paths.
pub fn finish(rep: &mut BenchReport, out: &Path) -> Result<(BenchReport, String), RunError> {
    let problems = report::check(rep);
    for p in &problems {
        rep.notes.push(format!("report check: {p}"));
    }
    let w = report::write_all(rep, out)
        .map_err(|e| RunError::Runtime(format!("writing the report in {}: {e}", out.display())))?;
    let table = format!(
        "{}\nreport: {}\n        {}\n        {}\n",
        report::text::table(rep),
        w.html.display(),
        w.markdown.display(),
        w.json.display()
    );
    Ok((rep.clone(), table))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(dir: &Path) -> BenchRequest {
        BenchRequest::new(
            dir,
            crate::sut::parse_list("nginx").unwrap(),
            &dir.join("out"),
        )
    }

    #[test]
    fn the_replay_note_sets_bytes_not_read_beside_the_bounds_kept_intervals() {
        // 80% of the requested bytes were resident, but the replay read 70 of every 100
        // requested (its read-ahead is resident too): 30% came from memory it did not read
        // for them, the figure the bound's interval hits compare with.
        let r = vodkit_sim::replay::ReplayResult {
            rate: 10.0,
            requested_bytes: 1000,
            hit_bytes: 800,
            hit_fraction: 0.8,
            disk_bytes: 700,
            ..Default::default()
        };
        let note = replay_note(&r, 20.0, 0.45);
        assert!(
            note.contains("10.00 sessions/s = 50% of the bound, 80% hits"),
            "{note}"
        );
        assert!(
            note.contains(
                "30% of the requested bytes not read from disk (the bound: 45% from kept intervals)"
            ),
            "{note}"
        );
        // Reading more than was asked shows as a negative share, not a clipped one.
        let wasteful = vodkit_sim::replay::ReplayResult {
            disk_bytes: 1200,
            ..r
        };
        assert!(replay_note(&wasteful, 20.0, 0.45).contains("-20% of the requested bytes"));
    }

    #[test]
    fn a_cluster_is_judged_against_its_origins_times_the_bound() {
        let mut servers: Vec<report::ServerReport> = ["nginx", "cluster:3:vodkit@haproxy:title"]
            .iter()
            .zip([10.0, 30.0])
            .map(|(s, rate)| {
                let sut = crate::sut::parse_one(s).unwrap();
                let mut r =
                    report::ServerReport::not_measured(&sut, report::SKIPPED, String::new());
                r.max_failure_free_rate = Some(rate);
                r
            })
            .collect();
        report::set_fractions(&mut servers, 20.0);
        let got: Vec<Option<f64>> = servers.iter().map(|s| s.fraction_of_bound).collect();
        assert_eq!(got, [Some(0.5), Some(0.5)]);
    }

    #[test]
    fn a_testbed_prints_as_the_words_that_choose_it() {
        for words in ["plain", "hdd:wd-red", "hdd:seagate-7200"] {
            assert_eq!(TestbedChoice::parse(words).unwrap().to_string(), words);
        }
    }

    #[test]
    fn input_errors_are_usage_errors_naming_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let e = check_request(&req(dir.path())).err().unwrap();
        assert!(
            matches!(e, RunError::Usage(ref m) if m.contains("--workload") && m.contains("sessions.jsonl")),
            "{e}"
        );
        std::fs::write(dir.path().join("sessions.jsonl"), "").unwrap();
        for (edit, needle) in [
            (
                Box::new(|r: &mut BenchRequest| r.repeat = 0) as Box<dyn Fn(&mut BenchRequest)>,
                "--repeat",
            ),
            (
                Box::new(|r: &mut BenchRequest| r.search = Some("fixed-rates:a".into())),
                "fixed-rates",
            ),
            (
                Box::new(|r: &mut BenchRequest| r.server_cpus = Some(0.0)),
                "--server-cpus",
            ),
            (
                Box::new(|r: &mut BenchRequest| r.server_cpus = Some(f64::NAN)),
                "--server-cpus",
            ),
        ] {
            let mut r = req(dir.path());
            edit(&mut r);
            match check_request(&r) {
                Err(RunError::Usage(m)) => assert!(m.contains(needle), "{m}"),
                Err(e) => panic!("{needle}: not a usage error: {e}"),
                Ok(_) => panic!("{needle}: accepted"),
            }
        }
        assert!(check_request(&req(dir.path())).is_ok());
        let mut quarter = req(dir.path());
        quarter.server_cpus = Some(0.25);
        assert_eq!(
            check_request(&quarter).ok().unwrap().server_cpus,
            Some(0.25)
        );
    }

    #[test]
    fn a_run_that_cannot_start_says_why_and_how_its_servers_count() {
        let dir = tempfile::tempdir().unwrap();
        let suts = crate::sut::parse_list("nginx").unwrap();
        let plan = |g: f64, b: Option<f64>| -> Result<SearchPlan, String> {
            Ok(SearchPlan::default_for(g, b))
        };
        let mut setup = RunSetup {
            workload: dir.path(),
            root: None,
            testbed: &TestbedChoice::Plain,
            memory: None,
            server_cpus: None,
            suts: &suts,
            point: None,
            guess_mb_s: 20.0,
            plan: &plan,
            criterion: Criterion::Strict,
            repeat: 1,
            run_base: dir.path().join("runs"),
            vodkit_exe: None,
            label: "cell",
            probes: None,
            players: None,
            sequential_read: false,
            fast_forward: Default::default(),
            early_stop: true,
        };
        let fails = |setup: &RunSetup<'_>, status: &str, needle: &str| {
            let n = run_workload(setup, &mut BarProgress::new(false))
                .err()
                .unwrap();
            assert_eq!(n.status, status);
            let usage = matches!(n.error, RunError::Usage(ref m) if m.contains(needle));
            assert!(usage, "{:?}", n.error);
        };
        // No catalog.json: the file set cannot be placed, the servers are skipped.
        fails(&setup, report::SKIPPED, "catalog.json");
        // A file set given as is, but no sessions: the run failed.
        let root = dir.path().join("files");
        std::fs::create_dir_all(&root).unwrap();
        setup.root = Some(&root);
        fails(&setup, report::FAILED, "sessions.jsonl");
    }

    #[test]
    fn testbed_choice_parses() {
        assert_eq!(
            TestbedChoice::parse("hdd:wd-red").unwrap(),
            TestbedChoice::Hdd(vodkit_disk::model::Preset::WdRed)
        );
        assert!(TestbedChoice::parse("hdd:").is_err());
        let e = TestbedChoice::parse("hdd:floppy").unwrap_err();
        assert!(e.contains("floppy") && e.contains("wd-red"), "{e}");
    }
}
