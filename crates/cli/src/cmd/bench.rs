//! `vodkit bench` (issue #6).

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    super::not_yet("vodkit bench", 6)
}
