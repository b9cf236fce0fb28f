//! `vodkit load`: replay a session log against an HTTP server and measure it; `vodkit load
//! merge` combines results.json files from several load hosts. Logic is in `vodkit-load`.

use super::usage;
use anyhow::Context;
use clap::Subcommand;
use std::path::{Path, PathBuf};
use std::time::Duration;
use vodkit_load::{input, CancellationToken, LinkMode, LoadConfig, Results, Target};
use vodkit_workload::dir::{read_meta, read_warmup};
use vodkit_workload::logfmt::LogFormat;
use vodkit_workload::WorkloadDir;

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<LoadCommand>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum LoadCommand {
    /// Merge results.json files of load hosts that ran at the same time.
    Merge(MergeArgs),
}

#[derive(clap::Args)]
struct MergeArgs {
    /// results.json files to merge; a directory stands for its `*.json` files (except
    /// the `--out` file), e.g. the results volume of a sharded run.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Write the merged results here instead of printing a summary.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the merged results as JSON on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Server under test, `http://HOST:PORT` or `https://HOST:PORT` (loopback unless
    /// --allow-remote; https needs --ca or --insecure).
    #[arg(long)]
    target: Option<String>,
    /// Session log (sessions.jsonl or an httperf-family wsesslog).
    #[arg(long)]
    sessions: Option<PathBuf>,
    /// Dialect of the session log.
    #[arg(long = "log-format", alias = "format", default_value = "auto", value_parser = parse_format)]
    format: FormatChoice,
    /// Sessions started per second (Poisson arrivals from the log's gaps), e.g. 2, 0.5/s
    /// or 120/min.
    #[arg(long, default_value = "1", value_name = super::flags::SESSION_RATE, value_parser = super::flags::session_rate)]
    rate: f64,
    /// Run at most this many sessions of the log.
    #[arg(long)]
    max_sessions: Option<usize>,
    /// Stop after this long (e.g. `10m`); sessions still running are cancelled.
    #[arg(long, value_name = super::flags::DURATION, value_parser = super::flags::duration)]
    duration: Option<Duration>,
    /// Check every received byte against the file set's deterministic content.
    #[arg(long)]
    verify: bool,
    /// Write results.json here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print results.json on stdout instead of the readable summary.
    #[arg(long)]
    json: bool,
    /// Write one CSV row per request here.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write one CSV row per player session here (`--player` or live viewers): start-up,
    /// stalls, switches, kept bit rate, abandoned downloads, seeks and the bit-rate timeline.
    #[arg(long, value_name = "FILE")]
    players_csv: Option<PathBuf>,
    /// workload.json with client classes and ramps (default: beside the session log).
    #[arg(long)]
    workload: Option<PathBuf>,
    /// Do not emulate client links (bandwidth, delay) even if workload.json defines them.
    #[arg(long)]
    no_link: bool,
    /// Where class bandwidth is limited: `user` (token bucket on reads) or `kernel` (htb
    /// in a network namespace per class; needs root and iproute2, and a server listening
    /// on 0.0.0.0). One-way delay is emulated in user space either way.
    #[arg(long, default_value = "user", value_parser = parse_link)]
    link: LinkMode,
    /// Warm the server up with the most popular chunks (warmup.jsonl beside the log).
    #[arg(long)]
    warmup: bool,
    /// Warm-up list to use instead of warmup.jsonl beside the log (implies --warmup).
    #[arg(long)]
    warmup_file: Option<PathBuf>,
    /// Number of warm-up requests (default: workload.json's warmup_chunks, else all).
    #[arg(long)]
    warmup_chunks: Option<u64>,
    /// Sessions at the start excluded from the steady state (default from workload.json).
    #[arg(long)]
    ramp_up_sessions: Option<u64>,
    /// Sessions at the end excluded from the steady state.
    #[arg(long)]
    ramp_down_sessions: Option<u64>,
    /// Requests at the start excluded from the steady state.
    #[arg(long)]
    ramp_up_requests: Option<u64>,
    /// Requests at the end excluded from the steady state.
    #[arg(long)]
    ramp_down_requests: Option<u64>,
    /// Start as if the run had already been going: `auto` shifts the arrival schedule back
    /// by the longest session, so sessions already playing start mid-title at their next
    /// due request and the server sees steady concurrency from the first second (they load
    /// it but are not judged as sessions). `off` (default), `auto` or seconds.
    #[arg(long, default_value = "off", value_parser = vodkit_load::WarmStart::parse, value_name = "off|auto|SECONDS")]
    warm_start: vodkit_load::WarmStart,
    /// Latency percentiles to print and store (e.g. `50,90,95,99,99.9`), from the
    /// HdrHistograms in results.json; default p50/p90/p99/p99.9/max.
    #[arg(long, value_parser = parse_percentile_list, value_name = "LIST")]
    percentiles: Option<PercentileList>,
    /// Run shard I of N (0-based): the sessions at positions I, I+N, I+2N… of the log, at
    /// the times the whole run would start them. Merge the shards' results with
    /// `vodkit load merge`. See docs/load.md "Sharded runs".
    #[arg(long, value_parser = vodkit_load::Shard::parse, value_name = "I/N")]
    shard: Option<vodkit_load::Shard>,
    /// Start the run's clock at this wall time (RFC 3339 or Unix seconds), after warm-up,
    /// so that shards on several hosts begin together.
    #[arg(long, value_parser = vodkit_load::shard::parse_start_at, value_name = "TIME")]
    start_at: Option<std::time::SystemTime>,
    /// Content the modelled player buffers before playback starts and after a stall (QoS),
    /// e.g. `2s` (default: workload.json's `startup_buffer_s`, else 2 s).
    #[arg(long, value_name = super::flags::DURATION, value_parser = super::flags::duration)]
    startup_buffer: Option<Duration>,
    #[command(flatten)]
    players: PlayerArgs,
    /// Live viewers (sessions with `live`, e.g. the `matrix-L*`/`M*` specs) find stream K
    /// at `PREFIX/stream-K/index.m3u8` (as `vodkit live push --prefix` publishes it).
    #[arg(long, default_value = "/live/", value_name = "PREFIX")]
    live_prefix: String,
    /// Streams the live source publishes: a viewer of stream k watches stream k mod N
    /// (default: stream k itself).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    live_streams: Option<u32>,
    /// Low-latency live viewing: `auto` follows a stream the low-latency way when it
    /// offers it (LL-HLS parts, preload hints and blocking reloads; with `--player dash`,
    /// LL-DASH segments read while being written), `off` always as a classic viewer.
    #[arg(long, value_enum, default_value = "auto", value_name = "auto|off")]
    low_latency: LowLatency,
    /// Run N probe sessions of LEN each during steady state and report their quality
    /// apart (`probes` in results.json; seed 004 used 20 probes of 60 s): `--probe 20,60s`.
    #[arg(long, value_name = "N,LEN")]
    probe: Option<vodkit_load::probe::Probes>,
    /// Retry a request that failed on its connection (refused, reset, cut short, a 5xx other
    /// than 503) once on a fresh connection, within its timeout, as a player does; counted
    /// in results.json (`run.retried_requests`). Default: the first failure ends the session.
    #[arg(long)]
    retry: bool,
    #[command(flatten)]
    status: super::flags::StatusLine,
    /// Worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
    /// Allow a target that is not a loopback address.
    #[arg(long)]
    allow_remote: bool,
    #[command(flatten)]
    tls: super::tls::ClientTls,
    /// HTTP version the viewers speak: 1.1, or 2 (each viewer's requests multiplexed as
    /// streams of one connection: TLS with ALPN h2 for an https:// --target, cleartext
    /// prior knowledge (h2c) for http://). A viewer's connection indexes then share that
    /// one connection.
    #[arg(long, default_value = "1.1", value_name = "1.1|2")]
    http: vodkit_load::HttpVersion,
    #[command(flatten)]
    sign: super::flags::SignUrls,
}

/// `--low-latency`: follow live streams the low-latency way when they offer it, or never.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LowLatency {
    Auto,
    Off,
}

fn parse_link(s: &str) -> Result<LinkMode, String> {
    match s {
        "user" => Ok(LinkMode::User),
        "kernel" => Ok(LinkMode::Kernel),
        _ => Err(format!("expected user or kernel, got {s:?}")),
    }
}

/// The adaptive-player flags, shared by `vodkit load` and `vodkit bench` (one vocabulary).
#[derive(clap::Args, Debug, Clone)]
pub struct PlayerArgs {
    /// Play each session's title as an adaptive player from a real media set
    /// (`vodkit fileset create --media`): `/tID/manifest.mpd` (dash) or `/tID/master.m3u8`
    /// (hls), for as long as the session's requests watch. See docs/load.md "Players".
    #[arg(long, value_name = "dash|hls")]
    player: Option<vodkit_load::player::Protocol>,
    /// The players' rendition rule: throughput (dash.js ThroughputRule), buffer (BBA-0) or
    /// hybrid (dash.js "dynamic").
    #[arg(
        long,
        default_value = "hybrid",
        requires = "player",
        value_name = "throughput|buffer|hybrid"
    )]
    abr: vodkit_load::player::abr::Rule,
    /// Players stop fetching while this much media is buffered.
    #[arg(long, default_value = "30s", value_name = super::flags::DURATION, value_parser = super::flags::duration, requires = "player")]
    buffer_target: Duration,
    /// Segments a player buffers before playback starts.
    #[arg(long, default_value_t = 2, requires = "player")]
    startup_segments: u32,
    /// Players never give up a slow segment download (by default they abandon one that
    /// would take over 1.8 segment durations and outlast the buffer, as dash.js and hls.js do,
    /// and fetch it again from a lower rendition).
    #[arg(long, requires = "player")]
    no_abandon: bool,
    /// Spread each byte-range segment download (DASH SegmentBase, HLS byte ranges) over this
    /// many connections at once, in equal parts, as the Netflix clients of thesis Table 5.3
    /// did (1-16; a session's `play.connections` overrides it).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16), requires = "player")]
    player_connections: u32,
}

impl PlayerArgs {
    /// The players' settings, `None` without `--player`.
    pub fn config(&self) -> Option<vodkit_load::player::PlayerConfig> {
        let protocol = self.player?;
        let mut p = vodkit_load::player::PlayerConfig::new(protocol);
        p.rule = self.abr;
        p.buffer_target_s = self.buffer_target.as_secs_f64();
        p.startup_segments = self.startup_segments.max(1);
        if self.no_abandon {
            p.abandon = None;
        }
        p.connections = self.player_connections;
        Some(p)
    }
}

#[derive(Clone, Copy)]
struct FormatChoice(Option<LogFormat>);

fn parse_format(s: &str) -> Result<FormatChoice, String> {
    if s == "auto" {
        return Ok(FormatChoice(None));
    }
    s.parse().map(|f| FormatChoice(Some(f)))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        Some(LoadCommand::Merge(m)) => merge(m),
        None => run_load(args.run),
    }
}

fn run_load(a: RunArgs) -> anyhow::Result<()> {
    let target = a
        .target
        .as_deref()
        .ok_or_else(|| usage("--target is required (e.g. --target http://127.0.0.1:8080)"))?;
    let target = Target::parse(target, a.allow_remote).map_err(usage)?;
    let sessions_path = a
        .sessions
        .clone()
        .ok_or_else(|| usage("--sessions is required (a sessions.jsonl or wsesslog file)"))?;
    let (sessions, format) = input::read_sessions(&sessions_path, a.format.0).map_err(usage)?;
    // workload.json and warmup.jsonl come from beside the session log unless named.
    let beside = WorkloadDir::beside(&sessions_path);
    let meta_path = a.workload.clone().or_else(|| beside.existing_meta());
    let meta = match &meta_path {
        Some(p) => Some(read_meta(p).map_err(usage)?),
        None => None,
    };
    let mut config = LoadConfig::new(target, sessions, a.rate);
    config.source = format!("{} ({format})", sessions_path.display());
    if let (Some(meta), Some(p)) = (&meta, &meta_path) {
        if !a.no_link {
            input::check_classes(&config.sessions, meta, &p.display().to_string())
                .map_err(usage)?;
        }
        config.apply_meta(meta);
    }
    if a.no_link {
        config.links.clear();
    }
    if a.warmup || a.warmup_file.is_some() {
        let path = a
            .warmup_file
            .clone()
            .or_else(|| beside.existing_warmup())
            .ok_or_else(|| {
                usage("--warmup: no warmup.jsonl beside the session log (use --warmup-file)")
            })?;
        let limit = a.warmup_chunks.or(meta
            .as_ref()
            .map(|m| m.measurement.warmup_chunks)
            .filter(|&n| n > 0));
        config.warmup = read_warmup(&path, limit).map_err(usage)?;
    }
    let ramp = &mut config.ramp;
    ramp.up_sessions = a.ramp_up_sessions.unwrap_or(ramp.up_sessions);
    ramp.down_sessions = a.ramp_down_sessions.unwrap_or(ramp.down_sessions);
    ramp.up_requests = a.ramp_up_requests.unwrap_or(ramp.up_requests);
    ramp.down_requests = a.ramp_down_requests.unwrap_or(ramp.down_requests);
    if let Some(b) = a.startup_buffer {
        config.startup_buffer_s = b.as_secs_f64();
    }
    config.max_sessions = a.max_sessions;
    config.duration = a.duration;
    config.verify = a.verify;
    config.tls = a.tls.client(&config.target).map_err(usage)?;
    config.http = a.http;
    config.sign = a.sign.signer()?;
    config.progress = a.status.progress;
    config.quiet = a.status.quiet;
    config.workers = a.threads;
    config.stop_on_interrupt = true;
    config.link_mode = a.link;
    config.warm_start = a.warm_start;
    config.percentiles = a.percentiles.clone().map(|p| p.0).unwrap_or_default();
    config.shard = a.shard;
    config.start_at = a.start_at;
    if !a.live_prefix.starts_with('/') {
        return Err(usage(format!(
            "--live-prefix `{}`: expected a path starting with /",
            a.live_prefix
        )));
    }
    config.live.prefix = a.live_prefix.clone();
    config.live.streams = a.live_streams;
    config.live.low_latency = a.low_latency == LowLatency::Auto;
    config.probes = a.probe;
    config.retry = a.retry;
    config.player = a.players.config();
    if a.no_link && a.link == LinkMode::Kernel {
        return Err(usage("--no-link and --link kernel contradict each other"));
    }

    let run = vodkit_load::run(config, CancellationToken::new()).map_err(|e| match e {
        vodkit_load::LoadError::Input(e) => usage(e),
        other => anyhow::Error::new(other),
    })?;
    if let Some(path) = &a.out {
        write_json(path, &run.results)?;
    }
    if let Some(path) = &a.csv {
        let file = std::fs::File::create(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        vodkit_load::write_csv(std::io::BufWriter::new(file), &run.sessions)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &a.players_csv {
        let file = std::fs::File::create(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        vodkit_load::write_players_csv(std::io::BufWriter::new(file), &run.sessions)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&run.results)?);
    } else {
        print!("{}", run.results.summary());
    }
    Ok(())
}

fn write_json(path: &PathBuf, results: &Results) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(results)?;
    std::fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

/// The merge inputs with directories replaced by their `*.json` files, in name order.
fn merge_inputs(m: &MergeArgs) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for p in &m.inputs {
        if !p.is_dir() {
            files.push(p.clone());
            continue;
        }
        let entries = std::fs::read_dir(p).map_err(|e| usage(format!("{}: {e}", p.display())))?;
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|f| f.extension().is_some_and(|x| x == "json") && f.is_file())
            .filter(|f| m.out.as_ref().is_none_or(|o| !same_file(o, f)))
            .collect();
        if found.is_empty() {
            return Err(usage(format!(
                "{}: no *.json results in this directory",
                p.display()
            )));
        }
        found.sort();
        files.extend(found);
    }
    Ok(files)
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

fn merge(m: MergeArgs) -> anyhow::Result<()> {
    let mut parts = Vec::new();
    for p in &merge_inputs(&m)? {
        let text =
            std::fs::read_to_string(p).map_err(|e| usage(format!("{}: {e}", p.display())))?;
        let r: Results = serde_json::from_str(&text).map_err(|e| {
            usage(format!(
                "{}:{}: not a vodkit results file: {e}",
                p.display(),
                e.line()
            ))
        })?;
        parts.push(r);
    }
    let merged = Results::merge(&parts).map_err(usage)?;
    if let Some(out) = &m.out {
        write_json(out, &merged)?;
    }
    if m.json {
        println!("{}", serde_json::to_string_pretty(&merged)?);
    } else {
        print!("{}", merged.summary());
    }
    Ok(())
}

/// `--percentiles` as one value (clap would otherwise take a `Vec` as repeated values).
#[derive(Clone, Debug)]
struct PercentileList(Vec<f64>);

fn parse_percentile_list(text: &str) -> Result<PercentileList, String> {
    vodkit_load::hist::parse_percentiles(text).map(PercentileList)
}
