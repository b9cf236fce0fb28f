//! `vodkit run --memory SIZE -- CMD…`: run a command (typically a server under test) under
//! a memory budget that includes the page cache it fills (memory cgroup), pass SIGTERM,
//! SIGINT and SIGHUP on to it, and exit with its status.

use super::flags;
use std::time::Duration;
use vodkit_disk::memory;
use vodkit_units::Memory;

#[derive(clap::Args)]
pub struct Args {
    /// Memory limit, page cache included (e.g. 4GiB), or `auto` (this machine's: the
    /// cgroup's limit, else total RAM).
    #[arg(long, value_name = flags::MEMORY, value_parser = flags::memory)]
    memory: Memory,
    /// How often to sample the budget's usage.
    #[arg(long, default_value = "1s", value_name = flags::DURATION, value_parser = flags::duration)]
    interval: Duration,
    /// Print a usage line per sample on stderr.
    #[arg(long)]
    verbose: bool,
    /// Write the run report (limit, peak, samples) as JSON to this file.
    #[arg(long)]
    report: Option<std::path::PathBuf>,
    /// The command and its arguments. SIGTERM, SIGINT and SIGHUP sent to `vodkit run` are
    /// passed on to it, and `vodkit run` exits with its status (128 + N when signal N
    /// killed it).
    #[arg(required = true, last = true)]
    command: Vec<String>,
}

fn mib(b: u64) -> f64 {
    b as f64 / 1_048_576.0
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let limit = match args.memory {
        Memory::Size(b) => b,
        Memory::Auto => vodkit_prefetch::budget::detect(None).0,
        Memory::Off => {
            return Err(super::usage(
                "--memory off: `vodkit run` runs under a budget; give auto or a size",
            ))
        }
    };
    if limit < 16 << 20 {
        return Err(super::usage(format!(
            "--memory {}: a budget below 16 MiB cannot run anything",
            args.memory
        )));
    }
    let interval = args.interval;
    let verbose = args.verbose;
    let report = memory::run(limit, &args.command, interval, |s| {
        if verbose {
            eprintln!(
                "vodkit run: t={:.1}s usage {:.0} MiB (page cache {:.0} MiB, anon {:.0} MiB)",
                s.t,
                mib(s.usage_bytes),
                mib(s.cache_bytes),
                mib(s.anon_bytes)
            );
        }
    })?;
    eprintln!(
        "vodkit run: limit {:.0} MiB, peak {:.0} MiB, peak page cache {:.0} MiB",
        mib(report.limit_bytes),
        mib(report.peak_bytes),
        mib(report.peak_cache_bytes)
    );
    if let Some(path) = &args.report {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    // Exit as the command did, as a shell reports it: its code, or 128 + the signal that
    // killed it (SIGTERM, SIGINT and SIGHUP sent here were passed on to it).
    let status = report.shell_status();
    match (report.exit_code, report.signal) {
        (Some(0), _) => return Ok(()),
        (Some(code), _) => eprintln!("vodkit run: {} exited with status {code}", args.command[0]),
        (None, sig) => eprintln!(
            "vodkit run: {} was killed by signal {} (status {status})",
            args.command[0],
            sig.unwrap_or(0)
        ),
    }
    std::process::exit(status)
}
