//! `vodkit workload synth-log`: a Netflix-style access log plus ground truth,
//! synthesized directly from the `netflix-2014` model without a server.

use std::path::PathBuf;

use vodkit_workload::netflix::{synth_log, NetflixSpec, SPEC_NAME};

use super::usage;

#[derive(clap::Args)]
pub struct Args {
    /// Built-in spec (only `netflix-2014`).
    #[arg(long, default_value = SPEC_NAME)]
    spec: String,
    /// Seed of every random draw.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Multiply titles, sessions and the arrival rate.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Override a model parameter, e.g. `sessions=5000`, `role=flash`, `ts_resolution=1`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Output directory: log.csv, files.csv, truth/chains.csv, truth/phases.csv.
    #[arg(long)]
    out: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.spec != SPEC_NAME {
        return Err(usage(format!(
            "--spec {}: synth-log supports only {SPEC_NAME}",
            args.spec
        )));
    }
    let sets = super::flags::spec_sets(&args.sets)?;
    let spec = NetflixSpec::new(args.seed, args.scale, &sets).map_err(usage)?;
    let started = std::time::Instant::now();
    let sum = synth_log(&spec, &args.out).map_err(|e| anyhow::anyhow!(e))?;
    println!(
        "{SPEC_NAME}: {} sessions, {} requests, {} true chains, {} files, log spans {:.0} s ({:.1} s) -> {}",
        sum.sessions,
        sum.requests,
        sum.chains,
        sum.files,
        sum.log_span_s,
        started.elapsed().as_secs_f64(),
        args.out.display()
    );
    if sum.ambiguous > 0 {
        eprintln!(
            "note: {} requests sit within the chain-window tolerance of another chain; exact recovery is not guaranteed for them",
            sum.ambiguous
        );
    }
    Ok(())
}
