//! `vodkit trace` (issue #8).

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    super::not_yet("vodkit trace", 8)
}
