//! `vodkit demo`: a capacity comparison on built-in defaults (about 9 minutes).
//! Flags only; the work is in `vodkit_bench::demo`.

use std::path::PathBuf;
use vodkit_bench::runner::RunError;

#[derive(clap::Args)]
pub struct Args {
    /// Directory for the report (bench.json, report.md, report.html).
    #[arg(long, default_value = "vodkit-demo")]
    out: PathBuf,
    #[command(flatten)]
    quiet: super::flags::Quiet,
    /// Install nothing: print the command that installs what is missing (as root on
    /// Debian/Ubuntu the demo installs nginx, Apache and the emulated disk's tools itself).
    #[arg(long)]
    no_install: bool,
    /// Run every point for its whole duration, even once its failure is certain (by
    /// default such a point ends there, failed).
    #[arg(long)]
    no_early_stop: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    vodkit_bench::interrupt::install().map_err(|e| anyhow::anyhow!(e))?;
    match vodkit_bench::demo::run(
        &super::absolute(&args.out),
        std::env::current_exe().ok(),
        args.quiet.progress(),
        !args.no_install,
        !args.no_early_stop,
    ) {
        Ok(table) => {
            print!("{table}");
            vodkit_bench::interrupt::finished().map_err(|e| anyhow::anyhow!(e))
        }
        Err(RunError::Usage(m)) => Err(super::usage(m)),
        Err(RunError::Runtime(m)) => Err(anyhow::anyhow!(m)),
    }
}
