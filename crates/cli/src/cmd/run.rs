//! `vodkit run --memory SIZE -- CMD…`: run a command (typically a server under test) under
//! a memory budget that includes the page cache it fills (memory cgroup).

use std::time::Duration;
use vodkit_disk::memory;

#[derive(clap::Args)]
pub struct Args {
    /// Memory limit, page cache included (e.g. 4GiB).
    #[arg(long)]
    memory: String,
    /// How often to sample the budget's usage.
    #[arg(long, default_value = "1s")]
    interval: String,
    /// Print a usage line per sample on stderr.
    #[arg(long)]
    verbose: bool,
    /// Write the run report (limit, peak, samples) as JSON to this file.
    #[arg(long)]
    report: Option<std::path::PathBuf>,
    /// The command and its arguments.
    #[arg(required = true, last = true)]
    command: Vec<String>,
}

fn mib(b: u64) -> f64 {
    b as f64 / 1_048_576.0
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let limit = args
        .memory
        .parse::<bytesize::ByteSize>()
        .map_err(|e| {
            super::usage(format!(
                "--memory {}: expected a size like 4GiB ({e})",
                args.memory
            ))
        })?
        .as_u64();
    if limit < 16 << 20 {
        return Err(super::usage(format!(
            "--memory {}: a budget below 16 MiB cannot run anything",
            args.memory
        )));
    }
    let interval: Duration = args
        .interval
        .parse::<humantime::Duration>()
        .map_err(|e| super::usage(format!("--interval {}: {e}", args.interval)))?
        .into();
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
    match report.exit_code {
        Some(0) => Ok(()),
        Some(code) => anyhow::bail!("{} exited with status {code}", args.command[0]),
        None => anyhow::bail!("{} was killed by a signal", args.command[0]),
    }
}
