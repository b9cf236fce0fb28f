//! `vodkit workload`: generate workloads, show specs, import and export session logs.

use clap::Subcommand;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: WorkloadCommand,
}

#[derive(Subcommand)]
enum WorkloadCommand {
    /// Synthesize a Netflix-style access log and its ground truth (no server needed).
    SynthLog(super::synth::Args),
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        WorkloadCommand::SynthLog(a) => super::synth::run(a),
    }
}
