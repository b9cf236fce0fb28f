//! `vodkit workload`: generate workloads, show specs, import and export session logs.

use super::usage;
use clap::Subcommand;
use std::path::PathBuf;
use std::time::Instant;
use vodkit_workload::exchange::{self, ExchangeError};
use vodkit_workload::generate::{write_workload, Plan};
use vodkit_workload::logfmt::LogFormat;
use vodkit_workload::spec;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: WorkloadCommand,
}

#[derive(Subcommand)]
enum WorkloadCommand {
    /// Generate catalog.json, sessions.jsonl, workload.json, warmup.jsonl and summary.json.
    New(NewArgs),
    /// List the built-in specs or print one as TOML.
    Spec {
        #[command(subcommand)]
        command: SpecCommand,
    },
    /// Write a workload's sessions as an httperf-family log (one per load host with --clients).
    Export(ExportArgs),
    /// Read a session log (thesis, videoperf, httperf or jsonl) into a workload directory.
    Import(ImportArgs),
    /// Synthesize a Netflix-style access log and its ground truth (no server needed).
    SynthLog(super::synth::Args),
    /// Rebuild viewing sessions from a server access log (combined, common, JSON, nginx,
    /// vodkit or Netflix CSV) into sessions.jsonl + catalog.json + summary.json.
    FromLog(FromLogArgs),
}

#[derive(clap::Args)]
struct FromLogArgs {
    /// The access log to read.
    #[arg(long)]
    log: PathBuf,
    /// Its format (default: detected from the first line).
    #[arg(long = "log-format", alias = "format", default_value = "auto")]
    format: vodkit_trace::LogFormat,
    /// Workload directory to write.
    #[arg(long)]
    out: PathBuf,
    /// A client silent this long on a file starts a new session there.
    #[arg(long, default_value = "60s", value_name = super::flags::DURATION, value_parser = super::flags::duration)]
    idle: std::time::Duration,
    /// Bit rate assumed for the catalog's title durations (the log does not say).
    #[arg(long, default_value = "1000kbit/s", value_name = super::flags::BITRATE, value_parser = super::flags::bit_rate)]
    bitrate: u64,
    /// The bit rate in kbit/s (older spelling of --bitrate).
    #[arg(long, hide = true, conflicts_with = "bitrate", value_parser = super::flags::kbps_as_bit_rate)]
    bitrate_kbps: Option<u64>,
    /// Keep file paths as logged (default: replaced by a keyed hash).
    #[arg(long)]
    keep_identities: bool,
    /// Key of the path hash, so that two runs name files alike (default: a random key
    /// that is not kept).
    #[arg(long, conflicts_with = "keep_identities")]
    key: Option<String>,
    /// Threads parsing the log (default: all cores); the output does not depend on it.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// Memory for held requests and finished sessions; past it, sessions waiting to be
    /// written in order are spilled to sorted runs in the output directory.
    #[arg(long, default_value = "512MiB", value_name = super::flags::SIZE, value_parser = super::flags::size)]
    memory: u64,
    /// Longest service time for which sessions are exactly those of a whole-log rebuild
    /// (a client's requests are held this long after their last completion).
    #[arg(long, default_value = "1h", value_name = super::flags::DURATION, value_parser = super::flags::duration)]
    max_service: std::time::Duration,
    /// Sort the log by completion time first (external merge sort within --memory, runs
    /// spilled in the output directory): for logs not in completion order.
    #[arg(long)]
    sort: bool,
}

#[derive(clap::Args)]
struct NewArgs {
    /// Built-in spec name (see `vodkit workload spec list`) or a spec TOML file.
    #[arg(long)]
    spec: String,
    /// Seed of every random draw (default: the spec's own seed).
    #[arg(long)]
    seed: Option<u64>,
    /// Multiply title and session counts (distributions stay the same).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Override a spec field: `request=2MiB`, `catalog.zipf_alpha=0.6`,
    /// `catalog.collections.sd.titles=500`, `layout=chunked:2MiB`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Subcommand)]
enum SpecCommand {
    /// Names of the built-in specs.
    List,
    /// Print a built-in spec as TOML (a starting point for your own).
    Show { name: String },
}

#[derive(clap::Args)]
struct ExportArgs {
    /// Log dialect to write.
    #[arg(long)]
    format: LogFormat,
    /// Split sessions round-robin into N logs, written as OUT/client-NN.log.
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Workload directory (its sessions.jsonl) or a session log file.
    #[arg(long = "in")]
    input: PathBuf,
    /// Output file (or directory with --clients > 1).
    #[arg(long)]
    out: PathBuf,
}

#[derive(clap::Args)]
struct ImportArgs {
    /// Dialect of FILE (default: detected from its content).
    #[arg(long = "log-format", alias = "format")]
    format: Option<LogFormat>,
    /// The session log to read.
    file: PathBuf,
    /// Workload directory to write sessions.jsonl (and workload.json if absent) into.
    #[arg(long)]
    out: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        WorkloadCommand::New(a) => new(a),
        WorkloadCommand::Spec { command } => spec_cmd(command),
        WorkloadCommand::Export(a) => export(a),
        WorkloadCommand::Import(a) => import(a),
        WorkloadCommand::SynthLog(a) => super::synth::run(a),
        WorkloadCommand::FromLog(a) => from_log(a),
    }
}

fn new(a: NewArgs) -> anyhow::Result<()> {
    let sets = super::flags::spec_sets(&a.sets)?;
    let started = Instant::now();
    if a.spec == spec::NETFLIX {
        let summary =
            vodkit_workload::netflix::new_workload(a.seed.unwrap_or(1), a.scale, &sets, &a.out)
                .map_err(usage)?;
        println!("{summary}");
        return Ok(());
    }
    let checked = spec::load(&a.spec, &sets, a.scale).map_err(usage)?;
    let seed = a.seed.unwrap_or(checked.spec.seed);
    let name = checked.spec.name.clone();
    let plan = Plan::new(checked, seed);
    let summary = write_workload(&plan, &a.out)
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", a.out.display()))?;
    let heading = format!(
        "{name} (seed {seed}) -> {} in {:.2} s",
        a.out.display(),
        started.elapsed().as_secs_f64()
    );
    print!("{}", summary.table(&heading));
    Ok(())
}

fn spec_cmd(c: SpecCommand) -> anyhow::Result<()> {
    match c {
        SpecCommand::List => {
            for name in spec::builtin_names() {
                println!("{name}");
            }
            Ok(())
        }
        SpecCommand::Show { name } => match spec::builtin_text(&name) {
            Some(text) => {
                print!("{text}");
                Ok(())
            }
            None if name == spec::NETFLIX => Err(usage(format!(
                "{name} is generated by the Netflix model and has no TOML form; see docs/workload.md"
            ))),
            None => Err(usage(format!(
                "no built-in spec `{name}` (available: {})",
                spec::builtin_names().join(", ")
            ))),
        },
    }
}

fn exchange_err(e: ExchangeError) -> anyhow::Error {
    match e {
        ExchangeError::Io { .. } => anyhow::anyhow!("{e}"),
        _ => usage(e),
    }
}

fn export(a: ExportArgs) -> anyhow::Result<()> {
    let sessions = exchange::read_sessions(&a.input, None).map_err(exchange_err)?;
    let files = exchange::export(&sessions, a.format, a.clients, &a.out).map_err(exchange_err)?;
    println!(
        "wrote {} sessions as {} to {} file(s), first {}",
        sessions.len(),
        a.format,
        files.len(),
        files[0].display()
    );
    Ok(())
}

fn import(a: ImportArgs) -> anyhow::Result<()> {
    let n = exchange::import(&a.file, a.format, &a.out).map_err(exchange_err)?;
    println!("imported {n} sessions into {}", a.out.display());
    Ok(())
}

fn from_log(a: FromLogArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let file =
        std::fs::File::open(&a.log).map_err(|e| usage(format!("{}: {e}", a.log.display())))?;
    let opt = vodkit_trace::fromlog::FromLogOptions {
        idle_s: a.idle.as_secs_f64(),
        bitrate_kbps: u32::try_from(a.bitrate_kbps.unwrap_or(a.bitrate) / 1000)
            .unwrap_or(u32::MAX)
            .max(1),
        keep_identities: a.keep_identities,
        key: a.key.clone().map(String::into_bytes),
        ..Default::default()
    };
    let read_opts = vodkit_trace::read::ReadOptions {
        format: a.format,
        threads: a
            .threads
            .map_or_else(vodkit_trace::read::all_cores, usize::from),
        ..Default::default()
    };
    std::fs::create_dir_all(&a.out)
        .map_err(|e| anyhow::anyhow!("creating {}: {e}", a.out.display()))?;
    let limits = vodkit_trace::fromlog::StreamOptions {
        max_service_s: a.max_service.as_secs_f64(),
        order_tolerance_s: read_opts.order_tolerance_s,
        memory_bytes: usize::try_from(a.memory).unwrap_or(usize::MAX),
        spill_dir: a.out.clone(),
    };
    let mut rebuilder = vodkit_trace::fromlog::StreamRebuilder::new(&opt, &limits);
    let input = std::io::BufReader::new(file);
    let read = if a.sort {
        let (sorted, read) =
            vodkit_trace::sort::sort_log(input, &read_opts, limits.memory_bytes, &a.out)
                .map_err(|e| anyhow::anyhow!("sorting {}: {e}", a.log.display()))?;
        let sorted_opts = vodkit_trace::read::ReadOptions {
            format: vodkit_trace::LogFormat::Netflix,
            ..read_opts.clone()
        };
        vodkit_trace::read::read_log_with(
            std::io::BufReader::with_capacity(1 << 20, sorted),
            &sorted_opts,
            |r| rebuilder.add(r),
        )
        .map_err(|e| anyhow::anyhow!("reading {} (sorted): {e}", a.log.display()))?;
        read
    } else {
        vodkit_trace::read::read_log_with(input, &read_opts, |r| rebuilder.add(r))
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", a.log.display()))?
    };
    if read.requests == 0 {
        return Err(usage(format!(
            "{}: no request could be read ({})",
            a.log.display(),
            read.describe()
        )));
    }
    let mut rebuilt = rebuilder.finish().map_err(|e| anyhow::anyhow!(e))?;
    let dir = vodkit_workload::WorkloadDir::new(&a.out);
    let write = |what: &str, r: std::io::Result<()>| {
        r.map_err(|e| anyhow::anyhow!("writing {what} in {}: {e}", a.out.display()))
    };
    write("catalog.json", dir.write_catalog(&rebuilt.catalog))?;
    write(
        "sessions.jsonl",
        dir.write_session_stream(&mut rebuilt.sessions),
    )?;
    if let Some(e) = rebuilt.sessions.error() {
        return Err(anyhow::anyhow!(
            "reading back spilled sessions in {}: {e}",
            a.out.display()
        ));
    }
    let summary = serde_json::json!({ "from_log": rebuilt.summary, "read": read });
    write(
        "summary.json",
        std::fs::write(
            a.out.join("summary.json"),
            serde_json::to_string_pretty(&summary)? + "\n",
        ),
    )?;
    let s = &rebuilt.summary;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{}: {} requests -> {} sessions over {} files in {:.2} s ({:.0} requests/s); {}",
        a.log.display(),
        s.requests,
        s.sessions,
        s.files,
        secs,
        s.requests as f64 / secs.max(1e-9),
        read.describe()
    );
    println!(
        "the log's session rate: {:.3}/s over {:.0} s (replay it with vodkit load --rate {:.3}); identities {}",
        s.log_session_rate, s.log_span_s, s.log_session_rate, s.identities
    );
    if let Some(m) = &s.stream {
        println!(
            "memory: peak {:.1} MiB held of {:.1} MiB, {:.1} MiB spilled, {} viewers open at most",
            m.peak_held_bytes as f64 / 1048576.0,
            m.memory_limit_bytes as f64 / 1048576.0,
            m.spilled_bytes as f64 / 1048576.0,
            m.peak_open_viewers
        );
        if m.late_requests > 0 {
            eprintln!(
                "warning: {} requests arrived after sessions they could belong to were written \
                 (served longer than --max-service, or the log is out of order): sessions \
                 around them may be split",
                m.late_requests
            );
        }
        if m.peak_held_bytes > m.memory_limit_bytes {
            eprintln!(
                "warning: the open clients' requests alone passed --memory (clients active \
                 for long, or a long --max-service)"
            );
        }
    }
    println!(
        "next: vodkit fileset create --workload {0} --root ROOT; vodkit load --sessions {0}/sessions.jsonl",
        a.out.display()
    );
    Ok(())
}
