//! `vodkit workload synth-log` (issue #8): a Netflix-style access log plus ground truth,
//! synthesized directly from the `netflix-2014` model without a server.

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    super::not_yet("vodkit workload synth-log", 8)
}
