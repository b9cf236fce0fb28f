//! `vodkit trace`: chains, phases and a characterization report from an access
//! log. Logic lives in `vodkit_trace`; this module parses flags and wires files.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Subcommand;
use vodkit_trace::analyze::{analyze, AnalyzeOptions};
use vodkit_trace::output::{write_json, DirSink, PassSummary};
use vodkit_trace::phase::PhaseParams;
use vodkit_trace::read::Progress;
use vodkit_trace::{FileTable, LogFormat};

use super::{flags, usage};
use std::time::Duration;

#[derive(Subcommand)]
pub enum TraceCommand {
    /// Find chains of adjacent requests: chains.csv and chains.json (Table 5.4, Figs 5.11-5.13).
    Chains(Common),
    /// Find transient, stable and inactive phases: phases.csv and phases.json.
    Phases(Common),
    /// Everything: chains, phases, a row per session (sessions.csv), session statistics and
    /// report.html.
    Report(Common),
}

#[derive(clap::Args)]
pub(crate) struct Common {
    /// Access log to read.
    #[arg(long)]
    log: PathBuf,
    /// Log format: auto, netflix, nginx, vodkit, combined, common or json.
    #[arg(
        long = "log-format",
        alias = "format",
        default_value = "auto",
        value_name = "FORMAT"
    )]
    log_format: LogFormat,
    /// File table (file,bitrate_kbps,media,size_bytes,drive).
    #[arg(long, conflicts_with = "catalog")]
    files: Option<PathBuf>,
    /// Workload catalog.json instead of a file table.
    #[arg(long)]
    catalog: Option<PathBuf>,
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Chain window: adjacent requests this close in time join.
    #[arg(long, default_value = "40s", value_name = flags::DURATION, value_parser = flags::duration)]
    window: Duration,
    /// Longest service time for which chain joins are guaranteed (bounds memory).
    #[arg(long, default_value = "1h", value_name = flags::DURATION, value_parser = flags::duration)]
    max_service: Duration,
    /// CCDF breakpoints for the power-law fits.
    #[arg(long, default_value = "1MB,200MB", value_delimiter = ',', value_name = flags::SIZE, value_parser = flags::size)]
    breakpoints: Vec<u64>,
    /// Survival probabilities P for the growth factor d/x (repeatable).
    #[arg(long = "survival-p", default_value = "0.45", value_delimiter = ',')]
    survival_p: Vec<f64>,
    /// Chains at most this long are short (transient).
    #[arg(long, default_value = "40s", value_name = flags::DURATION, value_parser = flags::duration)]
    short_chain: Duration,
    /// Short chains closer than this form one transient phase.
    #[arg(long, default_value = "10s", value_name = flags::DURATION, value_parser = flags::duration)]
    transient_gap: Duration,
    /// This long without requests is an inactive phase.
    #[arg(long, default_value = "40s", value_name = flags::DURATION, value_parser = flags::duration)]
    inactive: Duration,
    /// Leave sessions starting this close to the log's end out of session statistics.
    #[arg(long, default_value = "0s", value_name = flags::DURATION, value_parser = flags::duration)]
    exclude_tail: Duration,
    /// Threads parsing the log and partitions of the analysis (default: all cores); the
    /// output does not depend on it.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// Sort the log by completion time first (external merge sort within --memory, runs
    /// spilled to a temporary directory in --out): for logs not in completion order.
    #[arg(long)]
    sort: bool,
    /// Form of the row tables (chains, phases, with report sessions, with --requests
    /// requests): csv (chains.csv, …) or parquet (chains.parquet, …; the same columns,
    /// schemas in docs/trace.md).
    #[arg(long, default_value = "csv", value_name = "FORMAT")]
    output_format: vodkit_trace::output::OutputFormat,
    /// Also write every analyzed request as a row table (requests.csv or requests.parquet):
    /// the log in columns, for SQL engines.
    #[arg(long)]
    requests: bool,
    /// With --output-format parquet: split each table into files of at most N rows
    /// (chains-00000.parquet, chains-00001.parquet, …).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    rows_per_file: Option<u64>,
    /// Memory for the analysis's state: open sessions get half of it, and past that the
    /// ones idle longest are spilled to a temporary directory in --out (read back when
    /// they continue, merged back in order when they close; the output is the same); the
    /// file table keeps an eighth of it and the rest of its files on disk there too; also
    /// --sort's runs.
    #[arg(long, default_value = "512MiB", value_name = flags::SIZE, value_parser = flags::size)]
    memory: u64,
}

fn options(c: &Common) -> anyhow::Result<AnalyzeOptions> {
    let format = c.log_format;
    let mut breakpoints: Vec<f64> = c.breakpoints.iter().map(|&b| b as f64).collect();
    breakpoints.sort_by(f64::total_cmp);
    for p in &c.survival_p {
        if !(*p > 0.0 && *p < 1.0) {
            return Err(usage(format!(
                "--survival-p {p}: expected a probability between 0 and 1"
            )));
        }
    }
    let window_s = c.window.as_secs_f64();
    if window_s <= 0.0 {
        return Err(usage("--window must be positive"));
    }
    Ok(AnalyzeOptions {
        format,
        threads: c
            .threads
            .map_or_else(vodkit_trace::read::all_cores, usize::from),
        window_s,
        max_service_s: c.max_service.as_secs_f64(),
        phase: PhaseParams {
            short_chain_s: c.short_chain.as_secs_f64(),
            transient_gap_s: c.transient_gap.as_secs_f64(),
            inactive_s: c.inactive.as_secs_f64(),
        },
        breakpoints,
        probabilities: c.survival_p.clone(),
        exclude_tail_s: c.exclude_tail.as_secs_f64(),
        memory_bytes: usize::try_from(c.memory).unwrap_or(usize::MAX),
        spill_dir: c.out.clone(),
        ..AnalyzeOptions::default()
    })
}

/// The file table, a `files.csv` read within the analysis's share of `--memory`.
fn file_table(c: &Common, opts: &AnalyzeOptions) -> anyhow::Result<FileTable> {
    opts.prepare_process();
    match (&c.files, &c.catalog) {
        (Some(f), _) => {
            FileTable::from_csv_within(f, opts.file_table_bytes(), &opts.spill_dir).map_err(usage)
        }
        (None, Some(cat)) => FileTable::from_catalog(cat).map_err(usage),
        (None, None) => Ok(FileTable::default()),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum What {
    Chains,
    Phases,
    Report,
}

/// The log, with a live status line on stderr when it is a terminal.
fn open_log(path: &Path) -> anyhow::Result<impl std::io::BufRead + Send> {
    use std::io::IsTerminal as _;
    let f = std::fs::File::open(path).map_err(|e| usage(format!("{}: {e}", path.display())))?;
    let total = f.metadata().map(|m| m.len()).unwrap_or(0).max(1);
    let show = std::io::stderr().is_terminal();
    let reader = Progress::new(f, 16 << 20, move |n| {
        if show {
            eprint!("\rreading log: {:5.1}% ", 100.0 * n as f64 / total as f64);
            if n >= total {
                eprintln!();
            }
        }
    });
    Ok(std::io::BufReader::with_capacity(1 << 20, reader))
}

fn go(c: Common, what: What) -> anyhow::Result<()> {
    let opts = options(&c)?;
    let files = file_table(&c, &opts)?;
    let log = open_log(&c.log)?;
    let chains = what != What::Phases;
    let phases = what != What::Chains;
    if c.rows_per_file.is_some() && c.output_format != vodkit_trace::output::OutputFormat::Parquet {
        return Err(usage("--rows-per-file needs --output-format parquet"));
    }
    let tables = vodkit_trace::output::Tables {
        chains,
        phases,
        sessions: what == What::Report,
        requests: c.requests,
    };
    let mut sink = DirSink::create_tables(&c.out, tables, c.output_format, c.rows_per_file)
        .with_context(|| format!("{}", c.out.display()))?;
    let started = std::time::Instant::now();
    let a = if c.sort {
        let read_opts = vodkit_trace::read::ReadOptions {
            format: opts.format,
            threads: opts.threads,
            ..Default::default()
        };
        let memory = usize::try_from(c.memory).unwrap_or(usize::MAX);
        let (sorted, read) = vodkit_trace::sort::sort_log(log, &read_opts, memory, &c.out)
            .with_context(|| format!("sorting {}", c.log.display()))?;
        let sorted_opts = AnalyzeOptions {
            format: LogFormat::Netflix,
            ..opts.clone()
        };
        let mut a = analyze(
            std::io::BufReader::with_capacity(1 << 20, sorted),
            files,
            &sorted_opts,
            &mut sink,
        )
        .with_context(|| format!("{} (sorted)", c.log.display()))?;
        // What reading the log itself found, with its own line numbers.
        a.read = read;
        a
    } else {
        analyze(log, files, &opts, &mut sink).with_context(|| format!("{}", c.log.display()))?
    };
    sink.finish()
        .with_context(|| format!("{}", c.out.display()))?;
    let out = &c.out;
    let ctx = || format!("{}", out.display());
    write_json(out, "summary.json", &PassSummary::of(&a)).with_context(ctx)?;
    if chains {
        write_json(out, "chains.json", &a.chains).with_context(ctx)?;
    }
    if phases {
        write_json(out, "phases.json", &a.phases).with_context(ctx)?;
    }
    if what == What::Report {
        write_json(out, "sessions.json", &a.sessions).with_context(ctx)?;
        std::fs::write(out.join("report.html"), vodkit_trace::report::html(&a))
            .with_context(ctx)?;
    }
    let secs = started.elapsed().as_secs_f64();
    eprintln!("{}", a.read.describe());
    if a.spill.sessions > 0 {
        eprintln!(
            "open sessions past half of --memory {}: {} spilled ({} written), {} read back",
            vodkit_units::human_size(c.memory),
            a.spill.sessions,
            vodkit_units::human_size(a.spill.bytes),
            a.spill.reloaded
        );
    }
    println!(
        "{} sessions, {} chains ({:.1}% <= 1 MB, {:.1}% of bytes in chains > 10 MB); phases: transient {:.1}% / stable {:.1}% / inactive {:.1}% of time; {:.0} requests/s -> {}",
        a.phases.sessions,
        a.chains.chains,
        a.chains.chains_le_1mb_pct,
        a.chains.bytes_in_chains_gt_10mb_pct,
        a.phases.time_pct.transient,
        a.phases.time_pct.stable,
        a.phases.time_pct.inactive,
        a.read.requests as f64 / secs.max(1e-9),
        out.display()
    );
    Ok(())
}

pub fn run(command: TraceCommand) -> anyhow::Result<()> {
    match command {
        TraceCommand::Chains(c) => go(c, What::Chains),
        TraceCommand::Phases(c) => go(c, What::Phases),
        TraceCommand::Report(c) => go(c, What::Report),
    }
}
